# distutils: language = c++
# cython: boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Neighbour-sampling kernels: per-row edge picks and the fused per-layer unique/relabel.

A sampling call gets one row per destination node: ``begin[i]`` is the CSC position of the
row's first in-edge and ``degree[i]`` its length. The kernels return *positions* (``begin[i]
+ t`` for a picked in-row index ``t``), grouped by row as a CSR: ``counts[i]`` picks for row
``i``, stored in ``positions[sum(counts[:i]):sum(counts[:i+1])]``. Every kernel runs without
the GIL, allocates its outputs up front and is deterministic for a given ``seed``.

Random numbers (reproduced bit for bit by :mod:`hpcgnn.testing.reference`)
-------------------------------------------------------------------------
All arithmetic is on unsigned 64-bit integers with wrap-around::

    mix64(z)      = z ^= z >> 30; z *= 0xBF58476D1CE4E5B9; z ^= z >> 27;
                    z *= 0x94D049BB133111EB; z ^ (z >> 31)
    splitmix64(x) = mix64(x + 0x9E3779B97F4A7C15)
    stream(i)     = seed * 0xD1B54A32D192ED03 + i * 0x8CB92BA72F3D8DD7
    z(i, j)       = splitmix64(stream(i) + j)            # row i (index into begin), draw j

from which, in IEEE double precision (one rounding per operation):

* ``u(i, j)      = (z >> 11) * 2**-53`` in [0, 1), 53 random bits, exact;
* ``u_open(i, j) = ((z >> 11) + 1) * 2**-53`` in (0, 1], so ``log`` is finite;
* ``below(i, j, m) = floor(u(i, j) * m)``, an integer in [0, m) (the product rounds to a
  value below ``m`` because ``u <= 1 - 2**-53``).

Draw indices per sampling mode (``d`` = row length, ``k`` = picks):

* uniform with replacement: pick ``j`` (0 <= j < fanout) is ``below(i, j, d)``;
* uniform without replacement, ``d > fanout = k``: Robert Floyd's algorithm; for ``c`` in
  ``d-k .. d-1``: ``t = below(i, c - (d-k), c + 1)``; if ``t`` was already picked the pick
  is ``c`` instead. Picks are stored in this insertion order (not sorted);
* weighted with replacement: ``x = u(i, j) * W`` with ``W`` the row's total weight, and the
  pick is the smallest ``t`` with ``C[t] > x``, ``C`` the running sum (in edge order) of the
  row's weights; zero-weight edges therefore never win;
* weighted without replacement (Efraimidis-Spirakis): every positive-weight edge ``t`` gets
  the key ``log(u_open(i, t)) / w[t]`` (C ``log``); the ``fanout`` largest keys are kept,
  ordered by decreasing key, ties to the lower ``t``. The first pick thus follows w/sum(w).

``fanout == -1`` takes the whole row (only positive-weight edges when weighted), as does
sampling without replacement when the row (its positive-weight edges) has at most ``fanout``
candidates; those picks keep edge order. ``fanout == 0`` picks nothing. How Floyd's
membership test is done (a scan of the picks for small ``k``, a bitmap otherwise) does not
change the picks. The stream is keyed by the row's index in the call, not by a node id: the
caller varies ``seed`` per batch and layer.

Per-relation sampling (:func:`sample_positions_by_relation`) samples the run of relation ``r``
inside row ``i`` as a row of its own, with the stream

    stream(i, r)  = stream(i) + r * 0xA0761D6478BD642F

