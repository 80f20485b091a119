#include "quant/quant.h"

#include <math.h>
#include <string.h>

/* IEEE half: 1 sign, 5 exponent (bias 15), 10 mantissa bits. */
float fp16_to_fp32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1F;
    uint32_t man = h & 0x3FF;
    uint32_t bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: renormalise */
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while ((man & 0x400) == 0);
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3FF) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7F800000u | (man << 13); /* inf / nan */
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t fp32_to_fp16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t absx = x & 0x7FFFFFFF;
    if (absx > 0x7F800000) return (uint16_t)(sign | 0x7E00);      /* nan */
    if (absx >= 0x477FF000) return (uint16_t)(sign | 0x7C00);     /* overflow -> inf */
    if (absx < 0x38800000) {                                      /* subnormal or zero */
        if (absx < 0x33000000) return (uint16_t)sign;             /* < half the smallest subnormal */
        uint32_t e = absx >> 23;
        uint32_t man = (absx & 0x7FFFFF) | 0x800000;
        uint32_t shift = 126 - e; /* value * 2^24 = man * 2^(e - 126) */
        uint32_t half = man >> shift;
        /* round to nearest even on the bits shifted out */
        uint32_t rem = man & ((1u << shift) - 1);
        uint32_t mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    /* normal: rebias exponent, round mantissa from 23 to 10 bits (nearest even) */
    uint32_t h = ((absx >> 13) - ((127 - 15) << 10));
    uint32_t rem = absx & 0x1FFF;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
    return (uint16_t)(sign | h);
}

float bf16_to_fp32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t fp32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7FFFFFFF) > 0x7F800000) return (uint16_t)((x >> 16) | 0x40); /* quiet nan */
    x += 0x7FFF + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

void dequant_row(uint32_t type, const void *src, float *dst, int64_t n) {
    switch (type) {
    case GGML_TYPE_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        break;
    case GGML_TYPE_F16: {
        const uint16_t *s = src;
        for (int64_t i = 0; i < n; i++) dst[i] = fp16_to_fp32(s[i]);
        break;
    }
    case GGML_TYPE_BF16: {
        const uint16_t *s = src;
        for (int64_t i = 0; i < n; i++) dst[i] = bf16_to_fp32(s[i]);
        break;
    }
    case GGML_TYPE_Q8_0: {
        const block_q8_0 *b = src;
        for (int64_t ib = 0; ib < n / QK8_0; ib++) {
            float d = fp16_to_fp32(b[ib].d);
            for (int j = 0; j < QK8_0; j++) dst[ib * QK8_0 + j] = d * (float)b[ib].qs[j];
        }
        break;
    }
    default:
        memset(dst, 0, (size_t)n * sizeof(float)); /* unreachable: refused at load */
    }
}

float dot_row(uint32_t type, const void *row, const float *x, int64_t n) {
    float sum = 0.0f;
    switch (type) {
    case GGML_TYPE_F32: {
        const float *w = row;
        for (int64_t i = 0; i < n; i++) sum += w[i] * x[i];
        break;
    }
    case GGML_TYPE_F16: {
        const uint16_t *w = row;
        for (int64_t i = 0; i < n; i++) sum += fp16_to_fp32(w[i]) * x[i];
        break;
    }
    case GGML_TYPE_BF16: {
        const uint16_t *w = row;
        for (int64_t i = 0; i < n; i++) sum += bf16_to_fp32(w[i]) * x[i];
        break;
    }
    case GGML_TYPE_Q8_0: {
        /* per block: d * sum_j q_j x_j */
        const block_q8_0 *b = row;
        for (int64_t ib = 0; ib < n / QK8_0; ib++) {
            const float *xb = x + ib * QK8_0;
            float s = 0.0f;
            for (int j = 0; j < QK8_0; j++) s += (float)b[ib].qs[j] * xb[j];
            sum += fp16_to_fp32(b[ib].d) * s;
        }
        break;
    }
    default:
        break;
    }
    return sum;
}

size_t quantize_row(uint32_t type, const float *src, void *dst, int64_t n) {
    switch (type) {
    case GGML_TYPE_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        return (size_t)n * 4;
    case GGML_TYPE_F16: {
        uint16_t *d = dst;
        for (int64_t i = 0; i < n; i++) d[i] = fp32_to_fp16(src[i]);
        return (size_t)n * 2;
    }
    case GGML_TYPE_BF16: {
        uint16_t *d = dst;
        for (int64_t i = 0; i < n; i++) d[i] = fp32_to_bf16(src[i]);
        return (size_t)n * 2;
    }
    case GGML_TYPE_Q8_0: {
        /* d = max|x| / 127, q = round(x / d), as ggml's quantize_row_q8_0_ref */
        if (n % QK8_0) return 0;
        block_q8_0 *b = dst;
        for (int64_t ib = 0; ib < n / QK8_0; ib++) {
            const float *xb = src + ib * QK8_0;
            float amax = 0.0f;
            for (int j = 0; j < QK8_0; j++) amax = fmaxf(amax, fabsf(xb[j]));
            float d = amax / 127.0f;
            float id = d != 0.0f ? 1.0f / d : 0.0f;
            b[ib].d = fp32_to_fp16(d);
            for (int j = 0; j < QK8_0; j++) b[ib].qs[j] = (int8_t)roundf(xb[j] * id);
        }
        return (size_t)(n / QK8_0) * sizeof(block_q8_0);
    }
    default:
        return 0;
    }
}
