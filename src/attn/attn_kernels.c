#include "attn/attn_kernels.h"

#include <immintrin.h>

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

static const attn_kernels kernels_avx2 = {dot_f32_avx2, dot_f16_avx2, axpy_f32_avx2, axpy_f16_avx2};
static const attn_kernels kernels_scalar = {dot_f32_scalar, dot_f16_scalar, axpy_f32_scalar, axpy_f16_scalar};

const attn_kernels *attn_kernels_get(void) { return cpu_has_avx2() ? &kernels_avx2 : &kernels_scalar; }
