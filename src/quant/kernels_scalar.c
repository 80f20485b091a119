/* Portable C kernels: row dequantisation (bit-exact to ggml's reference
 * dequantize_row_* in float32 arithmetic, no contraction) and fused dot
 * products. The AVX2 set must reproduce the dequantisers exactly, so every
 * expression here keeps ggml's order of float operations. */
#include <string.h>

#include "quant/kernels.h"

/* a * b - c must stay two roundings, as in ggml. GCC keeps contraction off in
 * ISO C mode (the project's -std=c11); clang needs telling. */
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

/* ---- f32 / f16 / bf16 ---------------------------------------------------- */

static void dequant_f32(const void *src, float *dst, int64_t n) { memcpy(dst, src, (size_t)n * sizeof(float)); }

static void dequant_f16(const void *src, float *dst, int64_t n) {
    const uint16_t *s = src;
    for (int64_t i = 0; i < n; i++) dst[i] = fp16_to_fp32(s[i]);
}

static void dequant_bf16(const void *src, float *dst, int64_t n) {
    const uint16_t *s = src;
    for (int64_t i = 0; i < n; i++) dst[i] = bf16_to_fp32(s[i]);
}

/* Four partial sums break the add dependency chain and halve rounding growth. */
static float dot_f32(const void *row, const float *x, int64_t n) {
    const float *w = row;
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += w[i] * x[i];
        s1 += w[i + 1] * x[i + 1];
        s2 += w[i + 2] * x[i + 2];
        s3 += w[i + 3] * x[i + 3];
    }
    for (; i < n; i++) s0 += w[i] * x[i];
    return (s0 + s1) + (s2 + s3);
}

static float dot_f16(const void *row, const float *x, int64_t n) {
    const uint16_t *w = row;
    float s0 = 0, s1 = 0;
    int64_t i = 0;
    for (; i + 2 <= n; i += 2) {
        s0 += fp16_to_fp32(w[i]) * x[i];
        s1 += fp16_to_fp32(w[i + 1]) * x[i + 1];
    }
    for (; i < n; i++) s0 += fp16_to_fp32(w[i]) * x[i];
    return s0 + s1;
}

static float dot_bf16(const void *row, const float *x, int64_t n) {
    const uint16_t *w = row;
    float s0 = 0, s1 = 0;
    int64_t i = 0;
    for (; i + 2 <= n; i += 2) {
        s0 += bf16_to_fp32(w[i]) * x[i];
        s1 += bf16_to_fp32(w[i + 1]) * x[i + 1];
    }
    for (; i < n; i++) s0 += bf16_to_fp32(w[i]) * x[i];
    return s0 + s1;
}

/* ---- Q8_0 ---------------------------------------------------------------- */

/* w[32b + j] = q[j] * d */
static void dequant_q8_0(const void *src, float *dst, int64_t n) {
    const block_q8_0 *b = src;
    for (int64_t ib = 0; ib < n / QK8_0; ib++) {
        const float d = fp16_to_fp32(quant_rd16(b[ib].d));
        for (int j = 0; j < QK8_0; j++) dst[ib * QK8_0 + j] = (float)b[ib].qs[j] * d;
    }
}

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

/* w[32b + j] = (lo_j - 8) * d, w[32b + 16 + j] = (hi_j - 8) * d */
static void dequant_q4_0(const void *src, float *dst, int64_t n) {
    const block_q4_0 *b = src;
    for (int64_t ib = 0; ib < n / QK4_0; ib++) {
        const float d = fp16_to_fp32(quant_rd16(b[ib].d));
        float *y = dst + ib * QK4_0;
        for (int j = 0; j < QK4_0 / 2; j++) {
            y[j] = (float)((b[ib].qs[j] & 0xF) - 8) * d;
            y[j + 16] = (float)((b[ib].qs[j] >> 4) - 8) * d;
        }
    }
}

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

/* Sub-block s of 32: w = (d * sc_s) * q - (dmin * m_s); the 64 weights of
 * chunk c are the low then the high nibbles of qs[32c .. 32c + 32). */
