"""Cluster-GCN (Chiang et al. 2019) on a partitioned graph: batches of whole clusters.

Each rank splits the nodes it owns into ``num_clusters`` clusters with METIS, once, over the
undirected graph its part induces (edges whose both ends it owns). A batch is ``q`` of its
clusters (``--clusters-per-batch``; the loader's seeds are cluster ids, so every rank takes the
same number of steps as with seed nodes), and the model runs on the subgraph the union of those
clusters induces, edges between two of the batch's clusters included (the paper's stochastic
multiple partitions): every layer's block above the input layer is that subgraph, normalised by
the subgraph's own degrees (GCN's ``D^-1/2 (A + I) D^-1/2`` of the subgraph, SAGE's mean over
the neighbours in the batch), as in the paper. The input layer aggregates every in-neighbour of
the batch's nodes, other clusters' and other ranks' too (their features read through the
windows; GCN with the graph's degrees): :mod:`~.subgraph` says why. The loss is taken on the
batch's training nodes: the last block's destinations, placed first in the node list.

Sizes (``auto`` by default, see :mod:`~.subgraph`): ``num_clusters`` gives clusters of about
:data:`CLUSTER_NODES` nodes (small clusters, many per batch: a batch mixes many parts of the
graph, as the paper's multiple partitions do), and ``q`` is the fewest clusters whose batch
holds :func:`~.subgraph.target_share` of its nodes' in-part neighbours on average, computed
exactly from the clusters: an in-part edge inside a cluster is always in the batch, an edge
between two clusters is with probability ``(q - 1) / (C - 1)`` once its destination's cluster
is; and at least :func:`~.subgraph.target_seeds` of the rank's loss nodes, ``T q / C`` in
expectation. The ranks then agree on the largest share ``q / C`` of its clusters any of them needs.

Clusters never span two ranks, so above the input layer the edges between parts (the
partition's cut) are not trained on.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hpcgnn import _csr
from hpcgnn._metis import part_graph_kway
from hpcgnn.runtime.flags import MAX_COUNT, MAX_PARTS, Domain
from hpcgnn.runtime.options import option
from hpcgnn.sampling.block import MiniBatch
from hpcgnn.sampling.registry import SUBGRAPH_BATCHES, SamplerSpec, register_sampler
from hpcgnn.sampling.subgraph import LocalGraph, agreed_share, size_warning, sizes_note, target_seeds, target_share

#: nodes per cluster with ``--num-clusters auto`` (the paper's Reddit and Amazon2M runs: 150-160)
CLUSTER_NODES = 128
AUTO = "auto"


class ClusterSampler:
    """Collective over graph.comm (construction; every method is Local). Batches of METIS clusters
    of this rank's nodes, as induced subgraphs.

    Parameters
    ----------
    graph : DistGraph
        Its local CSC is clustered at construction.
    num_layers : int
        Blocks per batch (the model's layers).
    num_clusters : int or "auto"
        Clusters of this rank's nodes (capped at its node count); ``"auto"``: about
        :data:`CLUSTER_NODES` nodes each. The loader's seed ids are ``range(num_clusters)``
        (:attr:`cluster_ids`).
    seed_mask : str or None
        Node field marking the nodes the loss is taken on (``train_mask``); None: every node.
    seed : int
        METIS's seed: the same graph, rank count and seed give the same clusters.
    clusters_per_batch : int or "auto"
        Clusters per batch (:attr:`clusters_per_batch`, capped at the cluster count); ``"auto"``:
        as many as hold :func:`~.subgraph.target_share` of a node's in-part neighbours and
        :func:`~.subgraph.target_seeds` loss nodes (see the module docstring).
    input_degrees : bool
        Give each batch the graph in-degrees of its input nodes (``MiniBatch.input_degree``: GCN
        normalises its input layer by them).
    """

    def __init__(self, graph, num_layers, num_clusters=AUTO, seed_mask="train_mask", seed=0,
                 clusters_per_batch=AUTO, input_degrees=False):
        for name, value in (("num_clusters", num_clusters), ("clusters_per_batch", clusters_per_batch)):
            if value != AUTO and int(value) < 1:
                raise ValueError(f"{name} must be positive or 'auto', got {value!r}")
        if num_layers < 1:
            raise ValueError(f"num_layers must be positive, got {num_layers}")
        self.num_layers, self.input_degrees = int(num_layers), bool(input_degrees)
        self.local = LocalGraph(graph, seed_mask)
        n = self.local.num_nodes
        wanted = -(-n // CLUSTER_NODES) if num_clusters == AUTO else int(num_clusters)
        self.num_clusters = max(1, min(wanted, n))
        self.cluster = self._clusters(n, seed)
        order = np.argsort(self.cluster, kind="stable")
        self._members = np.split(order, np.searchsorted(self.cluster[order], np.arange(1, self.num_clusters)))
        self.target_share = target_share(self.local)
        if clusters_per_batch == AUTO:
            share = agreed_share(self._clusters_for(self.target_share, target_seeds(self.local)) / self.num_clusters,
                                 graph.comm)
            self.clusters_per_batch = max(1, min(self.num_clusters, int(np.ceil(share * self.num_clusters - 1e-9))))
        else:
            self.clusters_per_batch = max(1, min(int(clusters_per_batch), self.num_clusters))
        self.batch_share = self.expected_share(self.clusters_per_batch)
        self.batch_seeds = self.local.is_seed.sum() * self.clusters_per_batch / self.num_clusters
        if AUTO not in (num_clusters, clusters_per_batch):
            size_warning(graph.comm, f"--clusters-per-batch {clusters_per_batch} of --num-clusters {num_clusters}",
                         self.local, self.batch_share, self.batch_seeds)

    def _clusters(self, n, seed) -> np.ndarray:
        """The cluster of every local node: METIS k-way on the induced undirected graph."""
        if self.num_clusters == 1:
            return np.zeros(n, dtype=np.int64)
        xadj, adjncy = _csr.symmetric_adjacency(self.local.indptr, self.local.indices, n)
        return part_graph_kway(xadj, adjncy, self.num_clusters, seed=seed)

    def _edge_counts(self) -> tuple[int, int]:
        """In-part edges inside one cluster, and between two clusters."""
        inside = int((self.cluster[self.local.indices] == self.cluster[self.local.dst_of_edges()]).sum())
        return inside, int(self.local.indices.shape[0]) - inside

    def expected_share(self, clusters_per_batch) -> float:
        """Local. The share of its nodes' in-part in-edges a batch of ``clusters_per_batch``
        clusters drawn uniformly holds, in expectation (exact: see the module docstring); 0 for a
        part without edges."""
        inside, between = self._edge_counts()
        c, q = self.num_clusters, min(int(clusters_per_batch), self.num_clusters)
        kept = inside + (between * (q - 1) / (c - 1) if c > 1 else 0.0)
        return float(kept / max(inside + between, 1))

    def _clusters_for(self, share, seeds) -> int:
        """The fewest clusters per batch whose batch holds ``share`` of its nodes' in-part in-edges
        and ``seeds`` loss nodes, in expectation."""
        inside, between = self._edge_counts()
        c, wanted = self.num_clusters, share * (inside + between)
        total_seeds = int(self.local.is_seed.sum())
        for_seeds = int(np.ceil(c * seeds / total_seeds - 1e-9)) if total_seeds else 1
        if c == 1 or inside >= wanted or between == 0:
            for_edges = 1
        else:
            for_edges = int(1 + np.ceil((wanted - inside) * (c - 1) / between - 1e-9))
        return max(1, min(c, max(for_edges, for_seeds)))

    @property
    def cluster_ids(self) -> np.ndarray:
        """Local. The loader's seed ids: one per cluster."""
        return np.arange(self.num_clusters, dtype=np.int64)

    def cluster_sizes(self) -> np.ndarray:
        """Local. Nodes per cluster."""
        return np.array([m.shape[0] for m in self._members], dtype=np.int64)

    def loader_seeds(self) -> tuple:
        """Local. The loader's seeds and seeds per batch: cluster ids, ``clusters_per_batch`` at a time."""
        return self.cluster_ids, self.clusters_per_batch

    def describe(self) -> str:
        """Local. The sizes in words, for the run's start line."""
        return (f"Cluster-GCN {self.num_clusters} clusters, {self.clusters_per_batch} per batch ("
                f"{sizes_note(self.local, self.batch_share, self.batch_seeds)})")

    def sample(self, graph, seed_gids, seed=None) -> MiniBatch:
        """Local. The subgraph induced by the clusters ``seed_gids`` (cluster ids, not node ids);
        ``seed`` is unused (a batch is its clusters)."""
        clusters = np.asarray(seed_gids, dtype=np.int64).reshape(-1)
        nodes = np.concatenate([self._members[c] for c in clusters]) if clusters.size else np.zeros(0, np.int64)
        batch = self.local.batch(nodes, self.num_layers)
        if self.input_degrees:  # GCN's input layer: the graph degrees of its sources, other ranks' too
            batch.input_degree = graph.in_degrees(batch.input_gids)
        return batch


#: a subgraph sampler's 'auto' size (hpcgnn.sampling.subgraph)
_AUTO_SIZE = {AUTO: "sized from the graph"}


@dataclass(frozen=True)
class ClusterOptions:
    """Local. ``--sampler cluster`` (Cluster-GCN): clusters of each rank's nodes, and per batch."""

    num_clusters: object = option(AUTO, "clusters of each rank's nodes (an epoch is C / Q steps); auto: about "
                                  f"{CLUSTER_NODES} nodes each", type=Domain(int, ge=1, le=MAX_PARTS, words=_AUTO_SIZE))
    clusters_per_batch: object = option(AUTO, "clusters per batch (Cluster-GCN's q); auto: as many as keep a batch's "
                                        "nodes 10 in-batch neighbours on average (half their in-part ones where fewer)",
                                        type=Domain(int, ge=1, le=MAX_COUNT, words=_AUTO_SIZE))


register_sampler(SamplerSpec(
    "cluster", ClusterOptions,
    build=lambda graph, options, run: ClusterSampler(graph, run.layers, options.num_clusters, "train_mask",
                                                     seed=run.seed, clusters_per_batch=options.clusters_per_batch,
                                                     input_degrees=run.input_degrees),
    summary="Cluster-GCN, batches of --clusters-per-batch METIS clusters of each rank's nodes, the model on the "
            "subgraph they induce", requires=SUBGRAPH_BATCHES, subgraph=True))
