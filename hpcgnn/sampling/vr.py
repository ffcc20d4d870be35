"""Blocks for VR-GCN's control-variate estimator (Chen, Zhu & Song 2018) over a DistGraph.

With ``h_l`` the input of layer ``l`` and ``hbar_l`` its history (the value it had when each
node was last computed), the mean over all in-neighbours is estimated from ``D`` sampled ones as

    mean_{u in N(v)} h_u  ~  sum_{u sampled} w_vu (h_u - hbar_u)  +  mean_{u in N(v)} hbar_u,

with ``w_vu = 1 / min(D, deg v)``: unbiased for any histories (the sampled term estimates the
mean of ``h - hbar``), exact when the histories are current, and of low variance once they are
close. The second term and the histories' share of the first are constants (no gradient), so a
layer sees ``D`` live neighbours plus one constant row per destination, ``c_v = mean_{N(v)} hbar
- sum_sampled w_vu hbar_u``. This module samples the structure; the training step fills each
block's ``extra_rows`` (the ``c_v``) from the histories just before the forward pass.

The input layer's histories are the features themselves, which never go stale: its aggregation
is exact, read as rows of the precomputed neighbour means of the features (VR-GCN's ``P X``), so
the input block has no sampled edges, only that constant row per destination.
"""
from __future__ import annotations

import numpy as np

from hpcgnn import _sample
from hpcgnn.runtime.rng import derive_seed
from hpcgnn.sampling.block import Block, MiniBatch


def with_constant_rows(num_live, counts, src_pos, eids, weights, dst_degree=None) -> Block:
    """Local. A weighted block whose destination ``i`` also reads source ``num_live + i`` with weight 1.

    ``counts`` are the live in-edges per destination (``src_pos``, ``eids``, ``weights``
    grouped by destination); the constant rows follow the ``num_live`` live sources, one per
    destination, and have edge id -1.
    """
    num_dst = counts.shape[0]
    rows = np.arange(num_dst, dtype=np.int64)
    ends = np.cumsum(counts)
    # each destination's constant-row edge goes right after its live edges
    at = ends.astype(np.int64)
    src = np.insert(np.asarray(src_pos, dtype=np.int64), at, num_live + rows)
    edge_ids = np.insert(np.asarray(eids, dtype=np.int64), at, -1)
    weight = np.insert(np.asarray(weights, dtype=np.float32), at, 1.0).astype(np.float32)
    indptr = np.zeros(num_dst + 1, dtype=np.int64)
    np.cumsum(counts + 1, out=indptr[1:])
    return Block(num_live + num_dst, num_dst, indptr, src, edge_ids, dst_degree, edge_weight=weight)


class ControlVariateSampler:
    """Local. VR-GCN's blocks: ``neighbors`` sampled in-neighbours per node in every layer but the
    input layer, whose aggregation is exact.

    A batch's ``extra`` holds, for the control variate, ``vr_full``: per block (input side first,
    None for the input block) the whole in-neighbour lists ``(offsets, src_gids)`` of its
    destinations, and ``vr_nodes``: per block the global ids of its live sources.

    Parameters
    ----------
    num_layers : int
    neighbors : int
        Sampled in-neighbours per node (VR-GCN's D), without replacement.
    seed : int
        Base seed; the draws are those of ``NeighborSampler`` with fanout ``neighbors`` for the
        same batch seed.
    """

    def __init__(self, num_layers, neighbors=2, seed=0):
        self.num_layers = int(num_layers)
        self.neighbors = int(neighbors)
        if self.num_layers < 1 or self.neighbors < 1:
            raise ValueError(f"need at least one layer and one neighbour, got {num_layers}, {neighbors}")
        self.seed = int(seed)

    def sample(self, graph, seed_gids, seed=None) -> MiniBatch:
        """Local. The blocks of ``seed_gids`` (unique global ids)."""
        seeds = np.asarray(seed_gids, dtype=np.int64).reshape(-1)
        base = self.seed if seed is None else int(seed)
        nodes, blocks, full, live = seeds, [], [], []
        for hop in range(self.num_layers - 1):
            picked = graph.sample_neighbors(nodes, self.neighbors, False, None, derive_seed(base, "hop", hop))
            next_nodes, src_pos = _sample.relabel(nodes, picked.src)
            weights = np.repeat(1.0 / np.maximum(picked.counts, 1), picked.counts)
            blocks.append(with_constant_rows(next_nodes.shape[0], picked.counts, src_pos, picked.eids, weights,
                                             picked.degree))
            offsets, src, _ = graph.in_edges(nodes)
            full.append((offsets, src))
            live.append(next_nodes)
            nodes = next_nodes
        none = np.zeros(0, dtype=np.int64)
        blocks.append(with_constant_rows(nodes.shape[0], np.zeros(nodes.shape[0], np.int64), none, none,
                                         np.zeros(0, np.float32)))
        full.append(None)
        live.append(nodes)
        blocks.reverse()
        full.reverse()
        live.reverse()
        return MiniBatch(seed_gids=seeds, input_gids=nodes, blocks=blocks, extra={"vr_full": full, "vr_nodes": live})
