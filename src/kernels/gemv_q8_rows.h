/* The loops of the integer GEMV (kernels.h: gemv_q8), which the AVX2 set
 * (kernels_avx2.c) and the AVX-512 VNNI set (gemm_avx512.c) expand around
 * their own lane sums. Before GEMV_Q8_ROWS(T, INL, FN, SCALE), a set
 * defines for weight type T:
 *   T##_lanes(b, x, start)           the eight 32-bit lane sums
 *                                    sum_j w_j x_j of block b (four j a
 *                                    lane), start: the lane starts of b;
 *   T##_lane_starts(xq, nb, start)   the starts of nb blocks (8 a block), or
 *                                    nothing for a type without them;
 *   T##_SPAN                         blocks a pass takes (at most
 *                                    GEMV_STARTS for a type with starts);
 * INL and FN are its inline and function attributes, SCALE(b) block b's
 * scale as a float.
 *
 * One row after another, each a single sequential stream (rows read side
 * by side measured 1.5-2x slower on weights streamed from memory), two
 * accumulators (even and odd blocks) hiding the multiply-add latency, rows
 * in fours sharing one horizontal sum:
 *   y[r] = sum_b dw(r, b) dx(b) lanes(r, b).
 * Rows longer than SPAN blocks go in runs of columns, the later ones adding
 * to y. */
#ifndef SUBQ_KERNELS_GEMV_Q8_ROWS_H
#define SUBQ_KERNELS_GEMV_Q8_ROWS_H

/* Lane starts one call holds: 16 KiB on the stack */
#define GEMV_STARTS 512

#define GEMV_Q8_ROWS(T, INL, FN, SCALE)                                                                          \
    INL __m256 T##_block_fma(const block_##T *b, const int8_t *xq, const int32_t *st, float dx, __m256 acc) {   \
        const __m256i x = _mm256_loadu_si256((const __m256i *)xq);                                             \
        return _mm256_fmadd_ps(_mm256_cvtepi32_ps(T##_lanes(b, x, st)), _mm256_set1_ps(SCALE(b) * dx), acc);   \
    }                                                                                                          \
    INL __m256 T##_gemv_row(const block_##T *b, const int8_t *xq, const float *xd, const int32_t *st,          \
                            int64_t nb) {                                                                      \
        __m256 a0 = _mm256_setzero_ps(), a1 = a0;                                                              \
        int64_t i = 0;                                                                                         \
        for (; i + 2 <= nb; i += 2) {                                                                          \
            a0 = T##_block_fma(b + i, xq + 32 * i, st + 8 * i, xd[i], a0);                                     \
            a1 = T##_block_fma(b + i + 1, xq + 32 * i + 32, st + 8 * i + 8, xd[i + 1], a1);                    \
        }                                                                                                      \
        if (i < nb) a0 = T##_block_fma(b + i, xq + 32 * i, st + 8 * i, xd[i], a0);                             \
        return _mm256_add_ps(a0, a1);                                                                          \
    }                                                                                                          \
    FN static void gemv_q8_##T(const void *w, size_t rb, int64_t n_rows, const int8_t *xq, const float *xd,    \
                               int64_t n, float *y) {                                                          \
        _Alignas(32) int32_t st[8 * GEMV_STARTS];                                                              \
        const int64_t nb_all = n / 32;                                                                         \
        for (int64_t b0 = 0; b0 < nb_all; b0 += T##_SPAN) {                                                    \
            const int64_t nb = nb_all - b0 < T##_SPAN ? nb_all - b0 : T##_SPAN;                                \
            const char *wb = (const char *)w + (size_t)b0 * sizeof(block_##T);                                 \
            const int8_t *xb = xq + 32 * b0;                                                                   \
            const float *db = xd + b0;                                                                         \
            T##_lane_starts(xb, nb, st);                                                                       \
            int64_t r = 0;                                                                                     \
            for (; r + 4 <= n_rows; r += 4) {                                                                  \
                __m256 acc[4];                                                                                 \
                for (int k = 0; k < 4; k++) /* not unrolled: GCC would interleave the 4 rows */                \
                    acc[k] = T##_gemv_row((const block_##T *)(wb + (size_t)(r + k) * rb), xb, db, st, nb);     \
                const __m128 s = hsum4(acc[0], acc[1], acc[2], acc[3]);                                        \
                _mm_storeu_ps(y + r, b0 ? _mm_add_ps(_mm_loadu_ps(y + r), s) : s);                             \
            }                                                                                                  \
            for (; r < n_rows; r++) {                                                                          \
                const float s = kernels_hsum8(T##_gemv_row((const block_##T *)(wb + (size_t)r * rb), xb, db, st, nb)); \
                y[r] = b0 ? y[r] + s : s;                                                                      \
            }                                                                                                  \
        }                                                                                                      \
    }

#endif
