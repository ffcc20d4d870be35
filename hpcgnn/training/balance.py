"""Work-balanced steps (``--step-balance speed``): each rank's share of every step's seeds follows its
measured speed, with the same step count on every rank.

Synchronous training waits at every step for the slowest rank. A rank that shares its core with
another job, or whose seeds have heavier neighbourhoods, is slower at every step, and the others
idle in the gradient Allreduce for the difference. Every :data:`WINDOW_STEPS` steps each rank's
cost per seed is measured: its steps' time less the gradient exchange (sampling, gathering,
forward and backward, and waiting for its own batches), over the seeds it trained. The shares
from then on are proportional to the ranks' speeds (one over their costs), together
``P x --batch-size``, so every rank's step takes about as long. The costs travel in a
non-blocking Allgather posted at a window's last step and completed at the next step (in
lockstep training it has arrived by then), and every rank changes its share at the same step,
from a batch no rank's loader has cut yet (the loader's depth ahead). The epoch's end settles
the steps since the last window, and those shares start the next epoch. Balancing within the
epoch matters where a model trains in few epochs: the first epoch would otherwise run at the
straggler's pace.

Where seeds can be trained on any rank (node tasks: a node's neighbourhood can be sampled from
anywhere), the ranks lend them (:class:`~hpcgnn.loading.batch_plan.EpochBatches`): step ``j``
takes every rank's own batch ``j`` together, as without balancing, and splits it by the shares;
a slower rank keeps the head of its batch, a faster one trains the tails. Each rank's loss is
weighted by P times its share of the step's seeds, so the mean of the ranks' gradients is the
gradient over all the step's seeds, synchronous training's: each seed is trained once per
epoch and the accuracy per epoch is that of synchronous training (tested against one process
with shares 3 : 1). Seeds lent are sampled from the lender's part (remote reads), and a union of
seeds from several parts shares fewer neighbours than one part's do, so a lent seed costs its
trainer somewhat more than its own. Where seeds cannot be lent (link prediction's edges are
looked up where they are stored), each rank resizes its own batches instead: a rank given more
seeds than it has cycles through its own, one given fewer trains a new part of its nodes each
epoch, and the gradient is the plain mean of the ranks' batch means (unbiased when the parts
hold equally many training seeds, noisier for a smaller batch).

The run's first step, slowed on every rank alike by one-time costs, counts in no window. Each
rank's cost is an exponential average over its windows, shares stay while none would move
by more than a tenth, and a share moves by at most a factor of 2 per update, so noisy
measurements of equally fast ranks leave the shares be.
The shares follow the machine's timing, so a run is not reproducible from its seed. In
``--sync async`` the shares' exchange makes the ranks meet every :data:`WINDOW_STEPS` steps.
"""
from __future__ import annotations

import numpy as np

from hpcgnn.runtime.errors import InputError

#: the most a rank's batch size changes at one update (either way)
MAX_STEP_FACTOR = 2.0
#: steps between two updates of the batch sizes: enough steps that one slow step (a page fault,
#: a neighbour's burst) does not decide a size, few enough that a straggler is met early in the
#: first epoch
WINDOW_STEPS = 8
#: the weight of a rank's newest window in its cost per seed (an exponential average over the
#: windows since the run began): a window of a few steps is noisy, most where ranks share cores
COST_SMOOTHING = 0.3
#: sizes stay while none would move by more than this fraction: chasing the noise of equal ranks
#: costs more (each move lends seeds, whose neighbourhoods overlap less) than it could win
DEAD_BAND = 0.1


def speed_sizes(costs, current, total) -> np.ndarray:
    """Local. Batch sizes proportional to ``1 / costs`` (seconds per seed, one per rank) that sum to
    about ``total``, each within a factor :data:`MAX_STEP_FACTOR` of ``current`` and at least 1;
    ``current`` itself while no size would move by more than :data:`DEAD_BAND` of it."""
    costs = np.maximum(np.asarray(costs, dtype=np.float64), 1e-12)
    speeds = 1.0 / costs
    wanted = total * speeds / speeds.sum()
    current = np.asarray(current, dtype=np.float64)
    if np.all(np.abs(wanted - current) <= DEAD_BAND * current):
        return np.rint(current).astype(np.int64)
    bounded = np.clip(wanted, current / MAX_STEP_FACTOR, current * MAX_STEP_FACTOR)
    return np.maximum(np.rint(bounded), 1).astype(np.int64)


