/* The portable C kernel set: fused dot products of the stored formats (each
 * the dot of x with the reference dequantisation, quant/dequant.c, in one
 * pass), the f32 / f16 vector kernels, decode attention and the gathered row
 * dots, in straight loops. */
#include <math.h>

#include "kernels/dot.h"
#include "kernels/kernels.h"

/* ggml's order of float operations, as in the reference dequantisers: GCC
 * keeps contraction off in ISO C mode (the project's -std=c11); clang needs
 * telling. */
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

/* ---- f32 / f16 / bf16 ---------------------------------------------------- */

static float dot_f16(const float *x, const uint16_t *w, int64_t n) {
    float s0 = 0, s1 = 0;
    int64_t i = 0;
    for (; i + 2 <= n; i += 2) {
        s0 += fp16_to_fp32(w[i]) * x[i];
        s1 += fp16_to_fp32(w[i + 1]) * x[i + 1];
    }
    for (; i < n; i++) s0 += fp16_to_fp32(w[i]) * x[i];
    return s0 + s1;
}

static float dot_f16f16(const uint16_t *a, const uint16_t *b, int64_t n) {
    float s0 = 0, s1 = 0;
    int64_t i = 0;
    for (; i + 2 <= n; i += 2) {
        s0 += fp16_to_fp32(a[i]) * fp16_to_fp32(b[i]);
        s1 += fp16_to_fp32(a[i + 1]) * fp16_to_fp32(b[i + 1]);
    }
    for (; i < n; i++) s0 += fp16_to_fp32(a[i]) * fp16_to_fp32(b[i]);
    return s0 + s1;
}

static float dot_bf16(const float *x, const uint16_t *w, int64_t n) {
    float s0 = 0, s1 = 0;
    int64_t i = 0;
    for (; i + 2 <= n; i += 2) {
        s0 += bf16_to_fp32(w[i]) * x[i];
        s1 += bf16_to_fp32(w[i + 1]) * x[i + 1];
    }
    for (; i < n; i++) s0 += bf16_to_fp32(w[i]) * x[i];
    return s0 + s1;
}

/* the same as row . x for the table */
static float row_dot_f32(const void *row, const float *x, int64_t n) { return kernels_dot_f32_scalar(x, row, n); }
static float row_dot_f16(const void *row, const float *x, int64_t n) { return dot_f16(x, row, n); }
static float row_dot_bf16(const void *row, const float *x, int64_t n) { return dot_bf16(x, row, n); }

/* ---- Q8_0 ---------------------------------------------------------------- */

/* per block: d * sum_j q_j x_j */
static float dot_q8_0(const void *row, const float *x, int64_t n) {
    const block_q8_0 *b = row;
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / QK8_0; ib++) {
        const float *xb = x + ib * QK8_0;
        float s = 0.0f;
        for (int j = 0; j < QK8_0; j++) s += (float)b[ib].qs[j] * xb[j];
        sum += fp16_to_fp32(quant_rd16(b[ib].d)) * s;
    }
    return sum;
}

/* ---- Q4_0 ---------------------------------------------------------------- */

/* per block: d * sum_j (q_j - 8) x_j */
static float dot_q4_0(const void *row, const float *x, int64_t n) {
    const block_q4_0 *b = row;
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / QK4_0; ib++) {
        const float *xb = x + ib * QK4_0;
        float s = 0.0f;
        for (int j = 0; j < QK4_0 / 2; j++)
            s += (float)((b[ib].qs[j] & 0xF) - 8) * xb[j] + (float)((b[ib].qs[j] >> 4) - 8) * xb[j + 16];
        sum += fp16_to_fp32(quant_rd16(b[ib].d)) * s;
    }
    return sum;
}

/* ---- Q4_K / Q5_K ------------------------------------------------------------ */

/* One Q4_K / Q5_K super-block added to sum (q as in quant/dequant.c; qh
 * NULL for Q4_K), per sub-block: (d sc) * sum q x - (dmin m) * sum x */
