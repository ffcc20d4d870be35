"""The layers' dense maps, with bfloat16 row counts bucketed.

Under ``--precision bf16`` torch runs a bfloat16 GEMM through oneDNN, which builds and caches
a primitive (with its own buffers) for every new shape. A batch's row count is new almost
every step, so a run's memory grew by megabytes per step (1.6 GB over 429 shapes of a
[~6500 x 200] x [200 x 256] map here) and every step paid for a new primitive. :func:`linear`
pads the rows up to a bucket of at most 8 sizes per power of two (at most 12.5% extra rows,
zeros, sliced off again), so shapes repeat: the same loop then grew 9 MB and ran faster.
The padded copy is written once, already in bfloat16, and only its extra rows are zeroed
(``F.pad`` zero-fills the whole copy before writing the rows, and autocast then makes a second
copy to cast it). Float32 maps are passed through unchanged.
"""
from __future__ import annotations

import torch
from torch.nn import functional as F

#: row counts up to this are used as they are (tiny maps: padding would dominate)
_SMALL_ROWS = 64


def bucket_rows(rows) -> int:
    """Local. ``rows`` rounded up to a multiple of 2**(floor(log2 rows) - 3) (above _SMALL_ROWS)."""
    if rows <= _SMALL_ROWS:
        return rows
    step = 1 << (rows.bit_length() - 4)
    return -(-rows // step) * step


class _PadRows(torch.autograd.Function):
    """``x`` cast to ``dtype`` with zero rows appended up to ``padded``, in one write; the
    gradient is the first rows of the padded one, cast back."""

    @staticmethod
    def forward(ctx, x, padded, dtype):
        rows = x.shape[0]
        out = torch.empty((padded, *x.shape[1:]), dtype=dtype)
        out[:rows].copy_(x)
        out[rows:].zero_()
        ctx.rows, ctx.dtype = rows, x.dtype
        return out

    @staticmethod
    def backward(ctx, grad):
        return grad[:ctx.rows].to(ctx.dtype), None, None


def pad_rows(x, padded) -> torch.Tensor:
    """Local. ``x`` in the CPU autocast dtype, with zero rows appended up to ``padded`` rows."""
    dtype = torch.get_autocast_dtype("cpu")
    if padded == x.shape[0]:
        return x.to(dtype)
    return _PadRows.apply(x, padded, dtype)


def linear(x, weight, bias=None):
    """Local. ``F.linear(x, weight, bias)``; under CPU autocast with ``x``'s rows padded to
    :func:`bucket_rows` and the extra rows cut from the result."""
    rows = x.shape[0]
    padded = bucket_rows(rows) if torch.is_autocast_enabled("cpu") else rows
    if padded == rows:
        return F.linear(x, weight, bias)
    return F.linear(pad_rows(x, padded), weight, bias)[:rows]


def linear_maps(x, weights):
    """Local. ``[F.linear(x, w) for w in weights]`` with one padded copy of ``x`` (and, under
    CPU autocast, one bfloat16 cast) shared by the maps, as :func:`linear` makes per call."""
    rows = x.shape[0]
    if not torch.is_autocast_enabled("cpu"):
        return [F.linear(x, weight) for weight in weights]
    x = pad_rows(x, bucket_rows(rows))
    return [F.linear(x, weight)[:rows] for weight in weights]
