/* The one splitmix64 of hpcgnn's compiled kernels (sampling draws, dropout masks, hub thinning).
 * hpcgnn.runtime.rng.mix64 is the same function in numpy; the test oracles reproduce every
 * kernel's draws bit for bit with it. */
#ifndef HPCGNN_SPLITMIX64_H
#define HPCGNN_SPLITMIX64_H
#include <stdint.h>

#define HPCGNN_GOLDEN_GAMMA 0x9E3779B97F4A7C15ULL

/* The splitmix64 finaliser (wrap-around uint64 arithmetic). */
static inline uint64_t hpcgnn_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* splitmix64 of a counter: mix64(x + golden gamma). */
static inline uint64_t hpcgnn_splitmix64(uint64_t x) {
    return hpcgnn_mix64(x + HPCGNN_GOLDEN_GAMMA);
}
#endif
