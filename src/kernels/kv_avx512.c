/* Decode attention over contiguous KV rows (kernels_kv's scores and accum)
 * with AVX-512, for CPUs that have F/BW/VL/DQ + VNNI (kernels_kv_decode_get
 * picks these over the set's). Same loop nests as the AVX2 forms, wider:
 *   - f32 / f16 rows: 16 values per convert and FMA (f32 scores excepted,
 *     below); the value pass keeps up to 128 columns of two heads in
 *     registers (16 of the 32 ZMM), so a row is read once per pair of heads
 *     instead of once per 32 columns;
 *   - q8_0 / q4_0 keys: vpdpbusd on two blocks (64 codes) per instruction.
 *     It multiplies unsigned by signed bytes, so the key codes go in
 *     unsigned (q8_0: k ^ 0x80 = k + 128; q4_0: the stored nibbles, k + 8)
 *     and the quantised query (as every set quantises it) signed:
 *       sum_c (k_c + o) q_c = sum_c k_c q_c + o sum_c q_c,
 *     the second term a per-query constant, subtracted in the accumulator's
 *     start value. The block sums are exact, as in the other sets;
 *   - q8_0 / q4_0 values: codes to floats 16 at a time.
 * Head widths these do not cover (f32 / f16: not a multiple of 16; q8_0 /
 * q4_0: not a multiple of 32, or wider than QMAX) take the AVX2 set's forms. */
#include "kernels/kernels.h"

#include "base/cpu.h"
#include "kernels/dot.h"

#ifdef KERNELS_HAVE_AVX2

#define AVX512 KERNELS_AVX512
#define INLINE512 KERNELS_AVX512_INLINE
#define UNROLL _Pragma("GCC unroll 16")

#define KV_AVX2(T) (kernels_avx2_set.kv[T])

/* ---- f32 / f16 rows -------------------------------------------------------- */

/* 16 values of a cached row at element offset `at`, as floats */
INLINE512 __m512 load16(const void *rows, size_t at, int f16) {
    if (f16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)rows + at)));
    return _mm512_loadu_ps((const float *)rows + at);
}

/* the 16 lanes folded to 8 */
INLINE512 __m256 fold8(__m512 v) { return _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)); }

/* [sum a, sum b, sum c, sum d] */
INLINE512 __m128 hsum4x16(__m512 a, __m512 b, __m512 c, __m512 d) { return hsum4(fold8(a), fold8(b), fold8(c), fold8(d)); }

/* One head against eight keys, 8 accumulators (the widths scores_rows
 * does not give scores_pair_held: up to 32, where eight rows are a few
 * contiguous lines and this reads as fast, and those not a multiple of 32). */
INLINE512 void scores_rows1(const float *q, const void *keys, int n, int hd, float scale, float *s, int f16) {
    const __m128 vs = _mm_set1_ps(scale);
    const size_t rb = (size_t)hd * (f16 ? 2 : 4);
    int j = 0;
    for (; j + 8 <= n; j += 8) {
        prefetch_page_ahead(keys, (size_t)j * rb, 8 * rb);
        __m512 a[8];
        UNROLL for (int k = 0; k < 8; k++) a[k] = _mm512_setzero_ps();
        const size_t r = (size_t)j * hd;
        for (int c = 0; c < hd; c += 16) {
            const __m512 x = _mm512_loadu_ps(q + c);
            UNROLL for (int k = 0; k < 8; k++) a[k] = _mm512_fmadd_ps(x, load16(keys, r + (size_t)k * hd + c, f16), a[k]);
        }
        _mm_storeu_ps(s + j, _mm_mul_ps(vs, hsum4x16(a[0], a[1], a[2], a[3])));
        _mm_storeu_ps(s + j + 4, _mm_mul_ps(vs, hsum4x16(a[4], a[5], a[6], a[7])));
    }
    for (; j < n; j++) {
        __m512 a = _mm512_setzero_ps();
        for (int c = 0; c < hd; c += 16) a = _mm512_fmadd_ps(_mm512_loadu_ps(q + c), load16(keys, (size_t)j * hd + c, f16), a);
        s[j] = scale * _mm_cvtss_f32(hsum4x16(a, a, a, a));
    }
}

