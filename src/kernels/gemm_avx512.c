/* The integer GEMM of prefill (kernels.h: gemm_q8) and GEMV of decode
 * (gemv_q8) with AVX-512 VNNI, for CPUs that have it (kernels_gemm_q8 and
 * kernels_gemv_q8 pick them over the AVX2 set's).
 *
 * vpdpbusd multiplies unsigned by signed bytes and adds groups of four into
 * 32-bit lanes without saturating. In the GEMM the activations, reused by
 * every weight row, go in offset: q ^ 0x80 = q + 128 (unsigned), and
 *   sum_j (q_j + 128) w_j = sum_j q_j w_j + 128 sum_j w_j,
 * where the second term depends on the weights alone: the weight side of a
 * group of 16 rows is prepared once per chunk of tokens (below). The GEMV
 * reads each weight once and moves the sign instead (below). Results are
 * the exact integer block sums, as in the other sets; only the float
 * scaling rounds. */
#include "kernels/kernels.h"

#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "kernels/dot.h"
#include "kernels/gemv_q8_rows.h"

#ifdef KERNELS_HAVE_AVX2

#define AVX512 KERNELS_AVX512
#define INLINE512 KERNELS_AVX512_INLINE
#define UNROLL _Pragma("GCC unroll 16")

/* A block's 32 values as signed bytes, in element order. */
INLINE512 __m256i q8_0_bytes(const block_q8_0 *b) { return _mm256_loadu_si256((const __m256i *)b->qs); }
/* The 32 stored nibbles of a q4_0 block (w + 8) as unsigned bytes in element order */
INLINE512 __m256i q4_0_nibbles(const block_q4_0 *b) {
    const __m128i t = _mm_loadu_si128((const __m128i *)b->qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(0xF));
}
INLINE512 __m256i q4_0_bytes(const block_q4_0 *b) {
    return _mm256_sub_epi8(q4_0_nibbles(b), _mm256_set1_epi8(8));
}

/* ---- GEMM (prefill: many activation rows) ---------------------------------
 *
 * Sixteen weight rows lie side by side in the 16 lanes. A block of 32
 * values of 16 rows is prepared once per chunk of tokens as 8 vectors,
 * vector j holding in lane i row i's values 4j .. 4j + 3 (a 16 x 8
 * transpose of 32-bit words), with each lane's start (-128 x the sum of its
 * row's 32 values) and the 16 rows' scales. A token's block then costs 8
 * vpdpbusd, one per 4-byte group of its activations broadcast to every
 * lane, which leave the 16 rows' exact integer block sums, then one convert
 * and one multiply-add by dw dx: 11 instructions for 16 x 32 products,
 * against 4 for 2 x 32 with a row's block pair in one vector (all lanes one
 * row, then a horizontal sum), which held prefill at 16% of the unit's
 * peak. The 16 results of a token are one store. */
enum { GROUP_ROWS = 16, TILE_TOK = 8 };

/* A block of 16 rows, prepared. */
typedef struct wgroup {
    __m512i w[8];      /* lane i: values 4j .. 4j + 3 of row i's block (Q8_0, Q4_0: signed; K-quants: unsigned) */
    __m512 a;          /* per lane (row), 0 past the group's rows: Q8_0, Q4_0: dw; K-quants: see below */
    union {
        __m512i start; /* Q8_0, Q4_0: lane i: -128 x the sum of row i's 32 values */
        __m512 b;      /* K-quants: see below */
    };
} wgroup;

/* K-quant weights, per 32-value block of a super-block of 256:
 * Q4_K: a sub-block s of 32 holds w = d sc_s q - dmin m_s, q in 0..15, so
 * against a q8 activation block (scale dx, bytes xq)
 *   sum_j w_j x_j = dx (d sc_s sum_j q_j xq_j - dmin m_s sum_j xq_j):
 * the nibbles go into vpdpbusd as its unsigned side as they are, and each
 * token block's dx sum_j xq_j is made once per chunk (a = d sc_s,
 * b = dmin m_s).
 * Q6_K: a block of 32 spans two sub-blocks of 16, w = d sc (q - 32) with q
 * in 0..63: vectors 0..3 hold the first sub-block, 4..7 the second, each
 * summed on its own from a start of -32 x the token's byte sum over those 16
 * (exact integers: sum_j (q_j - 32) xq_j), then scaled by dx and a = d sc
 * of the first, b = d sc of the second. */

