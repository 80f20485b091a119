#include "attn/attn_kernels.h"

#include <immintrin.h>
#include <math.h>

#include "base/cpu.h"
#include "quant/quant.h"

/* horizontal sum of 8 lanes */
__attribute__((target("avx2,fma"))) static float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

__attribute__((target("avx2,fma"))) static float dot_f32_avx2(const float *a, const float *b, int n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    float s = hsum256(_mm256_add_ps(s0, s1));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

__attribute__((target("avx2,fma,f16c"))) static float dot_f16_avx2(const float *a, const uint16_t *b, int n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 b0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + i)));
        __m256 b1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + i + 8)));
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), b0, s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), b1, s1);
    }
    for (; i + 8 <= n; i += 8)
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + i))), s0);
    float s = hsum256(_mm256_add_ps(s0, s1));
    for (; i < n; i++) s += a[i] * fp16_to_fp32(b[i]);
    return s;
}

__attribute__((target("avx2,fma"))) static void axpy_f32_avx2(float *y, float w, const float *x, int n) {
    __m256 vw = _mm256_set1_ps(w);
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(vw, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += w * x[i];
}

__attribute__((target("avx2,fma,f16c"))) static void axpy_f16_avx2(float *y, float w, const uint16_t *x, int n) {
    __m256 vw = _mm256_set1_ps(w);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 xv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i)));
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(vw, xv, _mm256_loadu_ps(y + i)));
    }
    for (; i < n; i++) y[i] += w * fp16_to_fp32(x[i]);
}

/* ---- decode over contiguous rows (attn_kernels.h) ---------------------- */

#define AVX2_F16 __attribute__((target("avx2,fma,f16c")))
#define AVX2_INLINE __attribute__((target("avx2,fma,f16c"), always_inline)) static inline

/* 8 values of a cached row at element offset `at`, as floats */
AVX2_INLINE __m256 load8(const void *rows, size_t at, int f16) {
    if (f16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)rows + at)));
    return _mm256_loadu_ps((const float *)rows + at);
}

/* Ask for rows [j0, j1) of a KV head ahead of use: sequential rows of a few
 * hundred bytes each, read in short strides, otherwise leave the hardware
 * prefetcher behind and the loops wait on DRAM. */
AVX2_INLINE void prefetch_rows(const void *rows, int j0, int j1, int n, int hd, int f16) {
    if (j1 > n) j1 = n;
    const size_t esz = f16 ? 2 : 4;
    const char *a = (const char *)rows + (size_t)j0 * hd * esz, *b = (const char *)rows + (size_t)j1 * hd * esz;
    for (; a < b; a += 64) _mm_prefetch(a, _MM_HINT_T0);
}

/* [sum a, sum b, sum c, sum d] of four 8-lane vectors */
AVX2_INLINE __m128 hsum4(__m256 a, __m256 b, __m256 c, __m256 d) {
    __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
    return _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}

/* Two query heads (qa, qb; qb == qa when there is one) against four keys at
 * a time: 8 accumulators, each key chunk converted once for both heads. */
