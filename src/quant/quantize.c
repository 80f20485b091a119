/* f32 -> stored formats. Q8_0 and Q4_0 follow ggml's reference quantizers;
 * the K-quants use plain round-to-nearest per sub-block (ggml searches for
 * better scales; any valid block dequantises the same way, which is all that
 * `subq synth` needs). */
#include <math.h>
#include <string.h>

#include "quant/quant.h"

/* round(v) clamped to [lo, hi]; NaN goes to lo (casting NaN to int is UB). */
static int round_clamp(float v, int lo, int hi) {
    if (!(v >= (float)lo)) return lo;
    if (v >= (float)hi) return hi;
    return (int)roundf(v);
}

/* d = max|x| / 127, q = round(x / d), as ggml's quantize_row_q8_0_ref */
static void quantize_q8_0(const float *src, block_q8_0 *b, int64_t nb) {
    for (int64_t ib = 0; ib < nb; ib++) {
        const float *xb = src + ib * QK8_0;
        float amax = 0.0f;
        for (int j = 0; j < QK8_0; j++) amax = fmaxf(amax, fabsf(xb[j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        quant_wr16(b[ib].d, fp32_to_fp16(d));
        for (int j = 0; j < QK8_0; j++) b[ib].qs[j] = (int8_t)round_clamp(xb[j] * id, -127, 127);
    }
}

/* The element of largest magnitude m maps to q = 0: d = m / -8,
 * q = clamp(floor(x / d + 8.5), 0, 15), as ggml's quantize_row_q4_0_ref. */
static void quantize_q4_0(const float *src, block_q4_0 *b, int64_t nb) {
    for (int64_t ib = 0; ib < nb; ib++) {
        const float *xb = src + ib * QK4_0;
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK4_0; j++)
            if (fabsf(xb[j]) > amax) {
                amax = fabsf(xb[j]);
                max = xb[j];
            }
        const float d = max / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        quant_wr16(b[ib].d, fp32_to_fp16(d));
        for (int j = 0; j < QK4_0 / 2; j++) {
            const int q0 = round_clamp(floorf(xb[j] * id + 8.5f), 0, 15);
            const int q1 = round_clamp(floorf(xb[j + 16] * id + 8.5f), 0, 15);
            b[ib].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

/* Scales and mins of the 8 sub-blocks of 32 in a Q4_K/Q5_K super-block, for
 * q in 0..qmax: sub-block s spans [-min_s, -min_s + qmax * scale_s] with
 * min_s = -min(0, min x) and scale_s = (max x + min_s) / qmax. The 8 scales
 * and 8 mins are themselves quantised to 6 bits against fp16 d = max scale / 63
 * and dmin = max min / 63. Writes d, dmin, the packed scales, and the
 * levels L[i] = round((x + dmin m) / (d sc)) in 0..qmax, rounded with the
 * effective per-sub-block d * sc and dmin * m. */
static void k_scales(const float *x, int qmax, uint8_t d_out[2], uint8_t dmin_out[2], uint8_t scales[K_SCALE_SIZE],
                     uint8_t L[QK_K]) {
    float scale[8], min[8], max_scale = 0.0f, max_min = 0.0f, eff_d[8], eff_m[8];
    for (int s = 0; s < 8; s++) {
        float lo = 0.0f, hi = -INFINITY;
        for (int l = 0; l < 32; l++) {
            lo = fminf(lo, x[32 * s + l]);
            hi = fmaxf(hi, x[32 * s + l]);
        }
        min[s] = -lo;
        scale[s] = fmaxf(hi - lo, 0.0f) / (float)qmax;
        max_scale = fmaxf(max_scale, scale[s]);
        max_min = fmaxf(max_min, min[s]);
    }
    const uint16_t dh = fp32_to_fp16(max_scale / 63.0f), mh = fp32_to_fp16(max_min / 63.0f);
    const float d = fp16_to_fp32(dh), dmin = fp16_to_fp32(mh);
    quant_wr16(d_out, dh);
    quant_wr16(dmin_out, mh);
    uint8_t sc[8], m[8];
    for (int s = 0; s < 8; s++) {
        sc[s] = (uint8_t)(d > 0.0f ? round_clamp(scale[s] / d, 0, 63) : 0);
        m[s] = (uint8_t)(dmin > 0.0f ? round_clamp(min[s] / dmin, 0, 63) : 0);
        eff_d[s] = d * sc[s];
        eff_m[s] = dmin * m[s];
    }
    /* inverse of k4_scale_min: 0..3 in the low 6 bits of bytes 0..7, 4..7 split
     * into nibbles in bytes 8..11 plus the top bits of bytes 0..7 */
    memset(scales, 0, K_SCALE_SIZE);
    for (int s = 0; s < 4; s++) {
        scales[s] = sc[s];
        scales[s + 4] = m[s];
    }
    for (int s = 4; s < 8; s++) {
        scales[s + 4] = (uint8_t)((sc[s] & 0xF) | ((m[s] & 0xF) << 4));
        scales[s - 4] |= (uint8_t)((sc[s] >> 4) << 6);
        scales[s] |= (uint8_t)((m[s] >> 4) << 6);
    }
    for (int i = 0; i < QK_K; i++) {
        const int s = i / 32;
        L[i] = (uint8_t)(eff_d[s] > 0.0f ? round_clamp((x[i] + eff_m[s]) / eff_d[s], 0, qmax) : 0);
    }
}

/* q = round((x + dmin m) / (d sc)) in 0..15 */
static void quantize_q4_K(const float *src, block_q4_K *b, int64_t nb) {
    for (int64_t ib = 0; ib < nb; ib++) {
        const float *x = src + ib * QK_K;
        uint8_t L[QK_K];
        k_scales(x, 15, b[ib].d, b[ib].dmin, b[ib].scales, L);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) b[ib].qs[32 * c + l] = (uint8_t)(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
    }
}

/* q in 0..31: low nibbles as Q4_K, bit 4 of element 64c + l (+32) in bit 2c (2c+1) of qh[l] */
static void quantize_q5_K(const float *src, block_q5_K *b, int64_t nb) {
    for (int64_t ib = 0; ib < nb; ib++) {
        const float *x = src + ib * QK_K;
        uint8_t L[QK_K];
        k_scales(x, 31, b[ib].d, b[ib].dmin, b[ib].scales, L);
        memset(b[ib].qh, 0, sizeof b[ib].qh);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) {
                const int q1 = L[64 * c + l], q2 = L[64 * c + 32 + l];
                b[ib].qs[32 * c + l] = (uint8_t)((q1 & 0xF) | ((q2 & 0xF) << 4));
                b[ib].qh[l] |= (uint8_t)(((q1 >> 4) << (2 * c)) | ((q2 >> 4) << (2 * c + 1)));
            }
    }
}

/* 16 sub-blocks of 16: scale_s = m_s / -32 for the element m_s of largest
 * magnitude (it lands on q - 32 = -32); the scales are int8 against fp16
 * d = (scale of largest magnitude) / -128. q = round(x / (d sc)) + 32 in 0..63. */
static void quantize_q6_K(const float *src, block_q6_K *b, int64_t nb) {
    for (int64_t ib = 0; ib < nb; ib++) {
        const float *x = src + ib * QK_K;
        float scale[16], amax_s = 0.0f, max_s = 0.0f;
        for (int s = 0; s < 16; s++) {
            float amax = 0.0f, max = 0.0f;
            for (int l = 0; l < 16; l++)
                if (fabsf(x[16 * s + l]) > amax) {
                    amax = fabsf(x[16 * s + l]);
                    max = x[16 * s + l];
                }
            scale[s] = max / -32.0f;
            if (fabsf(scale[s]) > amax_s) {
                amax_s = fabsf(scale[s]);
                max_s = scale[s];
            }
        }
        const uint16_t dh = fp32_to_fp16(max_s / -128.0f);
        const float d = fp16_to_fp32(dh);
        quant_wr16(b[ib].d, dh);
        uint8_t L[QK_K];
        for (int s = 0; s < 16; s++) {
            const int sc = d != 0.0f ? round_clamp(scale[s] / d, -128, 127) : 0;
            const float de = d * sc;
            b[ib].scales[s] = (int8_t)sc;
            for (int l = 0; l < 16; l++)
                L[16 * s + l] = (uint8_t)(de != 0.0f ? round_clamp(x[16 * s + l] / de, -32, 31) + 32 : 32);
        }
        /* element 128h + 32k + l: nibble k>>1 of ql[64h + 32(k&1) + l], bits 2k..2k+1 of qh[32h + l] */
        for (int h = 0; h < 2; h++)
            for (int l = 0; l < 32; l++) {
                const int q1 = L[128 * h + l], q2 = L[128 * h + 32 + l];
                const int q3 = L[128 * h + 64 + l], q4 = L[128 * h + 96 + l];
                b[ib].ql[64 * h + l] = (uint8_t)((q1 & 0xF) | ((q3 & 0xF) << 4));
                b[ib].ql[64 * h + 32 + l] = (uint8_t)((q2 & 0xF) | ((q4 & 0xF) << 4));
                b[ib].qh[32 * h + l] = (uint8_t)((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
            }
    }
}

size_t quantize_row(uint32_t type, const float *src, void *dst, int64_t n) {
    const ggml_type_traits *t = ggml_type_get(type);
    if (!t || n < 0 || n % t->block_size) return 0;
    const int64_t nb = n / t->block_size;
    switch (type) {
    case GGML_TYPE_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        break;
    case GGML_TYPE_F16: {
        uint16_t *d = dst;
        for (int64_t i = 0; i < n; i++) d[i] = fp32_to_fp16(src[i]);
        break;
    }
    case GGML_TYPE_BF16: {
        uint16_t *d = dst;
        for (int64_t i = 0; i < n; i++) d[i] = fp32_to_bf16(src[i]);
        break;
    }
    case GGML_TYPE_Q8_0: quantize_q8_0(src, dst, nb); break;
    case GGML_TYPE_Q4_0: quantize_q4_0(src, dst, nb); break;
    case GGML_TYPE_Q4_K: quantize_q4_K(src, dst, nb); break;
    case GGML_TYPE_Q5_K: quantize_q5_K(src, dst, nb); break;
    case GGML_TYPE_Q6_K: quantize_q6_K(src, dst, nb); break;
    default: return 0;
    }
    return (size_t)nb * (size_t)t->type_size;
}
