"""``--method kaminpar``: the shared-memory multilevel partitioner KaMinPar (``pip install kaminpar``).

For users with one large node: KaMinPar partitions with every core of the node. Its Python
bindings read a graph only from a file, so the adjacency METIS would get is written in the
binary ParHIP format to a scratch directory beside the output (removed afterwards, or when
the job is ended), loaded, partitioned and the scratch removed. The bindings balance one
vertex weight, so ``--balance`` names at most one quantity with this method (default: nodes).

ParHIP binary layout, all 8-byte little-endian words: a header ``[version, n, m]`` (version 3:
no weights; 1: vertex weights), ``n + 1`` byte offsets of each vertex's neighbours in the
file, the ``m`` neighbour ids, then the ``n`` vertex weights.
"""
from __future__ import annotations

import os

import numpy as np

from hpcgnn.runtime.errors import InputError
from hpcgnn.runtime.files import make_temp_dir, remove_temp_dir

_HEADER_WORDS = 3


def _module():
    try:
        import kaminpar  # deferred: an optional dependency, loaded only by --method kaminpar
    except ImportError:
        raise InputError(None, "needs the kaminpar package: pip install kaminpar (or pip install "
                         "'hpcgnn[kaminpar]')", "--method", "kaminpar") from None
    return kaminpar


def write_parhip(path, xadj, adjncy, vertex_weights=None):
    """Local. Write a symmetric CSR adjacency (and one vertex weight per vertex) as a binary
    ParHIP file."""
    n, m = xadj.shape[0] - 1, adjncy.shape[0]
    version = 3 if vertex_weights is None else 1
    with open(path, "wb") as fh:
        np.array([version, n, m], dtype="<u8").tofile(fh)
        ((np.asarray(xadj, dtype=np.int64) + (_HEADER_WORDS + n + 1)) * 8).astype("<u8").tofile(fh)
        np.asarray(adjncy, dtype="<i8").tofile(fh)  # ids are non-negative: the same bytes as uint64
        if vertex_weights is not None:
            np.asarray(vertex_weights, dtype="<i8").tofile(fh)


def part_graph_kaminpar(xadj, adjncy, num_parts, vertex_weights=None, seed=0, imbalance=0.03, threads=None,
                        scratch_parent=".") -> np.ndarray:
    """Local. KaMinPar's ``num_parts``-way partition of a symmetric adjacency.

    Parameters
    ----------
    xadj, adjncy : np.ndarray
        Symmetric CSR adjacency without self loops (as for METIS).
    num_parts : int
    vertex_weights : np.ndarray, optional
        ``[N]`` or ``[N, 1]`` integer weights to balance; default: vertex counts.
    seed : int
    imbalance : float
        Each part's weight stays within ``(1 + imbalance)`` of the mean.
    threads : int, optional
        Threads KaMinPar uses; default: the cores this process may run on.
    scratch_parent : str
        Where the scratch directory holding the ParHIP file is made.

    Returns
    -------
    np.ndarray
        int64 part of every vertex.
    """
    kaminpar = _module()
    if vertex_weights is not None:
        vertex_weights = np.asarray(vertex_weights)
        if vertex_weights.ndim == 2:
            if vertex_weights.shape[1] != 1:
                raise InputError(None, "KaMinPar balances one quantity: name one (nodes or in_degree, ...)",
                                 "--balance", vertex_weights.shape[1])
            vertex_weights = vertex_weights[:, 0]
    threads = threads or len(os.sched_getaffinity(0))
    scratch = make_temp_dir(os.path.join(os.path.abspath(scratch_parent), ".kaminpar"))
    try:
        path = os.path.join(scratch, "graph.parhip")
        write_parhip(path, xadj, adjncy, vertex_weights)
        kaminpar.reseed(int(seed))
        graph = kaminpar.load_graph(path, kaminpar.GraphFileFormat.PARHIP)
        os.unlink(path)  # loaded: the file's bytes are not needed while it partitions
        solver = kaminpar.KaMinPar(threads, kaminpar.default_context())
        parts = np.asarray(solver.compute_partition(graph, int(num_parts), float(imbalance)), dtype=np.int64)
    finally:
        remove_temp_dir(scratch)
    if parts.shape[0] != xadj.shape[0] - 1 or (parts.size and (parts.min() < 0 or parts.max() >= num_parts)):
        raise RuntimeError(f"KaMinPar returned {parts.shape[0]} parts for {xadj.shape[0] - 1} vertices")
    return parts
