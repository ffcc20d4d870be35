"""Neighbourhood aggregation: the compiled kernels of :mod:`hpcgnn._spmm`, or torch's sparse product.

Every aggregation of a block (a sparse CSR matrix times the source rows) goes through
:func:`spmm`: float32 rows, or bfloat16 rows in a ``--precision bf16`` run (torch has no
bfloat16 sparse CSR product; here the rows are read and written in bfloat16, half the bytes of
a gather-bound product, and sums are accumulated in float32). The kernels prefetch the rows a
few entries ahead, which is most of their lead over torch's float32 CSR product on rows that
do not fit in cache. The backward pass is the same product with the transposed matrix (built
once per block, on first use).

The torch path (``--kernels torch``, and always for rows off the CPU: :mod:`hpcgnn.nn.kernels`)
computes the same product as torch's sparse CSR product of the matrix's index tensors on the
rows' device (:meth:`CSR.on`, built once per device). Measured on one CPU thread
(``bench/torch_kernels.py``) it ran well ahead of a gather and ``index_add`` (which writes a
message row per entry); torch has no bfloat16 CSR product on the CPU, so bfloat16 rows are read
as float32 there, summed in float32 as the compiled kernels do, and rounded once.

``HPCGNN_PORTABLE_KERNELS=1`` forces the compiled kernels' portable build (aggregation, attention
and dropout) on a CPU that has AVX-512: how the fallback path is tested.
"""
from __future__ import annotations

import functools
import os
import warnings

import numpy as np
import torch
from torch.autograd.function import once_differentiable

from hpcgnn import _spmm
from hpcgnn.nn.kernels import path_for


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
        self._on = {}

    @property
    def placed(self) -> tuple:
        """The devices :meth:`on` has copied the matrix to so far."""
        return tuple(self._on)

    def on(self, device, non_blocking=False) -> DeviceCSR:
        """Local. The matrix's tensors on ``device`` for the torch path, copied on first use and
        kept (a CPU device shares the numpy arrays). ``non_blocking``: copy to a CUDA device from
        pinned host memory without waiting (the caller orders its streams)."""
        device = normalised_device(device)
        found = self._on.get(device)
        if found is None:
            found = self._on[device] = DeviceCSR(self, device, non_blocking)
        return found

    @functools.cached_property
    def transposed(self) -> CSR:
        indptr, col, order = _spmm.transpose(self.indptr, self.col, self.num_cols)
        weight = None if self.weight is None else self.weight[order]
        return CSR(indptr, col, weight, self.num_rows, order)

    def product(self, h) -> torch.Tensor:
        """Local. ``self @ h`` of a 2-D float32 or bfloat16 tensor, in h's dtype (no autograd: see
        :func:`spmm`), by the path :func:`~hpcgnn.nn.kernels.path_for` picks for ``h``."""
        if h.dtype not in (torch.float32, torch.bfloat16):
            raise TypeError(f"aggregation of {h.dtype} rows (float32 or bfloat16 only)")
        if path_for(h) == "torch":
            return self.on(h.device).product(h)
        out = torch.empty(self.num_rows, h.shape[1], dtype=h.dtype)
        # the rank's torch threads: GEMMs and aggregations alike
        _spmm.spmm(self.indptr, self.col, self.weight, kernel_view(h), kernel_view(out), h.shape[1], fast_kernels(),
                   torch.get_num_threads())
        return out


def normalised_device(device) -> torch.device:
    """Local. ``device`` as a torch.device, a CUDA one with its index (the current device's when unnamed)."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def to_device(array, device, non_blocking=False) -> torch.Tensor:
    """Local. A numpy array as a tensor on ``device`` (the CPU: a view of it, no copy); to a CUDA
    device with ``non_blocking``, through a pinned copy and an asynchronous transfer."""
    tensor = torch.from_numpy(np.ascontiguousarray(array))
    if device.type == "cpu":
        return tensor
    if non_blocking and device.type == "cuda":
        tensor = tensor.pin_memory()  # the pinned allocator keeps it until the transfer is done
    return tensor.to(device, non_blocking=non_blocking)


def sparse_csr(indptr, col, values, shape) -> torch.Tensor:
    """Local. A torch sparse CSR tensor of the given index tensors and float32 ``values`` (no
    invariant checks: the indices come from a checked :class:`CSR`)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*[Ss]parse.*")  # its 'beta' and 'checks off' notes
        return torch.sparse_csr_tensor(indptr, col, values, shape, check_invariants=False)


