/* The loops of the integer GEMV (kernels.h: gemv_q8), which the AVX2 set
 * (kernels_avx2.c) and the AVX-512 VNNI set (gemm_avx512.c) expand around
 * their own lane sums. INL and FN are a set's inline and function
 * attributes.
 *
 * GEMV_LANE_STARTS(INL, LANES_U8): gemv_lane_starts, and the preps of
 * q8_0 (none) and q4_0 (lane starts at -8), which GEMV_Q8_ROWS and
 * GEMV_Q6_K_ROWS take; a set expands it first.
 *
 * GEMV_Q8_ROWS(T, INL, FN, SCALE): weights in blocks of 32 (q8_0, q4_0).
 * Before it a set defines for type T T##_lanes(b, x, start), the eight
 * 32-bit lane sums sum_j w_j x_j of block b (four j a lane), start: b's
 * lane starts (q4_0's, from T##_prep once per call). SCALE(b): block b's
 * scale as a float.
 *
 * GEMV_Q4_K_ROWS(INL, FN, LANES_U8): Q4_K, super-blocks of 256 weights in 8
 * sub-blocks of 32 with 6-bit scales sc_s and mins m_s, w = d sc_s q -
 * dmin m_s, q in 0..15. An activation block of 32 is a sub-block:
 *   y[r] = sum_s dx_s (d sc_s S_s - dmin m_s X_s),
 *   S_s = sum_j q_j x_j   (the nibbles as stored against x),
 *   X_s = sum_j x_j       (dx_s X_s once per call).
 *
 * GEMV_Q6_K_ROWS(INL, FN, LANES_U8): Q6_K, super-blocks of 256 weights in
 * 16 sub-blocks of 16 with int8 scales sc_s, w = d sc_s (q - 32), q in
 * 0..63 (4 low bits in ql, 2 high in qh). An activation block of 32 holds
 * sub-blocks 2b and 2b + 1 in lanes 0-3 and 4-7; each lane starts at -32
 * times the sum of its four activations (once per call), so it holds
 * sum_j (q_j - 32) x_j exactly:
 *   y[r] = sum_b dx_b d (sc_2b, sc_2b+1 spread over the lanes) . lanes_b.
 *
 * LANES_U8(acc, u, x): acc plus the lane sums of unsigned bytes u against x.
 *
 * All: one row after another, each a single sequential stream (rows read
 * side by side measured 1.5-2x slower on weights streamed from memory), two
 * accumulators hiding the multiply-add latency, rows in fours sharing one
 * horizontal sum. q8_0 rows ask for the pages ahead of them
 * (prefetch_page_ahead): decode at 512 1.03-1.13x, at 32K 1.05-1.09x; q4_0
 * rows so decoded at 0.82x, and are left to the hardware. Rows longer than
 * a span go in runs of columns, the later ones adding to y. */
#ifndef SUBQ_KERNELS_GEMV_Q8_ROWS_H
#define SUBQ_KERNELS_GEMV_Q8_ROWS_H

/* What the rows need of the activations, computed once per call for the
 * blocks of a run (16 KiB on the stack): q4_0's and Q6_K's lane starts (8 a
 * block), Q4_K's dx_s X_s (1 a block). */
#define GEMV_PREP 512
typedef union gemv_prep {
    _Alignas(32) int32_t start[8 * GEMV_PREP];
    float xsum[8 * GEMV_PREP];
} gemv_prep;

/* Blocks of 32 a pass takes: q4_0 those whose lane starts gemv_prep holds,
 * q8_0 (nothing to prepare) whole rows; whether rows ask for pages ahead. */
enum { q4_0_SPAN = GEMV_PREP, q8_0_SPAN = INT32_MAX, q4_0_PF = 0, q8_0_PF = 1 };

