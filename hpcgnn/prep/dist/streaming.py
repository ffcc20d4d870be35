"""``--method ldg``: a streaming partitioner over the ranks, the fast baseline beside multilevel.

Linear deterministic greedy (Stanton & Kliot 2012), streamed by every rank at once: each rank
takes its vertices in id order, ``chunk`` at a time, and puts each in the part that holds
most of its already placed neighbours, weighted by the part's room left,
``|N(v) in P_i| * (1 - fill_i)``, where ``fill_i`` is the fullest of the part's balance
columns against its cap; a full part takes no vertex while another has room. A vertex
without a placed neighbour goes to the emptiest parts, in proportion to their room. The
loads a chunk sees are those after the previous round, so a part may overshoot its cap by
up to a round's placements (``chunk`` vertices per rank): the balance is looser than the
multilevel scheme's, which is the price of one greedy decision per vertex. After each chunk the ranks add up the
parts' loads, and the next chunk asks the owners of its vertices' neighbours where they went.
The stream is repeated (restreaming, Nishimura & Ugander 2013): each pass starts from empty
parts and sees every neighbour where the previous pass put it. A few passes over the edges
and no coarsening: a cut below random at a fraction of the multilevel scheme's time, which
is what a streaming baseline is for.
"""
from __future__ import annotations

import numpy as np

from hpcgnn.prep.dist.blocks import Ghosts, ask_owners
from hpcgnn.prep.dist.multilevel import DEFAULT_IMBALANCE, Level, edge_cut
from hpcgnn.runtime.comm import mpi

_DEFAULT_CHUNK = 1024
_DEFAULT_PASSES = 3


def _place(counts, loads, caps, weights):
    """Parts of one chunk's vertices from their placed neighbours per part ``[n, P]``; returns
    them and the weight they add to each part."""
    fill = (loads / caps[None, :]).max(axis=1)
    room = np.clip(1.0 - fill, 0.0, None)
    score = counts * room[None, :]
    if (fill < 1.0).any():
        score[:, fill >= 1.0] = -1.0
    best = np.argmax(score, axis=1)
    # a vertex with no placed neighbour in an open part: the emptiest parts, in proportion to
    # their room, so a chunk of them does not pile into one part
    free = np.flatnonzero(score.max(axis=1) <= 0)
    if free.shape[0]:
        share = room / room.sum() if room.sum() > 0 else np.full(room.shape[0], 1.0 / room.shape[0])
        quota = np.floor(share * free.shape[0]).astype(np.int64)
        quota[np.argsort(-share, kind="stable")[:free.shape[0] - quota.sum()]] += 1
        best[free] = np.repeat(np.arange(room.shape[0]), quota)
    added = np.zeros_like(loads)
    np.add.at(added, best, weights)
    return best, added


def ldg_parts(comm, level: Level, num_parts, imbalance=DEFAULT_IMBALANCE, chunk=_DEFAULT_CHUNK,
              passes=_DEFAULT_PASSES) -> tuple[np.ndarray, dict]:
    """Collective over comm. The part of every local vertex of ``level`` by streaming greedy
    (module docstring), restreamed ``passes`` times; ``info`` has the edge cut in undirected
    edges of the level."""
    totals = level.vwgt.sum(axis=0)
    comm.Allreduce(mpi().IN_PLACE, totals, op=mpi().SUM)
    caps = np.maximum(np.ceil(totals * (1 + imbalance) / num_parts), 1).astype(np.float64)
    part = np.full(level.num_local, -1, dtype=np.int64)
    rounds = int(comm.allreduce(-(-level.num_local // chunk), op=mpi().MAX))
    for _ in range(passes):
        # a restream starts from empty parts and sees every neighbour where the last pass put it
        loads = np.zeros((num_parts, level.vwgt.shape[1]), dtype=np.float64)
        for round_ in range(rounds):
            lo, hi = min(round_ * chunk, level.num_local), min((round_ + 1) * chunk, level.num_local)
            edges = slice(int(level.indptr[lo]), int(level.indptr[hi]))
            neighbour_part = ask_owners(comm, level.adj[edges], level.starts, part.__getitem__)
            rows = np.repeat(np.arange(hi - lo), np.diff(level.indptr[lo:hi + 1]))
            placed = neighbour_part >= 0
            counts = np.zeros((hi - lo, num_parts), dtype=np.float64)
            np.add.at(counts, (rows[placed], neighbour_part[placed]), level.ewgt[edges][placed])
            part[lo:hi], added = _place(counts, loads, caps, level.vwgt[lo:hi])
            comm.Allreduce(mpi().IN_PLACE, added, op=mpi().SUM)
            loads += added
    cut = edge_cut(comm, level, part, Ghosts(comm, level.adj, level.starts))
    return part, {"undirected_cut": cut, "rounds": rounds * passes, "chunk": chunk, "passes": passes}
