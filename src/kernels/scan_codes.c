/* Row-scaled int8 / int4 search-key codes and the scan that scores them
 * (format in scan_codes.h): portable C, AVX2 and AVX-512 VNNI forms, all
 * computing the same exact integer sums. */
#include "kernels/scan_codes.h"

#include <math.h>
#include <string.h>

#include "base/cpu.h"
#include "kernels/dot.h"

int scan_codes_width(int bits, int d) {
    if ((bits != 8 && bits != 4) || d < 1 || d > SCAN_CODES_MAX_D) return 0;
    const int unit = bits == 8 ? 32 : 64;
    return (d + unit - 1) / unit * unit;
}

size_t scan_codes_row_bytes(int bits, int d) {
    const int dp = scan_codes_width(bits, d);
    return bits == 8 ? (size_t)dp : (size_t)dp / 2;
}

/* codes k_c = round(x_c / s), s = max|x| / top; returns s */
static float code_values(const float *x, int d, int top, int8_t *k) {
    float amax = 0.0f;
    for (int c = 0; c < d; c++) amax = fabsf(x[c]) > amax ? fabsf(x[c]) : amax;
    const float s = amax / (float)top, inv = s > 0.0f ? 1.0f / s : 0.0f;
    for (int c = 0; c < d; c++) {
        float v = nearbyintf(x[c] * inv);
        k[c] = (int8_t)(v > top ? top : v < -top ? -top : v);
    }
    return s;
}

float scan_codes_encode(int bits, const float *x, int d, uint8_t *row) {
    const int dp = scan_codes_width(bits, d);
    int8_t k[SCAN_CODES_MAX_D] = {0};
    const float s = code_values(x, d, bits == 8 ? 127 : 7, k);
    if (bits == 8) {
        memcpy(row, k, (size_t)dp);
        return s;
    }
    for (int g = 0; g < dp / 64; g++)
        for (int j = 0; j < 32; j++)
            row[32 * g + j] = (uint8_t)((k[64 * g + j] + 8) | (k[64 * g + 32 + j] + 8) << 4);
    return s;
}

void scan_codes_query(int bits, const float *q, int d, scan_query *out) {
    out->bits = bits;
    out->dp = scan_codes_width(bits, d);
    memset(out->code, 0, sizeof out->code);
    out->scale = code_values(q, d, 127, out->code);
    out->sum = 0;
    for (int c = 0; c < d; c++) out->sum += out->code[c];
}

/* ---- portable C ------------------------------------------------------------ */

/* sum_c q_c k_c over one row */
static int32_t row_dot(const scan_query *q, const uint8_t *row) {
    int32_t s = 0;
    if (q->bits == 8) {
        for (int c = 0; c < q->dp; c++) s += q->code[c] * (int8_t)row[c];
        return s;
    }
    for (int g = 0; g < q->dp / 64; g++)
        for (int j = 0; j < 32; j++) {
            const uint8_t b = row[32 * g + j];
            s += q->code[64 * g + j] * ((b & 15) - 8) + q->code[64 * g + 32 + j] * ((b >> 4) - 8);
        }
    return s;
}

static void scores_scalar(const scan_query *q, const uint8_t *rows, const float *row_scale, int n, float *out) {
    const size_t rb = q->bits == 8 ? (size_t)q->dp : (size_t)q->dp / 2;
    for (int j = 0; j < n; j++) out[j] = (float)row_dot(q, rows + (size_t)j * rb) * (row_scale[j] * q->scale);
}

#ifdef KERNELS_HAVE_AVX2

/* ---- AVX2 ------------------------------------------------------------------- */

/* [sum a, sum b, sum c, sum d] of four 8-lane integer vectors */
KERNELS_AVX2_INLINE __m128i hsum4_i32(__m256i a, __m256i b, __m256i c, __m256i d) {
    const __m256i t = _mm256_hadd_epi32(_mm256_hadd_epi32(a, b), _mm256_hadd_epi32(c, d));
    return _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
}

/* Lane sums of q . k over one row. maddubs multiplies unsigned by signed
 * bytes into saturating pairs: int8 codes go in as |k| against q with k's
 * sign (|pair| <= 2 * 127 * 127); int4 nibbles k + 8 go in as they are
 * (pairs <= 2 * 15 * 127), the offset 8 sum(q) taken off by the caller. */