/* gemv_lane_starts: start[8b + l] = -c (x[32b + 4l] + ... + x[32b + 4l + 3])
 * for nb blocks, the lane starts of weights stored as w + c (q4_0: c = 8,
 * Q6_K: 32), so that start + sum_j (w_j + c) x_j = sum_j w_j x_j. */
#define GEMV_LANE_STARTS(INL, LANES_U8)                                                                          \
    INL void gemv_lane_starts(const int8_t *xq, int64_t nb, int c, int32_t *start) {                           \
        const __m256i cc = _mm256_set1_epi8((char)c), zero = _mm256_setzero_si256();                          \
        for (int64_t b = 0; b < nb; b++) {                                                                     \
            const __m256i s = LANES_U8(zero, cc, _mm256_loadu_si256((const __m256i *)(xq + 32 * b)));          \
            _mm256_store_si256((__m256i *)(start + 8 * b), _mm256_sub_epi32(zero, s));                         \
        }                                                                                                      \
    }                                                                                                          \
    INL void q8_0_prep(const int8_t *xq, const float *xd, int64_t nb, gemv_prep *p) {                          \
        (void)xq, (void)xd, (void)nb, (void)p;                                                                 \
    }                                                                                                          \
    INL void q4_0_prep(const int8_t *xq, const float *xd, int64_t nb, gemv_prep *p) {                          \
        (void)xd;                                                                                              \
        gemv_lane_starts(xq, nb, 8, p->start);                                                                 \
    }

/* y = W x over runs of SPAN units (blocks or super-blocks) of VALS values:
 * PREP(xq, xd, units, prep) once per run, ROW(row, xq, xd, prep, units) an
 * 8-lane vector per row; PF: rows ask for the pages ahead. */
#define GEMV_RUNS(NAME, FN, BLOCK, VALS, SPAN, PREP, ROW, PF)                                                    \
    FN static void NAME(const void *w, size_t rb, int64_t n_rows, const int8_t *xq, const float *xd, int64_t n,  \
                        float *y) {                                                                             \
        gemv_prep prep;                                                                                         \
        const int64_t units = n / VALS;                                                                         \
        for (int64_t u0 = 0; u0 < units; u0 += SPAN) {                                                          \
            const int64_t nu = units - u0 < SPAN ? units - u0 : SPAN;                                           \
            const char *wb = (const char *)w + (size_t)u0 * sizeof(BLOCK);                                      \
            const int8_t *xb = xq + VALS * u0;                                                                  \
            const float *db = xd + VALS / 32 * u0;                                                              \
            PREP(xb, db, nu, &prep);                                                                            \
            int64_t r = 0;                                                                                      \
            for (; r + 4 <= n_rows; r += 4) {                                                                   \
                __m256 acc[4];                                                                                  \
                for (int k = 0; k < 4; k++) { /* not unrolled: GCC would interleave the 4 rows */               \
                    if (PF) prefetch_page_ahead(wb, (size_t)(r + k) * rb, (size_t)nu * sizeof(BLOCK));          \
                    acc[k] = ROW((const BLOCK *)(wb + (size_t)(r + k) * rb), xb, db, &prep, nu);                \
                }                                                                                               \
                const __m128 s = hsum4(acc[0], acc[1], acc[2], acc[3]);                                         \
                _mm_storeu_ps(y + r, u0 ? _mm_add_ps(_mm_loadu_ps(y + r), s) : s);                              \
            }                                                                                                   \
            for (; r < n_rows; r++) {                                                                           \
                const float s = kernels_hsum8(ROW((const BLOCK *)(wb + (size_t)r * rb), xb, db, &prep, nu));    \
                y[r] = u0 ? y[r] + s : s;                                                                       \
            }                                                                                                   \
        }                                                                                                       \
    }

