/* hnsw: approximate top-K in the learned search space through hnswlib (HNSW
 * graph, inner product: on L2-normalised vectors for cosine, on the vectors
 * as given for dot), vectors stored f32 or f16 (search_f16). One index per
 * substituted layer per sequence, grown by insertion as tokens are appended
 * (prefill and decode) and never rebuilt; labels are cache slots.
 *
 * Eligibility: the index holds exactly the appended prefix, so causality is
 * automatic; sinks, tail and other documents are filtered inside the graph
 * search (rejected nodes are walked through, never returned; the beam widens
 * with the rejected fraction, see select_filtered_ef), and every returned
 * slot is checked again with select_mask_allows. Counting the eligible slots
 * costs one int compare per slot when there are segments. When few slots are
 * eligible (a short document in a packed sequence) a graph search would have
 * to visit most of the graph to find them, so those are scored directly
 * instead: exact, and cheaper than the walk.
 *
 * Under a far scheme (params.far_rot > 0) the graph is built and searched
 * on the dims that do not rotate with position only, the ones far keys are
 * ranked by (after leading elements, content_lead): a graph over whole
 * rotated keys links keys near in position, which a far query does not
 * rank by. Near keys, ranked whole, are scanned (select_ann.c). The stored
 * vectors keep every dim after those elements. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "quant/quant.h"
#include "select/hnsw_graph.h"
#include "select/hnsw_shim.h"
#include "select/select_internal.h"

#define HNSW_CAPACITY0 1024
/* The content graph's leading elements: content_lead and a zero, so that an
 * f16 vector stays a multiple of 4 bytes (hnswlib's 4-byte link lists
 * follow each vector in its elements). */
#define HNSW_LEAD 2

typedef struct hnsw_sel {
    selector base;
    select_ann ann;         /* ann.ix: the hnsw_shim, NULL until the first key of a sequence */
    float *row;             /* one key in stored form */
    uint16_t *row16;        /* the same in f16 */
} hnsw_sel;

static void hnsw_reset(selector *s);

static subq_status shim_error(int code, const char *msg, subq_error *err) {
    return subq_fail(err, code == 1 ? SUBQ_ERR_NOMEM : SUBQ_ERR_UNSUPPORTED, "selector hnsw: %s", msg);
}

static int search(void *ix, const float *q, int k, int ef, select_filter_fn filter, void *ctx, int64_t *labels,
                  float *sims, int64_t *n_dist, uint64_t *n_bytes) {
    return hnsw_shim_search(ix, q, k, ef, filter, ctx, labels, sims, n_dist, n_bytes);
}

static const void *vectors(const void *ix, size_t *stride) { return hnsw_shim_vectors(ix, stride); }

/* a.b of two stored vectors (graph construction) */
static float dot_f32(const void *a, const void *b, int d) { return kernels_get()->dot_f32(a, b, d); }
static float dot_f16(const void *a, const void *b, int d) { return kernels_get()->dot_f16f16(a, b, d); }

/* The content graph's leading element of a stored key x (d values, its
 * first dc the dims that do not rotate). Far keys rank by q.x over those dims
 * alone, a maximum inner product search over vectors of unequal norms, on
 * which a graph's neighbours mislead (the short vectors are never near
 * anything). For cosine x is a unit vector, so [sqrt(1 - |x_c|^2), x_c] is one
 * too, and with a 0 in the query's place q.x is unchanged: the graph over
 * these unit vectors is a nearest-neighbour graph on the sphere (the
 * reduction of Bachrach et al. 2014, its bound 1 given by the norm). For dot,
 * where no bound is known, the element is 0: a plain inner-product graph. */
static float content_lead(const float *x, int dc, subq_score score) {
    if (score != SUBQ_SCORE_COSINE) return 0.0f;
    double c2 = 0;
    for (int i = 0; i < dc; i++) c2 += (double)x[i] * x[i];
    return c2 < 1.0 ? (float)sqrt(1.0 - c2) : 0.0f;
}