KERNELS_AVX2_INLINE __m256i row_lanes_avx2(const scan_query *q, const uint8_t *row) {
    const __m256i ones = _mm256_set1_epi16(1), lo4 = _mm256_set1_epi8(0xF);
    __m256i acc = _mm256_setzero_si256();
    if (q->bits == 8) {
        for (int c = 0; c < q->dp; c += 32) {
            const __m256i k = _mm256_loadu_si256((const __m256i *)(row + c));
            const __m256i x = _mm256_loadu_si256((const __m256i *)(q->code + c));
            const __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(k), _mm256_sign_epi8(x, k));
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, ones));
        }
        return acc;
    }
    for (int g = 0; g < q->dp / 64; g++) {
        const __m256i k = _mm256_loadu_si256((const __m256i *)(row + 32 * g));
        const __m256i lo = _mm256_and_si256(k, lo4), hi = _mm256_and_si256(_mm256_srli_epi16(k, 4), lo4);
        const __m256i p = _mm256_add_epi16(
            _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(q->code + 64 * g))),
            _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(q->code + 64 * g + 32))));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, ones));
    }
    return acc;
}

KERNELS_AVX2 static void scores_avx2(const scan_query *q, const uint8_t *rows, const float *row_scale, int n,
                                     float *out) {
    const size_t rb = q->bits == 8 ? (size_t)q->dp : (size_t)q->dp / 2;
    const __m128i corr = _mm_set1_epi32(q->bits == 8 ? 0 : -8 * q->sum);
    const __m128 qs = _mm_set1_ps(q->scale);
    int j = 0;
    for (; j + 4 <= n; j += 4) {
        const uint8_t *r = rows + (size_t)j * rb;
        prefetch_span(rows, (size_t)(j + PF_ROWS) * rb, 4 * rb);
        const __m128i s = _mm_add_epi32(corr, hsum4_i32(row_lanes_avx2(q, r), row_lanes_avx2(q, r + rb),
                                                        row_lanes_avx2(q, r + 2 * rb), row_lanes_avx2(q, r + 3 * rb)));
        _mm_storeu_ps(out + j, _mm_mul_ps(_mm_cvtepi32_ps(s), _mm_mul_ps(_mm_loadu_ps(row_scale + j), qs)));
    }
    for (; j < n; j++) out[j] = (float)row_dot(q, rows + (size_t)j * rb) * (row_scale[j] * q->scale);
}

/* ---- AVX-512 VNNI ------------------------------------------------------------ */

#define AVX512 KERNELS_AVX512
#define INLINE512 KERNELS_AVX512_INLINE
#define UNROLL _Pragma("GCC unroll 16")

/* Rows are read in pieces of 64 bytes (the last one may be 32). */
enum { PIECES = SCAN_CODES_MAX_D / 64 };

/* The 16 lane sums of a[r] for r < 16, as one vector (lane r = row r):
 * pairs, then quads, then the four 128-bit lanes folded twice. */
INLINE512 __m512i reduce16(const __m512i a[16]) {
    __m512i t[8], u[4];
    UNROLL for (int i = 0; i < 8; i++)
        t[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(a[2 * i], a[2 * i + 1]), _mm512_unpackhi_epi32(a[2 * i], a[2 * i + 1]));
    UNROLL for (int i = 0; i < 4; i++)
        u[i] = _mm512_add_epi32(_mm512_unpacklo_epi64(t[2 * i], t[2 * i + 1]), _mm512_unpackhi_epi64(t[2 * i], t[2 * i + 1]));
    const __m512i v0 = _mm512_add_epi32(_mm512_shuffle_i32x4(u[0], u[1], 0x88), _mm512_shuffle_i32x4(u[0], u[1], 0xDD));
    const __m512i v1 = _mm512_add_epi32(_mm512_shuffle_i32x4(u[2], u[3], 0x88), _mm512_shuffle_i32x4(u[2], u[3], 0xDD));
    return _mm512_add_epi32(_mm512_shuffle_i32x4(v0, v1, 0x88), _mm512_shuffle_i32x4(v0, v1, 0xDD));
}

/* acc += q . k for one piece k of a row. vpdpbusd multiplies unsigned by
 * signed bytes: int8 codes go in as k ^ 0x80 = k + 128, int4 nibbles as
 * k + 8, the offsets' o sum(q) taken off after the sums. */
