/* Element formats: conversion between f32 and the stored weight types,
 * row dequantisation and fused row dot products (weight row . f32 vector).
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

/* ---- kernels ---------------------------------------------------------------
 * A kernel set holds, per type id, the row dequantiser and the fused dot
 * product (NULL where the type is not supported). There is one const table per
 * instruction set; quant_kernels_get() picks the best one the CPU runs, so
 * callers that do many rows can look it up once. Dequantisers of every set
 * give identical bits; dot products agree up to float rounding. */
typedef void (*quant_dequant_fn)(const void *src, float *dst, int64_t n);
typedef float (*quant_dot_fn)(const void *row, const float *x, int64_t n);
/* dot with xs[j] = sum of x[32j .. 32j + 32) precomputed (quant_xsums),
 * for formats whose sub-block offsets make sum(x) a per-row cost otherwise */
typedef float (*quant_dot_xs_fn)(const void *row, const float *x, const float *xs, int64_t n);

typedef struct quant_kernels {
    const char *name; /* "scalar", "avx2" */
    quant_dequant_fn dequant[GGML_TYPE_COUNT];
    quant_dot_fn dot[GGML_TYPE_COUNT];
    quant_dot_xs_fn dot_xs[GGML_TYPE_COUNT]; /* NULL: dot is as fast */
} quant_kernels;

/* The fastest set this CPU supports (a cheap check; call it freely). */
const quant_kernels *quant_kernels_get(void);
/* The portable C set, always available. */
const quant_kernels *quant_kernels_scalar(void);
/* The AVX2+FMA+F16C set, or NULL when the CPU (or the build) lacks it. */
const quant_kernels *quant_kernels_avx2(void);

/* dst[0..n) = dequantised src row. n must be a multiple of the block size
 * and the type must have can_dequant (callers check at load time). */
void dequant_row(uint32_t type, const void *src, float *dst, int64_t n);

/* sum_i w[i] * x[i] over one stored row of n elements. */
float dot_row(uint32_t type, const void *row, const float *x, int64_t n);

/* xs[j] = sum of x[32j .. 32j + 32) for j < n / 32 (the input of dot_xs). */
void quant_xsums(const float *x, int64_t n, float *xs);

/* out[r] = row r . x for n_rows rows of n elements, row r at
 * rows + r * row_bytes (GEMV over a slice of a matrix). Faster than dot_row
 * per row for Q4_K/Q5_K (x's sub-block sums are computed once). */
void dot_rows(uint32_t type, const void *rows, size_t row_bytes, int64_t n_rows, const float *x, int64_t n,
              float *out);

/* Quantise n floats into dst in `type` (F32, F16, BF16, Q8_0, Q4_0, Q4_K,
 * Q5_K, Q6_K; n a multiple of the block size); returns the byte count
 * written, or 0 for a type (or length) that cannot be produced. */
size_t quantize_row(uint32_t type, const float *src, void *dst, int64_t n);

#endif
