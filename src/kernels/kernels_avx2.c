/* The AVX2 + FMA + F16C kernel set, compiled into a portable build through
 * target attributes and chosen at run time (kernels_get).
 *
 * Row dot products (dot, dot_xs) keep the activations in f32 (no int8
 * quantisation of x): they must equal the dot product of the dequantised row
 * up to float rounding. The integer GEMM / GEMV take x quantised to q8.
 * Dequantisers reproduce the reference ones (quant/dequant.c) bit for bit,
 * so they use separate mul and sub (never FMA) in the reference's order; the
 * library is built as ISO C, where GCC does not contract a*b-c into an FMA
 * on its own. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "base/cpu.h"
#include "kernels/dot.h"
#include "kernels/gemv_q8_rows.h"
#include "kernels/kernels.h"

/* a * b - c must stay two roundings, as in ggml. GCC keeps contraction off in
 * ISO C mode (the project's -std=c11); clang needs telling. */
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

#ifdef KERNELS_HAVE_AVX2

#define TARGET KERNELS_AVX2
#define INLINE KERNELS_AVX2_INLINE
/* Small fixed loops over register arrays must unroll completely, or the
 * arrays of vectors live on the stack (GCC -O2 does not do it unasked). */
#define UNROLL _Pragma("GCC unroll 16")

/* fp16 block field -> float, and broadcast to 8 lanes */
INLINE float h2f(const uint8_t p[2]) { return _cvtsh_ss(quant_rd16(p)); }
INLINE __m256 h2f8(const uint8_t p[2]) { return _mm256_cvtph_ps(_mm_set1_epi16((short)quant_rd16(p))); }

/* 8 signed bytes at p -> 8 floats */
INLINE __m256 i8x8(const int8_t *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}

/* 32 signed bytes in a register -> 4 x 8 floats, in byte order */
INLINE void i8x32(__m256i v, __m256 out[4]) {
    const __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
    out[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo));
    out[1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)));
    out[2] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi));
    out[3] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)));
}

INLINE __m256 ldx(const float *x) { return _mm256_loadu_ps(x); }

/* ---- f32 / f16 / bf16 ---------------------------------------------------- */

INLINE __m256 f16x8(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
INLINE __m256 bf16x8(const uint16_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

TARGET static void dequant_f16(const void *src, float *dst, int64_t n) {
    const uint16_t *s = src;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, f16x8(s + i));
    for (; i < n; i++) dst[i] = fp16_to_fp32(s[i]);
}

TARGET static void dequant_bf16(const void *src, float *dst, int64_t n) {
    const uint16_t *s = src;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, bf16x8(s + i));
    for (; i < n; i++) dst[i] = bf16_to_fp32(s[i]);
}

KERNELS_DOT_DENSE(dot_f16, uint16_t, f16x8, _cvtsh_ss) /* a leaf: no call in the tail */
KERNELS_DOT_DENSE(dot_bf16, uint16_t, bf16x8, bf16_to_fp32)

/* two f16 vectors (the HNSW graph over f16 keys): two accumulators */
TARGET static float dot_f16f16(const uint16_t *a, const uint16_t *b, int64_t n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = _mm256_fmadd_ps(f16x8(a + i), f16x8(b + i), a0);
        a1 = _mm256_fmadd_ps(f16x8(a + i + 8), f16x8(b + i + 8), a1);
    }
    for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(f16x8(a + i), f16x8(b + i), a0);
    float s = kernels_hsum8(_mm256_add_ps(a0, a1));
    for (; i < n; i++) s += _cvtsh_ss(a[i]) * _cvtsh_ss(b[i]);
    return s;
}

/* the same as row . x for the table */
TARGET static float row_dot_f32(const void *row, const float *x, int64_t n) { return kernels_dot_f32_avx2(x, row, n); }
TARGET static float row_dot_f16(const void *row, const float *x, int64_t n) { return dot_f16(x, row, n); }
TARGET static float row_dot_bf16(const void *row, const float *x, int64_t n) { return dot_bf16(x, row, n); }

/* ---- Q8_0, Q4_0 ------------------------------------------------------------ */

/* The 32 values q of a Q8_0 block as 4 x 8 floats in element order. */
INLINE void q8_0_vals(const block_q8_0 *b, __m256 q[4]) {
    UNROLL for (int k = 0; k < 4; k++) q[k] = i8x8(b->qs + 8 * k);
}

/* The 32 values q - 8 of a Q4_0 block as 4 x 8 floats in element order:
 * bytes 0..7 give elements 0..7 (low nibbles) and 16..23 (high), bytes
 * 8..15 give 8..15 and 24..31. */
INLINE void q4_0_vals(const block_q4_0 *b, __m256 q[4]) {
    const __m256i m4 = _mm256_set1_epi32(0xF), e8 = _mm256_set1_epi32(8);
    const __m256i v0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)b->qs));
    const __m256i v1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(b->qs + 8)));
    q[0] = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(v0, m4), e8));
    q[1] = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(v1, m4), e8));
    q[2] = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(v0, 4), e8));
    q[3] = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(v1, 4), e8));
}

/* sum_j q_j x_j over one block of 32 (the caller scales by d) */
INLINE __m256 qx32(const __m256 q[4], const float *x) {
    __m256 s = _mm256_mul_ps(q[0], ldx(x));
    s = _mm256_fmadd_ps(q[1], ldx(x + 8), s);
    s = _mm256_fmadd_ps(q[2], ldx(x + 16), s);
    return _mm256_fmadd_ps(q[3], ldx(x + 24), s);
}

/* Blocks of 32 values with one fp16 scale d, w = d q: the dequantiser, and
 * the dot sum_b d_b * (sum_j q_j x_j) with two accumulators hiding the FMA
 * latency. */
#define BLOCK32_KERNELS(T)                                                                                   \
    TARGET static void dequant_##T(const void *src, float *dst, int64_t n) {                                 \
        const block_##T *b = src;                                                                            \
        for (int64_t ib = 0; ib < n / 32; ib++) {                                                            \
            const __m256 d = h2f8(b[ib].d);                                                                  \
            __m256 q[4];                                                                                     \
            T##_vals(b + ib, q);                                                                             \
            UNROLL for (int k = 0; k < 4; k++) _mm256_storeu_ps(dst + ib * 32 + 8 * k, _mm256_mul_ps(q[k], d)); \
        }                                                                                                    \
    }                                                                                                        \
    INLINE __m256 T##_qx(const block_##T *b, const float *x) {                                               \
        __m256 q[4];                                                                                         \
        T##_vals(b, q);                                                                                      \
        return qx32(q, x);                                                                                   \
    }                                                                                                        \
    TARGET static float dot_##T(const void *row, const float *x, int64_t n) {                                \
        const block_##T *b = row;                                                                            \
        const int64_t nb = n / 32;                                                                           \
        __m256 a0 = _mm256_setzero_ps(), a1 = a0;                                                            \
        int64_t ib = 0;                                                                                      \
        for (; ib + 2 <= nb; ib += 2) {                                                                      \
            a0 = _mm256_fmadd_ps(h2f8(b[ib].d), T##_qx(b + ib, x + ib * 32), a0);                            \
            a1 = _mm256_fmadd_ps(h2f8(b[ib + 1].d), T##_qx(b + ib + 1, x + (ib + 1) * 32), a1);              \
        }                                                                                                    \
        for (; ib < nb; ib++) a0 = _mm256_fmadd_ps(h2f8(b[ib].d), T##_qx(b + ib, x + ib * 32), a0);          \
        return kernels_hsum8(_mm256_add_ps(a0, a1));                                                         \
    }

BLOCK32_KERNELS(q8_0)
BLOCK32_KERNELS(q4_0)

/* ---- Q4_K / Q5_K ------------------------------------------------------------ */

/* kernels_k4_scales into float arrays */
INLINE void k4_scales_f(const uint8_t *scales, float d, float dmin, float ds[8], float dm[8]) {
    __m256 vs, vm;
    kernels_k4_scales(scales, d, dmin, &vs, &vm);
    _mm256_storeu_ps(ds, vs);
    _mm256_storeu_ps(dm, vm);
}

/* Chunk c of a Q4_K block: the 64 values q as 8 x 8 floats (sub-block 2c in
 * q[0..4), sub-block 2c + 1 in q[4..8)). */
INLINE void q4_K_vals(const uint8_t *qs, __m256 q[8]) {
    const __m256i m4 = _mm256_set1_epi32(0xF);
    UNROLL for (int g = 0; g < 4; g++) {
        const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(qs + 8 * g)));
        q[g] = _mm256_cvtepi32_ps(_mm256_and_si256(v, m4));
        q[4 + g] = _mm256_cvtepi32_ps(_mm256_srli_epi32(v, 4));
    }
}

/* Chunk c of a Q5_K block, as q4_K_vals: the fifth bits are merged at byte
 * level on all 32 bytes (bit 2c of qh[l] -> bit 4 of the low value, bit 2c+1
 * of the high value) before widening. 16-bit shifts are safe because every
 * byte is masked to bits its own byte supplied. */
INLINE void q5_K_vals(const uint8_t *qs, const uint8_t *qh, int c, __m256 q[8]) {
    const __m256i m4 = _mm256_set1_epi8(0xF), b4 = _mm256_set1_epi8(0x10);
    const __m256i l = _mm256_loadu_si256((const __m256i *)qs);
    const __m256i h = _mm256_srli_epi16(_mm256_loadu_si256((const __m256i *)qh), 2 * c);
    const __m256i lo = _mm256_or_si256(_mm256_and_si256(l, m4), _mm256_and_si256(_mm256_slli_epi16(h, 4), b4));
    const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l, 4), m4),
                                       _mm256_and_si256(_mm256_slli_epi16(h, 3), b4));
    i8x32(lo, q); /* values are 0..31, so sign extension is zero extension */
    i8x32(hi, q + 4);
}

