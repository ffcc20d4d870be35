"""GAT's attention, by the compiled kernels of :mod:`hpcgnn._attention` or by torch: the edge softmax of the
attention logits (float32) and the attention-weighted sum of multi-head source rows (float32
or bfloat16 rows, float32 accumulation), each with its backward pass.

The weighted sum is a sparse product whose values differ per head, so no per-edge message rows
``[edges, heads, dim]`` are materialised (torch's gather-multiply-scatter wrote and read them
twice, in float32). The kernels pick their AVX-512 build as :mod:`hpcgnn.nn.aggregate` does.

The torch path (:mod:`hpcgnn.nn.kernels`) computes the same: the softmax by gathers and
scatters of ``[entries, heads]`` (its backward by autograd), the weighted sum as one sparse CSR
product per head with the attention weights as values (float32 sums, as the kernels), its
gradients as the transpose's product and a sampled dense product (``torch.sparse.sampled_addmm``)
per head, so that here too no message rows are materialised.
"""
from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable
from torch.nn import functional as F

from hpcgnn import _attention
from hpcgnn.nn.aggregate import CSR, fast_kernels, kernel_view
from hpcgnn.nn.kernels import path_for


class _EdgeSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, score_src, score_dst, matrix, slope):
        heads = score_src.shape[1]
        score_src, score_dst = score_src.detach().contiguous(), score_dst.detach().contiguous()
        alpha = torch.empty(matrix.col.shape[0], heads)
        _attention.edge_softmax(matrix.indptr, matrix.col, kernel_view(score_src), kernel_view(score_dst), slope,
                                kernel_view(alpha), heads, torch.get_num_threads())
        ctx.save_for_backward(score_src, score_dst, alpha)
        ctx.matrix, ctx.slope = matrix, slope
        return alpha

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_alpha):
        score_src, score_dst, alpha = ctx.saved_tensors
        matrix, heads = ctx.matrix, score_src.shape[1]
        grad_logit = torch.empty_like(alpha)
        grad_dst = torch.empty_like(score_dst)
        _attention.edge_softmax_backward(matrix.indptr, matrix.col, kernel_view(score_src), kernel_view(score_dst),
                                         ctx.slope, kernel_view(alpha), kernel_view(grad_alpha.float()),
                                         kernel_view(grad_logit), kernel_view(grad_dst), heads,
                                         torch.get_num_threads())
        # a source's score enters every edge out of it: a scatter of [edges, heads], no rows
        grad_src = torch.zeros_like(score_src).index_add_(0, torch.from_numpy(matrix.col), grad_logit)
        return grad_src, grad_dst, None, None


def _torch_edge_softmax(matrix: CSR, score_src, score_dst, slope):
    on = matrix.on(score_src.device)
    row, col = on.row, on.col
    with torch.autocast(score_src.device.type, enabled=False):
        logit = F.leaky_relu(score_src[col] + score_dst[row], slope)
        # subtracting any per-row constant leaves the softmax as it is: the peak needs no gradient
        peak = torch.full_like(score_dst, -torch.inf).scatter_reduce_(
            0, row.unsqueeze(1).expand_as(logit), logit.detach(), "amax")
        weight = torch.exp(logit - peak[row])
        total = torch.zeros_like(score_dst).index_add(0, row, weight)
        return weight / total[row]


def edge_softmax(matrix: CSR, score_src, score_dst, slope=0.2) -> torch.Tensor:
    """Local. Attention weights ``[entries, heads]``: per row of ``matrix`` (a destination, its
    entries the in-edges) and head, the softmax over the entries of ``leaky_relu(score_src[col]
    + score_dst[row], slope)``; float32 scores ``[num_cols, heads]`` and ``[num_rows, heads]``,
    with autograd."""
    if score_src.shape[0] != matrix.num_cols or score_dst.shape != (matrix.num_rows, score_src.shape[1]):
        raise ValueError(f"scores of shapes {tuple(score_src.shape)} and {tuple(score_dst.shape)} for a "
                         f"{matrix.num_rows} x {matrix.num_cols} matrix")
    if path_for(score_src, score_dst) == "torch":
        return _torch_edge_softmax(matrix, score_src.float(), score_dst.float(), float(slope))
    return _EdgeSoftmax.apply(score_src.float(), score_dst.float(), matrix, float(slope))


