/* Internal to src/quant: the per-instruction-set kernel tables. */
#ifndef SUBQ_QUANT_KERNELS_H
#define SUBQ_QUANT_KERNELS_H

#include "quant/quant.h"

extern const quant_kernels quant_kernels_scalar_table;

/* x86 with a compiler that has target attributes: AVX2 kernels are built
 * (whatever -march says) and chosen at run time. */
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define QUANT_HAVE_AVX2 1
extern const quant_kernels quant_kernels_avx2_table;
#endif

#endif
