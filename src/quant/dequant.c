/* The portable row dequantisers: ggml's reference dequantize_row_*, bit for
 * bit in float32 arithmetic. The SIMD sets in src/kernels must reproduce
 * them exactly, so every expression keeps ggml's order of float operations. */
#include <string.h>

#include "quant/quant.h"

/* a * b - c must stay two roundings, as in ggml. GCC keeps contraction off in
 * ISO C mode (the project's -std=c11); clang needs telling. */
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

static void dequant_f32(const void *src, float *dst, int64_t n) { memcpy(dst, src, (size_t)n * sizeof(float)); }

static void dequant_f16(const void *src, float *dst, int64_t n) {
    const uint16_t *s = src;
    for (int64_t i = 0; i < n; i++) dst[i] = fp16_to_fp32(s[i]);
}

static void dequant_bf16(const void *src, float *dst, int64_t n) {
    const uint16_t *s = src;
    for (int64_t i = 0; i < n; i++) dst[i] = bf16_to_fp32(s[i]);
}

/* w[32b + j] = q[j] * d */
static void dequant_q8_0(const void *src, float *dst, int64_t n) {
    const block_q8_0 *b = src;
    for (int64_t ib = 0; ib < n / QK8_0; ib++) {
        const float d = fp16_to_fp32(quant_rd16(b[ib].d));
        for (int j = 0; j < QK8_0; j++) dst[ib * QK8_0 + j] = (float)b[ib].qs[j] * d;
    }
}

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

/* One Q4_K / Q5_K super-block. Sub-block s of 32: w = (d * sc_s) * q -
 * (dmin * m_s); the 64 weights of chunk c are the low then the high nibbles
 * of ql[32c .. 32c + 32), plus 16 where the chunk's bit (2c, 2c+1) of qh[l]
 * is set (Q5_K; qh is NULL for Q4_K). */
static void dequant_k4(const uint8_t dh[2], const uint8_t dminh[2], const uint8_t *scales, const uint8_t *ql,
                       const uint8_t *qh, float *y) {
    const float d = fp16_to_fp32(quant_rd16(dh)), dmin = fp16_to_fp32(quant_rd16(dminh));
    for (int c = 0; c < 4; c++) {
        uint8_t sc, m;
        k4_scale_min(2 * c, scales, &sc, &m);
        const float d1 = d * sc, m1 = dmin * m;
        k4_scale_min(2 * c + 1, scales, &sc, &m);
        const float d2 = d * sc, m2 = dmin * m;
        const uint8_t u1 = (uint8_t)(1u << (2 * c)), u2 = (uint8_t)(2u << (2 * c));
        for (int l = 0; l < 32; l++) {
            y[64 * c + l] = d1 * ((ql[32 * c + l] & 0xF) + (qh && qh[l] & u1 ? 16 : 0)) - m1;
            y[64 * c + 32 + l] = d2 * ((ql[32 * c + l] >> 4) + (qh && qh[l] & u2 ? 16 : 0)) - m2;
        }
    }
}

static void dequant_q4_K(const void *src, float *dst, int64_t n) {
    const block_q4_K *b = src;
    for (int64_t ib = 0; ib < n / QK_K; ib++)
        dequant_k4(b[ib].d, b[ib].dmin, b[ib].scales, b[ib].qs, NULL, dst + ib * QK_K);
}

static void dequant_q5_K(const void *src, float *dst, int64_t n) {
    const block_q5_K *b = src;
    for (int64_t ib = 0; ib < n / QK_K; ib++)
        dequant_k4(b[ib].d, b[ib].dmin, b[ib].scales, b[ib].qs, b[ib].qh, dst + ib * QK_K);
}

/* w = (d * sc[8h + 2k + l/16]) * (q - 32) */
static void dequant_q6_K(const void *src, float *dst, int64_t n) {
    const block_q6_K *b = src;
    for (int64_t ib = 0; ib < n / QK_K; ib++) {
        const float d = fp16_to_fp32(quant_rd16(b[ib].d));
        float *y = dst + ib * QK_K;
        for (int h = 0; h < 2; h++)
            for (int k = 0; k < 4; k++)
                for (int l = 0; l < 32; l++)
                    y[128 * h + 32 * k + l] =
                        d * b[ib].scales[8 * h + 2 * k + l / 16] * (float)q6_K_get(&b[ib], h, k, l);
    }
}

const quant_dequant_fn quant_dequant_ref[GGML_TYPE_COUNT] = {
    [GGML_TYPE_F32] = dequant_f32,   [GGML_TYPE_F16] = dequant_f16,   [GGML_TYPE_BF16] = dequant_bf16,
    [GGML_TYPE_Q8_0] = dequant_q8_0, [GGML_TYPE_Q4_0] = dequant_q4_0, [GGML_TYPE_Q4_K] = dequant_q4_K,
    [GGML_TYPE_Q5_K] = dequant_q5_K, [GGML_TYPE_Q6_K] = dequant_q6_K,
};