static void dequant_q4_K(const void *src, float *dst, int64_t n) {
    const block_q4_K *b = src;
    for (int64_t ib = 0; ib < n / QK_K; ib++) {
        const float d = fp16_to_fp32(quant_rd16(b[ib].d));
        const float dmin = fp16_to_fp32(quant_rd16(b[ib].dmin));
        const uint8_t *q = b[ib].qs;
        float *y = dst + ib * QK_K;
        for (int c = 0; c < 4; c++) {
            uint8_t sc, m;
            k4_scale_min(2 * c, b[ib].scales, &sc, &m);
            const float d1 = d * sc, m1 = dmin * m;
            k4_scale_min(2 * c + 1, b[ib].scales, &sc, &m);
            const float d2 = d * sc, m2 = dmin * m;
            for (int l = 0; l < 32; l++) y[64 * c + l] = d1 * (q[32 * c + l] & 0xF) - m1;
            for (int l = 0; l < 32; l++) y[64 * c + 32 + l] = d2 * (q[32 * c + l] >> 4) - m2;
        }
    }
}

/* per sub-block: (d sc) * sum q x - (dmin m) * sum x */
static float dot_q4_K(const void *row, const float *x, int64_t n) {
    const block_q4_K *b = row;
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / QK_K; ib++) {
        const float d = fp16_to_fp32(quant_rd16(b[ib].d));
        const float dmin = fp16_to_fp32(quant_rd16(b[ib].dmin));
        const uint8_t *q = b[ib].qs;
        const float *xb = x + ib * QK_K;
        for (int c = 0; c < 4; c++) {
            uint8_t sc1, m1, sc2, m2;
            k4_scale_min(2 * c, b[ib].scales, &sc1, &m1);
            k4_scale_min(2 * c + 1, b[ib].scales, &sc2, &m2);
            float qx1 = 0, sx1 = 0, qx2 = 0, sx2 = 0;
            for (int l = 0; l < 32; l++) {
                const float x1 = xb[64 * c + l], x2 = xb[64 * c + 32 + l];
                qx1 += (float)(q[32 * c + l] & 0xF) * x1;
                qx2 += (float)(q[32 * c + l] >> 4) * x2;
                sx1 += x1;
                sx2 += x2;
            }
            sum += (d * sc1) * qx1 - (dmin * m1) * sx1 + (d * sc2) * qx2 - (dmin * m2) * sx2;
        }
    }
    return sum;
}

