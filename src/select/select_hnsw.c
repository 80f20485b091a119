/* hnsw: approximate top-K by cosine in the learned search space through
 * hnswlib (HNSW graph, inner product on L2-normalised vectors). One index per
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
 * instead: exact, and cheaper than the walk. */
#include <stdio.h>
#include <stdlib.h>

#include "base/cpu.h"
#include "base/error.h"
#include "select/hnsw_shim.h"
#include "select/select_internal.h"

/* Score the eligible slots directly when there are at most this many times
 * the beam width: a graph search computes about 4-12 distances per beam
 * slot (measured at M = 32), each dearer than a sequential scan's. */
#define HNSW_BRUTE_FACTOR 4
#define HNSW_CAPACITY0 1024

typedef struct hnsw_sel {
    selector base;
    hnsw_shim *ix;          /* NULL until the first key of a sequence */
    int d, count, avx2;
    float *row, *qn;        /* one normalised key; the normalised query */
    int64_t *labels;
    float *sims;
    int res_cap;
    select_scratch sc;
    select_dot_rows_fn dot;
} hnsw_sel;

static subq_status shim_error(int code, const char *msg, subq_error *err) {
    return subq_fail(err, code == 1 ? SUBQ_ERR_NOMEM : SUBQ_ERR_UNSUPPORTED, "selector hnsw: %s", msg);
}

/* Insert n keys one at a time (normalised first unless they already are in
 * stored form): single inserts in slot order make the graph a function of
 * the keys and the seed alone, so a rebuild from stored keys equals it. */
static subq_status hnsw_insert(selector *s, const float *k_search, int n, int slot0, int normalize,
                               subq_error *err) {
    hnsw_sel *h = (hnsw_sel *)s;
    subq_status rc = select_check_append(s, h->count, n, slot0, err);
    if (rc) return rc;
    if (n > 0 && !k_search) return subq_fail(err, SUBQ_ERR_ARG, "selector hnsw: no search keys given");
    char msg[256];
    int c;
    if (!h->ix && n > 0) {
        size_t cap = n > HNSW_CAPACITY0 ? (size_t)n : HNSW_CAPACITY0;
        if ((c = hnsw_shim_new(h->d, s->params.hnsw_m, s->params.hnsw_ef_construction, s->params.seed, cap, h->avx2,
                               &h->ix, msg, sizeof msg)))
            return shim_error(c, msg, err);
    }
    for (int t = 0; t < n; t++) {
        const float *row = k_search + (size_t)t * h->d;
        if (normalize) select_normalize(h->row, row, h->d);
        if ((c = hnsw_shim_add(h->ix, normalize ? h->row : row, 1, slot0 + t, msg, sizeof msg))) {
            /* the failed key is not in the index: keep count in step with it */
            h->count = (int)hnsw_shim_count(h->ix);
            return shim_error(c, msg, err);
        }
    }
    h->count += n;
    if (h->ix) s->stats.bytes = sizeof *h + hnsw_shim_bytes(h->ix) + 2 * (size_t)h->d * sizeof(float);
    return SUBQ_OK;
}

static subq_status hnsw_append(selector *s, const float *k_search, int n, int slot0, subq_error *err) {
    return hnsw_insert(s, k_search, n, slot0, 1, err);
}

static subq_status hnsw_put_keys(selector *s, const float *keys, int n, int slot0, subq_error *err) {
    return hnsw_insert(s, keys, n, slot0, 0, err);
}

static subq_status hnsw_get_keys(const selector *s, int n, float *dst, subq_error *err) {
    const hnsw_sel *h = (const hnsw_sel *)s;
    size_t stride = 0;
    const float *base = h->ix ? hnsw_shim_vectors(h->ix, &stride) : NULL;
    return select_copy_keys(s, h->count, base, stride, h->d, n, dst, err);
}

static int mask_filter(void *ctx, int64_t label) { return select_mask_allows(ctx, (int)label); }

