/* Helpers shared by the selectors: mask ranges, top-k heap, normalisation,
 * row-dot kernels and the exact masked scan. */
#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "base/error.h"
#include "quant/quant.h"
#include "select/select_internal.h"

subq_status select_check_append(const selector *s, int count, int n, int slot0, subq_error *err) {
    if (n < 0) return subq_fail(err, SUBQ_ERR_ARG, "selector %s: negative key count %d", s->ops->name, n);
    if (slot0 != count)
        return subq_fail(err, SUBQ_ERR_ARG,
                         "selector %s (layer %d): keys must be appended in slot order (expected slot %d, got %d; "
                         "reset the selector for a new sequence)",
                         s->ops->name, s->env.layer, count, slot0);
    return SUBQ_OK;
}

subq_status select_check_truncate(const selector *s, int count, int n_keep, subq_error *err) {
    if (n_keep < 0 || n_keep > count)
        return subq_fail(err, SUBQ_ERR_RANGE, "selector %s (layer %d): cannot keep %d of its %d slots", s->ops->name,
                         s->env.layer, n_keep, count);
    return SUBQ_OK;
}

subq_status select_truncate_rebuild(selector *s, int count, int n_keep, subq_error *err) {
    subq_status rc = select_check_truncate(s, count, n_keep, err);
    if (rc || n_keep == count) return rc;
    const int d = s->params.d_search;
    float *keep = n_keep > 0 ? malloc((size_t)n_keep * d * sizeof(float)) : NULL;
    if (n_keep > 0 && !keep)
        return subq_fail(err, SUBQ_ERR_NOMEM, "selector %s: out of memory for %d keys", s->ops->name, n_keep);
    rc = s->ops->get_keys(s, n_keep, keep, err);
    if (!rc) {
        s->ops->reset(s);
        rc = s->ops->put_keys(s, keep, n_keep, 0, err);
    }
    free(keep);
    return rc;
}

subq_status select_copy_keys(const selector *s, int count, const float *base, size_t stride, int d, int n,
                             float *dst, subq_error *err) {
    if (n < 0 || n > count)
        return subq_fail(err, SUBQ_ERR_RANGE, "selector %s (layer %d): asked for %d keys, it holds %d", s->ops->name,
                         s->env.layer, n, count);
    for (int t = 0; t < n; t++) memcpy(dst + (size_t)t * d, base + (size_t)t * stride, (size_t)d * sizeof(float));
    return SUBQ_OK;
}

int select_mask_ranges(const select_mask *m, int n, int lo[3], int hi[3]) {
    if (m->n_slots < n) n = m->n_slots;
    /* the two excluded ranges, in order of their start (empty ones dropped) */
    int x0[2], x1[2], nx = 0;
    if (m->ex0_hi > m->ex0_lo) { x0[nx] = m->ex0_lo; x1[nx] = m->ex0_hi; nx++; }
    if (m->ex1_hi > m->ex1_lo) { x0[nx] = m->ex1_lo; x1[nx] = m->ex1_hi; nx++; }
    if (nx == 2 && x0[1] < x0[0]) {
        int t0 = x0[0], t1 = x1[0];
        x0[0] = x0[1]; x1[0] = x1[1];
        x0[1] = t0; x1[1] = t1;
    }
    /* walk [0, n): emit the gap before each excluded range, then jump past it */
    int cur = 0, nr = 0;
    for (int i = 0; i < nx; i++) {
        int end = x0[i] < n ? x0[i] : n;
        if (end > cur) { lo[nr] = cur; hi[nr] = end; nr++; }
        if (x1[i] > cur) cur = x1[i];
    }
    if (cur < n) { lo[nr] = cur; hi[nr] = n; nr++; }
    return nr;
}

int select_mask_count(const select_mask *m, int n) {
    int lo[3], hi[3], nr = select_mask_ranges(m, n, lo, hi), c = 0;
    for (int r = 0; r < nr; r++) {
        if (!m->seg) {
            c += hi[r] - lo[r];
            continue;
        }
        for (int j = lo[r]; j < hi[r]; j++) c += m->seg[j] == m->query_seg;
    }
    return c;
}

/* ---- bounded top-k heap -------------------------------------------------- */