in place of ``stream(i)`` (draw indices as above, counted from the run's start), so relation 0
draws exactly what the homogeneous kernel draws for that row.
"""
import numpy as np

from libc.math cimport INFINITY, log
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint64_t
from libcpp.algorithm cimport nth_element, sort
from libcpp.pair cimport pair
from libcpp.vector cimport vector

cdef uint64_t SEED_MULTIPLIER = 0xD1B54A32D192ED03ULL
cdef uint64_t ROW_MULTIPLIER = 0x8CB92BA72F3D8DD7ULL
cdef uint64_t RELATION_MULTIPLIER = 0xA0761D6478BD642FULL
cdef double TWO_POW_MINUS_53 = 1.0 / 9007199254740992.0
# Measured: up to about this many picks a branch-free scan of the picks beats a bitmap.
cdef int64_t LINEAR_SCAN_MAX_PICKS = 16
# Rows (or picks) ahead whose table rows a gathering loop asks the memory for.
cdef int64_t PREFETCH_AHEAD = 32


cdef extern from "splitmix64.h" nogil:
    uint64_t hpcgnn_mix64(uint64_t z)
    uint64_t hpcgnn_splitmix64(uint64_t x)


cdef extern from * nogil:
    """
    #define hpcgnn_prefetch(address) __builtin_prefetch(address)
    """
    void hpcgnn_prefetch(const void* address)


cdef inline uint64_t _row_stream(uint64_t seed, uint64_t row) noexcept nogil:
    return seed * SEED_MULTIPLIER + row * ROW_MULTIPLIER


cdef inline double _uniform(uint64_t stream, uint64_t draw) noexcept nogil:
    return <double>(hpcgnn_splitmix64(stream + draw) >> 11) * TWO_POW_MINUS_53


cdef inline double _uniform_open_at_zero(uint64_t stream, uint64_t draw) noexcept nogil:
    return <double>((hpcgnn_splitmix64(stream + draw) >> 11) + 1) * TWO_POW_MINUS_53


cdef inline int64_t _below(uint64_t stream, uint64_t draw, int64_t bound) noexcept nogil:
    return <int64_t>(_uniform(stream, draw) * <double>bound)


cdef inline int64_t _pick_count(int64_t candidates, int64_t fanout, bint replace) noexcept nogil:
    """Picks a row with ``candidates`` eligible edges gets."""
    if fanout == -1 or (not replace and candidates <= fanout):
        return candidates
    if replace:
        return fanout if candidates > 0 else 0
    return fanout


cdef void _floyd(int64_t* picks, int64_t row_length, int64_t num_picks, uint64_t stream,
                 uint8_t* taken) noexcept nogil:
    """``num_picks`` distinct in-row indices of ``[0, row_length)`` in Floyd's insertion order.

    ``taken`` is NULL for a linear-scan membership test, else a zeroed bitmap of at least
    ``row_length`` entries, left zeroed on return.
    """
    cdef int64_t first = row_length - num_picks, candidate, pick, s
    cdef bint seen
    for candidate in range(first, row_length):
        pick = _below(stream, candidate - first, candidate + 1)
        if taken == NULL:
            seen = False
            for s in range(candidate - first):
                seen |= picks[s] == pick
        else:
            seen = taken[pick]
        # arithmetic select: whether a draw collides is a coin flip, a branch would mispredict
        pick += (candidate - pick) * seen
        picks[candidate - first] = pick
        if taken != NULL:
            taken[pick] = 1
    if taken != NULL:
        for s in range(num_picks):
            taken[picks[s]] = 0


cdef inline void _pick_run(int64_t* picks, int64_t first_position, int64_t length, int64_t num_picks,
                           int64_t fanout, bint replace, uint64_t stream, uint8_t* taken) noexcept nogil:
    """The ``num_picks`` positions (``_pick_count``) of one run of candidates
    ``first_position .. first_position + length - 1`` drawn from ``stream``, as the module
    docstring's uniform modes say. ``taken``: a zeroed bitmap of at least ``length`` entries,
    used when Floyd's picks outnumber ``LINEAR_SCAN_MAX_PICKS``."""
    cdef int64_t j
    if fanout == -1 or (not replace and length <= fanout):
        for j in range(length):
            picks[j] = first_position + j
    elif replace:
        for j in range(num_picks):
            picks[j] = first_position + _below(stream, j, length)
    else:
        _floyd(picks, length, num_picks, stream, taken if num_picks > LINEAR_SCAN_MAX_PICKS else NULL)
        for j in range(num_picks):
            picks[j] += first_position


def sample_positions(const int64_t[::1] begin, const int64_t[::1] degree, int64_t fanout,
                     bint replace, uint64_t seed):
    """Local. Uniformly pick up to ``fanout`` in-edge positions of every row.

    Parameters
    ----------
    begin, degree : int64 arrays of length n
        Row ``i``'s candidates are the positions ``begin[i] .. begin[i] + degree[i] - 1``.
    fanout : int
        Picks per row; -1 takes every position.
    replace : bool
        Draw exactly ``fanout`` times with replacement (none from an empty row); otherwise
        ``min(fanout, degree)`` distinct positions, the whole row in order if it is short.
    seed : int
        Seed of the counter-based generator described in the module docstring.

    Returns
    -------
    counts : int64 array of length n
    positions : int64 array of length ``counts.sum()``, row ``i``'s picks contiguous
    """
    cdef int64_t n = begin.shape[0]
    if degree.shape[0] != n:
        raise ValueError(f"begin has {n} rows but degree has {degree.shape[0]}")
    if fanout < -1:
        raise ValueError(f"fanout must be >= 0 or -1, got {fanout}")
    counts_a = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] counts = counts_a
    cdef int64_t i, d, k, w = 0, total = 0, negative_row = -1, bitmap_length = 0
    with nogil:
        for i in range(n):
            d = degree[i]
            if d < 0:
                negative_row = i
                break
            counts[i] = _pick_count(d, fanout, replace)
            total += counts[i]
            if not replace and counts[i] > LINEAR_SCAN_MAX_PICKS and d > counts[i]:
                bitmap_length = max(bitmap_length, d)
    if negative_row >= 0:
        raise ValueError(f"degree[{negative_row}] is negative")
    positions_a = np.empty(total, dtype=np.int64)
    cdef int64_t[::1] positions = positions_a
    cdef vector[uint8_t] taken
    taken.resize(bitmap_length, 0)
    with nogil:
        for i in range(n):
            k = counts[i]
            if k == 0:
                continue
            _pick_run(&positions[w], begin[i], degree[i], k, fanout, replace, _row_stream(seed, i), taken.data())
            w += k
    return counts_a, positions_a


