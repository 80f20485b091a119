/* What the ANN selectors (hnsw, faiss) share: small candidate sets scored
 * directly, masks as filters, batches of queries. */
#include <stdlib.h>
#include <string.h>

#include "base/pool.h"
#include "base/timer.h"
#include "select/select_internal.h"

/* Score the eligible slots directly when there are at most this many times
 * the beam width: a graph search computes about 4-12 distances per beam
 * slot (measured at M = 32), each dearer than a sequential scan's. */
#define ANN_BRUTE_FACTOR 4

int select_ann_init(select_ann *a, const selector_params *p) {
    a->d = p->d_search;
    a->score = p->plan.score;
    a->d_graph = p->d_search, a->lead = 0;
    a->recent = NULL, a->recent_lo = a->recent_n = a->recent_cap = a->recent_max = 0;
    a->f16 = p->plan.search_f16 != 0;
    return (a->qn = malloc((3 * (size_t)a->d + 2) * sizeof(float))) != NULL;
}

/* beyond far_from + 1, the recent keys a query's near scan may need: a
 * prompt batch's (its queries see the keys before the batch) and more */
#define RECENT_SLACK 1024

static size_t elem_bytes(const select_ann *a) { return a->f16 ? sizeof(uint16_t) : sizeof(float); }
static size_t key_bytes(const select_ann *a) { return (size_t)a->d * elem_bytes(a); }

void select_ann_recent_init(select_ann *a, int far_from) {
    a->recent_max = far_from >= 0 && far_from < (1 << 24) ? 2 * (far_from + 1 + RECENT_SLACK) : 0;
    a->recent_lo = a->recent_n = 0;
}

void select_ann_recent_push(select_ann *a, const void *stored) {
    const size_t row = key_bytes(a);
    const char *key = (const char *)stored + (size_t)a->lead * elem_bytes(a);
    if (!a->recent_max) return;
    if (a->recent_n == a->recent_max) { /* keep the newer half */
        const int keep = a->recent_max / 2;
        memmove(a->recent, (char *)a->recent + (size_t)(a->recent_n - keep) * row, (size_t)keep * row);
        a->recent_lo += a->recent_n - keep, a->recent_n = keep;
    } else if (a->recent_n == a->recent_cap) { /* grown as keys come, to recent_max */
        const int cap = a->recent_cap ? (2 * a->recent_cap < a->recent_max ? 2 * a->recent_cap : a->recent_max)
                                      : (RECENT_SLACK < a->recent_max ? RECENT_SLACK : a->recent_max);
        void *p = realloc(a->recent, (size_t)cap * row);
        if (!p) { /* none kept from here on */
            free(a->recent);
            a->recent = NULL, a->recent_n = a->recent_cap = a->recent_max = 0;
            return;
        }
        a->recent = p, a->recent_cap = cap;
    }
    memcpy((char *)a->recent + (size_t)a->recent_n++ * row, key, row);
}

const void *select_ann_keys(const select_ann *a, size_t *stride) {
    return (const char *)a->vectors(a->ix, stride) + (size_t)a->lead * elem_bytes(a);
}

