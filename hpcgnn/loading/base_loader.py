"""``PlannedLoader``: what every loader shares around its own way of sampling a batch.

A loader is a :class:`~.batch_plan.BatchPlan` (the same step count on every rank), a sample step of
its own (seed nodes, or positive edges with their negatives), a :class:`~.fetch.FieldFetch`
and the prefetch thread of :mod:`.prefetch`. This class owns the plan, the fetch, the
per-epoch statistics and the iteration; a loader says what one job of an epoch is
(:meth:`PlannedLoader.jobs`) and how a job becomes a sampled batch (:meth:`PlannedLoader.sample`).
"""
from __future__ import annotations

import time

from hpcgnn.loading.batch_plan import EXTRA_EPOCH_BASE
from hpcgnn.loading.prefetch import LoaderStats, iterate


class EpochJobs:
    """Local. One epoch's jobs, a sized iterable: job ``i`` is ``make(i, seeds)`` of the plan's batch
    ``i``, made only when taken, since a batch's size may change while the epoch runs
    (:class:`~.batch_plan.EpochBatches`)."""

    def __init__(self, batches, make):
        self.batches, self.make = batches, make

    def __len__(self):
        return len(self.batches)

    def __iter__(self):
        return (self.make(index, seeds) for index, seeds in enumerate(self.batches))


class PlannedLoader:
    """Local. The iteration, timing and statistics of a loader over a :class:`~.batch_plan.BatchPlan`.

    Parameters
    ----------
    graph : DistGraph
    plan : BatchPlan
    fetch : FieldFetch
    prefetch : int
        Batches prepared ahead on the background thread; 0 samples in the caller's thread.

    Attributes
    ----------
    stats : LoaderStats
        Seconds spent sampling, gathering and waiting, and batches delivered, this epoch.
    epoch : int
        The epoch the next ``iter(loader)`` runs (set it to resume).
    """

    #: whether another rank can train this loader's seeds (``--step-balance``; see
    #: :class:`~.batch_plan.EpochBatches`): an edge is looked up only on the rank that stores it
    lends_seeds = False

    def __init__(self, graph, plan, fetch, prefetch):
        self.graph, self.plan, self.fetch = graph, plan, fetch
        self.prefetch = int(prefetch)
        self.epoch = 0
        self.stats = LoaderStats()

    @property
    def num_batches(self) -> int:
        return self.plan.num_batches

    def __len__(self):
        return self.plan.num_batches

    def jobs(self, epoch) -> EpochJobs:
        """Local. The argument tuples of :meth:`sample`, one per batch of ``epoch``, in order."""
        raise NotImplementedError

    def sample(self, *job):
        """Local. One job's sampled batch (a MiniBatch), before its fields are fetched."""
        raise NotImplementedError

    def load(self, *job):
        """Local. Sample one batch and gather its fields, counting the time and bytes of each."""
        sent, remote, hits = self.graph.network_bytes(), self.fetch.remote_rows, self.fetch.cache_hits
        t0 = time.perf_counter()
        batch = self.sample(*job)
        t1 = time.perf_counter()
        self.fetch(batch)
        stats = self.stats
        stats.sample_s += t1 - t0
        stats.gather_s += time.perf_counter() - t1
        stats.network_bytes += self.graph.network_bytes() - sent
        stats.remote_rows += self.fetch.remote_rows - remote
        stats.cache_hits += self.fetch.cache_hits - hits
        stats.cache_saved_bytes += (self.fetch.cache_hits - hits) * self.fetch.row_bytes
        return batch

    def close(self):
        """Collective over the graph's comm. Free what the loader holds (nothing here)."""

    def extra(self, epoch):
        """Local. An iterator (with ``close()``) over batches beyond ``epoch``'s own, sampled in the
        caller's thread: a new order of this rank's seeds, for a rank that trains on while the
        other ranks finish the epoch (``--sync async``). The loader's epoch counter stays."""
        return iterate(lambda job: self.load(*job), self.jobs(EXTRA_EPOCH_BASE + epoch), 0, self.stats)

    def __iter__(self):
        epoch = self.epoch
        self.epoch += 1
        self.stats.reset()
        return iterate(lambda job: self.load(*job), self.jobs(epoch), self.prefetch, self.stats)