ctypedef fused relation_t:
    int8_t
    int16_t
    int32_t
    int64_t


cdef inline int64_t _run_end(const relation_t* ids, int64_t lo, int64_t hi, int64_t r) noexcept nogil:
    """The first index of ``[lo, hi)`` whose id exceeds ``r`` (ids ascending there): a binary
    search, so a row of thousands of in-edges costs a few reads per relation, not its length."""
    cdef int64_t mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if ids[mid] <= r:
            lo = mid + 1
        else:
            hi = mid
    return lo


cdef inline int _count_row_runs(const relation_t* ids, int64_t start, int64_t row_end, const int64_t* fanouts,
                                int64_t num_relations, bint replace, int64_t* count, int64_t* bitmap_length,
                                int64_t* bad_value) noexcept nogil:
    """Add the picks of every relation run of ``ids[start:row_end]`` to ``count[0]`` (and the
    longest run needing Floyd's bitmap to ``bitmap_length[0]``); 0, or 3 for an id outside the
    fanouts, 4 for ids not ascending (the id in ``bad_value[0]``)."""
    cdef int64_t j = start, r, run_end, k, previous = -1
    while j < row_end:
        r = ids[j]
        if r < 0 or r >= num_relations or r <= previous:
            bad_value[0] = r
            return 3 if r < 0 or r >= num_relations else 4
        run_end = _run_end(ids, j + 1, row_end, r)
        if ids[run_end - 1] != r:  # a smaller id inside the run: not ascending
            bad_value[0] = ids[run_end - 1]
            return 4
        k = _pick_count(run_end - j, fanouts[r], replace)
        count[0] += k
        if not replace and k > LINEAR_SCAN_MAX_PICKS and run_end - j > k:
            bitmap_length[0] = max(bitmap_length[0], run_end - j)
        previous = r
        j = run_end
    return 0


cdef inline int64_t _pick_row_runs(int64_t* picks, int64_t* relations, const relation_t* ids, int64_t start,
                                   int64_t row_end, int64_t first_position, const int64_t* fanouts, bint replace,
                                   uint64_t row_stream, uint8_t* taken) noexcept nogil:
    """Row picks of every relation run of ``ids[start:row_end]`` (checked by ``_count_row_runs``):
    run ``r`` sampled from ``row_stream + r * RELATION_MULTIPLIER``, positions counted from
    ``first_position``; the picks and their relation ids written from ``picks``/``relations``,
    their number returned."""
    cdef int64_t j = start, r, run_end, k, t, w = 0
    while j < row_end:
        r = ids[j]
        run_end = _run_end(ids, j + 1, row_end, r)
        k = _pick_count(run_end - j, fanouts[r], replace)
        if k:
            _pick_run(picks + w, first_position + (j - start), run_end - j, k, fanouts[r], replace,
                      row_stream + <uint64_t>r * RELATION_MULTIPLIER, taken)
            for t in range(w, w + k):
                relations[t] = r
            w += k
        j = run_end
    return w