#define GEMV_Q8_ROWS(T, INL, FN, SCALE)                                                                          \
    INL __m256 T##_block_fma(const block_##T *b, const int8_t *xq, const int32_t *st, float dx, __m256 acc) {   \
        const __m256i x = _mm256_loadu_si256((const __m256i *)xq);                                             \
        return _mm256_fmadd_ps(_mm256_cvtepi32_ps(T##_lanes(b, x, st)), _mm256_set1_ps(SCALE(b) * dx), acc);   \
    }                                                                                                          \
    INL __m256 T##_gemv_row(const block_##T *b, const int8_t *xq, const float *xd, const gemv_prep *p,         \
                            int64_t nb) {                                                                      \
        const int32_t *st = p->start;                                                                          \
        __m256 a0 = _mm256_setzero_ps(), a1 = a0;                                                              \
        int64_t i = 0;                                                                                         \
        for (; i + 2 <= nb; i += 2) {                                                                          \
            a0 = T##_block_fma(b + i, xq + 32 * i, st + 8 * i, xd[i], a0);                                     \
            a1 = T##_block_fma(b + i + 1, xq + 32 * i + 32, st + 8 * i + 8, xd[i + 1], a1);                    \
        }                                                                                                      \
        if (i < nb) a0 = T##_block_fma(b + i, xq + 32 * i, st + 8 * i, xd[i], a0);                             \
        return _mm256_add_ps(a0, a1);                                                                          \
    }                                                                                                          \
    GEMV_RUNS(gemv_q8_##T, FN, block_##T, 32, T##_SPAN, T##_prep, T##_gemv_row, T##_PF)

#define GEMV_Q4_K_ROWS(INL, FN, LANES_U8)                                                                        \
    /* xsum[s] = dx_s X_s of the 8 nsb activation blocks */                                                    \
    INL void q4_K_prep(const int8_t *xq, const float *xd, int64_t nsb, gemv_prep *p) {                         \
        for (int64_t s = 0; s < 8 * nsb; s++) {                                                                \
            int32_t sum = 0;                                                                                   \
            for (int j = 0; j < 32; j++) sum += xq[32 * s + j];                                                \
            p->xsum[s] = xd[s] * (float)sum;                                                                   \
        }                                                                                                      \
    }                                                                                                          \
    /* one row's nsb super-blocks: the sub-blocks' d sc_s dx_s S_s in a0 (even s) and a1 (odd s), the mins'    \
     * dmin m_s dx_s X_s eight at a time in am */                                                              \
    INL __m256 q4_K_gemv_row(const block_q4_K *b, const int8_t *xq, const float *xd, const gemv_prep *p,       \
                             int64_t nsb) {                                                                    \
        const __m256i m4 = _mm256_set1_epi8(0xF), zero = _mm256_setzero_si256();                              \
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, am = a0;                                                     \
        for (int64_t i = 0; i < nsb; i++) {                                                                    \
            __m256 ds, dm;                                                                                     \
            kernels_k4_scales(b[i].scales, _cvtsh_ss(quant_rd16(b[i].d)), _cvtsh_ss(quant_rd16(b[i].dmin)), &ds, \
                              &dm);                                                                            \
            _Alignas(32) float sx[8]; /* d sc_s dx_s */                                                        \
            _mm256_store_ps(sx, _mm256_mul_ps(ds, _mm256_loadu_ps(xd + 8 * i)));                               \
            am = _mm256_fmadd_ps(dm, _mm256_loadu_ps(p->xsum + 8 * i), am);                                    \
            const int8_t *x = xq + 256 * i;                                                                    \
            for (int c = 0; c < 4; c++) { /* sub-blocks 2c (low nibbles) and 2c + 1 (high) */                 \
                const __m256i v = _mm256_loadu_si256((const __m256i *)(b[i].qs + 32 * c));                     \
                const __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4); \
                const __m256i s0 = LANES_U8(zero, lo, _mm256_loadu_si256((const __m256i *)(x + 64 * c)));      \
                const __m256i s1 = LANES_U8(zero, hi, _mm256_loadu_si256((const __m256i *)(x + 64 * c + 32))); \
                a0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s0), _mm256_broadcast_ss(sx + 2 * c), a0);             \
                a1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s1), _mm256_broadcast_ss(sx + 2 * c + 1), a1);         \
            }                                                                                                  \
        }                                                                                                      \
        return _mm256_sub_ps(_mm256_add_ps(a0, a1), am);                                                       \
    }                                                                                                          \
    GEMV_RUNS(gemv_q8_q4_K, FN, block_q4_K, 256, GEMV_PREP, q4_K_prep, q4_K_gemv_row, 0)