/* Chunk c of a super-block: y = (d sc) * q - (dmin m) per sub-block, rounded
 * twice as in the reference (VALS fills q[8] for chunk c of block b[ib]). */
#define DEQUANT_K4(NAME, BLOCK, VALS)                                                                        \
    TARGET static void NAME(const void *src, float *dst, int64_t n) {                                        \
        const BLOCK *b = src;                                                                                \
        for (int64_t ib = 0; ib < n / QK_K; ib++) {                                                          \
            float ds[8], dm[8];                                                                              \
            k4_scales_f(b[ib].scales, h2f(b[ib].d), h2f(b[ib].dmin), ds, dm);                                \
            float *y = dst + ib * QK_K;                                                                      \
            UNROLL for (int c = 0; c < 4; c++) {                                                             \
                __m256 q[8];                                                                                 \
                VALS;                                                                                        \
                const __m256 d1 = _mm256_set1_ps(ds[2 * c]), m1 = _mm256_set1_ps(dm[2 * c]);                 \
                const __m256 d2 = _mm256_set1_ps(ds[2 * c + 1]), m2 = _mm256_set1_ps(dm[2 * c + 1]);         \
                UNROLL for (int g = 0; g < 4; g++) {                                                         \
                    _mm256_storeu_ps(y + 64 * c + 8 * g, _mm256_sub_ps(_mm256_mul_ps(d1, q[g]), m1));        \
                    _mm256_storeu_ps(y + 64 * c + 32 + 8 * g, _mm256_sub_ps(_mm256_mul_ps(d2, q[4 + g]), m2)); \
                }                                                                                            \
            }                                                                                                \
        }                                                                                                    \
    }

DEQUANT_K4(dequant_q4_K, block_q4_K, q4_K_vals(b[ib].qs + 32 * c, q))
DEQUANT_K4(dequant_q5_K, block_q5_K, q5_K_vals(b[ib].qs + 32 * c, b[ib].qh, c, q))

/* sum_l q[g] x over the two sub-blocks of chunk c: q[0..4) against x1,
 * q[4..8) against x1 + 32 */
#define K4_QX(q, x1, qx1, qx2)                                                     \
    __m256 qx1 = _mm256_mul_ps(q[0], ldx(x1)), qx2 = _mm256_mul_ps(q[4], ldx(x1 + 32)); \
    UNROLL for (int g = 1; g < 4; g++) {                                           \
        qx1 = _mm256_fmadd_ps(q[g], ldx(x1 + 8 * g), qx1);                         \
        qx2 = _mm256_fmadd_ps(q[4 + g], ldx(x1 + 32 + 8 * g), qx2);                \
    }

/* Per sub-block s: (d sc_s) * sum q x - (dmin m_s) * sum x. The scale terms
 * and the min terms of the two sub-blocks of a chunk go to four separate
 * accumulators so no FMA waits on another. */
#define DOT_K4(NAME, BLOCK, VALS)                                                      \
    TARGET static float NAME(const void *row, const float *x, int64_t n) {             \
        const BLOCK *b = row;                                                          \
        __m256 ad1 = _mm256_setzero_ps(), ad2 = ad1, am1 = ad1, am2 = ad1;             \
        for (int64_t ib = 0; ib < n / QK_K; ib++) {                                    \
            float ds[8], dm[8];                                                        \
            k4_scales_f(b[ib].scales, h2f(b[ib].d), h2f(b[ib].dmin), ds, dm);          \
            UNROLL for (int c = 0; c < 4; c++) {                                       \
                const float *x1 = x + ib * QK_K + 64 * c;                              \
                __m256 q[8];                                                           \
                VALS;                                                                  \
                K4_QX(q, x1, qx1, qx2)                                                 \
                __m256 sx1 = ldx(x1), sx2 = ldx(x1 + 32);                              \
                UNROLL for (int g = 1; g < 4; g++) {                                   \
                    sx1 = _mm256_add_ps(sx1, ldx(x1 + 8 * g));                         \
                    sx2 = _mm256_add_ps(sx2, ldx(x1 + 32 + 8 * g));                    \
                }                                                                      \
                ad1 = _mm256_fmadd_ps(_mm256_set1_ps(ds[2 * c]), qx1, ad1);            \
                ad2 = _mm256_fmadd_ps(_mm256_set1_ps(ds[2 * c + 1]), qx2, ad2);        \
                am1 = _mm256_fmadd_ps(_mm256_set1_ps(dm[2 * c]), sx1, am1);            \
                am2 = _mm256_fmadd_ps(_mm256_set1_ps(dm[2 * c + 1]), sx2, am2);        \
            }                                                                          \
        }                                                                              \
        return kernels_hsum8(_mm256_sub_ps(_mm256_add_ps(ad1, ad2), _mm256_add_ps(am1, am2)));  \
    }

/* The same with the sub-block sums of x given (xs[j] = sum of x[32j..32j+32),
 * shared by every row of a GEMV): the min terms of a super-block become one
 * 8-lane FMA, dm . xs, and the per-weight adds disappear (~1.35x faster). */
#define DOT_K4_XS(NAME, BLOCK, VALS)                                                             \
    TARGET static float NAME(const void *row, const float *x, const float *xs, int64_t n) {      \
        const BLOCK *b = row;                                                                    \
        __m256 ad1 = _mm256_setzero_ps(), ad2 = ad1, am = ad1;                                   \
        for (int64_t ib = 0; ib < n / QK_K; ib++) {                                              \
            float ds[8], dm[8];                                                                  \
            k4_scales_f(b[ib].scales, h2f(b[ib].d), h2f(b[ib].dmin), ds, dm);                    \
            am = _mm256_fmadd_ps(_mm256_loadu_ps(dm), _mm256_loadu_ps(xs + 8 * ib), am);         \
            UNROLL for (int c = 0; c < 4; c++) {                                                 \
                const float *x1 = x + ib * QK_K + 64 * c;                                        \
                __m256 q[8];                                                                     \
                VALS;                                                                            \
                K4_QX(q, x1, qx1, qx2)                                                           \
                ad1 = _mm256_fmadd_ps(_mm256_set1_ps(ds[2 * c]), qx1, ad1);                      \
                ad2 = _mm256_fmadd_ps(_mm256_set1_ps(ds[2 * c + 1]), qx2, ad2);                  \
            }                                                                                    \
        }                                                                                        \
        return kernels_hsum8(_mm256_sub_ps(_mm256_add_ps(ad1, ad2), am));                                 \
    }

DOT_K4(dot_q4_K, block_q4_K, q4_K_vals(b[ib].qs + 32 * c, q))
DOT_K4(dot_q5_K, block_q5_K, q5_K_vals(b[ib].qs + 32 * c, b[ib].qh, c, q))
DOT_K4_XS(dot_xs_q4_K, block_q4_K, q4_K_vals(b[ib].qs + 32 * c, q))
DOT_K4_XS(dot_xs_q5_K, block_q5_K, q5_K_vals(b[ib].qs + 32 * c, b[ib].qh, c, q))

/* ---- Q6_K ---------------------------------------------------------------- */

/* Q6_K values of half h, group k (values 128h + 32k .. +32) as bytes q - 32:
 * low bits from nibble k>>1 of ql[64h + 32(k&1) + l], high bits 2k..2k+1 of
 * qh[32h + l]. 16-bit shifts are safe: each byte is masked to its own bits. */
INLINE __m256i q6_K_bytes(const block_q6_K *b, int h, int k) {
    const __m256i m4 = _mm256_set1_epi8(0xF), m2 = _mm256_set1_epi8(3);
    const __m256i l = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32 * (k & 1)));
    const __m256i H = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
    const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(l, 4 * (k >> 1)), m4);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(H, 2 * k), m2);
    return _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_slli_epi16(hi, 4)), _mm256_set1_epi8(32));
}

TARGET static void dequant_q6_K(const void *src, float *dst, int64_t n) {
    const block_q6_K *b = src;
    for (int64_t ib = 0; ib < n / QK_K; ib++) {
        const float d = h2f(b[ib].d);
        float *y = dst + ib * QK_K;
        UNROLL for (int h = 0; h < 2; h++) {
            UNROLL for (int k = 0; k < 4; k++) {
                __m256 q[4];
                i8x32(q6_K_bytes(b + ib, h, k), q);
                /* y = (d * sc) * (q - 32); q[0..1] are sub-block 8h + 2k, q[2..3] the next */
                const __m256 d0 = _mm256_set1_ps(d * b[ib].scales[8 * h + 2 * k]);
                const __m256 d1 = _mm256_set1_ps(d * b[ib].scales[8 * h + 2 * k + 1]);
                float *yk = y + 128 * h + 32 * k;
                _mm256_storeu_ps(yk, _mm256_mul_ps(d0, q[0]));
                _mm256_storeu_ps(yk + 8, _mm256_mul_ps(d0, q[1]));
                _mm256_storeu_ps(yk + 16, _mm256_mul_ps(d1, q[2]));
                _mm256_storeu_ps(yk + 24, _mm256_mul_ps(d1, q[3]));
            }
        }
    }
}