static float dot_k4(float sum, const uint8_t dh[2], const uint8_t dminh[2], const uint8_t *scales, const uint8_t *ql,
                    const uint8_t *qh, const float *xb) {
    const float d = fp16_to_fp32(quant_rd16(dh)), dmin = fp16_to_fp32(quant_rd16(dminh));
    for (int c = 0; c < 4; c++) {
        uint8_t sc1, m1, sc2, m2;
        k4_scale_min(2 * c, scales, &sc1, &m1);
        k4_scale_min(2 * c + 1, scales, &sc2, &m2);
        float qx1 = 0, sx1 = 0, qx2 = 0, sx2 = 0;
        for (int l = 0; l < 32; l++) {
            const float x1 = xb[64 * c + l], x2 = xb[64 * c + 32 + l];
            const int h1 = qh ? (qh[l] >> (2 * c)) & 1 : 0, h2 = qh ? (qh[l] >> (2 * c + 1)) & 1 : 0;
            qx1 += (float)((ql[32 * c + l] & 0xF) | (h1 << 4)) * x1;
            qx2 += (float)((ql[32 * c + l] >> 4) | (h2 << 4)) * x2;
            sx1 += x1;
            sx2 += x2;
        }
        sum += (d * sc1) * qx1 - (dmin * m1) * sx1 + (d * sc2) * qx2 - (dmin * m2) * sx2;
    }
    return sum;
}

static float dot_q4_K(const void *row, const float *x, int64_t n) {
    const block_q4_K *b = row;
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / QK_K; ib++)
        sum = dot_k4(sum, b[ib].d, b[ib].dmin, b[ib].scales, b[ib].qs, NULL, x + ib * QK_K);
    return sum;
}

static float dot_q5_K(const void *row, const float *x, int64_t n) {
    const block_q5_K *b = row;
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / QK_K; ib++)
        sum = dot_k4(sum, b[ib].d, b[ib].dmin, b[ib].scales, b[ib].qs, b[ib].qh, x + ib * QK_K);
    return sum;
}

/* ---- Q6_K ---------------------------------------------------------------- */

/* per sub-block s of 16: (d sc_s) * sum (q - 32) x */
static float dot_q6_K(const void *row, const float *x, int64_t n) {
    const block_q6_K *b = row;
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / QK_K; ib++) {
        const float d = fp16_to_fp32(quant_rd16(b[ib].d));
        const float *xb = x + ib * QK_K;
        for (int h = 0; h < 2; h++)
            for (int k = 0; k < 4; k++)
                for (int half = 0; half < 2; half++) {
                    float s = 0.0f;
                    for (int l = 16 * half; l < 16 * half + 16; l++)
                        s += (float)q6_K_get(&b[ib], h, k, l) * xb[128 * h + 32 * k + l];
                    sum += (d * b[ib].scales[8 * h + 2 * k + half]) * s;
                }
    }
    return sum;
}

/* ---- vectors, decode attention, gathered rows -------------------------- */

static void axpy_f32(float *y, float w, const float *x, int n) {
    for (int i = 0; i < n; i++) y[i] += w * x[i];
}

static void axpy_f16(float *y, float w, const uint16_t *x, int n) {
    for (int i = 0; i < n; i++) y[i] += w * fp16_to_fp32(x[i]);
}

static void scores_f32(const float *q, int g, const float *keys, int n, int hd, float scale, float *s, int ld) {
    for (int i = 0; i < g; i++)
        for (int j = 0; j < n; j++)
            s[(size_t)i * ld + j] = scale * kernels_dot_f32_scalar(q + (size_t)i * hd, keys + (size_t)j * hd, hd);
}

static void scores_f16(const float *q, int g, const uint16_t *keys, int n, int hd, float scale, float *s, int ld) {
    for (int i = 0; i < g; i++)
        for (int j = 0; j < n; j++)
            s[(size_t)i * ld + j] = scale * dot_f16(q + (size_t)i * hd, keys + (size_t)j * hd, hd);
}