cdef _raise_relation_error(int error, int64_t row, int64_t value, int64_t num_relations):
    if error == 3:
        raise ValueError(f"row {row} has relation id {value}, outside the {num_relations} fanouts")
    raise ValueError(f"row {row}'s candidates are not grouped by ascending relation id "
                     f"(relation {value} out of order)")


cdef _check_fanouts(const int64_t[::1] fanouts):
    cdef int64_t r
    for r in range(fanouts.shape[0]):
        if fanouts[r] < -1:
            raise ValueError(f"fanouts[{r}] must be >= 0 or -1, got {fanouts[r]}")


def sample_positions_by_relation(const int64_t[::1] begin, const int64_t[::1] degree,
                                 const relation_t[::1] relation, const int64_t[::1] fanouts,
                                 bint replace, uint64_t seed, const int64_t[::1] relation_begin=None):
    """Local. Uniformly pick up to ``fanouts[r]`` in-edge positions of every row's relation-``r`` run.

    Each row's candidates are grouped by relation id, ascending (a typed graph's CSC keeps them
    so); the run of relation ``r`` is sampled as :func:`sample_positions` samples a row, with
    ``fanouts[r]`` picks and its own stream ``stream(i) + r * RELATION_MULTIPLIER`` (module
    docstring). Every relation a row has gets its own picks however many relations there are,
    and with one relation (all ids 0) the picks are exactly :func:`sample_positions`'.

    Parameters
    ----------
    begin, degree : int64 arrays of length n
        Row ``i``'s candidates are the positions ``begin[i] .. begin[i] + degree[i] - 1``.
    relation : int8, int16, int32 or int64 array
        The candidates' relation ids, ascending within each row: without ``relation_begin``, every
        candidate's, row after row (length ``degree.sum()``); with it, a table holding row ``i``'s
        at ``relation_begin[i] .. relation_begin[i] + degree[i] - 1`` (a CSC's edge-type column
        read in place). Runs are found by binary search, so the order is checked only where a
        run starts and ends (the dataset's loader checks it whole).
    fanouts : int64 array of length R
        Picks per row and relation; -1 takes the whole run, 0 none. Ids must be below R.
    replace : bool
        Draw exactly ``fanouts[r]`` times with replacement from a non-empty run; otherwise
        ``min(fanouts[r], run length)`` distinct positions, the whole run in order if it is short.
    seed : int
        Seed of the counter-based generator described in the module docstring.
    relation_begin : int64 array of length n, optional
        Where each row's relation ids start in ``relation``.

    Returns
    -------
    counts : int64 array of length n
    positions : int64 array of length ``counts.sum()``, row ``i``'s picks contiguous, its runs in
        relation order
    relations : int64 array of length ``counts.sum()``, the relation id of every pick
    """
    cdef int64_t n = begin.shape[0], num_relations = fanouts.shape[0], table_length = relation.shape[0]
    cdef bint in_place = relation_begin is not None
    if degree.shape[0] != n:
        raise ValueError(f"begin has {n} rows but degree has {degree.shape[0]}")
    if in_place and relation_begin.shape[0] != n:
        raise ValueError(f"begin has {n} rows but relation_begin has {relation_begin.shape[0]}")
    _check_fanouts(fanouts)
    counts_a = np.zeros(n, dtype=np.int64)
    cdef int64_t[::1] counts = counts_a
    cdef int64_t i, d, start, w = 0, total = 0, offset = 0, bad_row = -1
    cdef int64_t bitmap_length = 0, bad_value = 0
    cdef int error = 0
    cdef const relation_t* ids = &relation[0] if table_length else NULL
    cdef const int64_t* fanout_of = &fanouts[0] if num_relations else NULL
    with nogil:
        for i in range(n):
            d = degree[i]
            start = relation_begin[i] if in_place else offset
            if d < 0 or start < 0 or start + d > table_length:
                error = 1 if d < 0 else 2
                bad_row = i
                break
            error = _count_row_runs(ids, start, start + d, fanout_of, num_relations, replace, &counts[i],
                                    &bitmap_length, &bad_value)
            if error:
                bad_row = i
                break
            total += counts[i]
            offset += d
    if error == 1:
        raise ValueError(f"degree[{bad_row}] is negative")
    if error == 2 and in_place:
        raise ValueError(f"row {bad_row}'s relation ids [{relation_begin[bad_row]}, "
                         f"{relation_begin[bad_row] + degree[bad_row]}) lie outside a table of {table_length}")
    if error == 2 or (error == 0 and not in_place and offset != table_length):
        raise ValueError(f"relation has {table_length} entries, degree needs {int(np.sum(degree))}")
    if error:
        _raise_relation_error(error, bad_row, bad_value, num_relations)
    positions_a = np.empty(total, dtype=np.int64)
    relations_a = np.empty(total, dtype=np.int64)
    cdef int64_t[::1] positions = positions_a
    cdef int64_t[::1] relations = relations_a
    cdef vector[uint8_t] taken
    taken.resize(bitmap_length, 0)
    offset = 0
    with nogil:
        for i in range(n):
            d = degree[i]
            start = relation_begin[i] if in_place else offset
            if counts[i]:
                w += _pick_row_runs(&positions[w], &relations[w], ids, start, start + d, begin[i], fanout_of,
                                    replace, _row_stream(seed, i), taken.data())
            offset += d
    return counts_a, positions_a, relations_a


