/* Vector kernels for attention over cached keys/values (f32 or f16):
 * AVX2+FMA+F16C versions chosen at run time, scalar fallbacks. */
#ifndef SUBQ_ATTN_KERNELS_H
#define SUBQ_ATTN_KERNELS_H

#include <stdint.h>

typedef struct attn_kernels {
    /* sum_i a[i] * b[i] */
    float (*dot_f32)(const float *a, const float *b, int n);
    float (*dot_f16)(const float *a, const uint16_t *b, int n);
    /* y[i] += w * x[i] */
    void (*axpy_f32)(float *y, float w, const float *x, int n);
    void (*axpy_f16)(float *y, float w, const uint16_t *x, int n);
} attn_kernels;

/* The best kernel set for this CPU (a pointer to a constant table); callers
 * fetch it once per attention step, not per key. */
const attn_kernels *attn_kernels_get(void);

#endif