/* A key in stored form (h->row, h->row16, or the row itself): a->lead
 * leading elements (content_lead), then the key, normalised first for
 * cosine when `normalize`; f16 when stored so. The lead is computed from
 * the key as stored (f16-rounded), so that a key given back in stored form
 * (put_keys, put_index) gets the lead it had. */
static const void *stored_row(hnsw_sel *h, const float *row, int normalize) {
    const select_ann *a = &h->ann;
    float *x = h->row + a->lead;
    const int dc = a->d_graph - a->lead; /* the dims the lead completes */
    if (normalize) select_prepare(x, row, a->d, a->score);
    else if (a->lead || a->f16) memcpy(x, row, (size_t)a->d * sizeof(float));
    else return row;
    if (a->f16) kernels_get()->f32_to_f16(x, h->row16 + a->lead, a->d);
    if (a->lead) {
        if (a->f16)
            for (int i = 0; i < dc; i++) x[i] = fp16_to_fp32(h->row16[a->lead + i]);
        for (int i = 0; i < a->lead; i++) h->row[i] = i ? 0.0f : content_lead(x, dc, a->score);
        if (a->f16)
            for (int i = 0; i < a->lead; i++) h->row16[i] = fp32_to_fp16(h->row[i]);
    }
    return a->f16 ? (const void *)h->row16 : h->row;
}

/* The index of a sequence's first keys: room for the whole cache's slots
 * when known (growing copies the index), at least n. */
static subq_status new_index(selector *s, size_t n, subq_error *err) {
    select_ann *a = &((hnsw_sel *)s)->ann;
    const kv_cache *kv = s->env.kv;
    size_t cap = kv && kv->n_ctx > HNSW_CAPACITY0 ? (size_t)kv->n_ctx : HNSW_CAPACITY0;
    if (n > cap) cap = n;
    const kernels *K = kernels_get();
    char msg[256];
    hnsw_shim *ix;
    int c = hnsw_shim_new(a->lead + a->d, a->d_graph, a->f16 ? 2 : 4, a->f16 ? dot_f16 : dot_f32,
                          a->f16 ? K->gather_dot_f16 : K->gather_dot_f32, s->params.plan.hnsw_m,
                          s->params.plan.hnsw_ef_construction, s->params.plan.seed, cap, &ix, msg, sizeof msg);
    if (c) return shim_error(c, msg, err);
    a->ix = ix;
    return SUBQ_OK;
}

static void count_bytes(hnsw_sel *h) {
    const select_ann *a = &h->ann;
    h->base.stats.bytes = sizeof *h + hnsw_shim_bytes(a->ix) + 3 * (size_t)a->d * sizeof(float) +
                          (size_t)a->recent_cap * a->d * (a->f16 ? sizeof(uint16_t) : sizeof(float));
}

/* Insert n keys one at a time (put in stored form first unless they already
 * are): single inserts in slot order make the graph a function of
 * the keys and the seed alone, so a rebuild from stored keys equals it. */
static subq_status hnsw_insert(selector *s, const float *k_search, int n, int slot0, int normalize,
                               subq_error *err) {
    hnsw_sel *h = (hnsw_sel *)s;
    select_ann *a = &h->ann;
    subq_status rc = select_check_append(s, a->count, n, slot0, err);
    if (rc) return rc;
    if (n > 0 && !k_search) return subq_fail(err, SUBQ_ERR_ARG, "selector hnsw: no search keys given");
    if (!a->ix && n > 0 && (rc = new_index(s, (size_t)n, err))) return rc;
    char msg[256];
    for (int t = 0; t < n; t++) {
        const void *x = stored_row(h, k_search + (size_t)t * a->d, normalize);
        const size_t ahead0 = hnsw_shim_linked_ahead(a->ix);
        const int c = hnsw_shim_add(a->ix, x, 1, slot0 + t, msg, sizeof msg);
        s->stats.n_linked_ahead += (int64_t)(hnsw_shim_linked_ahead(a->ix) - ahead0);
        if (c) {
            /* the failed key is not in the index: keep count in step with it */
            a->count = (int)hnsw_shim_count(a->ix);
            return shim_error(c, msg, err);
        }
        if (a->lead) select_ann_recent_push(a, x);
    }
    a->count += n;
    if (a->ix) count_bytes(h);
    return SUBQ_OK;
}