ctypedef fused source_t:
    int32_t
    int64_t


cdef inline int64_t _owner(const int64_t* part_starts, int64_t num_parts, int64_t gid) noexcept nogil:
    """The part whose id range ``[part_starts[p], part_starts[p + 1])`` holds ``gid`` (in range)."""
    cdef int64_t lo = 0, hi = num_parts - 1, mid
    while lo < hi:
        mid = (lo + hi + 1) >> 1
        if part_starts[mid] <= gid:
            lo = mid
        else:
            hi = mid - 1
    return lo


def sample_hop_by_relation(const int64_t[::1] gids, const int64_t[::1] part_starts,
                           const int64_t[::1] indptr, const int64_t[::1] indptr_row,
                           const source_t[::1] indices, const int64_t[::1] indices_row,
                           const relation_t[::1] relation, const int64_t[::1] relation_row,
                           const int64_t[::1] edge_starts, const int64_t[::1] fanouts, bint replace,
                           uint64_t seed):
    """Local. One per-relation sampling hop over CSC tables held in memory: the picks of
    :func:`sample_positions_by_relation` for the in-edge rows of ``gids``, returned as sources,
    global edge ids and relation ids in one pass (no position array, no per-owner gathers).

    Part ``p`` owns the global ids ``part_starts[p] .. part_starts[p + 1] - 1``; node ``v`` of it
    (local id ``l = v - part_starts[p]``) has the in-edges at positions ``indptr[indptr_row[p] + l]
    .. indptr[indptr_row[p] + l + 1] - 1`` of part ``p``'s CSC, whose sources are
    ``indices[indices_row[p] + position]``, relation ids ``relation[relation_row[p] + position]``
    (ascending within a node's row) and global edge ids ``edge_starts[p] + position``. Row ``i``
    (node ``gids[i]``) draws from ``stream(i)``, so the picks are exactly
    :func:`sample_positions_by_relation`'s for the same rows and seed.

    Returns
    -------
    counts : int64 array of length n (picks of each node)
    sources, eids, relations : int64 arrays of length ``counts.sum()``, node ``i``'s picks
        contiguous, its runs in relation order
    degree : int64 array of length n (each node's in-degree)
    """
    cdef int64_t n = gids.shape[0], num_parts = part_starts.shape[0] - 1, num_relations = fanouts.shape[0]
    if num_parts < 1:
        raise ValueError("part_starts needs at least two entries")
    for name, per_part in (("indptr_row", indptr_row), ("indices_row", indices_row),
                           ("relation_row", relation_row), ("edge_starts", edge_starts)):
        if per_part.shape[0] < num_parts:
            raise ValueError(f"{name} has {per_part.shape[0]} entries for {num_parts} parts")
    _check_fanouts(fanouts)
    counts_a = np.zeros(n, dtype=np.int64)
    degree_a = np.empty(n, dtype=np.int64)
    begin_a = np.empty(n, dtype=np.int64)
    owner_a = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] counts = counts_a, degree = degree_a, begin = begin_a, owner = owner_a
    cdef int64_t i, p, row, b, d, start, k, t, w = 0, total = 0, bad_row = -1, bad_value = 0
    cdef int64_t bitmap_length = 0, num_nodes = part_starts[num_parts]
    cdef int64_t indptr_length = indptr.shape[0], indices_length = indices.shape[0]
    cdef int64_t relation_length = relation.shape[0]
    cdef int error = 0
    cdef const relation_t* ids = &relation[0] if relation_length else NULL
    cdef const source_t* sources_of = &indices[0] if indices_length else NULL
    cdef const int64_t* fanout_of = &fanouts[0] if num_relations else NULL
    # The rows lie all over tables of gigabytes, so the cost is cache misses. Each stage is one
    # loop whose table reads do not depend on one another: a stage asks the memory for the rows
    # the next stage reads (the source gather for the pick PREFETCH_AHEAD on), so many misses
    # are in flight at once instead of one after another along a row's chain of reads.
    with nogil:
        for i in range(n):  # owners and offset rows
            if gids[i] < part_starts[0] or gids[i] >= num_nodes:
                error = 1
                bad_row = i
                break
            p = _owner(&part_starts[0], num_parts, gids[i])
            row = indptr_row[p] + gids[i] - part_starts[p]
            if row < 0 or row + 1 >= indptr_length:
                error = 2
                bad_row = i
                break
            owner[i] = p
            begin[i] = row
            hpcgnn_prefetch(&indptr[row])
        if not error:
            for i in range(n):  # offsets
                row = begin[i]
                b = indptr[row]
                d = indptr[row + 1] - b
                p = owner[i]
                if d < 0 or b < 0 or relation_row[p] + b < 0 or relation_row[p] + b + d > relation_length \
                        or indices_row[p] < 0 or indices_row[p] + b + d > indices_length:
                    error = 2
                    bad_row = i
                    break
                begin[i] = b
                degree[i] = d
                if d:
                    hpcgnn_prefetch(ids + relation_row[p] + b)
                    hpcgnn_prefetch(ids + relation_row[p] + b + d - 1)
        if not error:
            for i in range(n):  # relation runs and pick counts
                start = relation_row[owner[i]] + begin[i]
                error = _count_row_runs(ids, start, start + degree[i], fanout_of, num_relations, replace,
                                        &counts[i], &bitmap_length, &bad_value)
                if error:
                    bad_row = i
                    break
                total += counts[i]
    if error == 1:
        raise ValueError(f"gids[{bad_row}] = {gids[bad_row]} is outside the ids "
                         f"[{part_starts[0]}, {num_nodes}) of the parts")
    if error == 2:
        raise ValueError(f"node {gids[bad_row]}'s in-edge row lies outside the tables given")
    if error:
        _raise_relation_error(error, bad_row, bad_value, num_relations)
    sources_a = np.empty(total, dtype=np.int64)
    eids_a = np.empty(total, dtype=np.int64)
    relations_a = np.empty(total, dtype=np.int64)
    cdef int64_t[::1] sources = sources_a, eids = eids_a, relations = relations_a
    cdef vector[uint8_t] taken
    taken.resize(bitmap_length, 0)
    with nogil:
        for i in range(n):  # picks: positions in eids, the source's table index in sources
            if counts[i] == 0:
                continue
            p = owner[i]
            start = relation_row[p] + begin[i]
            k = _pick_row_runs(&eids[w], &relations[w], ids, start, start + degree[i], begin[i], fanout_of,
                               replace, _row_stream(seed, i), taken.data())
            for t in range(w, w + k):
                sources[t] = indices_row[p] + eids[t]
                eids[t] += edge_starts[p]
            w += k
        for t in range(total):  # sources
            if t + PREFETCH_AHEAD < total:
                hpcgnn_prefetch(sources_of + sources[t + PREFETCH_AHEAD])
            sources[t] = sources_of[sources[t]]
    return counts_a, sources_a, eids_a, relations_a, degree_a