/* Two heads (qa, qb) of NB x 16 values (NB even, <= 8, a constant) held in
 * registers, against two keys at a time, each key's row read front to back
 * (two FMA chains per key and head). Streaming from DRAM, one core scores
 * rows read so at ~0.9 of a plain sum's rate, and at ~0.8 rows read as
 * scores_rows does below, the columns of four rows in turn
 * (bench/bench_kv_stream.c). */
INLINE512 void scores_pair_held(const float *qa, const float *qb, const void *keys, int n, int NB, float scale,
                                float *sa, float *sb, int f16) {
    const int hd = 16 * NB;
    const size_t rb = (size_t)hd * (f16 ? 2 : 4);
    const __m128 vs = _mm_set1_ps(scale);
    __m512 x[8], y[8];
    UNROLL for (int c = 0; c < NB; c++) {
        x[c] = _mm512_loadu_ps(qa + 16 * c);
        y[c] = _mm512_loadu_ps(qb + 16 * c);
    }
    int j = 0;
    for (; j + 2 <= n; j += 2) {
        prefetch_page_ahead(keys, (size_t)j * rb, 2 * rb);
        __m512 a[2], b[2];
        const size_t r = (size_t)j * hd;
        UNROLL for (int k = 0; k < 2; k++) {
            __m512 a0 = _mm512_setzero_ps(), a1 = a0, b0 = a0, b1 = a0;
            UNROLL for (int c = 0; c < NB; c += 2) {
                const __m512 k0 = load16(keys, r + (size_t)k * hd + 16 * c, f16);
                const __m512 k1 = load16(keys, r + (size_t)k * hd + 16 * c + 16, f16);
                a0 = _mm512_fmadd_ps(x[c], k0, a0);
                b0 = _mm512_fmadd_ps(y[c], k0, b0);
                a1 = _mm512_fmadd_ps(x[c + 1], k1, a1);
                b1 = _mm512_fmadd_ps(y[c + 1], k1, b1);
            }
            a[k] = _mm512_add_ps(a0, a1);
            b[k] = _mm512_add_ps(b0, b1);
        }
        const __m128 t = _mm_mul_ps(vs, hsum4x16(a[0], a[1], b[0], b[1]));
        sa[j] = _mm_cvtss_f32(t);
        sa[j + 1] = _mm_cvtss_f32(_mm_shuffle_ps(t, t, 1));
        if (sb) {
            sb[j] = _mm_cvtss_f32(_mm_shuffle_ps(t, t, 2));
            sb[j + 1] = _mm_cvtss_f32(_mm_shuffle_ps(t, t, 3));
        }
    }
    for (; j < n; j++) {
        __m512 a = _mm512_setzero_ps(), b = a;
        UNROLL for (int c = 0; c < NB; c++) {
            const __m512 kk = load16(keys, (size_t)j * hd + 16 * c, f16);
            a = _mm512_fmadd_ps(x[c], kk, a);
            b = _mm512_fmadd_ps(y[c], kk, b);
        }
        const __m128 t = hsum4x16(a, b, a, b);
        sa[j] = scale * _mm_cvtss_f32(t);
        if (sb) sb[j] = scale * _mm_cvtss_f32(_mm_shuffle_ps(t, t, 1));
    }
}

/* As the AVX2 scores_rows: two heads against four keys, 8 accumulators;
 * the usual head widths through scores_pair_held. */
