"""Layer-wise importance sampling (LADIES, Zou et al. 2019) over a DistGraph.

Per layer, from the seeds outwards, a budget of nodes is drawn for the whole layer rather than
a fanout per node. With ``P`` the mean-aggregation matrix (``P[v, u]`` = multiplicity of the
edge u -> v / in-degree(v)) restricted to the layer's destination rows, the importance of
candidate u is ``p_u = sum_v P[v, u]^2 / ||P||_F^2`` (the squared column norms: layer-dependent,
the nodes the destinations' aggregations lean on most). Each candidate is kept independently
with probability ``pi_u = min(1, c p_u)``, ``c`` set so that the ``pi_u`` sum to the budget ``s``
= ``layer_sizes[l]`` (Poisson sampling: ``s`` distinct nodes on average, where ``s`` draws with
replacement give far fewer on a graph with hubs, which importance favours). The edge u -> v of
a kept u carries the weight ``P[v, u] / pi_u``, so the weighted sum over the kept sources is an
unbiased estimate of v's mean over all its in-neighbours (the blocks' weights are used as the
aggregation's matrix entries: :class:`~hpcgnn.nn.block_tensors.BlockTensors`). A destination none of
whose in-neighbours was kept aggregates 0 this step.

With ``normalize`` each destination's weights are divided by their sum (a self-normalised
importance estimate, as the LADIES authors' released code row-normalises the sampled matrix):
a weighted mean of the kept in-neighbours, biased by O(1/s) but with less variance.

Each layer reads its destinations' whole in-edge lists (:meth:`~hpcgnn.graph.DistGraph.in_edges`,
remote rows through the windows) and passes over them twice in compiled code
(:mod:`hpcgnn._layerwise`): once for the candidates and their norms, once for the kept edges.
Candidate u's uniform is :func:`~hpcgnn.runtime.rng.unit_uniform` of its gid under a seed keyed
by the batch seed and the layer, so a batch is the same on any number of ranks. The next
layer's nodes are the destinations followed by the kept candidates not among them, in
ascending gid order.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hpcgnn import _layerwise, _sample
from hpcgnn.runtime.errors import InputError
from hpcgnn.runtime.flags import MAX_COUNT, MAX_LAYERS
from hpcgnn.runtime.options import option
from hpcgnn.runtime.rng import derive_seed, unit_uniform
from hpcgnn.sampling.block import Block, MiniBatch
from hpcgnn.sampling.registry import WEIGHTED_MEAN, SamplerSpec, register_sampler


def inclusion_probabilities(importance, size) -> np.ndarray:
    """Local. ``min(1, c * importance)`` with ``c`` such that they sum to ``size`` (to the number
    of positive entries when that is smaller): the largest entries saturate at 1 and the rest
    share what remains of the budget in proportion."""
    positive = importance > 0
    if size >= np.count_nonzero(positive):
        return positive.astype(np.float64)
    saturated = np.zeros(importance.shape[0], dtype=bool)
    while True:  # each pass saturates the entries the last scale pushed to 1 or more; few passes
        free = positive & ~saturated
        scale = (size - np.count_nonzero(saturated)) / importance[free].sum()
        now = free & (scale * importance >= 1.0)
        if not now.any():
            return np.where(saturated, 1.0, np.minimum(scale * importance, 1.0))
        saturated |= now


class LayerSampler:
    """Local. LADIES: ``layer_sizes[l]`` importance-sampled nodes per layer, weighted edges.

    Parameters
    ----------
    layer_sizes : sequence of int
        Nodes kept per layer on average (the budget), input layer first (DGL's order, as fanouts).
    seed : int
        Base seed; :meth:`sample` also takes a per-batch ``seed``.
    normalize : bool
        Divide each destination's importance weights by their sum (see the module's docstring);
        False keeps the unbiased weights.
    """

    def __init__(self, layer_sizes, seed=0, normalize=True):
        self.layer_sizes = [int(s) for s in layer_sizes]
        if not self.layer_sizes or min(self.layer_sizes) < 1:
            raise ValueError(f"layer sizes must be positive, got {list(layer_sizes)}")
        self.seed = int(seed)
        self.normalize = bool(normalize)

    def layer(self, graph, nodes, size, seed):
        """Local. One layer's block over destinations ``nodes``: ``(next_nodes, Block)``."""
        offsets, src, eids = graph.in_edges(nodes)
        candidates, norms, order, column = _layerwise.column_norms(offsets, src)
        inclusion = inclusion_probabilities(norms, size)
        chosen = np.flatnonzero(unit_uniform(candidates, seed) < inclusion)
        chosen = chosen[np.argsort(candidates[chosen])]  # the next layer's new nodes in ascending gid order
        next_nodes, chosen_pos = _sample.relabel(nodes, candidates[chosen])
        slot = np.full(candidates.shape[0], -1, dtype=np.int32)
        slot[chosen] = chosen_pos
        scale = np.zeros(next_nodes.shape[0])
        scale[chosen_pos] = 1.0 / inclusion[chosen]
        counts, kept, src_pos, weight = _layerwise.keep_edges(offsets, order, column, slot, scale, self.normalize)
        indptr = np.zeros(nodes.shape[0] + 1, dtype=np.int64)
        np.cumsum(counts, out=indptr[1:])
        return next_nodes, Block(int(next_nodes.shape[0]), int(nodes.shape[0]), indptr, src_pos, eids[kept],
                                 edge_weight=weight)

    def sample(self, graph, seed_gids, seed=None) -> MiniBatch:
        """Local. The blocks of ``seed_gids`` (unique global ids)."""
        seeds = np.asarray(seed_gids, dtype=np.int64).reshape(-1)
        base = self.seed if seed is None else int(seed)
        nodes, blocks = seeds, []
        for hop, size in enumerate(reversed(self.layer_sizes)):
            nodes, block = self.layer(graph, nodes, size, derive_seed(base, "layer_sample", hop))
            blocks.append(block)
        blocks.reverse()
        return MiniBatch(seed_gids=seeds, input_gids=nodes, blocks=blocks)


