"""Neighbourhood aggregation by the compiled kernels of :mod:`hpcgnn._spmm`.

Every aggregation of a block (a sparse CSR matrix times the source rows) goes through
:func:`spmm`: float32 rows, or bfloat16 rows in a ``--precision bf16`` run (torch has no
bfloat16 sparse CSR product; here the rows are read and written in bfloat16, half the bytes of
a gather-bound product, and sums are accumulated in float32). The kernels prefetch the rows a
few entries ahead, which is most of their lead over torch's float32 CSR product on rows that
do not fit in cache. The backward pass is the same product with the transposed matrix (built
once per block, on first use).

``HPCGNN_PORTABLE_KERNELS=1`` forces the compiled kernels' portable build (aggregation, attention
and dropout) on a CPU that has AVX-512: how the fallback path is tested.
"""
from __future__ import annotations

import functools
import os

import numpy as np
import torch
from torch.autograd.function import once_differentiable

from hpcgnn import _spmm


def fast_kernels() -> bool:
    """Local. Whether the kernels' AVX-512 build runs: the CPU has AVX-512 and it is not switched off."""
    return _spmm.has_avx512() and os.environ.get("HPCGNN_PORTABLE_KERNELS", "") != "1"


def precision_note(precision) -> str:
    """Local. How a run's ``--precision`` will compute, for its start line (said once per run)."""
    if precision != "bf16":
        return precision
    if fast_kernels():
        kernels = "AVX-512 kernels"
    else:
        why = "switched by HPCGNN_PORTABLE_KERNELS=1" if _spmm.has_avx512() else "this CPU has no AVX-512"
        kernels = f"portable kernels, {why}"
    if not _spmm.has_avx512bf16():
        return f"bf16 ({kernels}; this CPU has no bfloat16 units: its GEMMs are emulated, slower than fp32)"
    return f"bf16 ({kernels})"


def kernel_view(t) -> np.ndarray:
    """Local. The flat numpy view the compiled kernels take of a contiguous tensor: float32 as it
    is, bfloat16 as uint16 (numpy has no bfloat16), without a copy."""
    t = t.detach().contiguous().view(-1)
    return t.view(torch.int16).numpy().view(np.uint16) if t.dtype == torch.bfloat16 else t.numpy()


class CSR:
    """Local. A ``rows x cols`` sparse matrix for the compiled products.

    Parameters
    ----------
    indptr, col : numpy int64 arrays
        Row offsets and the column of every entry.
    weight : numpy float32 array or None
        Every entry's value (None: all 1).
    num_cols : int
    order : numpy int64 array or None
        For a transpose: the entry of the original matrix each entry is (per-entry values of
        the original, such as attention weights, are ``values[order]`` here).
    """

    def __init__(self, indptr, col, weight, num_cols, order=None):
        self.indptr = np.ascontiguousarray(indptr, dtype=np.int64)
        self.col = np.ascontiguousarray(col, dtype=np.int64)
        self.weight = None if weight is None else np.ascontiguousarray(weight, dtype=np.float32)
        self.num_rows, self.num_cols = self.indptr.shape[0] - 1, int(num_cols)
        self.order = order

    @functools.cached_property
    def transposed(self) -> CSR:
        indptr, col, order = _spmm.transpose(self.indptr, self.col, self.num_cols)
        weight = None if self.weight is None else self.weight[order]
        return CSR(indptr, col, weight, self.num_rows, order)

    def product(self, h) -> torch.Tensor:
        """Local. ``self @ h`` of a contiguous 2-D float32 or bfloat16 tensor, in h's dtype (no
        autograd: see :func:`spmm`)."""
        if h.dtype not in (torch.float32, torch.bfloat16):
            raise TypeError(f"aggregation of {h.dtype} rows (float32 or bfloat16 only)")
        out = torch.empty(self.num_rows, h.shape[1], dtype=h.dtype)
        # the rank's torch threads: GEMMs and aggregations alike
        _spmm.spmm(self.indptr, self.col, self.weight, kernel_view(h), kernel_view(out), h.shape[1], fast_kernels(),
                   torch.get_num_threads())
        return out


class _SpMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, matrix):
        ctx.matrix = matrix
        return matrix.product(h.detach())

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        return ctx.matrix.transposed.product(grad), None


def spmm(matrix: CSR, h: torch.Tensor) -> torch.Tensor:
    """Local. ``matrix @ h`` with autograd (the gradient of h is ``matrix.T @ grad``)."""
    if h.dim() != 2 or h.shape[0] != matrix.num_cols:
        raise ValueError(f"rows of shape {tuple(h.shape)} for a matrix of {matrix.num_cols} columns")
    return _SpMM.apply(h, matrix)