INLINE512 void scores_rows(const float *q, int g, const void *keys, int n, int hd, float scale, float *s, int ld,
                           int f16) {
    if (g == 1) {
        /* a search-key scan: the pair form with the head twice, its second
         * scores dropped (as an odd g's last head below). Each key read front
         * to back, it streams f16 keys at 24-28 GB/s on one Zen 4 core, where
         * scores_rows1 reads 12-16: the FMAs are not the bound. */
        switch (hd) { /* NB a constant in each */
        case 128: scores_pair_held(q, q, keys, n, 8, scale, s, NULL, f16); break;
        case 96: scores_pair_held(q, q, keys, n, 6, scale, s, NULL, f16); break;
        case 64: scores_pair_held(q, q, keys, n, 4, scale, s, NULL, f16); break;
        default: scores_rows1(q, keys, n, hd, scale, s, f16);
        }
        return;
    }
    const __m128 vs = _mm_set1_ps(scale);
    const size_t rb = (size_t)hd * (f16 ? 2 : 4);
    for (int i0 = 0; i0 < g; i0 += 2) {
        const int two = i0 + 1 < g;
        const float *qa = q + (size_t)i0 * hd, *qb = two ? qa + hd : qa;
        float *sa = s + (size_t)i0 * ld, *sb = two ? sa + ld : NULL;
        if (hd == 128 || hd == 64) {
            if (hd == 128) scores_pair_held(qa, qb, keys, n, 8, scale, sa, sb, f16);
            else scores_pair_held(qa, qb, keys, n, 4, scale, sa, sb, f16);
            continue;
        }
        int j = 0;
        for (; j + 4 <= n; j += 4) {
            prefetch_page_ahead(keys, (size_t)j * rb, 4 * rb);
            __m512 a[4], b[4];
            UNROLL for (int k = 0; k < 4; k++) a[k] = b[k] = _mm512_setzero_ps();
            const size_t r = (size_t)j * hd;
            for (int c = 0; c < hd; c += 16) {
                const __m512 x = _mm512_loadu_ps(qa + c), y = _mm512_loadu_ps(qb + c);
                UNROLL for (int k = 0; k < 4; k++) {
                    const __m512 kk = load16(keys, r + (size_t)k * hd + c, f16);
                    a[k] = _mm512_fmadd_ps(x, kk, a[k]);
                    b[k] = _mm512_fmadd_ps(y, kk, b[k]);
                }
            }
            _mm_storeu_ps(sa + j, _mm_mul_ps(vs, hsum4x16(a[0], a[1], a[2], a[3])));
            if (sb) _mm_storeu_ps(sb + j, _mm_mul_ps(vs, hsum4x16(b[0], b[1], b[2], b[3])));
        }
        for (; j < n; j++) {
            __m512 a = _mm512_setzero_ps(), b = a;
            for (int c = 0; c < hd; c += 16) {
                const __m512 kk = load16(keys, (size_t)j * hd + c, f16);
                a = _mm512_fmadd_ps(_mm512_loadu_ps(qa + c), kk, a);
                b = _mm512_fmadd_ps(_mm512_loadu_ps(qb + c), kk, b);
            }
            const __m128 t = hsum4x16(a, b, a, b);
            sa[j] = scale * _mm_cvtss_f32(t);
            if (sb) sb[j] = scale * _mm_cvtss_f32(_mm_shuffle_ps(t, t, 1));
        }
    }
}

/* m (1 or 2) heads, W x 16 columns from c over rows [j0, j1): the m x W
 * accumulators stay in registers while the rows stream past; with pf the
 * pages ahead are asked for (prefetch_page_ahead). m and W are constants in
 * every call, so the loops unroll. */
INLINE512 void accum_cols(const float *const *pp, int m, int W, float *o, int hd, int c, const void *vals, int j0,
                          int j1, int f16, int pf) {
    const size_t esz = f16 ? 2 : 4;
    __m512 acc[2][8];
    UNROLL for (int i = 0; i < m; i++) UNROLL for (int u = 0; u < W; u++)
        acc[i][u] = _mm512_loadu_ps(o + (size_t)i * hd + c + 16 * u);
    for (int j = j0; j < j1; j++) {
        const size_t r = (size_t)j * hd + c;
        if (pf) prefetch_page_ahead(vals, r * esz, (size_t)W * 16 * esz);
        __m512 v[8];
        UNROLL for (int u = 0; u < W; u++) v[u] = load16(vals, r + 16 * u, f16);
        UNROLL for (int i = 0; i < m; i++) {
            const __m512 w = _mm512_set1_ps(pp[i][j]);
            UNROLL for (int u = 0; u < W; u++) acc[i][u] = _mm512_fmadd_ps(w, v[u], acc[i][u]);
        }
    }
    UNROLL for (int i = 0; i < m; i++) UNROLL for (int u = 0; u < W; u++)
        _mm512_storeu_ps(o + (size_t)i * hd + c + 16 * u, acc[i][u]);
}

