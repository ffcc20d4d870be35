# distutils: language = c++
# cython: boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Sparse (CSR) times dense rows, for float32 and bfloat16 rows with float32 accumulation, and
the CSR transpose that the backward pass multiplies with.

bfloat16 arrays cross this module as uint16 (numpy has no bfloat16; torch's bfloat16 tensors
are viewed as int16/uint16 without a copy). The AVX-512 build of each kernel is used when the
CPU has AVX-512 and ``fast`` is true; the portable build otherwise.
"""
import numpy as np

from libc.stdint cimport int64_t, uint16_t


cdef extern from "spmm_kernels.h" nogil:
    int hpcgnn_cpu_has_avx512()
    int hpcgnn_cpu_has_avx512bf16()
    int hpcgnn_use_avx512(int fast)
    void hpcgnn_spmm_f32(const int64_t* indptr, const int64_t* col, const float* weight, const float* h,
                         float* out, int64_t rows, int64_t dim, int fast, int threads) except +
    void hpcgnn_spmm_bf16(const int64_t* indptr, const int64_t* col, const float* weight, const uint16_t* h,
                          uint16_t* out, int64_t rows, int64_t dim, int fast, int threads) except +


def has_avx512() -> bool:
    """Local. Whether this CPU runs the kernels' AVX-512 build (AVX512F, BW, VL and DQ)."""
    return bool(hpcgnn_cpu_has_avx512())


def build(bint fast=True) -> str:
    """Local. The build of the compiled kernels (aggregation, attention, dropout) that a call with
    ``fast`` runs here: ``"avx512"`` or ``"portable"``."""
    return "avx512" if hpcgnn_use_avx512(fast) else "portable"


def has_avx512bf16() -> bool:
    """Local. Whether this CPU also has bfloat16 dot-product units (AVX512-BF16), which torch's
    bfloat16 GEMMs need to beat float32."""
    return bool(hpcgnn_cpu_has_avx512bf16())


cdef int _check(str name, const int64_t[::1] indptr, const int64_t[::1] col, object weight, int64_t h_rows,
                int64_t h_size, int64_t out_size, int64_t dim) except -1:
    cdef int64_t rows = indptr.shape[0] - 1
    if rows < 0 or dim < 0:
        raise ValueError(f"{name}: empty indptr or negative width {dim}")
    if indptr[0] != 0 or indptr[rows] != col.shape[0]:
        raise ValueError(f"{name}: indptr spans [{indptr[0]}, {indptr[rows]}) for {col.shape[0]} entries")
    if weight is not None and weight.shape[0] != col.shape[0]:
        raise ValueError(f"{name}: {weight.shape[0]} weights for {col.shape[0]} entries")
    if h_size != h_rows * dim or out_size != rows * dim:
        raise ValueError(f"{name}: rows of {h_size} and {out_size} elements do not fit width {dim}")
    if col.shape[0] and (np.min(col) < 0 or np.max(col) >= h_rows):
        raise ValueError(f"{name}: a column index outside [0, {h_rows})")
    return 0


ctypedef fused row_t:
    float
    uint16_t


def spmm(const int64_t[::1] indptr, const int64_t[::1] col, const float[::1] weight, const row_t[::1] h,
         row_t[::1] out, int64_t dim, bint fast=True, int threads=1):
    """Local. ``out[r] = sum_e weight[e] * h[col[e]]`` over row r's entries (weight None: 1), rows
    of ``dim`` elements flattened: float32, or bfloat16 as uint16 (accumulated in float32 and
    rounded to nearest-even once per output element). ``out`` must not overlap ``h``; the rows
    are split over ``threads`` threads by entry count."""
    _check("spmm", indptr, col, None if weight is None else np.asarray(weight), h.shape[0] // max(dim, 1),
           h.shape[0], out.shape[0], dim)
    cdef int64_t rows = indptr.shape[0] - 1
    cdef const float* w = &weight[0] if weight is not None and weight.shape[0] else NULL
    if rows == 0 or dim == 0:
        return
    if indptr[rows] == 0:
        np.asarray(out)[:] = 0
        return
    with nogil:
        if row_t is float:
            hpcgnn_spmm_f32(&indptr[0], &col[0], w, &h[0], &out[0], rows, dim, fast, threads)
        else:
            hpcgnn_spmm_bf16(&indptr[0], &col[0], w, &h[0], &out[0], rows, dim, fast, threads)


def transpose(const int64_t[::1] indptr, const int64_t[::1] col, int64_t num_cols):
    """Local. The CSR of the transpose as ``(indptr_t, row_t, order)``: entries grouped by column,
    in ascending row order within one (a stable counting sort), ``order`` the original entry of
    each (per-entry values of the transpose are ``values[order]``)."""
    cdef int64_t rows = indptr.shape[0] - 1, n = col.shape[0], r, e, c, at
    counts = np.bincount(np.asarray(col), minlength=num_cols) if n else np.zeros(num_cols, dtype=np.int64)
    if counts.shape[0] != num_cols:
        raise ValueError(f"transpose: a column index at or above {num_cols}")
    indptr_t_a = np.zeros(num_cols + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr_t_a[1:])
    cursor_a = indptr_t_a[:num_cols].copy()
    row_t_a = np.empty(n, dtype=np.int64)
    order_a = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] cursor = cursor_a
    cdef int64_t[::1] row_t = row_t_a
    cdef int64_t[::1] order = order_a
    with nogil:
        for r in range(rows):
            for e in range(indptr[r], indptr[r + 1]):
                c = col[e]
                at = cursor[c]
                cursor[c] = at + 1
                row_t[at] = r
                order[at] = e
    return indptr_t_a, row_t_a, order_a
