"""Pure-numpy references of the compiled kernels (test oracles only).

Each ``reference_*`` function reproduces its counterpart in :mod:`hpcgnn._sample` bit for bit,
following the random-number specification of that module's docstring; :func:`dropout_mask`
reproduces the masks of :mod:`hpcgnn._dense`. They are written for clarity, row by row, and
are far too slow for a hot path.
"""
from __future__ import annotations

import math

import numpy as np

from hpcgnn.runtime.rng import GOLDEN_GAMMA, MASK64, mix64

SEED_MULTIPLIER = 0xD1B54A32D192ED03
ROW_MULTIPLIER = 0x8CB92BA72F3D8DD7
TWO_POW_MINUS_53 = 2.0**-53


def random_sparse_rows(rng, rows, cols, weighted):
    """Local. A random sparse ``rows x cols`` matrix for kernel tests: ``(indptr, col, weight,
    dense)`` with 0 to 8 entries a row, every seventh row empty, repeated columns included,
    ``weight`` float32 in [0, 1) or None (ones), and ``dense`` its float64 sum of entries."""
    degrees = rng.integers(0, 9, rows)
    degrees[::7] = 0
    indptr = np.concatenate([[0], np.cumsum(degrees)]).astype(np.int64)
    col = rng.integers(0, cols, indptr[-1]).astype(np.int64)
    weight = rng.random(indptr[-1]).astype(np.float32) if weighted else None
    dense = np.zeros((rows, cols))
    np.add.at(dense, (np.repeat(np.arange(rows), degrees), col), 1.0 if weight is None else weight)
    return indptr, col, weight, dense


def step_gradient(rank, step, n):
    """Local. The float32 gradient rank ``rank`` feeds a gradient exchange at ``step``: different on
    every rank and step and independent of the parameters, so a test can form every rank's
    trajectory serially. A numpy array."""
    return np.random.default_rng(1000 * step + rank).standard_normal(n).astype(np.float32)


