"""Multi-constraint METIS through the library that pymetis bundles.

``pymetis.part_graph`` always passes one balance constraint (a weight array of length
``ncon * N`` is silently misread), so the k-way partitioner is called directly with ctypes:
pymetis's extension module exports ``METIS_PartGraphKway`` built with 64-bit ``idx_t``.

A binding to compiled code, like the Cython kernels beside it: it imports nothing of hpcgnn, so
the partitioners of :mod:`hpcgnn.prep` and the Cluster-GCN sampler (:mod:`hpcgnn.sampling.cluster`)
share it without the runtime importing the offline tools.
"""
from __future__ import annotations

import ctypes

import numpy as np

_METIS_OK = 1
_ERRORS = {-2: "METIS rejected its input", -3: "METIS ran out of memory", -4: "METIS failed"}


_NOPTIONS = 40
_OPTION_SEED = 8  # METIS 5.1 option layout (pymetis.options_indices.SEED)


def _library():
    # METIS itself is the C library inside pymetis's extension module (see part_graph_kway); imported
    # on first use, so that training and the other partitioning methods run where pymetis is missing
    import pymetis._internal as metis_extension  # deferred: pymetis is needed only where METIS runs

    lib = ctypes.CDLL(metis_extension.__file__)
    lib.METIS_PartGraphKway.restype = ctypes.c_int
    lib.METIS_PartGraphKway.argtypes = [ctypes.c_void_p] * 13
    lib.METIS_SetDefaultOptions.argtypes = [ctypes.c_void_p]
    return lib


def part_graph_kway(xadj, adjncy, num_parts, vertex_weights=None, seed=0, edge_weights=None):
    """Local. k-way METIS partition of an undirected graph with several balance constraints.

    Parameters
    ----------
    xadj, adjncy : ndarray of int64
        Symmetric adjacency in CSR form, no self loops (see ``_csr.symmetric_adjacency``).
    num_parts : int
        Number of parts (>= 2).
    vertex_weights : ndarray of int64, shape (N, ncon), optional
        One column per constraint; METIS keeps each column's per-part sum within its default
        3% tolerance of the mean as far as it can.
    seed : int
        METIS's random seed; the same seed and input give the same partition.
    edge_weights : ndarray of int64, shape (len(adjncy),), optional
        Weight of every adjacency entry (the cut METIS minimises is their sum); default 1 each.

    Returns
    -------
    parts : ndarray of int64, shape (N,)
        The part of every vertex.
    """
    n = xadj.shape[0] - 1
    xadj = np.ascontiguousarray(xadj, dtype=np.int64)
    adjncy = np.ascontiguousarray(adjncy, dtype=np.int64)
    if vertex_weights is None:
        vertex_weights = np.ones((n, 1), dtype=np.int64)
    vwgt = np.ascontiguousarray(vertex_weights, dtype=np.int64)
    if vwgt.ndim != 2 or vwgt.shape[0] != n:
        raise ValueError(f"vertex_weights must have shape (N, ncon), got {vwgt.shape}")
    # METIS rejects a constraint whose total weight is zero (e.g. an empty mask).
    vwgt = vwgt[:, vwgt.sum(axis=0) > 0]
    if vwgt.shape[1] == 0:
        vwgt = np.ones((n, 1), dtype=np.int64)
    vwgt = np.ascontiguousarray(vwgt)  # column selection may return Fortran order
    adjwgt = None if edge_weights is None else np.ascontiguousarray(edge_weights, dtype=np.int64)
    adjwgt_pointer = None if adjwgt is None else adjwgt.ctypes.data
    nvtxs = ctypes.c_int64(n)
    ncon = ctypes.c_int64(vwgt.shape[1])
    nparts = ctypes.c_int64(num_parts)
    objval = ctypes.c_int64(0)
    parts = np.zeros(n, dtype=np.int64)
    lib = _library()
    # A NULL options pointer does not balance secondary constraints in this build; an explicit
    # default-initialised options array does.
    options = np.zeros(_NOPTIONS, dtype=np.int64)
    lib.METIS_SetDefaultOptions(options.ctypes.data)
    options[_OPTION_SEED] = seed
    status = lib.METIS_PartGraphKway(
        ctypes.addressof(nvtxs), ctypes.addressof(ncon), xadj.ctypes.data, adjncy.ctypes.data,
        vwgt.ctypes.data, None, adjwgt_pointer, ctypes.addressof(nparts), None, None, options.ctypes.data,
        ctypes.addressof(objval), parts.ctypes.data)
    if status != _METIS_OK:
        raise RuntimeError(_ERRORS.get(status, f"METIS returned {status}"))
    return parts
