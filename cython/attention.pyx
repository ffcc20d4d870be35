# distutils: language = c++
# cython: boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""GAT's attention over CSR rows (a row's entries are its in-edges): the edge softmax and its
backward in float32, and the attention-weighted sum of multi-head source rows and its two
gradients for float32 or bfloat16 rows (as uint16, see hpcgnn._spmm), accumulated in float32.

Rows of ``z`` hold ``heads`` blocks of ``dim`` elements; attention arrays hold one float32 per
(entry, head), entry-major. No per-edge message rows are materialised.
"""
import numpy as np

from libc.stdint cimport int64_t, uint16_t


cdef extern from "attention_kernels.h" nogil:
    void hpcgnn_head_spmm[Row](const int64_t* indptr, const int64_t* col, const float* alpha,
                               const int64_t* order, const Row* z, Row* out, int64_t rows, int64_t heads, int64_t dim, int fast, int threads) except +
    void hpcgnn_head_sddmm[Row](const int64_t* indptr, const int64_t* col, const Row* grad_out, const Row* z,
                                float* grad_alpha, int64_t rows, int64_t heads, int64_t dim, int fast,
                                int threads) except +
    void hpcgnn_edge_softmax(const int64_t* indptr, const int64_t* col, const float* score_src,
                             const float* score_dst, float slope, float* alpha, int64_t rows, int64_t heads,
                             int threads) except +
    void hpcgnn_edge_softmax_backward(const int64_t* indptr, const int64_t* col, const float* score_src,
                                      const float* score_dst, float slope, const float* alpha,
                                      const float* grad_alpha, float* grad_logit, float* grad_dst, int64_t rows,
                                      int64_t heads, int threads) except +


ctypedef fused row_t:
    float
    uint16_t


cdef int64_t _check(str name, const int64_t[::1] indptr, const int64_t[::1] col, int64_t num_src, int64_t heads,
                    list sized) except -1:
    """Validate the CSR against ``num_src`` source rows; ``sized``: (what, length, expected)."""
    cdef int64_t rows = indptr.shape[0] - 1
    if rows < 0 or heads < 1:
        raise ValueError(f"{name}: empty indptr or {heads} heads")
    if indptr[0] != 0 or indptr[rows] != col.shape[0]:
        raise ValueError(f"{name}: indptr spans [{indptr[0]}, {indptr[rows]}) for {col.shape[0]} entries")
    if col.shape[0] and (np.min(col) < 0 or np.max(col) >= num_src):
        raise ValueError(f"{name}: a column index outside [0, {num_src})")
    for what, length, expected in sized:
        if length != expected:
            raise ValueError(f"{name}: {what} has {length} elements, expected {expected}")
    return rows


def edge_softmax(const int64_t[::1] indptr, const int64_t[::1] col, const float[::1] score_src,
                 const float[::1] score_dst, float slope, float[::1] alpha, int64_t heads, int threads=1):
    """Local. ``alpha[e, h]``: the softmax over row r's entries of ``leaky_relu(score_src[col[e], h]
    + score_dst[r, h], slope)`` (scores ``[num_src, heads]`` and ``[rows, heads]``, flattened)."""
    cdef int64_t rows = _check("edge_softmax", indptr, col, score_src.shape[0] // heads, heads, [
        ("score_src", score_src.shape[0] % heads, 0), ("score_dst", score_dst.shape[0], (indptr.shape[0] - 1) * heads),
        ("alpha", alpha.shape[0], col.shape[0] * heads)])
    if col.shape[0] == 0:
        return
    with nogil:
        hpcgnn_edge_softmax(&indptr[0], &col[0], &score_src[0], &score_dst[0], slope, &alpha[0], rows, heads, threads)


def edge_softmax_backward(const int64_t[::1] indptr, const int64_t[::1] col, const float[::1] score_src,
                          const float[::1] score_dst, float slope, const float[::1] alpha,
                          const float[::1] grad_alpha, float[::1] grad_logit, float[::1] grad_dst, int64_t heads,
                          int threads=1):
    """Local. The gradient of :func:`edge_softmax`'s pre-activation logits (``grad_logit``, per
    entry) and its row sums (``grad_dst``, the destination scores' gradient); the source scores'
    gradient is ``grad_logit`` summed by column."""
    cdef int64_t entries = col.shape[0] * heads
    cdef int64_t rows = _check("edge_softmax_backward", indptr, col, score_src.shape[0] // heads, heads, [
        ("score_src", score_src.shape[0] % heads, 0), ("score_dst", score_dst.shape[0], (indptr.shape[0] - 1) * heads),
        ("alpha", alpha.shape[0], entries), ("grad_alpha", grad_alpha.shape[0], entries),
        ("grad_logit", grad_logit.shape[0], entries), ("grad_dst", grad_dst.shape[0], score_dst.shape[0])])
    if col.shape[0] == 0:
        np.asarray(grad_dst)[:] = 0
        return
    with nogil:
        hpcgnn_edge_softmax_backward(&indptr[0], &col[0], &score_src[0], &score_dst[0], slope, &alpha[0],
                                     &grad_alpha[0], &grad_logit[0], &grad_dst[0], rows, heads, threads)


def head_spmm(const int64_t[::1] indptr, const int64_t[::1] col, const float[::1] alpha, const row_t[::1] z,
              row_t[::1] out, int64_t heads, int64_t dim, bint fast=True, int threads=1,
              const int64_t[::1] order=None):
    """Local. ``out[r, h] = sum_e alpha[e, h] * z[col[e], h]`` over row r's entries (rows of
    ``heads * dim`` elements; bfloat16 rounded once per output element). With ``order`` (a
    transpose's, see hpcgnn._spmm.transpose) entry e's weights are ``alpha[order[e]]``. ``out``
    must not overlap ``z``."""
    cdef int64_t width = heads * dim
    cdef int64_t rows = _check("head_spmm", indptr, col, z.shape[0] // max(width, 1), heads, [
        ("z", z.shape[0] % max(width, 1), 0), ("alpha", alpha.shape[0], col.shape[0] * heads),
        ("out", out.shape[0], (indptr.shape[0] - 1) * width)]
        + ([] if order is None else [("order", order.shape[0], col.shape[0])]))
    if order is not None and order.shape[0] and (np.min(order) < 0 or np.max(order) >= col.shape[0]):
        raise ValueError(f"head_spmm: an order entry outside [0, {col.shape[0]})")
    cdef const int64_t* reorder = &order[0] if order is not None and order.shape[0] else NULL
    if rows == 0 or width == 0:
        return
    if col.shape[0] == 0:
        np.asarray(out)[:] = 0
        return
    with nogil:
        hpcgnn_head_spmm(&indptr[0], &col[0], &alpha[0], reorder, &z[0], &out[0], rows, heads, dim, fast, threads)


def head_sddmm(const int64_t[::1] indptr, const int64_t[::1] col, const row_t[::1] grad_out, const row_t[::1] z,
               float[::1] grad_alpha, int64_t heads, int64_t dim, bint fast=True, int threads=1):
    """Local. ``grad_alpha[e, h] = <grad_out[r, h], z[col[e], h]>`` for row r's entries: the
    gradient of :func:`head_spmm` with respect to ``alpha``."""
    cdef int64_t width = heads * dim
    cdef int64_t rows = _check("head_sddmm", indptr, col, z.shape[0] // max(width, 1), heads, [
        ("z", z.shape[0] % max(width, 1), 0), ("grad_alpha", grad_alpha.shape[0], col.shape[0] * heads),
        ("grad_out", grad_out.shape[0], (indptr.shape[0] - 1) * width)])
    if col.shape[0] == 0:
        return
    if width == 0:
        np.asarray(grad_alpha)[:] = 0
        return
    with nogil:
        hpcgnn_head_sddmm(&indptr[0], &col[0], &grad_out[0], &z[0], &grad_alpha[0], rows, heads, dim, fast, threads)
