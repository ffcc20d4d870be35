"""The command-line parser of every command: one-line errors, and a domain for every numeric flag.

A numeric flag states its domain as its ``type``, and nothing else checks it::

    parser.add_argument("--lr", type=Domain(float, gt=0))
    parser.add_argument("--hidden", type=Domain(int, ge=1, le=MAX_WIDTH))
    parser.add_argument("--watchdog-s", type=Domain(float, gt=0, le=MAX_SECONDS, special={0: "never"}))

:class:`CommandParser` converts each value through its domain, on the command line and (through
:meth:`Domain.convert`) in a config file alike, and refuses a value outside it in one line that
names the flag, the domain and the value, exit status 2::

    hpcgnn train: error: field '--lr': must be a finite number > 0 (value -1)

Floats must be finite (``nan`` and ``inf`` are refused everywhere). Upper bounds are generous
fixed ceilings (the constants below) set where a larger value would make the run allocate
absurd memory (a 10^9-wide layer) or overflow the integer types the kernels use; they are far
above what any run needs. Every other parse error (an unknown flag, a bad choice, a missing
required argument) is one line too, without the usage text, and under MPI one line for the job.
"""
from __future__ import annotations

import argparse
import copy
import math

from hpcgnn.runtime.errors import InputError
from hpcgnn.runtime.help_format import DefaultsHelpFormatter

#: counts of nodes, edges, seeds, steps and epochs: inside int32, the kernels' loop counters
MAX_COUNT = 2**31 - 1
#: node ids are int64, and readers allocate arrays of this length
MAX_NODES = 2**40
#: seeds of every random stream (METIS and numpy's legacy seeding take 32 bits)
_MAX_SEED = 2**32 - 1
#: width of a layer, an embedding or a feature row: a 16384 x 16384 float32 matrix is 1 GiB,
#: 4 GiB with its gradient and Adam's two moments
MAX_WIDTH = 16_384
#: layers of a model, and attention heads of GAT
MAX_LAYERS = 64
MAX_HEADS = 64
#: parts of a partitioning, clusters of Cluster-GCN, classes of a generated graph
MAX_PARTS = 2**20
#: per-node or per-edge repeat counts (random walks, negatives, presampled subgraphs): each
#: multiplies a batch's memory
MAX_REPEATS = 10_000
#: sizes given in MiB (a feature cache, a gradient bucket): 16 TiB, more than any node holds
MAX_MIB = 2**24
#: durations in seconds: about four months (``threading`` refuses waits much longer)
MAX_SECONDS = 1e7


