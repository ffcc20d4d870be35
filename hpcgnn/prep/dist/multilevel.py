"""Multilevel partitioning with the graph spread over the ranks (``--method multilevel``).

1. Coarsen: size-constrained label propagation clusters the vertices (each joins the
   neighbouring cluster it is most connected to, if that cluster stays under a weight limit
   in every balance column), and the clusters become the vertices of the next level, their
   edges merged with summed weights. Repeated until the graph has at most ``coarse_nodes``
   vertices or stops shrinking.
2. The coarsest graph is gathered on rank 0 and partitioned by METIS with the same balance
   constraints as the serial path (vertex weights summed over each cluster, edge weights the
   number of fine edges between two clusters, so the coarse cut is the fine cut).
3. Uncoarsen: every level takes its clusters' parts and refines them with label propagation
   over the parts: a vertex moves to the part it is most connected to when that cuts fewer
   edges and the target stays within ``(1 + imbalance)`` of the mean in every column. Each
   rank may fill only its share of a part's room, so concurrent moves never overshoot.

Every rank holds its block of each level (edges of its vertices, O((E + N) / K)) and rank 0
also the coarsest graph. Clusters are named by the id of a vertex; that vertex's owner keeps
the cluster's weight and rules on who may join (:func:`~hpcgnn.prep.dist.blocks.ask_owners`).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from hpcgnn import _csr, _partition
from hpcgnn._metis import part_graph_kway
from hpcgnn.prep.dist.blocks import (
    Ghosts,
    add_to_owners,
    ask_owners,
    fetch,
    gathered_starts,
    owner_of,
    send_to_owners,
)
from hpcgnn.runtime.comm import mpi
from hpcgnn.runtime.rng import mix64
from hpcgnn.runtime.stages import silent

DEFAULT_COARSE_NODES = 100_000
DEFAULT_IMBALANCE = 0.03
_CLUSTER_ROUNDS = 4
_REFINE_ROUNDS = 6
#: a level must shrink the graph by at least this factor, or coarsening stops
_MIN_SHRINK = 0.95
_MAX_LEVELS = 30


@dataclass
class Level:
    """Local. This rank's share of an undirected graph with vertex and edge weights: vertices
    ``[starts[rank], starts[rank+1])``, their adjacency as CSR over global neighbour ids."""

    starts: np.ndarray
    indptr: np.ndarray
    adj: np.ndarray
    ewgt: np.ndarray
    vwgt: np.ndarray  # [n_local, ncon]

    @property
    def num_local(self) -> int:
        return int(self.indptr.shape[0] - 1)

    @property
    def num_vertices(self) -> int:
        return int(self.starts[-1])

    def first(self, comm) -> int:
        return int(self.starts[comm.rank])


def undirected_level(comm, starts, src, dst, vwgt, symmetric) -> Level:
    """Collective over comm. The finest level: the undirected simple graph of the edges
    ``src -> dst`` held by the owners of ``dst`` (self loops dropped, every edge weight 1)."""
    first = int(starts[comm.rank])
    keep = src != dst
    rows, cols = dst[keep].astype(np.int64), src[keep].astype(np.int64)  # the kernels take int64
    del keep
    if not symmetric:  # the reverse of every edge, kept by the owner of its source
        back_rows, back_cols = send_to_owners(comm, owner_of(cols, starts), cols, rows)
        rows, cols = np.concatenate([rows, back_rows]), np.concatenate([cols, back_cols])
    level = _merged(starts, first, rows - first, cols, np.ones(rows.shape[0], dtype=np.int64), vwgt)
    level.ewgt[:] = 1  # u -> v and v -> u are one undirected edge, as METIS sees it in the serial path
    return level


def _merged(starts, first, local_rows, cols, weights, vwgt) -> Level:
    n = vwgt.shape[0]
    indptr, cols, perm = _csr.coo_to_csr(local_rows, cols, n)
    weights = weights[perm]
    indptr = _partition.merge_rows(indptr, cols, weights)
    count = int(indptr[-1])
    return Level(starts, indptr, cols[:count].copy(), weights[:count].copy(), vwgt)


def _active(ids, seed, round_):
    """Half of the vertices, a different half each round: neighbours moving at once on stale
    labels would swap places instead of joining."""
    return (mix64(ids.astype(np.uint64) ^ np.uint64((seed * 1_000_003 + round_) & 0xFFFFFFFF)) & np.uint64(1)) == 0


def _grant(local_ids, weights, gains, load, limit):
    """Of requests to add ``weights`` to entries ``local_ids`` of ``load``, grant the highest
    gains first while every column stays within ``limit`` (``[ncon]``, or ``[entries, ncon]``);
    adds the granted ones to ``load``."""
    order = np.lexsort((-gains, local_ids))
    ids, w = local_ids[order], weights[order]
    group_start = np.ones(ids.shape[0], dtype=bool)
    group_start[1:] = ids[1:] != ids[:-1]
    running = np.cumsum(w, axis=0)
    group = np.cumsum(group_start) - 1
    base = np.concatenate([np.zeros((1, w.shape[1]), dtype=running.dtype), running])[np.flatnonzero(group_start)]
    inside = running - base[group]  # the group's own running sum
    cap = limit[ids] if limit.ndim == 2 else limit  # per entry, or one limit for all
    granted_sorted = (load[ids] + inside <= cap).all(axis=1)
    granted = np.empty(ids.shape[0], dtype=bool)
    granted[order] = granted_sorted
    np.add.at(load, local_ids[granted], weights[granted])
    return granted


def cluster(comm, level: Level, limit, seed=0, rounds=_CLUSTER_ROUNDS, ghosts=None) -> np.ndarray:
    """Collective over comm. Size-constrained label propagation: the cluster (a vertex id) of
    every local vertex; no cluster's weight exceeds ``limit`` in any column, unless one vertex
    alone does."""
    first = level.first(comm)
    ids = np.arange(first, first + level.num_local, dtype=np.int64)
    label = ids.copy()
    load = level.vwgt.copy()  # weight of the clusters named by this rank's vertex ids
    ghosts = ghosts or Ghosts(comm, level.adj, level.starts)
    full = np.empty(0, dtype=np.int64)  # clusters that turned a vertex away: not proposed again
    for round_ in range(rounds):
        neighbour_labels = ghosts.pull(label)
        ewgt = level.ewgt
        if full.shape[0]:
            blocked = np.isin(neighbour_labels, full) & (neighbour_labels != np.repeat(label, np.diff(level.indptr)))
            ewgt = np.where(blocked, 0, ewgt)
        best, best_conn, own_conn = _partition.best_labels(level.indptr, neighbour_labels, ewgt, label,
                                                           seed * 7919 + round_)
        movers = np.flatnonzero(_active(ids, seed, round_) & (best >= 0) & (best_conn > own_conn))
        weights = level.vwgt[movers]
        granted = ask_owners(comm, best[movers], level.starts, functools.partial(_grant, load=load, limit=limit),
                             weights, best_conn[movers] - own_conn[movers])
        full = np.union1d(full, best[movers[~granted]])
        moved = movers[granted]
        load += add_to_owners(comm, label[moved], -weights[granted], level.starts)
        label[moved] = best[moved]
    return _group_isolated(level, ids, label, limit)


def _group_isolated(level: Level, ids, label, limit):
    """Vertices without an edge join no cluster by propagation; put a rank's consecutive ones
    together up to about ``limit``, or they would stall the coarsening (METIS can place them
    anywhere)."""
    isolated = np.flatnonzero(np.diff(level.indptr) == 0)
    if isolated.shape[0] < 2:
        return label
    group = (np.cumsum(level.vwgt[isolated], axis=0) // np.maximum(limit, 1)).max(axis=1)
    leader = np.flatnonzero(np.concatenate([[True], group[1:] != group[:-1]]))
    label[isolated] = ids[isolated[leader]][np.cumsum(np.concatenate([[True], group[1:] != group[:-1]])) - 1]
    return label


def _coarse_edges(coarse_id, neighbour_ids, level: Level, num_coarse):
    """The coarse edges of this rank's fine edges, merged here first: most fine edges join a
    pair of clusters another fine edge of this rank already joins, so the exchange (and its
    buffers, the peak of the partitioning's memory) shrinks to the distinct pairs."""
    rows = np.repeat(coarse_id, np.diff(level.indptr))
    keep = rows != neighbour_ids
    rows, cols, weights = rows[keep], neighbour_ids[keep], level.ewgt[keep]
    del keep, neighbour_ids
    indptr, cols, perm = _csr.coo_to_csr(rows, cols, num_coarse)
    del rows
    weights = weights[perm]
    del perm
    indptr = _partition.merge_rows(indptr, cols, weights)
    count = int(indptr[-1])
    rows = np.repeat(np.arange(num_coarse, dtype=np.int64), np.diff(indptr))
    return rows, cols[:count], weights[:count]


def contract(comm, level: Level, label, ghosts) -> tuple[Level, np.ndarray]:
    """Collective over comm. The graph of the clusters, and each local vertex's coarse id.

    Coarse vertices are numbered by the owner of their cluster's name, so rank r's block of
    the coarse graph is the clusters named by its vertices."""
    members = add_to_owners(comm, label, np.ones(level.num_local, dtype=np.int64), level.starts)
    nonempty = members > 0
    coarse_starts = gathered_starts(comm, int(nonempty.sum()))
    coarse_first = int(coarse_starts[comm.rank])
    number = np.full(level.num_local, -1, dtype=np.int64)
    number[nonempty] = coarse_first + np.arange(int(nonempty.sum()), dtype=np.int64)
    coarse_id = fetch(comm, label, level.starts, number)
    rows, cols, weights = _coarse_edges(coarse_id, ghosts.pull(coarse_id), level, int(coarse_starts[-1]))
    rows, cols, weights = send_to_owners(comm, owner_of(rows, coarse_starts), rows, cols, weights)
    vwgt = add_to_owners(comm, coarse_id, level.vwgt, coarse_starts)
    return _merged(coarse_starts, coarse_first, rows - coarse_first, cols, weights, vwgt), coarse_id


def _initial_parts(comm, level: Level, num_parts, seed=0) -> np.ndarray:
    """Collective over comm. METIS on the whole (coarsest) graph, gathered on rank 0; returns
    the parts of this rank's vertices."""
    pieces = comm.gather((np.diff(level.indptr), level.adj, level.ewgt, level.vwgt), root=0)
    chunks = None
    if comm.rank == 0:
        degree, adj, ewgt, vwgt = (np.concatenate(column) for column in zip(*pieces))
        xadj = np.concatenate([[0], np.cumsum(degree)]).astype(np.int64)
        if num_parts == 1 or adj.shape[0] == 0:
            parts = np.arange(level.num_vertices, dtype=np.int64) * num_parts // max(level.num_vertices, 1)
        else:
            parts = part_graph_kway(xadj, adj, num_parts, vwgt, seed, edge_weights=ewgt)
        chunks = [parts[level.starts[r]:level.starts[r + 1]] for r in range(comm.size)]
    return comm.scatter(chunks, root=0)


def _part_loads(comm, part, vwgt, num_parts) -> np.ndarray:
    """Collective over comm. ``[num_parts, ncon]`` summed vertex weights of every part."""
    loads = np.zeros((num_parts, vwgt.shape[1]), dtype=np.int64)
    np.add.at(loads, part, vwgt)
    comm.Allreduce(mpi().IN_PLACE, loads, op=mpi().SUM)
    return loads


def refine(comm, level: Level, part, num_parts, caps, seed=0, rounds=_REFINE_ROUNDS, ghosts=None) -> np.ndarray:
    """Collective over comm. Label propagation over the parts (see module docstring); returns
    the new parts of the local vertices."""
    ghosts = ghosts or Ghosts(comm, level.adj, level.starts)
    ids = np.arange(level.first(comm), level.first(comm) + level.num_local, dtype=np.int64)
    part = part.copy()
    for round_ in range(rounds):
        best, best_conn, own_conn = _partition.best_labels(level.indptr, ghosts.pull(part), level.ewgt, part,
                                                           seed * 7919 + round_)
        movers = np.flatnonzero(_active(ids, seed + 1, round_) & (best >= 0) & (best_conn > own_conn))
        moved_any = int(comm.allreduce(int(movers.shape[0]), op=mpi().SUM))
        if moved_any == 0:
            break
        loads = _part_loads(comm, part, level.vwgt, num_parts)
        share = np.maximum(caps - loads, 0) // comm.size  # this rank's room in every part
        granted = _grant(best[movers], level.vwgt[movers], best_conn[movers] - own_conn[movers],
                         np.zeros_like(share), share)
        part[movers[granted]] = best[movers[granted]]
    return part


def edge_cut(comm, level: Level, part, ghosts) -> int:
    """Collective over comm. Summed weight of the edges between parts (each counted once)."""
    rows = np.repeat(part, np.diff(level.indptr))
    local = int(level.ewgt[rows != ghosts.pull(part)].sum())
    return int(comm.allreduce(local, op=mpi().SUM)) // 2


def multilevel_parts(comm, level: Level, num_parts, seed=0, coarse_nodes=DEFAULT_COARSE_NODES,
                     imbalance=DEFAULT_IMBALANCE, log=silent) -> tuple[np.ndarray, dict]:
    """Collective over comm. The part of every local vertex of ``level`` and what it took.

    ``info`` has the levels' vertex and edge counts, the coarsest graph's METIS cut, and the
    final edge cut (in undirected edges of the finest level)."""
    totals = level.vwgt.sum(axis=0)
    comm.Allreduce(mpi().IN_PLACE, totals, op=mpi().SUM)
    # clusters light enough that METIS can still balance the coarse graph to within the tolerance
    limit = np.maximum(np.ceil(totals * imbalance / num_parts), 1).astype(np.int64)
    caps = np.ceil(totals * (1 + imbalance) / num_parts).astype(np.int64)
    levels, maps, ghosts = [level], [], [Ghosts(comm, level.adj, level.starts)]
    while levels[-1].num_vertices > coarse_nodes and len(levels) < _MAX_LEVELS:
        fine = levels[-1]
        label = cluster(comm, fine, limit, seed + len(levels), ghosts=ghosts[-1])
        coarse, coarse_id = contract(comm, fine, label, ghosts[-1])
        if coarse.num_vertices > _MIN_SHRINK * fine.num_vertices:
            break
        log(f"coarsen level {len(levels)}: {coarse.num_vertices:,} vertices, "
            f"{int(comm.allreduce(coarse.adj.shape[0], op=mpi().SUM)) // 2:,} edges")
        levels.append(coarse)
        maps.append(coarse_id)
        ghosts.append(Ghosts(comm, coarse.adj, coarse.starts))
    part = _initial_parts(comm, levels[-1], num_parts, seed)
    info = {"levels": [lv.num_vertices for lv in levels],
            "coarse_cut": edge_cut(comm, levels[-1], part, ghosts[-1])}
    log(f"METIS on the coarsest graph: {levels[-1].num_vertices:,} vertices, cut {info['coarse_cut']:,}")
    for depth in range(len(levels) - 1, -1, -1):
        if depth < len(levels) - 1:
            part = fetch(comm, maps[depth], levels[depth + 1].starts, part)
        part = refine(comm, levels[depth], part, num_parts, caps, seed + depth, ghosts=ghosts[depth])
    info["undirected_cut"] = edge_cut(comm, level, part, ghosts[0])
    return part, info
