"""Dropout without stored masks: each element's keep bit is a counter-based hash of (seed,
element index), drawn in the same pass that applies it (fused with the ReLU before it), and
the backward pass recomputes it from the seed. See :mod:`hpcgnn._dense` for the mask.

Each call draws one seed from a per-process stream: the trainer restarts it per rank with
:func:`seed_dropout` and saves it in checkpoints with :func:`dropout_state`.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.autograd.function import once_differentiable
from torch.nn import functional as F

from hpcgnn import _dense
from hpcgnn.nn.aggregate import fast_kernels, kernel_view

#: random stream of dropout seeds (seeded per rank by the trainer, saved in checkpoints)
dropout_rng = np.random.default_rng(0)


def seed_dropout(seed):
    """Local. Restart the dropout stream from ``seed``."""
    global dropout_rng
    dropout_rng = np.random.default_rng(seed)


def dropout_state() -> dict:
    """Local. The dropout stream's state (for checkpoints)."""
    return dropout_rng.bit_generator.state


def set_dropout_state(state: dict):
    """Local. Continue the dropout stream from a state saved by :func:`dropout_state`."""
    dropout_rng.bit_generator.state = state


class _DropoutFunction(torch.autograd.Function):
    """Dropout whose mask is a hash of (seed, element): backward recomputes it, nothing stored."""

    @staticmethod
    def forward(ctx, h, seed, threshold, scale):
        out = torch.empty_like(h, memory_format=torch.contiguous_format)
        _dense.dropout(kernel_view(h), kernel_view(out), seed, threshold, scale, fast_kernels())
        ctx.mask = (seed, threshold, scale)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        grad_in = torch.empty_like(grad, memory_format=torch.contiguous_format)
        _dense.dropout(kernel_view(grad), kernel_view(grad_in), *ctx.mask, fast_kernels())
        return grad_in, None, None, None


class _ReLUDropoutFunction(torch.autograd.Function):
    """``dropout(relu(h))`` in one pass; backward needs only the output (positive iff it
    passed both), which the next layer keeps anyway."""

    @staticmethod
    def forward(ctx, h, seed, threshold, scale):
        out = torch.empty_like(h, memory_format=torch.contiguous_format)
        _dense.relu_dropout(kernel_view(h), kernel_view(out), seed, threshold, scale, fast_kernels())
        ctx.save_for_backward(out)
        ctx.scale = scale
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        grad_in = torch.empty_like(out)
        _dense.where_positive(kernel_view(grad.to(out.dtype)), kernel_view(out), kernel_view(grad_in), ctx.scale,
                              fast_kernels())
        return grad_in, None, None, None


class Dropout(nn.Module):
    """Inverted dropout with a counter-based mask (see :mod:`hpcgnn._dense`): one pass each
    way on one CPU thread, where torch's Bernoulli sampling dominated a training step.
    ``p`` is rounded to a multiple of 2**-16; each call takes one seed from ``dropout_rng``.
    With ``relu=True`` the module computes ``dropout(relu(h))`` in the same pass."""

    def __init__(self, p=0.5, relu=False):
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout probability must be in [0, 1), got {p}")
        self.p, self.relu = p, relu
        self._threshold = int(round(p * 65536))
        if self._threshold == 65536:
            raise ValueError(f"dropout probability {p} rounds to 1 in steps of 2**-16")
        self._scale = 65536.0 / (65536 - self._threshold)

    def forward(self, h):
        if not self.training or self._threshold == 0:
            return F.relu(h) if self.relu else h
        if h.dtype not in (torch.float32, torch.bfloat16):  # the kernels' types
            return F.dropout(F.relu(h) if self.relu else h, self.p)
        seed = int(dropout_rng.integers(0, 2**63))
        function = _ReLUDropoutFunction if self.relu else _DropoutFunction
        return function.apply(h, seed, self._threshold, self._scale)
