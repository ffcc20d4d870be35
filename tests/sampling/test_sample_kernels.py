"""The compiled sampling kernels against their numpy reference, plus their statistics."""
import itertools

import numpy as np
import pytest
from scipy.stats import chi2, chisquare

from hpcgnn import _sample
from hpcgnn.testing.reference import (
    reference_relabel,
    reference_sample_positions,
    reference_sample_positions_weighted,
)

P_MIN = 1e-3


def random_rows(rng, num_rows, max_degree, zero_fraction=0.1):
    """Rows with random degrees (some empty) at random, possibly overlapping, CSC starts."""
    degree = rng.integers(0, max_degree + 1, num_rows)
    degree[rng.random(num_rows) < zero_fraction] = 0
    begin = rng.integers(0, 10**9, num_rows)
    return begin, degree


def random_weights(rng, degree, zero_fraction=0.2):
    weights = rng.exponential(1.0, int(degree.sum()))
    weights[rng.random(weights.shape[0]) < zero_fraction] = 0.0
    return weights


def row_of_each_pick(counts):
    return np.repeat(np.arange(counts.shape[0]), counts)


def assert_valid_picks(begin, degree, counts, positions, fanout, replace, weights=None):
    """Every pick lies in its row (on a positive weight); no repeats and at most k without replacement."""
    assert counts.dtype == np.int64 and positions.dtype == np.int64
    assert counts.shape == begin.shape and positions.shape[0] == counts.sum()
    rows = row_of_each_pick(counts)
    in_row = positions - begin[rows]
    assert ((in_row >= 0) & (in_row < degree[rows])).all()
    if weights is not None:
        offsets = np.concatenate([[0], np.cumsum(degree)])
        assert (weights[offsets[rows] + in_row] > 0).all()
    if fanout != -1:
        if replace:
            assert (counts[degree > 0] == fanout).all() if weights is None else (counts <= fanout).all()
        else:
            assert (counts <= fanout).all()
    if not replace or fanout == -1:
        pairs = np.stack([rows, in_row])
        assert np.unique(pairs, axis=1).shape[1] == positions.shape[0]


@pytest.mark.parametrize("replace", [False, True])
@pytest.mark.parametrize("fanout", [-1, 0, 1, 5, 16, 17, 25, 100])
def test_uniform_matches_reference(fanout, replace):
    rng = np.random.default_rng(10 + fanout + 7 * replace)
    begin, degree = random_rows(rng, 300, 400 if fanout == 100 else 60)
    counts, positions = _sample.sample_positions(begin, degree, fanout, replace, 12345)
    expected_counts, expected_positions = reference_sample_positions(begin, degree, fanout, replace, 12345)
    assert np.array_equal(counts, expected_counts)
    assert np.array_equal(positions, expected_positions)
    assert_valid_picks(begin, degree, counts, positions, fanout, replace)


@pytest.mark.parametrize("replace", [False, True])
@pytest.mark.parametrize("fanout", [-1, 0, 1, 5, 25, 100])
def test_weighted_matches_reference(fanout, replace):
    rng = np.random.default_rng(100 + fanout + 7 * replace)
    begin, degree = random_rows(rng, 300, 300 if fanout == 100 else 60)
    weights = random_weights(rng, degree)
    counts, positions = _sample.sample_positions_weighted(begin, degree, weights, fanout, replace, 777)
    expected = reference_sample_positions_weighted(begin, degree, weights, fanout, replace, 777)
    assert np.array_equal(counts, expected[0])
    assert np.array_equal(positions, expected[1])
    assert_valid_picks(begin, degree, counts, positions, fanout, replace, weights)


