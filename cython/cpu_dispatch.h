/* Two builds of every hot kernel and the run-time choice between them: one for AVX-512 (F, BW,
 * VL, DQ: every Xeon since Skylake-SP, AMD since Zen 4), one for the baseline x86-64 the package
 * is compiled for, since a package built on a login node may run on newer compute nodes. The
 * AVX-512 build is the same source vectorised 16 lanes wide: no bfloat16 instruction is used
 * (conversions are integer operations), no loop reduces across lanes, and setup.py turns off
 * fused multiply-add contraction, so both builds give the same bits (tested). `fast = 0`
 * (HPCGNN_PORTABLE_KERNELS=1 from Python) forces the baseline build, so tests run both. */
#ifndef HPCGNN_CPU_DISPATCH_H
#define HPCGNN_CPU_DISPATCH_H

#if defined(__GNUC__) && defined(__x86_64__)
#define HPCGNN_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))
static inline int hpcgnn_cpu_has_avx512(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
}
/* bfloat16 dot-product units (torch's bfloat16 GEMMs are emulated without them) */
static inline int hpcgnn_cpu_has_avx512bf16(void) {
    return hpcgnn_cpu_has_avx512() && __builtin_cpu_supports("avx512bf16");
}
#else
#define HPCGNN_AVX512
static inline int hpcgnn_cpu_has_avx512(void) { return 0; }
static inline int hpcgnn_cpu_has_avx512bf16(void) { return 0; }
#endif

/* The build to run: AVX-512 when asked for (`fast`) and the CPU has it. */
static inline int hpcgnn_use_avx512(int fast) { return fast && hpcgnn_cpu_has_avx512(); }

/* A kernel's body: inlined into each build, so that its loops are compiled for that build's target. */
#define HPCGNN_KERNEL_BODY static inline __attribute__((always_inline)) void

/* NAME_avx512 and NAME_portable, each calling BODY (a HPCGNN_KERNEL_BODY), and NAME_pick(fast),
 * the one of the two to run. */
#define HPCGNN_TWO_BUILDS(NAME, PARAMS, ARGS, BODY)                                    \
    HPCGNN_AVX512 static void NAME##_avx512 PARAMS { BODY ARGS; }                      \
    static void NAME##_portable PARAMS { BODY ARGS; }                                  \
    static inline auto NAME##_pick(int fast) {                                         \
        return hpcgnn_use_avx512(fast) ? NAME##_avx512 : NAME##_portable;              \
    }

#endif
