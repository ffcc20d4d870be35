"""The dense parameters' Adam: torch's arithmetic and state dict, without importing the compiler."""
import subprocess
import sys

import pytest
import torch

from hpcgnn.training.optim import EagerAdam


def _model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))


def _train(model, optimizer, steps, seed=1):
    generator = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randn(32, 12, generator=generator)
        optimizer.zero_grad()
        model(x).pow(2).mean().backward()
        optimizer.step()


@pytest.mark.parametrize("fused", [True, False])
def test_eager_adam_steps_as_torch_adam_bit_for_bit(fused):
    ours, theirs = _model(0), _model(0)
    options = dict(lr=0.01, weight_decay=1e-3, fused=fused)
    _train(ours, EagerAdam(ours.parameters(), **options), 6)
    _train(theirs, torch.optim.Adam(theirs.parameters(), **options), 6)
    for a, b in zip(ours.parameters(), theirs.parameters()):
        assert torch.equal(a, b)


def test_state_dicts_cross_between_eager_and_torch_adam():
    """A checkpoint of either optimizer resumes in the other, and the runs stay equal."""
    ours, theirs = _model(0), _model(0)
    ours_opt = EagerAdam(ours.parameters(), lr=0.01, fused=True)
    theirs_opt = torch.optim.Adam(theirs.parameters(), lr=0.01, fused=True)
    _train(ours, ours_opt, 3)
    _train(theirs, theirs_opt, 3)
    swapped_ours = EagerAdam(ours.parameters(), lr=0.01, fused=True)
    swapped_ours.load_state_dict(theirs_opt.state_dict())
    swapped_theirs = torch.optim.Adam(theirs.parameters(), lr=0.01, fused=True)
    swapped_theirs.load_state_dict(ours_opt.state_dict())
    _train(ours, swapped_ours, 3, seed=2)
    _train(theirs, swapped_theirs, 3, seed=2)
    for a, b in zip(ours.parameters(), theirs.parameters()):
        assert torch.equal(a, b)
    assert swapped_ours.state_dict()["state"][0]["step"] == 6


def test_stepping_and_checkpointing_never_import_the_compiler():
    """The point of the class: a rank's start is not charged torch._dynamo's import."""
    script = (
        "import io, sys, torch\n"
        "from hpcgnn.training.optim import EagerAdam\n"
        "model = torch.nn.Linear(4, 2)\n"
        "opt = EagerAdam(model.parameters(), lr=0.1, fused=True)\n"
        "opt.zero_grad(); model(torch.ones(3, 4)).sum().backward(); opt.step()\n"
        "buffer = io.BytesIO(); torch.save(opt.state_dict(), buffer); buffer.seek(0)\n"
        "opt.load_state_dict(torch.load(buffer))\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "False"
