/* Run-time CPU feature checks for choosing SIMD kernels. */
#ifndef SUBQ_BASE_CPU_H
#define SUBQ_BASE_CPU_H

/* AVX2 + FMA + F16C (and OS support for YMM state), the kernel set of the
 * AVX2 tables; detected once, then a load: cheap enough per kernel call. */
int cpu_has_avx2(void);
/* AVX-512 F/BW/VL/DQ + VNNI on top of that (and OS support for ZMM state):
 * the integer GEMM's wider tiles. */
int cpu_has_avx512vnni(void);

#endif