/* Block b (of 32 values) of row i: its bytes into bytes[..][i][..], its
 * scales into a[i], bb[i]. */
INLINE512 void q8_0_block(const char *row, int64_t b, int i, uint8_t bytes[8][GROUP_ROWS][4], float *a, float *bb) {
    const block_q8_0 *blk = (const block_q8_0 *)row + b;
    for (int j = 0; j < 8; j++) memcpy(bytes[j][i], blk->qs + 4 * j, 4);
    a[i] = fp16_to_fp32(quant_rd16(blk->d));
    (void)bb;
}

INLINE512 void q4_0_block(const char *row, int64_t b, int i, uint8_t bytes[8][GROUP_ROWS][4], float *a, float *bb) {
    const block_q4_0 *blk = (const block_q4_0 *)row + b;
    _Alignas(32) uint8_t v[32];
    _mm256_store_si256((__m256i *)v, q4_0_bytes(blk));
    for (int j = 0; j < 8; j++) memcpy(bytes[j][i], v + 4 * j, 4);
    a[i] = fp16_to_fp32(quant_rd16(blk->d));
    (void)bb;
}

INLINE512 void q4_K_block(const char *row, int64_t b, int i, uint8_t bytes[8][GROUP_ROWS][4], float *a, float *bb) {
    const block_q4_K *blk = (const block_q4_K *)row + b / 8;
    const int s = (int)(b % 8), shift = 4 * (s % 2);
    const uint8_t *qs = blk->qs + 32 * (s / 2);
    for (int l = 0; l < 32; l++) bytes[l / 4][i][l % 4] = (uint8_t)((qs[l] >> shift) & 0xF);
    uint8_t sc, m;
    k4_scale_min(s, blk->scales, &sc, &m);
    a[i] = fp16_to_fp32(quant_rd16(blk->d)) * (float)sc;
    bb[i] = fp16_to_fp32(quant_rd16(blk->dmin)) * (float)m;
}

INLINE512 void q6_K_block(const char *row, int64_t b, int i, uint8_t bytes[8][GROUP_ROWS][4], float *a, float *bb) {
    const block_q6_K *blk = (const block_q6_K *)row + b / 8;
    const int bi = (int)(b % 8), h = bi / 4, k = bi % 4;
    for (int l = 0; l < 32; l++) bytes[l / 4][i][l % 4] = (uint8_t)(q6_K_get(blk, h, k, l) + 32);
    const float d = fp16_to_fp32(quant_rd16(blk->d));
    a[i] = d * (float)blk->scales[2 * bi];
    bb[i] = d * (float)blk->scales[2 * bi + 1];
}

/* Rows [0, R) (R <= 16) of blocks [0, nb) into g[b]; lanes past R zero. */
#define GROUP(T, SIGNED)                                                                                      \
    AVX512 static void T##_group(const char *w, size_t rb, int R, int64_t nb, wgroup *g) {                   \
        for (int64_t b = 0; b < nb; b++) {                                                                    \
            _Alignas(64) uint8_t bytes[8][GROUP_ROWS][4] = {{{0}}};                                           \
            _Alignas(64) float a[GROUP_ROWS] = {0}, bb[GROUP_ROWS] = {0};                                     \
            for (int i = 0; i < R; i++) T##_block(w + (size_t)i * rb, b, i, bytes, a, bb);                    \
            __m512i sum = _mm512_setzero_si512();                                                             \
            for (int j = 0; j < 8; j++) {                                                                     \
                g[b].w[j] = _mm512_load_si512(bytes[j]);                                                      \
                if (SIGNED) sum = _mm512_dpbusd_epi32(sum, _mm512_set1_epi8((char)0x80), g[b].w[j]);          \
            }                                                                                                 \
            g[b].a = _mm512_load_ps(a);                                                                       \
            if (SIGNED) g[b].start = _mm512_sub_epi32(_mm512_setzero_si512(), sum);                           \
            else g[b].b = _mm512_load_ps(bb);                                                                 \
        }                                                                                                     \
    }

