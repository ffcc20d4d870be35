/* Multi-head attention over CSR rows, for hpcgnn._attention: the edge softmax of GAT and the
 * attention-weighted sum of source rows, float32 or bfloat16 rows, float32 accumulation.
 *
 * A row's entries are its in-edges; z rows hold `heads` blocks of `dim` elements; alpha holds
 * one float32 per (entry, head). The bodies are plain loops written once (templates over the
 * row type); each entry point has two builds, AVX-512 and baseline (cpu_dispatch.h). */
#ifndef HPCGNN_ATTENTION_KERNELS_H
#define HPCGNN_ATTENTION_KERNELS_H
#include <math.h>
#include <stdint.h>

#include "bf16.h"
#include "cpu_dispatch.h"
#include "row_threads.h"

#define HPCGNN_ATTN_AHEAD 16

static inline float hpcgnn_load(float v) { return v; }
static inline float hpcgnn_load(uint16_t v) { return hpcgnn_bf16_to_f32(v); }
static inline void hpcgnn_store(float* p, float v) { *p = v; }
static inline void hpcgnn_store(uint16_t* p, float v) { *p = hpcgnn_f32_to_bf16(v); }

/* out[r, h, :] = sum over r's entries e of alpha[a, h] * z[col[e], h, :], a = order ? order[e] : e
 * (a transpose's entries read the original's weights through `order`) */
template <typename Row>
HPCGNN_KERNEL_BODY hpcgnn_head_spmm_body(
        const int64_t* __restrict__ indptr, const int64_t* __restrict__ col, const float* __restrict__ alpha,
        const int64_t* __restrict__ order, const Row* __restrict__ z, Row* __restrict__ out, int64_t start, int64_t end, int64_t heads,
        int64_t dim, int64_t total, float* __restrict__ acc) {
    const int64_t width = heads * dim;
    for (int64_t r = start; r < end; r++) {
        for (int64_t f = 0; f < width; f++) acc[f] = 0.0f;
        for (int64_t e = indptr[r]; e < indptr[r + 1]; e++) {
            if (e + HPCGNN_ATTN_AHEAD < total) {  /* source rows are random: fetch one ahead */
                const char* next = (const char*)(z + col[e + HPCGNN_ATTN_AHEAD] * width);
                for (int64_t b = 0; b < width * (int64_t)sizeof(Row); b += 64) __builtin_prefetch(next + b);
            }
            const Row* __restrict__ src = z + col[e] * width;
            const float* __restrict__ weights = alpha + (order ? order[e] : e) * heads;
            for (int64_t h = 0; h < heads; h++) {
                const float w = weights[h];
                float* __restrict__ a = acc + h * dim;
                const Row* __restrict__ s = src + h * dim;
                for (int64_t f = 0; f < dim; f++) a[f] += w * hpcgnn_load(s[f]);
            }
        }
        Row* __restrict__ dst = out + r * width;
        for (int64_t f = 0; f < width; f++) hpcgnn_store(dst + f, acc[f]);
    }
}

/* grad_alpha[e, h] = <grad_out[r, h, :], z[col[e], h, :]> for r's entries e */
template <typename Row>
HPCGNN_KERNEL_BODY hpcgnn_head_sddmm_body(
        const int64_t* __restrict__ indptr, const int64_t* __restrict__ col, const Row* __restrict__ grad_out,
        const Row* __restrict__ z, float* __restrict__ grad_alpha, int64_t start, int64_t end, int64_t heads,
        int64_t dim, int64_t total, float* __restrict__ g) {
    const int64_t width = heads * dim;
    for (int64_t r = start; r < end; r++) {
        for (int64_t f = 0; f < width; f++) g[f] = hpcgnn_load(grad_out[r * width + f]);
        for (int64_t e = indptr[r]; e < indptr[r + 1]; e++) {
            if (e + HPCGNN_ATTN_AHEAD < total) {
                const char* next = (const char*)(z + col[e + HPCGNN_ATTN_AHEAD] * width);
                for (int64_t b = 0; b < width * (int64_t)sizeof(Row); b += 64) __builtin_prefetch(next + b);
            }
            const Row* __restrict__ src = z + col[e] * width;
            for (int64_t h = 0; h < heads; h++) {
                float dot = 0.0f;
                const float* __restrict__ gh = g + h * dim;
                const Row* __restrict__ s = src + h * dim;
                for (int64_t f = 0; f < dim; f++) dot += gh[f] * hpcgnn_load(s[f]);
                grad_alpha[e * heads + h] = dot;
            }
        }
    }
}