void select_ann_free(select_ann *a) {
    free(a->recent);
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

/* Room for n results in a's buffers; 0 when out of memory. */
static int reserve_results(selector *s, select_ann *a, int n) {
    if (n <= a->res_cap) return 1;
    int64_t *l = select_query_realloc(s, a->labels, (size_t)n * sizeof(int64_t));
    if (l) a->labels = l;
    float *f = select_query_realloc(s, a->sims, (size_t)n * sizeof(float));
    if (f) a->sims = f;
    if (!l || !f) return 0;
    a->res_cap = n;
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
 * similarity over the graph dims is the far score).
 *
 * The graph search and the near scan read different rows and write
 * different buffers, so with a pool they run as chunks of one call: the
 * graph search, the caller's preparation (ann_beside) and the near scan
 * in parts (a decode step's near scan reads about 4K rows, as long as the
 * graph search), each part with its own buffers, then all merge. */
enum {
    NEAR_PARTS_MAX = 4,
    NEAR_PART_ROWS = 1024 /* the least rows a part of the near scan */
};

/* m for slots numbered from lo (slot j as j - lo): each bound less lo,
 * none below 0; the segments from lo's. */
static select_mask mask_from(const select_mask *m, int lo) {
    select_mask r = *m;
#define FROM_LO(x) ((x) > lo ? (x) - lo : 0)
    r.n_slots = FROM_LO(m->n_slots), r.far_hi = FROM_LO(m->far_hi);
    r.ex0_lo = FROM_LO(m->ex0_lo), r.ex0_hi = FROM_LO(m->ex0_hi);
    r.ex1_lo = FROM_LO(m->ex1_lo), r.ex1_hi = FROM_LO(m->ex1_hi);
#undef FROM_LO
    if (m->seg) r.seg = m->seg + lo;
    return r;
}

typedef struct content_job {
    selector *s;
    selector near[NEAR_PARTS_MAX]; /* each part's view of s: its parameters, counters of its own */
    select_ann *a;
    const select_rows *rows;
    const select_mask *m;
    /* the near keys from a->recent (when it holds them all): its rows and
     * m, slots numbered from a->recent_lo */
    const select_rows *recent_rows;
    select_mask recent_m;
    const float *qg; /* the query's graph form */
    int k, far_hi, n_far, n_parts, chunk0; /* chunk0: the first near part's chunk */
    int g, got[NEAR_PARTS_MAX];            /* the graph's and the parts' counts (-1: out of memory) */
    int32_t *part_out;                     /* [n_parts][k] */
    float *part_sims;                      /* [n_parts][k] */
    ann_beside *beside;
    double t_work[2 + NEAR_PARTS_MAX]; /* each chunk's seconds */
} content_job;

static void content_chunk(void *ctx, int chunk, int thread) {
    (void)thread;
    content_job *j = ctx;
    const double t0 = time_now_s();
    if (chunk == 0) {
        j->g = search_part(j->s, j->a, j->qg, j->k, j->m, 0, j->far_hi, j->n_far, j->a->labels, j->a->sims);
    } else if (chunk < j->chunk0) {
        j->beside->fn(j->beside->ctx);
    } else {
        const int p = chunk - j->chunk0, n_near = j->a->count - j->far_hi; /* the near slots, in equal parts */
        const int from = j->far_hi + (int)((int64_t)n_near * p / j->n_parts);
        const int to = j->far_hi + (int)((int64_t)n_near * (p + 1) / j->n_parts);
        const int lo = j->recent_rows ? j->a->recent_lo : 0;
        int32_t *out = j->part_out + (size_t)p * j->k;
        select_scratch sc = {0};
        j->got[p] = select_scan_topk_range(&j->near[p], j->recent_rows ? j->recent_rows : j->rows, j->a->count - lo,
                                           from - lo, to - lo, j->recent_rows ? &j->recent_m : j->m, j->k, 0, &sc,
                                           out, j->part_sims + (size_t)p * j->k);
        select_scratch_free(&sc);
        for (int i = 0; i < j->got[p]; i++) out[i] += lo;
    }
    j->t_work[chunk] = time_now_s() - t0;
}

/* The content query; with b, beside b->fn, all on the threads of b->pool
 * (b->ran then set; the query's own time, its chunks' seconds over the
 * threads and the merge, in b->t_query); else on this thread. */
static int content_query(selector *s, select_ann *a, const select_rows *rows, int k, const select_mask *m, int n_elig,
                         int far_hi, int32_t *out, ann_beside *b) {
    const int n_far = far_hi ? select_mask_count(m, far_hi) : 0;
    const int efw = select_filtered_ef(s->params.plan.hnsw_ef_search, a->count, n_far), width = efw > k ? efw : k;
    if (n_far <= ANN_BRUTE_FACTOR * width) return select_scan_topk(s, rows, a->count, m, k, 1, &a->sc, out);
    const int threads = b ? pool_threads(b->pool) : 1, n_near = n_elig - n_far; /* eligible near keys */
    int n_parts = threads > 1 ? n_near / NEAR_PART_ROWS : 1;
    n_parts = n_near <= 0 ? 0 : n_parts < 1 ? 1 : n_parts > NEAR_PARTS_MAX ? NEAR_PARTS_MAX : n_parts;
    content_job j = {.s = s, .a = a, .rows = rows, .m = m, .k = k, .far_hi = far_hi, .n_far = n_far,
                     .n_parts = n_parts, .chunk0 = b ? 2 : 1, .beside = b};
    if (n_parts) {
        j.part_out = select_query_realloc(s, NULL, (size_t)n_parts * k * sizeof(int32_t));
        j.part_sims = select_query_realloc(s, NULL, (size_t)n_parts * k * sizeof(float));
    }
    int got = -1;
    if ((!n_parts || (j.part_out && j.part_sims)) && reserve_results(s, a, (1 + n_parts) * k)) {
        float *qg = a->qn + 2 * a->d;
        for (int i = 0; i < a->lead; i++) qg[i] = 0.0f;
        memcpy(qg + a->lead, a->qn, (size_t)(a->d_graph - a->lead) * sizeof(float));
        j.qg = qg;
        select_rows recent = *rows;
        if (a->recent && a->recent_lo <= far_hi && a->recent_lo + a->recent_n == a->count) {
            recent.base = a->recent, recent.stride = recent.row_bytes, recent.far_hi = 0;
            recent.scores = kernels_kv_decode_get(a->f16 ? SUBQ_KV_F16 : SUBQ_KV_F32).scores;
            j.recent_rows = &recent, j.recent_m = mask_from(m, a->recent_lo);
        }
        for (int p = 0; p < n_parts; p++) {
            j.near[p] = *s;
            memset(&j.near[p].stats, 0, sizeof j.near[p].stats);
        }
        const int n_chunks = j.chunk0 + n_parts;
        if (b) b->ran = 1;
        if (threads > 1) {
            pool_run(b->pool, n_chunks, content_chunk, &j);
        } else {
            for (int c = 0; c < n_chunks; c++) content_chunk(&j, c, 0);
        }
        int failed = j.g < 0, n = j.g;
        for (int p = 0; p < n_parts; p++) {
            s->stats.n_visited += j.near[p].stats.n_visited;
            s->stats.bytes_read += j.near[p].stats.bytes_read;
            failed |= j.got[p] < 0;
            for (int i = 0; !failed && i < j.got[p]; i++, n++)
                a->labels[n] = j.part_out[(size_t)p * k + i], a->sims[n] = j.part_sims[(size_t)p * k + i];
        }
        const double t0 = time_now_s();
        got = failed ? -1 : best_results(s, a, n, k, m, out);
        if (b) {
            double work = 0;
            for (int c = 0; c < n_chunks; c++) work += c && c < j.chunk0 ? 0 : j.t_work[c];
            b->t_query = work / threads + (time_now_s() - t0);
        }
    }
    free(j.part_out);
    free(j.part_sims);
    return got;
}

/* A query (select_ann_query), with b as content_query takes it. */
static int ann_query(selector *s, select_ann *a, const float *q_search, int k, const select_mask *m, int32_t *out,
                     ann_beside *b) {
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
    if (a->lead) return content_query(s, a, &rows, k, m, n_elig, far_hi, out, b);
    const int efw = select_filtered_ef(s->params.plan.hnsw_ef_search, a->count, n_elig), width = efw > k ? efw : k;
    if (n_elig <= ANN_BRUTE_FACTOR * width) return select_scan_topk(s, &rows, a->count, m, k, 1, &a->sc, out);
    if (!reserve_results(s, a, 2 * k)) return -1;
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

int select_ann_query(selector *s, select_ann *a, const float *q_search, int k, const select_mask *m, int32_t *out) {
    return ann_query(s, a, q_search, k, m, out, NULL);
}

/* select_ann_query_beside's two chunks when the query does not split: 0 the query, 1 b->fn */
typedef struct beside_job {
    selector *s;
    select_ann *a;
    const float *q_search;
    int k, got;
    const select_mask *m;
    int32_t *out;
    ann_beside *b;
} beside_job;

static void query_or_beside(void *ctx, int chunk, int thread) {
    (void)thread;
    beside_job *j = ctx;
    if (chunk == 1) {
        j->b->fn(j->b->ctx);
        return;
    }
    const double t0 = time_now_s();
    j->got = ann_query(j->s, j->a, j->q_search, j->k, j->m, j->out, NULL);
    j->b->t_query = time_now_s() - t0;
}

int select_ann_query_beside(selector *s, select_ann *a, const float *q_search, int k, const select_mask *m,
                            int32_t *out, ann_beside *b) {
    b->ran = 0, b->t_query = 0;
    if (!a->lead) { /* the graph search alone: beside fn */
        beside_job j = {.s = s, .a = a, .q_search = q_search, .k = k, .m = m, .out = out, .b = b};
        pool_run(b->pool, 2, query_or_beside, &j);
        b->ran = 1;
        return j.got;
    }
    const double t0 = time_now_s();
    const int got = ann_query(s, a, q_search, k, m, out, b);
    if (!b->ran) { /* answered before any split (few far keys, none eligible, out of memory): fn after it */
        b->t_query = time_now_s() - t0;
        b->fn(b->ctx);
        b->ran = 1;
    }
    return got;
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