GROUP(q8_0, 1)
GROUP(q4_0, 1)
GROUP(q4_K, 0)
GROUP(q6_K, 0)

/* One token block of one token (c) for the group's 16 rows, into acc[c]:
 * x4 the token's 8 activation words, dx its block scale, xs its per-block
 * terms (see GEMM_TILE). */
#define q8_STEP                                                                                               \
    do {                                                                                                      \
        __m512i s = gb->start;                                                                                \
        UNROLL for (int j = 0; j < 8; j++) s = _mm512_dpbusd_epi32(s, _mm512_set1_epi32(x4[j]), gb->w[j]);    \
        acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(gb->a, dx), acc[c]);                    \
    } while (0)

#define q4_K_STEP                                                                                             \
    do {                                                                                                      \
        __m512i s = _mm512_setzero_si512();                                                                   \
        UNROLL for (int j = 0; j < 8; j++) s = _mm512_dpbusd_epi32(s, gb->w[j], _mm512_set1_epi32(x4[j]));    \
        acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(gb->a, dx), acc[c]);                    \
        acc[c] = _mm512_fnmadd_ps(gb->b, _mm512_set1_ps(((const float *)xs)[(size_t)c * nb + b]), acc[c]);    \
    } while (0)

#define q6_K_STEP                                                                                             \
    do {                                                                                                      \
        const int32_t *st = (const int32_t *)xs + 2 * ((size_t)c * nb + b);                                   \
        __m512i s0 = _mm512_set1_epi32(st[0]), s1 = _mm512_set1_epi32(st[1]);                                 \
        UNROLL for (int j = 0; j < 4; j++) {                                                                  \
            s0 = _mm512_dpbusd_epi32(s0, gb->w[j], _mm512_set1_epi32(x4[j]));                                 \
            s1 = _mm512_dpbusd_epi32(s1, gb->w[j + 4], _mm512_set1_epi32(x4[j + 4]));                         \
        }                                                                                                     \
        acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s0), _mm512_mul_ps(gb->a, dx), acc[c]);                   \
        acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1), _mm512_mul_ps(gb->b, dx), acc[c]);                   \
    } while (0)

/* 4 activation bytes as one word, read in place (rows are 32-byte multiples) */
typedef int32_t __attribute__((may_alias, aligned(4))) word32;

/* C tokens x the group's rows over every block: activation bytes x (rows n
 * apart: offset to unsigned for Q8_0 and Q4_0, as quantised for the
 * K-quants), block scales xd (nb apart) and the K-quants' per-block terms xs
 * (Q4_K: dx sum xq, nb apart; Q6_K: -32 x the two halves' byte sums, 2 nb
 * apart); the results of token c go to y + c * ldy, the rows of `keep`
 * only. */
#define GEMM_TILE(NAME, STEP, C)                                                                              \
    AVX512 static void NAME##_tile_##C(const wgroup *g, int64_t nb, const uint8_t *x, const float *xd,       \
                                       const void *xs, int64_t n, float *y, int64_t ldy, __mmask16 keep) {   \
        __m512 acc[C];                                                                                        \
        UNROLL for (int c = 0; c < C; c++) acc[c] = _mm512_setzero_ps();                                      \
        for (int64_t b = 0; b < nb; b++) {                                                                    \
            const wgroup *gb = g + b;                                                                         \
            UNROLL for (int c = 0; c < C; c++) {                                                              \
                const word32 *x4 = (const word32 *)(x + (size_t)c * n + 32 * b); /* broadcast from memory */  \
                const __m512 dx = _mm512_set1_ps(xd[(size_t)c * nb + b]);                                     \
                STEP;                                                                                         \
            }                                                                                                 \
        }                                                                                                     \
        (void)xs;                                                                                             \
        UNROLL for (int c = 0; c < C; c++) _mm512_mask_storeu_ps(y + (size_t)c * ldy, keep, acc[c]);          \
    }