/* pair a is worse than pair b: lower score, or equal score and higher slot */
static int worse(float sa, int32_t ja, float sb, int32_t jb) { return sa < sb || (sa == sb && ja > jb); }

static void heap_swap(select_heap *h, int a, int b) {
    float s = h->score[a];
    int32_t j = h->slot[a];
    h->score[a] = h->score[b];
    h->slot[a] = h->slot[b];
    h->score[b] = s;
    h->slot[b] = j;
}

/* restore "root = worst" below position i of heap[0..n) */
static void heap_down(select_heap *h, int n, int i) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && worse(h->score[l], h->slot[l], h->score[w], h->slot[w])) w = l;
        if (r < n && worse(h->score[r], h->slot[r], h->score[w], h->slot[w])) w = r;
        if (w == i) return;
        heap_swap(h, i, w);
        i = w;
    }
}

void select_heap_push(select_heap *h, float score, int32_t slot) {
    if (h->k <= 0) return;
    if (h->n < h->k) {
        /* append and sift up while worse than the parent */
        int i = h->n++;
        h->score[i] = score;
        h->slot[i] = slot;
        while (i > 0) {
            int p = (i - 1) / 2;
            if (!worse(h->score[i], h->slot[i], h->score[p], h->slot[p])) break;
            heap_swap(h, i, p);
            i = p;
        }
        return;
    }
    if (!worse(h->score[0], h->slot[0], score, slot)) return;
    h->score[0] = score;
    h->slot[0] = slot;
    heap_down(h, h->n, 0);
}

int select_heap_take(select_heap *h, int32_t *out, float *scores) {
    int n = h->n;
    /* heap sort: move the worst to the end each time -> best-first order */
    for (int end = n - 1; end > 0; end--) {
        heap_swap(h, 0, end);
        heap_down(h, end, 0);
    }
    for (int i = 0; i < n; i++) {
        out[i] = h->slot[i];
        if (scores) scores[i] = h->score[i];
    }
    h->n = 0;
    return n;
}

/* ---- scratch -------------------------------------------------------------- */

int select_scratch_f(select_scratch *s, size_t n) {
    if (n <= s->cap_f) return 1;
    float *p = realloc(s->f, n * sizeof(float));
    if (!p) return 0;
    s->f = p;
    s->cap_f = n;
    return 1;
}

int select_scratch_i(select_scratch *s, size_t n) {
    if (n <= s->cap_i) return 1;
    int32_t *p = realloc(s->i, n * sizeof(int32_t));
    if (!p) return 0;
    s->i = p;
    s->cap_i = n;
    return 1;
}

void select_scratch_free(select_scratch *s) {
    free(s->f);
    free(s->i);
    s->f = NULL;
    s->i = NULL;
    s->cap_f = s->cap_i = 0;
}

void select_normalize(float *dst, const float *src, int d) {
    /* ||x||^2 in double: search vectors can be large before normalisation */
    double ss = 0.0;
    for (int i = 0; i < d; i++) ss += (double)src[i] * src[i];
    float inv = ss > 0.0 ? (float)(1.0 / sqrt(ss)) : 0.0f;
    for (int i = 0; i < d; i++) dst[i] = src[i] * inv;
}

/* ---- row-dot kernels -------------------------------------------------------- */

/* out[i] = sum_c q[c] * row_idx[i][c] */
static void dot_rows_f32_scalar(const float *q, const void *base, size_t stride, int d, const int32_t *idx, int n,
                                float *out) {
    const float *b = base;
    for (int i = 0; i < n; i++) {
        const float *r = b + (size_t)idx[i] * stride;
        float s = 0.0f;
        for (int c = 0; c < d; c++) s += q[c] * r[c];
        out[i] = s;
    }
}

static void dot_rows_f16_scalar(const float *q, const void *base, size_t stride, int d, const int32_t *idx, int n,
                                float *out) {
    const uint16_t *b = base;
    for (int i = 0; i < n; i++) {
        const uint16_t *r = b + (size_t)idx[i] * stride;
        float s = 0.0f;
        for (int c = 0; c < d; c++) s += q[c] * fp16_to_fp32(r[c]);
        out[i] = s;
    }
}