cdef inline int64_t _count_positive(const double* row_weights, int64_t length) noexcept nogil:
    cdef int64_t j, positive = 0
    for j in range(length):
        if row_weights[j] > 0.0:
            positive += 1
    return positive


cdef void _inverse_cdf_picks(int64_t* picks, const double* row_weights, int64_t row_length,
                             int64_t num_picks, uint64_t stream, double* cumulative) noexcept nogil:
    """``num_picks`` in-row indices drawn with replacement, with probability ~ weight."""
    cdef double running = 0.0, target
    cdef int64_t j, lo, hi, mid
    for j in range(row_length):
        running += row_weights[j]
        cumulative[j] = running
    for j in range(num_picks):
        target = _uniform(stream, j) * running
        # first index whose cumulative weight exceeds target: never a zero-weight edge
        lo = 0
        hi = row_length - 1
        while lo < hi:
            mid = (lo + hi) >> 1
            if cumulative[mid] > target:
                hi = mid
            else:
                lo = mid + 1
        picks[j] = lo


cdef void _efraimidis_spirakis_picks(int64_t* picks, const double* row_weights, int64_t row_length,
                                     int64_t num_picks, uint64_t stream,
                                     pair[double, int64_t]* scratch) noexcept nogil:
    """``num_picks`` distinct in-row indices with the largest keys ``log(u_open) / w``.

    Needs more than ``num_picks`` positive weights; ``scratch`` holds ``row_length`` pairs.
    """
    cdef int64_t j, num_keyed = 0
    for j in range(row_length):
        if row_weights[j] > 0.0:
            # (-key, index): ascending pair order is decreasing key, ties to the lower index
            scratch[num_keyed].first = -(log(_uniform_open_at_zero(stream, j)) / row_weights[j])
            scratch[num_keyed].second = j
            num_keyed += 1
    # a selection then a sort of the winners: linear in the row, unlike a full sort
    nth_element(scratch, scratch + num_picks, scratch + num_keyed)
    sort(scratch, scratch + num_picks)
    for j in range(num_picks):
        picks[j] = scratch[j].second


