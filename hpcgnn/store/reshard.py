"""Row shards saved at one rank count, read back at another.

Every node-indexed state a checkpoint keeps per rank (an embedding's rows, its sparse optimizer's
moments, VR-GCN's histories) is an npz file whose row arrays come with the global rows they hold,
``<prefix>local_range = [lo, hi)``. The ranges of all ranks' files tile the rows in rank order, so
the rows a rank owns at another rank count lie in one or more consecutive files.
:func:`reshard_file` assembles them into the file this rank would have saved itself, which its
owner's ``load`` then reads and checks as it reads its own.

The convention (each class's ``save`` follows it): a range key ``<prefix>local_range`` covers the
arrays named ``<prefix>...`` (or the prefix less its trailing separator, as ``history0`` of
``history0_local_range``) whose first dimension is the range's length, other than the layout keys
``local_range`` and ``shape``. Everything else (names, shapes, hyperparameters) is the same in
every rank's file and is taken from the first.
"""
from __future__ import annotations

import bisect

import numpy as np

from hpcgnn.runtime.errors import InputError
from hpcgnn.runtime.files import open_regular

_RANGE = "local_range"
_LAYOUT = (_RANGE, "shape")


def _row_keys(template: dict, prefix: str, rows: int) -> list:
    """The keys of ``template`` that ``prefix + "local_range"`` covers (see the module docstring)."""
    bare = prefix[:-1] if prefix[-1:] in ("_", ".") else None
    return [key for key, value in template.items()
            if (key.startswith(prefix) or key == bare) and not key.endswith(_LAYOUT)
            and np.ndim(value) >= 1 and np.shape(value)[0] == rows]


def _saved_ranges(path, prefixes) -> dict:
    """``{prefix: (lo, hi)}`` of the saved file at ``path`` (its range arrays only)."""
    try:
        with open_regular(path) as fh, np.load(fh, allow_pickle=False) as data:
            return {prefix: tuple(int(x) for x in data[prefix + _RANGE]) for prefix in prefixes}
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - any unreadable shard is one line naming it
        raise InputError(path, f"cannot read checkpoint shard: {type(exc).__name__}: {exc}") from exc


def reshard(template: dict, saved_paths) -> dict:
    """Local. The arrays this rank's shard file holds, its rows read from ``saved_paths`` (every rank's
    file of the checkpoint, in rank order, saved at another rank count).

    ``template``: what this rank's own ``save`` writes now (its layout: every range and shape);
    the result has the template's layout keys, the saved rows of every range, and the other
    arrays of the first saved file. InputError naming a file whose ranges do not tile the rows."""
    prefixes = [key[:-len(_RANGE)] for key in template if key.endswith(_RANGE)]
    wanted = {p: tuple(int(x) for x in template[p + _RANGE]) for p in prefixes}
    rows = {p: {key: np.empty_like(template[key]) for key in _row_keys(template, p, wanted[p][1] - wanted[p][0])}
            for p in prefixes}
    filled = {p: wanted[p][0] for p in prefixes}  # the next row each range still needs
    ranges = {}  # the saved files' ranges read so far, by index: each rank reads a few files, not all

    def saved_range(index):
        if index not in ranges:
            ranges[index] = _saved_ranges(saved_paths[index], prefixes)
        return ranges[index]

    # the files' ranges rise with the rank: find the first file ending past the rows wanted
    begin = min((bisect.bisect_right(range(len(saved_paths)), wanted[p][0], key=lambda i: saved_range(i)[p][1])
                 for p in prefixes), default=0)
    result = {}
    for index in [0] + list(range(max(begin, 1), len(saved_paths))):
        if all(filled[p] == wanted[p][1] for p in prefixes) and index:
            break  # every range is filled: the later files hold only later rows
        path, saved = saved_paths[index], saved_range(index)
        overlapping = [p for p in prefixes if saved[p][0] < wanted[p][1] and saved[p][1] > wanted[p][0]]
        if index and not overlapping:
            continue  # the first file's other arrays are all that is needed of it
        try:
            with open_regular(path) as fh, np.load(fh, allow_pickle=False) as data:
                if not index:
                    result.update({key: data[key] for key in data.files})
                for prefix in overlapping:
                    (lo, hi), (start, end) = wanted[prefix], saved[prefix]
                    first, last = max(lo, start), min(hi, end)
                    if first != filled[prefix]:
                        raise InputError(path, f"rows [{start}, {end}) do not continue from row {filled[prefix]}: "
                                         "the ranks' shards do not tile the rows", prefix + _RANGE)
                    for key, out in rows[prefix].items():
                        out[first - lo:last - lo] = data[key][first - start:last - start]
                    filled[prefix] = last
        except InputError:
            raise
        except Exception as exc:  # noqa: BLE001 - a shard of another layout is one line naming it
            raise InputError(path, f"cannot read checkpoint shard: {type(exc).__name__}: {exc}") from exc
    short = [p for p in prefixes if filled[p] != wanted[p][1]]
    if short:
        raise InputError(saved_paths[-1], f"the ranks' shards end at row {filled[short[0]]}, before row "
                         f"{wanted[short[0]][1]}", short[0] + _RANGE)
    for prefix in prefixes:
        result.update(rows[prefix])
    result.update({key: template[key] for key in template if key.endswith(_LAYOUT)})
    return result