/* one pair (or the last single head) of heads over rows [j0, j1), all columns */
INLINE512 void accum_heads(const float *const *pp, int m, float *o, int hd, const void *vals, int j0, int j1, int f16,
                           int pf) {
    int c = 0;
    for (; c + 128 <= hd; c += 128) accum_cols(pp, m, 8, o, hd, c, vals, j0, j1, f16, pf);
    for (; c < hd; c += 16) accum_cols(pp, m, 1, o, hd, c, vals, j0, j1, f16, pf);
}

/* Rows go in blocks small enough for L1, so the passes of the later pairs
 * of heads re-read cache; the first pair prefetches. */
INLINE512 void accum_rows(const float *p, int g, int ld, const void *vals, int n, int hd, float *out, int f16) {
    enum { BLOCK = 64 };
    for (int j0 = 0; j0 < n; j0 += BLOCK) {
        const int j1 = j0 + BLOCK < n ? j0 + BLOCK : n;
        for (int i0 = 0; i0 < g; i0 += 2) {
            const float *pp[2] = {p + (size_t)i0 * ld, p + (size_t)(i0 + 1) * ld};
            float *o = out + (size_t)i0 * hd;
            if (i0 + 1 < g) accum_heads(pp, 2, o, hd, vals, j0, j1, f16, i0 == 0);
            else accum_heads(pp, 1, o, hd, vals, j0, j1, f16, i0 == 0);
        }
    }
}

/* ---- q8_0 / q4_0 rows -------------------------------------------------------- */

/* QMAX values per head at most (as the AVX2 set). */
enum { QMAX = 1024, PMAX = QMAX / 64 };

/* Two query heads quantised (kernels.h) and laid out per block pair p
 * (query values [64p, 64p + 64)): codes, the accumulator's start (-o x the
 * sum of each lane's 4 codes), the scales spread over their 8 lanes each
 * (0 past the last block). */
typedef struct qpairs {
    __m512i q[2][PMAX], start[2][PMAX];
    __m512 d[2][PMAX];
} qpairs;

/* lanes 0..7 = a, lanes 8..15 = b */
INLINE512 __m512 spread2(__m128 ab) {
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                                 _mm512_castps128_ps512(ab));
}

INLINE512 void quantize_pairs(const float *qa, const float *qb, int hd, int q4, qpairs *w) {
    const float *src[2] = {qa, qb};
    const __m512i off = _mm512_set1_epi8((char)(q4 ? 8 : 0x80));
    int8_t codes[QMAX + 32];
    float d[QMAX / 32 + 1];
    for (int h = 0; h < 2; h++) {
        kernels_avx2_set.quantize_q8(src[h], hd, codes, d);
        for (int c = hd; c < hd + 32; c++) codes[c] = 0; /* an odd block count's last pair */
        d[hd / 32] = 0.0f;
        for (int p = 0; p < (hd + 32) / 64; p++) {
            w->q[h][p] = _mm512_loadu_si512(codes + 64 * p);
            w->start[h][p] = _mm512_sub_epi32(_mm512_setzero_si512(),
                                              _mm512_dpbusd_epi32(_mm512_setzero_si512(), off, w->q[h][p]));
            w->d[h][p] = spread2(_mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)(d + 2 * p))));
        }
    }
}

/* The codes of one block as unsigned bytes (q8_0: k + 128; q4_0: the
 * stored nibbles, k + 8) */