/* per sub-block s of 16: (d sc_s) * sum (q - 32) x; two accumulators */
TARGET static float dot_q6_K(const void *row, const float *x, int64_t n) {
    const block_q6_K *b = row;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    for (int64_t ib = 0; ib < n / QK_K; ib++) {
        const float d = h2f(b[ib].d);
        const float *xb = x + ib * QK_K;
        UNROLL for (int h = 0; h < 2; h++) {
            UNROLL for (int k = 0; k < 4; k++) {
                __m256 q[4];
                i8x32(q6_K_bytes(b + ib, h, k), q);
                const float *xk = xb + 128 * h + 32 * k;
                const __m256 s0 = _mm256_fmadd_ps(q[1], ldx(xk + 8), _mm256_mul_ps(q[0], ldx(xk)));
                const __m256 s1 = _mm256_fmadd_ps(q[3], ldx(xk + 24), _mm256_mul_ps(q[2], ldx(xk + 16)));
                a0 = _mm256_fmadd_ps(_mm256_set1_ps(d * b[ib].scales[8 * h + 2 * k]), s0, a0);
                a1 = _mm256_fmadd_ps(_mm256_set1_ps(d * b[ib].scales[8 * h + 2 * k + 1]), s1, a1);
            }
        }
    }
    return kernels_hsum8(_mm256_add_ps(a0, a1));
}

/* ---- integer GEMM on q8 activations (prefill) ------------------------------ */

/* The 32 values at x into v, and max |x| over them (max_ps(|x|, m) keeps m
 * for a NaN, as the portable forms' compares do). */
INLINE float load_absmax32(const float *x, __m256 v[4]) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_setzero_ps();
    UNROLL for (int k = 0; k < 4; k++) {
        v[k] = _mm256_loadu_ps(x + 8 * k);
        m = _mm256_max_ps(_mm256_andnot_ps(sign, v[k]), m);
    }
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

/* 4 x 8 int32 to 32 int8 in element order: the packs work per 128-bit lane,
 * the permute restores the order */
INLINE void store_i8x32(int8_t *q, const __m256i i[4]) {
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i[0], i[1]), _mm256_packs_epi32(i[2], i[3]));
    _mm256_storeu_si256((__m256i *)q, _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

/* One row as the scalar set does it: the same float operations (amax, d =
 * amax / 127, 1 / d, x * (1 / d)) and rounding (cvtps_epi32 rounds to
 * nearest even), so both sets give the same q and d. */
TARGET static void quantize_q8(const float *x, int64_t n, int8_t *q, float *d) {
    for (int64_t b = 0; b < n / 32; b++) {
        __m256 v[4];
        const float db = load_absmax32(x + 32 * b, v) / 127.0f, id = db != 0.0f ? 1.0f / db : 0.0f;
        d[b] = db;
        const __m256 vid = _mm256_set1_ps(id);
        __m256i i[4];
        UNROLL for (int k = 0; k < 4; k++) i[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], vid));
        store_i8x32(q + 32 * b, i);
    }
}

/* The 32 values of a weight block as signed bytes in element order. */
INLINE __m256i q8_0_bytes(const block_q8_0 *b) { return _mm256_loadu_si256((const __m256i *)b->qs); }
/* The 32 stored nibbles of a q4_0 block (w + 8) as unsigned bytes in element order */
INLINE __m256i q4_0_nibbles(const uint8_t *blk) {
    const __m128i t = _mm_loadu_si128((const __m128i *)((const block_q4_0 *)blk)->qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(0xF));
}
INLINE __m256i q4_0_bytes(const block_q4_0 *b) {
    return _mm256_sub_epi8(q4_0_nibbles((const uint8_t *)b), _mm256_set1_epi8(8));
}

/* sum_j w_j x_j of one block pair in 8 int32 lanes: maddubs multiplies
 * unsigned by signed bytes, so it gets |w| and x with w's sign (|w| <= 128,
 * |x| <= 127: the 16-bit pair sums cannot saturate), then madd adds pairs. */
INLINE __m256i q8_pair_sums(__m256i w_abs, __m256i w, __m256i x) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(w_abs, _mm256_sign_epi8(x, w)), _mm256_set1_epi16(1));
}

/* The loop nest of the AVX2 integer GEMM: tiles of R weight rows x C tokens
 * (full), with 1-row / 1-token / 1x1 tiles at the edges, each over every
 * block. Tokens go in chunks whose quantised rows stay in L2 while each group
 * of R weight rows streams past them once per chunk. */
typedef void (*gemm_tile_fn)(const char *w, size_t row_bytes, const int8_t *xq, const float *xd, int64_t n, float *y,
                             int64_t ldy);
typedef struct gemm_tiles {
    int R, C;
    gemm_tile_fn full, row1, tok1, one;
} gemm_tiles;

static void gemm_tiled(const gemm_tiles *k, const void *w, size_t row_bytes, int64_t n_rows, const int8_t *xq,
                       const float *xd, int n_tok, int64_t n, float *y, int64_t ldy) {
    enum { CHUNK_BYTES = 1 << 19 }; /* half of a 1 MiB L2 */
    const int64_t nb = n / 32;
    int chunk = (int)(CHUNK_BYTES / n) / k->C * k->C;
    if (chunk < k->C) chunk = k->C;
    for (int t0 = 0; t0 < n_tok; t0 += chunk) {
        const int t1 = t0 + chunk < n_tok ? t0 + chunk : n_tok;
        for (int64_t r = 0; r < n_rows;) {
            const char *wr = (const char *)w + (size_t)r * row_bytes;
            const int rows = r + k->R <= n_rows;
            for (int t = t0; t < t1;) {
                const int toks = t + k->C <= t1;
                gemm_tile_fn f = rows ? (toks ? k->full : k->tok1) : (toks ? k->row1 : k->one);
                f(wr, row_bytes, xq + (size_t)t * n, xd + (size_t)t * nb, n, y + (size_t)t * ldy + r, ldy);
                t += toks ? k->C : 1;
            }
            r += rows ? k->R : 1;
        }
    }
}

/* A tile of R weight rows x C tokens over all blocks: R*C accumulators of 8
 * lanes stay in registers, each weight block is loaded once for C tokens and
 * each activation block once for R rows. acc += (dw dx) * lane sums. */
#define GEMM_Q8_TILE(T, R, C)                                                                                    \
    TARGET static void gemm_##T##_##R##x##C(const char *w, size_t rb, const int8_t *xq, const float *xd,        \
                                            int64_t n, float *y, int64_t ldy) {                                  \
        const int64_t nb = n / 32;                                                                               \
        __m256 acc[R][C];                                                                                        \
        UNROLL for (int r = 0; r < R; r++) UNROLL for (int c = 0; c < C; c++) acc[r][c] = _mm256_setzero_ps();   \
        for (int64_t b = 0; b < nb; b++) {                                                                       \
            __m256i wv[R], wa[R];                                                                                \
            float dw[R];                                                                                         \
            UNROLL for (int r = 0; r < R; r++) {                                                                 \
                const block_##T *blk = (const block_##T *)(w + (size_t)r * rb) + b;                              \
                wv[r] = T##_bytes(blk);                                                                          \
                wa[r] = _mm256_sign_epi8(wv[r], wv[r]);                                                          \
                dw[r] = h2f(blk->d);                                                                             \
            }                                                                                                    \
            UNROLL for (int c = 0; c < C; c++) {                                                                 \
                const __m256i xv = _mm256_loadu_si256((const __m256i *)(xq + (size_t)c * n + 32 * b));          \
                const float dx = xd[(size_t)c * nb + b];                                                         \
                UNROLL for (int r = 0; r < R; r++) {                                                             \
                    const __m256 f = _mm256_cvtepi32_ps(q8_pair_sums(wa[r], wv[r], xv));                         \
                    acc[r][c] = _mm256_fmadd_ps(f, _mm256_set1_ps(dw[r] * dx), acc[r][c]);                       \
                }                                                                                                \
            }                                                                                                    \
        }                                                                                                        \
        UNROLL for (int r = 0; r < R; r++) UNROLL for (int c = 0; c < C; c++)                                    \
            y[(size_t)c * ldy + r] = kernels_hsum8(acc[r][c]);                                                   \
    }

#define GEMM_Q8(T)                                                                                               \
    GEMM_Q8_TILE(T, 2, 4)                                                                                        \
    GEMM_Q8_TILE(T, 1, 4)                                                                                        \
    GEMM_Q8_TILE(T, 2, 1)                                                                                        \
    GEMM_Q8_TILE(T, 1, 1)                                                                                        \
    static void gemm_q8_##T(const void *w, size_t rb, int64_t n_rows, const int8_t *xq, const float *xd,        \
                            int n_tok, int64_t n, float *y, int64_t ldy) {                                       \
        static const gemm_tiles k = {2, 4, gemm_##T##_2x4, gemm_##T##_1x4, gemm_##T##_2x1, gemm_##T##_1x1};      \
        gemm_tiled(&k, w, rb, n_rows, xq, xd, n_tok, n, y, ldy);                                                 \
    }

/* The GEMV (decode), in gemv_q8_rows.h's loops. q8_0's lane sums are
 * q8_pair_sums'; q4_0 takes its nibbles as stored, u = w + 8 (unsigned, so
 * maddubs needs no signs; 15 x 127 x 2 cannot saturate), and each lane adds
 * its start -8 (x_4l + ... + x_4l+3), computed once per call:
 *   start + sum_j u_j x_j = sum_j w_j x_j   (exact; two operations fewer
 * a block than w - 8 through q8_pair_sums). */

/* acc + the eight lane sums of unsigned bytes u against signed bytes x
 * (four products a lane; u <= 63 in every use, so maddubs cannot saturate) */
INLINE __m256i u8_lanes(__m256i acc, __m256i u, __m256i x) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), _mm256_set1_epi16(1)));
}