GEMM_TILE(q8, q8_STEP, 8)
GEMM_TILE(q8, q8_STEP, 1)
GEMM_TILE(q4_K, q4_K_STEP, 8)
GEMM_TILE(q4_K, q4_K_STEP, 1)
GEMM_TILE(q6_K, q6_K_STEP, 8)
GEMM_TILE(q6_K, q6_K_STEP, 1)

/* The activation side of tokens [t0, t1) into act: Q8_0, Q4_0: the bytes
 * offset to unsigned (x ^ 0x80 = x + 128); K-quants: the per-block terms
 * (see GEMM_TILE). */
AVX512 static void prepare_acts(uint32_t type, const int8_t *xq, const float *xd, int64_t n, int t0, int t1,
                                void *act) {
    const int64_t nb = n / 32;
    if (type == GGML_TYPE_Q8_0 || type == GGML_TYPE_Q4_0) {
        const __m512i flip = _mm512_set1_epi8((char)0x80);
        const size_t bytes = (size_t)(t1 - t0) * n; /* a multiple of 32: the last piece may be half a vector */
        for (size_t i = 0; i < bytes; i += 64) {
            const __mmask64 m = bytes - i >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << (bytes - i)) - 1;
            const __m512i x = _mm512_maskz_loadu_epi8(m, xq + (size_t)t0 * n + i);
            _mm512_mask_storeu_epi8((uint8_t *)act + i, m, _mm512_xor_si512(x, flip));
        }
        return;
    }
    for (int t = t0; t < t1; t++)
        for (int64_t b = 0; b < nb; b++) {
            const int8_t *x = xq + (size_t)t * n + 32 * b;
            int32_t lo = 0, hi = 0;
            for (int l = 0; l < 16; l++) lo += x[l], hi += x[l + 16];
            const size_t at = (size_t)(t - t0) * nb + b;
            if (type == GGML_TYPE_Q4_K) ((float *)act)[at] = xd[(size_t)t * nb + b] * (float)(lo + hi);
            else ((int32_t *)act)[2 * at] = -32 * lo, ((int32_t *)act)[2 * at + 1] = -32 * hi;
        }
}

/* Out of memory for the prepared rows: the same sums from each row's blocks
 * dequantised on the stack, one (row, token) at a time (kernels return no
 * errors). */
static void gemm_fallback(uint32_t type, const void *w, size_t rb, int64_t n_rows, const int8_t *xq,
                          const float *xd, int n_tok, int64_t n, float *y, int64_t ldy) {
    float v[256];
    const int64_t blk = ggml_type_get(type)->block_size;
    const size_t blk_bytes = ggml_row_size(type, blk);
    for (int t = 0; t < n_tok; t++)
        for (int64_t r = 0; r < n_rows; r++) {
            float acc = 0.0f;
            for (int64_t i0 = 0; i0 < n; i0 += blk) {
                quant_dequant_ref[type]((const char *)w + (size_t)r * rb + (size_t)(i0 / blk) * blk_bytes, v, blk);
                for (int64_t l = 0; l < blk; l++)
                    acc += v[l] * xd[((size_t)t * n + i0 + l) / 32] * xq[(size_t)t * n + i0 + l];
            }
            y[(size_t)t * ldy + r] = acc;
        }
}

/* Tokens go in chunks whose activation side stays in L2; for each group of
 * 16 rows, its prepared blocks (640 bytes each) stay in L1/L2 while every
 * token of the chunk passes them. */