def sample_positions_weighted(const int64_t[::1] begin, const int64_t[::1] degree,
                              const double[::1] weights, int64_t fanout, bint replace, uint64_t seed):
    """Local. Pick up to ``fanout`` in-edge positions of every row with probability ~ weight.

    Parameters
    ----------
    begin, degree : int64 arrays of length n
        Row ``i``'s candidates are the positions ``begin[i] .. begin[i] + degree[i] - 1``.
    weights : float64 array of length ``degree.sum()``
        Every candidate's finite non-negative weight, row after row (row ``i``'s weights start
        at ``degree[:i].sum()``). Zero-weight edges are never picked.
    fanout : int
        Picks per row; -1 takes every positive-weight edge (in order).
    replace : bool
        Draw exactly ``fanout`` times with replacement (none if the row has no weight);
        otherwise ``fanout`` distinct edges by Efraimidis-Spirakis keys, all positive-weight
        edges in order if there are at most ``fanout``.
    seed : int
        Seed of the counter-based generator described in the module docstring.

    Returns
    -------
    counts : int64 array of length n
    positions : int64 array of length ``counts.sum()``, row ``i``'s picks contiguous
    """
    cdef int64_t n = begin.shape[0], num_weights = weights.shape[0]
    if degree.shape[0] != n:
        raise ValueError(f"begin has {n} rows but degree has {degree.shape[0]}")
    if fanout < -1:
        raise ValueError(f"fanout must be >= 0 or -1, got {fanout}")
    counts_a = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] counts = counts_a
    cdef int64_t i, d, k, j, t, w = 0, total = 0, offset = 0, positive, bad_row = -1, max_degree = 0
    cdef int error = 0
    cdef double x, row_weight
    with nogil:
        for i in range(n):
            d = degree[i]
            if d < 0 or offset + d > num_weights:
                bad_row = i
                error = 1 if d < 0 else 2
                break
            positive = 0
            row_weight = 0.0
            for j in range(offset, offset + d):
                x = weights[j]
                if not (0.0 <= x < INFINITY):
                    error = 3
                    break
                if x > 0.0:
                    positive += 1
                    row_weight += x
            if error == 0 and row_weight == INFINITY:
                error = 4
            if error:
                bad_row = i
                break
            counts[i] = _pick_count(positive, fanout, replace)
            total += counts[i]
            offset += d
            max_degree = max(max_degree, d)
    if error == 1:
        raise ValueError(f"degree[{bad_row}] is negative")
    if error == 2 or (error == 0 and offset != num_weights):
        raise ValueError(f"weights has {num_weights} entries, degree needs {int(np.sum(degree))}")
    if error == 3:
        raise ValueError(f"row {bad_row} has a negative, NaN or infinite weight")
    if error == 4:
        raise ValueError(f"row {bad_row}'s weights overflow a double when summed")
    positions_a = np.empty(total, dtype=np.int64)
    cdef int64_t[::1] positions = positions_a
    cdef vector[double] cumulative
    cdef vector[pair[double, int64_t]] keyed
    if replace and fanout != -1:
        cumulative.resize(max_degree)
    else:
        keyed.resize(max_degree)
    cdef uint64_t stream
    offset = 0
    with nogil:
        for i in range(n):
            d = degree[i]
            k = counts[i]
            if k == 0:
                offset += d
                continue
            stream = _row_stream(seed, i)
            if replace and fanout != -1:
                _inverse_cdf_picks(&positions[w], &weights[offset], d, k, stream, cumulative.data())
            elif k < fanout or fanout == -1 or _count_positive(&weights[offset], d) <= fanout:
                t = 0
                for j in range(d):
                    if weights[offset + j] > 0.0:
                        positions[w + t] = j
                        t += 1
            else:
                _efraimidis_spirakis_picks(&positions[w], &weights[offset], d, k, stream, keyed.data())
            for j in range(k):
                positions[w + j] += begin[i]
            w += k
            offset += d
    return counts_a, positions_a


