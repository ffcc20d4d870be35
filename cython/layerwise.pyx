# distutils: language = c++
# cython: boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Layer-wise (LADIES) sampling kernels: one layer's candidates and their importance
(:func:`column_norms`), then the kept edges and their weights (:func:`keep_edges`).

A layer's destinations read their whole in-edge lists (``offsets``/``src`` in CSR form over the
destinations), which on a power-law graph run to millions of edges for a few thousand
destinations: importance favours hubs. The candidates (distinct sources) then run to hundreds
of thousands, so one hash table over all of them would be tens of megabytes and every edge a
cache miss. Instead the edges are split by a hash of their source into buckets of a few
thousand edges (a counting pass and a streaming scatter); each bucket is then reduced with a
small open-addressing table (sized by the bucket's distinct sources, doubling as they come)
that stays in the core's cache, and its edges' candidates are written in bucket order. :func:`keep_edges` reads that order once to mark and count the kept
edges, then the rows once in edge order, writing its outputs in place. Work and memory are linear in the layer's edges; nothing is
sized by the number of nodes of the graph.
"""
import numpy as np

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc
from libcpp.vector cimport vector


cdef extern from "splitmix64.h" nogil:
    uint64_t hpcgnn_mix64(uint64_t z)


cdef struct _Item:  # one in-edge, as its bucket holds it
    int64_t gid
    int32_t row
    uint32_t edge


cdef struct _Slot:
    int64_t gid
    int32_t index      # the candidate's position; -1 marks an empty slot
    int32_t last_row   # the row whose entry ``pending`` holds
    double pending     # the candidate's entry in ``last_row`` (parallel copies summed)
    double norm        # sum of the squared entries of the rows before ``last_row``


#: edges per bucket at most, on average. Fewer buckets make the scatter cheaper (fewer write
#: streams); a bucket's table holds its distinct sources only, which stay in cache.
cdef int64_t BUCKET_EDGES = 16384
#: slots a bucket's table starts with; it doubles whenever it is half full
cdef int64_t FIRST_CAPACITY = 1024


cdef void _grow(vector[_Slot]& table, vector[_Slot]& spare) noexcept nogil:
    """Double ``table``, re-inserting its entries (``spare`` is scratch space)."""
    cdef _Slot empty
    empty.index = -1
    spare.swap(table)
    table.assign(2 * spare.size(), empty)
    cdef uint64_t mask = <uint64_t>(table.size() - 1), slot
    cdef size_t i
    for i in range(spare.size()):
        if spare[i].index != -1:
            slot = (hpcgnn_mix64(<uint64_t>spare[i].gid) >> 32) & mask
            while table[slot].index != -1:
                slot = (slot + 1) & mask
            table[slot] = spare[i]


def column_norms(const int64_t[::1] offsets, const int64_t[::1] src):
    """Local. One layer's LADIES candidates and their squared column norms.

    Parameters
    ----------
    offsets : int64 array of length n + 1
        Row ``v``'s in-edges are ``src[offsets[v]:offsets[v + 1]]`` (one row per destination).
    src : int64 array
        The source gid of every in-edge (fewer than 2**31).

    Returns
    -------
    candidates : int64 array
        The distinct gids of ``src``.
    norms : float64 array of length ``len(candidates)``
        ``sum over rows v of P[v, u]**2``, with ``P[v, u]`` = (copies of the edge u -> v in row
        v) / (length of row v): the squared column norms of the mean-aggregation matrix over
        these rows. Parallel edges add up before squaring.
    order : int64 array of length ``len(src)``
        The edges in the kernels' (bucket) order: edge positions into ``src``.
    column : int32 array of length ``len(src)``
        ``candidates[column[k]] == src[order[k]]``. Both go to :func:`keep_edges` unchanged.
    """
    cdef int64_t n = offsets.shape[0] - 1, num_edges = src.shape[0]
    if offsets[n] != num_edges:
        raise ValueError(f"offsets end at {offsets[n]}, src has {num_edges} edges")
    if num_edges >= (<int64_t>1 << 31) or n >= (<int64_t>1 << 31):
        raise ValueError(f"one layer of {n} rows and {num_edges} in-edges: fewer than 2**31 of each")
    cdef int64_t num_buckets = 1
    while num_buckets * BUCKET_EDGES < num_edges:
        num_buckets <<= 1
    # a source's bucket is the low bits of mix64(gid), its slot in the bucket's table the high ones
    cdef uint64_t bucket_mask = <uint64_t>(num_buckets - 1)
    cdef vector[int64_t] start
    start.assign(num_buckets + 1, 0)
    cdef _Item* items = <_Item*>malloc(max(num_edges, 1) * sizeof(_Item))
    if items == NULL:
        raise MemoryError(f"{num_edges} edges of one layer")
    order_a = np.empty(num_edges, dtype=np.int64)
    column_a = np.empty(num_edges, dtype=np.int32)
    cdef int64_t[::1] order = order_a
    cdef int32_t[::1] column = column_a
    cdef vector[int64_t] found
    cdef vector[double] norms
    cdef vector[_Slot] table, spare
    cdef _Slot empty
    empty.index = -1
    cdef int64_t v, e, b, k, gid, filled
    cdef int32_t row
    cdef uint64_t mask, slot
    with nogil:
        for e in range(num_edges):  # the buckets' sizes, then each edge into its bucket (edge order kept)
            start[(hpcgnn_mix64(<uint64_t>src[e]) & bucket_mask) + 1] += 1
        for b in range(num_buckets):
            start[b + 1] += start[b]
        for v in range(n):
            for e in range(offsets[v], offsets[v + 1]):
                b = hpcgnn_mix64(<uint64_t>src[e]) & bucket_mask
                k = start[b]
                start[b] += 1
                items[k].gid, items[k].row, items[k].edge = src[e], <int32_t>v, <uint32_t>e
        for b in range(num_buckets - 1, 0, -1):  # each cursor stopped at the next bucket's start
            start[b] = start[b - 1]
        start[0] = 0
        for b in range(num_buckets):
            table.assign(FIRST_CAPACITY, empty)
            mask = <uint64_t>(FIRST_CAPACITY - 1)
            filled = 0
            for k in range(start[b], start[b + 1]):
                gid, row = items[k].gid, items[k].row
                slot = (hpcgnn_mix64(<uint64_t>gid) >> 32) & mask
                while table[slot].index != -1 and table[slot].gid != gid:
                    slot = (slot + 1) & mask
                if table[slot].index == -1:
                    table[slot].gid = gid
                    table[slot].index = <int32_t>found.size()
                    table[slot].last_row = row
                    table[slot].pending = 0.0
                    table[slot].norm = 0.0
                    found.push_back(gid)
                    norms.push_back(0.0)
                    filled += 1
                    if 2 * filled > <int64_t>table.size():
                        _grow(table, spare)
                        mask = <uint64_t>(table.size() - 1)
                        slot = (hpcgnn_mix64(<uint64_t>gid) >> 32) & mask
                        while table[slot].gid != gid or table[slot].index == -1:
                            slot = (slot + 1) & mask
                elif table[slot].last_row != row:  # a new row: the last one's entry is complete
                    table[slot].norm += table[slot].pending * table[slot].pending
                    table[slot].pending = 0.0
                    table[slot].last_row = row
                table[slot].pending += 1.0 / <double>(offsets[row + 1] - offsets[row])
                order[k] = items[k].edge
                column[k] = table[slot].index
            for slot in range(<uint64_t>table.size()):
                if table[slot].index != -1:
                    norms[table[slot].index] = table[slot].norm + table[slot].pending * table[slot].pending
    free(items)
    candidates_a = np.empty(found.size(), dtype=np.int64)
    norms_a = np.empty(found.size(), dtype=np.float64)
    cdef int64_t[::1] candidates_view = candidates_a
    cdef double[::1] norms_view = norms_a
    for k in range(<int64_t>found.size()):
        candidates_view[k] = found[k]
        norms_view[k] = norms[k]
    return candidates_a, norms_a, order_a, column_a


def keep_edges(const int64_t[::1] offsets, const int64_t[::1] order, const int32_t[::1] column,
               const int32_t[::1] slot, const double[::1] scale, bint normalize):
    """Local. The in-edges of chosen candidates, in edge order, with LADIES' weights.

    Parameters
    ----------
    offsets : int64 array
        The layer's rows, as given to :func:`column_norms`.
    order, column : arrays
        From :func:`column_norms`.
    slot : int32 array
        Per candidate: its position in the next layer's node list when chosen, else -1.
    scale : float64 array
        Per position of the next layer's node list: ``1 / pi_u`` of the chosen candidate ``u``
        there.
    normalize : bool
        Divide each row's weights by their sum.

    Returns
    -------
    counts : int64 array of length n
        Kept edges per row.
    kept : int64 array
        Positions (into the layer's ``src``) of the kept edges, in edge order.
    src_pos : int64 array
        ``slot`` of each kept edge's source.
    weight : float32 array
        Per kept edge ``scale[u] / (length of its row)`` (each parallel copy its own), divided by
        the row's sum with ``normalize``.
    """
    cdef int64_t n = offsets.shape[0] - 1, num_edges = order.shape[0]
    if offsets[n] != num_edges or column.shape[0] != num_edges:
        raise ValueError(f"offsets end at {offsets[n]}, order has {num_edges} edges, column {column.shape[0]}")
    counts_a = np.zeros(n, dtype=np.int64)
    cdef int64_t[::1] counts = counts_a
    # each kept edge's slot, by edge (a third of a layer's edges or more: chosen hubs have many);
    # then the rows are read in edge order against small per-slot arrays
    cdef vector[int32_t] slot_of_edge
    slot_of_edge.assign(num_edges, -1)
    cdef int64_t v, e, k, w = 0, first, total_kept = 0
    cdef int32_t s
    cdef double entry, total
    with nogil:
        for k in range(num_edges):
            s = slot[column[k]]
            if s >= 0:
                slot_of_edge[order[k]] = s
                total_kept += 1
    kept_a = np.empty(total_kept, dtype=np.int64)
    src_pos_a = np.empty(total_kept, dtype=np.int64)
    weight_a = np.empty(total_kept, dtype=np.float32)
    cdef int64_t[::1] kept = kept_a
    cdef int64_t[::1] src_pos = src_pos_a
    cdef float[::1] weight = weight_a
    with nogil:
        for v in range(n):
            if offsets[v + 1] == offsets[v]:
                continue
            entry = 1.0 / <double>(offsets[v + 1] - offsets[v])
            first = w
            total = 0.0
            for e in range(offsets[v], offsets[v + 1]):
                s = slot_of_edge[e]
                if s >= 0:
                    kept[w] = e
                    src_pos[w] = s
                    total += entry * scale[s]
                    w += 1
            counts[v] = w - first
            if not normalize or total == 0.0:
                total = 1.0
            for k in range(first, w):
                weight[k] = <float>(entry * scale[src_pos[k]] / total)
    return counts_a, kept_a, src_pos_a, weight_a