GEMV_LANE_STARTS(INLINE, u8_lanes)

INLINE __m256i q8_0_lanes(const block_q8_0 *b, __m256i x, const int32_t *start) {
    (void)start;
    const __m256i w = q8_0_bytes(b);
    return q8_pair_sums(_mm256_sign_epi8(w, w), w, x);
}
INLINE __m256i q4_0_lanes(const block_q4_0 *b, __m256i x, const int32_t *start) {
    return u8_lanes(_mm256_load_si256((const __m256i *)start), q4_0_nibbles((const uint8_t *)b), x);
}

#define GEMV_SCALE(b) h2f((b)->d)

GEMM_Q8(q8_0)
GEMM_Q8(q4_0)
GEMV_Q8_ROWS(q8_0, INLINE, TARGET, GEMV_SCALE)
GEMV_Q8_ROWS(q4_0, INLINE, TARGET, GEMV_SCALE)

/* Q4_K and Q6_K: the values as stored against the activations, scales (and
 * Q4_K's mins) per sub-block (gemv_q8_rows.h) */
GEMV_Q4_K_ROWS(INLINE, TARGET, u8_lanes)
GEMV_Q6_K_ROWS(INLINE, TARGET, u8_lanes)

/* ---- vectors and decode attention ---------------------------------------- */

/* F16C rounds to nearest even as fp32_to_fp16 does (NaNs keep their payload) */
TARGET static void f32_to_f16(const float *x, uint16_t *dst, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) dst[i] = fp32_to_fp16(x[i]);
}

/* Eight compares per instruction, listed without a branch (a scan's pass
 * rate is a few in a hundred, so a branch per vector mispredicts often):
 * the passing lanes of a half (4-bit mask m) are the first BITS4[m] lanes
 * of AT_LEAST4[m], stored whole at idx + c. The stores may write past the
 * count returned, never past idx[n). */
static const int32_t AT_LEAST4[16][4] = {
    {0, 0, 0, 0}, {0, 0, 0, 0}, {1, 0, 0, 0}, {0, 1, 0, 0}, {2, 0, 0, 0}, {0, 2, 0, 0}, {1, 2, 0, 0}, {0, 1, 2, 0},
    {3, 0, 0, 0}, {0, 3, 0, 0}, {1, 3, 0, 0}, {0, 1, 3, 0}, {2, 3, 0, 0}, {0, 2, 3, 0}, {1, 2, 3, 0}, {0, 1, 2, 3},
};
static const int BITS4[16] = {0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4};

TARGET static int index_at_least(const float *x, int n, float t, int32_t *idx) {
    const __m256 vt = _mm256_set1_ps(t);
    int c = 0, i = 0;
    for (; i + 8 <= n; i += 8) {
        const unsigned pass = (unsigned)_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), vt, _CMP_GE_OQ));
        const unsigned lo = pass & 15, hi = pass >> 4;
        _mm_storeu_si128((__m128i *)(idx + c),
                         _mm_add_epi32(_mm_loadu_si128((const __m128i *)AT_LEAST4[lo]), _mm_set1_epi32(i)));
        c += BITS4[lo];
        _mm_storeu_si128((__m128i *)(idx + c),
                         _mm_add_epi32(_mm_loadu_si128((const __m128i *)AT_LEAST4[hi]), _mm_set1_epi32(i + 4)));
        c += BITS4[hi];
    }
    for (; i < n; i++)
        if (x[i] >= t) idx[c++] = i;
    return c;
}

