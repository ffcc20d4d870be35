"""Typed options: a frozen dataclass whose fields declare their flags.

A part of a command's configuration (the model's shape, a sampler's sizes, a task's loss) is a
frozen dataclass; each field is made with :func:`option`, which records the flag's help, domain
(:class:`~hpcgnn.runtime.flags.Domain`) or choices. The command's parser is generated from the
fields (:func:`add_options`), and the parsed values become an instance again
(:func:`options_from`), so a flag, a config-file key and the field a library function reads are
one name, declared once::

    @dataclass(frozen=True)
    class WalkOptions:
        walks: int = option(20, "random walks started at every node", type=Domain(int, ge=1))

Old spellings of a flag stay accepted for a release (``deprecated=("--old",)``) with a note on
stderr naming the new one.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys

#: the metadata key of an option's declaration
_OPTION = "hpcgnn_option"


def option(default, help, *, type=None, choices=None, metavar=None, deprecated=(), flag=None):  # noqa: A002
    """Local. A dataclass field that is also a command-line flag (``--field-name``).

    ``type`` converts and checks a value (a Domain for numbers); ``choices`` lists the accepted
    words; a ``bool`` default makes an on/off flag. ``deprecated`` are older spellings still
    accepted; ``flag`` overrides the flag's name.
    """
    spec = {"help": help, "type": type, "choices": tuple(choices) if choices is not None else None,
            "metavar": metavar, "deprecated": tuple(deprecated), "flag": flag}
    if isinstance(default, (list, dict, set)):
        raise TypeError("an option's default must be immutable (a tuple, not a list)")
    return dataclasses.field(default=default, metadata={_OPTION: spec})


def declared(cls) -> list:
    """Local. ``(field, declaration)`` of every option field of dataclass ``cls``."""
    return [(f, f.metadata[_OPTION]) for f in dataclasses.fields(cls) if _OPTION in f.metadata]


def flag_of(field) -> str:
    """Local. The flag of an option field: its declared name, else ``--`` and its name with dashes."""
    return field.metadata[_OPTION]["flag"] or "--" + field.name.replace("_", "-")


class _Deprecated(argparse.Action):
    """Store a value, and say on stderr (once per job) when it came under an old spelling."""

    def __call__(self, parser, namespace, values, option_string=None):
        if option_string != self.option_strings[0]:
            note_deprecated(parser.prog, option_string, self.option_strings[0])
        setattr(namespace, self.dest, True if self.nargs == 0 else values)


def note_deprecated(prog, old, new):
    """Local. One note on stderr that ``old`` is deprecated in favour of ``new`` (only on the
    first rank of an MPI job, so a 64-rank job prints it once)."""
    rank = os.environ.get("PMI_RANK") or os.environ.get("OMPI_COMM_WORLD_RANK") or "0"
    if rank == "0":
        print(f"{prog}: note: {old} is deprecated and will be removed; use {new}", file=sys.stderr, flush=True)


def add_options(parser, cls, *, help_prefix="", skip=()):
    """Local. Add a flag to ``parser`` (or an argument group) for every option field of ``cls``.

    A flag the parser already has is left as it is (options several parts share, such as a
    walk length of two samplers, are one flag). ``help_prefix`` heads each help text.
    """
    for field, spec in declared(cls):
        if field.name in skip:
            continue
        names = [flag_of(field), *spec["deprecated"]]
        kwargs = {"dest": field.name, "default": field.default, "help": help_prefix + spec["help"]}
        if isinstance(field.default, bool):
            kwargs.update(nargs=0, action=_Deprecated) if spec["deprecated"] else kwargs.update(action="store_true")
        else:
            kwargs.update(type=spec["type"], choices=spec["choices"], metavar=spec["metavar"])
            if spec["deprecated"]:
                kwargs["action"] = _Deprecated
        try:
            parser.add_argument(*names, **kwargs)
        except argparse.ArgumentError:
            continue  # declared by an earlier part under the same name: one flag


def options_from(cls, values, **fixed):
    """Local. An instance of ``cls`` from the mapping ``values`` (a parsed namespace's ``vars``):
    each option field's value where ``values`` has it, else its default; ``fixed`` wins."""
    given = {f.name: values[f.name] for f, _ in declared(cls) if f.name in values}
    return cls(**dict(given, **fixed))


def as_dict(instance) -> dict:
    """Local. The fields of a (nested) options dataclass as plain data (tuples become lists)."""
    def plain(value):
        if dataclasses.is_dataclass(value):
            return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
        if isinstance(value, (tuple, list)):
            return [plain(v) for v in value]
        return value

    return plain(instance)
