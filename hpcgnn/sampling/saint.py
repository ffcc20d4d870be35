"""GraphSAINT (Zeng et al. 2020) on a partitioned graph: random subgraphs of each rank's part,
with the paper's loss and aggregation normalisation.

Each rank draws subgraphs of the graph its own nodes induce (:class:`~.subgraph.LocalGraph`);
the model runs on the subgraph above its input layer (every block is it, the training nodes the
last block's destinations), and its input layer aggregates every in-neighbour of the subgraph's
nodes, unweighted, other ranks' too (their features read through the windows; :mod:`~.subgraph`
says why). Three ways to draw one (``--sampler``):

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
aggregation of v (above the input layer) weighs its in-batch neighbour u by ``1 / (deg(v) alpha_uv)`` with
``alpha_uv = C_uv / C_v`` (an unbiased estimate of the mean over all of v's in-neighbours in
the part), and the loss of training node v by ``1 / (lambda_v T)`` with ``lambda_v = C_v / N``
(N presampled subgraphs, T the rank's training nodes): the batch's weighted loss sum is an
unbiased estimate of the mean loss over the rank's training nodes. A node or edge no
presampled subgraph held counts as held once. An epoch is as many subgraphs as it takes to
draw the part's node count in expectation (ceil(nodes / mean subgraph size)).

``budget="auto"`` (the default; see :mod:`~.subgraph`) searches for the smallest budget whose
subgraphs hold :func:`~.subgraph.target_share` of a node's in-part neighbours on average (the
share of the part's in-edges whose source a subgraph holds, :meth:`~.subgraph.LocalGraph.source_share`,
the mean over :data:`_CALIBRATION_DRAWS` subgraphs per budget tried; doubling, then bisection)
and :data:`SEED_COVERAGE` of :func:`~.subgraph.target_seeds` loss nodes (draws are with
replacement: holding every one would take an unbounded budget); the ranks then agree on the
largest share of their parts any of them needs. A fixed count is a
share of the part that shrinks as graphs grow: 1,000 node draws hold a tenth of a node's
neighbours in a 15,000-node part.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from hpcgnn.runtime.flags import MAX_COUNT, MAX_REPEATS, Domain
from hpcgnn.runtime.options import option
from hpcgnn.runtime.rng import generator
from hpcgnn.sampling.block import MiniBatch
from hpcgnn.sampling.randomwalk import WALK_LENGTH
from hpcgnn.sampling.registry import SUBGRAPH_BATCHES, WEIGHTED_MEAN, SamplerSpec, register_sampler
from hpcgnn.sampling.subgraph import LocalGraph, agreed_share, size_warning, sizes_note, target_seeds, target_share

_SAINT_KINDS = ("node", "edge", "rw")
AUTO = "auto"
#: subgraphs drawn per budget tried by the ``auto`` search
_CALIBRATION_DRAWS = 4
#: the share of its target loss nodes an ``auto`` subgraph holds
SEED_COVERAGE = 0.9
#: the ``auto`` search's largest budget, in multiples of the part's nodes (edges for saint-edge):
#: draws are with replacement, so covering a part takes a few times its size
_MAX_BUDGET_FACTOR = 4


def cumulative(weights) -> np.ndarray:
    """Local. The normalised cumulative sum of non-negative ``weights`` (for :func:`_draw_from`)."""
    cdf = np.cumsum(weights, dtype=np.float64)
    cdf /= cdf[-1]
    return cdf


def _draw_from(cdf, size, rng) -> np.ndarray:
    """Local. ``size`` draws with replacement by the weights of ``cdf``: the draws of
    ``rng.choice(len(cdf), size, p=weights / sum)``, without its O(len) pass per call (the whole
    part's edges, for saint-edge)."""
    return cdf.searchsorted(rng.random(size), side="right").astype(np.int64)


def _resolve_budget(budget, size) -> int:
    """Local. A budget as a count: ``budget`` itself, or for ``"P%"`` that share of ``size`` (the
    part's nodes or edges), at least 1."""
    if isinstance(budget, str) and budget.endswith("%"):
        return max(1, int(round(float(budget[:-1]) / 100 * size)))
    return int(budget)


class SaintSampler:
    """Collective over graph.comm (construction; every method is Local). GraphSAINT subgraphs of
    this rank's part, normalised by presampling.

    Parameters
    ----------
    graph : DistGraph
    kind : str
        ``"node"``, ``"edge"`` or ``"rw"`` (see the module docstring).
    num_layers : int
    budget : int or str
        Nodes drawn (node), edges drawn (edge) or walk roots (rw) per subgraph; ``"P%"``: that
        share of the part's nodes (edges for edge), the same share of the graph per step at any
        rank count; ``"auto"``: the smallest whose subgraphs hold :func:`~.subgraph.target_share`
        of a node's in-part neighbours and enough loss nodes (see the module docstring).
    walk_length : int
        Steps per walk (rw only).
    presample : int
        Subgraphs drawn at construction to estimate the normalisation.
    seed : int
        Seed of the presampling; a batch's subgraph comes from the loader's batch seed.
    """

    def __init__(self, graph, kind, num_layers, budget=AUTO, walk_length=2, presample=50, seed=0):
        if kind not in _SAINT_KINDS:
            raise ValueError(f"unknown GraphSAINT sampler {kind!r} (choose from {', '.join(_SAINT_KINDS)})")
        self.local = LocalGraph(graph)
        size = self.local.indices.shape[0] if kind == "edge" else self.local.num_nodes
        given = None if budget == AUTO else _resolve_budget(budget, size)
        if min(num_layers, walk_length, presample) < 1 or (given is not None and given < 1):
            raise ValueError("num_layers, budget, walk_length and presample must be positive")
        self.kind, self.num_layers, self.walk_length = kind, int(num_layers), int(walk_length)
        degree = self.local.in_degree
        self._node_cdf = cumulative(degree + 1.0)
        if kind == "edge" and self.local.indices.shape[0]:
            inverse = 1.0 / np.maximum(degree, 1)
            self._edge_cdf = cumulative(inverse[self.local.indices] + inverse[self.local.dst_of_edges()])
        self.target_share = target_share(self.local)
        if given is None:
            share = agreed_share(self._calibrate(size, generator(seed, "saint_calibrate", graph.comm.rank)) /
                                 max(size, 1), graph.comm)
            given = max(1, int(np.ceil(share * max(size, 1) - 1e-9)))
        self.budget, self.auto = given, budget == AUTO
        self._normalise(int(presample), generator(seed, "saint_presample", graph.comm.rank))
        if not self.auto:
            size_warning(graph.comm, f"--budget {budget}", self.local, self.batch_share, self.batch_seeds)

    def _calibrate(self, size, rng) -> int:
        """The smallest budget (to within a thirty-second) whose subgraphs hold :attr:`target_share`
        of a node's in-part neighbours and :data:`SEED_COVERAGE` of :func:`~.subgraph.target_seeds`
        loss nodes, the means over :data:`_CALIBRATION_DRAWS` of them; the largest allowed when
        none does."""
        largest = max(1, _MAX_BUDGET_FACTOR * size)
        seeds = SEED_COVERAGE * target_seeds(self.local)

        def reaches(budget):
            self.budget = budget
            draws = [self.draw(rng) for _ in range(_CALIBRATION_DRAWS)]
            held = np.mean([self.local.source_share(nodes) for nodes in draws])
            return held >= self.target_share and np.mean([self.local.is_seed[nodes].sum() for nodes in draws]) >= seeds

        low, high = 0, min(64, largest)
        while not reaches(high):
            if high == largest:
                return largest
            low, high = high, min(2 * high, largest)
        while high - low > max(1, high // 32):
            middle = (low + high) // 2
            low, high = (low, middle) if reaches(middle) else (middle, high)
        return high

    def _normalise(self, presample, rng):
        node_count = np.zeros(self.local.num_nodes)
        edge_count = np.zeros(self.local.indices.shape[0])
        sizes, held, seeds = [], 0.0, 0
        for _ in range(presample):
            nodes = self.draw(rng)
            _, _, _, slots = self.local.induced(nodes)
            node_count[nodes] += 1
            edge_count[slots] += 1
            sizes.append(nodes.shape[0])
            held += self.local.source_share(nodes)
            seeds += int(self.local.is_seed[nodes].sum())
        # what a subgraph holds on average, for the start line
        self.batch_share, self.batch_seeds = held / presample, seeds / presample
        node_count, edge_count = np.maximum(node_count, 1), np.maximum(edge_count, 1)
        train = max(int(self.local.is_seed.sum()), 1)
        self.loss_weight = presample / (node_count * train)
        dst = self.local.dst_of_edges()
        # 1 / (deg(v) alpha_uv), alpha_uv = C_uv / C_v
        weight = node_count[dst] / (edge_count * np.maximum(self.local.in_degree[dst], 1))
        self.edge_weight = weight.astype(np.float32)
        mean_size = max(float(np.mean(sizes)), 1.0)
        self.steps_per_epoch = max(1, int(np.ceil(self.local.num_nodes / mean_size)))

    def describe(self) -> str:
        """Local. The sampler and its budget in words, for the run's start line."""
        return (f"GraphSAINT {self.kind} sampler, budget {self.budget}{' (auto)' if self.auto else ''} ("
                f"{sizes_note(self.local, self.batch_share, self.batch_seeds)})")

    @property
    def batch_ids(self) -> np.ndarray:
        """Local. The loader's seed ids: one per subgraph of an epoch."""
        return np.arange(self.steps_per_epoch, dtype=np.int64)

    def loader_seeds(self) -> tuple:
        """Local. The loader's seeds and seeds per batch: one subgraph id per step."""
        return self.batch_ids, 1

    def draw(self, rng) -> np.ndarray:
        """Local. One subgraph's nodes (sorted unique local ids)."""
        n = self.local.num_nodes
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        if self.kind == "node":
            return np.unique(_draw_from(self._node_cdf, self.budget, rng))
        if self.kind == "edge":
            if not self.local.indices.shape[0]:
                return np.zeros(0, dtype=np.int64)
            slots = _draw_from(self._edge_cdf, self.budget, rng)
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


@dataclass(frozen=True)
class SaintOptions:
    """Local. ``--sampler saint-node|saint-edge|saint-rw`` (GraphSAINT): each subgraph's size, and
    the presampling that estimates the normalisation."""

    budget: object = option(AUTO, "nodes (saint-node), edges (saint-edge) or walk roots (saint-rw) drawn per "
                            "subgraph; P%% draws that share of the rank's part (its nodes, or its edges for "
                            "saint-edge), so a step covers the same share of the graph at any rank count; auto: the "
                            "least that keeps a subgraph's nodes 10 in-batch neighbours on average (half their "
                            "in-part ones where fewer)",
                            type=Domain(int, ge=1, le=MAX_COUNT, share=True, words={AUTO: "sized from the graph"}))
    presample: int = option(50, "subgraphs drawn at start-up to estimate GraphSAINT's normalisation",
                            type=Domain(int, ge=1, le=MAX_REPEATS))


@dataclass(frozen=True)
class SaintWalkOptions(SaintOptions):
    """Local. ``--sampler saint-rw``: GraphSAINT's options and the length of its walks."""

    walk_length: int = option(3, "steps per walk", type=WALK_LENGTH)


for _kind in _SAINT_KINDS:
    register_sampler(SamplerSpec(
        f"saint-{_kind}", SaintWalkOptions if _kind == "rw" else SaintOptions,
        build=lambda graph, options, run, kind=_kind: SaintSampler(graph, kind, run.layers, options.budget,
                                                                   getattr(options, "walk_length", 2),
                                                                   options.presample, seed=run.seed),
        summary=f"GraphSAINT {_kind} subgraphs of each rank's part", requires=SUBGRAPH_BATCHES + WEIGHTED_MEAN,
        subgraph=True))