/* alpha[e, h] = softmax over r's entries of leaky_relu(score_src[col[e], h] + score_dst[r, h]) */
HPCGNN_KERNEL_BODY hpcgnn_edge_softmax_body(
        const int64_t* __restrict__ indptr, const int64_t* __restrict__ col, const float* __restrict__ score_src,
        const float* __restrict__ score_dst, float slope, float* __restrict__ alpha, int64_t start, int64_t end,
        int64_t heads, float* __restrict__ stats) {
    float* peak = stats;
    float* total = stats + heads;
    for (int64_t r = start; r < end; r++) {
        const int64_t first = indptr[r], last = indptr[r + 1];
        for (int64_t h = 0; h < heads; h++) { peak[h] = -INFINITY; total[h] = 0.0f; }
        for (int64_t e = first; e < last; e++)
            for (int64_t h = 0; h < heads; h++) {
                float x = score_src[col[e] * heads + h] + score_dst[r * heads + h];
                x = x > 0.0f ? x : slope * x;
                alpha[e * heads + h] = x;
                if (x > peak[h]) peak[h] = x;
            }
        for (int64_t e = first; e < last; e++)
            for (int64_t h = 0; h < heads; h++) {
                const float w = expf(alpha[e * heads + h] - peak[h]);
                alpha[e * heads + h] = w;
                total[h] += w;
            }
        for (int64_t e = first; e < last; e++)
            for (int64_t h = 0; h < heads; h++) alpha[e * heads + h] /= total[h];
    }
}

/* The softmax's backward: grad_logit[e, h] = d(loss)/d(score_src[col[e], h] + score_dst[r, h]),
 * and grad_dst[r, h] the sum of r's grad_logit (the source side is a scatter, left to the caller). */
HPCGNN_KERNEL_BODY hpcgnn_edge_softmax_backward_body(
        const int64_t* __restrict__ indptr, const int64_t* __restrict__ col, const float* __restrict__ score_src,
        const float* __restrict__ score_dst, float slope, const float* __restrict__ alpha,
        const float* __restrict__ grad_alpha, float* __restrict__ grad_logit, float* __restrict__ grad_dst,
        int64_t start, int64_t end, int64_t heads, float* __restrict__ inner) {
    for (int64_t r = start; r < end; r++) {
        const int64_t first = indptr[r], last = indptr[r + 1];
        for (int64_t h = 0; h < heads; h++) { inner[h] = 0.0f; grad_dst[r * heads + h] = 0.0f; }
        for (int64_t e = first; e < last; e++)
            for (int64_t h = 0; h < heads; h++) inner[h] += alpha[e * heads + h] * grad_alpha[e * heads + h];
        for (int64_t e = first; e < last; e++)
            for (int64_t h = 0; h < heads; h++) {
                const int64_t at = e * heads + h;
                const float x = score_src[col[e] * heads + h] + score_dst[r * heads + h];
                const float g = alpha[at] * (grad_alpha[at] - inner[h]) * (x > 0.0f ? 1.0f : slope);
                grad_logit[at] = g;
                grad_dst[r * heads + h] += g;
            }
    }
}

#define HPCGNN_HEAD_PARAMS(ROW)                                                                       \
    (const int64_t* indptr, const int64_t* col, const float* alpha, const int64_t* order, const ROW* z,     \
     ROW* out, int64_t start, int64_t end, int64_t heads, int64_t dim, int64_t total, float* acc)
