"""PinSAGE-style neighbourhoods (Ying et al. 2018): the nodes short random walks visit most.

For every node of a layer, ``walks`` random walks of ``walk_length`` steps start at it and
follow in-edges backwards (the direction messages flow), each step a uniform in-neighbour; a
walk at a node without in-edges stops. The ``topk`` nodes the node's walks visit most (the
node itself not counted; ties to the lower id) are its neighbourhood, weighted by their visit
counts, normalised to sum to one: the model's mean aggregation becomes PinSAGE's
importance-weighted mean. Repeated per layer, from the seeds outwards, like neighbour sampling.

Every step is one call of the graph's :meth:`~hpcgnn.graph.DistGraph.sample_neighbors` with one
pick per walker (rows may repeat: each walker has its own counter-based stream), so remote
adjacency is read through the windows and the walks, hence the batch, are the same on any
number of ranks for a given seed.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hpcgnn import _sample
from hpcgnn.runtime.flags import MAX_REPEATS, Domain
from hpcgnn.runtime.options import option
from hpcgnn.runtime.rng import derive_seed
from hpcgnn.sampling.block import Block, MiniBatch
from hpcgnn.sampling.registry import WEIGHTED_MEAN, SamplerSpec, register_sampler


class RandomWalkSampler:
    """Local. Per layer, each node's ``topk`` most visited nodes of its random walks.

    Parameters
    ----------
    num_layers : int
    walks : int
        Walks started at every node of a layer.
    walk_length : int
        Steps per walk.
    topk : int
        Neighbours kept per node (fewer when its walks visit fewer distinct nodes).
    seed : int
        Base seed; :meth:`sample` also takes a per-batch ``seed``.
    """

    def __init__(self, num_layers, walks=20, walk_length=3, topk=10, seed=0):
        values = {"num_layers": num_layers, "walks": walks, "walk_length": walk_length, "topk": topk}
        if any(int(v) < 1 for v in values.values()):
            raise ValueError(f"every size must be at least 1, got {values}")
        self.num_layers, self.walks, self.walk_length, self.topk = (int(v) for v in values.values())
        self.seed = int(seed)

    def visits(self, graph, nodes, seed) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Local. ``(origin, visited, count)``: how often the walks of ``nodes[origin]`` visit
        ``visited`` (each pair once, sorted by origin then visited; the origin itself left out)."""
        origin = np.repeat(np.arange(nodes.shape[0], dtype=np.int64), self.walks)
        at = nodes[origin]
        trail_origin, trail_node = [], []
        for step in range(self.walk_length):
            picked = graph.sample_neighbors(at, 1, True, None, derive_seed(seed, "walk", step))
            alive = picked.counts > 0
            origin, at = origin[alive], picked.src.astype(np.int64, copy=False)
            trail_origin.append(origin)
            trail_node.append(at)
            if at.shape[0] == 0:
                break
        origin, node = np.concatenate(trail_origin), np.concatenate(trail_node)
        away = node != nodes[origin]
        keys, count = np.unique(origin[away] * np.int64(graph.num_nodes) + node[away], return_counts=True)
        return keys // graph.num_nodes, keys % graph.num_nodes, count

    def neighbourhood(self, graph, nodes, seed) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Local. ``(counts, src, weight)``: per node of ``nodes``, its up to ``topk`` most visited
        nodes (CSR by ``counts``, most visited first) and their normalised visit counts."""
        origin, visited, count = self.visits(graph, nodes, seed)
        # by origin, then most visits, then lower id: one sort of packed keys (a 3-key lexsort costs
        # several times more); counts are at most walks * walk_length, ids below num_nodes
        most, n = np.int64(self.walks * self.walk_length), np.int64(graph.num_nodes)
        key = np.sort((origin * (most + 1) + (most - count)) * n + visited)
        visited, rest = key % n, key // n
        origin, count = rest // (most + 1), most - rest % (most + 1)
        first = np.searchsorted(origin, np.arange(nodes.shape[0]))
        rank = np.arange(origin.shape[0]) - first[origin]
        keep = rank < self.topk
        origin, visited, count = origin[keep], visited[keep], count[keep].astype(np.float32)
        counts = np.bincount(origin, minlength=nodes.shape[0]).astype(np.int64)
        totals = np.bincount(origin, weights=count, minlength=nodes.shape[0])
        return counts, visited, (count / totals[origin]).astype(np.float32)

    def sample(self, graph, seed_gids, seed=None) -> MiniBatch:
        """Local. The blocks of ``seed_gids`` (unique global ids), weighted by visit counts."""
        seeds = np.asarray(seed_gids, dtype=np.int64).reshape(-1)
        base = self.seed if seed is None else int(seed)
        nodes, blocks = seeds, []
        for hop in range(self.num_layers):
            counts, src, weight = self.neighbourhood(graph, nodes, derive_seed(base, "hop", hop))
            next_nodes, src_pos = _sample.relabel(nodes, src)
            indptr = np.zeros(nodes.shape[0] + 1, dtype=np.int64)
            np.cumsum(counts, out=indptr[1:])
            no_edge = np.full(src.shape[0], -1, dtype=np.int64)  # walk neighbours are not edges
            blocks.append(Block(int(next_nodes.shape[0]), int(nodes.shape[0]), indptr, src_pos, no_edge,
                                edge_weight=weight))
            nodes = next_nodes
        blocks.reverse()
        return MiniBatch(seed_gids=seeds, input_gids=nodes, blocks=blocks)


#: steps of one random walk: a walk's steps multiply a batch's memory
WALK_LENGTH = Domain(int, ge=1, le=1000)


@dataclass(frozen=True)
class WalkOptions:
    """Local. ``--sampler randomwalk`` (PinSAGE): the walks that pick each node's neighbours."""

    walks: int = option(20, "random walks started at every node of a layer", type=Domain(int, ge=1, le=MAX_REPEATS))
    walk_length: int = option(3, "steps per walk", type=WALK_LENGTH)
    topk: int = option(10, "the most visited nodes kept as a node's neighbours", type=Domain(int, ge=1, le=MAX_REPEATS))


def _inference_walks(options, seed):
    # PinSAGE is evaluated on the neighbourhoods it was trained on, drawn from a fixed seed so an
    # evaluation is repeatable
    return RandomWalkSampler(1, options.walks, options.walk_length, options.topk, seed=derive_seed(seed, "inference"))


register_sampler(SamplerSpec(
    "randomwalk", WalkOptions,
    build=lambda graph, options, run: RandomWalkSampler(run.layers, options.walks, options.walk_length, options.topk,
                                                        seed=run.seed),
    summary="PinSAGE, each node's --topk most visited nodes of random walks", requires=WEIGHTED_MEAN,
    inference=_inference_walks,
    describe=lambda options: f"random walks {options.walks} x {options.walk_length} steps, top {options.topk}"))