INLINE512 __m512i piece(__m512i acc, __m512i k, int bits, const __m512i *qa, const __m512i *qb) {
    if (bits == 8) return _mm512_dpbusd_epi32(acc, _mm512_xor_si512(k, _mm512_set1_epi8((char)0x80)), *qa);
    const __m512i lo4 = _mm512_set1_epi8(0xF);
    acc = _mm512_dpbusd_epi32(acc, _mm512_and_si512(k, lo4), *qa);
    return _mm512_dpbusd_epi32(acc, _mm512_and_si512(_mm512_srli_epi16(k, 4), lo4), *qb);
}

/* Lane sums of q . k over one row of np pieces, the last one of 32 bytes
 * when `half`. */
INLINE512 __m512i row_lanes512(const uint8_t *row, int np, int half, int bits, const __m512i *qa, const __m512i *qb) {
    __m512i acc = _mm512_setzero_si512();
    int p = 0;
    for (; p < np - half; p++) acc = piece(acc, _mm512_loadu_si512(row + 64 * p), bits, qa + p, qb + p);
    if (half) acc = piece(acc, _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)(row + 64 * p))), bits,
                          qa + p, qb + p);
    return acc;
}

INLINE512 void scores512(const scan_query *q, const uint8_t *rows, const float *row_scale, int n, float *out,
                         int bits) {
    const size_t rb = bits == 8 ? (size_t)q->dp : (size_t)q->dp / 2;
    const int np = (int)((rb + 63) / 64), half = rb % 64 != 0;
    /* the query per piece, in the order its key codes come out: int8 as
     * stored; int4 the low nibbles' values (qa: the first halves of groups
     * 2p and 2p + 1) and the high ones' (qb: their second halves) */
    __m512i qa[PIECES], qb[PIECES];
    for (int p = 0; p < np; p++) {
        const int last_half = half && p == np - 1;
        if (bits == 8) {
            qa[p] = _mm512_maskz_loadu_epi8(last_half ? 0xFFFFFFFFull : ~0ull, q->code + 64 * p);
            qb[p] = _mm512_setzero_si512();
            continue;
        }
        const int8_t *g0 = q->code + 128 * p, *g1 = g0 + 64;
        const __m256i z = _mm256_setzero_si256();
        const __m256i a1 = last_half ? z : _mm256_loadu_si256((const __m256i *)g1);
        const __m256i b1 = last_half ? z : _mm256_loadu_si256((const __m256i *)(g1 + 32));
        qa[p] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)g0)), a1, 1);
        qb[p] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(g0 + 32))), b1, 1);
    }
    const int32_t corr = -(bits == 8 ? 128 : 8) * q->sum;
    const __m512 qs = _mm512_set1_ps(q->scale);
    int j = 0;
    for (; j + 16 <= n; j += 16) {
        const uint8_t *r = rows + (size_t)j * rb;
        prefetch_page_ahead(rows, (size_t)j * rb, 16 * rb);
        __m512i acc[16];
        UNROLL for (int k = 0; k < 16; k++) acc[k] = row_lanes512(r + (size_t)k * rb, np, half, bits, qa, qb);
        const __m512i s = _mm512_add_epi32(reduce16(acc), _mm512_set1_epi32(corr));
        _mm512_storeu_ps(out + j, _mm512_mul_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(_mm512_loadu_ps(row_scale + j), qs)));
    }
    for (; j < n; j++) {
        const __m512i acc = row_lanes512(rows + (size_t)j * rb, np, half, bits, qa, qb);
        out[j] = (float)(_mm512_reduce_add_epi32(acc) + corr) * (row_scale[j] * q->scale);
    }
}

AVX512 static void scores_avx512(const scan_query *q, const uint8_t *rows, const float *row_scale, int n,
                                 float *out) {
    if (q->bits == 8) scores512(q, rows, row_scale, n, out, 8);
    else scores512(q, rows, row_scale, n, out, 4);
}

#endif

scan_codes_fn scan_codes_scores_named(const char *name) {
    if (!strcmp(name, "scalar")) return scores_scalar;
#ifdef KERNELS_HAVE_AVX2
    if (!strcmp(name, "avx2") && cpu_has_avx2()) return scores_avx2;
    if (!strcmp(name, "avx512") && cpu_has_avx512vnni()) return scores_avx512;
#endif
    return NULL;
}

scan_codes_fn scan_codes_scores(void) {
    scan_codes_fn f = scan_codes_scores_named("avx512");
    if (!f) f = scan_codes_scores_named("avx2");
    return f ? f : scores_scalar;
}