INLINE512 __m256i ublock(const uint8_t *blk, int q4) {
    if (!q4) return _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(blk + 2)), _mm256_set1_epi8((char)0x80));
    const __m128i t = _mm_loadu_si128((const __m128i *)(blk + 2));
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(0xF));
}

/* Block pair p of one key (row r): codes and d_k spread; `two` = 0 for an
 * odd count's last block alone. */
INLINE512 void key_pair(const uint8_t *r, size_t bs, int p, int two, int q4, __m512i *k, __m512 *dk) {
    const uint8_t *b0 = r + (size_t)(2 * p) * bs, *b1 = b0 + bs;
    const __m256i hi = two ? ublock(b1, q4) : _mm256_setzero_si256();
    *k = _mm512_inserti64x4(_mm512_castsi256_si512(ublock(b0, q4)), hi, 1);
    const uint32_t d = quant_rd16(b0) | (uint32_t)(two ? quant_rd16(b1) : 0) << 16;
    *dk = spread2(_mm_cvtph_ps(_mm_cvtsi32_si128((int)d)));
}

/* Two heads (qa, qb), keys in rows of hd / 32 blocks of bs bytes; four keys
 * at a time share the horizontal sums. */
INLINE512 void scores_q(const float *q, int g, const uint8_t *keys, int n, int hd, float scale, float *s, int ld,
                        int q4) {
    const size_t bs = q4 ? sizeof(block_q4_0) : sizeof(block_q8_0), rb = (size_t)(hd / 32) * bs;
    const int nb = hd / 32, np = (nb + 1) / 2;
    const __m128 vs = _mm_set1_ps(scale);
    qpairs w;
    for (int i0 = 0; i0 < g; i0 += 2) {
        const int two = i0 + 1 < g;
        const float *qa = q + (size_t)i0 * hd;
        float *sa = s + (size_t)i0 * ld, *sb = two ? sa + ld : NULL;
        quantize_pairs(qa, two ? qa + hd : qa, hd, q4, &w);
        int j = 0;
        for (; j + 4 <= n; j += 4) {
            const uint8_t *r = keys + (size_t)j * rb;
            prefetch_page_ahead(keys, (size_t)j * rb, 4 * rb);
            __m512 ta[4], tb[4];
            UNROLL for (int k = 0; k < 4; k++) ta[k] = tb[k] = _mm512_setzero_ps();
            for (int p = 0; p < np; p++) {
                const int pair = 2 * p + 1 < nb;
                UNROLL for (int k = 0; k < 4; k++) {
                    __m512i kc;
                    __m512 dk;
                    key_pair(r + (size_t)k * rb, bs, p, pair, q4, &kc, &dk);
                    const __m512 ia = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(w.start[0][p], kc, w.q[0][p]));
                    const __m512 ib = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(w.start[1][p], kc, w.q[1][p]));
                    ta[k] = _mm512_fmadd_ps(ia, _mm512_mul_ps(dk, w.d[0][p]), ta[k]);
                    tb[k] = _mm512_fmadd_ps(ib, _mm512_mul_ps(dk, w.d[1][p]), tb[k]);
                }
            }
            _mm_storeu_ps(sa + j, _mm_mul_ps(vs, hsum4x16(ta[0], ta[1], ta[2], ta[3])));
            if (sb) _mm_storeu_ps(sb + j, _mm_mul_ps(vs, hsum4x16(tb[0], tb[1], tb[2], tb[3])));
        }
        for (; j < n; j++) {
            __m512 ta = _mm512_setzero_ps(), tb = ta;
            for (int p = 0; p < np; p++) {
                __m512i kc;
                __m512 dk;
                key_pair(keys + (size_t)j * rb, bs, p, 2 * p + 1 < nb, q4, &kc, &dk);
                ta = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(w.start[0][p], kc, w.q[0][p])),
                                     _mm512_mul_ps(dk, w.d[0][p]), ta);
                tb = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(w.start[1][p], kc, w.q[1][p])),
                                     _mm512_mul_ps(dk, w.d[1][p]), tb);
            }
            const __m128 t = hsum4x16(ta, tb, ta, tb);
            sa[j] = scale * _mm_cvtss_f32(t);
            if (sb) sb[j] = scale * _mm_cvtss_f32(_mm_shuffle_ps(t, t, 1));
        }
    }
}

