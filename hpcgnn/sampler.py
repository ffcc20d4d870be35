"""Multi-layer neighbour sampling into DistDGL-style mini-batches (``MiniBatch`` of ``Block``s).

Sampling starts from the seeds with the last fanout (DGL's order: ``fanouts[0]`` feeds the
input-side layer, ``fanouts[-1]`` the seeds). For every node of a layer the kernel picks CSC
positions of its in-edges: rows this rank owns are read from its own CSC; rows owned by
another rank are read through the graph's windows, first their offsets, then only the chosen
positions, so no rank waits for another's CPU. The picked sources are then relabelled into
the next layer's node list (seeds first) by the fused unique/relabel kernel.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hpcgnn import _sample


@dataclass
class Block:
    """Local. One sampled layer as a bipartite graph, CSR over its destination nodes.

    The in-edges of destination ``i`` are ``indptr[i]:indptr[i+1]``; ``src_pos`` indexes the
    block's source node list (whose first ``num_dst`` entries are the destinations
    themselves), ``eids`` are the global edge ids of the sampled edges.
    """

    num_src: int
    num_dst: int
    indptr: np.ndarray
    src_pos: np.ndarray
    eids: np.ndarray
    #: in-degree of each destination in the whole graph (GCN normalises by it)
    dst_degree: np.ndarray = None

    @property
    def num_edges(self) -> int:
        return int(self.src_pos.shape[0])

    def dst_index(self) -> np.ndarray:
        """Local. Destination of every edge (expanded from ``indptr``)."""
        return np.repeat(np.arange(self.num_dst, dtype=np.int64), np.diff(self.indptr))


@dataclass
class MiniBatch:
    """Local. Sampled blocks (input side first) and, once loaded, input features and labels.

    ``input_gids`` are the global ids of the first block's source nodes (the rows of
    ``feat``); ``seed_gids`` the output nodes (the rows of ``label``).
    """

    seed_gids: np.ndarray
    input_gids: np.ndarray
    blocks: list
    #: in-degree of every input node in the whole graph, when the sampler was asked for it
    input_degree: np.ndarray = None
    feat: object = None
    label: object = None
    extra: dict = field(default_factory=dict)

    @property
    def num_sampled_edges(self) -> int:
        return sum(b.num_edges for b in self.blocks)


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
        nodes = seeds
        blocks = []
        for depth, fanout in enumerate(reversed(self.fanouts)):
            layer_seed = (base * 0x9E3779B1 + depth * 0x85EBCA77 + 1) % 2**64
            counts, src, eids, degree = self._sample_layer(graph, nodes, fanout, layer_seed)
            next_nodes, src_pos = _sample.relabel(nodes, src)
            indptr = np.zeros(nodes.shape[0] + 1, dtype=np.int64)
            np.cumsum(counts, out=indptr[1:])
            blocks.append(Block(int(next_nodes.shape[0]), int(nodes.shape[0]), indptr, src_pos, eids, degree))
            nodes = next_nodes
        blocks.reverse()
        input_degree = graph.in_degrees(nodes) if self.input_degrees else None
        return MiniBatch(seed_gids=seeds, input_gids=nodes, blocks=blocks, input_degree=input_degree)

    def _sample_layer(self, graph, nodes, fanout, layer_seed):
        """Picks for one layer: (counts per node, source gids, global edge ids, in-degrees)."""
        start, end = graph.local_nodes
        rank = graph.comm.rank
        all_local = nodes.shape[0] == 0 or (int(nodes.min()) >= start and int(nodes.max()) < end)
        if all_local:  # the common case of one rank, and of every first hop: no masks needed
            lids = nodes - start if start else nodes
            begin = graph.indptr[lids]
            degree = graph.indptr[lids + 1] - begin
            owners = None
        else:
            local = (nodes >= start) & (nodes < end)
            begin = np.empty(nodes.shape[0], dtype=np.int64)
            degree = np.empty(nodes.shape[0], dtype=np.int64)
            owners = np.full(nodes.shape[0], rank, dtype=np.int64)
            lids = nodes[local] - start
            begin[local] = graph.indptr[lids]
            degree[local] = graph.indptr[lids + 1] - begin[local]
            remote = np.flatnonzero(~local)
            (rbegin, rend), rowners = graph.degree_offsets(nodes[remote])
            begin[remote], degree[remote], owners[remote] = rbegin, rend - rbegin, rowners
        if self.prob is None:
            counts, positions = _sample.sample_positions(begin, degree, fanout, self.replace, layer_seed)
        else:
            weights = self._row_weights(graph, begin, degree, owners, rank)
            counts, positions = _sample.sample_positions_weighted(begin, degree, weights, fanout,
                                                                  self.replace, layer_seed)
        if owners is None:
            src = graph.indices[positions].astype(np.int64, copy=False)
            return counts, src, positions + graph.local_edges[0], degree
        edge_owner = np.repeat(owners, counts)
        src = np.empty(positions.shape[0], dtype=np.int64)
        mine = edge_owner == rank
        src[mine] = graph.indices[positions[mine]]
        if not mine.all():
            theirs = np.flatnonzero(~mine)
            src[theirs] = graph.read_in_edges(edge_owner[theirs], positions[theirs])
        eids = graph.edge_book.node_starts[edge_owner] + positions
        return counts, src, eids, degree

    def _row_weights(self, graph, begin, degree, owners, rank):
        """Every candidate edge's weight, row after row (remote rows through the window)."""
        from hpcgnn import _csr

        positions = _csr.expand_ranges(begin, degree)
        if owners is None:
            owners = np.full(begin.shape[0], rank, dtype=np.int64)
        eids = graph.edge_book.node_starts[np.repeat(owners, degree)] + positions
        return graph.edata[self.prob].gather(eids).astype(np.float64, copy=False).reshape(-1)
