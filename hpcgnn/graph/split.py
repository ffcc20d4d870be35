"""Which rank trains on which nodes: ``node_split`` (room for ``edge_split`` beside it)."""
from __future__ import annotations

import numpy as np

from hpcgnn.graph.dist_graph import DistGraph
from hpcgnn.runtime.collectives import allgather_int, exchange
from hpcgnn.runtime.rng import generator
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
    counts = allgather_int(mine.shape[0], comm)
    total, size = int(counts.sum()), comm.size
    targets = total // size + (np.arange(size) < total % size)
    rng = generator(seed, "node_split", comm.rank)
    keep = np.sort(rng.permutation(mine)[: min(mine.shape[0], int(targets[comm.rank]))])
    give = np.setdiff1d(mine, keep, assume_unique=True)
    # the surplus of all ranks, laid end to end in rank order, fills the deficits in rank order
    give_at = np.concatenate([[0], np.cumsum(np.maximum(counts - targets, 0))])
    take_at = np.concatenate([[0], np.cumsum(np.maximum(targets - counts, 0))])
    send_counts = np.clip(np.minimum(give_at[comm.rank + 1], take_at[1:])
                          - np.maximum(give_at[comm.rank], take_at[:-1]), 0, None)
    recv_counts = np.clip(np.minimum(take_at[comm.rank + 1], give_at[1:])
                          - np.maximum(take_at[comm.rank], give_at[:-1]), 0, None)
    received = exchange(comm, give, send_counts, recv_counts)
    return np.sort(np.concatenate([keep, received]))


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
