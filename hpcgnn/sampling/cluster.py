"""Cluster-GCN (Chiang et al. 2019) on a partitioned graph: batches of whole clusters.

Each rank splits the nodes it owns into ``num_clusters`` clusters with METIS, once, over the
undirected graph its part induces (edges whose both ends it owns). A batch is ``q`` of its
clusters (``--clusters-per-batch``; the loader's seeds are cluster ids, so every rank takes the
same number of steps as with seed nodes), and the model runs on the subgraph the union of those
clusters induces, edges between two of the batch's clusters included: every layer's block is
that subgraph, so no node outside the batch is read and no byte crosses the network. The
subgraph's own degrees normalise the aggregation (GCN's ``D^-1/2 (A + I) D^-1/2`` of the
subgraph, SAGE's mean over the neighbours in the batch), as in the paper. The loss is taken on
the batch's training nodes: the last block's destinations, placed first in the node list.

Clusters never span two ranks, so the edges between parts are never trained on; with many
clusters per rank and a good partition they are few (the partition's edge cut).
"""
from __future__ import annotations

import numpy as np

from hpcgnn import _csr
from hpcgnn.prep.metis import part_graph_kway
from hpcgnn.sampling.block import MiniBatch
from hpcgnn.sampling.subgraph import LocalGraph


class ClusterSampler:
    """Local. Batches of METIS clusters of this rank's nodes, as induced subgraphs.

    Parameters
    ----------
    graph : DistGraph
        Its local CSC is clustered at construction.
    num_layers : int
        Blocks per batch (the model's layers).
    num_clusters : int
        Clusters of this rank's nodes (capped at its node count). The loader's seed ids are
        ``range(num_clusters)`` (:attr:`cluster_ids`).
    seed_mask : str or None
        Node field marking the nodes the loss is taken on (``train_mask``); None: every node.
    seed : int
        METIS's seed: the same graph, rank count and seed give the same clusters.
    """

    def __init__(self, graph, num_layers, num_clusters, seed_mask="train_mask", seed=0):
        if num_layers < 1 or num_clusters < 1:
            raise ValueError(f"num_layers and num_clusters must be positive, got {num_layers}, {num_clusters}")
        self.num_layers = int(num_layers)
        self.local = LocalGraph(graph, seed_mask)
        n = self.local.num_nodes
        self.num_clusters = max(1, min(int(num_clusters), n))
        self.cluster = self._clusters(n, seed)
        order = np.argsort(self.cluster, kind="stable")
        self._members = np.split(order, np.searchsorted(self.cluster[order], np.arange(1, self.num_clusters)))

    def _clusters(self, n, seed) -> np.ndarray:
        """The cluster of every local node: METIS k-way on the induced undirected graph."""
        if self.num_clusters == 1:
            return np.zeros(n, dtype=np.int64)
        xadj, adjncy = _csr.symmetric_adjacency(self.local.indptr, self.local.indices, n)
        return part_graph_kway(xadj, adjncy, self.num_clusters, seed=seed)

    @property
    def cluster_ids(self) -> np.ndarray:
        """Local. The loader's seed ids: one per cluster."""
        return np.arange(self.num_clusters, dtype=np.int64)

    def cluster_sizes(self) -> np.ndarray:
        """Local. Nodes per cluster."""
        return np.array([m.shape[0] for m in self._members], dtype=np.int64)

    def sample(self, graph, seed_gids, seed=None) -> MiniBatch:
        """Local. The subgraph induced by the clusters ``seed_gids`` (cluster ids, not node ids);
        ``seed`` is unused (a batch is its clusters)."""
        clusters = np.asarray(seed_gids, dtype=np.int64).reshape(-1)
        nodes = np.concatenate([self._members[c] for c in clusters]) if clusters.size else np.zeros(0, np.int64)
        return self.local.batch(nodes, self.num_layers)
