"""``EdgeDataLoader``: mini-batches of a rank's training edges for link prediction.

Per batch of positive edges: negatives from a negative sampler
(:mod:`hpcgnn.sampling.negative`), the union of all their endpoints expanded into blocks by
any node sampler (the :class:`~hpcgnn.sampling.Sampler` protocol) on a view of the graph
without the batch's own positive edges and their reverses
(:class:`~hpcgnn.sampling.exclude.ExcludedEdges`), so the model cannot read the answer, then
the endpoints' input features gathered. It is a :class:`~.base_loader.PlannedLoader` as the node
loader is, with other seeds: the same :class:`~.batch_plan.BatchPlan` (equal steps on every rank),
:class:`~.fetch.FieldFetch` and prefetch thread.

Each batch's ``extra`` holds ``pos_src``/``pos_dst``/``neg_src``/``neg_dst``: rows of the
model's output (positions in ``seed_gids``) of every pair's endpoints, negatives laid out K
per positive. Negatives are drawn with the seed of the epoch, and the counter-based negative
samplers key each edge's draws by its edge id, so an edge gets the same negatives in an epoch
whatever batch or rank it lands in.
"""
from __future__ import annotations

import numpy as np
import torch

from hpcgnn.loading.base_loader import EpochJobs, PlannedLoader
from hpcgnn.loading.batch_plan import BatchPlan
from hpcgnn.loading.fetch import FieldFetch
from hpcgnn.runtime.rng import derive_seed
from hpcgnn.sampling.exclude import ExcludedEdges

_PAIR_KEYS = ("pos_src", "pos_dst", "neg_src", "neg_dst")


class EdgeDataLoader(PlannedLoader):
    """Collective over the graph's comm (construction). Iterate sampled, loaded link-prediction batches.

    Parameters
    ----------
    graph : DistGraph
    seed_edges : SeedEdges
        This rank's training edges (:func:`hpcgnn.graph.edge_split`).
    sampler : Sampler
        Expands the batch's endpoints into blocks, e.g. :class:`~hpcgnn.sampling.NeighborSampler`.
    negative_sampler : NegativeSampler
        K negative pairs per positive (:func:`hpcgnn.sampling.negative.build_negative_sampler`).
    batch_size : int
        Positive edges per rank per step.
    shuffle, drop_last, prefetch, seed :
        As for :class:`~hpcgnn.loading.NodeDataLoader`.
    feature : str or None
        Node field gathered into ``batch.feat`` (rows of ``input_gids``).
    exclude : bool
        Hide each batch's positive edges and their reverses from its neighbourhoods (default;
        False only to measure what leaking them does).
    max_batches : int
        At most this many batches per epoch (0: all; :class:`~.batch_plan.BatchPlan`).
    """

    def __init__(self, graph, seed_edges, sampler, negative_sampler, batch_size, shuffle=True, drop_last=False,
                 prefetch=2, feature="feat", seed=0, exclude=True, max_batches=0):
        plan = BatchPlan(seed_edges.eids, batch_size, graph.comm, shuffle, drop_last, seed, max_batches)
        super().__init__(graph, plan, FieldFetch(graph, feature, None), prefetch)
        self.edges = seed_edges
        self.sampler, self.negative_sampler = sampler, negative_sampler
        self.seed, self.exclude = int(seed), bool(exclude)

    def jobs(self, epoch):
        """Local. ``(eids, batch_seed, negative_seed)`` of every batch of ``epoch``."""
        negative_seed = derive_seed(self.seed, "negatives", epoch)
        return EpochJobs(self.plan.batches(epoch),
                         lambda i, eids: (eids, self.plan.batch_seed(epoch, i), negative_seed))

    def sample(self, eids, batch_seed, negative_seed):
        """Local. One batch of positive edges: negatives, and blocks of every endpoint (positives excluded)."""
        src, dst = self.edges.lookup(eids)
        neg_src, neg_dst = self.negative_sampler.sample(self.graph, src, dst, eids, negative_seed)
        ends = np.concatenate([src, dst, neg_src, neg_dst])
        nodes, rows = np.unique(ends, return_inverse=True)
        view = ExcludedEdges(self.graph, src, dst) if self.exclude else self.graph
        batch = self.sampler.sample(view, nodes, seed=batch_seed)
        b, nb = src.shape[0], neg_src.shape[0]
        cuts = np.cumsum([0, b, b, nb, nb])
        batch.extra.update({key: torch.from_numpy(rows[cuts[i]:cuts[i + 1]].astype(np.int64))
                            for i, key in enumerate(_PAIR_KEYS)})
        return batch

    def close(self):
        """Collective over the graph's comm. Free the negative sampler's windows (if any)."""
        self.negative_sampler.close()
