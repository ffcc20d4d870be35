/* Row-wise sparse-dense products of hpcgnn._spmm: out[r] = sum over r's entries e of w[e] * h[col[e]],
 * for float32 and bfloat16 rows, always accumulated in float32.
 *
 * bfloat16 is the upper half of a float32: widening is a 16-bit shift, narrowing rounds to
 * nearest-even. Each kernel has two builds, AVX-512 and baseline (cpu_dispatch.h). */
#ifndef HPCGNN_SPMM_KERNELS_H
#define HPCGNN_SPMM_KERNELS_H
#include <stdint.h>
#include <string.h>

#include "bf16.h"
#include "cpu_dispatch.h"

#ifdef __cplusplus
#define HPCGNN_RESTRICT __restrict__
#else
#define HPCGNN_RESTRICT restrict
#endif

/* One body for every (row type, ISA) pair: ROW_T is the row element, LOAD widens it, STORE narrows.
 * acc is a float32 scratch row of `dim` elements. */
#define HPCGNN_AHEAD 16
#define HPCGNN_SPMM_BODY(ROW_T, LOAD, STORE)                                                        \
    const int64_t total = indptr[rows];                                                             \
    for (int64_t r = 0; r < rows; r++) {                                                            \
        for (int64_t f = 0; f < dim; f++) acc[f] = 0.0f;                                           \
        for (int64_t e = indptr[r]; e < indptr[r + 1]; e++) {                                      \
            if (e + HPCGNN_AHEAD < total) { /* rows are random: fetch one a few entries ahead */    \
                const char* next = (const char*)(h + col[e + HPCGNN_AHEAD] * dim);                  \
                for (int64_t b = 0; b < dim * (int64_t)sizeof(ROW_T); b += 64) __builtin_prefetch(next + b); \
            }                                                                                       \
            const float w = weight ? weight[e] : 1.0f;                                             \
            const ROW_T* HPCGNN_RESTRICT src = h + col[e] * dim;                                    \
            for (int64_t f = 0; f < dim; f++) acc[f] += w * LOAD(src[f]);                          \
        }                                                                                           \
        ROW_T* HPCGNN_RESTRICT dst = out + r * dim;                                                 \
        for (int64_t f = 0; f < dim; f++) dst[f] = STORE(acc[f]);                                  \
    }

#define HPCGNN_F32_LOAD(x) (x)
#define HPCGNN_F32_STORE(x) (x)

#define HPCGNN_SPMM_DEFINE(SUFFIX, ATTR)                                                            \
    ATTR static void hpcgnn_spmm_f32_##SUFFIX(const int64_t* HPCGNN_RESTRICT indptr,                \
            const int64_t* HPCGNN_RESTRICT col, const float* HPCGNN_RESTRICT weight,                \
            const float* HPCGNN_RESTRICT h, float* HPCGNN_RESTRICT out, int64_t rows, int64_t dim,  \
            float* HPCGNN_RESTRICT acc) {                                                           \
        HPCGNN_SPMM_BODY(float, HPCGNN_F32_LOAD, HPCGNN_F32_STORE)                                  \
    }                                                                                               \
    ATTR static void hpcgnn_spmm_bf16_##SUFFIX(const int64_t* HPCGNN_RESTRICT indptr,               \
            const int64_t* HPCGNN_RESTRICT col, const float* HPCGNN_RESTRICT weight,                \
            const uint16_t* HPCGNN_RESTRICT h, uint16_t* HPCGNN_RESTRICT out, int64_t rows,         \
            int64_t dim, float* HPCGNN_RESTRICT acc) {                                              \
        HPCGNN_SPMM_BODY(uint16_t, hpcgnn_bf16_to_f32, hpcgnn_f32_to_bf16)                          \
    }

HPCGNN_SPMM_DEFINE(avx512, HPCGNN_AVX512)
HPCGNN_SPMM_DEFINE(portable, )

#ifdef __cplusplus
#include "row_threads.h"

template <typename Row, typename Kernel>
static void hpcgnn_spmm_threads(Kernel kernel, const int64_t* indptr, const int64_t* col, const float* weight,
                                const Row* h, Row* out, int64_t rows, int64_t dim, int threads) {
    hpcgnn_rows_parallel(indptr, rows, threads, dim, [=](int64_t start, int64_t end, float* acc) {
        kernel(indptr + start, col, weight, h, out + start * dim, end - start, dim, acc);
    });
}

/* The entry points: the AVX-512 build when `fast` and the CPU has it, else the portable one. */
static void hpcgnn_spmm_f32(const int64_t* indptr, const int64_t* col, const float* weight, const float* h,
                            float* out, int64_t rows, int64_t dim, int fast, int threads) {
    auto kernel = hpcgnn_use_avx512(fast) ? hpcgnn_spmm_f32_avx512 : hpcgnn_spmm_f32_portable;
    hpcgnn_spmm_threads<float>(kernel, indptr, col, weight, h, out, rows, dim, threads);
}

static void hpcgnn_spmm_bf16(const int64_t* indptr, const int64_t* col, const float* weight, const uint16_t* h,
                             uint16_t* out, int64_t rows, int64_t dim, int fast, int threads) {
    auto kernel = hpcgnn_use_avx512(fast) ? hpcgnn_spmm_bf16_avx512 : hpcgnn_spmm_bf16_portable;
    hpcgnn_spmm_threads<uint16_t>(kernel, indptr, col, weight, h, out, rows, dim, threads);
}
#endif

#endif
