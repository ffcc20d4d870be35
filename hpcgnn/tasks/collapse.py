"""A run whose model has collapsed to a constant output stops, in one line that says what to try.

A network whose ReLUs have all died (the first steps blew its pre-activations up: features of a
large scale, a learning rate too high for them) outputs the same row for every node: the last
layer's bias. No gradient reaches the layers below, so it never recovers, and without a check
the run would go on to its last epoch and report chance figures with exit 0. Every evaluation
measures how many of the model's outputs are one and the same (node tasks: every node's logits;
link prediction: the validation edges' scores, positive and negative): when :data:`_CONSTANT_SHARE`
of them are (a few rows, of nodes whose features stand out, may still differ) at
:data:`_EVALUATIONS` evaluations in a row, or at the run's last one, the run ends with an
:class:`InputError`. A healthy model's outputs are all distinct: ties of a whole row are rare.
"""
from __future__ import annotations

import math

import numpy as np

from hpcgnn.runtime.errors import InputError

#: rows within this relative distance of the reference row count as equal to it (float32 rounding)
_RELATIVE_TOLERANCE = 1e-5
#: the share of equal rows at which outputs count as one constant
_CONSTANT_SHARE = 0.99
#: collapsed evaluations in a row that end a run
_EVALUATIONS = 2


def constant_share(values, comm) -> float:
    """Collective over comm. The share of the rows of ``values`` (``[n, C]``, the same C on every
    rank, or ``[n]``; a rank may hold no row), over every rank, equal to one reference row: the
    column-wise median of the ranks' column-wise medians, which is the constant when most rows
    are one. Equal: within :data:`_RELATIVE_TOLERANCE` of the reference's largest magnitude in
    every column. NaN when no rank holds a row."""
    from hpcgnn.runtime.comm import mpi  # deferred: import hpcgnn never initialises MPI

    values = np.asarray(values, dtype=np.float64)
    values = values.reshape(values.shape[0], int(np.prod(values.shape[1:]))) if values.ndim > 1 else \
        values.reshape(-1, 1)
    local = np.median(values, axis=0) if values.shape[0] else np.full(values.shape[1], np.nan)
    medians = np.array(comm.allgather(local))
    held = ~np.isnan(medians).any(axis=1)
    if not held.any():
        return float("nan")
    reference = np.median(medians[held], axis=0)
    tolerance = _RELATIVE_TOLERANCE * float(np.abs(reference).max())
    equal = int((np.abs(values - reference) <= tolerance).all(axis=1).sum())
    counts = np.array([equal, values.shape[0]], dtype=np.int64)
    comm.Allreduce(mpi().IN_PLACE, counts, op=mpi().SUM)
    return float(counts[0] / counts[1])


class CollapseCheck:
    """Local. Ends a run whose outputs stayed one constant (see the module docstring).

    ``update(record, epoch, last)`` after each epoch: ``record["constant_share"]`` (absent: the
    epoch was not evaluated; :func:`constant_share`) is the same on every rank, so every rank
    decides alike.
    """

    def __init__(self, lr, what="nodes' logits"):
        self.lr, self.what, self.collapsed = lr, what, 0

    def update(self, record, epoch, last=False):
        share = record.get("constant_share")
        if share is None:
            return
        self.collapsed = self.collapsed + 1 if share >= _CONSTANT_SHARE else 0
        if self.collapsed >= _EVALUATIONS or (self.collapsed and last):
            percent = math.floor(1000 * share) / 10  # 99.96% is not shown as 100%
            raise InputError(None, f"the model's outputs collapsed to a constant at epoch {epoch} ({percent:g}% "
                             f"of the {self.what} equal, at {self.collapsed} evaluation"
                             f"{'s' if self.collapsed > 1 else ''} in a row): its ReLUs died, which features of a "
                             "large scale or too high a learning rate do; try --feature-scale standard, a lower "
                             "--lr, or --norm layer", "--lr", self.lr)
