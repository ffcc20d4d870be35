"""The batch plan: which of a rank's seeds each step of an epoch takes, with the same number of
steps on every rank.

Every rank yields the same number of batches per epoch (agreed with one Allreduce; a rank with
fewer seeds pads by reusing its own seeds), so the per-step gradient Allreduce can never wait
for a rank that already finished its epoch.
"""
from __future__ import annotations

import numpy as np

from hpcgnn.runtime.comm import mpi
from hpcgnn.runtime.rng import derive_seed, generator

#: the epoch numbers of the batches a rank trains while it waits for the others (asynchronous
#: training): far beyond any run's epochs, so their orders and samples are streams of their own
EXTRA_EPOCH_BASE = 1 << 40


class BatchPlan:
    """Collective over comm (construction only). The batches of a rank's seeds, epoch by epoch.

    Parameters
    ----------
    seed_ids : array of int
        This rank's seeds (unique; nodes for a node loader, edges for an edge loader).
    batch_size : int
    comm : MPI communicator
        The ranks that must take the same number of steps.
    shuffle : bool
        A new order each epoch, from (seed, epoch, rank).
    drop_last : bool
        Drop the last partial batch (on every rank alike).
    seed : int
    max_batches : int
        At most this many batches per epoch (0: all), each epoch's first ones of its own order, so
        successive epochs still see different seeds; on every rank alike.
    """

    def __init__(self, seed_ids, batch_size, comm, shuffle=True, drop_last=False, seed=0, max_batches=0):
        self.seed_ids = np.asarray(seed_ids, dtype=np.int64).reshape(-1)
        if np.unique(self.seed_ids).shape[0] != self.seed_ids.shape[0]:
            raise ValueError("seed ids contain repeats (each seed should appear once per epoch)")
        self.batch_size = int(batch_size)
        if self.batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        self.comm, self.shuffle, self.drop_last, self.seed = comm, shuffle, drop_last, int(seed)
        self.shares = None  # (first batch, sizes) of each change of the ranks' shares, once lending
        n = self.seed_ids.shape[0]
        mine = n // self.batch_size if drop_last else -(-n // self.batch_size)
        # drop_last: only full batches exist everywhere; else the longest rank sets the count
        op = mpi().MIN if drop_last else mpi().MAX
        self.num_batches = int(comm.allreduce(mine, op=op))
        if max_batches > 0:
            self.num_batches = min(self.num_batches, int(max_batches))

    def __len__(self):
        return self.num_batches

    def resize(self, batch_size):
        """Local. This rank's seeds per batch from the next batch taken on, also within an epoch; the
        batch count stays (``--step-balance speed`` where the seeds cannot be lent: a rank cycles
        through its own seeds when it has too few)."""
        if int(batch_size) <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        self.batch_size = int(batch_size)

    def lend(self):
        """Collective over comm. From now on step ``j``'s seeds are the ranks' own batches ``j`` taken
        together and split among the ranks by :meth:`share` (equally until then). Every rank keeps
        every rank's seed ids to cut the others' batches as they do (8 bytes per training seed)."""
        self.all_seed_ids = self.comm.allgather(self.seed_ids)
        self.shares = [(0, [1] * self.comm.size)]

    def share(self, sizes, from_batch=0):
        """Local. The ranks' shares of each step's seeds from batch ``from_batch`` of the epoch being
        taken on (0: from the next epoch's first), proportional to ``sizes`` (one per rank). Every
        rank must give the same shares from the same batch (a :class:`~hpcgnn.training.balance.
        StepBalancer` does)."""
        if from_batch == 0:
            self.shares = [(0, list(sizes))]
        else:
            self.shares.append((int(from_batch), list(sizes)))

    def batches(self, epoch) -> EpochBatches:
        """Local. The seed ids of every batch of ``epoch`` on this rank (padded to the agreed count),
        each cut when it is taken."""
        return EpochBatches(self, epoch)

    def batch_seed(self, epoch, index) -> int:
        """Local. The sampling seed of batch ``index`` of ``epoch`` on this rank."""
        return derive_seed(self.seed, "batch", epoch, self.comm.rank, index)


