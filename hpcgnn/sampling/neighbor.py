"""Multi-layer neighbour sampling into DistDGL-style mini-batches (``MiniBatch`` of ``Block``s).

Sampling starts from the seeds with the last fanout (DGL's order: ``fanouts[0]`` feeds the
input-side layer, ``fanouts[-1]`` the seeds). Each hop is one call of the graph's primitive
:meth:`~hpcgnn.graph.DistGraph.sample_neighbors` (local and remote rows alike); the picked
sources are then relabelled into the next layer's node list (seeds first) by the fused
unique/relabel kernel.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hpcgnn import _sample
from hpcgnn.runtime.errors import InputError
from hpcgnn.runtime.flags import MAX_COUNT, MAX_LAYERS
from hpcgnn.runtime.options import option
from hpcgnn.runtime.rng import derive_seed
from hpcgnn.sampling.block import Block, MiniBatch
from hpcgnn.sampling.registry import SamplerSpec, register_sampler


class NeighborSampler:
    """Local. Sample ``fanouts[l]`` in-neighbours per node for each layer ``l``.

    Parameters
    ----------
    fanouts : sequence of int
        One per layer, DGL's order (``fanouts[-1]`` is sampled from the seeds); -1 takes
        every in-neighbour.
    replace : bool
        Sample with replacement.
    prob : str, optional
        Name of an edge field of the graph holding non-negative sampling weights.
    seed : int
        Base seed; :meth:`sample` also takes a per-batch ``seed`` so batches differ.
    input_degrees : bool
        Also read the graph in-degree of every input node (``MiniBatch.input_degree``; GCN's
        symmetric normalisation needs it).
    """

    def __init__(self, fanouts, replace=False, prob=None, seed=0, input_degrees=False):
        self.fanouts = [int(f) for f in fanouts]
        if not self.fanouts or any(f == 0 or f < -1 for f in self.fanouts):
            raise ValueError(f"fanouts must be positive or -1, got {list(fanouts)}")
        self.replace = bool(replace)
        self.prob = prob
        self.seed = int(seed)
        self.input_degrees = bool(input_degrees)

    def sample(self, graph, seed_gids, seed=None) -> MiniBatch:
        """Local. Sample the blocks of ``seed_gids`` (unique global ids) from ``graph``."""
        seeds = np.asarray(seed_gids, dtype=np.int64).reshape(-1)  # repeats: relabel raises ValueError
        base = self.seed if seed is None else int(seed)
        nodes, blocks = seeds, []
        for hop, fanout in enumerate(reversed(self.fanouts)):
            picked = graph.sample_neighbors(nodes, fanout, self.replace, self.prob, derive_seed(base, "hop", hop))
            next_nodes, src_pos = _sample.relabel(nodes, picked.src)
            indptr = np.zeros(nodes.shape[0] + 1, dtype=np.int64)
            np.cumsum(picked.counts, out=indptr[1:])
            blocks.append(Block(int(next_nodes.shape[0]), int(nodes.shape[0]), indptr, src_pos, picked.eids,
                                picked.degree))
            nodes = next_nodes
        blocks.reverse()
        input_degree = graph.in_degrees(nodes) if self.input_degrees else None
        return MiniBatch(seed_gids=seeds, input_gids=nodes, blocks=blocks, input_degree=input_degree)


def parse_fanouts(text) -> tuple:
    """Local. ``--fanouts``: comma-separated per-layer fanouts, ``all`` (or -1) for every
    neighbour, else a one-line InputError."""
    try:
        fanouts = tuple(-1 if x.strip() == "all" else int(x) for x in str(text).split(","))
    except ValueError:
        raise InputError(None, "must be comma-separated integers", "--fanouts", text) from None
    if any(f == 0 or f < -1 or f > MAX_COUNT for f in fanouts) or len(fanouts) > MAX_LAYERS:
        raise InputError(None, f"must be 1 to {MAX_LAYERS} fanouts, each from 1 to {MAX_COUNT} or -1 (all)",
                         "--fanouts", ",".join(map(str, fanouts)))
    return fanouts


@dataclass(frozen=True)
class NeighborOptions:
    """Local. ``--sampler neighbor``: how many in-neighbours each layer draws."""

    fanouts: tuple = option((10, 25), "per layer, input layer first; 'all' (or --fanouts=-1,...) takes every "
                            "neighbour", type=parse_fanouts, metavar="F1,F2,...")


register_sampler(SamplerSpec(
    "neighbor", NeighborOptions,
    build=lambda graph, options, run: NeighborSampler(list(options.fanouts), input_degrees=run.input_degrees),
    summary="--fanouts neighbours per node and layer (GraphSAGE's sampling)",
    layers=lambda options: len(options.fanouts), layers_flag="--fanouts",
    describe=lambda options: f"fanouts {list(options.fanouts)}"))
