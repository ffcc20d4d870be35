"""GAT's attention by the compiled kernels of :mod:`hpcgnn._attention`: the edge softmax of the
attention logits (float32) and the attention-weighted sum of multi-head source rows (float32
or bfloat16 rows, float32 accumulation), each with its backward pass.

The weighted sum is a sparse product whose values differ per head, so no per-edge message rows
``[edges, heads, dim]`` are materialised (torch's gather-multiply-scatter wrote and read them
twice, in float32). The kernels pick their AVX-512 build as :mod:`hpcgnn.nn.aggregate` does.
"""
from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from hpcgnn import _attention
from hpcgnn.nn.aggregate import CSR, fast_kernels, kernel_view


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


def edge_softmax(matrix: CSR, score_src, score_dst, slope=0.2) -> torch.Tensor:
    """Local. Attention weights ``[entries, heads]``: per row of ``matrix`` (a destination, its
    entries the in-edges) and head, the softmax over the entries of ``leaky_relu(score_src[col]
    + score_dst[row], slope)``; float32 scores ``[num_cols, heads]`` and ``[num_rows, heads]``,
    with autograd."""
    if score_src.shape[0] != matrix.num_cols or score_dst.shape != (matrix.num_rows, score_src.shape[1]):
        raise ValueError(f"scores of shapes {tuple(score_src.shape)} and {tuple(score_dst.shape)} for a "
                         f"{matrix.num_rows} x {matrix.num_cols} matrix")
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
    return _HeadSpMM.apply(z, alpha.float(), matrix)