/* the four lane sums of a..d as one 128-bit vector [sum a, sum b, sum c, sum d] */
__attribute__((target("avx2,fma"))) static __m128 hsum4(__m256 a, __m256 b, __m256 c, __m256 d) {
    __m256 ab = _mm256_hadd_ps(a, b), cd = _mm256_hadd_ps(c, d);
    __m256 abcd = _mm256_hadd_ps(ab, cd);
    return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

__attribute__((target("avx2,fma"))) static float hsum1(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Four rows at a time: each q chunk is loaded once for four FMAs and the four
 * horizontal sums share one hadd tree. */
__attribute__((target("avx2,fma"))) static void dot_rows_f32_avx2(const float *q, const void *base, size_t stride,
                                                                  int d, const int32_t *idx, int n, float *out) {
    const float *b = base;
    const int d8 = d & ~7;
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        const float *r0 = b + (size_t)idx[i] * stride, *r1 = b + (size_t)idx[i + 1] * stride;
        const float *r2 = b + (size_t)idx[i + 2] * stride, *r3 = b + (size_t)idx[i + 3] * stride;
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
        for (int c = 0; c < d8; c += 8) {
            __m256 qv = _mm256_loadu_ps(q + c);
            a0 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(r0 + c), a0);
            a1 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(r1 + c), a1);
            a2 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(r2 + c), a2);
            a3 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(r3 + c), a3);
        }
        float s[4];
        _mm_storeu_ps(s, hsum4(a0, a1, a2, a3));
        for (int c = d8; c < d; c++) {
            s[0] += q[c] * r0[c];
            s[1] += q[c] * r1[c];
            s[2] += q[c] * r2[c];
            s[3] += q[c] * r3[c];
        }
        out[i] = s[0];
        out[i + 1] = s[1];
        out[i + 2] = s[2];
        out[i + 3] = s[3];
    }
    for (; i < n; i++) {
        const float *r = b + (size_t)idx[i] * stride;
        __m256 a = _mm256_setzero_ps();
        for (int c = 0; c < d8; c += 8) a = _mm256_fmadd_ps(_mm256_loadu_ps(q + c), _mm256_loadu_ps(r + c), a);
        float s = hsum1(a);
        for (int c = d8; c < d; c++) s += q[c] * r[c];
        out[i] = s;
    }
}

__attribute__((target("avx2,fma,f16c"))) static void dot_rows_f16_avx2(const float *q, const void *base,
                                                                       size_t stride, int d, const int32_t *idx,
                                                                       int n, float *out) {
    const uint16_t *b = base;
    const int d8 = d & ~7;
#define LD16(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        const uint16_t *r0 = b + (size_t)idx[i] * stride, *r1 = b + (size_t)idx[i + 1] * stride;
        const uint16_t *r2 = b + (size_t)idx[i + 2] * stride, *r3 = b + (size_t)idx[i + 3] * stride;
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
        for (int c = 0; c < d8; c += 8) {
            __m256 qv = _mm256_loadu_ps(q + c);
            a0 = _mm256_fmadd_ps(qv, LD16(r0 + c), a0);
            a1 = _mm256_fmadd_ps(qv, LD16(r1 + c), a1);
            a2 = _mm256_fmadd_ps(qv, LD16(r2 + c), a2);
            a3 = _mm256_fmadd_ps(qv, LD16(r3 + c), a3);
        }
        float s[4];
        _mm_storeu_ps(s, hsum4(a0, a1, a2, a3));
        for (int c = d8; c < d; c++) {
            s[0] += q[c] * fp16_to_fp32(r0[c]);
            s[1] += q[c] * fp16_to_fp32(r1[c]);
            s[2] += q[c] * fp16_to_fp32(r2[c]);
            s[3] += q[c] * fp16_to_fp32(r3[c]);
        }
        out[i] = s[0];
        out[i + 1] = s[1];
        out[i + 2] = s[2];
        out[i + 3] = s[3];
    }
    for (; i < n; i++) {
        const uint16_t *r = b + (size_t)idx[i] * stride;
        __m256 a = _mm256_setzero_ps();
        for (int c = 0; c < d8; c += 8) a = _mm256_fmadd_ps(_mm256_loadu_ps(q + c), LD16(r + c), a);
        float s = hsum1(a);
        for (int c = d8; c < d; c++) s += q[c] * fp16_to_fp32(r[c]);
        out[i] = s;
    }
#undef LD16
}