def dropout_mask(seed, n, threshold):
    """Local. The keep-mask (bool, length ``n``) of the dropout kernels for ``seed`` and ``threshold``."""
    q = np.arange((n + 3) // 4, dtype=np.uint64)
    with np.errstate(over="ignore"):
        words = mix64(np.uint64(seed) * np.uint64(SEED_MULTIPLIER) + q + np.uint64(GOLDEN_GAMMA))
    lanes = np.uint64(16) * np.arange(4, dtype=np.uint64)
    draws = ((words[:, None] >> lanes) & np.uint64(0xFFFF)).reshape(-1)[:n]
    return draws >= threshold


def random_bits(seed: int, row: int, draws: np.ndarray) -> np.ndarray:
    """Local. ``splitmix64(stream(row) + j) >> 11`` for every draw index ``j`` in ``draws``."""
    stream = (seed * SEED_MULTIPLIER + row * ROW_MULTIPLIER + GOLDEN_GAMMA) & MASK64
    z = mix64(np.uint64(stream) + np.asarray(draws, dtype=np.uint64))
    return z >> np.uint64(11)


def uniforms(seed: int, row: int, draws: np.ndarray) -> np.ndarray:
    """Local. ``u(row, j)`` in [0, 1) for every draw index ``j`` in ``draws``."""
    return random_bits(seed, row, draws).astype(np.float64) * TWO_POW_MINUS_53


def uniforms_open_at_zero(seed: int, row: int, draws: np.ndarray) -> np.ndarray:
    """Local. ``u_open(row, j)`` in (0, 1] for every draw index ``j`` in ``draws``."""
    return (random_bits(seed, row, draws) + np.uint64(1)).astype(np.float64) * TWO_POW_MINUS_53


def integers_below(seed: int, row: int, draws: np.ndarray, bounds) -> np.ndarray:
    """Local. ``floor(u(row, j) * bound)`` for every draw ``j`` and its ``bound``."""
    return np.floor(uniforms(seed, row, draws) * np.asarray(bounds, dtype=np.float64)).astype(np.int64)


def floyd_picks(seed: int, row: int, row_length: int, num_picks: int) -> list[int]:
    """Local. Robert Floyd's ``num_picks`` distinct indices of ``range(row_length)``, in insertion order."""
    first = row_length - num_picks
    candidates = np.arange(first, row_length)
    draws = integers_below(seed, row, candidates - first, candidates + 1)
    picks: list[int] = []
    chosen: set[int] = set()
    for candidate, draw in zip(candidates.tolist(), draws.tolist()):
        pick = candidate if draw in chosen else draw
        picks.append(pick)
        chosen.add(pick)
    return picks


def _as_csr(picks_per_row: list) -> tuple[np.ndarray, np.ndarray]:
    counts = np.array([len(p) for p in picks_per_row], dtype=np.int64)
    positions = np.concatenate([np.asarray(p, dtype=np.int64) for p in picks_per_row] + [np.empty(0, np.int64)])
    return counts, positions


def reference_sample_positions(begin, degree, fanout: int, replace: bool, seed: int):
    """Local. Reference of ``_sample.sample_positions``: ``(counts, positions)``."""
    seed &= MASK64
    picks_per_row = []
    for row, (start, length) in enumerate(zip(np.asarray(begin).tolist(), np.asarray(degree).tolist())):
        if fanout == -1 or (not replace and length <= fanout):
            in_row = np.arange(length)
        elif replace:
            in_row = integers_below(seed, row, np.arange(fanout), length) if length else np.empty(0, np.int64)
        else:
            in_row = np.array(floyd_picks(seed, row, length, fanout), dtype=np.int64)
        picks_per_row.append(start + in_row)
    return _as_csr(picks_per_row)


def reference_sample_positions_weighted(begin, degree, weights, fanout: int, replace: bool, seed: int):
    """Local. Reference of ``_sample.sample_positions_weighted``: ``(counts, positions)``."""
    seed &= MASK64
    degree = np.asarray(degree, dtype=np.int64)
    weights = np.asarray(weights, dtype=np.float64)
    offsets = np.concatenate([[0], np.cumsum(degree)])
    picks_per_row = []
    for row, start in enumerate(np.asarray(begin).tolist()):
        row_weights = weights[offsets[row]:offsets[row + 1]]
        positive = np.flatnonzero(row_weights > 0)
        if positive.shape[0] == 0 or fanout == 0:
            in_row = np.empty(0, np.int64)
        elif fanout == -1 or (not replace and positive.shape[0] <= fanout):
            in_row = positive
        elif replace:
            cumulative = np.cumsum(row_weights)  # sequential, like the kernel's running sum
            targets = uniforms(seed, row, np.arange(fanout)) * cumulative[-1]
            in_row = np.searchsorted(cumulative, targets, side="right")
        else:
            logs = np.array([math.log(u) for u in uniforms_open_at_zero(seed, row, positive).tolist()])
            keys = logs / row_weights[positive]
            order = np.lexsort((positive, -keys))  # decreasing key, ties to the lower index
            in_row = positive[order[:fanout]]
        picks_per_row.append(start + in_row)
    return _as_csr(picks_per_row)


def reference_relabel(dst_nodes, src_gids):
    """Local. Reference of ``_sample.relabel``: ``(next_nodes, src_pos)``."""
    dst_nodes = np.asarray(dst_nodes, dtype=np.int64)
    src_gids = np.asarray(src_gids, dtype=np.int64)
    new_sources = src_gids[~np.isin(src_gids, dst_nodes)]
    unique_new, first_seen = np.unique(new_sources, return_index=True)
    next_nodes = np.concatenate([dst_nodes, unique_new[np.argsort(first_seen)]])
    by_gid = np.argsort(next_nodes, kind="stable")
    src_pos = by_gid[np.searchsorted(next_nodes, src_gids, sorter=by_gid)]
    return next_nodes, src_pos.astype(np.int64)
