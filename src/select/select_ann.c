/* What the ANN selectors (hnsw, faiss) share: small candidate sets scored
 * directly, masks as filters, batches of queries. */
#include <stdlib.h>
#include <string.h>

#include "base/pool.h"
#include "select/select_internal.h"

/* Score the eligible slots directly when there are at most this many times
 * the beam width: a graph search computes about 4-12 distances per beam
 * slot (measured at M = 32), each dearer than a sequential scan's. */
#define ANN_BRUTE_FACTOR 4

int select_ann_init(select_ann *a, const selector_params *p) {
    a->d = p->d_search;
    a->score = p->plan.score;
    a->d_graph = p->d_search, a->lead = 0;
    a->f16 = p->plan.search_f16 != 0;
    return (a->qn = malloc((3 * (size_t)a->d + 2) * sizeof(float))) != NULL;
}

const void *select_ann_keys(const select_ann *a, size_t *stride) {
    return (const char *)a->vectors(a->ix, stride) + (size_t)a->lead * (a->f16 ? sizeof(uint16_t) : sizeof(float));
}

void select_ann_free(select_ann *a) {
    free(a->qn);
    free(a->labels);
    free(a->sims);
    select_scratch_free(&a->sc);
}

/* A mask and the part [lo, hi) of the slots a search may return. */
typedef struct part_filter {
    const select_mask *m;
    int lo, hi;
} part_filter;

static int part_allows(void *ctx, int64_t label) {
    const part_filter *f = ctx;
    return label >= f->lo && label < f->hi && select_mask_allows(f->m, (int)label);
}

/* The graph search for up to k eligible slots of [lo, hi) by q into
 * labels / sims (n_elig of them eligible); returns the count, -1 when the
 * index ran out of memory. */
static int search_part(selector *s, select_ann *a, const float *q, int k, const select_mask *m, int lo, int hi,
                       int n_elig, int64_t *labels, float *sims) {
    const int efw = select_filtered_ef(s->params.plan.hnsw_ef_search, a->count, n_elig), width = efw > k ? efw : k;
    part_filter f = {.m = m, .lo = lo, .hi = hi};
    int got = a->search(a->ix, q, k, efw, part_allows, &f, labels, sims, &s->stats.n_visited, &s->stats.bytes_read);
    /* a poorly connected eligible region can still starve the beam: one wider retry */
    if (got >= 0 && got < k && got < n_elig)
        got = a->search(a->ix, q, k, 4 * width, part_allows, &f, labels, sims, &s->stats.n_visited,
                        &s->stats.bytes_read);
    return got;
}

/* Room for 2k results in a's buffers; 0 when out of memory. */
static int reserve_results(selector *s, select_ann *a, int k) {
    if (2 * k <= a->res_cap) return 1;
    int64_t *l = select_query_realloc(s, a->labels, (size_t)2 * k * sizeof(int64_t));
    if (l) a->labels = l;
    float *f = select_query_realloc(s, a->sims, (size_t)2 * k * sizeof(float));
    if (f) a->sims = f;
    if (!l || !f) return 0;
    a->res_cap = 2 * k;
    return 1;
}

/* The k best (best first) of the n results in a->labels / a->sims that m
 * allows, into out; returns the count, -1 when out of memory. */
static int best_results(selector *s, select_ann *a, int n, int k, const select_mask *m, int32_t *out) {
    if (!select_scratch_u(s, &a->sc, 2 * (size_t)k)) return -1;
    topk_buf t = {.key = a->sc.u, .k = k};
    for (int i = 0; i < n; i++)
        if (select_mask_allows(m, (int)a->labels[i])) select_topk_push(&t, a->sims[i], (int32_t)a->labels[i]);
    return select_topk_take(&t, 1, out, NULL);
}

/* The content graph (a->lead: under a far scheme the graph ranks by the
 * dims that do not rotate). Far slots are scored on exactly those dims
 * (rows->q_far), which the graph search by the query's graph form (0 in
 * the leading elements' place, then those dims) ranks as a scan would;
 * near slots are scored whole, which the graph cannot follow, so they are
 * scanned (none with --tail at --far-from + 1, at most far_from
 * otherwise). The k best of both by the scores they came with (a graph's
 * similarity over the graph dims is the far score). */
static int content_query(selector *s, select_ann *a, const select_rows *rows, int k, const select_mask *m, int far_hi,
                         int32_t *out) {
    const int n_far = far_hi ? select_mask_count(m, far_hi) : 0;
    const int efw = select_filtered_ef(s->params.plan.hnsw_ef_search, a->count, n_far), width = efw > k ? efw : k;
    if (n_far <= ANN_BRUTE_FACTOR * width) return select_scan_topk(s, rows, a->count, m, k, 1, &a->sc, out);
    if (!reserve_results(s, a, k)) return -1;
    float *qg = a->qn + 2 * a->d;
    for (int i = 0; i < a->lead; i++) qg[i] = 0.0f;
    memcpy(qg + a->lead, a->qn, (size_t)(a->d_graph - a->lead) * sizeof(float));
    const int g = search_part(s, a, qg, k, m, 0, far_hi, n_far, a->labels, a->sims);
    /* the near scan's slots (in out, for now) and scores beside the graph's */
    const int n = g < 0 ? -1 : select_scan_topk_from(s, rows, far_hi, a->count, m, k, 0, &a->sc, out, a->sims + g);
    if (n < 0) return -1;
    for (int i = 0; i < n; i++) a->labels[g + i] = out[i];
    return best_results(s, a, g + n, k, m, out);
}

