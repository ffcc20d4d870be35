"""The parameter store of --sync async: concurrent one-sided updates from every rank all land,
each scaled by its lag, and reads see whole, consistent values."""
import numpy as np
import pytest

from hpcgnn.store.param_store import lag_scale, shard_bounds


def test_an_update_counts_fully_up_to_the_lag_of_ranks_in_turn_then_less_in_proportion():
    assert [lag_scale(lag, 1) for lag in (0, 1, 3)] == [1.0, 0.5, 0.25]
    assert [lag_scale(lag, 4) for lag in (0, 3, 4, 7)] == [1.0, 1.0, 0.8, 0.5]


def test_shards_are_contiguous_and_differ_by_at_most_one():
    for count, ranks in ((10, 4), (3, 4), (0, 2), (7, 1)):
        bounds = shard_bounds(count, ranks)
        sizes = np.diff(bounds)
        assert bounds[0] == 0 and bounds[-1] == count and (sizes >= 0).all() and sizes.max() - sizes.min() <= 1


@pytest.mark.mpi(sizes=(1, 2, 4))
def test_concurrent_updates_from_every_rank_all_land_scaled_by_their_lag(nranks, comm):
    from hpcgnn.store.param_store import ParamStore

    size, steps = 1003, 40
    start = np.arange(size, dtype=np.float32) / 7
    rng = np.random.default_rng(comm.rank)
    expected = np.zeros(size)  # this rank's contribution: each update times its shard's lag scale
    current = np.empty(size, dtype=np.float32)
    with ParamStore(comm, start) as store:
        bounds = store.bounds
        for _ in range(steps):  # no barrier between steps: the ranks' reads and adds interleave freely
            versions = store.read(current)
            update = rng.standard_normal(size).astype(np.float32)
            lags = store.add(update, versions)
            for owner, lag in enumerate(lags):
                lo, hi = bounds[owner], bounds[owner + 1]
                expected[lo:hi] += update[lo:hi].astype(np.float64) * np.float32(lag_scale(lag, nranks))
        comm.Barrier()
        final = np.empty(size, dtype=np.float32)
        versions = store.read(final)
    total = np.zeros(size)
    comm.Allreduce(expected, total)
    assert np.allclose(final - start, total, atol=1e-3), np.abs(final - start - total).max()
    assert (versions == nranks * steps).all()  # every add counted on every shard


@pytest.mark.mpi(sizes=(2, 4))
def test_a_round_counts_fully_and_an_update_older_than_a_round_counts_less(nranks, comm):
    from hpcgnn.store.param_store import ParamStore

    values = np.zeros(64, dtype=np.float32)
    with ParamStore(comm, values) as store:
        versions = store.read(values)
        comm.Barrier()  # everyone read the same versions; the adds then land in some order
        lags = store.add(np.ones(64, dtype=np.float32), versions)
        comm.Barrier()
        store.read(values)
        # on every shard the ranks' lags are 0, 1, .., P-1 in some order, and each counts fully
        every = np.array(comm.allgather(lags))
        assert (np.sort(every, axis=0) == np.arange(nranks)[:, None]).all()
        assert (values == nranks).all()
        # rank 0 adds from a read three rounds old: its lag is 3 (P - 1), weighing P / (1 + lag)
        old = store.read(values)
        comm.Barrier()
        for _ in range(3):
            if comm.rank:
                store.add(np.zeros(64, dtype=np.float32), store.read(values))
        comm.Barrier()
        if comm.rank == 0:
            assert (store.add(np.ones(64, dtype=np.float32), old) == 3 * (nranks - 1)).all()
        comm.Barrier()
        store.read(values)
        assert np.allclose(values, nranks + nranks / (1 + 3 * (nranks - 1)))
        store.reset(np.full(64, 5.0, dtype=np.float32))
        store.read(values)
        assert (values == 5.0).all()
