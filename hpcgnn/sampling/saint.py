"""GraphSAINT (Zeng et al. 2020) on a partitioned graph: random subgraphs of each rank's part,
with the paper's loss and aggregation normalisation.

Each rank draws subgraphs of the graph its own nodes induce (:class:`~.subgraph.LocalGraph`), so
a batch reads nothing from another rank; the model runs on the subgraph (every block is it, the
training nodes last block's destinations). Three ways to draw one (``--sampler``):

``saint-node``
    ``budget`` draws of a node with probability proportional to its in-degree + 1, with
    replacement; the subgraph is the distinct nodes drawn.
``saint-edge``
    ``budget`` draws of an edge (u, v) with probability proportional to 1/deg(u) + 1/deg(v),
    with replacement; the subgraph is their endpoints.
``saint-rw``
    ``budget`` roots uniform over the part's nodes, each walking ``walk_length`` steps along
    in-edges backwards (a uniform in-neighbour per step; a walk stops at a node without one);
    the subgraph is every node visited.

Normalisation (the paper's section 3.2), from ``presample`` subgraphs drawn at construction:
``C_v`` counts the subgraphs holding node v and ``C_uv`` those holding edge (u, v). The
aggregation of v weighs its in-batch neighbour u by ``1 / (deg(v) alpha_uv)`` with
``alpha_uv = C_uv / C_v`` (an unbiased estimate of the mean over all of v's in-neighbours in
the part), and the loss of training node v by ``1 / (lambda_v T)`` with ``lambda_v = C_v / N``
(N presampled subgraphs, T the rank's training nodes): the batch's weighted loss sum is an
unbiased estimate of the mean loss over the rank's training nodes. A node or edge no
presampled subgraph held counts as held once. An epoch is as many subgraphs as it takes to
draw the part's node count in expectation (ceil(nodes / mean subgraph size)).
"""
from __future__ import annotations

import numpy as np
import torch

from hpcgnn.runtime.rng import generator
from hpcgnn.sampling.block import MiniBatch
from hpcgnn.sampling.subgraph import LocalGraph

SAINT_KINDS = ("node", "edge", "rw")


def cumulative(weights) -> np.ndarray:
    """Local. The normalised cumulative sum of non-negative ``weights`` (for :func:`draw_from`)."""
    cdf = np.cumsum(weights, dtype=np.float64)
    cdf /= cdf[-1]
    return cdf


def draw_from(cdf, size, rng) -> np.ndarray:
    """Local. ``size`` draws with replacement by the weights of ``cdf``: the draws of
    ``rng.choice(len(cdf), size, p=weights / sum)``, without its O(len) pass per call (the whole
    part's edges, for saint-edge)."""
    return cdf.searchsorted(rng.random(size), side="right").astype(np.int64)


def resolve_budget(budget, size) -> int:
    """Local. A budget as a count: ``budget`` itself, or for ``"P%"`` that share of ``size`` (the
    part's nodes or edges), at least 1."""
    if isinstance(budget, str) and budget.endswith("%"):
        return max(1, int(round(float(budget[:-1]) / 100 * size)))
    return int(budget)