select_dot_rows_fn select_dot_rows_f32(void) { return cpu_has_avx2() ? dot_rows_f32_avx2 : dot_rows_f32_scalar; }
select_dot_rows_fn select_dot_rows_f16(void) { return cpu_has_avx2() ? dot_rows_f16_avx2 : dot_rows_f16_scalar; }

/* ---- exact masked scan ---------------------------------------------------------- */

/* Scan the eligible slots in [from, to) into a size-k heap; returns the
 * count, best first, with their scores when `scores` is not NULL. */
static int scan_range(const float *q, const void *base, size_t stride, int d, select_dot_rows_fn dot, int n, int from,
                      int to, const select_mask *m, int k, select_scratch *sc, int32_t *out, float *scores,
                      int64_t *n_scored) {
    if (k <= 0) return 0;
    if (!select_scratch_f(sc, (size_t)k + SELECT_BLOCK) || !select_scratch_i(sc, (size_t)k + SELECT_BLOCK)) return 0;
    select_heap h = {.score = sc->f, .slot = sc->i, .n = 0, .k = k};
    int32_t *idx = sc->i + k;
    float *dots = sc->f + k;
    int lo[3], hi[3], nr = select_mask_ranges(m, n, lo, hi);
    int64_t scored = 0;
    /* per block: gather the eligible slots, score them, offer them to the heap */
    for (int r = 0; r < nr; r++) {
        int a = lo[r] > from ? lo[r] : from, b = hi[r] < to ? hi[r] : to;
        for (int j0 = a; j0 < b; j0 += SELECT_BLOCK) {
            int j1 = j0 + SELECT_BLOCK < b ? j0 + SELECT_BLOCK : b, nb = 0;
            if (m->seg) {
                for (int j = j0; j < j1; j++)
                    if (m->seg[j] == m->query_seg) idx[nb++] = j;
            } else {
                for (int j = j0; j < j1; j++) idx[nb++] = j;
            }
            dot(q, base, stride, d, idx, nb, dots);
            for (int i = 0; i < nb; i++) select_heap_push(&h, dots[i], idx[i]);
            scored += nb;
        }
    }
    *n_scored += scored;
    return select_heap_take(&h, out, scores);
}

int select_scan_topk(const float *q, const void *base, size_t stride, int d, select_dot_rows_fn dot, int n,
                     const select_mask *m, int k, select_scratch *sc, int32_t *out, int64_t *n_scored) {
    return scan_range(q, base, stride, d, dot, n, 0, n, m, k, sc, out, NULL, n_scored);
}

int select_scan_topk_parallel(const float *q, const void *base, size_t stride, int d, select_dot_rows_fn dot, int n,
                              const select_mask *m, int k, int n_threads, int32_t *out, int64_t *n_scored) {
    if (k <= 0) return 0;
    float *best = malloc((size_t)n_threads * k * sizeof(float));
    int32_t *slots = malloc((size_t)n_threads * k * sizeof(int32_t));
    int *got = calloc((size_t)n_threads, sizeof(int));
    int n_out = 0;
    int64_t scored = 0;
    if (best && slots && got) {
        /* each thread: its own contiguous part of the slots and its own heap */
#pragma omp parallel for num_threads(n_threads) schedule(static, 1) reduction(+ : scored)
        for (int t = 0; t < n_threads; t++) {
            select_scratch sc = {0};
            int from = (int)((int64_t)n * t / n_threads), to = (int)((int64_t)n * (t + 1) / n_threads);
            got[t] = scan_range(q, base, stride, d, dot, n, from, to, m, k, &sc, slots + (size_t)t * k,
                                best + (size_t)t * k, &scored);
            select_scratch_free(&sc);
        }
        /* merge the parts' results through one more size-k heap */
        select_scratch sc = {0};
        if (select_scratch_f(&sc, (size_t)k) && select_scratch_i(&sc, (size_t)k)) {
            select_heap h = {.score = sc.f, .slot = sc.i, .n = 0, .k = k};
            for (int t = 0; t < n_threads; t++)
                for (int i = 0; i < got[t]; i++) select_heap_push(&h, best[(size_t)t * k + i], slots[(size_t)t * k + i]);
            n_out = select_heap_take(&h, out, NULL);
        }
        select_scratch_free(&sc);
    }
    *n_scored += scored;
    free(best);
    free(slots);
    free(got);
    return n_out;
}
