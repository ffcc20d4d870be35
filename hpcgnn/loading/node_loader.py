"""``NodeDataLoader``: mini-batches of a rank's seed nodes, sampled and gathered ahead of time.

A :class:`~.base_loader.PlannedLoader` (the batch plan, the fetch step and the prefetch thread every
loader shares) whose batches are seed nodes expanded by a sampler, with an optional cache of
other nodes' feature rows.
"""
from __future__ import annotations

from hpcgnn.loading.base_loader import EpochJobs, PlannedLoader
from hpcgnn.loading.batch_plan import BatchPlan
from hpcgnn.loading.cache import RemoteRowCache, hot_remote_rows
from hpcgnn.loading.fetch import FieldFetch


class NodeDataLoader(PlannedLoader):
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
        At most this many batches per epoch (0: all; :class:`~.batch_plan.BatchPlan`).
    fetch : callable, optional
        The fetch step instead of a :class:`~.fetch.FieldFetch` of ``feature`` and ``label`` (a
        typed graph's :class:`~.typed_rows.TypedFieldFetch`); no cache then.

    Attributes
    ----------
    stats : LoaderStats
        Seconds spent sampling, gathering and waiting, and batches delivered, this epoch.
    epoch : int
        The epoch the next ``iter(loader)`` runs (set it to resume).
    """

    #: a node's blocks can be sampled on any rank, so a faster rank can train a slower one's seeds
    lends_seeds = True

    def __init__(self, graph, seed_gids, sampler, batch_size, shuffle=True, drop_last=False, prefetch=2,
                 feature="feat", label="label", seed=0, cache_bytes=0, max_batches=0, fetch=None):
        plan = BatchPlan(seed_gids, batch_size, graph.comm, shuffle, drop_last, seed, max_batches)
        self.sampler = sampler
        self.cache = None
        if cache_bytes > 0 and feature is not None and fetch is None:
            tensor = graph.ndata[feature]
            capacity = int(cache_bytes) // max(tensor.window.row_bytes, 1)
            self.cache = RemoteRowCache(tensor, hot_remote_rows(tensor, sampler, graph, plan, capacity, seed))
        super().__init__(graph, plan, fetch or FieldFetch(graph, feature, label, self.cache), prefetch)

    def jobs(self, epoch):
        """Local. ``(seeds, batch_seed, loss_weight)`` of every batch of ``epoch``."""
        batches = self.plan.batches(epoch)
        return EpochJobs(batches, lambda i, seeds: (seeds, self.plan.batch_seed(epoch, i), batches.weight(i)))

    def sample(self, seeds, batch_seed, loss_weight=1.0):
        """Local. The blocks of one batch of seed nodes."""
        batch = self.sampler.sample(self.graph, seeds, seed=batch_seed)
        batch.loss_weight = loss_weight
        return batch
