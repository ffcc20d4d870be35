"""Asynchronous training over RMA (--sync async): each rank's optimizer step reaches the shared
parameters scaled by its lag (a serial reference of a round of steps), the
ranks hold one model and optimizer state after an epoch's end, one rank is synchronous training
up to rounding and resumes bit-exact, several ranks learn, and the metrics record the lags."""
import numpy as np
import pytest
import torch

from hpcgnn.runtime.errors import InputError
from hpcgnn.store.param_store import lag_scale
from hpcgnn.testing.reference import step_gradient
from hpcgnn.training.config import parse_train_config
from hpcgnn.training.gradsync import AsyncSync, FlatGradients, build_sync, flat_parameters

LR = 0.1




@pytest.mark.mpi(sizes=(2, 4))
def test_each_ranks_change_lands_scaled_by_its_lag_and_the_epoch_end_is_one_model(nranks, comm):
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 3)
    grads = FlatGradients(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    sync = build_sync(grads, comm, optimizer=optimizer, mode="async")
    assert isinstance(sync, AsyncSync)
    n = grads.buffer.numel()
    bounds = sync.store.bounds
    shared = flat_parameters(grads.params).double()
    for step in range(4):
        comm.Barrier()  # a round: every rank steps from the same read parameters, then adds in any order
        before = flat_parameters(grads.params)
        grads.buffer.copy_(torch.from_numpy(step_gradient(comm.rank, step, n)))
        assert sync.finish()  # the rank's own gradient, unreduced
        assert torch.equal(grads.buffer, torch.from_numpy(step_gradient(comm.rank, step, n)))
        optimizer.step()
        change = (flat_parameters(grads.params) - before).double()
        sync.stepped()
        lags = sync.lags[-(len(bounds) - 1):]  # this step's lag on each shard
        scaled = torch.cat([change[bounds[s]:bounds[s + 1]] * lag_scale(lag, nranks) for s, lag in enumerate(lags)])
        every = comm.allgather(scaled.numpy())
        assert sorted(comm.allgather(lags[0])) == list(range(nranks))  # each lag 0 .. P-1 once per shard
        shared += torch.from_numpy(np.sum(every, axis=0))
        sync.settle()  # after a barrier: everyone's change is in, and every rank reads it
        np.testing.assert_allclose(flat_parameters(grads.params).double().numpy(), shared.numpy(), rtol=1e-5,
                                   atol=1e-6)
    moments = [optimizer.state[p]["exp_avg"].reshape(-1).numpy().copy() for p in grads.params]
    assert len({np.concatenate(m).round(7).tobytes() for m in comm.allgather(moments)}) == 1  # averaged
    record = sync.observed()
    assert record["sync"] == "async" and record["lag_max"] == nranks - 1
    assert record["lag_mean"] == pytest.approx((nranks - 1) / 2)
    sync.close()


def test_combinations_that_would_meet_every_step_are_refused():
    for flags, word in ((["--staleness", "2"], "--staleness"), (["--average-every", "4"], "--average-every"),
                        (["--overlap"], "--overlap"), (["--embed-dim", "8"], "--embed-dim"),
                        (["--sampler", "vr"], "--sync allreduce")):
        with pytest.raises(InputError, match="--sync") as caught:
            parse_train_config(["--data", "x", "--sync", "async", *flags])
        assert word in str(caught.value)


@pytest.mark.mpi(sizes=(1,))
def test_one_rank_is_synchronous_up_to_rounding_and_resumes_bit_exact(nranks, comm, shared_tmp):
    from hpcgnn.testing.datasets import make_dataset
    from hpcgnn.testing.training import assert_resume_bit_exact
    from hpcgnn.training.loop import run

    path, _ = make_dataset(comm, shared_tmp, 1, name="async1", num_nodes=300, avg_degree=6, p_inside=0.9)
    base = ["--data", path, "--fanouts", "4,4", "--batch-size", "10", "--hidden", "16", "--no-progress",
            "--prefetch", "0", "--lr", "0.02"]
    _, synchronous = run(parse_train_config([*base, "--epochs", "2"]), comm)
    _, alone = run(parse_train_config([*base, "--epochs", "2", "--sync", "async"]), comm)
    assert alone[0]["sync"] == "async" and alone[0]["lag_max"] == 0 and alone[0]["extra_steps"] == [0]
    np.testing.assert_allclose([r["loss"] for r in alone], [r["loss"] for r in synchronous], rtol=1e-4)

    def flags(epochs, directory, *extra):
        return parse_train_config([*base, "--sync", "async", "--epochs", str(epochs), "--eval-every", "2",
                                   "--checkpoint-every", "1", "--checkpoint-dir", directory, *extra])

    assert_resume_bit_exact(comm, flags, shared_tmp, "async")


@pytest.mark.mpi(sizes=(2, 4))
def test_several_ranks_learn_with_equal_steps_and_record_their_lags(nranks, comm, shared_tmp):
    from hpcgnn.testing.datasets import make_dataset
    from hpcgnn.training.loop import run

    path, _ = make_dataset(comm, shared_tmp, nranks, name="async", num_nodes=300, avg_degree=6, p_inside=0.9)
    args = parse_train_config(["--data", path, "--fanouts", "4,4", "--batch-size", "10", "--hidden", "16",
                               "--no-progress", "--prefetch", "0", "--lr", "0.05", "--epochs", "12",
                               "--eval-every", "6", "--sync", "async"])
    _, history = run(args, comm)
    assert len(set(comm.allgather(len(history)))) == 1
    assert history[0]["loss"] > history[-1]["loss"]
    assert history[-1]["test_acc"] > 0.5, history[-1]
    assert all(r["sync"] == "async" and 0 <= r["lag_mean"] <= r["lag_max"] for r in history)
    assert max(r["lag_max"] for r in history) >= 1  # the other ranks' updates did arrive between steps
    assert all(len(r["extra_steps"]) == nranks and min(r["extra_steps"]) >= 0 for r in history)


@pytest.mark.mpi(sizes=(2,))
def test_a_rank_that_ends_its_epoch_first_trains_on_until_the_slow_one_arrives(nranks, comm, shared_tmp,
                                                                                 monkeypatch):
    import time

    from hpcgnn.testing.datasets import make_dataset
    from hpcgnn.training import loop

    path, _ = make_dataset(comm, shared_tmp, nranks, name="async_slow", num_nodes=300, avg_degree=6,
                           p_inside=0.9)
    if comm.rank == 1:  # a straggler: every step 50 ms longer
        step = loop.train_step
        monkeypatch.setattr(loop, "train_step", lambda *a, **k: (time.sleep(0.05), step(*a, **k))[1])
    args = parse_train_config(["--data", path, "--fanouts", "4,4", "--batch-size", "10", "--hidden", "16",
                               "--no-progress", "--prefetch", "0", "--epochs", "3", "--eval-every", "0",
                               "--sync", "async"])
    _, history = loop.run(args, comm)
    for record in history:
        fast, slow = record["extra_steps"]
        assert fast >= 1 and slow == 0, record["extra_steps"]
