"""Bounded staleness (--staleness S): the step after step t applies exactly the mean gradient of
step t - S (a serial reference: every rank's gradients summed in float64), the first S steps
apply none, a checkpoint carries the pending reductions, S = 0 is synchronous training bit for
bit, and a stale run trains and resumes bit-exact."""
import numpy as np
import pytest
import torch

from hpcgnn.runtime.errors import InputError
from hpcgnn.testing.reference import step_gradient
from hpcgnn.training.config import parse_train_config
from hpcgnn.training.gradsync import FlatGradients, GradientSync, StaleSync, build_sync


def run_steps(sync, grads, comm, steps, first=0):
    """Collective over comm. Feed ``steps`` steps' gradients; each finish's (applied?, buffer)."""
    out = []
    for step in range(first, first + steps):
        grads.buffer.copy_(torch.from_numpy(step_gradient(comm.rank, step, grads.buffer.numel())))
        applied = sync.finish()
        out.append((applied, grads.buffer.clone()))
    return out


@pytest.mark.mpi(sizes=(2, 4))
def test_each_step_applies_the_mean_gradient_of_the_step_s_before(nranks, comm):
    for staleness in (1, 3):
        model = torch.nn.Linear(7, 5)
        grads = FlatGradients(model)
        sync = build_sync(grads, comm, staleness=staleness)
        assert isinstance(sync, StaleSync) and sync.staleness == staleness
        results = run_steps(sync, grads, comm, 8)
        n = grads.buffer.numel()
        for step, (applied, buffer) in enumerate(results):
            assert applied == (step >= staleness)
            if applied:  # the serial reference: the ranks' gradients of step - S, summed in float64
                want = torch.from_numpy(sum(step_gradient(r, step - staleness, n).astype(np.float64)
                                            for r in range(comm.size)) / comm.size)
                np.testing.assert_allclose(buffer.double().numpy(), want.numpy(), rtol=1e-6, atol=1e-6)
        sync.close()


@pytest.mark.mpi(sizes=(2,))
def test_a_checkpoint_carries_the_pending_reductions(nranks, comm):
    model = torch.nn.Linear(7, 5)
    straight_grads = FlatGradients(model)
    straight = StaleSync(straight_grads, comm, 2)
    whole = run_steps(straight, straight_grads, comm, 7)
    cut_grads = FlatGradients(torch.nn.Linear(7, 5))
    first = StaleSync(cut_grads, comm, 2)
    head = run_steps(first, cut_grads, comm, 4)
    state = first.state()
    assert state.shape == (2, cut_grads.buffer.numel())  # steps 2 and 3, reduced, not yet applied
    first.close()
    resumed = StaleSync(cut_grads, comm, 2)
    resumed.load_state(state)
    tail = run_steps(resumed, cut_grads, comm, 3, first=4)
    for (applied, buffer), (want_applied, want) in zip(head + tail, whole):
        assert applied == want_applied and torch.equal(buffer, want)
    resumed.close()
    straight.close()


def test_staleness_zero_is_the_blocking_reduction():
    from hpcgnn.runtime.comm import world

    grads = FlatGradients(torch.nn.Linear(3, 2))
    assert type(build_sync(grads, world())) is GradientSync
    assert type(build_sync(grads, world(), staleness=0)) is GradientSync


@pytest.mark.parametrize("flags", [["--overlap"], ["--grad-compress", "bf16"], ["--staleness", "-1"]])
def test_combinations_it_does_not_serve_are_refused(flags):
    with pytest.raises((InputError, SystemExit)) as caught:
        parse_train_config(["--data", "x", "--staleness", "2", *flags])
    if isinstance(caught.value, InputError):
        assert "--staleness" in str(caught.value)


@pytest.mark.mpi(sizes=(2,))
def test_stale_training_learns_resumes_bit_exact_and_zero_is_synchronous(nranks, comm, shared_tmp):
    from hpcgnn.testing.training import assert_exchange_mode

    assert_exchange_mode(comm, shared_tmp, "--staleness", 0, 2)
