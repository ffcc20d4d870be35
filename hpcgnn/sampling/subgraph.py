"""What the subgraph samplers (Cluster-GCN, GraphSAINT) share: the graph a rank's part induces
(the in-edges whose source it also owns, in local ids) and the batch of a node subset of it.

A subgraph batch runs every layer but the input layer on the subgraph its nodes induce: each
such block is that subgraph, the loss nodes placed first so the last block's destinations are
exactly them. The input layer aggregates every in-neighbour of the batch's nodes, inside the
batch or not, on this rank or another (their features are read through the windows, as any
sampler's are; the adjacency is this rank's own). Without it the edges between parts were never
trained on, and they are not a random share of a node's neighbourhood: METIS keeps each part's
dense regions together, so on graphs with planted classes (``bench/sampler_defaults.py``) the
edges inside a part joined nodes of one class 72% (RMAT) and 73% (SBM) of the time, those across
the cut 2% and 27%. A model trained on in-part neighbourhoods only met far less mixed ones in
evaluation: Cluster-GCN's whole-part batches were 3.7 points below full neighbourhoods on the
SBM graph, 1.2 with the whole input layer; its old fixed sizes 4.3 below on the RMAT graph, 0.2.

How large a batch must be depends on the graph, not on a fixed count. A node aggregates only
its in-neighbours inside the batch, while evaluation aggregates all of them: a batch that keeps
a node 2 of its 30 neighbours trains a model on neighbourhoods unlike the ones it is evaluated
on. A fixed count that suits one graph is a quarter of the part of a graph of its size and a
tenth of that of a graph four times larger: saint-node's 1,000 draws, the old default, lost 5.7
points on the 30k-node SBM graph of ``bench/sampler_defaults.py``, its ``auto`` budget 1.0. So the
samplers size their batches by the share of a node's in-part neighbourhood a batch holds
(:func:`target_share`): :data:`_TARGET_DEGREE` neighbours of the part's mean in-degree (the
first layer's fanout of the default neighbour sampler), or :data:`_TARGET_SHARE` of them where
the part is sparser than 2 x :data:`_TARGET_DEGREE` (where every batch would otherwise be most of
the part). A batch also holds at least :data:`TARGET_SEEDS` of the rank's loss (training) nodes,
or all of them where it has fewer, as many as a step of the default neighbour sampler trains on
(:func:`target_seeds`): on a 30k-node graph with 20 labelled nodes per class, at one rank,
batches that held an eighth of them lost 1.1 points (Cluster-GCN) and a twelfth 3.5 (saint-node)
against full neighbourhoods, whole-part batches none. On such graphs the ``auto`` batch is the
whole part.
"""
from __future__ import annotations

import sys

import numpy as np

from hpcgnn import _csr
from hpcgnn.sampling.block import Block, MiniBatch

#: an ``auto``-sized batch holds this many of a node's in-part neighbours (of the mean degree) ...
_TARGET_DEGREE = 10.0
#: ... or this share of them, where that is fewer
_TARGET_SHARE = 0.5
#: an ``auto``-sized batch holds at least this many loss nodes (``hpcgnn train``'s default
#: --batch-size), or every one of the rank's where it has fewer
TARGET_SEEDS = 1000


def target_share(local) -> float:
    """Local. The share of a node's in-part in-neighbours an ``auto``-sized batch of ``local`` (a
    :class:`LocalGraph`) holds on average: ``_TARGET_DEGREE / mean in-part degree``, at most
    :data:`_TARGET_SHARE`; 0 for a part without edges."""
    degree = local.mean_degree
    return 0.0 if degree == 0 else min(_TARGET_SHARE, _TARGET_DEGREE / degree)


def target_seeds(local) -> int:
    """Local. The loss nodes an ``auto``-sized batch of ``local`` holds at least:
    ``min(TARGET_SEEDS, the part's loss nodes)``."""
    return int(min(TARGET_SEEDS, int(local.is_seed.sum())))


def agreed_share(share, comm) -> float:
    """Collective over comm. The largest of every rank's ``share`` (of its part a batch needs): every
    rank sizes its batches by it, so every rank's batches cover alike shares of their parts and
    the ranks' step counts stay close."""
    from hpcgnn.runtime.comm import mpi  # deferred: import hpcgnn never initialises MPI

    return float(comm.allreduce(float(share), op=mpi().MAX))


def sizes_note(local, share, loss_nodes) -> str:
    """Local. What a batch holds, in words, for the run's start line: ``share`` of a node's in-part
    neighbours, ``loss_nodes`` loss nodes, and the share of in-edges the part itself holds."""
    return (f"a batch holds {share:.0%} of a node's {local.mean_degree:.1f} in-part neighbours and "
            f"{loss_nodes:,.0f} of {int(local.is_seed.sum()):,} loss nodes; {1 - local.in_part_share:.0%} of in-edges "
            "cross to other parts and reach the input layer only")


