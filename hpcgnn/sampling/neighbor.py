"""Multi-layer neighbour sampling into DistDGL-style mini-batches (``MiniBatch`` of ``Block``s).

Sampling starts from the seeds with the last fanout (DGL's order: ``fanouts[0]`` feeds the
input-side layer, ``fanouts[-1]`` the seeds). Each hop is one call of the graph's primitive
:meth:`~hpcgnn.graph.DistGraph.sample_neighbors` (local and remote rows alike); the picked
sources are then relabelled into the next layer's node list (seeds first) by the fused
unique/relabel kernel.
"""
from __future__ import annotations

import numpy as np

from hpcgnn import _sample
from hpcgnn.runtime.rng import derive_seed
from hpcgnn.sampling.block import Block, MiniBatch


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
