"""``mpirun -np K hpcgnn generate rmat ...``: an RMAT graph drawn and written by K ranks.

The graph is the one :func:`hpcgnn.prep.generate.rmat_graph` draws for the seed, bit for bit:
rank ``r`` draws its share of every round's raw-edge blocks (each block has its own random
stream), sends each edge key to the rank owning its source's id block, and keeps the sorted
distinct keys of its sources; the rounds' decisions use global counts (:class:`SpreadDraw`),
and the seeded subset is chosen by priority thresholds found by bisection. The ranks' edges,
concatenated in rank order, are the serial graph's edges in its (src, dst) order. Every rank
then draws the node fields of its id block, and the ranks write one graph file in turns
(:func:`write_graph_file`). A rank holds about ``E / K`` edges and ``N / K`` feature rows, plus
a few arrays of N integers (labels, the id permutation, the class peer tables).
"""
from __future__ import annotations

import numpy as np

from hpcgnn.prep.dist.blocks import block_starts, owner_of, send_to_owners
from hpcgnn.prep.dist.graph_file import write_graph_file
from hpcgnn.prep.generate import check_rmat, node_fields, rmat_edges
from hpcgnn.runtime.comm import mpi


class SpreadDraw:
    """Collective over comm. The four steps of :class:`hpcgnn.prep.generate.LocalDraw`, over
    the ranks: keys are kept by the owner of their source's id block."""

    def __init__(self, comm, num_nodes):
        self.comm = comm
        self.num_nodes = num_nodes
        self.starts = block_starts(num_nodes, comm.size)

    def chunks(self, first, stop, chunk_blocks):
        lo, hi = block_starts(stop - first, self.comm.size)[self.comm.rank:self.comm.rank + 2] + first
        share = -(-(stop - first) // self.comm.size)
        lo, hi = int(lo), int(hi)
        return [range(min(b, hi), min(b + chunk_blocks, hi)) for b in range(lo, lo + max(share, 1), chunk_blocks)]

    def route(self, keys):
        # key = (src * N + dst) * 2 + flag, so src = key // 2N
        (got,) = send_to_owners(self.comm, owner_of(keys // (2 * self.num_nodes), self.starts), keys)
        return got

    def total(self, *counts):
        return tuple(int(v) for v in self.comm.allreduce(np.asarray(counts, dtype=np.int64), op=mpi().SUM))

    def kth_smallest(self, values, k):
        """Bisection over the 64-bit range: each step counts the values at or below the middle."""
        values = np.sort(values)
        lo, hi = 0, (1 << 64) - 1
        while lo < hi:
            mid = (lo + hi) // 2
            below = int(np.searchsorted(values, np.uint64(mid), side="right"))
            if self.comm.allreduce(below, op=mpi().SUM) >= k:
                hi = mid
            else:
                lo = mid + 1
        return np.uint64(lo)


def generate_rmat_file(comm, path, num_nodes, num_edges, feat_dim=64, num_classes=10, homophily=0.7,
                       feat_signal=0.15, fractions=(0.6, 0.2, 0.2), seed=0, chunk_edges=4_000_000,
                       compress=False) -> dict:
    """Collective over comm. Draw :func:`~hpcgnn.prep.generate.rmat_graph`'s graph on the ranks
    of ``comm`` and write it as a graph file (:mod:`hpcgnn.prep.read.h5graph`) at ``path``.

    Returns the summary the command prints: nodes, edges, edge homophily, max degree.
    """
    params = check_rmat(num_nodes, num_edges, num_classes, homophily, feat_dim, feat_signal, fractions, seed,
                        chunk_edges)
    num_nodes, num_edges, num_classes, homophily, feat_dim, feat_signal, fractions, chunk_edges = params
    draw = SpreadDraw(comm, num_nodes)
    labels, src, dst = rmat_edges(num_nodes, num_edges, num_classes, homophily, seed, chunk_edges, draw)
    first, end = draw.starts[comm.rank:comm.rank + 2]
    ndata = node_fields(labels, num_classes, feat_dim, feat_signal, fractions, seed, first, end)
    same = int(np.count_nonzero(labels[src] == labels[dst]))
    degree = np.bincount(src, minlength=num_nodes) + np.bincount(dst, minlength=num_nodes)
    comm.Allreduce(mpi().IN_PLACE, degree, op=mpi().SUM)
    edge_first = int(comm.exscan(src.shape[0]) or 0)
    write_graph_file(comm, path, num_nodes, "rmat", edge_first, {"src": src, "dst": dst}, int(first), ndata,
                     compress=compress)
    return {"num_nodes": num_nodes, "num_edges": num_edges,
            "homophily": comm.allreduce(same, op=mpi().SUM) / num_edges, "max_degree": int(degree.max())}
