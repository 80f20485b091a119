/* Run-time CPU feature checks for choosing SIMD kernels. */
#ifndef SUBQ_BASE_CPU_H
#define SUBQ_BASE_CPU_H

/* AVX2 + FMA + F16C, the x86-64-v3 kernel set (checked once per call via
 * cpuid; cheap enough to call per kernel invocation). */
int cpu_has_avx2(void);

#endif