static subq_status hnsw_append(selector *s, const float *k_search, int n, int slot0, subq_error *err) {
    return hnsw_insert(s, k_search, n, slot0, 1, err);
}

/* The next key's insert-time search ahead (selector_ops.prepare_append;
 * beside a query: it touches neither the query's buffers nor the stats). */
static void hnsw_prepare_append(selector *s, const float *k_search, int slot) {
    hnsw_sel *h = (hnsw_sel *)s;
    if (!h->ann.ix || !k_search || slot != h->ann.count) return;
    hnsw_shim_prepare(h->ann.ix, stored_row(h, k_search, 1), slot);
}

static subq_status hnsw_put_keys(selector *s, const float *keys, int n, int slot0, subq_error *err) {
    return hnsw_insert(s, keys, n, slot0, 0, err);
}

/* What made the graph: a saved one is taken by an index made the same way. */
static hnsw_graph_params graph_params(const hnsw_sel *h) {
    const select_ann *a = &h->ann;
    const subq_attn_plan *plan = &h->base.params.plan;
    return (hnsw_graph_params){.m = (uint32_t)plan->hnsw_m, .ef_construction = (uint32_t)plan->hnsw_ef_construction,
                               .dim = (uint32_t)(a->lead + a->d), .graph_dim = (uint32_t)a->d_graph,
                               .elem_bytes = a->f16 ? 2 : 4, .seed = plan->seed};
}

static subq_status hnsw_get_index(const selector *s, void **graph, size_t *bytes, subq_error *err) {
    const hnsw_sel *h = (const hnsw_sel *)s; /* *graph NULL already (selector_get_index) */
    if (!h->ann.ix) return SUBQ_OK;
    const hnsw_graph_params p = graph_params(h);
    return hnsw_graph_save(h->ann.ix, &p, graph, bytes, err);
}

/* A saved graph's element i: key i of the stored keys being put back */
typedef struct {
    hnsw_sel *h;
    const float *keys;
} graph_keys;

static const void *graph_vector(void *ctx, size_t i) {
    graph_keys *g = ctx;
    select_ann *a = &g->h->ann;
    const void *x = stored_row(g->h, g->keys + i * (size_t)a->d, 0);
    if (a->lead) select_ann_recent_push(a, x);
    return x;
}

/* put_keys of slots 0 .. n-1 into an empty index: the first ones linked
 * by the saved graph, the rest inserted after them. */
static subq_status hnsw_put_index(selector *s, const float *keys, int n, const void *graph, size_t bytes,
                                  subq_error *err) {
    hnsw_sel *h = (hnsw_sel *)s;
    select_ann *a = &h->ann;
    if (a->count != 0) return subq_fail(err, SUBQ_ERR_ARG, "selector hnsw: a saved graph goes into an empty index");
    if (n > 0 && !keys) return subq_fail(err, SUBQ_ERR_ARG, "selector hnsw: no search keys given");
    const hnsw_graph_params p = graph_params(h);
    hnsw_graph_view v;
    subq_status rc = hnsw_graph_check(graph, bytes, &p, n > 0 ? (size_t)n : 0, &v, err);
    if (rc) return rc;
    hnsw_reset(s); /* an index made for no key yet (count 0) goes too */
    if ((rc = new_index(s, (size_t)n, err))) return rc;
    graph_keys g = {h, keys};
    if ((rc = hnsw_graph_load(a->ix, &v, &p, graph_vector, &g, err))) {
        hnsw_reset(s);
        return rc;
    }
    a->count = (int)v.count;
    s->stats.n_linked_saved += a->count;
    count_bytes(h);
    return hnsw_insert(s, keys + v.count * (size_t)a->d, n - a->count, a->count, 0, err);
}

