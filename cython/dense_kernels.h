/* Elementwise loops of hpcgnn._dense, in C so that `restrict` lets the compiler vectorise
 * them with bit-mask selects instead of branches (a random dropout mask mispredicts half the time). */
#ifndef HPCGNN_DENSE_KERNELS_H
#define HPCGNN_DENSE_KERNELS_H
#include <stdint.h>
#include <string.h>

#include "bf16.h"
#include "splitmix64.h"
/* Each loop has two builds (cpu_dispatch.h): AVX-512 does the mask's 64-bit multiplies and the
 * bfloat16 rounding 16 lanes at a time, 2-3x the baseline's speed; both give the same bits. */
#include "cpu_dispatch.h"

#ifdef __cplusplus
#define HPCGNN_RESTRICT __restrict__
#else
#define HPCGNN_RESTRICT restrict
#endif

/* v if keep else +0.0, as a bit mask: GCC turns a ternary into a branch, which blocks vectorisation. */
static inline float hpcgnn_select(float v, int keep) {
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    bits &= -(uint32_t)(keep != 0);
    memcpy(&v, &bits, sizeof v);
    return v;
}

/* The 16-bit draws of elements [4q, 4q + 4): see the module docstring. */
static inline void hpcgnn_draws(uint64_t stream, int64_t q, uint16_t draws[4]) {
    uint64_t word = hpcgnn_splitmix64(stream + (uint64_t)q);
    for (int lane = 0; lane < 4; lane++) draws[lane] = (uint16_t)(word >> (16 * lane));
}

/* out = mask * scale * (relu ? max(x, 0) : x) */
HPCGNN_KERNEL_BODY hpcgnn_masked_scale_body(const float* HPCGNN_RESTRICT x, float* HPCGNN_RESTRICT out, int64_t n,
                                       uint64_t seed, uint32_t threshold, float scale, int relu) {
    const uint64_t stream = seed * 0xD1B54A32D192ED03ULL;
    enum { CHUNK = 256 };           /* draws first, then a branch-free pass the compiler vectorises */
    uint16_t draws[CHUNK];
    for (int64_t start = 0; start < n; start += CHUNK) {
        int64_t len = n - start < CHUNK ? n - start : CHUNK;
        for (int64_t q = 0; q < (len + 3) / 4; q++) hpcgnn_draws(stream, start / 4 + q, draws + 4 * q);
        const float* HPCGNN_RESTRICT xs = x + start;
        float* HPCGNN_RESTRICT os = out + start;
        if (relu) {
            for (int64_t i = 0; i < len; i++) os[i] = hpcgnn_select(xs[i] * scale, (xs[i] > 0.0f) & (draws[i] >= threshold));
        } else {
            for (int64_t i = 0; i < len; i++) os[i] = hpcgnn_select(xs[i] * scale, draws[i] >= threshold);
        }
    }
}

/* the same on bfloat16 elements: computed in float32 from the same draws, rounded once */
HPCGNN_KERNEL_BODY hpcgnn_masked_scale_bf16_body(const uint16_t* HPCGNN_RESTRICT x, uint16_t* HPCGNN_RESTRICT out, int64_t n,
                                            uint64_t seed, uint32_t threshold, float scale, int relu) {
    const uint64_t stream = seed * 0xD1B54A32D192ED03ULL;
    enum { CHUNK = 256 };
    uint16_t draws[CHUNK];
    for (int64_t start = 0; start < n; start += CHUNK) {
        int64_t len = n - start < CHUNK ? n - start : CHUNK;
        for (int64_t q = 0; q < (len + 3) / 4; q++) hpcgnn_draws(stream, start / 4 + q, draws + 4 * q);
        for (int64_t i = 0; i < len; i++) {
            float v = hpcgnn_bf16_to_f32(x[start + i]);
            int keep = (draws[i] >= threshold) & (!relu | (v > 0.0f));
            out[start + i] = hpcgnn_f32_to_bf16(hpcgnn_select(v * scale, keep));
        }
    }
}