AVX2_INLINE void scores_rows(const float *q, int g, const void *keys, int n, int hd, float scale, float *s, int ld,
                             int f16) {
    const __m128 vs = _mm_set1_ps(scale);
    for (int i0 = 0; i0 < g; i0 += 2) {
        const int two = i0 + 1 < g;
        const float *qa = q + (size_t)i0 * hd, *qb = two ? qa + hd : qa;
        float *sa = s + (size_t)i0 * ld, *sb = two ? sa + ld : NULL;
        int j = 0;
        for (; j + 4 <= n; j += 4) {
            prefetch_rows(keys, j + 32, j + 36, n, hd, f16);
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
 * constant in every call, so the unused head costs nothing. */
AVX2_INLINE void accum_cols32(const float *const *pp, int m, float *o, int hd, int c, const void *vals, int j0,
                              int j1, int f16) {
    __m256 acc[2][4];
    for (int i = 0; i < m; i++)
        for (int u = 0; u < 4; u++) acc[i][u] = _mm256_loadu_ps(o + (size_t)i * hd + c + 8 * u);
    for (int j = j0; j < j1; j++) {
        const size_t r = (size_t)j * hd + c;
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
AVX2_INLINE void accum_cols8(const float *const *pp, int m, float *o, int hd, int c, const void *vals, int j0, int j1,
                             int f16) {
    __m256 acc[2];
    for (int i = 0; i < m; i++) acc[i] = _mm256_loadu_ps(o + (size_t)i * hd + c);
    for (int j = j0; j < j1; j++) {
        __m256 v = load8(vals, (size_t)j * hd + c, f16);
        for (int i = 0; i < m; i++) acc[i] = _mm256_fmadd_ps(_mm256_broadcast_ss(pp[i] + j), v, acc[i]);
    }
    for (int i = 0; i < m; i++) _mm256_storeu_ps(o + (size_t)i * hd + c, acc[i]);
}

/* Keys go in blocks small enough for L1, so the column passes re-read cache. */
AVX2_INLINE void accum_rows(const float *p, int g, int ld, const void *vals, int n, int hd, float *out, int f16) {
    enum { BLOCK = 32 };
    for (int j0 = 0; j0 < n; j0 += BLOCK) {
        const int j1 = j0 + BLOCK < n ? j0 + BLOCK : n;
        prefetch_rows(vals, j0 + BLOCK, j0 + 2 * BLOCK, n, hd, f16);
        for (int i0 = 0; i0 < g; i0 += 2) {
            const float *pp[2] = {p + (size_t)i0 * ld, p + (size_t)(i0 + 1) * ld};
            float *o = out + (size_t)i0 * hd;
            int c = 0;
            if (i0 + 1 < g) {
                for (; c + 32 <= hd; c += 32) accum_cols32(pp, 2, o, hd, c, vals, j0, j1, f16);
                for (; c < hd; c += 8) accum_cols8(pp, 2, o, hd, c, vals, j0, j1, f16);
            } else {
                for (; c + 32 <= hd; c += 32) accum_cols32(pp, 1, o, hd, c, vals, j0, j1, f16);
                for (; c < hd; c += 8) accum_cols8(pp, 1, o, hd, c, vals, j0, j1, f16);
            }
        }
    }
}

/* Generic forms for any head_dim (the AVX2 ones need hd % 8 == 0). */
static void scores_f32_scalar(const float *q, int g, const float *keys, int n, int hd, float scale, float *s, int ld);
static void scores_f16_scalar(const float *q, int g, const uint16_t *keys, int n, int hd, float scale, float *s, int ld);
static void accum_f32_scalar(const float *p, int g, int ld, const float *vals, int n, int hd, float *out);
static void accum_f16_scalar(const float *p, int g, int ld, const uint16_t *vals, int n, int hd, float *out);

AVX2_F16 static void scores_f32_avx2(const float *q, int g, const float *keys, int n, int hd, float scale, float *s,
                                     int ld) {
    if (hd % 8) scores_f32_scalar(q, g, keys, n, hd, scale, s, ld);
    else scores_rows(q, g, keys, n, hd, scale, s, ld, 0);
}

AVX2_F16 static void scores_f16_avx2(const float *q, int g, const uint16_t *keys, int n, int hd, float scale, float *s,
                                     int ld) {
    if (hd % 8) scores_f16_scalar(q, g, keys, n, hd, scale, s, ld);
    else scores_rows(q, g, keys, n, hd, scale, s, ld, 1);
}

AVX2_F16 static void accum_f32_avx2(const float *p, int g, int ld, const float *vals, int n, int hd, float *out) {
    if (hd % 8) accum_f32_scalar(p, g, ld, vals, n, hd, out);
    else accum_rows(p, g, ld, vals, n, hd, out, 0);
}

AVX2_F16 static void accum_f16_avx2(const float *p, int g, int ld, const uint16_t *vals, int n, int hd, float *out) {
    if (hd % 8) accum_f16_scalar(p, g, ld, vals, n, hd, out);
    else accum_rows(p, g, ld, vals, n, hd, out, 1);
}

/* exp(x) for x <= 0 as in Cephes expf: x = n ln2 + r with |r| <= ln2/2,
 * exp(r) by a degree-6 polynomial (relative error ~1e-7), times 2^n built in
 * the exponent bits; x below -87 (and -inf) gives 0. */
AVX2_F16 static float exp_shift_sum_avx2(float *x, int n, float mx) {
    const __m256 vmx = _mm256_set1_ps(mx), lo = _mm256_set1_ps(-87.0f), log2e = _mm256_set1_ps(1.44269504088896341f);
    const __m256 c1 = _mm256_set1_ps(0.693359375f), c2 = _mm256_set1_ps(-2.12194440e-4f);
    const __m256 p0 = _mm256_set1_ps(1.9875691500e-4f), p1 = _mm256_set1_ps(1.3981999507e-3f),
                 p2 = _mm256_set1_ps(8.3334519073e-3f), p3 = _mm256_set1_ps(4.1665795894e-2f),
                 p4 = _mm256_set1_ps(1.6666665459e-1f), p5 = _mm256_set1_ps(5.0000001201e-1f), one = _mm256_set1_ps(1.0f);
    __m256 sum = _mm256_setzero_ps();
    int j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 v = _mm256_sub_ps(_mm256_loadu_ps(x + j), vmx);
        __m256 keep = _mm256_cmp_ps(v, lo, _CMP_GE_OQ); /* false for -inf and NaN */
        v = _mm256_max_ps(v, lo);
        __m256 fn = _mm256_round_ps(_mm256_mul_ps(v, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m256 r = _mm256_fnmadd_ps(fn, c2, _mm256_fnmadd_ps(fn, c1, v));
        __m256 y = _mm256_fmadd_ps(p0, r, p1);
        y = _mm256_fmadd_ps(y, r, p2);
        y = _mm256_fmadd_ps(y, r, p3);
        y = _mm256_fmadd_ps(y, r, p4);
        y = _mm256_fmadd_ps(y, r, p5);
        y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, one));
        __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fn), _mm256_set1_epi32(127)), 23);
        y = _mm256_and_ps(_mm256_mul_ps(y, _mm256_castsi256_ps(e)), keep);
        _mm256_storeu_ps(x + j, y);
        sum = _mm256_add_ps(sum, y);
    }
    float s = hsum256(sum);
    for (; j < n; j++) s += x[j] = expf(x[j] - mx);
    return s;
}

static float dot_f32_scalar(const float *a, const float *b, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static float dot_f16_scalar(const float *a, const uint16_t *b, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += a[i] * fp16_to_fp32(b[i]);
    return s;
}

static void axpy_f32_scalar(float *y, float w, const float *x, int n) {
    for (int i = 0; i < n; i++) y[i] += w * x[i];
}

static void axpy_f16_scalar(float *y, float w, const uint16_t *x, int n) {
    for (int i = 0; i < n; i++) y[i] += w * fp16_to_fp32(x[i]);
}

static void scores_f32_scalar(const float *q, int g, const float *keys, int n, int hd, float scale, float *s, int ld) {
    for (int i = 0; i < g; i++)
        for (int j = 0; j < n; j++) s[(size_t)i * ld + j] = scale * dot_f32_scalar(q + (size_t)i * hd, keys + (size_t)j * hd, hd);
}

static void scores_f16_scalar(const float *q, int g, const uint16_t *keys, int n, int hd, float scale, float *s, int ld) {
    for (int i = 0; i < g; i++)
        for (int j = 0; j < n; j++) s[(size_t)i * ld + j] = scale * dot_f16_scalar(q + (size_t)i * hd, keys + (size_t)j * hd, hd);
}

static void accum_f32_scalar(const float *p, int g, int ld, const float *vals, int n, int hd, float *out) {
    for (int i = 0; i < g; i++)
        for (int j = 0; j < n; j++) axpy_f32_scalar(out + (size_t)i * hd, p[(size_t)i * ld + j], vals + (size_t)j * hd, hd);
}

static void accum_f16_scalar(const float *p, int g, int ld, const uint16_t *vals, int n, int hd, float *out) {
    for (int i = 0; i < g; i++)
        for (int j = 0; j < n; j++) axpy_f16_scalar(out + (size_t)i * hd, p[(size_t)i * ld + j], vals + (size_t)j * hd, hd);
}

static float exp_shift_sum_scalar(float *x, int n, float mx) {
    float s = 0.0f;
    for (int j = 0; j < n; j++) s += x[j] = expf(x[j] - mx);
    return s;
}

static const attn_kernels kernels_avx2 = {dot_f32_avx2,    dot_f16_avx2,    axpy_f32_avx2,     axpy_f16_avx2,
                                          scores_f32_avx2, scores_f16_avx2, accum_f32_avx2,    accum_f16_avx2,
                                          exp_shift_sum_avx2};
static const attn_kernels kernels_scalar = {dot_f32_scalar,    dot_f16_scalar,    axpy_f32_scalar,
                                            axpy_f16_scalar,   scores_f32_scalar, scores_f16_scalar,
                                            accum_f32_scalar,  accum_f16_scalar,  exp_shift_sum_scalar};

const attn_kernels *attn_kernels_get(void) { return cpu_has_avx2() ? &kernels_avx2 : &kernels_scalar; }
const attn_kernels *attn_kernels_scalar(void) { return &kernels_scalar; }
