#include "quant/quant.h"

#include <math.h>
#include <string.h>

#include "base/cpu.h"
#include "quant/kernels.h"

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

/* ---- dispatch ------------------------------------------------------------ */

const quant_kernels *quant_kernels_scalar(void) { return &quant_kernels_scalar_table; }

const quant_kernels *quant_kernels_avx2(void) {
#ifdef QUANT_HAVE_AVX2
    if (cpu_has_avx2()) return &quant_kernels_avx2_table;
#endif
    return NULL;
}

/* An AVX-512 set would be tried first here. */
const quant_kernels *quant_kernels_get(void) {
    const quant_kernels *k = quant_kernels_avx2();
    return k ? k : &quant_kernels_scalar_table;
}

void dequant_row(uint32_t type, const void *src, float *dst, int64_t n) {
    quant_dequant_fn f = type < GGML_TYPE_COUNT ? quant_kernels_get()->dequant[type] : NULL;
    if (f) f(src, dst, n);
    else memset(dst, 0, (size_t)n * sizeof(float)); /* unreachable: refused at load */
}

float dot_row(uint32_t type, const void *row, const float *x, int64_t n) {
    quant_dot_fn f = type < GGML_TYPE_COUNT ? quant_kernels_get()->dot[type] : NULL;
    return f ? f(row, x, n) : 0.0f;
}

void quant_xsums(const float *x, int64_t n, float *xs) {
    for (int64_t j = 0; j < n / 32; j++) {
        float s = 0.0f;
        for (int l = 0; l < 32; l++) s += x[32 * j + l];
        xs[j] = s;
    }
}

/* Row by row. (4-row kernels sharing the x loads measured slower on weights
 * streamed from DRAM: four short streams per row group defeat the hardware
 * prefetcher that one long sequential stream keeps busy.) */
void dot_rows(uint32_t type, const void *rows, size_t row_bytes, int64_t n_rows, const float *x, int64_t n,
              float *out) {
    enum { XS_MAX = 1024 }; /* sub-block sums on the stack: n <= 32768 */
    const quant_kernels *k = quant_kernels_get();
    const char *r = rows;
    if (type >= GGML_TYPE_COUNT || !k->dot[type]) {
        memset(out, 0, (size_t)n_rows * sizeof(float)); /* unreachable: refused at load */
        return;
    }
    quant_dot_xs_fn fx = k->dot_xs[type];
    if (fx && n / 32 <= XS_MAX && n_rows > 1) {
        float xs[XS_MAX];
        quant_xsums(x, n, xs);
        for (int64_t i = 0; i < n_rows; i++) out[i] = fx(r + (size_t)i * row_bytes, x, xs, n);
        return;
    }
    quant_dot_fn f = k->dot[type];
    for (int64_t i = 0; i < n_rows; i++) out[i] = f(r + (size_t)i * row_bytes, x, n);
}
