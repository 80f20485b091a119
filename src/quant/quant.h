/* Element formats: the stored weight types' block layouts, conversion
 * between f32 and fp16 / bf16, and rows in both directions (the portable
 * dequantisers, which define what a block means, and the quantisers).
 *
 * Block layouts are ggml's (ggml-common.h), bit for bit. Every block field is
 * declared as bytes so a block may sit at any address (GGUF's alignment can
 * be 1); multi-byte fields are little-endian, as in the file. */
#ifndef SUBQ_QUANT_H
#define SUBQ_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "quant/types.h"

#define QK8_0 32
#define QK4_0 32
#define QK_K 256
#define K_SCALE_SIZE 12

/* Q8_0: 32 weights = fp16 scale d + 32 signed bytes q; w = d * q. */
typedef struct block_q8_0 {
    uint8_t d[2];
    int8_t qs[QK8_0];
} block_q8_0;

/* Q4_0: 32 weights = fp16 d + 16 bytes of nibbles; w = d * (q - 8).
 * Byte j holds element j in its low nibble and element j + 16 in its high one. */
typedef struct block_q4_0 {
    uint8_t d[2];
    uint8_t qs[QK4_0 / 2];
} block_q4_0;

/* Q4_K: 256 weights in 8 sub-blocks of 32. Sub-block s has a 6-bit scale sc_s
 * and 6-bit min m_s packed in `scales` (see k4_scale_min); w = d*sc_s*q - dmin*m_s
 * with q in 0..15. qs byte 32c + l holds element 64c + l (low nibble) and
 * element 64c + 32 + l (high nibble). */
typedef struct block_q4_K {
    uint8_t d[2];
    uint8_t dmin[2];
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qs[QK_K / 2];
} block_q4_K;

/* Q5_K: Q4_K plus a fifth bit per weight: element 64c + l takes bit 2c of
 * qh[l], element 64c + 32 + l bit 2c + 1; q in 0..31. */
typedef struct block_q5_K {
    uint8_t d[2];
    uint8_t dmin[2];
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qh[QK_K / 8];
    uint8_t qs[QK_K / 2];
} block_q5_K;

/* Q6_K: 256 weights in 16 sub-blocks of 16 with int8 scales; w = d*sc_s*(q - 32),
 * q in 0..63 split as 4 low bits in ql and 2 high bits in qh. Within each half
 * h (128 weights) and l < 32: element 128h + 32k + l has low bits in
 * ql[64h + l + 32(k&1)] (nibble k>>1) and high bits (qh[32h + l] >> 2k) & 3. */
typedef struct block_q6_K {
    uint8_t ql[QK_K / 2];
    uint8_t qh[QK_K / 4];
    int8_t scales[QK_K / 16];
    uint8_t d[2];
} block_q6_K;

_Static_assert(sizeof(block_q8_0) == 34, "q8_0 block size");
_Static_assert(sizeof(block_q4_0) == 18, "q4_0 block size");
_Static_assert(sizeof(block_q4_K) == 144, "q4_K block size");
_Static_assert(sizeof(block_q5_K) == 176, "q5_K block size");
_Static_assert(sizeof(block_q6_K) == 210, "q6_K block size");

float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);   /* round to nearest even */
float bf16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float f);   /* round to nearest even; NaN stays NaN */

/* Little-endian 16-bit field of a block. */
static inline uint16_t quant_rd16(const uint8_t p[2]) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline void quant_wr16(uint8_t p[2], uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

/* Sub-block j (0..7) scale and min of a Q4_K/Q5_K block, 6 bits each: j < 4
 * sit in the low 6 bits of bytes j and j+4; j >= 4 take 4 low bits from byte
 * j+4 and their top 2 bits from the spare high bits of bytes j-4 and j. */
static inline void k4_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* Q6_K value of half h, group k (< 4), lane l (< 32) of a block: element
 * 128h + 32k + l, as q - 32 (see block_q6_K). */
static inline int q6_K_get(const block_q6_K *b, int h, int k, int l) {
    const int lo = (b->ql[64 * h + 32 * (k & 1) + l] >> (4 * (k >> 1))) & 0xF;
    const int hi = (b->qh[32 * h + l] >> (2 * k)) & 3;
    return (lo | (hi << 4)) - 32;
}

/* dst[0..n) = the f32 values of a stored row of n elements (n a multiple of
 * the block size). */
typedef void (*quant_dequant_fn)(const void *src, float *dst, int64_t n);

/* The portable dequantisers, per type id (NULL where the type cannot be
 * dequantised): ggml's reference dequantize_row_* bit for bit (float32
 * arithmetic, no contraction). The SIMD kernels (src/kernels) must give the
 * same bits; dequant_row() there picks the fastest. */
extern const quant_dequant_fn quant_dequant_ref[GGML_TYPE_COUNT];

/* Quantise n floats into dst in `type` (F32, F16, BF16, Q8_0, Q4_0, Q4_K,
 * Q5_K, Q6_K; n a multiple of the block size); returns the byte count
 * written, or 0 for a type (or length) that cannot be produced. */
size_t quantize_row(uint32_t type, const float *src, void *dst, int64_t n);

#endif
