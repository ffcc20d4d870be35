"""What the subgraph samplers (Cluster-GCN, GraphSAINT) share: the graph a rank's part induces
(the in-edges whose source it also owns, in local ids) and the batch of a node subset of it.

A subgraph batch runs every layer on the subgraph its nodes induce: each block is that
subgraph, the loss nodes placed first so the last block's destinations are exactly them.
Nothing is read from another rank: a subgraph sampler trains on each part's own edges.
"""
from __future__ import annotations

import numpy as np

from hpcgnn import _csr
from hpcgnn.sampling.block import Block, MiniBatch


class LocalGraph:
    """Local. The subgraph of a DistGraph that this rank's nodes induce, in local ids.

    Attributes
    ----------
    start : int
        Global id of local node 0.
    indptr, indices : ndarray of int64
        CSC over the local nodes: the in-edges of local node ``v`` whose source is local,
        sources ``indices[indptr[v]:indptr[v+1]]`` (local ids).
    eids : ndarray of int64
        The global edge id of every such edge.
    is_seed : ndarray of bool
        The nodes a batch's loss is taken on (the ``seed_mask`` field; every node without one).
    """

    def __init__(self, graph, seed_mask="train_mask"):
        self.start, end = (int(x) for x in graph.local_nodes)
        n = end - self.start
        indptr = np.asarray(graph.indptr, dtype=np.int64)
        sources = np.asarray(graph.indices, dtype=np.int64)
        inside = (sources >= self.start) & (sources < end)
        dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))[inside]
        self.indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(dst, minlength=n), out=self.indptr[1:])
        self.indices = sources[inside] - self.start
        self.eids = int(graph.local_edges[0]) + np.flatnonzero(inside)
        self.is_seed = (np.ones(n, dtype=bool) if seed_mask is None
                        else np.asarray(graph.ndata[seed_mask].local).astype(bool))
        self._position = np.full(n, -1, dtype=np.int64)  # scratch of induced(): each node's place in a subset

    @property
    def num_nodes(self) -> int:
        return int(self.indptr.shape[0] - 1)

    @property
    def in_degree(self) -> np.ndarray:
        """Local. In-degree of every local node within the part."""
        return np.diff(self.indptr)

    def dst_of_edges(self) -> np.ndarray:
        """Local. The destination (local id) of every edge slot."""
        return np.repeat(np.arange(self.num_nodes, dtype=np.int64), self.in_degree)

    def induced(self, nodes):
        """Local. The subgraph ``nodes`` (unique local ids) induces: ``(order, indptr, src_pos,
        slots)``: the nodes with the loss nodes first (``is_seed``, each group in id order), a CSC
        over ``order`` whose sources are positions in ``order``, and each edge's slot in this
        graph's CSC (``indices``/``eids`` index). One thread at a time (it uses a scratch array
        of the part's size; a loader samples on one thread)."""
        nodes = np.sort(np.asarray(nodes, dtype=np.int64))
        order = np.concatenate([nodes[self.is_seed[nodes]], nodes[~self.is_seed[nodes]]])
        position = self._position
        position[order] = np.arange(order.shape[0])
        try:
            indptr, src_pos, slots = _csr.induced_edges(self.indptr, self.indices, order, position)
        finally:
            position[order] = -1  # kept all -1 between calls: no O(part) fill per subgraph
        return order, indptr, src_pos, slots

    def batch(self, nodes, num_layers, edge_weight=None) -> MiniBatch:
        """Local. The MiniBatch running ``num_layers`` layers on the subgraph ``nodes`` induces;
        ``edge_weight`` (optional, float32, one per edge slot of this graph) weighs its edges."""
        order, indptr, src_pos, slots = self.induced(nodes)
        m, t = order.shape[0], int(self.is_seed[order].sum())
        weight = None if edge_weight is None else edge_weight[slots]
        eids = self.eids[slots]
        whole = Block(m, m, indptr, src_pos, eids, edge_weight=weight)
        last = Block(m, t, indptr[:t + 1], src_pos[:indptr[t]], eids[:indptr[t]],
                     edge_weight=None if weight is None else weight[:indptr[t]])
        return MiniBatch(seed_gids=self.start + order[:t], input_gids=self.start + order,
                         blocks=[whole] * (num_layers - 1) + [last])
