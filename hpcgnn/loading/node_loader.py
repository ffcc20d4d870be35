"""``NodeDataLoader``: mini-batches of a rank's seed nodes, sampled and gathered ahead of time.

It is the composition of the loading pieces: a :class:`~.plan.BatchPlan` (same step count on
every rank), a sampler, a :class:`~.fetch.FieldFetch` and the prefetch thread of
:mod:`.prefetch`. An edge loader reuses the same three with its own seeds and sampler.
"""
from __future__ import annotations

import time

from hpcgnn.loading.cache import RemoteRowCache, hot_remote_rows
from hpcgnn.loading.fetch import FieldFetch
from hpcgnn.loading.plan import BatchPlan
from hpcgnn.loading.prefetch import LoaderStats, iterate


class NodeDataLoader:
    """Collective over the graph's comm (construction). Iterate sampled, loaded MiniBatches.

    Parameters
    ----------
    graph : DistGraph
    seed_gids : array of int
        This rank's seed nodes (e.g. from :func:`hpcgnn.node_split`).
    sampler : Sampler
        E.g. :class:`~hpcgnn.sampling.NeighborSampler`.
    batch_size : int
    shuffle : bool
        A new order each epoch, from (seed, epoch, rank).
    drop_last : bool
        Drop the last partial batch (on every rank alike).
    prefetch : int
        Batches prepared ahead on the background thread; 0 samples in the caller's thread.
    feature, label : str or None
        Node fields gathered into ``batch.feat`` (rows of ``input_gids``) and ``batch.label``
        (rows of ``seed_gids``) as torch tensors; None skips one.
    seed : int
    cache_bytes : int
        Budget of a :class:`~hpcgnn.loading.cache.RemoteRowCache` of the feature rows of other
        nodes that batches read most (0: no cache). Choosing them samples batches first.
    max_batches : int
        At most this many batches per epoch (0: all; :class:`~.plan.BatchPlan`).

    Attributes
    ----------
    stats : LoaderStats
        Seconds spent sampling, gathering and waiting, and batches delivered, this epoch.
    epoch : int
        The epoch the next ``iter(loader)`` runs (set it to resume).
    """

    def __init__(self, graph, seed_gids, sampler, batch_size, shuffle=True, drop_last=False, prefetch=2,
                 feature="feat", label="label", seed=0, cache_bytes=0, max_batches=0):
        self.graph = graph
        self.plan = BatchPlan(seed_gids, batch_size, graph.comm, shuffle, drop_last, seed, max_batches)
        self.sampler = sampler
        self.cache = None
        if cache_bytes > 0 and feature is not None:
            tensor = graph.ndata[feature]
            capacity = int(cache_bytes) // max(tensor.window.row_bytes, 1)
            self.cache = RemoteRowCache(tensor, hot_remote_rows(tensor, sampler, graph, self.plan, capacity, seed))
        self.fetch = FieldFetch(graph, feature, label, self.cache)
        self.prefetch = int(prefetch)
        self.epoch = 0
        self.stats = LoaderStats()

    @property
    def num_batches(self) -> int:
        return self.plan.num_batches

    def __len__(self):
        return self.plan.num_batches

    def load(self, seeds, batch_seed):
        """Local. Sample one batch and gather its fields."""
        sent, remote, hits = self.graph.network_bytes(), self.fetch.remote_rows, self.fetch.cache_hits
        t0 = time.perf_counter()
        batch = self.sampler.sample(self.graph, seeds, seed=batch_seed)
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
        """Local. Nothing to free (the cache's rows are plain memory); for symmetry with the edge loader."""

    def __iter__(self):
        epoch = self.epoch
        self.epoch += 1
        self.stats.reset()
        jobs = [(seeds, self.plan.batch_seed(epoch, i)) for i, seeds in enumerate(self.plan.batches(epoch))]
        return iterate(lambda job: self.load(*job), jobs, self.prefetch, self.stats)