class SaintSampler:
    """Local. GraphSAINT subgraphs of this rank's part, normalised by presampling.

    Parameters
    ----------
    graph : DistGraph
    kind : str
        ``"node"``, ``"edge"`` or ``"rw"`` (see the module docstring).
    num_layers : int
    budget : int or str
        Nodes drawn (node), edges drawn (edge) or walk roots (rw) per subgraph; ``"P%"``: that
        share of the part's nodes (edges for edge), the same share of the graph per step at any
        rank count.
    walk_length : int
        Steps per walk (rw only).
    presample : int
        Subgraphs drawn at construction to estimate the normalisation.
    seed : int
        Seed of the presampling; a batch's subgraph comes from the loader's batch seed.
    """

    def __init__(self, graph, kind, num_layers, budget, walk_length=2, presample=50, seed=0):
        if kind not in SAINT_KINDS:
            raise ValueError(f"unknown GraphSAINT sampler {kind!r} (choose from {', '.join(SAINT_KINDS)})")
        self.local = LocalGraph(graph)
        budget = resolve_budget(budget, self.local.indices.shape[0] if kind == "edge" else self.local.num_nodes)
        if min(num_layers, budget, walk_length, presample) < 1:
            raise ValueError("num_layers, budget, walk_length and presample must be positive")
        self.kind, self.num_layers, self.budget, self.walk_length = kind, int(num_layers), budget, int(walk_length)
        degree = self.local.in_degree
        self._node_cdf = cumulative(degree + 1.0)
        if kind == "edge" and self.local.indices.shape[0]:
            inverse = 1.0 / np.maximum(degree, 1)
            self._edge_cdf = cumulative(inverse[self.local.indices] + inverse[self.local.dst_of_edges()])
        self._normalise(int(presample), generator(seed, "saint_presample", graph.comm.rank))

    def _normalise(self, presample, rng):
        node_count = np.zeros(self.local.num_nodes)
        edge_count = np.zeros(self.local.indices.shape[0])
        sizes = []
        for _ in range(presample):
            nodes = self.draw(rng)
            _, _, _, slots = self.local.induced(nodes)
            node_count[nodes] += 1
            edge_count[slots] += 1
            sizes.append(nodes.shape[0])
        node_count, edge_count = np.maximum(node_count, 1), np.maximum(edge_count, 1)
        train = max(int(self.local.is_seed.sum()), 1)
        self.loss_weight = presample / (node_count * train)
        dst = self.local.dst_of_edges()
        # 1 / (deg(v) alpha_uv), alpha_uv = C_uv / C_v
        weight = node_count[dst] / (edge_count * np.maximum(self.local.in_degree[dst], 1))
        self.edge_weight = weight.astype(np.float32)
        mean_size = max(float(np.mean(sizes)), 1.0)
        self.steps_per_epoch = max(1, int(np.ceil(self.local.num_nodes / mean_size)))

    @property
    def batch_ids(self) -> np.ndarray:
        """Local. The loader's seed ids: one per subgraph of an epoch."""
        return np.arange(self.steps_per_epoch, dtype=np.int64)

    def draw(self, rng) -> np.ndarray:
        """Local. One subgraph's nodes (sorted unique local ids)."""
        n = self.local.num_nodes
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        if self.kind == "node":
            return np.unique(draw_from(self._node_cdf, self.budget, rng))
        if self.kind == "edge":
            if not self.local.indices.shape[0]:
                return np.zeros(0, dtype=np.int64)
            slots = draw_from(self._edge_cdf, self.budget, rng)
            dst = np.searchsorted(self.local.indptr, slots, side="right") - 1
            return np.unique(np.concatenate([self.local.indices[slots], dst]))
        at = rng.integers(0, n, self.budget)
        visited = [at]
        for _ in range(self.walk_length):
            degree = self.local.in_degree[at]
            alive = degree > 0
            at = at[alive]
            pick = self.local.indptr[at] + (rng.random(at.shape[0]) * degree[alive]).astype(np.int64)
            at = self.local.indices[pick]
            visited.append(at)
        return np.unique(np.concatenate(visited))

    def sample(self, graph, seed_gids, seed=None) -> MiniBatch:
        """Local. One subgraph per batch (``seed_gids``: the plan's subgraph ids; an empty list is a
        padding step), drawn from the batch ``seed``."""
        ids = np.asarray(seed_gids).reshape(-1)
        nodes = self.draw(generator(0 if seed is None else int(seed), "saint")) if ids.size else \
            np.zeros(0, dtype=np.int64)
        batch = self.local.batch(nodes, self.num_layers, self.edge_weight)
        seeds_local = batch.seed_gids - self.local.start
        batch.extra["loss_weight"] = torch.from_numpy(self.loss_weight[seeds_local].astype(np.float32))
        return batch