class EpochBatches:
    """Local. The batches of one epoch of a :class:`BatchPlan`, a sized iterable: each batch is cut
    from the epoch's order of the rank's seeds when it is taken, so a change of size or shares
    within the epoch (``--step-balance speed``) applies from the next batch.

    While the size stays, batch ``i`` is the order's ``i``-th slice of that size. Where the rest
    of the epoch needs more seeds than the order has left, the order is padded by drawing from the
    rank's own seeds (every rank takes the same number of steps), and from then on each batch is
    made unique (a padded batch may repeat a seed; samplers need unique seeds).

    Once the plan lends (:meth:`BatchPlan.lend`), every rank cuts every rank's batches at the
    plan's size, and step ``j`` takes all ranks' batches ``j`` together, split by the shares in
    effect: a rank keeps the head of its own batch up to its share; the tails beyond the shares
    go, in rank order, to the ranks whose share is larger than their own batch. Each seed is then
    still trained once per epoch and each step's seeds are those of the plan without shares; a
    rank's loss weight (:meth:`weight`) makes the mean of the ranks' gradients the gradient over
    all the step's seeds. The extra batches a rank trains alone (``--sync async``) are its own.
    """

    def __init__(self, plan: BatchPlan, epoch):
        self.plan, self.epoch = plan, epoch
        self._weights = {}

    def __len__(self):
        return self.plan.num_batches

    def weight(self, index) -> float:
        """Local. The loss weight of batch ``index`` once it was taken: P times its seeds over the
        seeds of all ranks' batches of the step (1 when the plan does not lend)."""
        return self._weights.get(index, 1.0)

    def __iter__(self):
        plan = self.plan
        if plan.shares is None or self.epoch >= EXTRA_EPOCH_BASE:
            return _cut(plan, self.epoch, plan.comm.rank, plan.seed_ids, lambda: plan.batch_size)
        return self._lent()

    def _lent(self):
        plan = self.plan
        ranks = range(plan.comm.size)
        planned = [list(_cut(plan, self.epoch, r, plan.all_seed_ids[r], lambda: plan.batch_size)) for r in ranks]
        for index in range(plan.num_batches):
            own = [planned[r][index] for r in ranks]
            lengths = np.array([batch.shape[0] for batch in own], dtype=np.int64)
            shares = [sizes for start, sizes in plan.shares if start <= index][-1]
            batch = take_share(own, lengths, split_count(int(lengths.sum()), shares), plan.comm.rank)
            self._weights[index] = plan.comm.size * batch.shape[0] / max(int(lengths.sum()), 1)
            yield batch


def _cut(plan, epoch, rank, seed_ids, size_now):
    """``rank``'s batches of ``epoch`` from ``seed_ids``, each ``size_now()`` seeds when it is cut."""
    rng = generator(plan.seed, "batch_order", epoch, rank)
    own = rng.permutation(seed_ids) if plan.shuffle else seed_ids
    order, start, padded = own, 0, False
    for index in range(plan.num_batches):
        size = size_now()
        needed = start + (plan.num_batches - index) * size  # the rest of the epoch at this size
        # (with drop_last only a batch resized beyond the seeds' share needs padding)
        if own.shape[0] and needed > order.shape[0]:
            padded = True
            if plan.num_batches > 1:  # one batch takes what there is
                order = np.concatenate([order, rng.choice(own, needed - order.shape[0])])
        batch = order[start:start + size]
        start += size
        yield np.unique(batch) if padded else batch


def split_count(total, sizes) -> np.ndarray:
    """Local. ``total`` split proportionally to ``sizes`` in integers that sum to it (the largest
    remainders get the rest, the lower rank first on a tie): the same on every rank."""
    sizes = np.asarray(sizes, dtype=np.int64)
    scaled = int(total) * sizes
    counts, remainders = scaled // max(int(sizes.sum()), 1), scaled % max(int(sizes.sum()), 1)
    rest = int(total) - int(counts.sum())
    counts[np.argsort(-remainders, kind="stable")[:rest]] += 1
    return counts


def take_share(batches, lengths, shares, rank) -> np.ndarray:
    """Local. ``rank``'s seeds of a step whose ranks' own batches are ``batches``: the head of its
    own up to its share, then its part of the others' tails beyond their shares (rank order)."""
    keep = np.minimum(lengths, shares)
    tails = np.concatenate([batch[k:] for batch, k in zip(batches, keep)])
    extra = shares - keep
    start = int(extra[:rank].sum())
    return np.concatenate([batches[rank][:keep[rank]], tails[start:start + extra[rank]]])