TARGET static void axpy_f32(float *y, float w, const float *x, int n) {
    __m256 vw = _mm256_set1_ps(w);
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(vw, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += w * x[i];
}

TARGET static void axpy_f16(float *y, float w, const uint16_t *x, int n) {
    __m256 vw = _mm256_set1_ps(w);
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(vw, f16x8(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += w * fp16_to_fp32(x[i]);
}

/* 8 values of a cached row at element offset `at`, as floats */
INLINE __m256 load8(const void *rows, size_t at, int f16) {
    if (f16) return f16x8((const uint16_t *)rows + at);
    return _mm256_loadu_ps((const float *)rows + at);
}

/* one value of a row, as a float */
INLINE float load1(const void *rows, size_t at, int f16) {
    return f16 ? _cvtsh_ss(((const uint16_t *)rows)[at]) : ((const float *)rows)[at];
}

/* Two query heads (qa, qb; qb == qa when there is one) against four keys at
 * a time: 8 accumulators, each key chunk converted once for both heads. */
INLINE void scores_rows(const float *q, int g, const void *keys, int n, int hd, float scale, float *s, int ld,
                        int f16) {
    const __m128 vs = _mm_set1_ps(scale);
    for (int i0 = 0; i0 < g; i0 += 2) {
        const int two = i0 + 1 < g;
        const float *qa = q + (size_t)i0 * hd, *qb = two ? qa + hd : qa;
        float *sa = s + (size_t)i0 * ld, *sb = two ? sa + ld : NULL;
        int j = 0;
        const size_t rb = (size_t)hd * (f16 ? 2 : 4);
        for (; j + 4 <= n; j += 4) {
            prefetch_span(keys, (size_t)(j + PF_ROWS) * rb, 4 * rb);
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
            const size_t r = (size_t)j * hd;
            for (int c = 0; c < hd; c += 8) {
                __m256 k0 = load8(keys, r + c, f16), k1 = load8(keys, r + hd + c, f16);
                __m256 k2 = load8(keys, r + 2 * hd + c, f16), k3 = load8(keys, r + 3 * hd + c, f16);
                __m256 x = _mm256_loadu_ps(qa + c), y = _mm256_loadu_ps(qb + c);
                a0 = _mm256_fmadd_ps(x, k0, a0), a1 = _mm256_fmadd_ps(x, k1, a1);
                a2 = _mm256_fmadd_ps(x, k2, a2), a3 = _mm256_fmadd_ps(x, k3, a3);
                b0 = _mm256_fmadd_ps(y, k0, b0), b1 = _mm256_fmadd_ps(y, k1, b1);
                b2 = _mm256_fmadd_ps(y, k2, b2), b3 = _mm256_fmadd_ps(y, k3, b3);
            }
            _mm_storeu_ps(sa + j, _mm_mul_ps(vs, hsum4(a0, a1, a2, a3)));
            if (sb) _mm_storeu_ps(sb + j, _mm_mul_ps(vs, hsum4(b0, b1, b2, b3)));
        }
        for (; j < n; j++) {
            __m256 a = _mm256_setzero_ps(), b = a;
            for (int c = 0; c < hd; c += 8) {
                __m256 k = load8(keys, (size_t)j * hd + c, f16);
                a = _mm256_fmadd_ps(_mm256_loadu_ps(qa + c), k, a);
                b = _mm256_fmadd_ps(_mm256_loadu_ps(qb + c), k, b);
            }
            __m128 t = hsum4(a, b, a, b);
            sa[j] = scale * _mm_cvtss_f32(t);
            if (sb) sb[j] = scale * _mm_cvtss_f32(_mm_shuffle_ps(t, t, 1));
        }
    }
}

/* m (1 or 2) heads, 32 columns [c, c + 32) of a key block: 4 x m
 * accumulators stay in registers while the block's rows stream past, each
 * row contributing one 64-byte span (one cache line in f16); m is a
 * constant in every call, so the unused head costs nothing. With pf, the
 * same span PF_ROWS rows ahead is asked for. */
INLINE void accum_cols32(const float *const *pp, int m, float *o, int hd, int c, const void *vals, int j0, int j1,
                         int f16, int pf) {
    const size_t esz = f16 ? 2 : 4;
    __m256 acc[2][4];
    for (int i = 0; i < m; i++)
        for (int u = 0; u < 4; u++) acc[i][u] = _mm256_loadu_ps(o + (size_t)i * hd + c + 8 * u);
    for (int j = j0; j < j1; j++) {
        const size_t r = (size_t)j * hd + c;
        if (pf) prefetch_span(vals, (r + (size_t)PF_ROWS * hd) * esz, 32 * esz);
        __m256 v0 = load8(vals, r, f16), v1 = load8(vals, r + 8, f16), v2 = load8(vals, r + 16, f16),
               v3 = load8(vals, r + 24, f16);
        for (int i = 0; i < m; i++) {
            __m256 w = _mm256_broadcast_ss(pp[i] + j);
            acc[i][0] = _mm256_fmadd_ps(w, v0, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(w, v1, acc[i][1]);
            acc[i][2] = _mm256_fmadd_ps(w, v2, acc[i][2]);
            acc[i][3] = _mm256_fmadd_ps(w, v3, acc[i][3]);
        }
    }
    for (int i = 0; i < m; i++)
        for (int u = 0; u < 4; u++) _mm256_storeu_ps(o + (size_t)i * hd + c + 8 * u, acc[i][u]);
}

/* The same for one 8-column chunk (head widths that are not a multiple of 32). */
INLINE void accum_cols8(const float *const *pp, int m, float *o, int hd, int c, const void *vals, int j0, int j1,
                        int f16) {
    __m256 acc[2];
    for (int i = 0; i < m; i++) acc[i] = _mm256_loadu_ps(o + (size_t)i * hd + c);
    for (int j = j0; j < j1; j++) {
        __m256 v = load8(vals, (size_t)j * hd + c, f16);
        for (int i = 0; i < m; i++) acc[i] = _mm256_fmadd_ps(_mm256_broadcast_ss(pp[i] + j), v, acc[i]);
    }
    for (int i = 0; i < m; i++) _mm256_storeu_ps(o + (size_t)i * hd + c, acc[i]);
}

/* Keys go in blocks small enough for L1, so the column passes re-read
 * cache; the first pair of heads prefetches as it goes (the 8-column tail
 * of widths that are not a multiple of 32 is asked for with its row). */
INLINE void accum_rows(const float *p, int g, int ld, const void *vals, int n, int hd, float *out, int f16) {
    enum { BLOCK = 64 };
    const size_t esz = f16 ? 2 : 4, c32 = (size_t)(hd & ~31);
    for (int j0 = 0; j0 < n; j0 += BLOCK) {
        const int j1 = j0 + BLOCK < n ? j0 + BLOCK : n;
        if (c32 < (size_t)hd)
            for (int j = j0; j < j1; j++) prefetch_span(vals, ((size_t)(j + PF_ROWS) * hd + c32) * esz, (hd - c32) * esz);
        for (int i0 = 0; i0 < g; i0 += 2) {
            const float *pp[2] = {p + (size_t)i0 * ld, p + (size_t)(i0 + 1) * ld};
            float *o = out + (size_t)i0 * hd;
            int c = 0;
            if (i0 + 1 < g) {
                for (; c + 32 <= hd; c += 32) accum_cols32(pp, 2, o, hd, c, vals, j0, j1, f16, i0 == 0);
                for (; c < hd; c += 8) accum_cols8(pp, 2, o, hd, c, vals, j0, j1, f16);
            } else {
                for (; c + 32 <= hd; c += 32) accum_cols32(pp, 1, o, hd, c, vals, j0, j1, f16, i0 == 0);
                for (; c < hd; c += 8) accum_cols8(pp, 1, o, hd, c, vals, j0, j1, f16);
            }
        }
    }
}

/* ---- quantised KV rows (q8_0, q4_0) ----------------------------------------- */

/* The 32 integers of a q8_0 / q4_0 block (q, or q - 8) as 4 x 8 floats */
INLINE void qblock_vals(const uint8_t *blk, int q4, __m256 v[4]) {
    if (q4) q4_0_vals((const block_q4_0 *)blk, v);
    else q8_0_vals((const block_q8_0 *)blk, v);
}

/* Query heads quantised for integer scores (kernels.h), QMAX values at most
 * per head (wider heads take the portable form, which quantises alike). */
enum { QMAX = 1024 };
typedef struct kv_qquery {
    int8_t q[2][QMAX];       /* codes of heads a, b */
    float d[2][QMAX / 32];   /* their block scales */
    int32_t corr[2][QMAX / 32]; /* q4_0: -8 x the block's code sum (its keys are stored as code + 8) */
} kv_qquery;

/* heads qa, qb (hd values each) into w */
INLINE void kv_quantize_query(const float *qa, const float *qb, int hd, int q4, kv_qquery *w) {
    const float *src[2] = {qa, qb};
    for (int h = 0; h < 2; h++) {
        quantize_q8(src[h], hd, w->q[h], w->d[h]);
        for (int b = 0; q4 && b < hd / 32; b++) {
            int sum = 0;
            for (int c = 0; c < 32; c++) sum += w->q[h][32 * b + c];
            w->corr[h][b] = -8 * sum;
        }
    }
}

/* sum_c code_k(c) code_q(c) of one key block in 8 int32 lanes (q8_0:
 * maddubs on |k| and q with k's sign; q4_0: the unsigned nibbles against q,
 * plus the -8 sum q correction in lane 0). */
INLINE __m256i kv_block_isum(const uint8_t *blk, __m256i kq, int32_t corr, int q4) {
    if (q4)
        return _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(q4_0_nibbles(blk), kq), _mm256_set1_epi16(1)),
                                _mm256_castsi128_si256(_mm_cvtsi32_si128(corr)));
    const __m256i k = q8_0_bytes((const block_q8_0 *)blk);
    return q8_pair_sums(_mm256_abs_epi8(k), k, kq);
}

/* Rows of hd values (a multiple of 32, at most QMAX) in blocks of bs bytes;
 * two query heads at a time, quantised once per call; four keys at a time
 * share the hsum. Per key block and head: an exact integer block sum, times
 * d_k d_q, added into 8 lanes. */
INLINE void scores_q(const float *q, int g, const uint8_t *keys, int n, int hd, float scale, float *s, int ld,
                     int q4) {
    const size_t bs = q4 ? sizeof(block_q4_0) : sizeof(block_q8_0), rb = (size_t)(hd / 32) * bs;
    const __m128 vs = _mm_set1_ps(scale);
    kv_qquery w;
    for (int i0 = 0; i0 < g; i0 += 2) {
        const int two = i0 + 1 < g;
        const float *qa = q + (size_t)i0 * hd;
        float *sa = s + (size_t)i0 * ld, *sb = two ? sa + ld : NULL;
        kv_quantize_query(qa, two ? qa + hd : qa, hd, q4, &w);
        int j = 0;
        for (; j + 4 <= n; j += 4) {
            const uint8_t *r = keys + (size_t)j * rb;
            prefetch_span(keys, (size_t)(j + PF_ROWS) * rb, 4 * rb);
            __m256 ta[4], tb[4];
            UNROLL for (int k = 0; k < 4; k++) ta[k] = tb[k] = _mm256_setzero_ps();
            for (int b = 0; b < hd / 32; b++) {
                const __m256i xa = _mm256_loadu_si256((const __m256i *)(w.q[0] + 32 * b)),
                              xb = _mm256_loadu_si256((const __m256i *)(w.q[1] + 32 * b));
                const __m256 da = _mm256_set1_ps(w.d[0][b]), db = _mm256_set1_ps(w.d[1][b]);
                const uint8_t *blk = r + (size_t)b * bs;
                UNROLL for (int k = 0; k < 4; k++, blk += rb) {
                    const __m256 dk = h2f8(blk);
                    const __m256 ia = _mm256_cvtepi32_ps(kv_block_isum(blk, xa, w.corr[0][b], q4));
                    const __m256 ib = _mm256_cvtepi32_ps(kv_block_isum(blk, xb, w.corr[1][b], q4));
                    ta[k] = _mm256_fmadd_ps(ia, _mm256_mul_ps(dk, da), ta[k]);
                    tb[k] = _mm256_fmadd_ps(ib, _mm256_mul_ps(dk, db), tb[k]);
                }
            }
            _mm_storeu_ps(sa + j, _mm_mul_ps(vs, hsum4(ta[0], ta[1], ta[2], ta[3])));
            if (sb) _mm_storeu_ps(sb + j, _mm_mul_ps(vs, hsum4(tb[0], tb[1], tb[2], tb[3])));
        }
        for (; j < n; j++) {
            __m256 ta = _mm256_setzero_ps(), tb = ta;
            for (int b = 0; b < hd / 32; b++) {
                const uint8_t *blk = keys + (size_t)j * rb + (size_t)b * bs;
                const __m256 dk = h2f8(blk);
                const __m256i xa = _mm256_loadu_si256((const __m256i *)(w.q[0] + 32 * b)),
                              xb = _mm256_loadu_si256((const __m256i *)(w.q[1] + 32 * b));
                ta = _mm256_fmadd_ps(_mm256_cvtepi32_ps(kv_block_isum(blk, xa, w.corr[0][b], q4)),
                                     _mm256_mul_ps(dk, _mm256_set1_ps(w.d[0][b])), ta);
                tb = _mm256_fmadd_ps(_mm256_cvtepi32_ps(kv_block_isum(blk, xb, w.corr[1][b], q4)),
                                     _mm256_mul_ps(dk, _mm256_set1_ps(w.d[1][b])), tb);
            }
            __m128 t = hsum4(ta, tb, ta, tb);
            sa[j] = scale * _mm_cvtss_f32(t);
            if (sb) sb[j] = scale * _mm_cvtss_f32(_mm_shuffle_ps(t, t, 1));
        }
    }
}

/* m (1 or 2) heads, block column [c, c + 32) over rows [j0, j1): out_i +=
 * (p_ij d_j) n_j, the 4 x m accumulators in registers. */
INLINE void accum_qcols(const float *const *pp, int m, float *o, int hd, int c, const uint8_t *vals, size_t rb,
                        size_t bs, int j0, int j1, int q4, int pf) {
    __m256 acc[2][4];
    for (int i = 0; i < m; i++)
        for (int u = 0; u < 4; u++) acc[i][u] = _mm256_loadu_ps(o + (size_t)i * hd + c + 8 * u);
    for (int j = j0; j < j1; j++) {
        const size_t at = (size_t)j * rb + (size_t)(c / 32) * bs;
        const uint8_t *blk = vals + at;
        if (pf) prefetch_span(vals, at + PF_ROWS * rb, bs);
        __m256 v[4];
        qblock_vals(blk, q4, v);
        const float d = h2f(blk);
        for (int i = 0; i < m; i++) {
            const __m256 w = _mm256_set1_ps(pp[i][j] * d);
            UNROLL for (int u = 0; u < 4; u++) acc[i][u] = _mm256_fmadd_ps(w, v[u], acc[i][u]);
        }
    }
    for (int i = 0; i < m; i++)
        for (int u = 0; u < 4; u++) _mm256_storeu_ps(o + (size_t)i * hd + c + 8 * u, acc[i][u]);
}

/* As accum_rows: blocks of rows stay in L1 for the column passes. */
INLINE void accum_q(const float *p, int g, int ld, const uint8_t *vals, int n, int hd, float *out, int q4) {
    enum { BLOCK = 64 };
    const size_t bs = q4 ? sizeof(block_q4_0) : sizeof(block_q8_0), rb = (size_t)(hd / 32) * bs;
    for (int j0 = 0; j0 < n; j0 += BLOCK) {
        const int j1 = j0 + BLOCK < n ? j0 + BLOCK : n;
        for (int i0 = 0; i0 < g; i0 += 2) {
            const float *pp[2] = {p + (size_t)i0 * ld, p + (size_t)(i0 + 1) * ld};
            float *o = out + (size_t)i0 * hd;
            if (i0 + 1 < g)
                for (int c = 0; c < hd; c += 32) accum_qcols(pp, 2, o, hd, c, vals, rb, bs, j0, j1, q4, i0 == 0);
            else
                for (int c = 0; c < hd; c += 32) accum_qcols(pp, 1, o, hd, c, vals, rb, bs, j0, j1, q4, i0 == 0);
        }
    }
}

/* y += (w d_b) n_b per block */
INLINE void axpy_q(float *y, float w, const uint8_t *row, int hd, int q4) {
    const size_t bs = q4 ? sizeof(block_q4_0) : sizeof(block_q8_0);
    for (int c = 0; c < hd; c += 32, row += bs) {
        __m256 v[4];
        qblock_vals(row, q4, v);
        const __m256 wd = _mm256_set1_ps(w * h2f(row));
        UNROLL for (int u = 0; u < 4; u++)
            _mm256_storeu_ps(y + c + 8 * u, _mm256_fmadd_ps(wd, v[u], _mm256_loadu_ps(y + c + 8 * u)));
    }
}

/* ---- the KV table: head widths the SIMD forms do not cover (f32 / f16 not
 * a multiple of 8, q8_0 / q4_0 not a multiple of 32) take the portable ones */

#define KV_SCALAR(T) (kernels_scalar_set.kv[T])

TARGET static float kv_f32_dot(const float *q, const void *row, int hd) { return kernels_dot_f32_avx2(q, row, hd); }
TARGET static float kv_f16_dot(const float *q, const void *row, int hd) { return dot_f16(q, row, hd); }
TARGET static void kv_f32_axpy(float *y, float w, const void *row, int hd) { axpy_f32(y, w, row, hd); }
TARGET static void kv_f16_axpy(float *y, float w, const void *row, int hd) { axpy_f16(y, w, row, hd); }
static void kv_f32_to_f32(const void *rows, int n, int hd, float *dst) {
    memcpy(dst, rows, (size_t)n * hd * sizeof(float));
}
TARGET static void kv_f16_to_f32(const void *rows, int n, int hd, float *dst) {
    dequant_f16(rows, dst, (int64_t)n * hd);
}

TARGET static void kv_f32_scores(const float *q, int g, const void *keys, int n, int hd, float scale, float *s,
                                 int ld) {
    if (hd % 8) KV_SCALAR(SUBQ_KV_F32).scores(q, g, keys, n, hd, scale, s, ld);
    else scores_rows(q, g, keys, n, hd, scale, s, ld, 0);
}

TARGET static void kv_f16_scores(const float *q, int g, const void *keys, int n, int hd, float scale, float *s,
                                 int ld) {
    if (hd % 8) KV_SCALAR(SUBQ_KV_F16).scores(q, g, keys, n, hd, scale, s, ld);
    else scores_rows(q, g, keys, n, hd, scale, s, ld, 1);
}

TARGET static void kv_f32_accum(const float *p, int g, int ld, const void *vals, int n, int hd, float *out) {
    if (hd % 8) KV_SCALAR(SUBQ_KV_F32).accum(p, g, ld, vals, n, hd, out);
    else accum_rows(p, g, ld, vals, n, hd, out, 0);
}

TARGET static void kv_f16_accum(const float *p, int g, int ld, const void *vals, int n, int hd, float *out) {
    if (hd % 8) KV_SCALAR(SUBQ_KV_F16).accum(p, g, ld, vals, n, hd, out);
    else accum_rows(p, g, ld, vals, n, hd, out, 1);
}

/* q8_0 / q4_0 entries: NAME = kv_q8_0 or kv_q4_0, Q4 = 0 or 1, T the KV type */
#define KV_QUANT_OPS(NAME, Q4, T, GT)                                                                             \
    TARGET static float NAME##_dot(const float *q, const void *row, int hd) {                                     \
        return hd % 32 ? KV_SCALAR(T).dot(q, row, hd) : dot_##GT(row, q, hd);                                     \
    }                                                                                                             \
    TARGET static void NAME##_axpy(float *y, float w, const void *row, int hd) {                                  \
        if (hd % 32) KV_SCALAR(T).axpy(y, w, row, hd);                                                            \
        else axpy_q(y, w, row, hd, Q4);                                                                           \
    }                                                                                                             \
    TARGET static void NAME##_to_f32(const void *rows, int n, int hd, float *dst) {                               \
        if (hd % 32) KV_SCALAR(T).to_f32(rows, n, hd, dst);                                                       \
        else dequant_##GT(rows, dst, (int64_t)n * hd);                                                            \
    }                                                                                                             \
    TARGET static void NAME##_scores(const float *q, int g, const void *keys, int n, int hd, float scale,         \
                                     float *s, int ld) {                                                          \
        if (hd % 32 || hd > QMAX) KV_SCALAR(T).scores(q, g, keys, n, hd, scale, s, ld);                          \
        else scores_q(q, g, keys, n, hd, scale, s, ld, Q4);                                                       \
    }                                                                                                             \
    TARGET static void NAME##_accum(const float *p, int g, int ld, const void *vals, int n, int hd, float *out) { \
        if (hd % 32) KV_SCALAR(T).accum(p, g, ld, vals, n, hd, out);                                              \
        else accum_q(p, g, ld, vals, n, hd, out, Q4);                                                             \
    }                                                                                                             \
    TARGET static void NAME##_gather_dot(const float *q, const void *base, size_t stride, int d,                  \
                                         const int32_t *idx, int n, float *out) {                                 \
        const size_t rb = kernels_kv_row_bytes(T, d) * (stride / (size_t)d);                                      \
        for (int i = 0; i < n; i++) out[i] = NAME##_dot(q, (const char *)base + (size_t)idx[i] * rb, d);          \
    }