/* The 32 values of a block as signed codes (q, or q - 8), in two halves */
INLINE512 void codes2(const uint8_t *blk, int q4, __m512 v[2]) {
    __m128i lo, hi;
    if (q4) {
        const __m128i t = _mm_loadu_si128((const __m128i *)(blk + 2)), f = _mm_set1_epi8(0xF), e = _mm_set1_epi8(8);
        lo = _mm_sub_epi8(_mm_and_si128(t, f), e);
        hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(t, 4), f), e);
    } else {
        lo = _mm_loadu_si128((const __m128i *)(blk + 2));
        hi = _mm_loadu_si128((const __m128i *)(blk + 18));
    }
    v[0] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(lo));
    v[1] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(hi));
}

/* m (1 or 2) heads, W blocks from block b0 over rows [j0, j1): out_i +=
 * (p_ij d_j) codes_j, the m x 2W accumulators in registers. */
INLINE512 void accum_qcols(const float *const *pp, int m, int W, float *o, int hd, int b0, const uint8_t *vals,
                           size_t rb, size_t bs, int j0, int j1, int q4, int pf) {
    __m512 acc[2][8];
    UNROLL for (int i = 0; i < m; i++) UNROLL for (int u = 0; u < 2 * W; u++)
        acc[i][u] = _mm512_loadu_ps(o + (size_t)i * hd + 32 * b0 + 16 * u);
    for (int j = j0; j < j1; j++) {
        const size_t at = (size_t)j * rb + (size_t)b0 * bs;
        if (pf) prefetch_page_ahead(vals, at, (size_t)W * bs);
        __m512 v[8];
        float d[4];
        UNROLL for (int u = 0; u < W; u++) {
            codes2(vals + at + (size_t)u * bs, q4, v + 2 * u);
            d[u] = _cvtsh_ss(quant_rd16(vals + at + (size_t)u * bs));
        }
        UNROLL for (int i = 0; i < m; i++) UNROLL for (int u = 0; u < W; u++) {
            const __m512 wd = _mm512_set1_ps(pp[i][j] * d[u]);
            acc[i][2 * u] = _mm512_fmadd_ps(wd, v[2 * u], acc[i][2 * u]);
            acc[i][2 * u + 1] = _mm512_fmadd_ps(wd, v[2 * u + 1], acc[i][2 * u + 1]);
        }
    }
    UNROLL for (int i = 0; i < m; i++) UNROLL for (int u = 0; u < 2 * W; u++)
        _mm512_storeu_ps(o + (size_t)i * hd + 32 * b0 + 16 * u, acc[i][u]);
}

INLINE512 void accum_qheads(const float *const *pp, int m, float *o, int hd, const uint8_t *vals, size_t rb, size_t bs,
                            int j0, int j1, int q4, int pf) {
    int b = 0;
    for (; b + 4 <= hd / 32; b += 4) accum_qcols(pp, m, 4, o, hd, b, vals, rb, bs, j0, j1, q4, pf);
    for (; b < hd / 32; b++) accum_qcols(pp, m, 1, o, hd, b, vals, rb, bs, j0, j1, q4, pf);
}

/* As accum_rows. */
INLINE512 void accum_q(const float *p, int g, int ld, const uint8_t *vals, int n, int hd, float *out, int q4) {
    enum { BLOCK = 64 };
    const size_t bs = q4 ? sizeof(block_q4_0) : sizeof(block_q8_0), rb = (size_t)(hd / 32) * bs;
    for (int j0 = 0; j0 < n; j0 += BLOCK) {
        const int j1 = j0 + BLOCK < n ? j0 + BLOCK : n;
        for (int i0 = 0; i0 < g; i0 += 2) {
            const float *pp[2] = {p + (size_t)i0 * ld, p + (size_t)(i0 + 1) * ld};
            float *o = out + (size_t)i0 * hd;
            if (i0 + 1 < g) accum_qheads(pp, 2, o, hd, vals, rb, bs, j0, j1, q4, i0 == 0);
            else accum_qheads(pp, 1, o, hd, vals, rb, bs, j0, j1, q4, i0 == 0);
        }
    }
}

