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
    /* Decode over n contiguous cached rows of hd values (one KV head), for
     * g query heads at once so each row is loaded and converted once:
     *   scores: s[i*ld + j] = scale * q_i . k_j            (i < g, j < n)
     *   accum:  out_i[:] += sum_j p[i*ld + j] v_j          (out is [g][hd]) */
    void (*scores_f32)(const float *q, int g, const float *keys, int n, int hd, float scale, float *s, int ld);
    void (*scores_f16)(const float *q, int g, const uint16_t *keys, int n, int hd, float scale, float *s, int ld);
    void (*accum_f32)(const float *p, int g, int ld, const float *vals, int n, int hd, float *out);
    void (*accum_f16)(const float *p, int g, int ld, const uint16_t *vals, int n, int hd, float *out);
    /* x[j] = exp(x[j] - mx) (exp(-inf) = 0), returns the sum */
    float (*exp_shift_sum)(float *x, int n, float mx);
} attn_kernels;

/* The best kernel set for this CPU (a pointer to a constant table); callers
 * fetch it once per attention step, not per key. */
const attn_kernels *attn_kernels_get(void);
/* The portable C set (tests compare both sets with a reference). */
const attn_kernels *attn_kernels_scalar(void);

#endif