class Domain:
    """Local. The values a numeric flag accepts, used as its argparse ``type``.

    Parameters
    ----------
    kind : int or float
        ``int`` accepts integers written as integers (``1e3`` is refused); ``float`` accepts
        finite numbers only.
    ge, gt, le, lt : number, optional
        Inclusive (``ge``, ``le``) or exclusive (``gt``, ``lt``) bounds.
    special : dict, optional
        Values accepted outside the bounds, each with its meaning (``{0: "never"}``).
    words : dict, optional
        Words accepted as they are, each with its meaning (``{"auto": "..."}``).
    nonzero : bool
        Refuse 0 inside the bounds (a layer counted from either end).
    share : bool
        Also accept ``P%`` with 0 < P <= 100, kept as that string (a share of a part).
    """

    def __init__(self, kind, *, ge=None, gt=None, le=None, lt=None, special=None, words=None, nonzero=False,
                 share=False):
        if kind not in (int, float):
            raise TypeError(f"a Domain is of int or float, not {kind!r}")
        self.kind = kind
        self.flag = None  # the flag named in refusals (set by the parser: for_flag)
        self.low, self.low_open = (gt, True) if gt is not None else (ge, False)
        self.high, self.high_open = (lt, True) if lt is not None else (le, False)
        self.special = dict(special or {})
        self.words = dict(words or {})
        self.nonzero = nonzero
        self.share = share
        self.__name__ = kind.__name__  # argparse names a type by it

    def __repr__(self):
        return f"Domain({self.describe()})"

    def contains(self, value) -> bool:
        """Local. Whether a converted ``value`` (a number, or an accepted word) is in the domain."""
        if isinstance(value, str):
            return value in self.words or (self.share and _share(value) is not None)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if self.kind is int and not float(value).is_integer():
            return False
        if value in self.special:
            return True
        if not math.isfinite(value):
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        if self.high is not None and (value >= self.high if self.high_open else value > self.high):
            return False
        return not (self.nonzero and value == 0)

    def convert(self, text, flag=None, path=None):
        """Local. ``text`` as a value of the domain, else an InputError naming ``flag`` (and the
        config file ``path``), the domain and the value."""
        shown = str(text).strip()
        if shown.lower() in self.words:  # a word in any case (auto, AUTO), kept as the domain spells it
            return shown.lower()
        if self.share and shown.endswith("%"):
            if self.contains(shown):
                return shown
            raise InputError(path, f"must be {self.describe()}", flag, text)
        try:
            value = int(shown) if self.kind is int else float(shown)
        except ValueError:
            raise InputError(path, f"must be {self.describe()}", flag, text) from None
        if not self.contains(value):
            raise InputError(path, f"must be {self.describe()}", flag, text)
        return value

    def __call__(self, text):
        return self.convert(text, self.flag)

    def for_flag(self, flag):
        """Local. This domain, naming ``flag`` in its refusals."""
        bound = copy.copy(self)
        bound.flag = flag
        return bound

    def describe(self) -> str:
        """Local. The domain in words: ``a finite number > 0``, ``0 (never) or an integer in [1, 64]``."""
        noun = "an integer" if self.kind is int else "a number" if self._bounded() else "a finite number"
        core = f"{noun} {self._bounds()}".rstrip()
        if self.nonzero:
            core += " other than 0"
        if self.share:
            core += " or a share P% with 0 < P <= 100"
        extra = [f"{_number(v)} ({meaning})" for v, meaning in self.special.items()]
        extra += [f"'{word}' ({meaning})" for word, meaning in self.words.items()]
        if not extra:
            return core
        return ", ".join(extra[:-1] + [f"{extra[-1]} or {core}"]) if len(extra) > 1 else f"{extra[0]} or {core}"

    def _bounded(self) -> bool:
        return self.low is not None and self.high is not None

    def _bounds(self) -> str:
        if self._bounded():
            return (f"in {'(' if self.low_open else '['}{_number(self.low)}, "
                    f"{_number(self.high)}{')' if self.high_open else ']'}")
        if self.low is not None:
            return f"{'>' if self.low_open else '>='} {_number(self.low)}"
        if self.high is not None:
            return f"{'<' if self.high_open else '<='} {_number(self.high)}"
        return ""


def _number(value) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        value = int(value)
    return str(value) if isinstance(value, int) else f"{value:g}"


def _share(text):
    try:
        share = float(text[:-1])
    except ValueError:
        return None
    return share if text.endswith("%") and 0 < share <= 100 else None


#: shared by every command: a count of at least one, and the seed of a random stream
COUNT = Domain(int, ge=1, le=MAX_COUNT)
SEED = Domain(int, ge=0, le=_MAX_SEED)


def _flag_name(action) -> str:
    """Local. How a refusal names an argument: its long option (``--parts``, not ``-p``), or
    the name of a positional one."""
    longs = [s for s in action.option_strings if s.startswith("--")]
    return (longs or action.option_strings or [action.dest])[0]


class CommandParser(argparse.ArgumentParser):
    """Local. The argument parser of every command: each value of a numeric flag goes through
    its :class:`Domain`, and every parse error is one line (``prog: error: ...``, exit 2; the
    whole MPI job when launched with several ranks), never the usage text."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", DefaultsHelpFormatter)
        super().__init__(*args, **kwargs)

    @property
    def flags(self) -> dict:
        """Local. Each argument's action by destination (groups' arguments too)."""
        return {action.dest: action for action in self._actions}

    def parse_known_args(self, args=None, namespace=None):
        # Each domain names its flag when it refuses a value (argparse passes a type only the text).
        for action in self._actions:
            if isinstance(action.type, Domain) and action.type.flag is None:
                action.type = action.type.for_flag(_flag_name(action))
        return super().parse_known_args(args, namespace)

    def error(self, message):
        from hpcgnn.runtime.abort import fail  # deferred: abort imports MPI helpers lazily too

        fail(self.prog, " ".join(str(message).split()))
