#include "quant/quant.h"

#include <string.h>

/* The float with these IEEE single bits, and the bits of a float. */
static float f32_from_bits(uint32_t bits) {
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static uint32_t f32_bits(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    return x;
}

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
    return f32_from_bits(bits);
}

uint16_t fp32_to_fp16(float f) {
    uint32_t x = f32_bits(f);
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

float bf16_to_fp32(uint16_t h) { return f32_from_bits((uint32_t)h << 16); }

uint16_t fp32_to_bf16(float f) {
    uint32_t x = f32_bits(f);
    if ((x & 0x7FFFFFFF) > 0x7F800000) return (uint16_t)((x >> 16) | 0x40); /* quiet nan */
    x += 0x7FFF + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}