class _HeadSpMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z, alpha, matrix):
        heads = alpha.shape[1]
        z, alpha = z.detach().contiguous(), alpha.detach().contiguous()
        out = torch.empty(matrix.num_rows, z.shape[1], dtype=z.dtype)
        _attention.head_spmm(matrix.indptr, matrix.col, kernel_view(alpha), kernel_view(z), kernel_view(out), heads,
                             z.shape[1] // heads, fast_kernels(), torch.get_num_threads())
        ctx.save_for_backward(z, alpha)
        ctx.matrix = matrix
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        z, alpha = ctx.saved_tensors
        matrix, heads, dim = ctx.matrix, alpha.shape[1], z.shape[1] // alpha.shape[1]
        grad = grad.to(z.dtype).contiguous()
        grad_z = grad_alpha = None
        threads = torch.get_num_threads()
        if ctx.needs_input_grad[0]:
            flipped = matrix.transposed
            grad_z = torch.empty_like(z)
            _attention.head_spmm(flipped.indptr, flipped.col, kernel_view(alpha), kernel_view(grad),
                                 kernel_view(grad_z), heads, dim, fast_kernels(), threads, flipped.order)
        if ctx.needs_input_grad[1]:
            grad_alpha = torch.empty_like(alpha)
            _attention.head_sddmm(matrix.indptr, matrix.col, kernel_view(grad), kernel_view(z),
                                  kernel_view(grad_alpha), heads, dim, fast_kernels(), threads)
        return grad_z, grad_alpha, None


def _per_head(rows, heads) -> list:
    """The float32 ``[n, dim]`` block of every head of ``[n, heads * dim]`` rows, contiguous."""
    split = rows.float().view(rows.shape[0], heads, -1)
    return [split[:, h].contiguous() for h in range(heads)]


def _head_products(on, alpha, rows, dtype) -> torch.Tensor:
    """``out[:, h] = A_h @ rows[:, h]`` with ``A_h`` the pattern of ``on`` valued ``alpha[:, h]``, in ``dtype``."""
    heads = alpha.shape[1]
    if not on.nnz:
        return torch.zeros(on.num_rows, rows.shape[1], dtype=dtype, device=rows.device)
    if on.nnz > on.num_rows * on.num_cols:
        # a tiny matrix with repeated entries, which cuSPARSE refuses: gathered messages summed per row
        messages = rows.float().view(rows.shape[0], heads, -1)[on.col] * alpha[:, :, None]
        out = torch.zeros(on.num_rows, heads, messages.shape[2], device=rows.device)
        return out.index_add_(0, on.row, messages).view(on.num_rows, -1).to(dtype)
    blocks = [on.with_values(alpha[:, h].contiguous()) @ part for h, part in enumerate(_per_head(rows, heads))]
    return torch.stack(blocks, dim=1).view(on.num_rows, -1).to(dtype)


#: entries per slice of the gathered SDDMM (its two ``[slice, heads * dim]`` float32 rows stay small)
_SDDMM_ELEMENTS = 1 << 22


def _head_sddmm(on, grad, z, heads) -> torch.Tensor:
    """``out[e, h] = <grad[row[e], h, :], z[col[e], h, :]>`` at the entries of ``on``, float32."""
    out = torch.zeros(on.nnz, heads, device=z.device)
    if not on.nnz:
        return out
    if on.nnz <= on.num_rows * on.num_cols:
        pattern = on.with_values(torch.zeros(on.nnz, device=z.device))
        for h, (g, part) in enumerate(zip(_per_head(grad, heads), _per_head(z, heads))):
            out[:, h] = torch.sparse.sampled_addmm(pattern, g, part.t(), beta=0.0).values()
        return out
    # more entries than the dense matrix has (repeated columns in a small matrix): torch's sampled
    # product refuses those, so gather both sides, a slice of entries at a time
    grad, z = grad.float().view(on.num_rows, heads, -1), z.float().view(on.num_cols, heads, -1)
    step = max(1, _SDDMM_ELEMENTS // max(1, z.shape[1] * z.shape[2]))
    for lo in range(0, on.nnz, step):
        hi = min(on.nnz, lo + step)
        out[lo:hi] = (grad[on.row[lo:hi]] * z[on.col[lo:hi]]).sum(-1)
    return out


class _TorchHeadSpMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z, alpha, matrix):
        z, alpha = z.detach(), alpha.detach()
        ctx.save_for_backward(z, alpha)
        ctx.matrix = matrix
        with torch.autocast(z.device.type, enabled=False):
            return _head_products(matrix.on(z.device), alpha, z, z.dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        z, alpha = ctx.saved_tensors
        matrix, heads = ctx.matrix, alpha.shape[1]
        grad = grad.to(z.dtype)
        grad_z = grad_alpha = None
        with torch.autocast(z.device.type, enabled=False):
            if ctx.needs_input_grad[0]:
                flipped = matrix.transposed.on(z.device)
                grad_z = _head_products(flipped, alpha[flipped.order], grad, z.dtype)
            if ctx.needs_input_grad[1]:
                grad_alpha = _head_sddmm(matrix.on(z.device), grad, z, heads)
        return grad_z, grad_alpha, None


def head_spmm(matrix: CSR, z, alpha) -> torch.Tensor:
    """Local. ``out[r, h] = sum_e alpha[e, h] * z[col[e], h]`` over row r's entries, with autograd:
    ``z`` is ``[num_cols, heads * dim]`` float32 or bfloat16 (the result's dtype), ``alpha``
    float32 ``[entries, heads]``."""
    heads = alpha.shape[1]
    if z.dim() != 2 or z.shape[0] != matrix.num_cols or z.shape[1] % heads:
        raise ValueError(f"rows of shape {tuple(z.shape)} for a matrix of {matrix.num_cols} columns and "
                         f"{heads} heads")
    if z.dtype not in (torch.float32, torch.bfloat16):
        raise TypeError(f"attention over {z.dtype} rows (float32 or bfloat16 only)")
    if alpha.shape[0] != matrix.col.shape[0]:
        raise ValueError(f"{alpha.shape[0]} attention rows for {matrix.col.shape[0]} entries")
    if path_for(z, alpha) == "torch":
        return _TorchHeadSpMM.apply(z, alpha.float(), matrix)
    return _HeadSpMM.apply(z, alpha.float(), matrix)