/* q8_0 rows as the portable form writes them (kernels_kv_from_f32): per
 * block of 32, d = max|x| / 127 and q = roundf(x * (1 / d)), the ties away
 * from zero. round_ps has no such mode: truncate, then step one away from
 * zero where the dropped part (y - trunc(y), exact) is at least a half. */
TARGET static void q8_0_row_from_f32(const float *x, uint8_t *b, int hd) {
    const __m256 sign = _mm256_set1_ps(-0.0f), half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
    for (int c0 = 0; c0 < hd; c0 += 32, b += 2 + 32) {
        __m256 v[4];
        const float d = load_absmax32(x + c0, v) / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        quant_wr16(b, fp32_to_fp16(d));
        const __m256 vid = _mm256_set1_ps(id);
        __m256i i[4];
        UNROLL for (int k = 0; k < 4; k++) {
            const __m256 y = _mm256_mul_ps(v[k], vid);
            const __m256 t = _mm256_round_ps(y, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
            const __m256 tie = _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_sub_ps(y, t)), half, _CMP_GE_OQ);
            const __m256 step = _mm256_and_ps(tie, _mm256_or_ps(_mm256_and_ps(y, sign), one)); /* +-1 or 0 */
            i[k] = _mm256_cvttps_epi32(_mm256_add_ps(t, step));
        }
        store_i8x32((int8_t *)b + 2, i);
    }
}

TARGET static void kv_f32_from_f32(const float *x, void *row, int hd) { memcpy(row, x, (size_t)hd * sizeof(float)); }
TARGET static void kv_f16_from_f32(const float *x, void *row, int hd) { f32_to_f16(x, row, hd); }
TARGET static void kv_q8_0_from_f32(const float *x, void *row, int hd) {
    if (hd % 32) KV_SCALAR(SUBQ_KV_Q8_0).from_f32(x, row, hd);
    else q8_0_row_from_f32(x, row, hd);
}
/* q4_0 keeps the portable form: no prefill measured here stores q4_0 rows */
static void kv_q4_0_from_f32(const float *x, void *row, int hd) { KV_SCALAR(SUBQ_KV_Q4_0).from_f32(x, row, hd); }

KV_QUANT_OPS(kv_q8_0, 0, SUBQ_KV_Q8_0, q8_0)
KV_QUANT_OPS(kv_q4_0, 1, SUBQ_KV_Q4_0, q4_0)

/* Four independent running maxima (one maxss chain would wait on each
 * result); max_ps(x, m) keeps m where x is NaN, as the scalar compare does. */