def size_warning(comm, flags, local, share, loss_nodes):
    """Local. On rank 0, warn (one line on stderr) when batches of the sizes a user set with
    ``flags`` hold under half the :func:`target_share` of their nodes' neighbourhoods or under
    half the :func:`target_seeds` loss nodes that ``auto`` sizes hold."""
    share_wanted, seeds_wanted = target_share(local), target_seeds(local)
    if comm.rank == 0 and (share < 0.5 * share_wanted or loss_nodes < 0.5 * seeds_wanted):
        print(f"hpcgnn: warning: {flags}: {sizes_note(local, share, loss_nodes)}; 'auto' sizes hold "
              f"{share_wanted:.0%} and {seeds_wanted:,}: batches this small train on neighbourhoods unlike the "
              "whole ones evaluation reads, or on few loss nodes a step", file=sys.stderr, flush=True)


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
        #: the share of the owned nodes' in-edges whose source is owned too (the rest cross the cut)
        self.in_part_share = float(inside.mean()) if inside.size else 1.0
        self.eids = int(graph.local_edges[0]) + np.flatnonzero(inside)
        self.is_seed = (np.ones(n, dtype=bool) if seed_mask is None
                        else np.asarray(graph.ndata[seed_mask].local).astype(bool))
        self._position = np.full(n, -1, dtype=np.int64)  # scratch of induced(): each node's place in a subset
        # the whole in-neighbourhoods (sources in global ids, other parts' included), for the input layer
        self._all_indptr, self._all_indices = indptr, graph.indices
        self._first_eid = int(graph.local_edges[0])

    @property
    def num_nodes(self) -> int:
        return int(self.indptr.shape[0] - 1)

    @property
    def mean_degree(self) -> float:
        """Local. In-part edges per local node (0 for an empty part)."""
        return float(self.indices.shape[0] / max(self.num_nodes, 1))

    def source_share(self, nodes) -> float:
        """Local. The share of the part's in-edges whose source is in ``nodes`` (local ids): of a
        uniformly chosen node, the share of its in-part neighbours the subset holds, on average
        (more when the subset was drawn to hold neighbours together, as clusters and walks are)."""
        if self.indices.shape[0] == 0:
            return 0.0
        inside = np.zeros(self.num_nodes, dtype=bool)
        inside[nodes] = True
        return float(inside[self.indices].mean())

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

    def batch(self, nodes, num_layers, edge_weight=None, whole_input=True) -> MiniBatch:
        """Local. The MiniBatch running ``num_layers`` layers on the subgraph ``nodes`` induces;
        ``edge_weight`` (optional, float32, one per edge slot of this graph) weighs its edges.
        With ``whole_input`` (the samplers' way) the first layer aggregates every in-neighbour of
        the batch's nodes instead, unweighted (``input_gids``: the batch's nodes, then the other
        sources in id order); without, the subgraph too."""
        order, indptr, src_pos, slots = self.induced(nodes)
        m, t = order.shape[0], int(self.is_seed[order].sum())
        weight = None if edge_weight is None else edge_weight[slots]
        eids = self.eids[slots]
        whole = Block(m, m, indptr, src_pos, eids, edge_weight=weight)
        last = Block(m, t, indptr[:t + 1], src_pos[:indptr[t]], eids[:indptr[t]],
                     edge_weight=None if weight is None else weight[:indptr[t]])
        blocks = [whole] * (num_layers - 1) + [last]
        input_gids = self.start + order
        if whole_input:
            first, input_gids = self._whole_input_block(order, t if num_layers == 1 else m)
            blocks[0] = first
        return MiniBatch(seed_gids=self.start + order[:t], input_gids=input_gids, blocks=blocks)

    def _whole_input_block(self, order, num_dst):
        """The block of every in-edge of ``order[:num_dst]`` (local ids) from the graph's CSC, and
        its source gids: ``order`` first, then the other sources (sorted)."""
        dst = order[:num_dst]
        begin = self._all_indptr[dst]
        degree = self._all_indptr[dst + 1] - begin
        sources = _csr.gather_ranges(self._all_indices, begin, degree)
        eids = _csr.expand_ranges(begin + self._first_eid, degree)
        local = sources - self.start
        position = np.full(sources.shape[0], -1, dtype=np.int64)
        inside = (local >= 0) & (local < self.num_nodes)
        self._position[order] = np.arange(order.shape[0])
        try:
            position[inside] = self._position[local[inside]]
        finally:
            self._position[order] = -1
        outside = position < 0
        others, where = np.unique(sources[outside], return_inverse=True)
        position[outside] = order.shape[0] + where
        indptr = np.zeros(num_dst + 1, dtype=np.int64)
        np.cumsum(degree, out=indptr[1:])
        block = Block(order.shape[0] + others.shape[0], num_dst, indptr, position, eids)
        return block, np.concatenate([self.start + order, others])
