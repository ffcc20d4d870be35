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
        """Local. This rank's seeds per batch from the next :meth:`batches` on; the batch count stays
        (``--step-balance speed``: a rank cycles through its own seeds when it has too few)."""
        if int(batch_size) <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        self.batch_size = int(batch_size)

    def batches(self, epoch) -> list[np.ndarray]:
        """Local. The seed ids of every batch of ``epoch`` on this rank (padded to the agreed count)."""
        rng = generator(self.seed, "batch_order", epoch, self.comm.rank)
        order = rng.permutation(self.seed_ids) if self.shuffle else self.seed_ids
        needed = self.num_batches * self.batch_size
        # (with drop_last only a batch resized beyond the seeds' share needs padding)
        padded = bool(order.shape[0]) and needed > order.shape[0]
        if padded:
            # pad by cycling through this rank's own seeds: every rank takes the same number of steps
            extra = rng.choice(order, needed - order.shape[0]) if self.num_batches > 1 else order[:0]
            order = np.concatenate([order, extra])
        batches = [order[i * self.batch_size:(i + 1) * self.batch_size] for i in range(self.num_batches)]
        if padded:  # a padded batch may repeat a seed; samplers need unique seeds
            batches = [np.unique(b) for b in batches]
        return batches

    def batch_seed(self, epoch, index) -> int:
        """Local. The sampling seed of batch ``index`` of ``epoch`` on this rank."""
        return derive_seed(self.seed, "batch", epoch, self.comm.rank, index)
