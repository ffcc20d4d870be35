/* Two builds of every hot kernel and the run-time choice between them: one for AVX-512 (F, BW,
 * VL, DQ: every Xeon since Skylake-SP, AMD since Zen 4), one for the baseline x86-64 the package
 * is compiled for, since a package built on a login node may run on newer compute nodes. The
 * AVX-512 build is the same source vectorised 16 lanes wide (no bfloat16 instruction is used:
 * conversions are integer operations), and `fast = 0` (HPCGNN_PORTABLE_KERNELS=1 from Python)
 * forces the baseline build, so tests run both on one machine. */
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

/* NAME_avx512 and NAME_portable, each calling BODY (an always_inline function, so that its loops
 * are compiled in the caller's target and vectorised for it). */
#define HPCGNN_TWO_BUILDS(NAME, PARAMS, ARGS, BODY)               \
    HPCGNN_AVX512 static void NAME##_avx512 PARAMS { BODY ARGS; } \
    static void NAME##_portable PARAMS { BODY ARGS; }

#endif
