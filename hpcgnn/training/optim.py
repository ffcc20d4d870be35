"""The dense parameters' optimizer: torch's Adam without its compiler hooks.

``torch.optim.Adam``'s ``step``, ``add_param_group``, ``zero_grad``, ``state_dict`` and
``load_state_dict`` carry wrappers for ``torch.compile`` that import ``torch._dynamo`` on their
first call: about 2 s of every process's start on a 2-core machine, as long as importing torch
itself, in every rank of every run (and of every multi-rank test). hpcgnn never compiles its
optimizer step, so :class:`EagerAdam` calls the methods underneath those wrappers: the same
arithmetic (the same kernel, fused or not), bit for bit, and the same state dict.
"""
from __future__ import annotations

import torch


def _unwrapped(method):
    """``method`` beneath its ``functools.wraps`` wrapper; itself where a torch has none."""
    return getattr(method, "__wrapped__", method)


class EagerAdam(torch.optim.Adam):
    """Local. ``torch.optim.Adam`` whose step and parameter setup skip ``torch.compile``'s wrappers
    (and so never import the compiler stack); otherwise the same optimizer."""

    add_param_group = _unwrapped(torch.optim.Optimizer.add_param_group)
    zero_grad = _unwrapped(torch.optim.Optimizer.zero_grad)
    state_dict = _unwrapped(torch.optim.Optimizer.state_dict)
    load_state_dict = _unwrapped(torch.optim.Optimizer.load_state_dict)

    def step(self, closure=None):
        """Local. One Adam step of every parameter with a gradient (as ``torch.optim.Adam.step``)."""
        with torch.no_grad():  # what the skipped wrapper sets for a non-differentiable optimizer
            return _unwrapped(torch.optim.Adam.step)(self, closure)
