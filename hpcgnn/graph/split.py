"""Which rank trains on which seeds: ``node_split`` (nodes) and ``edge_split`` (edges, for link
prediction). Both keep a rank's own seeds first and even the counts out over the ranks."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from hpcgnn.graph.dist_graph import DistGraph
from hpcgnn.runtime.collectives import allgather_int, exchange
from hpcgnn.runtime.rng import derive_seed, generator, unit_uniform
from hpcgnn.store.dist_tensor import DistTensor


def node_split(mask, graph: DistGraph, comm=None, seed=0) -> np.ndarray:
    """Collective over comm. This rank's share of the nodes selected by ``mask``.

    Each rank first takes the selected nodes it owns (locality: their features and first hop
    are local), then the counts are evened out: ranks with more than their share hand a seeded
    random subset of their surplus to the ranks short of it, in rank order. The result:
    disjoint, covering every selected node, lengths differing by at most one (equal when the
    count divides evenly), deterministic for a seed.

    Parameters
    ----------
    mask : str, DistTensor or ndarray
        Name of a boolean node field of ``graph``, a boolean DistTensor, or a boolean array over
        all nodes or over this rank's nodes.
    graph : DistGraph
    comm : MPI communicator, optional
        Default: the graph's.
    seed : int

    Returns
    -------
    ndarray of int64
        Sorted global ids.
    """
    comm = comm if comm is not None else graph.comm
    mine = graph.local_nodes[0] + np.flatnonzero(_local_mask(mask, graph))
    return np.sort(_even_out(mine, comm, seed, "node_split"))


def _even_out(mine, comm, seed, purpose) -> np.ndarray:
    """Collective over comm. Rows of ``mine`` (this rank's own seeds, one per row) redistributed so
    every rank holds the same count (differing by at most one): ranks with more than their share
    keep a seeded random subset and hand the rest to the ranks short of it, in rank order."""
    counts = allgather_int(mine.shape[0], comm)
    total, size = int(counts.sum()), comm.size
    targets = total // size + (np.arange(size) < total % size)
    rng = generator(seed, purpose, comm.rank)
    order = rng.permutation(mine.shape[0])
    keep_rows = np.sort(order[: min(mine.shape[0], int(targets[comm.rank]))])
    give_rows = np.setdiff1d(np.arange(mine.shape[0]), keep_rows, assume_unique=True)
    # the surplus of all ranks, laid end to end in rank order, fills the deficits in rank order
    give_at = np.concatenate([[0], np.cumsum(np.maximum(counts - targets, 0))])
    take_at = np.concatenate([[0], np.cumsum(np.maximum(targets - counts, 0))])
    send_counts = np.clip(np.minimum(give_at[comm.rank + 1], take_at[1:])
                          - np.maximum(give_at[comm.rank], take_at[:-1]), 0, None)
    recv_counts = np.clip(np.minimum(take_at[comm.rank + 1], give_at[1:])
                          - np.maximum(take_at[comm.rank], give_at[:-1]), 0, None)
    received = exchange(comm, mine[give_rows], send_counts, recv_counts)
    return np.concatenate([mine[keep_rows], received])


class SeedEdges(NamedTuple):
    """Local. A rank's training edges, sorted by global edge id: edge ``eids[i]`` runs
    ``src[i] -> dst[i]`` (global node ids)."""

    eids: np.ndarray
    src: np.ndarray
    dst: np.ndarray

    def lookup(self, eids) -> tuple[np.ndarray, np.ndarray]:
        """Local. ``(src, dst)`` of some of these edges, by global edge id."""
        rows = np.searchsorted(self.eids, eids)
        return self.src[rows], self.dst[rows]


def edge_split(graph: DistGraph, comm=None, seed=0, undirected=None) -> SeedEdges:
    """Collective over comm. This rank's share of the training edges (link prediction).

    The training edges are the message-passing graph's (held-out validation and test edges are
    not in it: ``hpcgnn partition --edge-split``). Of an undirected dataset (both directions
    stored) each edge is one training edge, its ``src < dst`` direction; self loops are never one.
    Each rank first takes the edges it stores (the in-edges of its nodes: both endpoints'
    first hop is then at hand), then the counts are evened out as :func:`node_split` does, so
    every rank has the same number of training edges (differing by at most one).

    Parameters
    ----------
    graph : DistGraph
    comm : MPI communicator, optional
        Default: the graph's.
    seed : int
    undirected : bool, optional
        Default: what the dataset's edge sets say (``meta.json`` ``link.symmetric``), else False.
    """
    comm = comm if comm is not None else graph.comm
    if undirected is None:
        undirected = bool((getattr(graph, "link_meta", None) or {}).get("symmetric", False))
    dst = graph.local_nodes[0] + np.repeat(np.arange(graph.indptr.shape[0] - 1, dtype=np.int64),
                                           np.diff(graph.indptr))
    src = graph.indices.astype(np.int64)
    keep = src < dst if undirected else np.ones(src.shape[0], dtype=bool)
    positions = np.flatnonzero(keep)
    mine = np.stack([graph.local_edges[0] + positions, src[positions], dst[positions]], axis=1)
    rows = _even_out(mine, comm, seed, "edge_split")
    rows = rows[np.argsort(rows[:, 0], kind="stable")]
    return SeedEdges(rows[:, 0].copy(), rows[:, 1].copy(), rows[:, 2].copy())


def fold_of_nodes(graph: DistGraph, pool, folds, seed=0, comm=None) -> np.ndarray:
    """Collective over comm. The cross-validation fold (0 .. folds - 1) of each of this rank's
    nodes in ``pool``, -1 for the others.

    The pool's nodes are ordered by label (a multi-label ``[N, C]`` label or none: one class), then
    by a seeded hash of each node's original id, and dealt out to the folds in turn: every fold
    holds each class's share to within one node (stratified), and the assignment depends only on
    the seed and the input's node ids, not on the rank count or the partitioning.

    Parameters
    ----------
    graph : DistGraph
    pool : str, DistTensor or ndarray
        The nodes to fold, as :func:`node_split`'s ``mask``.
    folds : int
        Number of folds (at least 2).
    seed : int
    comm : MPI communicator, optional
        Default: the graph's.
    """
    comm = comm if comm is not None else graph.comm
    rows = np.flatnonzero(_local_mask(pool, graph))
    label = graph.ndata.get("label")
    classes = (label.local[rows].astype(np.int64) if label is not None and len(label.shape) == 1
               else np.zeros(rows.shape[0], dtype=np.int64))
    orig_ids = graph.orig_id[rows]
    gathered = comm.allgather((classes, orig_ids))
    all_classes = np.concatenate([c for c, _ in gathered])
    all_ids = np.concatenate([i for _, i in gathered])
    order = np.lexsort((all_ids, unit_uniform(all_ids.astype(np.uint64), derive_seed(seed, "folds")), all_classes))
    fold_by_entry = np.empty(all_ids.shape[0], dtype=np.int64)
    fold_by_entry[order] = np.arange(all_ids.shape[0]) % folds
    start = sum(c.shape[0] for c, _ in gathered[:comm.rank])
    fold = np.full(graph.local_nodes[1] - graph.local_nodes[0], -1, dtype=np.int64)
    fold[rows] = fold_by_entry[start:start + rows.shape[0]]
    return fold


def _local_mask(mask, graph) -> np.ndarray:
    """This rank's rows of ``mask`` (see :func:`node_split`) as a boolean array."""
    start, end = graph.local_nodes
    if isinstance(mask, str):
        local_mask = graph.ndata[mask].local
    elif isinstance(mask, DistTensor):
        local_mask = mask.local
    else:
        mask = np.asarray(mask)
        local_mask = mask[start:end] if mask.shape[0] == graph.num_nodes else mask
    if local_mask.shape[0] != end - start:
        raise ValueError(f"mask has {local_mask.shape[0]} rows, expected {graph.num_nodes} or {end - start}")
    return np.asarray(local_mask).astype(bool)