class StepBalancer:
    """Collective over comm (construction, :meth:`observe`, :meth:`settle`). Sets this rank's
    batches in ``plan`` (a :class:`~hpcgnn.loading.batch_plan.BatchPlan`) from every rank's cost,
    every ``window`` steps and at each epoch's end.

    ``lend``: the ranks share each step's seeds (:meth:`BatchPlan.lend`) rather than each
    resizing its own batches; ``ahead``: how many batches the loader makes ahead of the step
    being trained (its prefetch depth), so a new split starts at a batch no rank has cut yet.
    """

    def __init__(self, plan, comm, window=None, lend=False, ahead=0):
        if not hasattr(plan, "resize"):
            raise InputError(None, "sizes batches of seeds, and this run's loader has no seed batches",
                             "--step-balance", "speed")
        self.plan, self.comm, self.lend, self.ahead = plan, comm, bool(lend), int(ahead)
        if self.lend:
            plan.lend()
        self.window = int(window or WINDOW_STEPS)
        self.total = plan.batch_size * comm.size
        self.sizes = [plan.batch_size] * comm.size
        self.busy_s, self.seeds, self.step = 0.0, 0, 0  # the open window's sums; steps this epoch
        self._request = self._send = self._costs = self.cost = None
        self._warm = False  # whether the run's first step, which no window counts, is behind us

    def observe(self, busy_s, seeds):
        """Collective over comm (a non-blocking Allgather every ``window`` calls, completed at the
        next call). One step's ``busy_s`` (its time less the gradient exchange) and ``seeds``.
        Every rank calls it at the same steps and applies new sizes at the same step."""
        if self._warm:  # the run's first step carries one-time costs (allocations, first touches of
            # the data, lazy set-up) that every rank pays alike: they would pull the costs together
            self.busy_s += busy_s
            self.seeds += seeds
        self._warm = True
        self.step += 1
        self._apply()  # the window posted at the last call: in lockstep training it has arrived
        if self.step % self.window == 0:  # windows start with each epoch
            # both buffers live on this object until the request completes
            self._send = np.array([self._cost(), self._size()], dtype=np.float64)
            self._costs = np.empty(2 * self.comm.size, dtype=np.float64)
            self._request = self.comm.Iallgather(self._send, self._costs)
            self.busy_s, self.seeds = 0.0, 0

    def settle(self) -> list:
        """Collective over comm. At an epoch's end: apply the window in flight and the steps since it
        (every rank has taken the same number); the sizes hold from the next epoch's first batch.
        Returns them (all ranks)."""
        self._apply()
        if self.step % self.window:  # the steps since the last window
            gathered = self.comm.allgather((self._cost(), self._size()))
            self._resize(np.array(gathered, dtype=np.float64).reshape(-1))
            self.busy_s, self.seeds = 0.0, 0
        if self.lend:
            self.plan.share(self.sizes, 0)
        self.step = 0
        return list(self.sizes)

    def _cost(self) -> float:
        """This rank's cost per seed: the window just ended, averaged into the earlier ones'."""
        newest = self.busy_s / max(self.seeds, 1)
        self.cost = newest if self.cost is None else COST_SMOOTHING * newest + (1 - COST_SMOOTHING) * self.cost
        return self.cost

    def _size(self) -> int:
        return self.sizes[self.comm.rank] if self.lend else self.plan.batch_size

    def _apply(self):
        """Resize from the window in flight, waiting for it (nothing when none is)."""
        if self._request is not None:
            self._request.Wait()
            self._request = None
            self._resize(self._costs)

    def _resize(self, gathered):
        """``gathered``: every rank's (cost per seed, batch size), rank by rank."""
        self.sizes = speed_sizes(gathered[0::2], gathered[1::2], self.total).tolist()
        if self.lend:  # from the first batch no rank can have cut yet: the loader's depth past the next
            self.plan.share(self.sizes, self.step + self.ahead + 1)
        else:
            self.plan.resize(self.sizes[self.comm.rank])