cdef struct _Slot:
    int64_t gid
    int64_t index  # position in next_nodes; -1 marks an empty slot


def relabel(const int64_t[::1] dst_nodes, const int64_t[::1] src_gids):
    """Local. Fused unique/relabel of one sampled layer.

    Parameters
    ----------
    dst_nodes : int64 array
        The layer's destination gids, unique.
    src_gids : int64 array
        The gid of every sampled edge's source.

    Returns
    -------
    next_nodes : int64 array
        ``dst_nodes`` followed by every gid of ``src_gids`` not among them, in order of first
        appearance: the node list of the next layer.
    src_pos : int64 array of length ``len(src_gids)``
        ``next_nodes[src_pos] == src_gids``.

    Raises
    ------
    ValueError
        If ``dst_nodes`` repeats a gid.

    Notes
    -----
    One pass over an open-addressing table (linear probing, ``mix64`` of the gid, power-of-two
    capacity at least 1.5 times the possible number of distinct gids, so at most 2/3 full),
    so the cost is linear and the order of first appearance needs no sort.
    """
    cdef int64_t num_dst = dst_nodes.shape[0], num_src = src_gids.shape[0]
    cdef int64_t capacity = 16
    while 2 * capacity < 3 * (num_dst + num_src):
        capacity <<= 1
    cdef uint64_t mask = <uint64_t>(capacity - 1)
    cdef _Slot empty
    empty.gid = 0
    empty.index = -1
    cdef vector[_Slot] table
    table.assign(capacity, empty)
    next_nodes_a = np.empty(num_dst + num_src, dtype=np.int64)
    src_pos_a = np.empty(num_src, dtype=np.int64)
    cdef int64_t[::1] next_nodes = next_nodes_a
    cdef int64_t[::1] src_pos = src_pos_a
    cdef int64_t i, gid, size = 0, repeated = -1
    cdef uint64_t slot
    with nogil:
        for i in range(num_dst):
            gid = dst_nodes[i]
            slot = hpcgnn_mix64(<uint64_t>gid) & mask
            while table[slot].index != -1 and table[slot].gid != gid:
                slot = (slot + 1) & mask
            if table[slot].index != -1:
                repeated = i
                break
            table[slot].gid = gid
            table[slot].index = size
            next_nodes[size] = gid
            size += 1
        if repeated < 0:
            for i in range(num_src):
                if i + PREFETCH_AHEAD < num_src:  # the table outgrows the caches: keep misses in flight
                    hpcgnn_prefetch(&table[hpcgnn_mix64(<uint64_t>src_gids[i + PREFETCH_AHEAD]) & mask])
                gid = src_gids[i]
                slot = hpcgnn_mix64(<uint64_t>gid) & mask
                while table[slot].index != -1 and table[slot].gid != gid:
                    slot = (slot + 1) & mask
                if table[slot].index == -1:
                    table[slot].gid = gid
                    table[slot].index = size
                    next_nodes[size] = gid
                    size += 1
                src_pos[i] = table[slot].index
    if repeated >= 0:
        raise ValueError(f"dst_nodes repeats gid {dst_nodes[repeated]} (at {repeated})")
    return next_nodes_a[:size].copy(), src_pos_a