int select_ann_query(selector *s, select_ann *a, const float *q_search, int k, const select_mask *m, int32_t *out) {
    if (!q_search || !a->ix || a->count == 0) return 0;
    int n_elig = select_mask_count(m, a->count);
    if (n_elig == 0) return 0;
    select_prepare(a->qn, q_search, a->d, a->score);
    /* far keys without the rotated dims (selector_params.far_rot) */
    const int far_hi = s->params.far_rot > 0 && m->far_hi > 0 ? (m->far_hi < a->count ? m->far_hi : a->count) : 0;
    if (far_hi) select_far_query(a->qn + a->d, a->qn, a->d, s->params.far_rot);
    const kernels *K = kernels_get();
    select_rows rows = {.d = a->d, .q = a->qn, .dot = a->f16 ? K->gather_dot_f16 : K->gather_dot_f32,
                        .row_bytes = (size_t)a->d * (a->f16 ? sizeof(uint16_t) : sizeof(float)),
                        .far_hi = far_hi, .q_far = a->qn + a->d};
    rows.base = select_ann_keys(a, &rows.stride);
    if (a->lead) return content_query(s, a, &rows, k, m, far_hi, out);
    const int efw = select_filtered_ef(s->params.plan.hnsw_ef_search, a->count, n_elig), width = efw > k ? efw : k;
    if (n_elig <= ANN_BRUTE_FACTOR * width) return select_scan_topk(s, &rows, a->count, m, k, 1, &a->sc, out);
    if (!reserve_results(s, a, k)) return -1;
    int got = 0;
    if (!far_hi) {
        got = search_part(s, a, a->qn, k, m, 0, a->count, n_elig, a->labels, a->sims);
    } else { /* the near slots by q, the far ones by q without its rotated dims: the k best of both */
        const int n_far = select_mask_count(m, far_hi), n_near = n_elig - n_far;
        const int g1 = n_near > 0 ? search_part(s, a, a->qn, k, m, far_hi, a->count, n_near, a->labels, a->sims) : 0;
        const int g2 = g1 >= 0 && n_far > 0
                           ? search_part(s, a, a->qn + a->d, k, m, 0, far_hi, n_far, a->labels + g1, a->sims + g1)
                           : 0;
        if (g1 < 0 || g2 < 0) return -1;
        return best_results(s, a, g1 + g2, k, m, out);
    }
    if (got < 0) return -1; /* the index ran out of memory */
    int n = 0;
    for (int i = 0; i < got; i++)
        if (select_mask_allows(m, (int)a->labels[i])) out[n++] = (int32_t)a->labels[i];
    return n;
}

/* A batch of queries on the pool's threads, a few at a time (graph
 * searches differ in length), each thread with its own view: the base
 * selector (its parameters, test hook and counters of its own) and the
 * same index with scratch of its own. */
enum { ANN_BATCH_QUERIES = 8 };

typedef struct ann_view {
    selector s;
    select_ann a;
} ann_view;

typedef struct ann_batch {
    ann_view *views; /* [threads] */
    const float *q_search;
    const select_mask *m;
    int n, k;
    int32_t *out;
    int *got;
} ann_batch;

static void ann_batch_chunk(void *ctx, int chunk, int thread) {
    const ann_batch *b = ctx;
    ann_view *v = &b->views[thread];
    const int i0 = chunk * ANN_BATCH_QUERIES, i1 = i0 + ANN_BATCH_QUERIES < b->n ? i0 + ANN_BATCH_QUERIES : b->n;
    for (int i = i0; i < i1; i++)
        b->got[i] = v->a.qn && b->q_search
                        ? select_ann_query(&v->s, &v->a, b->q_search + (size_t)i * v->a.d, b->k, &b->m[i],
                                           b->out + (size_t)i * b->k)
                        : (b->q_search ? -1 : 0);
}

int select_ann_query_batch(selector *s, select_ann *a, int n, const float *q_search, int k, const select_mask *m,
                           int32_t *out, int *got, int n_threads) {
    pool *pl = n_threads > 1 ? s->env.pool : NULL;
    const int threads = pool_threads(pl);
    ann_view *views = select_query_realloc(s, NULL, (size_t)threads * sizeof *views);
    if (!views) return -1;
    for (int t = 0; t < threads; t++) {
        views[t].s = *s;
        memset(&views[t].s.stats, 0, sizeof views[t].s.stats);
        views[t].a = *a;
        views[t].a.labels = NULL, views[t].a.sims = NULL, views[t].a.res_cap = 0;
        memset(&views[t].a.sc, 0, sizeof views[t].a.sc);
        views[t].a.qn = select_query_realloc(s, NULL, (3 * (size_t)a->d + 2) * sizeof(float));
    }
    ann_batch b = {.views = views, .q_search = q_search, .m = m, .n = n, .k = k, .out = out, .got = got};
    pool_run(pl, (n + ANN_BATCH_QUERIES - 1) / ANN_BATCH_QUERIES, ann_batch_chunk, &b);
    int failed = 0;
    for (int i = 0; i < n; i++) failed |= got[i] < 0;
    for (int t = 0; t < threads; t++) {
        s->stats.n_visited += views[t].s.stats.n_visited;
        s->stats.bytes_read += views[t].s.stats.bytes_read;
        free(views[t].a.qn);
        free(views[t].a.labels);
        free(views[t].a.sims);
        select_scratch_free(&views[t].a.sc);
    }
    free(views);
    return failed ? -1 : 0;
}