/* As Q4_K with q += 16 where the chunk's bit of qh[l] is set (bits 2c, 2c+1). */
static void dequant_q5_K(const void *src, float *dst, int64_t n) {
    const block_q5_K *b = src;
    for (int64_t ib = 0; ib < n / QK_K; ib++) {
        const float d = fp16_to_fp32(quant_rd16(b[ib].d));
        const float dmin = fp16_to_fp32(quant_rd16(b[ib].dmin));
        const uint8_t *ql = b[ib].qs, *qh = b[ib].qh;
        float *y = dst + ib * QK_K;
        for (int c = 0; c < 4; c++) {
            uint8_t sc, m;
            k4_scale_min(2 * c, b[ib].scales, &sc, &m);
            const float d1 = d * sc, m1 = dmin * m;
            k4_scale_min(2 * c + 1, b[ib].scales, &sc, &m);
            const float d2 = d * sc, m2 = dmin * m;
            const uint8_t u1 = (uint8_t)(1u << (2 * c)), u2 = (uint8_t)(2u << (2 * c));
            for (int l = 0; l < 32; l++) y[64 * c + l] = d1 * ((ql[32 * c + l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++) y[64 * c + 32 + l] = d2 * ((ql[32 * c + l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
        }
    }
}

static float dot_q5_K(const void *row, const float *x, int64_t n) {
    const block_q5_K *b = row;
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / QK_K; ib++) {
        const float d = fp16_to_fp32(quant_rd16(b[ib].d));
        const float dmin = fp16_to_fp32(quant_rd16(b[ib].dmin));
        const uint8_t *ql = b[ib].qs, *qh = b[ib].qh;
        const float *xb = x + ib * QK_K;
        for (int c = 0; c < 4; c++) {
            uint8_t sc1, m1, sc2, m2;
            k4_scale_min(2 * c, b[ib].scales, &sc1, &m1);
            k4_scale_min(2 * c + 1, b[ib].scales, &sc2, &m2);
            const int s1 = 2 * c, s2 = 2 * c + 1;
            float qx1 = 0, sx1 = 0, qx2 = 0, sx2 = 0;
            for (int l = 0; l < 32; l++) {
                const float x1 = xb[64 * c + l], x2 = xb[64 * c + 32 + l];
                qx1 += (float)((ql[32 * c + l] & 0xF) | (((qh[l] >> s1) & 1) << 4)) * x1;
                qx2 += (float)((ql[32 * c + l] >> 4) | (((qh[l] >> s2) & 1) << 4)) * x2;
                sx1 += x1;
                sx2 += x2;
            }
            sum += (d * sc1) * qx1 - (dmin * m1) * sx1 + (d * sc2) * qx2 - (dmin * m2) * sx2;
        }
    }
    return sum;
}

/* ---- Q6_K ---------------------------------------------------------------- */

/* Half h, l < 32, k < 4: element 128h + 32k + l has
 * q = (nibble k>>1 of ql[64h + 32(k&1) + l]) | ((qh[32h + l] >> 2k) & 3) << 4,
 * w = (d * sc[8h + 2k + l/16]) * (q - 32). */
static inline int q6_get(const block_q6_K *b, int h, int k, int l) {
    const int lo = (b->ql[64 * h + 32 * (k & 1) + l] >> (4 * (k >> 1))) & 0xF;
    const int hi = (b->qh[32 * h + l] >> (2 * k)) & 3;
    return (lo | (hi << 4)) - 32;
}

static void dequant_q6_K(const void *src, float *dst, int64_t n) {
    const block_q6_K *b = src;
    for (int64_t ib = 0; ib < n / QK_K; ib++) {
        const float d = fp16_to_fp32(quant_rd16(b[ib].d));
        float *y = dst + ib * QK_K;
        for (int h = 0; h < 2; h++)
            for (int k = 0; k < 4; k++)
                for (int l = 0; l < 32; l++)
                    y[128 * h + 32 * k + l] = d * b[ib].scales[8 * h + 2 * k + l / 16] * (float)q6_get(&b[ib], h, k, l);
    }
}

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
                        s += (float)q6_get(&b[ib], h, k, l) * xb[128 * h + 32 * k + l];
                    sum += (d * b[ib].scales[8 * h + 2 * k + half]) * s;
                }
    }
    return sum;
}

const quant_kernels quant_kernels_scalar_table = {
    .name = "scalar",
    .dequant =
        {
            [GGML_TYPE_F32] = dequant_f32,
            [GGML_TYPE_F16] = dequant_f16,
            [GGML_TYPE_BF16] = dequant_bf16,
            [GGML_TYPE_Q8_0] = dequant_q8_0,
            [GGML_TYPE_Q4_0] = dequant_q4_0,
            [GGML_TYPE_Q4_K] = dequant_q4_K,
            [GGML_TYPE_Q5_K] = dequant_q5_K,
            [GGML_TYPE_Q6_K] = dequant_q6_K,
        },
    .dot =
        {
            [GGML_TYPE_F32] = dot_f32,
            [GGML_TYPE_F16] = dot_f16,
            [GGML_TYPE_BF16] = dot_bf16,
            [GGML_TYPE_Q8_0] = dot_q8_0,
            [GGML_TYPE_Q4_0] = dot_q4_0,
            [GGML_TYPE_Q4_K] = dot_q4_K,
            [GGML_TYPE_Q5_K] = dot_q5_K,
            [GGML_TYPE_Q6_K] = dot_q6_K,
        },
};