class DeviceCSR:
    """Local. A :class:`CSR`'s index and value tensors on one device, the torch path's matrix.

    Attributes: ``indptr``, ``col`` (int64), ``weight`` (float32 or None), ``order`` (int64 or
    None, a transpose's), ``num_rows``, ``num_cols``, ``nnz``, ``device``; ``row`` (every entry's
    row) and ``sparse`` (the torch sparse CSR tensor, values 1 where unweighted) on first use."""

    def __init__(self, matrix: CSR, device, non_blocking=False):
        self.device, self.num_rows, self.num_cols = device, matrix.num_rows, matrix.num_cols
        self.nnz = int(matrix.col.shape[0])
        self.indptr = to_device(matrix.indptr, device, non_blocking)
        self.col = to_device(matrix.col, device, non_blocking)
        self.weight = None if matrix.weight is None else to_device(matrix.weight, device, non_blocking)
        self.order = None if matrix.order is None else to_device(np.asarray(matrix.order, np.int64), device,
                                                                   non_blocking)

    @classmethod
    def of_tensors(cls, indptr, col, weight, num_cols, order=None, row=None) -> DeviceCSR:
        """Local. A matrix of index and value tensors already on their device (no host copy)."""
        self = cls.__new__(cls)
        self.device, self.num_rows, self.num_cols = indptr.device, int(indptr.shape[0]) - 1, int(num_cols)
        self.nnz = int(col.shape[0])
        self.indptr, self.col, self.weight, self.order = indptr, col, weight, order
        if row is not None:
            self.row = row  # fills the cached property
        return self

    @functools.cached_property
    def row(self) -> torch.Tensor:
        counts = self.indptr.diff()
        return torch.repeat_interleave(torch.arange(self.num_rows, device=self.device), counts,
                                       output_size=self.nnz)

    @functools.cached_property
    def sparse(self) -> torch.Tensor:
        values = self.weight if self.weight is not None else torch.ones(self.nnz, device=self.device)
        return self.with_values(values)

    def tensors(self) -> list:
        """Local. Every tensor built so far (for ``Tensor.record_stream`` by a caller that built
        them in a side CUDA stream)."""
        found = [self.indptr, self.col, self.weight, self.order, self.__dict__.get("row")]
        sparse = self.__dict__.get("sparse")
        if sparse is not None:
            found.append(sparse.values())
        return [t for t in found if t is not None]

    def with_values(self, values) -> torch.Tensor:
        """Local. The sparse CSR tensor of this pattern with float32 ``values`` (one per entry)."""
        return sparse_csr(self.indptr, self.col, values, (self.num_rows, self.num_cols))

    def product(self, h) -> torch.Tensor:
        """Local. ``self @ h`` in h's dtype, summed in float32 (no autograd)."""
        with torch.autocast(h.device.type, enabled=False):
            if not self.nnz or not h.shape[1]:
                return torch.zeros(self.num_rows, h.shape[1], dtype=h.dtype, device=h.device)
            if self.nnz > self.num_rows * self.num_cols:
                # a tiny matrix with repeated entries, which cuSPARSE refuses: a gather and a sum
                rows = h.detach().float()[self.col]
                if self.weight is not None:
                    rows = rows * self.weight[:, None]
                out = torch.zeros(self.num_rows, h.shape[1], dtype=torch.float32, device=h.device)
                return out.index_add_(0, self.row, rows).to(h.dtype)
            return (self.sparse @ h.detach().float()).to(h.dtype)


class DeviceMatrix:
    """Local. A block's matrix built on its device from the block's device tensors, for the torch
    path: the role of :class:`CSR` where no host copy exists. The transpose (backward passes) is
    computed on the device too, so a GPU step leaves the host nothing to do per matrix; nothing
    here waits for the device (sizes come from the host's counts).

    Parameters
    ----------
    matrix : DeviceCSR
    """

    def __init__(self, matrix: DeviceCSR):
        self.matrix = matrix
        self.num_rows, self.num_cols, self.col = matrix.num_rows, matrix.num_cols, matrix.col
        self.order = matrix.order

    @property
    def placed(self) -> tuple:
        """The one device the matrix lives on."""
        return (self.matrix.device,)

    def on(self, device, non_blocking=False) -> DeviceCSR:
        """Local. The matrix's tensors (already on ``device``)."""
        if normalised_device(device) != self.matrix.device:
            raise ValueError(f"a matrix on {self.matrix.device} used on {device}")
        return self.matrix

    @functools.cached_property
    def transposed(self) -> DeviceMatrix:
        m = self.matrix
        # 32-bit keys where the columns fit: a GPU radix sort then takes half the passes
        keys = m.col.to(torch.int32) if m.num_cols < 2**31 else m.col
        order = torch.argsort(keys, stable=True)
        counts = torch.zeros(m.num_cols, dtype=torch.int64, device=m.device).index_add_(
            0, m.col, torch.ones_like(m.col))
        indptr = torch.cat([counts.new_zeros(1), counts.cumsum(0)])
        weight = None if m.weight is None else m.weight[order]
        return DeviceMatrix(DeviceCSR.of_tensors(indptr, m.row[order], weight, m.num_rows, order=order,
                                                 row=m.col[order]))

    def product(self, h) -> torch.Tensor:
        """Local. ``self @ h`` (no autograd: see :func:`spmm`)."""
        return self.matrix.product(h)


class _SpMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, matrix):
        ctx.matrix = matrix
        return matrix.product(h.detach())

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        return ctx.matrix.transposed.product(grad), None


class _TorchSpMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, matrix):
        ctx.matrix = matrix
        return matrix.on(h.device).product(h)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        return ctx.matrix.transposed.on(grad.device).product(grad), None


def spmm(matrix: CSR, h: torch.Tensor) -> torch.Tensor:
    """Local. ``matrix @ h`` with autograd (the gradient of h is ``matrix.T @ grad``), by the
    compiled kernels or torch as :func:`~hpcgnn.nn.kernels.path_for` picks (the backward pass
    takes the forward pass's path)."""
    if h.dim() != 2 or h.shape[0] != matrix.num_cols:
        raise ValueError(f"rows of shape {tuple(h.shape)} for a matrix of {matrix.num_cols} columns")
    if path_for(h) == "torch":
        if h.dtype not in (torch.float32, torch.bfloat16):
            raise TypeError(f"aggregation of {h.dtype} rows (float32 or bfloat16 only)")
        return _TorchSpMM.apply(h, matrix)
    return _SpMM.apply(h, matrix)
