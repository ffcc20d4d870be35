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

Dropout makes ``h_u`` noisy around its mean ``mu_u`` (the activation before dropout), and the
sampled term multiplies that noise's variance by ``deg / D``. The paper's CVD estimator splits
it off: ``sum_sampled [a h_u + (w_vu - a) mu_u]`` with ``a = 1 / sqrt(deg D)``, which keeps the
mean and gives the noise the variance it has in the exact aggregation; so a block above the
input reads each sampled source twice, after and before dropout (``Block.with_expected``).

The input layer's histories are the features themselves, which never go stale: its aggregation
is exact, read as rows of the precomputed neighbour means of the features (VR-GCN's ``P X``), so
the input block has no sampled edges, only that constant row per destination.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hpcgnn import _sample
from hpcgnn.runtime.flags import MAX_REPEATS, Domain
from hpcgnn.runtime.options import option
from hpcgnn.runtime.rng import derive_seed
from hpcgnn.sampling.block import Block, MiniBatch
from hpcgnn.sampling.registry import AT_DEFAULT, WEIGHTED_MEAN, SamplerSpec, register_sampler


def _control_variate_block(num_live, counts, src_pos, eids, degree) -> Block:
    """Local. VR-GCN's block over sources ``[live rows, the same rows before dropout, one constant row
    per destination]`` (``2 num_live + num_dst`` sources).

    Destination ``v`` with ``c`` sampled in-edges (``src_pos``, ``eids`` grouped by destination)
    out of ``deg`` reads each sampled source's live (dropped-out) row with weight
    ``a = 1 / sqrt(deg c)``, its row before dropout with weight ``1 / c - a`` and its constant row
    with weight 1: the CVD estimator, whose dropout noise has the variance of the exact
    aggregation's instead of ``deg / c`` times it (without dropout the two reads are one, of
    weight ``1 / c``: plain VR-GCN).
    """
    num_dst = counts.shape[0]
    dst = np.repeat(np.arange(num_dst, dtype=np.int64), counts)
    live = 1.0 / np.sqrt(np.maximum(degree, 1) * np.maximum(counts, 1))[dst]
    expected = 1.0 / np.maximum(counts, 1)[dst] - live
    src = np.concatenate([src_pos, num_live + np.asarray(src_pos, dtype=np.int64),
                          2 * num_live + np.arange(num_dst, dtype=np.int64)])
    weight = np.concatenate([live, expected, np.ones(num_dst)])
    owner = np.concatenate([dst, dst, np.arange(num_dst, dtype=np.int64)])
    order = np.argsort(owner, kind="stable")
    indptr = np.zeros(num_dst + 1, dtype=np.int64)
    np.cumsum(2 * counts + 1, out=indptr[1:])
    edge_ids = np.concatenate([eids, eids, np.full(num_dst, -1, dtype=np.int64)])
    return Block(2 * num_live + num_dst, num_dst, indptr, src[order], edge_ids[order], degree,
                 edge_weight=weight[order].astype(np.float32), with_expected=True)


def _exact_input_block(num_dst) -> Block:
    """Local. The input layer's block: destination ``i`` reads only its constant row ``num_dst + i``."""
    rows = np.arange(num_dst, dtype=np.int64)
    return Block(2 * num_dst, num_dst, np.arange(num_dst + 1, dtype=np.int64), num_dst + rows,
                 np.full(num_dst, -1, dtype=np.int64), edge_weight=np.ones(num_dst, np.float32))


class ControlVariateSampler:
    """Local. VR-GCN's blocks: ``neighbors`` sampled in-neighbours per node in every layer but the
    input layer, whose aggregation is exact.

    A batch's ``extra`` holds, for the control variate, per block (input side first; None for the
    input block): ``vr_full``, the whole in-neighbour lists ``(offsets, src_gids)`` of its
    destinations, ``vr_sampled``, their sampled ones ``(counts, src_gids)``; and ``vr_nodes``: per
    block the global ids of its live sources.

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
        nodes, blocks, full, sampled, live = seeds, [], [], [], []
        for hop in range(self.num_layers - 1):
            picked = graph.sample_neighbors(nodes, self.neighbors, False, None, derive_seed(base, "hop", hop))
            next_nodes, src_pos = _sample.relabel(nodes, picked.src)
            blocks.append(_control_variate_block(next_nodes.shape[0], picked.counts, src_pos, picked.eids,
                                                picked.degree))
            offsets, src, _ = graph.in_edges(nodes)
            full.append((offsets, src))
            sampled.append((picked.counts, picked.src))
            live.append(next_nodes)
            nodes = next_nodes
        blocks.append(_exact_input_block(nodes.shape[0]))
        full.append(None)
        sampled.append(None)
        live.append(nodes)
        extra = {"vr_full": full[::-1], "vr_sampled": sampled[::-1], "vr_nodes": live[::-1]}
        return MiniBatch(seed_gids=seeds, input_gids=nodes, blocks=blocks[::-1], extra=extra)


@dataclass(frozen=True)
class ControlVariateOptions:
    """Local. ``--sampler vr`` (VR-GCN): sampled neighbours per node above the input layer."""

    vr_neighbors: int = option(2, "sampled in-neighbours per node in every layer but the input layer (VR-GCN's D)",
                               type=Domain(int, ge=1, le=MAX_REPEATS))


_VR_INPUT = "its input layer reads the features' neighbour means, for node tasks"
register_sampler(SamplerSpec(
    "vr", ControlVariateOptions,
    build=lambda graph, options, run: ControlVariateSampler(run.layers, options.vr_neighbors, seed=run.seed),
    summary="VR-GCN, --vr-neighbors sampled neighbours per node with the control variate of historical "
            "activations, the input layer exact",
    requires=(("embed_dim", AT_DEFAULT, _VR_INPUT), ("task", "node", _VR_INPUT), *WEIGHTED_MEAN), history=True))
