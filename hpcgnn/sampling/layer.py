"""Layer-wise importance sampling (LADIES, Zou et al. 2019) over a DistGraph.

Per layer, from the seeds outwards, a fixed budget of nodes is drawn for the whole layer rather
than a fanout per node. With ``P`` the mean-aggregation matrix (``P[v, u]`` = multiplicity of the
edge u -> v / in-degree(v)) restricted to the layer's destination rows, candidate u is drawn with
probability ``p_u = sum_v P[v, u]^2 / ||P||_F^2`` (the squared column norms: layer-dependent, the
nodes the destinations' aggregations lean on most), ``s`` = ``layer_sizes[l]`` times with
replacement. The distinct drawn nodes u, drawn ``m_u`` times, are the layer's sources, and the
edge u -> v carries the importance weight ``m_u P[v, u] / (s p_u)``, so the weighted sum over the
sampled sources is an unbiased estimate of v's mean over all its in-neighbours (the blocks'
weights are used as the aggregation's matrix entries: :class:`~hpcgnn.nn.block.BlockTensors`).
A destination none of whose in-neighbours was drawn aggregates 0 this step.

Each layer reads its destinations' whole in-edge lists (:meth:`~hpcgnn.graph.DistGraph.in_edges`,
remote rows through the windows); the draws come from a stream keyed by the batch seed and the
layer, so a batch is the same on any number of ranks.
"""
from __future__ import annotations

import numpy as np

from hpcgnn import _sample
from hpcgnn.runtime.rng import generator
from hpcgnn.sampling.block import Block, MiniBatch

NO_NODES = np.zeros(0, dtype=np.int64)


class LayerSampler:
    """Local. LADIES: ``layer_sizes[l]`` importance-sampled nodes per layer, weighted edges.

    Parameters
    ----------
    layer_sizes : sequence of int
        Nodes drawn per layer, input layer first (DGL's order, as fanouts).
    seed : int
        Base seed; :meth:`sample` also takes a per-batch ``seed``.
    """

    def __init__(self, layer_sizes, seed=0):
        self.layer_sizes = [int(s) for s in layer_sizes]
        if not self.layer_sizes or min(self.layer_sizes) < 1:
            raise ValueError(f"layer sizes must be positive, got {list(layer_sizes)}")
        self.seed = int(seed)

    def layer(self, graph, nodes, size, rng):
        """Local. One layer's block over destinations ``nodes``: ``(next_nodes, Block)``."""
        offsets, src, eids = graph.in_edges(nodes)
        degree = np.diff(offsets)
        row = np.repeat(np.arange(nodes.shape[0], dtype=np.int64), degree)
        entry = 1.0 / np.repeat(np.maximum(degree, 1), degree)  # P[v, u] per edge (parallel edges add up)
        # the distinct sources in ascending order (the draws' order): a hash pass over the edges, then
        # a sort of the distinct ones only (np.unique's argsort of every edge is most of a layer's time)
        found, position = _sample.relabel(NO_NODES, src)
        order = np.argsort(found)
        rank = np.empty_like(order)
        rank[order] = np.arange(order.shape[0])
        candidates, column = found[order], rank[position]
        width = np.int64(max(candidates.shape[0], 1))
        # squared column norms of P over the layer's rows: sum over v of (sum of v's entries for u)^2
        if graph.simple:  # no parallel edges: every (v, u) entry is one edge's
            pair = pair_index = None
        else:  # a hash pass over every (v, u) pair: most of a layer's time when it finds none
            pair, pair_index = _sample.relabel(NO_NODES, row * width + column)
        if pair is None or pair.shape[0] == src.shape[0]:
            norms = np.bincount(column, weights=entry ** 2, minlength=candidates.shape[0])
        else:
            pair_value = np.bincount(pair_index, weights=entry)
            norms = np.bincount(pair % width, weights=pair_value ** 2, minlength=candidates.shape[0])
        if candidates.shape[0] == 0:
            drawn, times = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        else:
            p = norms / norms.sum()
            drawn, times = np.unique(rng.choice(candidates.shape[0], size, p=p), return_counts=True)
            scale = np.zeros(candidates.shape[0])
            scale[drawn] = times / (size * p[drawn])
        chosen = np.zeros(candidates.shape[0], dtype=bool)
        chosen[drawn] = True
        keep = chosen[column]
        next_nodes, src_pos = _sample.relabel(nodes, candidates[column[keep]])
        indptr = np.zeros(nodes.shape[0] + 1, dtype=np.int64)
        np.cumsum(np.bincount(row[keep], minlength=nodes.shape[0]), out=indptr[1:])
        weight = (entry[keep] * scale[column[keep]]).astype(np.float32) if keep.any() else np.zeros(0, np.float32)
        return next_nodes, Block(int(next_nodes.shape[0]), int(nodes.shape[0]), indptr, src_pos, eids[keep],
                                 edge_weight=weight)

    def sample(self, graph, seed_gids, seed=None) -> MiniBatch:
        """Local. The blocks of ``seed_gids`` (unique global ids)."""
        seeds = np.asarray(seed_gids, dtype=np.int64).reshape(-1)
        base = self.seed if seed is None else int(seed)
        nodes, blocks = seeds, []
        for hop, size in enumerate(reversed(self.layer_sizes)):
            nodes, block = self.layer(graph, nodes, size, generator(base, "layer_sample", hop))
            blocks.append(block)
        blocks.reverse()
        return MiniBatch(seed_gids=seeds, input_gids=nodes, blocks=blocks)
