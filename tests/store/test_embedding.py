import os

import numpy as np
import pytest

from hpcgnn.runtime.comm import FORCE_RMA_ENV

NUM_ROWS, DIM, STEPS = 37, 4, 3  # 37 rows split unevenly over 2 and 4 ranks
ROUTES = ("shm", "rma")
LR = {"adagrad": 0.1, "adam": 0.05}


def all_rows():
    return np.arange(NUM_ROWS)


def lookups(rank, step):
    """What rank ``rank`` looks up in step ``step``: the same core ids (with repeats) every step,
    plus a few that change per step; then the squared-loss targets for them."""
    core = np.random.default_rng(100 + rank).integers(0, NUM_ROWS, 10)
    extra = np.random.default_rng(1000 * step + rank).integers(0, NUM_ROWS, 5)
    ids = np.concatenate([core, core[:3], extra])
    targets = np.random.default_rng(7000 + 10 * step + rank).normal(size=(ids.shape[0], DIM)).astype(np.float32)
    return ids, targets


def squared_loss(rows, targets):
    return 0.5 * ((rows - targets) ** 2).sum()


def dist_step(emb, opt, rank, step):
    import torch

    ids, targets = lookups(rank, step)
    half = ids.shape[0] // 2
    rows = torch.cat([emb(ids[:half]), emb(torch.from_numpy(ids[half:]))])  # two traced lookups
    emb(ids[:2])  # traced but never used by the loss: no grad, must be skipped
    with torch.no_grad():
        emb(ids)  # not traced at all
    squared_loss(rows, torch.from_numpy(targets)).backward()
    opt.step()


def oracle_step(lookup, opt, size, step):
    """One step of a single-process torch optimizer on the losses of all ranks summed."""
    import torch

    opt.zero_grad(set_to_none=True)
    loss = 0
    for rank in range(size):
        ids, targets = lookups(rank, step)
        loss = loss + squared_loss(lookup(ids), torch.from_numpy(targets))
    loss.backward()
    opt.step()


def make_oracles(kind, initial):
    """A dense torch parameter with its torch optimizer, and a lazy twin: one parameter per row,
    and a row left out of a step gets no grad, so torch skips it (its Adam step count stays)."""
    import torch

    dense = torch.nn.Parameter(torch.from_numpy(initial.copy()))
    per_row = [torch.nn.Parameter(torch.from_numpy(row.copy())) for row in initial]

    def lookup_per_row(ids):
        uniq, inverse = np.unique(ids, return_inverse=True)
        return torch.stack([per_row[i] for i in uniq])[torch.from_numpy(inverse)]

    def read_per_row():
        return torch.stack([row.detach() for row in per_row]).numpy()

    optim = torch.optim.Adagrad if kind == "adagrad" else torch.optim.Adam
    return [(lambda ids: dense[torch.from_numpy(ids)], optim([dense], lr=LR[kind]), lambda: dense.detach().numpy()),
            (lookup_per_row, optim(per_row, lr=LR[kind]), read_per_row)]


def make_optimizer(kind, emb):
    from hpcgnn.store import SparseAdagrad, SparseAdam

    return (SparseAdagrad if kind == "adagrad" else SparseAdam)([emb], lr=LR[kind])


@pytest.mark.mpi(sizes=(1, 2, 4))
def test_forward_rows_and_checkpoint_layout_errors(nranks, comm, shared_tmp, monkeypatch):
    import torch

    from hpcgnn.runtime.comm import mpi
    from hpcgnn.runtime.errors import InputError
    from hpcgnn.store import DistEmbedding, SparseAdagrad, SparseAdam
    from hpcgnn.store.dist_tensor import zeros_init
    from hpcgnn.store.partition_book import PartitionBook

    # the table a single process builds: default init must not depend on the rank count
    with DistEmbedding(NUM_ROWS, DIM, name="fwd", comm=mpi().COMM_SELF).weight as single:
        expected = single.local.copy()
    assert np.abs(expected).max() <= 1 / np.sqrt(DIM) and np.unique(expected).size == expected.size
    rng = np.random.default_rng(comm.rank)
    for route in ROUTES:
        monkeypatch.setenv(FORCE_RMA_ENV, "1" if route == "rma" else "0")
        emb = DistEmbedding(NUM_ROWS, DIM, name="fwd", comm=comm)
        other = DistEmbedding(NUM_ROWS, DIM, name="other", comm=comm)
        assert not np.array_equal(other.weight.gather(all_rows()), expected), "names should seed differently"
        start, end = emb.local_range
        remote = np.setdiff1d(all_rows(), np.arange(start, end))
        cases = {"random": rng.integers(0, NUM_ROWS, 50), "duplicates": np.repeat(rng.integers(0, NUM_ROWS, 4), 5),
                 "remote": rng.choice(remote, 20) if remote.size else remote, "empty": np.zeros(0, np.int64),
                 "reversed": all_rows()[::-1]}
        for case, ids in cases.items():
            rows = emb(torch.from_numpy(ids) if case == "random" else ids)
            assert rows.dtype == torch.float32 and rows.shape == (ids.shape[0], DIM) and rows.requires_grad, case
            assert np.array_equal(rows.detach().numpy(), expected[ids]), (route, case)
        with torch.no_grad():
            assert not emb(cases["random"]).requires_grad

        # checkpoints refuse a different shape or rank layout, on every rank
        emb_path = os.path.join(shared_tmp, f"{route}-emb.{comm.rank}.npz")
        opt_path = os.path.join(shared_tmp, f"{route}-opt.{comm.rank}.npz")
        emb.save(emb_path)
        SparseAdam([emb], lr=0.1).save(opt_path)
        wider = DistEmbedding(NUM_ROWS, DIM + 1, name="fwd", init=zeros_init, comm=comm)
        with pytest.raises(InputError, match="shape"):
            wider.load(emb_path)
        with pytest.raises(InputError, match=r"optimizer.*SparseAdagrad.*value SparseAdam"):
            SparseAdagrad([emb], lr=0.1).load(opt_path)
        crafted = os.path.join(shared_tmp, f"{route}-crafted.{comm.rank}.npz")
        with np.load(emb_path) as data:
            arrays = dict(data)
        arrays["local_range"] = np.array([start, end + 1])
        np.savez(crafted, **arrays)
        with pytest.raises(InputError, match=r"crafted.*local_range.*value"):
            emb.load(crafted)
        if comm.size > 1:  # every boundary moves, so every rank's range differs from the saved one
            shifted = PartitionBook(list(range(comm.size)) + [NUM_ROWS])
            moved = DistEmbedding(NUM_ROWS, DIM, name="fwd", init=zeros_init, comm=comm, book=shifted)
            with pytest.raises(InputError, match=f"{comm.rank}.npz.*local_range"):
                moved.load(emb_path)
            with pytest.raises(InputError, match="local_range"):
                SparseAdam([moved], lr=0.1).load(opt_path)
            moved.close()
        emb.load(emb_path)  # the matching layout still loads
        assert np.array_equal(emb.weight.gather(all_rows()), expected)

        # a step where only rank 0 has gradients (the others send nothing) touches only its rows
        opt = SparseAdagrad([emb], lr=0.5)
        emb(cases["random"])  # traced lookups without a backward carry no gradient
        opt.step()
        assert np.array_equal(emb.weight.gather(all_rows()), expected)
        if comm.rank == 0:
            emb([0, NUM_ROWS - 1, 0]).sum().backward()
        opt.step()
        after = emb.weight.gather(all_rows())
        assert np.array_equal(after[1:-1], expected[1:-1])
        assert (after[[0, -1]] < expected[[0, -1]]).all()
        for table in (emb, other, wider):
            table.close()