TARGET static float max_f32(const float *x, int n, float mx) {
    __m256 m0 = _mm256_set1_ps(mx), m1 = m0, m2 = m0, m3 = m0;
    int j = 0;
    for (; j + 32 <= n; j += 32) {
        m0 = _mm256_max_ps(_mm256_loadu_ps(x + j), m0);
        m1 = _mm256_max_ps(_mm256_loadu_ps(x + j + 8), m1);
        m2 = _mm256_max_ps(_mm256_loadu_ps(x + j + 16), m2);
        m3 = _mm256_max_ps(_mm256_loadu_ps(x + j + 24), m3);
    }
    for (; j + 8 <= n; j += 8) m0 = _mm256_max_ps(_mm256_loadu_ps(x + j), m0);
    m0 = _mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3));
    float lanes[8];
    _mm256_storeu_ps(lanes, m0);
    for (int i = 0; i < 8; i++) mx = lanes[i] > mx ? lanes[i] : mx;
    for (; j < n; j++) mx = x[j] > mx ? x[j] : mx;
    return mx;
}

/* exp(v) for v in [-87, 88] as in Cephes expf: v = n ln2 + r with |r| <=
 * ln2/2 (ln2 in two parts), exp(r) = 1 + r + r^2 P(r) with P of degree 5
 * (relative error ~1e-7), times 2^n built in the exponent bits. */
enum { EXP_LOG2E, EXP_LN2_HI, EXP_LN2_LO, EXP_P0 };
static const float exp_consts[EXP_P0 + 6] = {1.44269504088896341f, 0.693359375f, -2.12194440e-4f,
                                             1.9875691500e-4f,     1.3981999507e-3f, 8.3334519073e-3f,
                                             4.1665795894e-2f,     1.6666665459e-1f, 5.0000001201e-1f};

INLINE __m256 exp8(__m256 v) {
    __m256 fn = _mm256_round_ps(_mm256_mul_ps(v, _mm256_set1_ps(exp_consts[EXP_LOG2E])),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(fn, _mm256_set1_ps(exp_consts[EXP_LN2_LO]),
                                _mm256_fnmadd_ps(fn, _mm256_set1_ps(exp_consts[EXP_LN2_HI]), v));
    __m256 y = _mm256_set1_ps(exp_consts[EXP_P0]);
    UNROLL for (int i = 1; i < 6; i++) y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(exp_consts[EXP_P0 + i]));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fn), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

/* exp8 with 16 lanes (2^n by vscalefps, exact as the exponent bits) */
KERNELS_AVX512_INLINE __m512 exp16(__m512 v) {
    __m512 fn = _mm512_roundscale_ps(_mm512_mul_ps(v, _mm512_set1_ps(exp_consts[EXP_LOG2E])),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(fn, _mm512_set1_ps(exp_consts[EXP_LN2_LO]),
                                _mm512_fnmadd_ps(fn, _mm512_set1_ps(exp_consts[EXP_LN2_HI]), v));
    __m512 y = _mm512_set1_ps(exp_consts[EXP_P0]);
    UNROLL for (int i = 1; i < 6; i++) y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(exp_consts[EXP_P0 + i]));
    y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(y, fn);
}

/* exp_shift_sum below, 16 lanes at a time (the softmax rows of prefill
 * attention and of the teacher: long enough to pay for the wider unit) */
KERNELS_AVX512 static float exp_shift_sum_512(float *x, int n, float mx) {
    const __m512 vmx = _mm512_set1_ps(mx), lo = _mm512_set1_ps(-87.0f);
    __m512 sum = _mm512_setzero_ps();
    int j = 0;
    for (; j + 16 <= n; j += 16) {
        __m512 v = _mm512_sub_ps(_mm512_loadu_ps(x + j), vmx);
        __mmask16 keep = _mm512_cmp_ps_mask(v, lo, _CMP_GE_OQ); /* false for -inf and NaN */
        __m512 y = _mm512_maskz_mov_ps(keep, exp16(_mm512_max_ps(v, lo)));
        _mm512_storeu_ps(x + j, y);
        sum = _mm512_add_ps(sum, y);
    }
    float s = _mm512_reduce_add_ps(sum);
    for (; j < n; j++) s += x[j] = expf(x[j] - mx);
    return s;
}

/* exp8 of x - mx, x below mx - 87 (and -inf) giving 0 */
TARGET static float exp_shift_sum(float *x, int n, float mx) {
    if (n >= 64 && cpu_has_avx512vnni()) return exp_shift_sum_512(x, n, mx);
    const __m256 vmx = _mm256_set1_ps(mx), lo = _mm256_set1_ps(-87.0f);
    __m256 sum = _mm256_setzero_ps();
    int j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 v = _mm256_sub_ps(_mm256_loadu_ps(x + j), vmx);
        __m256 keep = _mm256_cmp_ps(v, lo, _CMP_GE_OQ); /* false for -inf and NaN */
        __m256 y = _mm256_and_ps(exp8(_mm256_max_ps(v, lo)), keep);
        _mm256_storeu_ps(x + j, y);
        sum = _mm256_add_ps(sum, y);
    }
    float s = kernels_hsum8(sum);
    for (; j < n; j++) s += x[j] = expf(x[j] - mx);
    return s;
}

/* log(x) for normal x > 0 as in Cephes logf: x = m 2^e with m in
 * [sqrt(1/2), sqrt(2)), log(m) = (m - 1) - (m - 1)^2 / 2 + (m - 1)^3 P(m - 1)
 * (relative error ~1e-7), plus e ln 2 in two parts. */
INLINE __m256 log8(__m256 x) {
    const __m256 one = _mm256_set1_ps(1.0f), half = _mm256_set1_ps(0.5f);
    __m256i xi = _mm256_castps_si256(x);
    __m256 e = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(xi, 23), _mm256_set1_epi32(126)));
    __m256 m = _mm256_castsi256_ps( /* mantissa in [0.5, 1) */
        _mm256_or_si256(_mm256_and_si256(xi, _mm256_set1_epi32(0x007FFFFF)), _mm256_set1_epi32(0x3F000000)));
    const __m256 small = _mm256_cmp_ps(m, _mm256_set1_ps(0.707106781186547524f), _CMP_LT_OQ);
    e = _mm256_sub_ps(e, _mm256_and_ps(one, small));
    m = _mm256_sub_ps(_mm256_add_ps(m, _mm256_and_ps(m, small)), one);
    const __m256 z = _mm256_mul_ps(m, m);
    __m256 y = _mm256_set1_ps(7.0376836292E-2f);
    y = _mm256_fmadd_ps(y, m, _mm256_set1_ps(-1.1514610310E-1f));
    y = _mm256_fmadd_ps(y, m, _mm256_set1_ps(1.1676998740E-1f));
    y = _mm256_fmadd_ps(y, m, _mm256_set1_ps(-1.2420140846E-1f));
    y = _mm256_fmadd_ps(y, m, _mm256_set1_ps(1.4249322787E-1f));
    y = _mm256_fmadd_ps(y, m, _mm256_set1_ps(-1.6668057665E-1f));
    y = _mm256_fmadd_ps(y, m, _mm256_set1_ps(2.0000714765E-1f));
    y = _mm256_fmadd_ps(y, m, _mm256_set1_ps(-2.4999993993E-1f));
    y = _mm256_fmadd_ps(y, m, _mm256_set1_ps(3.3333331174E-1f));
    y = _mm256_mul_ps(_mm256_mul_ps(y, m), z);
    y = _mm256_fmadd_ps(e, _mm256_set1_ps(-2.12194440e-4f), y);
    y = _mm256_fnmadd_ps(z, half, y);
    return _mm256_fmadd_ps(e, _mm256_set1_ps(0.693359375f), _mm256_add_ps(m, y));
}

/* kl_sum: the terms in float, 8 at a time, summed in double */
TARGET static double kl_sum(const float *p, const float *y, float shift, int n) {
    const __m256 tiny = _mm256_set1_ps(FLT_MIN), vs = _mm256_set1_ps(shift);
    __m256d s0 = _mm256_setzero_pd(), s1 = s0;
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 pv = _mm256_loadu_ps(p + i);
        const __m256 keep = _mm256_cmp_ps(pv, tiny, _CMP_GE_OQ);
        const __m256 lp = log8(_mm256_max_ps(pv, tiny));
        const __m256 t = _mm256_and_ps(_mm256_mul_ps(pv, _mm256_add_ps(_mm256_sub_ps(lp, _mm256_loadu_ps(y + i)), vs)), keep);
        s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(t)));
        s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(t, 1)));
    }
    double lanes[4], s = 0.0;
    _mm256_storeu_pd(lanes, _mm256_add_pd(s0, s1));
    for (int l = 0; l < 4; l++) s += lanes[l];
    for (; i < n; i++)
        if (p[i] > 0.0f) s += (double)p[i] * ((double)logf(p[i]) - (double)y[i] + (double)shift);
    return s;
}

/* glibc's libmvec, 4 doubles a call (the x86-64 vector function ABI's AVX2
 * variants of exp and log) */
TARGET __m256d _ZGVdN4v_exp(__m256d x);
TARGET __m256d _ZGVdN4v_log(__m256d x);

TARGET static void exp_f64(double *x, int n) {
    int i = 0;
    for (; i + 4 <= n; i += 4) _mm256_storeu_pd(x + i, _ZGVdN4v_exp(_mm256_loadu_pd(x + i)));
    for (; i < n; i++) x[i] = exp(x[i]);
}

TARGET static void log_f64(double *x, int n) {
    int i = 0;
    for (; i + 4 <= n; i += 4) _mm256_storeu_pd(x + i, _ZGVdN4v_log(_mm256_loadu_pd(x + i)));
    for (; i < n; i++) x[i] = log(x[i]);
}

/* g / (1 + exp(-g)) * u, exp's argument clamped to [-87, 87]: beyond, the
 * result is g * u to float precision, or below 1e-35 |g u| where it is ~0 */