static void accum_f32(const float *p, int g, int ld, const float *vals, int n, int hd, float *out) {
    for (int i = 0; i < g; i++)
        for (int j = 0; j < n; j++) axpy_f32(out + (size_t)i * hd, p[(size_t)i * ld + j], vals + (size_t)j * hd, hd);
}

static void accum_f16(const float *p, int g, int ld, const uint16_t *vals, int n, int hd, float *out) {
    for (int i = 0; i < g; i++)
        for (int j = 0; j < n; j++) axpy_f16(out + (size_t)i * hd, p[(size_t)i * ld + j], vals + (size_t)j * hd, hd);
}

static float exp_shift_sum(float *x, int n, float mx) {
    float s = 0.0f;
    for (int j = 0; j < n; j++) s += x[j] = expf(x[j] - mx);
    return s;
}

static void gather_dot_f32(const float *q, const void *base, size_t stride, int d, const int32_t *idx, int n,
                           float *out) {
    for (int i = 0; i < n; i++) out[i] = kernels_dot_f32_scalar(q, (const float *)base + (size_t)idx[i] * stride, d);
}

static void gather_dot_f16(const float *q, const void *base, size_t stride, int d, const int32_t *idx, int n,
                           float *out) {
    for (int i = 0; i < n; i++) out[i] = dot_f16(q, (const uint16_t *)base + (size_t)idx[i] * stride, d);
}

static void gather_dot_i8(const int8_t *q, const void *codes, size_t row_bytes, int d, const int32_t *idx, int n,
                          int32_t *out) {
    for (int i = 0; i < n; i++) {
        const int8_t *r = (const int8_t *)((const char *)codes + (size_t)idx[i] * row_bytes);
        int32_t s = 0;
        for (int c = 0; c < d; c++) s += (int32_t)q[c] * r[c];
        out[i] = s;
    }
}

static void gather_dot_i4(const int8_t *q, const void *codes, size_t row_bytes, int d, const int32_t *idx, int n,
                          int32_t *out) {
    for (int i = 0; i < n; i++) {
        const uint8_t *r = (const uint8_t *)codes + (size_t)idx[i] * row_bytes;
        int32_t s = 0;
        for (int g = 0; g < d / 64; g++)
            for (int j = 0; j < 32; j++) {
                const int b = r[32 * g + j];
                s += (int32_t)q[64 * g + j] * ((b & 15) - 8) + (int32_t)q[64 * g + 32 + j] * ((b >> 4) - 8);
            }
        out[i] = s;
    }
}

const kernels kernels_scalar_set = {
    .name = "scalar",
    .dequant = quant_dequant_ref,
    .dot =
        {
            [GGML_TYPE_F32] = row_dot_f32,
            [GGML_TYPE_F16] = row_dot_f16,
            [GGML_TYPE_BF16] = row_dot_bf16,
            [GGML_TYPE_Q8_0] = dot_q8_0,
            [GGML_TYPE_Q4_0] = dot_q4_0,
            [GGML_TYPE_Q4_K] = dot_q4_K,
            [GGML_TYPE_Q5_K] = dot_q5_K,
            [GGML_TYPE_Q6_K] = dot_q6_K,
        },
    .dot_f32 = kernels_dot_f32_scalar,
    .dot_f16 = dot_f16,
    .dot_f16f16 = dot_f16f16,
    .axpy_f32 = axpy_f32,
    .axpy_f16 = axpy_f16,
    .scores_f32 = scores_f32,
    .scores_f16 = scores_f16,
    .accum_f32 = accum_f32,
    .accum_f16 = accum_f16,
    .exp_shift_sum = exp_shift_sum,
    .gather_dot_f32 = gather_dot_f32,
    .gather_dot_f16 = gather_dot_f16,
    .gather_dot_i8 = gather_dot_i8,
    .gather_dot_i4 = gather_dot_i4,
};