/* ---- the table ------------------------------------------------------------- */

#define KV_DENSE(NAME, T, F16)                                                                                      \
    AVX512 static void NAME##_scores(const float *q, int g, const void *keys, int n, int hd, float scale, float *s, \
                                     int ld) {                                                                      \
        if (hd % 16) KV_AVX2(T).scores(q, g, keys, n, hd, scale, s, ld);                                            \
        else scores_rows(q, g, keys, n, hd, scale, s, ld, F16);                                                     \
    }                                                                                                               \
    AVX512 static void NAME##_accum(const float *p, int g, int ld, const void *vals, int n, int hd, float *out) {   \
        if (hd % 16) KV_AVX2(T).accum(p, g, ld, vals, n, hd, out);                                                  \
        else accum_rows(p, g, ld, vals, n, hd, out, F16);                                                           \
    }

#define KV_QUANT(NAME, T, Q4)                                                                                       \
    AVX512 static void NAME##_scores(const float *q, int g, const void *keys, int n, int hd, float scale, float *s, \
                                     int ld) {                                                                      \
        if (hd % 32 || hd > QMAX) KV_AVX2(T).scores(q, g, keys, n, hd, scale, s, ld);                               \
        else scores_q(q, g, keys, n, hd, scale, s, ld, Q4);                                                         \
    }                                                                                                               \
    AVX512 static void NAME##_accum(const float *p, int g, int ld, const void *vals, int n, int hd, float *out) {   \
        if (hd % 32) KV_AVX2(T).accum(p, g, ld, vals, n, hd, out);                                                  \
        else accum_q(p, g, ld, vals, n, hd, out, Q4);                                                               \
    }

KV_DENSE(kv_f16, SUBQ_KV_F16, 1)

/* f32 rows score with the AVX2 kernel: f32 is the reference KV type, and
 * its scores keep the AVX2 summation order, so the checks against the
 * float64 forward (whose q8 activation rounding a last-bit change in a
 * score can flip) see the same numbers on every x86 CPU. The value pass
 * rounds alike in both (one FMA chain per column, rows in order). */
AVX512 static void kv_f32_scores(const float *q, int g, const void *keys, int n, int hd, float scale, float *s,
                                 int ld) {
    KV_AVX2(SUBQ_KV_F32).scores(q, g, keys, n, hd, scale, s, ld);
}
AVX512 static void kv_f32_accum(const float *p, int g, int ld, const void *vals, int n, int hd, float *out) {
    if (hd % 16) KV_AVX2(SUBQ_KV_F32).accum(p, g, ld, vals, n, hd, out);
    else accum_rows(p, g, ld, vals, n, hd, out, 0);
}
KV_QUANT(kv_q8_0, SUBQ_KV_Q8_0, 0)
KV_QUANT(kv_q4_0, SUBQ_KV_Q4_0, 1)

static const kernels_kv_decode kv_avx512[SUBQ_KV_TYPE_COUNT] = {
    [SUBQ_KV_F32] = {kv_f32_scores, kv_f32_accum},
    [SUBQ_KV_F16] = {kv_f16_scores, kv_f16_accum},
    [SUBQ_KV_Q8_0] = {kv_q8_0_scores, kv_q8_0_accum},
    [SUBQ_KV_Q4_0] = {kv_q4_0_scores, kv_q4_0_accum},
};

const kernels_kv_decode *kernels_kv_decode_avx512(void) { return cpu_has_avx512vnni() ? kv_avx512 : NULL; }

#else

const kernels_kv_decode *kernels_kv_decode_avx512(void) { return NULL; }

#endif
