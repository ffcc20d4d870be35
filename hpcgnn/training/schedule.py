"""When a training run evaluates: every N epochs, or, by default (``--eval-every auto``), as
often as keeps evaluation under a quarter of the run.

Evaluation is full-neighbourhood inference over every node, while an epoch samples
neighbourhoods of the training nodes only: on a 34k-node graph one evaluation took 2.65 s
against 0.66 s of training, so evaluating every epoch spent 80% of the run on it. ``auto``
evaluates after the first epoch, measures the ratio of evaluation to training time, and
evaluates next after ``ceil(3 * ratio)`` epochs (an evaluation then costs at most a third of
the training between two, a quarter of the run); the ratio is the median of all measured so
far. The last epoch is always evaluated. When evaluation is cheap (small graphs, or most nodes
in the training set) ``auto`` evaluates every epoch or every few, giving model selection its
points; pass ``--eval-every 1`` to select on every epoch whatever it costs. ``never`` trains
without evaluating (the full-graph inference holds a row of every hidden layer for every node,
which a training job sized to its memory may not have room for: evaluate its checkpoint with
``hpcgnn evaluate`` elsewhere); the run then selects no epoch.
"""
from __future__ import annotations

import math

import numpy as np

from hpcgnn.runtime.comm import mpi
from hpcgnn.runtime.errors import InputError
from hpcgnn.runtime.flags import MAX_COUNT, Domain

AUTO = "auto"
NEVER = "never"
#: the most of a run's time ``auto`` lets evaluation take
_EVAL_SHARE = 0.25


class EvalSchedule:
    """Local. Which epochs a run evaluates after.

    Parameters
    ----------
    every : int or "auto"
        Evaluate every this many epochs (0: only after the last), or ``"auto"`` (module docstring).
    epochs : int
        The run's last epoch (1-based), always evaluated.
    first_epoch : int
        Epochs already trained (a resumed run): ``auto`` evaluates after the first one this run trains.
    """

    def __init__(self, every, epochs, first_epoch=0):
        self.every = every
        self.epochs = epochs
        self.next_epoch = first_epoch  # 0-based epoch ``auto`` evaluates after next
        self.ratios = []

    def due(self, epoch) -> bool:
        """Local. Whether to evaluate after ``epoch`` (0-based)."""
        if self.every == NEVER:
            return False
        if self.every == AUTO:
            return epoch >= self.next_epoch or epoch + 1 == self.epochs
        return every(self.every, epoch, self.epochs)

    def measured(self, comm, epoch, epoch_time_s, eval_time_s) -> None:
        """Collective over comm. Record an evaluation after ``epoch`` and, for ``auto``, pick the next.

        The slowest rank's evaluation time counts, so every rank picks the same epoch.
        """
        if self.every != AUTO:
            return
        eval_time_s = comm.allreduce(float(eval_time_s), op=mpi().MAX)
        self.ratios.append(eval_time_s / max(float(epoch_time_s), 1e-9))
        self.next_epoch = epoch + self.period()

    def period(self) -> int:
        """Local. Epochs between evaluations that keep them under :data:`_EVAL_SHARE` of the run."""
        ratio = float(np.median(self.ratios)) if self.ratios else 0.0
        return max(1, math.ceil(ratio * (1 - _EVAL_SHARE) / _EVAL_SHARE - 1e-9))


def every(period, epoch, last) -> bool:
    """Local. True after ``epoch`` (0-based) when ``period`` divides it, and always after the last."""
    return bool(period) and (epoch + 1) % period == 0 or epoch + 1 == last


#: ``--eval-every``: ``auto``, 0 (only after the last epoch) or a number of epochs
EVAL_PERIOD = Domain(int, ge=1, le=MAX_COUNT, special={0: "only after the last epoch"},
                     words={AUTO: "adaptive", NEVER: "no evaluation"})


def eval_period(text):
    """Local. Parse ``--eval-every``: ``"auto"`` or a non-negative number of epochs (a
    ValueError naming the flag otherwise)."""
    try:
        return EVAL_PERIOD.convert(text, "--eval-every")
    except InputError as exc:
        raise ValueError(str(exc)) from None
