/* Element formats: conversion between f32 and the stored weight types,
 * row dequantisation and row dot products (weight row . f32 vector). */
#ifndef SUBQ_QUANT_H
#define SUBQ_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "quant/types.h"

#define QK8_0 32
/* Q8_0 block: 32 weights = fp16 scale d + 32 signed bytes q; w = d * q. */
typedef struct block_q8_0 {
    uint16_t d;
    int8_t qs[QK8_0];
} block_q8_0;

float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);   /* round to nearest even */
float bf16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float f);   /* round to nearest even; NaN stays NaN */

/* dst[0..n) = dequantised src row. n must be a multiple of the block size
 * and the type must have can_dequant (callers check at load time). */
void dequant_row(uint32_t type, const void *src, float *dst, int64_t n);

/* sum_i w[i] * x[i] over one stored row of n elements. */
float dot_row(uint32_t type, const void *row, const float *x, int64_t n);

/* Quantise n floats into dst in `type` (F32, F16, BF16, Q8_0); returns the
 * byte count written, or 0 for a type that cannot be produced. */
size_t quantize_row(uint32_t type, const float *src, void *dst, int64_t n);

#endif