HPCGNN_KERNEL_BODY hpcgnn_where_positive_bf16_body(const uint16_t* HPCGNN_RESTRICT grad, const uint16_t* HPCGNN_RESTRICT out,
                                              uint16_t* HPCGNN_RESTRICT grad_in, int64_t n, float scale) {
    for (int64_t i = 0; i < n; i++)
        grad_in[i] = hpcgnn_f32_to_bf16(hpcgnn_select(hpcgnn_bf16_to_f32(grad[i]) * scale,
                                                      hpcgnn_bf16_to_f32(out[i]) > 0.0f));
}

/* grad_in = grad * scale where out > 0, else 0 */
HPCGNN_KERNEL_BODY hpcgnn_where_positive_body(const float* HPCGNN_RESTRICT grad, const float* HPCGNN_RESTRICT out,
                                         float* HPCGNN_RESTRICT grad_in, int64_t n, float scale) {
    for (int64_t i = 0; i < n; i++) grad_in[i] = hpcgnn_select(grad[i] * scale, out[i] > 0.0f);
}

#define HPCGNN_SCALE_PARAMS(ELEM)                                                                      \
    (const ELEM* x, ELEM* out, int64_t n, uint64_t seed, uint32_t threshold, float scale, int relu)
#define HPCGNN_SCALE_ARGS (x, out, n, seed, threshold, scale, relu)
HPCGNN_TWO_BUILDS(hpcgnn_masked_scale_f32, HPCGNN_SCALE_PARAMS(float), HPCGNN_SCALE_ARGS, hpcgnn_masked_scale_body)
HPCGNN_TWO_BUILDS(hpcgnn_masked_scale_bf16row, HPCGNN_SCALE_PARAMS(uint16_t), HPCGNN_SCALE_ARGS,
                  hpcgnn_masked_scale_bf16_body)
#define HPCGNN_WHERE_PARAMS(ELEM) (const ELEM* grad, const ELEM* out, ELEM* grad_in, int64_t n, float scale)
#define HPCGNN_WHERE_ARGS (grad, out, grad_in, n, scale)
HPCGNN_TWO_BUILDS(hpcgnn_where_positive_f32, HPCGNN_WHERE_PARAMS(float), HPCGNN_WHERE_ARGS, hpcgnn_where_positive_body)
HPCGNN_TWO_BUILDS(hpcgnn_where_positive_bf16row, HPCGNN_WHERE_PARAMS(uint16_t), HPCGNN_WHERE_ARGS,
                  hpcgnn_where_positive_bf16_body)

/* The entry points: the AVX-512 build when `fast` and the CPU has it, else the baseline one. */
static void hpcgnn_masked_scale(const float* x, float* out, int64_t n, uint64_t seed, uint32_t threshold,
                                float scale, int relu, int fast) {
    hpcgnn_masked_scale_f32_pick(fast)(x, out, n, seed, threshold, scale, relu);
}
static void hpcgnn_masked_scale_bf16(const uint16_t* x, uint16_t* out, int64_t n, uint64_t seed, uint32_t threshold,
                                     float scale, int relu, int fast) {
    hpcgnn_masked_scale_bf16row_pick(fast)(x, out, n, seed, threshold, scale, relu);
}
static void hpcgnn_where_positive(const float* grad, const float* out, float* grad_in, int64_t n, float scale,
                                  int fast) {
    hpcgnn_where_positive_f32_pick(fast)(grad, out, grad_in, n, scale);
}
static void hpcgnn_where_positive_bf16(const uint16_t* grad, const uint16_t* out, uint16_t* grad_in, int64_t n,
                                       float scale, int fast) {
    hpcgnn_where_positive_bf16row_pick(fast)(grad, out, grad_in, n, scale);
}
#endif