@pytest.mark.mpi(sizes=(1, 2, 4))
def test_sparse_optimizers_match_torch_and_resume(nranks, comm, shared_tmp, monkeypatch):
    from hpcgnn.store.dist_tensor import uniform_init, zeros_init
    from hpcgnn.store.embedding import DistEmbedding

    init = uniform_init(-0.5, 0.5, seed=11)
    initial = init(all_rows(), (DIM,), np.float32)
    seen = [np.unique(np.concatenate([lookups(r, s)[0] for r in range(comm.size)])) for s in range(STEPS)]
    touched_ever = np.unique(np.concatenate(seen))
    touched_always = seen[0]
    for ids in seen[1:]:
        touched_always = np.intersect1d(touched_always, ids)
    never = np.setdiff1d(all_rows(), touched_ever)
    assert never.size and touched_always.size and touched_always.size < touched_ever.size

    for route in ROUTES:
        monkeypatch.setenv(FORCE_RMA_ENV, "1" if route == "rma" else "0")
        for kind in ("adagrad", "adam"):
            emb = DistEmbedding(NUM_ROWS, DIM, name=kind, init=init, comm=comm)
            opt = make_optimizer(kind, emb)
            (dense_lookup, dense_opt, dense_rows), (lazy_lookup, lazy_opt, lazy_rows) = make_oracles(kind, initial)
            # dense Adam also moves rows left out of a step, lazy Adam must not: compare with
            # dense torch only the rows every step touched (all touched rows for Adagrad)
            dense_compare = touched_ever if kind == "adagrad" else touched_always
            emb_path = os.path.join(shared_tmp, f"{route}-{kind}-emb.{comm.rank}.npz")
            opt_path = os.path.join(shared_tmp, f"{route}-{kind}-opt.{comm.rank}.npz")
            for step in range(STEPS):
                if step == STEPS - 1:
                    emb.save(emb_path)
                    opt.save(opt_path)
                    saved_rows, saved_state = emb.weight.gather(all_rows()), opt.state_dict()
                dist_step(emb, opt, comm.rank, step)
                oracle_step(dense_lookup, dense_opt, comm.size, step)
                oracle_step(lazy_lookup, lazy_opt, comm.size, step)
                got = emb.weight.gather(all_rows())
                where = f"{route} {kind} step {step}"
                np.testing.assert_allclose(got[dense_compare], dense_rows()[dense_compare], atol=1e-6, rtol=1e-5,
                                           err_msg=where + " vs dense torch")
                np.testing.assert_allclose(got, lazy_rows(), atol=1e-6, rtol=1e-5, err_msg=where + " vs lazy torch")
                assert np.array_equal(got[never], initial[never])
                assert not np.array_equal(got[touched_ever], initial[touched_ever])
            final = emb.weight.gather(all_rows())

            # resume from the checkpoint before the last step: same result as never stopping
            resumed = DistEmbedding(NUM_ROWS, DIM, name=kind, init=zeros_init, comm=comm)
            resumed_opt = make_optimizer(kind, resumed)
            resumed_opt.lr = 123.0  # restored from the checkpoint
            resumed.load(emb_path)
            resumed_opt.load(opt_path)
            assert np.array_equal(resumed.weight.gather(all_rows()), saved_rows)
            for expected_state in (saved_state, None):
                if expected_state is None:  # after the last step, from both
                    dist_step(resumed, resumed_opt, comm.rank, STEPS - 1)
                    expected_state = opt.state_dict()
                state = resumed_opt.state_dict()
                assert state.keys() == expected_state.keys()
                for key, value in expected_state.items():
                    assert np.array_equal(state[key], value), (route, kind, key)
            assert np.array_equal(resumed.weight.gather(all_rows()), final), f"{route} {kind} resume"
            emb.close()
            resumed.close()