def test_short_and_empty_rows_are_taken_whole_in_order():
    begin = np.array([50, 0, 7, 1000], dtype=np.int64)
    degree = np.array([3, 0, 5, 10], dtype=np.int64)
    counts, positions = _sample.sample_positions(begin, degree, 5, False, 1)
    assert counts.tolist() == [3, 0, 5, 5]
    assert positions[:8].tolist() == [50, 51, 52, 7, 8, 9, 10, 11]
    counts, positions = _sample.sample_positions(begin, degree, 5, True, 1)
    assert counts.tolist() == [5, 0, 5, 5]
    counts, positions = _sample.sample_positions(begin, degree, -1, True, 1)
    assert counts.tolist() == degree.tolist() and positions[:3].tolist() == [50, 51, 52]

    weights = np.array([0, 2, 1] + [0, 0, 1, 0, 0] + [1.0] * 10)
    counts, positions = _sample.sample_positions_weighted(begin, degree, weights, 4, False, 1)
    assert counts.tolist() == [2, 0, 1, 4]
    assert positions[:3].tolist() == [51, 52, 9]
    counts, _ = _sample.sample_positions_weighted(begin, degree, weights, 4, True, 1)
    assert counts.tolist() == [4, 0, 4, 4]
    counts, positions = _sample.sample_positions_weighted(begin, degree, weights, -1, False, 1)
    assert counts.tolist() == [2, 0, 1, 10]


def test_empty_input():
    empty = np.empty(0, dtype=np.int64)
    for replace in (False, True):
        counts, positions = _sample.sample_positions(empty, empty, 10, replace, 0)
        assert counts.shape == positions.shape == (0,)
        counts, positions = _sample.sample_positions_weighted(empty, empty, np.empty(0), 10, replace, 0)
        assert counts.shape == positions.shape == (0,)
    next_nodes, src_pos = _sample.relabel(empty, empty)
    assert next_nodes.shape == src_pos.shape == (0,)


def test_seed_determines_the_picks():
    rng = np.random.default_rng(3)
    begin, degree = random_rows(rng, 200, 80)
    weights = random_weights(rng, degree)
    for replace in (False, True):
        same = [_sample.sample_positions(begin, degree, 10, replace, 5)[1] for _ in range(2)]
        other = _sample.sample_positions(begin, degree, 10, replace, 6)[1]
        assert np.array_equal(same[0], same[1]) and not np.array_equal(same[0], other)
        same = [_sample.sample_positions_weighted(begin, degree, weights, 10, replace, 5)[1] for _ in range(2)]
        other = _sample.sample_positions_weighted(begin, degree, weights, 10, replace, 6)[1]
        assert np.array_equal(same[0], same[1]) and not np.array_equal(same[0], other)


def test_extreme_seed_and_read_only_inputs():
    rng = np.random.default_rng(11)
    begin, degree = random_rows(rng, 100, 40)
    weights = random_weights(rng, degree)
    for array in (begin, degree, weights):
        array.setflags(write=False)
    seed = 2**64 - 1
    for replace in (False, True):
        got = _sample.sample_positions(begin, degree, 7, replace, seed)
        expected = reference_sample_positions(begin, degree, 7, replace, seed)
        assert all(np.array_equal(a, b) for a, b in zip(got, expected))
        got = _sample.sample_positions_weighted(begin, degree, weights, 7, replace, seed)
        expected = reference_sample_positions_weighted(begin, degree, weights, 7, replace, seed)
        assert all(np.array_equal(a, b) for a, b in zip(got, expected))


def test_bad_input_is_rejected():
    begin = np.zeros(2, dtype=np.int64)
    degree = np.array([2, 1], dtype=np.int64)
    with pytest.raises(ValueError):
        _sample.sample_positions(begin, np.array([2, -1]), 3, False, 0)
    with pytest.raises(ValueError):
        _sample.sample_positions(begin, degree, -2, False, 0)
    with pytest.raises(ValueError):
        _sample.sample_positions(begin, degree[:1], 3, False, 0)
    for bad in ([1.0, 1.0], [1.0, -1.0, 1.0], [1.0, np.nan, 1.0], [np.inf, 1.0, 1.0], [1e308, 1e308, 1.0]):
        with pytest.raises(ValueError):
            _sample.sample_positions_weighted(begin, degree, np.array(bad), 3, True, 0)
    with pytest.raises(ValueError):
        _sample.relabel(np.array([4, 2, 4]), np.array([1]))


def shared_row(num_rows, row_length):
    """``num_rows`` rows over the same candidates, so their picks pool into one histogram."""
    return np.zeros(num_rows, dtype=np.int64), np.full(num_rows, row_length, dtype=np.int64)


def inclusion_pvalue(observed, row_length, picks_per_row, replace):
    """Chi-square p-value that every candidate is picked equally often.

    Without replacement a row's inclusion counts have the multinomial covariance scaled by
    ``(d - k) / (d - 1)``, so the statistic is rescaled to stay chi-square distributed.
    """
    statistic = chisquare(observed).statistic
    if not replace:
        statistic *= (row_length - 1) / (row_length - picks_per_row)
    return chi2.sf(statistic, row_length - 1)


