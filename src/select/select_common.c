/* Helpers shared by the selectors: mask ranges, top-k heap, normalisation,
 * and the exact masked scan. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/blas.h"
#include "base/error.h"
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

subq_status select_copy_keys(const selector *s, int count, const float *base, size_t stride, int d, int n,
                             float *dst, subq_error *err) {
    if (n < 0 || n > count)
        return subq_fail(err, SUBQ_ERR_RANGE, "selector %s (layer %d): asked for %d keys, it holds %d", selector_kind_name(s->params.kind),
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

void select_scratch_free(select_scratch *sc) {
    free(sc->f);
    free(sc->i);
    sc->f = NULL;
    sc->i = NULL;
    sc->cap_f = sc->cap_i = 0;
}

void select_normalize(float *dst, const float *src, int d) {
    /* ||x||^2 in double: search vectors can be large before normalisation */
    double ss = 0.0;
    for (int i = 0; i < d; i++) ss += (double)src[i] * src[i];
    float inv = ss > 0.0 ? (float)(1.0 / sqrt(ss)) : 0.0f;
    for (int i = 0; i < d; i++) dst[i] = src[i] * inv;
}

/* ---- exact masked scan ---------------------------------------------------------- */

/* Scan the eligible slots in [from, to) into a size-k heap; returns the
 * count, best first, with their scores when `scores` is not NULL. */
static int scan_range(const selector *s, const float *q, const void *base, size_t stride, int d,
                      kernels_gather_dot_fn dot, int n, int from, int to, const select_mask *m, int k,
                      select_scratch *sc, int32_t *out, float *scores, int64_t *n_scored) {
    if (k <= 0) return 0;
    if (!select_scratch_f(s, sc, (size_t)k + SELECT_BLOCK) || !select_scratch_i(s, sc, (size_t)k + SELECT_BLOCK))
        return -1;
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

int select_scan_topk(selector *s, const float *q, const void *base, size_t stride, int d, kernels_gather_dot_fn dot,
                     int n, const select_mask *m, int k, select_scratch *sc, int32_t *out) {
    return scan_range(s, q, base, stride, d, dot, n, 0, n, m, k, sc, out, NULL, &s->stats.n_visited);
}

int select_scan_topk_parallel(selector *s, const float *q, const void *base, size_t stride, int d,
                              kernels_gather_dot_fn dot, int n, const select_mask *m, int k, int32_t *out) {
    if (k <= 0) return 0;
    const int n_threads = s->params.n_threads;
    float *best = select_query_realloc(s, NULL, (size_t)n_threads * k * sizeof(float));
    int32_t *slots = select_query_realloc(s, NULL, (size_t)n_threads * k * sizeof(int32_t));
    int *got = select_query_realloc(s, NULL, (size_t)n_threads * sizeof(int));
    int n_out = -1;
    int64_t scored = 0;
    if (best && slots && got) {
        /* each thread: its own contiguous part of the slots and its own heap */
#pragma omp parallel for num_threads(n_threads) schedule(static, 1) reduction(+ : scored)
        for (int t = 0; t < n_threads; t++) {
            select_scratch sc = {0};
            int from = (int)((int64_t)n * t / n_threads), to = (int)((int64_t)n * (t + 1) / n_threads);
            got[t] = scan_range(s, q, base, stride, d, dot, n, from, to, m, k, &sc, slots + (size_t)t * k,
                                best + (size_t)t * k, &scored);
            select_scratch_free(&sc);
        }
        /* merge the parts' results through one more size-k heap */
        select_scratch sc = {0};
        int failed = 0;
        for (int t = 0; t < n_threads; t++) failed |= got[t] < 0;
        if (!failed && select_scratch_f(s, &sc, (size_t)k) && select_scratch_i(s, &sc, (size_t)k)) {
            select_heap h = {.score = sc.f, .slot = sc.i, .n = 0, .k = k};
            for (int t = 0; t < n_threads; t++)
                for (int i = 0; i < got[t]; i++) select_heap_push(&h, best[(size_t)t * k + i], slots[(size_t)t * k + i]);
            n_out = select_heap_take(&h, out, NULL);
        }
        select_scratch_free(&sc);
    }
    s->stats.n_visited += scored;
    free(best);
    free(slots);
    free(got);
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

int select_ann_init(select_ann *a, int d) {
    a->d = d;
    a->dot = kernels_get()->gather_dot_f32;
    return (a->qn = malloc((size_t)d * sizeof(float))) != NULL;
}

void select_ann_free(select_ann *a) {
    free(a->qn);
    free(a->labels);
    free(a->sims);
    select_scratch_free(&a->sc);
}

static int mask_filter(void *ctx, int64_t label) { return select_mask_allows(ctx, (int)label); }

static int ann_query(selector *s, select_ann *a, const float *q_search, int k, const select_mask *m, int32_t *out) {
    if (!q_search || !a->ix || a->count == 0) return 0;
    int n_elig = select_mask_count(m, a->count);
    if (n_elig == 0) return 0;
    select_normalize(a->qn, q_search, a->d);
    const int efw = select_filtered_ef(s->params.hnsw_ef_search, a->count, n_elig), width = efw > k ? efw : k;
    if (n_elig <= ANN_BRUTE_FACTOR * width) {
        size_t stride;
        const float *base = a->vectors(a->ix, &stride);
        return select_scan_topk(s, a->qn, base, stride, a->d, a->dot, a->count, m, k, &a->sc, out);
    }
    if (k > a->res_cap) {
        int64_t *l = select_query_realloc(s, a->labels, (size_t)k * sizeof(int64_t));
        if (l) a->labels = l;
        float *f = select_query_realloc(s, a->sims, (size_t)k * sizeof(float));
        if (f) a->sims = f;
        if (!l || !f) return -1;
        a->res_cap = k;
    }
    int got = a->search(a->ix, a->qn, k, efw, mask_filter, (void *)m, a->labels, a->sims, &s->stats.n_visited);
    /* a poorly connected eligible region can still starve the beam: one wider retry */
    if (got >= 0 && got < k && got < n_elig)
        got = a->search(a->ix, a->qn, k, 4 * width, mask_filter, (void *)m, a->labels, a->sims, &s->stats.n_visited);
    if (got < 0) return -1; /* the index ran out of memory */
    int n = 0;
    for (int i = 0; i < got; i++)
        if (select_mask_allows(m, (int)a->labels[i])) out[n++] = (int32_t)a->labels[i];
    return n;
}

int select_ann_query(selector *s, select_ann *a, const float *q_search, int k, const select_mask *m, int32_t *out) {
    const int64_t v0 = s->stats.n_visited;
    const int got = ann_query(s, a, q_search, k, m, out);
    /* each distance reads one stored f32 vector (the graph's links are not counted) */
    s->stats.bytes_read += (uint64_t)(s->stats.n_visited - v0) * (uint64_t)a->d * sizeof(float);
    return got;
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