def parse_sizes(text) -> tuple:
    """Local. ``--layer-sizes``: comma-separated positive integers, else a one-line InputError."""
    try:
        sizes = tuple(int(x) for x in str(text).split(","))
    except ValueError:
        raise InputError(None, "must be comma-separated integers", "--layer-sizes", text) from None
    if min(sizes) < 1 or max(sizes) > MAX_COUNT or len(sizes) > MAX_LAYERS:
        raise InputError(None, f"must be 1 to {MAX_LAYERS} sizes, each from 1 to {MAX_COUNT}", "--layer-sizes", text)
    return sizes


@dataclass(frozen=True)
class LayerOptions:
    """Local. ``--sampler layer`` (LADIES): nodes drawn per layer, and how their weights are normalised."""

    layer_sizes: tuple = option((512, 512), "nodes drawn per layer, input layer first (one per layer)",
                                type=parse_sizes, metavar="S1,S2,...")
    layer_weights: str = option("normalized", "unbiased importance weights, or normalized: each node's weights "
                                "divided by their sum (a weighted mean of its drawn in-neighbours; lower variance)",
                                choices=("normalized", "unbiased"))


register_sampler(SamplerSpec(
    "layer", LayerOptions,
    build=lambda graph, options, run: LayerSampler(options.layer_sizes, seed=run.seed,
                                                   normalize=options.layer_weights == "normalized"),
    summary="LADIES, --layer-sizes nodes per layer by importance sampling",
    layers=lambda options: len(options.layer_sizes), layers_flag="--layer-sizes", requires=WEIGHTED_MEAN,
    describe=lambda options: f"LADIES layer sizes {list(options.layer_sizes)}, {options.layer_weights} weights"))