@pytest.mark.parametrize("replace", [False, True])
def test_uniform_picks_are_uniform(replace):
    begin, degree = shared_row(20_000, 20)
    _, positions = _sample.sample_positions(begin, degree, 5, replace, 2024)
    assert inclusion_pvalue(np.bincount(positions, minlength=20), 20, 5, replace) > P_MIN


def test_uniform_subsets_without_replacement_are_uniform():
    begin, degree = shared_row(30_000, 6)
    _, positions = _sample.sample_positions(begin, degree, 2, False, 99)
    pairs = np.sort(positions.reshape(-1, 2), axis=1)
    subset_index = {pair: i for i, pair in enumerate(itertools.combinations(range(6), 2))}
    observed = np.bincount([subset_index[tuple(p)] for p in pairs.tolist()], minlength=len(subset_index))
    assert chisquare(observed).pvalue > P_MIN


def test_uniform_without_replacement_uses_the_bitmap_path_uniformly():
    begin, degree = shared_row(3_000, 200)
    _, positions = _sample.sample_positions(begin, degree, 100, False, 4)
    assert inclusion_pvalue(np.bincount(positions, minlength=200), 200, 100, False) > P_MIN


WEIGHTS = np.array([0.0, 1.0, 2.0, 3.0, 0.0, 4.0, 10.0])


def expected_by_weight(total):
    return total * WEIGHTS[WEIGHTS > 0] / WEIGHTS.sum()


def test_weighted_picks_with_replacement_follow_the_weights():
    begin, degree = shared_row(10_000, WEIGHTS.shape[0])
    weights = np.tile(WEIGHTS, begin.shape[0])
    _, positions = _sample.sample_positions_weighted(begin, degree, weights, 5, True, 31)
    observed = np.bincount(positions, minlength=WEIGHTS.shape[0])
    assert (observed[WEIGHTS == 0] == 0).all()
    assert chisquare(observed[WEIGHTS > 0], expected_by_weight(positions.shape[0])).pvalue > P_MIN


def test_weighted_first_pick_without_replacement_follows_the_weights():
    begin, degree = shared_row(20_000, WEIGHTS.shape[0])
    weights = np.tile(WEIGHTS, begin.shape[0])
    counts, positions = _sample.sample_positions_weighted(begin, degree, weights, 3, False, 8)
    assert (counts == 3).all()
    first = positions.reshape(-1, 3)[:, 0]
    observed = np.bincount(first, minlength=WEIGHTS.shape[0])
    assert (np.bincount(positions, minlength=WEIGHTS.shape[0])[WEIGHTS == 0] == 0).all()
    assert chisquare(observed[WEIGHTS > 0], expected_by_weight(first.shape[0])).pvalue > P_MIN


@pytest.mark.parametrize("stride", [1, 2**32, 2**20 + 1])
def test_relabel_matches_reference(stride):
    rng = np.random.default_rng(stride % 1000)
    universe = (np.arange(5_000, dtype=np.int64) - 2_500) * stride
    dst = rng.choice(universe, 300, replace=False)
    src = rng.choice(universe, 20_000)
    next_nodes, src_pos = _sample.relabel(dst, src)
    expected_nodes, expected_pos = reference_relabel(dst, src)
    assert np.array_equal(next_nodes, expected_nodes) and np.array_equal(src_pos, expected_pos)
    assert next_nodes.dtype == src_pos.dtype == np.int64
    assert np.array_equal(next_nodes[: dst.shape[0]], dst)
    assert np.unique(next_nodes).shape == next_nodes.shape
    assert np.isin(src, next_nodes).all()
    assert np.array_equal(next_nodes[src_pos], src)


def test_relabel_maps_destinations_into_the_prefix():
    dst = np.array([40, 10, 30], dtype=np.int64)
    src = np.array([30, 7, 40, 7, 10, 99, 30], dtype=np.int64)
    next_nodes, src_pos = _sample.relabel(dst, src)
    assert next_nodes.tolist() == [40, 10, 30, 7, 99]
    assert src_pos.tolist() == [2, 3, 0, 3, 1, 4, 2]