#define GEMV_Q6_K_ROWS(INL, FN, LANES_U8)                                                                      \
    /* Q6_K's lane starts (c = 32) of its 8 nsb activation blocks */                                        \
    INL void q6_K_prep(const int8_t *xq, const float *xd, int64_t nsb, gemv_prep *p) {                         \
        (void)xd;                                                                                              \
        gemv_lane_starts(xq, 8 * nsb, 32, p->start);                                                           \
    }                                                                                                          \
    /* one row's nsb super-blocks; half h, group k is activation block 4h + k of the super-block: low bits     \
     * from ql[64h + 32(k & 1) + l] (nibble k >> 1), high bits (qh[32h + l] >> 2k) & 3 */                      \
    INL __m256 q6_K_gemv_row(const block_q6_K *b, const int8_t *xq, const float *xd, const gemv_prep *p,       \
                             int64_t nsb) {                                                                    \
        const __m256i m4 = _mm256_set1_epi8(0xF), m2 = _mm256_set1_epi8(3);                                    \
        __m256 a0 = _mm256_setzero_ps(), a1 = a0;                                                              \
        for (int64_t i = 0; i < nsb; i++) {                                                                    \
            const __m128i sc8 = _mm_loadu_si128((const __m128i *)b[i].scales);                                 \
            const __m256 d = _mm256_set1_ps(_cvtsh_ss(quant_rd16(b[i].d)));                                    \
            for (int h = 0; h < 2; h++) {                                                                      \
                const __m128i sh = h ? _mm_srli_si128(sc8, 8) : sc8; /* d sc of sub-blocks 8h .. 8h + 7 */     \
                const __m256 sv = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sh)));              \
                const __m256i qh = _mm256_loadu_si256((const __m256i *)(b[i].qh + 32 * h));                    \
                for (int k = 0; k < 4; k++) {                                                                  \
                    const int blk = 8 * (int)i + 4 * h + k;                                                    \
                    const __m256i l = _mm256_loadu_si256((const __m256i *)(b[i].ql + 64 * h + 32 * (k & 1)));  \
                    const __m256i lo = _mm256_and_si256(k >> 1 ? _mm256_srli_epi16(l, 4) : l, m4);             \
                    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), m2);                     \
                    const __m256i q = _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));                           \
                    const __m256i s = LANES_U8(_mm256_load_si256((const __m256i *)(p->start + 8 * blk)), q,    \
                                               _mm256_loadu_si256((const __m256i *)(xq + 32 * blk)));          \
                    const __m256 sc = _mm256_permutevar8x32_ps(                                                \
                        sv, _mm256_setr_epi32(2 * k, 2 * k, 2 * k, 2 * k, 2 * k + 1, 2 * k + 1, 2 * k + 1,     \
                                              2 * k + 1));                                                     \
                    const __m256 f = _mm256_mul_ps(sc, _mm256_set1_ps(xd[blk]));                               \
                    if (k & 1) a1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), f, a1);                             \
                    else a0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), f, a0);                                   \
                }                                                                                              \
            }                                                                                                  \
        }                                                                                                      \
        return _mm256_add_ps(a0, a1);                                                                          \
    }                                                                                                          \
    GEMV_RUNS(gemv_q8_q6_K, FN, block_q6_K, 256, GEMV_PREP / 8, q6_K_prep, q6_K_gemv_row, 0)

#endif