AVX512 static void gemm_512(uint32_t type, const void *w, size_t rb, int64_t n_rows, const int8_t *xq,
                            const float *xd, int n_tok, int64_t n, float *y, int64_t ldy) {
    enum { CHUNK_BYTES = 1 << 19 };
    const int64_t nb = n / 32;
    int chunk = (int)(CHUNK_BYTES / n);
    if (chunk < TILE_TOK) chunk = TILE_TOK;
    if (chunk > n_tok) chunk = n_tok;
    const size_t act_tok = type == GGML_TYPE_Q8_0 || type == GGML_TYPE_Q4_0 ? (size_t)n /* bytes a token */
                           : (size_t)nb * (type == GGML_TYPE_Q4_K ? 1 : 2) * sizeof(int32_t);
    wgroup *g = aligned_alloc(64, (size_t)nb * sizeof(wgroup));
    void *act = aligned_alloc(64, ((size_t)chunk * act_tok + 63) / 64 * 64);
    if (!g || !act) {
        free(g);
        free(act);
        gemm_fallback(type, w, rb, n_rows, xq, xd, n_tok, n, y, ldy);
        return;
    }
    for (int t0 = 0; t0 < n_tok; t0 += chunk) {
        const int t1 = t0 + chunk < n_tok ? t0 + chunk : n_tok;
        prepare_acts(type, xq, xd, n, t0, t1, act);
        for (int64_t r = 0; r < n_rows; r += GROUP_ROWS) {
            const int R = n_rows - r < GROUP_ROWS ? (int)(n_rows - r) : GROUP_ROWS;
            const __mmask16 keep = (__mmask16)((1u << R) - 1);
            const char *wr = (const char *)w + (size_t)r * rb;
            switch (type) {
            case GGML_TYPE_Q8_0: q8_0_group(wr, rb, R, nb, g); break;
            case GGML_TYPE_Q4_0: q4_0_group(wr, rb, R, nb, g); break;
            case GGML_TYPE_Q4_K: q4_K_group(wr, rb, R, nb, g); break;
            default: q6_K_group(wr, rb, R, nb, g); break;
            }
            for (int t = t0; t < t1;) {
                const int C = t + TILE_TOK <= t1 ? TILE_TOK : 1;
                const uint8_t *xt = (const uint8_t *)xq + (size_t)t * n;
                const void *at = (const char *)act + (size_t)(t - t0) * act_tok;
                const float *dt = xd + (size_t)t * nb;
                float *yt = y + (size_t)t * ldy + r;
                switch (type) {
                case GGML_TYPE_Q8_0:
                case GGML_TYPE_Q4_0: (C == TILE_TOK ? q8_tile_8 : q8_tile_1)(g, nb, at, dt, NULL, n, yt, ldy, keep); break;
                case GGML_TYPE_Q4_K: (C == TILE_TOK ? q4_K_tile_8 : q4_K_tile_1)(g, nb, xt, dt, at, n, yt, ldy, keep); break;
                default: (C == TILE_TOK ? q6_K_tile_8 : q6_K_tile_1)(g, nb, xt, dt, at, n, yt, ldy, keep); break;
                }
                t += C;
            }
        }
    }
    free(g);
    free(act);
}

#define GEMM_TYPE(T, TYPE)                                                                                    \
    static void gemm_##T(const void *w, size_t rb, int64_t n_rows, const int8_t *xq, const float *xd,        \
                         int n_tok, int64_t n, float *y, int64_t ldy) {                                      \
        gemm_512(TYPE, w, rb, n_rows, xq, xd, n_tok, n, y, ldy);                                              \
    }

GEMM_TYPE(q8_0, GGML_TYPE_Q8_0)
GEMM_TYPE(q4_0, GGML_TYPE_Q4_0)
GEMM_TYPE(q4_K, GGML_TYPE_Q4_K)
GEMM_TYPE(q6_K, GGML_TYPE_Q6_K)

