/* Helpers shared by the selectors: mask ranges, top-k heap, normalisation,
 * and the exact masked scans. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/blas.h"
#include "base/error.h"
#include "quant/quant.h"
#include "select/select_internal.h"

subq_status select_check_append(const selector *s, int count, int n, int slot0, subq_error *err) {
    const char *name = selector_kind_name(s->params.kind);
    if (n < 0) return subq_fail(err, SUBQ_ERR_ARG, "selector %s: negative key count %d", name, n);
    if (slot0 != count)
        return subq_fail(err, SUBQ_ERR_ARG,
                         "selector %s (layer %d): keys must be appended in slot order (expected slot %d, got %d; "
                         "reset the selector for a new sequence)",
                         name, s->env.layer, count, slot0);
    return SUBQ_OK;
}

subq_status select_check_truncate(const selector *s, int count, int n_keep, subq_error *err) {
    if (n_keep < 0 || n_keep > count)
        return subq_fail(err, SUBQ_ERR_RANGE, "selector %s (layer %d): cannot keep %d of its %d slots", selector_kind_name(s->params.kind),
                         s->env.layer, n_keep, count);
    return SUBQ_OK;
}

subq_status select_truncate_rebuild(selector *s, int count, int n_keep, subq_error *err) {
    subq_status rc = select_check_truncate(s, count, n_keep, err);
    if (rc || n_keep == count) return rc;
    const int d = s->params.d_search;
    float *keep = n_keep > 0 ? malloc((size_t)n_keep * d * sizeof(float)) : NULL;
    if (n_keep > 0 && !keep)
        return subq_fail(err, SUBQ_ERR_NOMEM, "selector %s: out of memory for %d keys", selector_kind_name(s->params.kind), n_keep);
    rc = s->ops->get_keys(s, n_keep, keep, err);
    if (!rc) {
        s->ops->reset(s);
        rc = s->ops->put_keys(s, keep, n_keep, 0, err);
    }
    free(keep);
    return rc;
}

subq_status select_copy_keys(const selector *s, int count, const void *base, size_t stride, int d, int f16, int n,
                             float *dst, subq_error *err) {
    if (n < 0 || n > count)
        return subq_fail(err, SUBQ_ERR_RANGE, "selector %s (layer %d): asked for %d keys, it holds %d", selector_kind_name(s->params.kind),
                         s->env.layer, n, count);
    for (int t = 0; t < n; t++) {
        float *y = dst + (size_t)t * d;
        if (f16) {
            const uint16_t *x = (const uint16_t *)base + (size_t)t * stride;
            for (int i = 0; i < d; i++) y[i] = fp16_to_fp32(x[i]);
        } else {
            memcpy(y, (const float *)base + (size_t)t * stride, (size_t)d * sizeof(float));
        }
    }
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

void *select_query_realloc(const selector *s, void *p, size_t bytes) {
    return s->fail_alloc ? NULL : realloc(p, bytes);
}

int select_scratch_f(const selector *s, select_scratch *sc, size_t n) {
    if (n <= sc->cap_f) return 1;
    float *p = select_query_realloc(s, sc->f, n * sizeof(float));
    if (!p) return 0;
    sc->f = p;
    sc->cap_f = n;
    return 1;
}

int select_scratch_i(const selector *s, select_scratch *sc, size_t n) {
    if (n <= sc->cap_i) return 1;
    int32_t *p = select_query_realloc(s, sc->i, n * sizeof(int32_t));
    if (!p) return 0;
    sc->i = p;
    sc->cap_i = n;
    return 1;
}

int select_scratch_u(const selector *s, select_scratch *sc, size_t n) {
    if (n <= sc->cap_u) return 1;
    uint64_t *p = select_query_realloc(s, sc->u, n * sizeof(uint64_t));
    if (!p) return 0;
    sc->u = p;
    sc->cap_u = n;
    return 1;
}

void select_scratch_free(select_scratch *sc) {
    free(sc->f);
    free(sc->i);
    free(sc->u);
    sc->f = NULL;
    sc->i = NULL;
    sc->u = NULL;
    sc->cap_f = sc->cap_i = sc->cap_u = 0;
}

void select_normalize(float *dst, const float *src, int d) {
    /* ||x||^2 in double: search vectors can be large before normalisation */
    double ss = 0.0;
    for (int i = 0; i < d; i++) ss += (double)src[i] * src[i];
    float inv = ss > 0.0 ? (float)(1.0 / sqrt(ss)) : 0.0f;
    for (int i = 0; i < d; i++) dst[i] = src[i] * inv;
}