static subq_status hnsw_get_keys(const selector *s, int n, float *dst, subq_error *err) {
    const hnsw_sel *h = (const hnsw_sel *)s;
    size_t stride = 0;
    const void *base = h->ann.ix ? select_ann_keys(&h->ann, &stride) : NULL;
    return select_copy_keys(s, h->ann.count, base, stride, h->ann.d, h->ann.f16, n, dst, err);
}

static int hnsw_query(selector *s, const float *q_search, const float *q_native, int k, const select_mask *m,
                      int32_t *out) {
    return select_ann_query(s, &((hnsw_sel *)s)->ann, q_search, k, m, out);
}

/* the content graph's search and near scan on one thread each, the next
 * key's preparation (fn) before the scan (select_ann_query_beside) */
static int hnsw_query_beside(selector *s, const float *q_search, const float *q_native, int k, const select_mask *m,
                             int32_t *out, void (*fn)(void *ctx), void *ctx, pool *p, double *t_query) {
    ann_beside b = {.fn = fn, .ctx = ctx, .pool = p};
    const int got = select_ann_query_beside(s, &((hnsw_sel *)s)->ann, q_search, k, m, out, &b);
    *t_query = b.t_query;
    return got;
}

static int hnsw_query_batch(selector *s, int n, const float *q_search, const float *q_native, size_t q_stride, int k,
                            const select_mask *m, int32_t *out, int *got, int n_threads) {
    return select_ann_query_batch(s, &((hnsw_sel *)s)->ann, n, q_search, k, m, out, got, n_threads);
}

static void hnsw_reset(selector *s) {
    hnsw_sel *h = (hnsw_sel *)s;
    hnsw_shim_free(h->ann.ix); /* a new sequence starts a new index */
    h->ann.ix = NULL;
    h->ann.count = 0;
    h->ann.recent_lo = h->ann.recent_n = 0;
}

static void hnsw_free(selector *s) {
    hnsw_sel *h = (hnsw_sel *)s;
    hnsw_shim_free(h->ann.ix);
    select_ann_free(&h->ann);
    free(h->row);
    free(h->row16);
    free(h);
}

/* HNSW graphs have no cheap deletion: rebuild from the kept stored keys
 * (O(n_keep log n_keep) distance computations times efConstruction, like
 * the original inserts), which gives the graph those inserts made. */
static subq_status hnsw_truncate(selector *s, int n_keep, subq_error *err) {
    return select_truncate_rebuild(s, ((hnsw_sel *)s)->ann.count, n_keep, err);
}

static const selector_ops hnsw_ops = {hnsw_append, hnsw_query, hnsw_reset, hnsw_free,
                                      hnsw_truncate, hnsw_get_keys, hnsw_put_keys, NULL, hnsw_query_batch, NULL,
                                      NULL, NULL, hnsw_prepare_append, hnsw_query_beside, hnsw_get_index,
                                      hnsw_put_index};

subq_status select_hnsw_new(const selector_params *p, const selector_env *env, selector **out, subq_error *err) {
    hnsw_sel *h = calloc(1, sizeof *h);
    if (!h) return subq_fail(err, SUBQ_ERR_NOMEM, "selector hnsw: out of memory");
    h->base.ops = &hnsw_ops;
    h->ann.search = search;
    h->ann.vectors = vectors;
    h->row = malloc(((size_t)p->d_search + HNSW_LEAD) * sizeof(float));
    h->row16 = malloc(((size_t)p->d_search + HNSW_LEAD) * sizeof(uint16_t));
    if (!select_ann_init(&h->ann, p) || !h->row || !h->row16) {
        hnsw_free(&h->base);
        return subq_fail(err, SUBQ_ERR_NOMEM, "selector hnsw: out of memory");
    }
    if (p->far_rot > 0 && p->far_rot < p->d_search) { /* the far keys' content graph */
        h->ann.lead = HNSW_LEAD;
        h->ann.d_graph = HNSW_LEAD + p->d_search - p->far_rot;
        select_ann_recent_init(&h->ann, p->far_from);
    }
    h->base.stats.bytes = sizeof *h + 3 * (size_t)p->d_search * sizeof(float);
    *out = &h->base;
    return SUBQ_OK;
}