/* ---- GEMV (decode: one activation row) ----------------------------------
 *
 * gemv_q8_rows.h's loops. Each weight is read once, so the activation side
 * stays as quantised (32 bytes and one scale a block, in L1) and a block is
 * one 256-bit vpdpbusd (unsigned x signed bytes, four products a 32-bit
 * lane), then one convert and one multiply-add by dw dx. The weights enter
 * it unsigned:
 *   q8_0: |w| against x sign(w)   (|w| <= 128 fits an unsigned byte);
 *   q4_0: the nibbles as stored, u = w + 8, the lane starting at -8 times
 *         the sum of its four activations (computed once per call):
 *         start + sum_j u_j x_j = sum_j w_j x_j, exact in 32 bits.
 * q4_0 so saves a subtraction, abs and sign a block: on Zen 4 it reads
 * weights 1.13-1.15x faster. The same offset for q8_0 (w + 128) was no
 * faster in decode and 5% slower at 8192 columns, where the starts double
 * what the activations hold in L1. The lane sums are exact, so y does not
 * depend on the form. 256-bit: as fast as 512 on cores that split 512-bit
 * operations, and a row of 32-byte blocks needs no pairing (measured on
 * Zen 4: a 512-bit kernel over prepared pairs of blocks read weights 1.2x
 * slower at 3072 columns and 2x slower at 8192, where the prepared
 * activations outgrew L1). */

/* acc + the eight lane sums of unsigned bytes u against signed bytes x
 * (four products a lane, exact in 32 bits) */
INLINE512 __m256i u8_lanes(__m256i acc, __m256i u, __m256i x) {
    return _mm256_dpbusd_epi32(acc, u, x);
}

GEMV_LANE_STARTS(INLINE512, u8_lanes)

INLINE512 __m256i q8_0_lanes(const block_q8_0 *b, __m256i x, const int32_t *start) {
    (void)start;
    const __m256i w = q8_0_bytes(b);
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(w), _mm256_sign_epi8(x, w));
}
INLINE512 __m256i q4_0_lanes(const block_q4_0 *b, __m256i x, const int32_t *start) {
    return u8_lanes(_mm256_load_si256((const __m256i *)start), q4_0_nibbles(b), x);
}

#define GEMV_SCALE(b) _cvtsh_ss(quant_rd16((b)->d))

GEMV_Q8_ROWS(q8_0, INLINE512, AVX512, GEMV_SCALE)
GEMV_Q8_ROWS(q4_0, INLINE512, AVX512, GEMV_SCALE)

/* Q4_K and Q6_K: the values as stored against the activations, scales (and
 * Q4_K's mins) per sub-block (gemv_q8_rows.h) */
GEMV_Q4_K_ROWS(INLINE512, AVX512, u8_lanes)
GEMV_Q6_K_ROWS(INLINE512, AVX512, u8_lanes)

static const gemv_q8_fn gemv_avx512[GGML_TYPE_COUNT] = {
    [GGML_TYPE_Q8_0] = gemv_q8_q8_0,
    [GGML_TYPE_Q4_0] = gemv_q8_q4_0,
    [GGML_TYPE_Q4_K] = gemv_q8_q4_K,
    [GGML_TYPE_Q6_K] = gemv_q8_q6_K,
};

const gemv_q8_fn *kernels_gemv_q8_avx512(void) { return cpu_has_avx512vnni() ? gemv_avx512 : NULL; }

static const gemm_q8_fn gemm_avx512[GGML_TYPE_COUNT] = {
    [GGML_TYPE_Q8_0] = gemm_q8_0,
    [GGML_TYPE_Q4_0] = gemm_q4_0,
    [GGML_TYPE_Q4_K] = gemm_q4_K,
    [GGML_TYPE_Q6_K] = gemm_q6_K,
};

const gemm_q8_fn *kernels_gemm_q8_avx512(void) { return cpu_has_avx512vnni() ? gemm_avx512 : NULL; }

#else

const gemm_q8_fn *kernels_gemm_q8_avx512(void) { return NULL; }
const gemv_q8_fn *kernels_gemv_q8_avx512(void) { return NULL; }

#endif
