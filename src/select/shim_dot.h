/* Inner product kernels for the C++ shims' distance functions (hnswlib's
 * space, FAISS's distance computer): AVX2+FMA, chosen at run time by the
 * caller through cpu_has_avx2(), with a scalar fallback. Header-only so the
 * call inlines into the graph searches. */
#ifndef SUBQ_SHIM_DOT_H
#define SUBQ_SHIM_DOT_H

#include <immintrin.h>
#include <stddef.h>

/* sum_c x[c] y[c] */
static inline float shim_dot_scalar(const float *x, const float *y, size_t d) {
    float s = 0.0f;
    for (size_t c = 0; c < d; c++) s += x[c] * y[c];
    return s;
}

__attribute__((target("avx2,fma"))) static inline float shim_dot_avx2(const float *x, const float *y, size_t d) {
    size_t c = 0;
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    for (; c + 16 <= d; c += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + c), _mm256_loadu_ps(y + c), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + c + 8), _mm256_loadu_ps(y + c + 8), s1);
    }
    for (; c + 8 <= d; c += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + c), _mm256_loadu_ps(y + c), s0);
    __m256 v = _mm256_add_ps(s0, s1);
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    float s = _mm_cvtss_f32(h);
    for (; c < d; c++) s += x[c] * y[c];
    return s;
}

#endif