#define HPCGNN_HEAD_ARGS (indptr, col, alpha, order, z, out, start, end, heads, dim, total, acc)
HPCGNN_TWO_BUILDS(hpcgnn_head_spmm_f32, HPCGNN_HEAD_PARAMS(float), HPCGNN_HEAD_ARGS, hpcgnn_head_spmm_body<float>)
HPCGNN_TWO_BUILDS(hpcgnn_head_spmm_bf16, HPCGNN_HEAD_PARAMS(uint16_t), HPCGNN_HEAD_ARGS,
                     hpcgnn_head_spmm_body<uint16_t>)

#define HPCGNN_SDDMM_PARAMS(ROW)                                                                       \
    (const int64_t* indptr, const int64_t* col, const ROW* grad_out, const ROW* z, float* grad_alpha,     \
     int64_t start, int64_t end, int64_t heads, int64_t dim, int64_t total, float* g)
#define HPCGNN_SDDMM_ARGS (indptr, col, grad_out, z, grad_alpha, start, end, heads, dim, total, g)
HPCGNN_TWO_BUILDS(hpcgnn_head_sddmm_f32, HPCGNN_SDDMM_PARAMS(float), HPCGNN_SDDMM_ARGS,
                     hpcgnn_head_sddmm_body<float>)
HPCGNN_TWO_BUILDS(hpcgnn_head_sddmm_bf16, HPCGNN_SDDMM_PARAMS(uint16_t), HPCGNN_SDDMM_ARGS,
                     hpcgnn_head_sddmm_body<uint16_t>)

/* The entry points the module calls: rows split over `threads` threads. */
template <typename Row>
static void hpcgnn_head_spmm(const int64_t* indptr, const int64_t* col, const float* alpha, const int64_t* order,
                             const Row* z, Row* out, int64_t rows, int64_t heads, int64_t dim, int fast, int threads) {
    const int64_t total = indptr[rows];
    auto kernel = [fast] {
        if constexpr (sizeof(Row) == 4) return hpcgnn_head_spmm_f32_pick(fast);
        else return hpcgnn_head_spmm_bf16_pick(fast);
    }();
    hpcgnn_rows_parallel(indptr, rows, threads, heads * dim, [=](int64_t start, int64_t end, float* acc) {
        kernel(indptr, col, alpha, order, z, out, start, end, heads, dim, total, acc);
    });
}

template <typename Row>
static void hpcgnn_head_sddmm(const int64_t* indptr, const int64_t* col, const Row* grad_out, const Row* z,
                              float* grad_alpha, int64_t rows, int64_t heads, int64_t dim, int fast, int threads) {
    const int64_t total = indptr[rows];
    auto kernel = [fast] {
        if constexpr (sizeof(Row) == 4) return hpcgnn_head_sddmm_f32_pick(fast);
        else return hpcgnn_head_sddmm_bf16_pick(fast);
    }();
    hpcgnn_rows_parallel(indptr, rows, threads, heads * dim, [=](int64_t start, int64_t end, float* g) {
        kernel(indptr, col, grad_out, z, grad_alpha, start, end, heads, dim, total, g);
    });
}

static void hpcgnn_edge_softmax(const int64_t* indptr, const int64_t* col, const float* score_src,
                                const float* score_dst, float slope, float* alpha, int64_t rows, int64_t heads,
                                int threads) {
    hpcgnn_rows_parallel(indptr, rows, threads, 2 * heads, [=](int64_t start, int64_t end, float* stats) {
        hpcgnn_edge_softmax_body(indptr, col, score_src, score_dst, slope, alpha, start, end, heads, stats);
    });
}

static void hpcgnn_edge_softmax_backward(const int64_t* indptr, const int64_t* col, const float* score_src,
                                         const float* score_dst, float slope, const float* alpha,
                                         const float* grad_alpha, float* grad_logit, float* grad_dst,
                                         int64_t rows, int64_t heads, int threads) {
    hpcgnn_rows_parallel(indptr, rows, threads, heads, [=](int64_t start, int64_t end, float* inner) {
        hpcgnn_edge_softmax_backward_body(indptr, col, score_src, score_dst, slope, alpha, grad_alpha, grad_logit,
                                          grad_dst, start, end, heads, inner);
    });
}
#endif
