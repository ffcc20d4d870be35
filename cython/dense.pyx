# distutils: language = c++
# cython: boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Fused elementwise kernels of a training step: dropout and ReLU followed by dropout.

Each runs as one pass over float32 memory without the GIL. Dropout masks are not stored:
they come from a counter-based hash of ``(seed, element index)``, so the backward pass
recomputes the mask of the forward pass from the same ``seed``.

``fast`` (default) runs the AVX-512 build where the CPU has it, else the baseline one; both give
the same bits (see cpu_dispatch.h).

Each also takes bfloat16 elements as uint16 (torch bfloat16 memory viewed without a copy),
computes in float32 with the same mask and rounds each result once to nearest-even.

Mask definition (reproduced by :func:`hpcgnn.testing.reference.dropout_mask`)
--------------------------------------------------------------------------
With unsigned 64-bit wrap-around arithmetic and ``mix64`` as in :mod:`hpcgnn._sample`::

    word(q) = mix64(seed * 0xD1B54A32D192ED03 + q + 0x9E3779B97F4A7C15)
    draw(e) = (word(e // 4) >> (16 * (e % 4))) & 0xFFFF

element ``e`` (flat, row-major) is kept iff ``draw(e) >= threshold``, and a kept element is
multiplied by ``scale``.
"""
from libc.stdint cimport int64_t, uint16_t, uint64_t


cdef extern from "dense_kernels.h" nogil:
    void hpcgnn_masked_scale(const float* x, float* out, int64_t n, uint64_t seed, unsigned threshold,
                             float scale, int relu, int fast)
    void hpcgnn_where_positive(const float* grad, const float* out, float* grad_in, int64_t n, float scale, int fast)
    void hpcgnn_masked_scale_bf16(const uint16_t* x, uint16_t* out, int64_t n, uint64_t seed, unsigned threshold,
                                  float scale, int relu, int fast)
    void hpcgnn_where_positive_bf16(const uint16_t* grad, const uint16_t* out, uint16_t* grad_in, int64_t n,
                                    float scale, int fast)


ctypedef fused elem_t:
    float
    uint16_t


cdef _masked_scale(str name, const elem_t[::1] x, elem_t[::1] out, uint64_t seed, unsigned threshold, float scale,
                   int relu, bint fast):
    if x.shape[0] != out.shape[0]:
        raise ValueError(f"{name}: input has {x.shape[0]} elements, output {out.shape[0]}")
    if threshold > 65536:
        raise ValueError(f"{name}: threshold {threshold} above 65536")
    if x.shape[0]:
        with nogil:
            if elem_t is float:
                hpcgnn_masked_scale(&x[0], &out[0], x.shape[0], seed, threshold, scale, relu, fast)
            else:
                hpcgnn_masked_scale_bf16(&x[0], &out[0], x.shape[0], seed, threshold, scale, relu, fast)


def dropout(const elem_t[::1] x, elem_t[::1] out, uint64_t seed, unsigned threshold, float scale, bint fast=True):
    """Local. ``out = x * scale`` where the mask of ``seed`` keeps an element, else 0.

    Also the backward pass of the same dropout: call it on the gradient with the same seed.
    ``x`` and ``out`` must not overlap.
    """
    _masked_scale("dropout", x, out, seed, threshold, scale, 0, fast)


def relu_dropout(const elem_t[::1] x, elem_t[::1] out, uint64_t seed, unsigned threshold, float scale,
                 bint fast=True):
    """Local. ``out = relu(x) * scale`` where the mask of ``seed`` keeps an element, else 0."""
    _masked_scale("relu_dropout", x, out, seed, threshold, scale, 1, fast)


def where_positive(const elem_t[::1] grad, const elem_t[::1] out, elem_t[::1] grad_in, float scale,
                   bint fast=True):
    """Local. ``grad_in = grad * scale`` where ``out > 0``, else 0: the backward pass of
    :func:`relu_dropout` from its output alone (an element is positive iff it passed both
    the ReLU and the mask)."""
    cdef int64_t n = grad.shape[0]
    if out.shape[0] != n or grad_in.shape[0] != n:
        raise ValueError(f"where_positive: sizes differ ({n}, {out.shape[0]}, {grad_in.shape[0]})")
    if n:
        with nogil:
            if elem_t is float:
                hpcgnn_where_positive(&grad[0], &out[0], &grad_in[0], n, scale, fast)
            else:
                hpcgnn_where_positive_bf16(&grad[0], &out[0], &grad_in[0], n, scale, fast)
