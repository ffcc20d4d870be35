"""Local SGD (--average-every H): between averagings each rank follows its own gradients; every H
optimizer steps and at each epoch's end the parameters become the mean over the ranks (a serial
reference of every rank's trajectory); H = 1 is synchronous training bit for bit; a local run
trains and resumes bit-exact."""
import numpy as np
import pytest
import torch

from hpcgnn.runtime.errors import InputError
from hpcgnn.testing.reference import step_gradient
from hpcgnn.training.config import parse_train_config
from hpcgnn.training.gradsync import FlatGradients, GradientSync, LocalSync, build_sync

LR = 0.1




@pytest.mark.mpi(sizes=(2, 4))
def test_parameters_are_each_ranks_own_between_averagings_and_the_mean_at_them(nranks, comm):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    grads = FlatGradients(model)
    sync = build_sync(grads, comm, average_every=3)
    assert isinstance(sync, LocalSync) and sync.average_every == 3
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    n = grads.buffer.numel()
    start = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).double()
    # serial reference: every rank's trajectory from the last average
    base = start.clone()
    local = {r: base.clone() for r in range(comm.size)}
    for step in range(7):
        grads.buffer.copy_(torch.from_numpy(step_gradient(comm.rank, step, n)))
        assert sync.finish()  # the rank's own gradient, as it is
        optimizer.step()
        sync.stepped()
        for r in range(comm.size):
            local[r] = local[r] - LR * torch.from_numpy(step_gradient(r, step, n)).double()
        if (step + 1) % 3 == 0:
            base = sum(local.values()) / comm.size
            local = {r: base.clone() for r in range(comm.size)}
        got = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).double()
        np.testing.assert_allclose(got.numpy(), local[comm.rank].numpy(), rtol=1e-5, atol=1e-6)
    sync.settle()  # the epoch's end: one model again, after the seventh step's drift
    got = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).double()
    np.testing.assert_allclose(got.numpy(), (sum(local.values()) / comm.size).numpy(), rtol=1e-5, atol=1e-6)
    assert len({tuple(np.round(x, 6)) for x in comm.allgather(got.numpy())}) == 1


def test_one_step_is_the_blocking_reduction_and_combinations_are_refused():
    from hpcgnn.runtime.comm import world

    grads = FlatGradients(torch.nn.Linear(3, 2))
    assert type(build_sync(grads, world(), average_every=1)) is GradientSync
    for flags in (["--overlap"], ["--grad-compress", "topk:0.1"], ["--staleness", "1"]):
        with pytest.raises(InputError, match="--average-every"):
            parse_train_config(["--data", "x", "--average-every", "4", *flags])


@pytest.mark.mpi(sizes=(2,))
def test_local_training_learns_resumes_bit_exact_and_one_is_synchronous(nranks, comm, shared_tmp):
    from hpcgnn.testing.training import assert_exchange_mode

    assert_exchange_mode(comm, shared_tmp, "--average-every", 1, 4)