TARGET static void silu_mul(float *g, const float *u, size_t n) {
    const __m256 lo = _mm256_set1_ps(-87.0f), hi = _mm256_set1_ps(87.0f), one = _mm256_set1_ps(1.0f);
    size_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 x = _mm256_loadu_ps(g + j);
        __m256 e = exp8(_mm256_min_ps(_mm256_max_ps(_mm256_sub_ps(_mm256_setzero_ps(), x), lo), hi));
        _mm256_storeu_ps(g + j, _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(one, e)), _mm256_loadu_ps(u + j)));
    }
    for (; j < n; j++) g[j] = g[j] / (1.0f + expf(-g[j])) * u[j];
}

/* gelu(g) * u as silu_mul, the sigmoid's argument 2 sqrt(2/pi) (x + 0.044715 x^3) */
TARGET static void gelu_mul(float *g, const float *u, size_t n) {
    const __m256 lo = _mm256_set1_ps(-87.0f), hi = _mm256_set1_ps(87.0f), one = _mm256_set1_ps(1.0f);
    const __m256 c = _mm256_set1_ps(-1.5957691216057308f), c3 = _mm256_set1_ps(0.044715f);
    size_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 x = _mm256_loadu_ps(g + j);
        __m256 y = _mm256_mul_ps(c, _mm256_fmadd_ps(_mm256_mul_ps(c3, x), _mm256_mul_ps(x, x), x));
        __m256 e = exp8(_mm256_min_ps(_mm256_max_ps(y, lo), hi));
        _mm256_storeu_ps(g + j, _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(one, e)), _mm256_loadu_ps(u + j)));
    }
    for (; j < n; j++) {
        const float x = g[j], y2 = 1.5957691216057308f * (x + 0.044715f * x * x * x);
        g[j] = x / (1.0f + expf(-y2)) * u[j];
    }
}

/* c tanh(x / c) = c (1 - 2 / (1 + exp(2 x / c))), exp's argument clamped
 * to [-87, 87] (tanh is +-1 to float precision well before); -inf lanes
 * (masked keys) are kept */
TARGET static void softcap(float *x, size_t n, float c) {
    const __m256 lo = _mm256_set1_ps(-87.0f), hi = _mm256_set1_ps(87.0f), one = _mm256_set1_ps(1.0f);
    const __m256 two = _mm256_set1_ps(2.0f), vc = _mm256_set1_ps(c), k = _mm256_set1_ps(2.0f / c);
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    size_t j = 0;
    for (; j + 8 <= n; j += 8) {
        const __m256 v = _mm256_loadu_ps(x + j);
        const __m256 e = exp8(_mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(k, v), lo), hi));
        const __m256 t = _mm256_mul_ps(vc, _mm256_sub_ps(one, _mm256_div_ps(two, _mm256_add_ps(one, e))));
        _mm256_storeu_ps(x + j, _mm256_blendv_ps(t, v, _mm256_cmp_ps(v, ninf, _CMP_EQ_OQ)));
    }
    for (; j < n; j++)
        if (x[j] != -INFINITY) x[j] = c * tanhf(x[j] / c);
}

/* ---- gathered rows -------------------------------------------------------- */

/* Four rows at a time: each q chunk is loaded once for four FMAs and the four
 * horizontal sums share one hadd tree; each row is asked for
 * KERNELS_GATHER_AHEAD rows before its turn. */
INLINE void gather_dot(const float *q, const void *base, size_t stride, int d, const int32_t *idx, int n, float *out,
                       int f16) {
    const size_t row_bytes = stride * (f16 ? sizeof(uint16_t) : sizeof(float));
    const char *b = base;
    const int d8 = d & ~7;
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        const char *r0 = b + (size_t)idx[i] * row_bytes, *r1 = b + (size_t)idx[i + 1] * row_bytes;
        const char *r2 = b + (size_t)idx[i + 2] * row_bytes, *r3 = b + (size_t)idx[i + 3] * row_bytes;
        for (int u = i + KERNELS_GATHER_AHEAD; u < i + KERNELS_GATHER_AHEAD + 4 && u < n; u++)
            prefetch_span(b, (size_t)idx[u] * row_bytes, (size_t)d * (f16 ? sizeof(uint16_t) : sizeof(float)));
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int c = 0; c < d8; c += 8) {
            __m256 qv = _mm256_loadu_ps(q + c);
            a0 = _mm256_fmadd_ps(qv, load8(r0, c, f16), a0);
            a1 = _mm256_fmadd_ps(qv, load8(r1, c, f16), a1);
            a2 = _mm256_fmadd_ps(qv, load8(r2, c, f16), a2);
            a3 = _mm256_fmadd_ps(qv, load8(r3, c, f16), a3);
        }
        float s[4];
        _mm_storeu_ps(s, hsum4(a0, a1, a2, a3));
        for (int c = d8; c < d; c++) {
            s[0] += q[c] * load1(r0, c, f16);
            s[1] += q[c] * load1(r1, c, f16);
            s[2] += q[c] * load1(r2, c, f16);
            s[3] += q[c] * load1(r3, c, f16);
        }
        for (int u = 0; u < 4; u++) out[i + u] = s[u];
    }
    for (; i < n; i++) {
        const char *r = b + (size_t)idx[i] * row_bytes;
        __m256 a = _mm256_setzero_ps();
        for (int c = 0; c < d8; c += 8) a = _mm256_fmadd_ps(_mm256_loadu_ps(q + c), load8(r, c, f16), a);
        float s = kernels_hsum8(a);
        for (int c = d8; c < d; c++) s += q[c] * load1(r, c, f16);
        out[i] = s;
    }
}

TARGET static void gather_dot_f32(const float *q, const void *base, size_t stride, int d, const int32_t *idx, int n,
                                  float *out) {
    gather_dot(q, base, stride, d, idx, n, out, 0);
}

TARGET static void gather_dot_f16(const float *q, const void *base, size_t stride, int d, const int32_t *idx, int n,
                                  float *out) {
    gather_dot(q, base, stride, d, idx, n, out, 1);
}

/* f32 dequantisation is a copy; the reference one is as fast as it gets. */
static void dequant_f32(const void *src, float *dst, int64_t n) { memcpy(dst, src, (size_t)n * sizeof(float)); }

static const quant_dequant_fn dequant_avx2[GGML_TYPE_COUNT] = {
    [GGML_TYPE_F32] = dequant_f32,   [GGML_TYPE_F16] = dequant_f16,   [GGML_TYPE_BF16] = dequant_bf16,
    [GGML_TYPE_Q8_0] = dequant_q8_0, [GGML_TYPE_Q4_0] = dequant_q4_0, [GGML_TYPE_Q4_K] = dequant_q4_K,
    [GGML_TYPE_Q5_K] = dequant_q5_K, [GGML_TYPE_Q6_K] = dequant_q6_K,
};

const kernels kernels_avx2_set = {
    .name = "avx2",
    .dequant = dequant_avx2,
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
    .dot_xs =
        {
            [GGML_TYPE_Q4_K] = dot_xs_q4_K,
            [GGML_TYPE_Q5_K] = dot_xs_q5_K,
        },
    .quantize_q8 = quantize_q8,
    .gemm_q8 =
        {
            [GGML_TYPE_Q8_0] = gemm_q8_q8_0,
            [GGML_TYPE_Q4_0] = gemm_q8_q4_0,
        },
    .gemv_q8 =
        {
            [GGML_TYPE_Q8_0] = gemv_q8_q8_0,
            [GGML_TYPE_Q4_0] = gemv_q8_q4_0,
            [GGML_TYPE_Q4_K] = gemv_q8_q4_K,
            [GGML_TYPE_Q6_K] = gemv_q8_q6_K,
        },
    .dot_f32 = kernels_dot_f32_avx2,
    .dot_f16 = dot_f16,
    .dot_f16f16 = dot_f16f16,
    .f32_to_f16 = f32_to_f16,
    .index_at_least = index_at_least,
    .axpy_f32 = axpy_f32,
    .axpy_f16 = axpy_f16,
    .exp_shift_sum = exp_shift_sum,
    .silu_mul = silu_mul,
    .gelu_mul = gelu_mul,
    .softcap = softcap,
    .kl_sum = kl_sum,
    .exp_f64 = exp_f64,
    .log_f64 = log_f64,
    .max_f32 = max_f32,
    .gather_dot_f32 = gather_dot_f32,
    .gather_dot_f16 = gather_dot_f16,
    .kv =
        {
            [SUBQ_KV_F32] = {kv_f32_dot, kv_f32_axpy, kv_f32_to_f32, kv_f32_scores,
                             kv_f32_accum, gather_dot_f32, kv_f32_from_f32},
            [SUBQ_KV_F16] = {kv_f16_dot, kv_f16_axpy, kv_f16_to_f32, kv_f16_scores,
                             kv_f16_accum, gather_dot_f16, kv_f16_from_f32},
            [SUBQ_KV_Q8_0] = {kv_q8_0_dot, kv_q8_0_axpy, kv_q8_0_to_f32, kv_q8_0_scores,
                              kv_q8_0_accum, kv_q8_0_gather_dot, kv_q8_0_from_f32},
            [SUBQ_KV_Q4_0] = {kv_q4_0_dot, kv_q4_0_axpy, kv_q4_0_to_f32, kv_q4_0_scores,
                              kv_q4_0_accum, kv_q4_0_gather_dot, kv_q4_0_from_f32},
        },
};

#endif /* KERNELS_HAVE_AVX2 */
