import numpy as np
import pytest

from hpcgnn.runtime.errors import InputError


@pytest.mark.mpi(sizes=(1, 2, 4))
def test_exchange_by_owner_delivers_every_row_to_its_owner_in_order(nranks, comm):
    from hpcgnn.runtime.collectives import exchange_by_owner

    rng = np.random.default_rng(comm.rank)
    count = 5 + 7 * comm.rank  # unequal counts, and nothing at all for some pairs
    owners = rng.integers(0, comm.size, count)
    ids = comm.rank * 1000 + np.arange(count)
    rows = np.stack([ids, ids * 2], axis=1).astype(np.float32)
    got_ids, got_rows = exchange_by_owner(comm, owners, ids, rows)
    sent = comm.allgather((owners, ids))
    want = np.concatenate([i[o == comm.rank] for o, i in sent])  # by sender, each in its own order
    assert np.array_equal(got_ids, want)
    assert got_rows.dtype == np.float32 and np.array_equal(got_rows, np.stack([want, want * 2], axis=1))
    empty, = exchange_by_owner(comm, np.zeros(0, np.int64), np.zeros((0, 3)))
    assert empty.shape == (0, 3)


@pytest.mark.mpi(sizes=(1, 2, 4))
def test_allreduce_averages_in_place_and_broadcast_copies_the_root(nranks, comm):
    from hpcgnn.runtime.collectives import allgather_int, allreduce_, broadcast_

    values = np.full(6, comm.rank + 1.0)
    assert allreduce_(values, comm, average=True) is values
    assert np.allclose(values, (nranks + 1) / 2)
    with pytest.raises(ValueError, match="contiguous"):
        allreduce_(np.zeros((4, 4))[:, 1], comm)
    arrays = [np.full(3, comm.rank), np.full((2, 2), comm.rank * 0.5)]
    broadcast_(arrays, comm, root=nranks - 1)
    assert (arrays[0] == nranks - 1).all() and (arrays[1] == (nranks - 1) * 0.5).all()
    assert allgather_int(comm.rank * 3, comm).tolist() == [3 * r for r in range(nranks)]


@pytest.mark.mpi(sizes=(2, 4))
def test_fail_together_raises_on_every_rank(nranks, comm):
    from hpcgnn.runtime.collectives import fail_together

    fail_together(comm, None, "nowhere")  # nobody failed: returns on every rank
    mine = InputError("part.h5", "broken shard", "field") if comm.rank == 1 else None
    with pytest.raises(InputError) as raised:
        fail_together(comm, mine, "the dataset")
    if comm.rank == 1:
        assert raised.value is mine
    else:
        assert "rank 1 failed" in str(raised.value) and "broken shard" in str(raised.value)
