# distutils: language = c++
# cython: boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compressed-sparse-row kernels used by the readers and the partitioner.

Every kernel is O(E) or O(E log d) (d = row length), runs without the GIL and allocates only
its outputs, so graphs with hundreds of millions of edges are relabelled without the
O(E log E) sorts and the temporaries that numpy's unique/argsort would need.
"""
import numpy as np

from libc.stdint cimport int32_t, int64_t, uint64_t
from libcpp.algorithm cimport sort
from libcpp.pair cimport pair
from libcpp.vector cimport vector


cdef extern from "splitmix64.h" nogil:
    uint64_t hpcgnn_mix64(uint64_t z)


def coo_to_csr(const int64_t[::1] rows, const int64_t[::1] cols, int64_t num_rows):
    """Local. Stable counting sort of the pairs (rows[i], cols[i]) by row.

    Returns ``(indptr, cols_sorted, perm)``: ``cols_sorted[indptr[r]:indptr[r+1]]`` are the
    columns of row ``r`` in input order, and ``perm[k]`` is the input position of entry ``k``.
    """
    cdef int64_t n = rows.shape[0]
    indptr_a = np.zeros(num_rows + 1, dtype=np.int64)
    out_a = np.empty(n, dtype=np.int64)
    perm_a = np.empty(n, dtype=np.int64)
    cursor_a = np.empty(num_rows, dtype=np.int64)
    cdef int64_t[::1] indptr = indptr_a
    cdef int64_t[::1] out = out_a
    cdef int64_t[::1] perm = perm_a
    cdef int64_t[::1] cursor = cursor_a
    cdef int64_t i, r, k
    with nogil:
        for i in range(n):
            indptr[rows[i] + 1] += 1
        for r in range(num_rows):
            indptr[r + 1] += indptr[r]
            cursor[r] = indptr[r]
        for i in range(n):
            r = rows[i]
            k = cursor[r]
            out[k] = cols[i]
            perm[k] = i
            cursor[r] = k + 1
    return indptr_a, out_a, perm_a


def dedup_rows(const int64_t[::1] indptr, int64_t[::1] cols, int64_t[::1] perm):
    """Local. Sort each row by column and keep one entry per (row, column), in place.

    Of duplicate entries the one with the smallest ``perm`` (the first in input order) is
    kept. Returns the new ``indptr``; the first ``indptr[-1]`` entries of ``cols`` and
    ``perm`` hold the result.
    """
    cdef int64_t num_rows = indptr.shape[0] - 1
    new_a = np.zeros(num_rows + 1, dtype=np.int64)
    cdef int64_t[::1] new_indptr = new_a
    cdef vector[pair[int64_t, int64_t]] buf
    cdef int64_t r, k, w = 0, lo, hi, j
    with nogil:
        for r in range(num_rows):
            lo = indptr[r]
            hi = indptr[r + 1]
            buf.clear()
            for k in range(lo, hi):
                buf.push_back(pair[int64_t, int64_t](cols[k], perm[k]))
            sort(buf.begin(), buf.end())
            for j in range(<int64_t>buf.size()):
                if j > 0 and buf[j].first == buf[j - 1].first:
                    continue
                cols[w] = buf[j].first
                perm[w] = buf[j].second
                w += 1
            new_indptr[r + 1] = w
    return new_a


def symmetric_adjacency(const int64_t[::1] indptr, const int64_t[::1] indices, int64_t num_nodes):
    """Local. The undirected simple graph of a CSR/CSC: ``A + A^T``, no self loops, no repeats.

    Returns ``(xadj, adjncy)`` (int64, rows sorted), the input METIS expects.
    """
    cdef int64_t n_edges = indices.shape[0]
    deg_a = np.zeros(num_nodes + 1, dtype=np.int64)
    cdef int64_t[::1] deg = deg_a
    cdef int64_t v, k, u, w, lo, hi, last, total
    with nogil:
        for v in range(num_nodes):
            deg[v + 1] += indptr[v + 1] - indptr[v]
            for k in range(indptr[v], indptr[v + 1]):
                deg[indices[k] + 1] += 1
        for v in range(num_nodes):
            deg[v + 1] += deg[v]
        total = deg[num_nodes]
    adj_a = np.empty(total, dtype=np.int64)
    cursor_a = deg_a[:-1].copy()
    cdef int64_t[::1] adj = adj_a
    cdef int64_t[::1] cursor = cursor_a
    xadj_a = np.zeros(num_nodes + 1, dtype=np.int64)
    cdef int64_t[::1] xadj = xadj_a
    with nogil:
        for v in range(num_nodes):
            for k in range(indptr[v], indptr[v + 1]):
                u = indices[k]
                adj[cursor[v]] = u
                cursor[v] += 1
                adj[cursor[u]] = v
                cursor[u] += 1
        w = 0
        for v in range(num_nodes):
            lo = deg[v]
            hi = deg[v + 1]
            sort(&adj[0] + lo, &adj[0] + hi)
            last = -1
            for k in range(lo, hi):
                u = adj[k]
                if u != v and u != last:
                    adj[w] = u
                    w += 1
                last = u
            xadj[v + 1] = w
    return xadj_a, adj_a[:w].copy()


def expand_ranges(const int64_t[::1] starts, const int64_t[::1] counts):
    """Local. Concatenate ``arange(starts[i], starts[i] + counts[i])`` over i (row gathers)."""
    cdef int64_t n = starts.shape[0], i, j, w = 0, total = 0
    for i in range(n):
        total += counts[i]
    out_a = np.empty(total, dtype=np.int64)
    cdef int64_t[::1] out = out_a
    with nogil:
        for i in range(n):
            for j in range(counts[i]):
                out[w] = starts[i] + j
                w += 1
    return out_a


ctypedef fused id_t:
    int32_t
    int64_t


def gather_ranges(const id_t[::1] table, const int64_t[::1] starts, const int64_t[::1] counts):
    """Local. Concatenate ``table[starts[i]:starts[i] + counts[i]]`` over i, as int64: the rows of
    a CSR/CSC in one pass, one contiguous copy per row."""
    cdef int64_t n = starts.shape[0], i, j, w = 0, total = 0
    if counts.shape[0] != n:
        raise ValueError(f"{n} starts, {counts.shape[0]} counts")
    for i in range(n):
        if starts[i] < 0 or counts[i] < 0 or starts[i] + counts[i] > table.shape[0]:
            raise IndexError(f"range {i}: [{starts[i]}, {starts[i] + counts[i]}) outside a table of {table.shape[0]}")
        total += counts[i]
    out_a = np.empty(total, dtype=np.int64)
    cdef int64_t[::1] out = out_a
    with nogil:
        for i in range(n):
            for j in range(starts[i], starts[i] + counts[i]):
                out[w] = table[j]
                w += 1
    return out_a


def drop_diagonal(const int64_t[::1] indptr, const int64_t[::1] indices):
    """Local. Copy of a CSR/CSC without its self loops: ``(indptr, indices)`` int64."""
    cdef int64_t num_rows = indptr.shape[0] - 1, r, k, w = 0, loops = 0
    with nogil:
        for r in range(num_rows):
            for k in range(indptr[r], indptr[r + 1]):
                if indices[k] == r:
                    loops += 1
    new_indptr_a = np.zeros(num_rows + 1, dtype=np.int64)
    new_indices_a = np.empty(indices.shape[0] - loops, dtype=np.int64)
    cdef int64_t[::1] new_indptr = new_indptr_a
    cdef int64_t[::1] new_indices = new_indices_a
    with nogil:
        for r in range(num_rows):
            for k in range(indptr[r], indptr[r + 1]):
                if indices[k] != r:
                    new_indices[w] = indices[k]
                    w += 1
            new_indptr[r + 1] = w
    return new_indptr_a, new_indices_a


cdef inline double _pair_uniform(uint64_t lo, uint64_t hi, uint64_t seed) noexcept nogil:
    # splitmix64 of the unordered pair: the same draw from both endpoints' rows
    cdef uint64_t z = hpcgnn_mix64(lo * 0x9E3779B97F4A7C15ULL + hi + seed * 0xD1B54A32D192ED03ULL)
    return <double>(z >> 11) * (1.0 / 9007199254740992.0)


def sparsify_symmetric(const int64_t[::1] xadj, const int64_t[::1] adjncy, double keep_degree,
                       uint64_t seed=0):
    """Local. Thin a symmetric adjacency while keeping every node's neighbourhood visible.

    Edge ``{u, v}`` survives with probability ``min(1, keep_degree / min(deg u, deg v))``,
    decided by a hash of the pair, so the result stays symmetric and deterministic. Every
    edge of a node with degree <= ``keep_degree`` survives; only hub-to-hub edges, which
    dominate the edge count of power-law graphs and barely inform a partition, are thinned.
    Returns ``(xadj, adjncy)``.
    """
    cdef int64_t n = xadj.shape[0] - 1, v, k, u, w = 0, dmin
    new_xadj_a = np.zeros(n + 1, dtype=np.int64)
    out_a = np.empty(adjncy.shape[0], dtype=np.int64)
    cdef int64_t[::1] new_xadj = new_xadj_a
    cdef int64_t[::1] out = out_a
    with nogil:
        for v in range(n):
            for k in range(xadj[v], xadj[v + 1]):
                u = adjncy[k]
                dmin = min(xadj[v + 1] - xadj[v], xadj[u + 1] - xadj[u])
                if dmin <= keep_degree or \
                        _pair_uniform(min(u, v), max(u, v), seed) * dmin < keep_degree:
                    out[w] = u
                    w += 1
            new_xadj[v + 1] = w
    return new_xadj_a, out_a[:w].copy()


def induced_edges(const int64_t[::1] indptr, const int64_t[::1] indices, const int64_t[::1] rows,
                  const int64_t[::1] position):
    """Local. The edges among a node subset, in one pass over the subset's rows.

    ``position[u]`` is node ``u``'s place in the subset (-1 outside it) and ``rows`` the subset
    in that order. Returns ``(indptr_out, src_pos, slots)``: row ``i`` of the result holds the
    entries of ``rows[i]``'s row whose column is in the subset, in row order, as positions
    (``src_pos``) and as entry slots of ``indices`` (``slots``).
    """
    cdef int64_t m = rows.shape[0]
    cdef int64_t i, e, c, total = 0, k = 0
    for i in range(m):
        total += indptr[rows[i] + 1] - indptr[rows[i]]
    out_indptr_a = np.zeros(m + 1, dtype=np.int64)
    src_a = np.empty(total, dtype=np.int64)
    slots_a = np.empty(total, dtype=np.int64)
    # membership as one bit per node: most scanned entries are outside the subset, and the
    # bitmap stays in cache where the position array (8 bytes a node) does not
    member_a = np.zeros((position.shape[0] + 63) // 64, dtype=np.uint64)
    cdef uint64_t[::1] member = member_a
    cdef int64_t[::1] out_indptr = out_indptr_a
    cdef int64_t[::1] src = src_a
    cdef int64_t[::1] slots = slots_a
    with nogil:
        for i in range(m):
            member[rows[i] >> 6] |= (<uint64_t>1) << (rows[i] & 63)
        for i in range(m):
            for e in range(indptr[rows[i]], indptr[rows[i] + 1]):
                c = indices[e]
                if (member[c >> 6] >> (c & 63)) & 1:
                    src[k] = position[c]
                    slots[k] = e
                    k += 1
            out_indptr[i + 1] = k
    return out_indptr_a, src_a[:k].copy(), slots_a[:k].copy()
