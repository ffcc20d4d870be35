# distutils: language = c++
# cython: boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Kernels of the distributed partitioner (hpcgnn.prep.dist): label scoring and edge merging.

Both are O(E) per call with O(max degree) scratch, and run without the GIL: label propagation
scores every vertex's neighbour labels a few times per level, which numpy could only do with
a sort of all E (vertex, label) pairs each time.
"""
import numpy as np

from libc.stdint cimport int64_t, uint64_t
from libcpp.algorithm cimport sort
from libcpp.pair cimport pair
from libcpp.vector cimport vector


cdef extern from "splitmix64.h" nogil:
    uint64_t hpcgnn_mix64(uint64_t z)


def best_labels(const int64_t[::1] indptr, const int64_t[::1] labels, const int64_t[::1] weights,
                const int64_t[::1] own, uint64_t seed):
    """Local. For every row, the neighbour label of largest connection other than its own.

    Row ``v``'s neighbours are ``indptr[v]:indptr[v+1]``, neighbour ``k`` in label
    ``labels[k]`` with edge weight ``weights[k]``; ``own[v]`` is the row's current label. The
    connection of a label is the sum of the weights of the row's edges into it. Ties go to the
    label with the smaller ``mix64(label ^ seed)``, so no label is favoured by its value.

    Returns ``(best, best_conn, own_conn)`` int64 arrays: the best label other than ``own[v]``
    (-1 when every neighbour is in ``own[v]`` or there is none), its connection, and the
    connection of ``own[v]``.
    """
    cdef int64_t n = indptr.shape[0] - 1
    cdef int64_t max_degree = 0, v, k, slot, label, i
    for v in range(n):
        max_degree = max(max_degree, indptr[v + 1] - indptr[v])
    cdef int64_t capacity = 2
    while capacity < 2 * max_degree:
        capacity *= 2
    keys_a = np.full(capacity, -1, dtype=np.int64)
    sums_a = np.zeros(capacity, dtype=np.int64)
    used_a = np.empty(max(max_degree, 1), dtype=np.int64)
    best_a = np.full(n, -1, dtype=np.int64)
    best_conn_a = np.zeros(n, dtype=np.int64)
    own_conn_a = np.zeros(n, dtype=np.int64)
    cdef int64_t[::1] keys = keys_a
    cdef int64_t[::1] sums = sums_a
    cdef int64_t[::1] used = used_a
    cdef int64_t[::1] best = best_a
    cdef int64_t[::1] best_conn = best_conn_a
    cdef int64_t[::1] own_conn = own_conn_a
    cdef int64_t mask = capacity - 1, count, top, top_sum
    cdef uint64_t top_rank, rank
    with nogil:
        for v in range(n):
            count = 0
            for k in range(indptr[v], indptr[v + 1]):
                label = labels[k]
                slot = <int64_t>(hpcgnn_mix64(<uint64_t>label) & <uint64_t>mask)
                while keys[slot] != -1 and keys[slot] != label:
                    slot = (slot + 1) & mask
                if keys[slot] == -1:
                    keys[slot] = label
                    used[count] = slot
                    count += 1
                sums[slot] += weights[k]
            top = -1
            top_sum = 0
            top_rank = 0
            for i in range(count):
                slot = used[i]
                label = keys[slot]
                if label == own[v]:
                    own_conn[v] = sums[slot]
                else:
                    rank = hpcgnn_mix64(<uint64_t>label ^ seed)
                    if top == -1 or sums[slot] > top_sum or (sums[slot] == top_sum and rank < top_rank):
                        top, top_sum, top_rank = label, sums[slot], rank
                keys[slot] = -1
                sums[slot] = 0
            best[v] = top
            best_conn[v] = top_sum
    return best_a, best_conn_a, own_conn_a


def merge_rows(const int64_t[::1] indptr, int64_t[::1] cols, int64_t[::1] weights):
    """Local. Sort each CSR row by column and merge repeated columns, summing their weights.

    Works in place; returns the new ``indptr``, whose last entry is how many leading entries
    of ``cols`` and ``weights`` hold the result.
    """
    cdef int64_t n = indptr.shape[0] - 1
    new_a = np.zeros(n + 1, dtype=np.int64)
    cdef int64_t[::1] new = new_a
    cdef vector[pair[int64_t, int64_t]] row
    cdef int64_t v, k, out = 0, i
    with nogil:
        for v in range(n):
            row.clear()
            for k in range(indptr[v], indptr[v + 1]):
                row.push_back(pair[int64_t, int64_t](cols[k], weights[k]))
            sort(row.begin(), row.end())
            i = 0
            while i < <int64_t>row.size():
                cols[out] = row[i].first
                weights[out] = row[i].second
                i += 1
                while i < <int64_t>row.size() and row[i].first == cols[out]:
                    weights[out] += row[i].second
                    i += 1
                out += 1
            new[v + 1] = out
    return new_a
