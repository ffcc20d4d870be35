"""Dropout without stored masks: each element's keep bit is a counter-based hash of (seed,
element index), drawn in the same pass that applies it (fused with the ReLU before it), and
the backward pass recomputes it from the seed. See :mod:`hpcgnn._dense` for the mask.

Each call draws one seed from a per-process stream: the trainer restarts it per rank with
:func:`seed_dropout` and saves it in checkpoints with :func:`dropout_state`.

The torch path (:mod:`hpcgnn.nn.kernels`) draws the same mask for the same seed: the kernel's
splitmix64 hash in torch int64 operations (wrap-around multiplies and additions give the bits of
unsigned arithmetic; right shifts are masked to be logical), so a run's losses do not depend on
the path beyond float rounding.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.autograd.function import once_differentiable
from torch.nn import functional as F

from hpcgnn import _dense
from hpcgnn.nn.aggregate import fast_kernels, kernel_view
from hpcgnn.nn.kernels import path_for

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


_MASK64 = (1 << 64) - 1
_SEED_MULTIPLIER = 0xD1B54A32D192ED03
_GOLDEN_GAMMA = 0x9E3779B97F4A7C15


def _signed(value) -> int:
    """The int64 with the bits of the uint64 ``value``."""
    value &= _MASK64
    return value - (1 << 64) if value >> 63 else value


def _logical_shift(z, bits):
    """``z >> bits`` of the uint64 whose bits the int64 tensor ``z`` holds (torch shifts int64 arithmetically)."""
    return (z >> bits) & ((1 << (64 - bits)) - 1)


def _mix64(z):
    """The splitmix64 finaliser (cython/splitmix64.h) on int64 tensors holding uint64 bits."""
    z = (z ^ _logical_shift(z, 30)) * _signed(0xBF58476D1CE4E5B9)
    z = (z ^ _logical_shift(z, 27)) * _signed(0x94D049BB133111EB)
    return z ^ _logical_shift(z, 31)


def keep_mask(seed, n, threshold, device=None) -> torch.Tensor:
    """Local. The bool keep-mask of ``n`` elements that the compiled kernels draw for ``seed`` and
    ``threshold`` (see :mod:`hpcgnn._dense`), by torch integer operations on ``device``."""
    words = (n + 3) // 4
    start = _signed(seed * _SEED_MULTIPLIER + _GOLDEN_GAMMA)
    mixed = _mix64(torch.arange(words, dtype=torch.int64, device=device) + start)
    keep = torch.empty(words, 4, dtype=torch.bool, device=device)
    for lane in range(4):  # element 4q + lane draws bits [16 lane, 16 lane + 16) of word q
        keep[:, lane] = ((mixed >> (16 * lane)) & 0xFFFF) >= threshold
    return keep.view(-1)[:n]


def _masked_scale(h, keep, scale):
    """``h * scale`` where ``keep``, else 0, computed in float32 and rounded once (as the kernels)."""
    return torch.where(keep, h.float() * scale, 0.0).to(h.dtype)


class _TorchDropout(torch.autograd.Function):
    """:class:`_DropoutFunction` by torch operations: the mask is recomputed in backward."""

    @staticmethod
    def forward(ctx, h, seed, threshold, scale):
        ctx.mask = (seed, threshold, scale)
        keep = keep_mask(seed, h.numel(), threshold, h.device).view(h.shape)
        return _masked_scale(h.detach(), keep, scale)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        seed, threshold, scale = ctx.mask
        keep = keep_mask(seed, grad.numel(), threshold, grad.device).view(grad.shape)
        return _masked_scale(grad, keep, scale), None, None, None


class _TorchReLUDropout(torch.autograd.Function):
    """:class:`_ReLUDropoutFunction` by torch operations."""

    @staticmethod
    def forward(ctx, h, seed, threshold, scale):
        h = h.detach()
        keep = keep_mask(seed, h.numel(), threshold, h.device).view(h.shape) & (h > 0)
        out = _masked_scale(h, keep, scale)
        ctx.save_for_backward(out)
        ctx.scale = scale
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        return _masked_scale(grad.to(out.dtype), out > 0, ctx.scale), None, None, None


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
        # a float32 (the kernels' type), so both paths scale by the same number
        self._scale = float(np.float32(65536.0 / (65536 - self._threshold)))

    def forward(self, h):
        if not self.training or self._threshold == 0:
            return F.relu(h) if self.relu else h
        if h.dtype not in (torch.float32, torch.bfloat16):  # the kernels' types
            return F.dropout(F.relu(h) if self.relu else h, self.p)
        seed = int(dropout_rng.integers(0, 2**63))
        if path_for(h) == "torch":
            function = _TorchReLUDropout if self.relu else _TorchDropout
        else:
            function = _ReLUDropoutFunction if self.relu else _DropoutFunction
        return function.apply(h, seed, self._threshold, self._scale)