static int hnsw_query(selector *s, const float *q_search, const float *q_native, int k, const select_mask *m,
                      int32_t *out) {
    hnsw_sel *h = (hnsw_sel *)s;
    if (!q_search || !h->ix || h->count == 0) return 0;
    int n_elig = select_mask_count(m, h->count);
    if (n_elig == 0) return 0;
    select_normalize(h->qn, q_search, h->d);
    const int efw = select_filtered_ef(s->params.hnsw_ef_search, h->count, n_elig), width = efw > k ? efw : k;
    if (n_elig <= HNSW_BRUTE_FACTOR * width) {
        size_t stride;
        const float *base = hnsw_shim_vectors(h->ix, &stride);
        return select_scan_topk(h->qn, base, stride, h->d, h->dot, h->count, m, k, &h->sc, out,
                                &s->stats.n_visited);
    }
    if (k > h->res_cap) {
        int64_t *l = realloc(h->labels, (size_t)k * sizeof(int64_t));
        if (l) h->labels = l;
        float *f = realloc(h->sims, (size_t)k * sizeof(float));
        if (f) h->sims = f;
        if (!l || !f) return 0;
        h->res_cap = k;
    }
    int got = hnsw_shim_search(h->ix, h->qn, k, efw, mask_filter, (void *)m, h->labels, h->sims, &s->stats.n_visited);
    /* a poorly connected eligible region can still starve the beam: one wider retry */
    if (got >= 0 && got < k && got < n_elig)
        got = hnsw_shim_search(h->ix, h->qn, k, 4 * width, mask_filter, (void *)m, h->labels, h->sims,
                               &s->stats.n_visited);
    int n = 0;
    for (int i = 0; i < got; i++)
        if (select_mask_allows(m, (int)h->labels[i])) out[n++] = (int32_t)h->labels[i];
    return n;
}

static void hnsw_reset(selector *s) {
    hnsw_sel *h = (hnsw_sel *)s;
    hnsw_shim_free(h->ix); /* a new sequence starts a new index */
    h->ix = NULL;
    h->count = 0;
}

/* HNSW graphs have no cheap deletion: rebuild from the kept stored keys
 * (O(n_keep log n_keep) distance computations times efConstruction, like
 * the original inserts), which gives the graph those inserts made. */
static subq_status hnsw_truncate(selector *s, int n_keep, subq_error *err) {
    return select_truncate_rebuild(s, ((hnsw_sel *)s)->count, n_keep, err);
}

static void hnsw_free(selector *s) {
    hnsw_sel *h = (hnsw_sel *)s;
    hnsw_shim_free(h->ix);
    free(h->row);
    free(h->qn);
    free(h->labels);
    free(h->sims);
    select_scratch_free(&h->sc);
    free(h);
}

static const selector_ops hnsw_ops = {"hnsw", hnsw_append, hnsw_query, hnsw_reset, hnsw_free,
                                      hnsw_truncate, hnsw_get_keys, hnsw_put_keys};

subq_status select_hnsw_new(const selector_params *p, const selector_env *env, selector **out, subq_error *err) {
    hnsw_sel *h = calloc(1, sizeof *h);
    if (!h) return subq_fail(err, SUBQ_ERR_NOMEM, "selector hnsw: out of memory");
    h->base.ops = &hnsw_ops;
    h->d = p->d_search;
    h->avx2 = cpu_has_avx2();
    h->dot = select_dot_rows_f32();
    h->row = malloc((size_t)h->d * sizeof(float));
    h->qn = malloc((size_t)h->d * sizeof(float));
    if (!h->row || !h->qn) {
        hnsw_free(&h->base);
        return subq_fail(err, SUBQ_ERR_NOMEM, "selector hnsw: out of memory");
    }
    h->base.stats.bytes = sizeof *h + 2 * (size_t)h->d * sizeof(float);
    *out = &h->base;
    return SUBQ_OK;
}
