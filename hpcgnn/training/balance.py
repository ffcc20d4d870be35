"""Work-balanced steps (``--step-balance speed``): each rank's batch size follows its measured speed,
with the same step count on every rank.

Synchronous training waits at every step for the slowest rank. A rank that shares its core with
another job, or whose seeds have heavier neighbourhoods, is slower at every step, and the others
idle in the gradient Allreduce for the difference. After each epoch every rank's cost per seed
is measured: its epoch time less the gradient exchange (sampling, gathering, forward and
backward, and waiting for its own batches), over the seeds it trained. The next epoch's batch
sizes are proportional to each rank's speed (one over its cost), together ``P x --batch-size``,
so every rank's step takes about as long. The step count per epoch never changes (the guarantee
that no rank waits in a collective for a rank that has finished): a rank given more seeds than
it has cycles through its own, as a rank with fewer seeds always did, and a rank given fewer
trains a new part of its nodes each epoch.

The gradient stays the plain mean over the ranks of each rank's mean over its batch. With
equally many training nodes per part (the partitioner balances them) that is an unbiased
estimate of the full gradient whatever the batch sizes: a smaller batch only makes its rank's
term noisier. A size moves by at most a factor of 2 per epoch, so one noisy measurement does not
swing it. The sizes follow the machine's timing, so a run is not reproducible from its seed.
"""
from __future__ import annotations

import numpy as np

from hpcgnn.runtime.errors import InputError

#: the most a rank's batch size changes from one epoch to the next (either way)
MAX_STEP_FACTOR = 2.0


def speed_sizes(costs, current, total) -> np.ndarray:
    """Local. Batch sizes proportional to ``1 / costs`` (seconds per seed, one per rank) that sum to
    about ``total``, each within a factor :data:`MAX_STEP_FACTOR` of ``current`` and at least 1."""
    costs = np.maximum(np.asarray(costs, dtype=np.float64), 1e-12)
    speeds = 1.0 / costs
    wanted = total * speeds / speeds.sum()
    current = np.asarray(current, dtype=np.float64)
    bounded = np.clip(wanted, current / MAX_STEP_FACTOR, current * MAX_STEP_FACTOR)
    return np.maximum(np.rint(bounded), 1).astype(np.int64)


class StepBalancer:
    """Collective over comm (:meth:`update`). Resizes this rank's batches in ``plan`` (a
    :class:`~hpcgnn.loading.batch_plan.BatchPlan`) after each epoch from every rank's cost."""

    def __init__(self, plan, comm):
        if not hasattr(plan, "resize"):
            raise InputError(None, "sizes batches of seeds, and this run's loader has no seed batches",
                             "--step-balance", "speed")
        self.plan, self.comm = plan, comm
        self.total = plan.batch_size * comm.size

    def update(self, busy_s, seeds) -> list:
        """Collective over comm. This epoch's ``busy_s`` (epoch time less the gradient exchange) and
        ``seeds`` trained on this rank set the next epoch's batch sizes; returns them (all ranks)."""
        costs = np.array(self.comm.allgather(busy_s / max(seeds, 1)))
        current = np.array(self.comm.allgather(self.plan.batch_size))
        sizes = speed_sizes(costs, current, self.total)
        self.plan.resize(int(sizes[self.comm.rank]))
        return sizes.tolist()
