/* bfloat16 <-> float32 for the kernels: bfloat16 is the upper half of a float32, stored as uint16. */
#ifndef HPCGNN_BF16_H
#define HPCGNN_BF16_H
#include <stdint.h>
#include <string.h>

static inline float hpcgnn_bf16_to_f32(uint16_t v) {
    uint32_t bits = (uint32_t)v << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* round to nearest, ties to even; NaN stays NaN (quiet) */
static inline uint16_t hpcgnn_f32_to_bf16(float f) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((bits >> 16) | 0x40u);
    bits += 0x7FFFu + ((bits >> 16) & 1u);
    return (uint16_t)(bits >> 16);
}
#endif