void select_prepare(float *dst, const float *src, int d, select_score score) {
    if (score == SELECT_SCORE_COSINE) select_normalize(dst, src, d);
    else if (dst != src) memcpy(dst, src, (size_t)d * sizeof(float));
}

/* ---- exact masked scans ------------------------------------------------------ */

/* The k best (score, slot) pairs offered to a scan, in a buffer of 2k
 * pairs: a pair enters only if it beats the worst pair kept at the last
 * cut, and a full buffer is cut to its k best by quickselect. Amortised
 * O(1) per pair, where a size-k heap pays O(log k) per pair that enters: the
 * compressed scans keep select_rerank_pool(K) pairs, and on Gaussian keys a heap
 * of 1024 took four times as long as the int8 dot products. A pair is held
 * as one integer key that orders as the heap does (higher score first,
 * equal scores -> lower slot first), so the cut compares and swaps single
 * words without branches. */
typedef struct topk_buf {
    uint64_t *key;
    int n, k;
    uint64_t thr;     /* the worst key kept at the last cut (0 before) */
} topk_buf;

/* Floats map to unsigned integers in their order: the sign bit set for
 * positives, every bit inverted for negatives. */
static uint64_t pair_key(float score, int32_t slot) {
    uint32_t u;
    memcpy(&u, &score, sizeof u);
    u = u & 0x80000000u ? ~u : u | 0x80000000u;
    return (uint64_t)u << 32 | (uint32_t)~(uint32_t)slot;
}

static int32_t key_slot(uint64_t key) { return (int32_t)~(uint32_t)key; }

