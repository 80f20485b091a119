/* The inner product every search file needs. `omp simd reduction` lets the
 * compiler vectorise the sum (a fixed reassociation: results are the same
 * on every run of a build, whatever the thread count). */
#ifndef SUBQ_SEARCH_DOT_H
#define SUBQ_SEARCH_DOT_H

/* sum_i a[i] b[i] */
static inline float search_dot(const float *a, const float *b, int n) {
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

#endif