static float key_score(uint64_t key) {
    uint32_t u = (uint32_t)(key >> 32);
    u = u & 0x80000000u ? u & 0x7FFFFFFFu : ~u;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Keep the k largest of the n keys held, in any order: quickselect with
 * the middle key as pivot and a branch-free partition (keys are distinct:
 * every slot is offered once). */
static void topk_cut(topk_buf *t, int k) {
    uint64_t *a = t->key;
    int lo = 0, hi = t->n - 1;
    while (k < t->n && lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        const uint64_t p = a[mid];
        a[mid] = a[hi];
        a[hi] = p;
        int at = lo; /* keys above the pivot go to [lo, at) */
        for (int i = lo; i < hi; i++) {
            const uint64_t x = a[i], y = a[at];
            const int gt = x > p;
            a[at] = gt ? x : y;
            a[i] = gt ? y : x;
            at += gt;
        }
        a[hi] = a[at];
        a[at] = p;
        if (at == k - 1 || at == k) break;
        if (at > k) hi = at - 1;
        else lo = at + 1;
    }
    if (t->n > k) t->n = k;
}

static void topk_push(topk_buf *t, float score, int32_t slot) {
    const uint64_t key = pair_key(score, slot);
    if (key <= t->thr) return;
    t->key[t->n] = key;
    if (++t->n < 2 * t->k) return;
    topk_cut(t, t->k);
    uint64_t w = t->key[0];
    for (int i = 1; i < t->n; i++) w = t->key[i] < w ? t->key[i] : w;
    t->thr = w;
}

static int key_desc(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* The k best pairs into out (and scores, if not NULL), best first when
 * sorted; returns the count. */
static int topk_take(topk_buf *t, int sorted, int32_t *out, float *scores) {
    topk_cut(t, t->k);
    if (sorted) qsort(t->key, (size_t)t->n, sizeof(uint64_t), key_desc);
    for (int i = 0; i < t->n; i++) {
        out[i] = key_slot(t->key[i]);
        if (scores) scores[i] = key_score(t->key[i]);
    }
    return t->n;
}

/* A top-k buffer over scratch sc (2k keys, SELECT_BLOCK floats and
 * int32): the keys, then one block of slots and scores. */
typedef struct scan_buf {
    topk_buf t;
    int32_t *idx;
    float *dots;
} scan_buf;

static int scan_buf_init(const selector *s, select_scratch *sc, int k, scan_buf *b) {
    if (!select_scratch_u(s, sc, 2 * (size_t)k) || !select_scratch_f(s, sc, SELECT_BLOCK) ||
        !select_scratch_i(s, sc, SELECT_BLOCK))
        return 0;
    b->t = (topk_buf){.key = sc->u, .k = k};
    b->idx = sc->i;
    b->dots = sc->f;
    return 1;
}

/* score rows idx[0..nb) (b->idx may be idx) and offer them */
static void scan_block(const select_rows *r, scan_buf *b, const int32_t *idx, int nb) {
    r->dot(r->q, r->base, r->stride, r->d, idx, nb, b->dots);
    for (int i = 0; i < nb; i++) topk_push(&b->t, b->dots[i], idx[i]);
}

/* Scores of the n consecutive rows from slot j0 (rows with a contiguous
 * kernel only). */
static void score_run(const select_rows *r, int j0, int n, float *out) {
    if (r->code_scores)
        r->code_scores(r->cq, (const uint8_t *)r->base + (size_t)j0 * r->stride, r->code_scale + j0, n, out);
    else
        r->scores(r->q, 1, (const char *)r->base + (size_t)j0 * r->row_bytes, n, r->d, 1.0f, out, n);
}

/* Scan the eligible slots in [from, to) for the k best; returns the count,
 * (best first when sorted), with their scores when `scores` is not NULL. */
static int scan_range(const selector *s, const select_rows *r, int n, int from, int to, const select_mask *m, int k,
                      uint64_t thr0, int sorted, select_scratch *sc, int32_t *out, float *scores, int64_t *n_scored) {
    scan_buf b;
    if (k <= 0) return 0;
    if (!scan_buf_init(s, sc, k, &b)) return -1;
    const kernels *K = kernels_get();
    b.t.thr = thr0;
    int lo[3], hi[3], nr = select_mask_ranges(m, n, lo, hi);
    int64_t scored = 0;
    /* per block: gather the eligible slots, score them, offer them */
    for (int q = 0; q < nr; q++) {
        int a = lo[q] > from ? lo[q] : from, e = hi[q] < to ? hi[q] : to;
        for (int j0 = a; j0 < e; j0 += SELECT_BLOCK) {
            int j1 = j0 + SELECT_BLOCK < e ? j0 + SELECT_BLOCK : e, nb = 0;
            if (r->scores || r->code_scores) { /* consecutive rows: no slot list, several rows per sum */
                score_run(r, j0, j1 - j0, b.dots);
                /* most scores lose to the worst kept at the last cut: the
                 * others are listed, then offered */
                const float worst = b.t.thr ? key_score(b.t.thr) : -INFINITY;
                const int nc = K->index_at_least(b.dots, j1 - j0, worst, b.idx);
                for (int c = 0; c < nc; c++) {
                    const int j = j0 + b.idx[c];
                    if (!m->seg || m->seg[j] == m->query_seg) topk_push(&b.t, b.dots[b.idx[c]], j);
                }
                scored += j1 - j0; /* every row of the run is read and scored */
                continue;
            }
            if (m->seg) {
                for (int j = j0; j < j1; j++)
                    if (m->seg[j] == m->query_seg) b.idx[nb++] = j;
            } else {
                for (int j = j0; j < j1; j++) b.idx[nb++] = j;
            }
            scan_block(r, &b, b.idx, nb);
            scored += nb;
        }
    }
    *n_scored += scored;
    return topk_take(&b.t, sorted, out, scores);
}

/* A scan's buffer admits a row only above the worst kept, but from an
 * empty buffer that is about 2k + k ln(n / 2k) admissions and a cut per k
 * of them (128K Gaussian keys, a re-rank pool of 1024: 20K admissions and
 * 30 cuts per query, more time than the int4 scores). So a long scan
 * first scores a sample, SAMPLE_RUNS runs of consecutive rows spread over
 * its slots, 1/SAMPLE_FRACTION of them, and starts the buffer's threshold
 * at the r-th best sampled score, r chosen so that about 4k rows of the
 * whole should beat it. A scan that keeps fewer than k rows (the estimate
 * came out too high) runs again from no threshold: the result is the same
 * either way. 0: no threshold (short scans, rows without a contiguous
 * kernel, too few eligible rows in the sample). */
enum { SAMPLE_RUNS = 16, SAMPLE_FRACTION = 32, SAMPLE_MAX = 4096 };

static uint64_t sample_threshold(const select_rows *r, int n, int from, int to, const select_mask *m, int k,
                                 int64_t *n_scored) {
    int lo[3], hi[3], nr = select_mask_ranges(m, n, lo, hi);
    int64_t span = 0; /* slots of [from, to) in the ranges */
    for (int q = 0; q < nr; q++) {
        const int a = lo[q] > from ? lo[q] : from, e = hi[q] < to ? hi[q] : to;
        span += e > a ? e - a : 0;
    }
    const int run = (int)(span / ((int64_t)SAMPLE_FRACTION * SAMPLE_RUNS));
    if ((!r->scores && !r->code_scores) || run < 16 || k <= 0) return 0;
    const int len = run * SAMPLE_RUNS > SAMPLE_MAX ? SAMPLE_MAX / SAMPLE_RUNS : run;
    float dots[SAMPLE_MAX / SAMPLE_RUNS];
    uint64_t key[SAMPLE_MAX];
    int n_key = 0, n_seen = 0;
    for (int c = 0; c < SAMPLE_RUNS; c++) {
        int p = from + (int)((int64_t)(to - from) * (2 * c + 1) / (2 * SAMPLE_RUNS)) - len / 2;
        p = p < from ? from : p + len > to ? to - len : p;
        for (int q = 0; q < nr; q++) {
            const int a = lo[q] > p ? lo[q] : p, e = hi[q] < p + len ? hi[q] : p + len;
            if (e <= a) continue;
            score_run(r, a, e - a, dots);
            n_seen += e - a;
            for (int j = a; j < e; j++)
                if (!m->seg || m->seg[j] == m->query_seg) key[n_key++] = pair_key(dots[j - a], j);
        }
    }
    *n_scored += n_seen;
    /* r / n_seen of the sample beat the threshold, so about r * span / n_seen rows of the whole */
    const int64_t want = ((int64_t)4 * k * n_seen + span - 1) / span;
    if (n_seen == 0 || want < 1 || 2 * want > n_key) return 0;
    topk_buf t = {.key = key, .n = n_key, .k = (int)want};
    topk_cut(&t, (int)want);
    uint64_t w = key[0];
    for (int i = 1; i < t.n; i++) w = key[i] < w ? key[i] : w;
    /* every pair with the r-th best sampled score, or higher, is admitted */
    return pair_key(key_score(w), INT32_MAX);
}

/* scan_range from a sampled threshold, again from none when it kept fewer
 * than k */
static int scan_part(const selector *s, const select_rows *r, int n, int from, int to, const select_mask *m, int k,
                     int sorted, select_scratch *sc, int32_t *out, float *scores, int64_t *n_scored) {
    const uint64_t thr0 = sample_threshold(r, n, from, to, m, k, n_scored);
    int got = scan_range(s, r, n, from, to, m, k, thr0, sorted, sc, out, scores, n_scored);
    if (thr0 && got >= 0 && got < k) got = scan_range(s, r, n, from, to, m, k, 0, sorted, sc, out, scores, n_scored);
    return got;
}

static void count_rows(selector *s, const select_rows *r, int64_t scored) {
    s->stats.n_visited += scored;
    s->stats.bytes_read += (uint64_t)scored * r->row_bytes;
}

int select_scan_topk(selector *s, const select_rows *rows, int n, const select_mask *m, int k, int sorted,
                     select_scratch *sc, int32_t *out) {
    int64_t scored = 0;
    int got = scan_part(s, rows, n, 0, n, m, k, sorted, sc, out, NULL, &scored);
    count_rows(s, rows, scored);
    return got;
}

int select_rank_slots(selector *s, const select_rows *rows, const int32_t *slots, int n, int k, select_scratch *sc,
                      int32_t *out) {
    scan_buf b;
    if (k <= 0) return 0;
    if (!scan_buf_init(s, sc, k, &b)) return -1;
    for (int i0 = 0; i0 < n; i0 += SELECT_BLOCK) scan_block(rows, &b, slots + i0, n - i0 < SELECT_BLOCK ? n - i0 : SELECT_BLOCK);
    count_rows(s, rows, n);
    return topk_take(&b.t, 1, out, NULL);
}

/* One part of a parallel scan: a contiguous range of the slots into its own buffer. */
typedef struct scan_job {
    selector *s;
    const select_rows *rows;
    const select_mask *m;
    int n, k, n_parts, failed;
    float *best;
    int32_t *slots;
    int *got;
    int64_t *scored;
} scan_job;

static void scan_part_chunk(void *ctx, int t, int thread) {
    scan_job *j = ctx;
    select_scratch sc = {0};
    const int from = (int)((int64_t)j->n * t / j->n_parts), to = (int)((int64_t)j->n * (t + 1) / j->n_parts);
    j->scored[t] = 0;
    j->got[t] = scan_part(j->s, j->rows, j->n, from, to, j->m, j->k, 0, &sc, j->slots + (size_t)t * j->k,
                          j->best + (size_t)t * j->k, &j->scored[t]);
    select_scratch_free(&sc);
}

int select_scan_topk_parallel(selector *s, const select_rows *rows, int n, const select_mask *m, int k, int sorted,
                              int32_t *out) {
    if (k <= 0) return 0;
    /* two parts per thread: a thread another process holds up leaves one for the others */
    const int n_parts = 2 * pool_threads(s->env.pool);
    float *best = select_query_realloc(s, NULL, (size_t)n_parts * k * sizeof(float));
    int32_t *slots = select_query_realloc(s, NULL, (size_t)n_parts * k * sizeof(int32_t));
    int *got = select_query_realloc(s, NULL, (size_t)n_parts * sizeof(int));
    int64_t *scored = select_query_realloc(s, NULL, (size_t)n_parts * sizeof(int64_t));
    int n_out = -1;
    int64_t total = 0;
    if (best && slots && got && scored) {
        scan_job j = {.s = s, .rows = rows, .m = m, .n = n, .k = k, .n_parts = n_parts, .best = best, .slots = slots,
                      .got = got, .scored = scored};
        pool_run(s->env.pool, n_parts, scan_part_chunk, &j);
        /* merge the parts' results through one more buffer */
        select_scratch sc = {0};
        scan_buf b;
        int failed = 0;
        for (int t = 0; t < n_parts; t++) failed |= got[t] < 0, total += scored[t];
        if (!failed && scan_buf_init(s, &sc, k, &b)) {
            for (int t = 0; t < n_parts; t++)
                for (int i = 0; i < got[t]; i++) topk_push(&b.t, best[(size_t)t * k + i], slots[(size_t)t * k + i]);
            n_out = topk_take(&b.t, sorted, out, NULL);
        }
        select_scratch_free(&sc);
    }
    count_rows(s, rows, total);
    free(best);
    free(slots);
    free(got);
    free(scored);
    return n_out;
}

/* Keys per sgemm block of the batched scan: n x 1024 scores. */
#define BATCH_KEYS 1024

int select_scan_topk_batch(selector *s, int n, const float *qn, const void *base, size_t stride, int d, int f16,
                           int count, const select_mask *m, int k, int32_t *out, int *got, int n_threads) {
    int top = 0; /* keys any query may see */
    for (int i = 0; i < n; i++) {
        int v = m[i].n_slots < count ? m[i].n_slots : count;
        top = v > top ? v : top;
    }
    float *S = select_query_realloc(s, NULL, (size_t)n * BATCH_KEYS * sizeof(float));
    float *kf = f16 ? select_query_realloc(s, NULL, (size_t)BATCH_KEYS * d * sizeof(float)) : NULL;
    float *hs = select_query_realloc(s, NULL, (size_t)n * k * sizeof(float));
    int32_t *hj = select_query_realloc(s, NULL, (size_t)n * k * sizeof(int32_t));
    select_heap *h = select_query_realloc(s, NULL, (size_t)n * sizeof(select_heap));
    int rc = !S || (f16 && !kf) || !hs || !hj || !h ? -1 : 0;
    int64_t scored = 0;
    for (int i = 0; !rc && i < n; i++) h[i] = (select_heap){.score = hs + (size_t)i * k, .slot = hj + (size_t)i * k, .k = k};
    for (int j0 = 0; !rc && j0 < top; j0 += BATCH_KEYS) {
        const int j1 = j0 + BATCH_KEYS < top ? j0 + BATCH_KEYS : top, nb = j1 - j0;
        const float *K = (const float *)base + (size_t)j0 * stride;
        if (f16) { /* f16 rows are packed (stride == d) */
            dequant_row(GGML_TYPE_F16, (const uint16_t *)base + (size_t)j0 * stride, kf, (int64_t)nb * d);
            K = kf;
        }
        blas_sgemm(n_threads, 0, 1, n, nb, d, 1.0f, qn, d, K, f16 ? d : (int)stride, 0.0f, S, nb);
#pragma omp parallel for num_threads(n_threads) schedule(static) reduction(+ : scored) if (n * nb >= 1 << 16)
        for (int i = 0; i < n; i++) {
            int lo[3], hi[3], nr = select_mask_ranges(&m[i], count, lo, hi);
            const float *row = S + (size_t)i * nb - j0;
            for (int r = 0; r < nr; r++) {
                int a = lo[r] > j0 ? lo[r] : j0, b = hi[r] < j1 ? hi[r] : j1;
                for (int j = a; j < b; j++)
                    if (!m[i].seg || m[i].seg[j] == m[i].query_seg) {
                        select_heap_push(&h[i], row[j], j);
                        scored++;
                    }
            }
        }
    }
    for (int i = 0; !rc && i < n; i++) got[i] = select_heap_take(&h[i], out + (size_t)i * k, NULL);
    s->stats.n_visited += scored;
    s->stats.bytes_read += (uint64_t)top * (uint64_t)d * (f16 ? 2 : 4); /* each key row read once per batch */
    free(S);
    free(kf);
    free(hs);
    free(hj);
    free(h);
    return rc;
}

/* ---- graph indexes (hnsw, faiss) -------------------------------------------- */

/* Score the eligible slots directly when there are at most this many times
 * the beam width: a graph search computes about 4-12 distances per beam
 * slot (measured at M = 32), each dearer than a sequential scan's. */
#define ANN_BRUTE_FACTOR 4

int select_ann_init(select_ann *a, const selector_params *p) {
    a->d = p->d_search;
    a->score = p->score;
    a->f16 = p->f16_keys != 0;
    return (a->qn = malloc((size_t)a->d * sizeof(float))) != NULL;
}

void select_ann_free(select_ann *a) {
    free(a->qn);
    free(a->labels);
    free(a->sims);
    select_scratch_free(&a->sc);
}

static int mask_filter(void *ctx, int64_t label) { return select_mask_allows(ctx, (int)label); }

int select_ann_query(selector *s, select_ann *a, const float *q_search, int k, const select_mask *m, int32_t *out) {
    if (!q_search || !a->ix || a->count == 0) return 0;
    int n_elig = select_mask_count(m, a->count);
    if (n_elig == 0) return 0;
    select_prepare(a->qn, q_search, a->d, a->score);
    const int efw = select_filtered_ef(s->params.hnsw_ef_search, a->count, n_elig), width = efw > k ? efw : k;
    if (n_elig <= ANN_BRUTE_FACTOR * width) {
        const kernels *K = kernels_get();
        select_rows rows = {.d = a->d, .q = a->qn, .dot = a->f16 ? K->gather_dot_f16 : K->gather_dot_f32,
                            .row_bytes = (size_t)a->d * (a->f16 ? sizeof(uint16_t) : sizeof(float))};
        rows.base = a->vectors(a->ix, &rows.stride);
        return select_scan_topk(s, &rows, a->count, m, k, 1, &a->sc, out);
    }
    if (k > a->res_cap) {
        int64_t *l = select_query_realloc(s, a->labels, (size_t)k * sizeof(int64_t));
        if (l) a->labels = l;
        float *f = select_query_realloc(s, a->sims, (size_t)k * sizeof(float));
        if (f) a->sims = f;
        if (!l || !f) return -1;
        a->res_cap = k;
    }
    int got = a->search(a->ix, a->qn, k, efw, mask_filter, (void *)m, a->labels, a->sims, &s->stats.n_visited,
                        &s->stats.bytes_read);
    /* a poorly connected eligible region can still starve the beam: one wider retry */
    if (got >= 0 && got < k && got < n_elig)
        got = a->search(a->ix, a->qn, k, 4 * width, mask_filter, (void *)m, a->labels, a->sims, &s->stats.n_visited,
                        &s->stats.bytes_read);
    if (got < 0) return -1; /* the index ran out of memory */
    int n = 0;
    for (int i = 0; i < got; i++)
        if (select_mask_allows(m, (int)a->labels[i])) out[n++] = (int32_t)a->labels[i];
    return n;
}

int select_ann_query_batch(selector *s, select_ann *a, int n, const float *q_search, int k, const select_mask *m,
                           int32_t *out, int *got, int n_threads) {
    int failed = 0;
    int64_t visited = 0;
    uint64_t bytes = 0;
#pragma omp parallel num_threads(n_threads) reduction(+ : visited, bytes)
    {
        selector view = *s; /* the base only: its parameters, test hook and counters of its own */
        memset(&view.stats, 0, sizeof view.stats);
        select_ann mine = *a; /* the same index; scratch of its own */
        mine.labels = NULL;
        mine.sims = NULL;
        mine.res_cap = 0;
        memset(&mine.sc, 0, sizeof mine.sc);
        mine.qn = select_query_realloc(s, NULL, (size_t)a->d * sizeof(float));
#pragma omp for schedule(dynamic, 8)
        for (int i = 0; i < n; i++) {
            got[i] = mine.qn && q_search ? select_ann_query(&view, &mine, q_search + (size_t)i * a->d, k, &m[i],
                                                            out + (size_t)i * k)
                                         : (q_search ? -1 : 0);
            if (got[i] < 0) {
#pragma omp atomic write
                failed = 1;
            }
        }
        visited += view.stats.n_visited;
        bytes += view.stats.bytes_read;
        free(mine.qn);
        free(mine.labels);
        free(mine.sims);
        select_scratch_free(&mine.sc);
    }
    s->stats.n_visited += visited;
    s->stats.bytes_read += bytes;
    return failed ? -1 : 0;
}
