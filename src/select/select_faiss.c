/* faiss: the hnsw selector's algorithm over FAISS's IndexHNSWFlat (inner
 * product on L2-normalised vectors), for comparison with hnswlib. Optional at
 * build time (SUBQ_HAVE_FAISS). One index per layer per sequence, grown by
 * add() and never rebuilt; FAISS ids are insertion indices = cache slots.
 * Eligibility goes through an IDSelector in FAISS's search and is checked
 * again here; small eligible sets are scored directly (see select_hnsw.c). */
#include <stdlib.h>

#include "base/error.h"
#include "select/select_internal.h"

#ifdef SUBQ_HAVE_FAISS

#include "select/faiss_shim.h"

#define FAISS_BRUTE_FACTOR 4 /* as HNSW_BRUTE_FACTOR */

typedef struct faiss_sel {
    selector base;
    faiss_shim *ix;
    int d, count;
    float *rows, *qn;       /* normalised keys of one append batch; the query */
    int rows_cap;
    int64_t *labels;
    float *sims;
    int res_cap;
    select_scratch sc;
    kernels_gather_dot_fn dot;
} faiss_sel;

static subq_status shim_error(int code, const char *msg, subq_error *err) {
    return subq_fail(err, code == 1 ? SUBQ_ERR_NOMEM : SUBQ_ERR_UNSUPPORTED, "selector faiss: %s", msg);
}

static subq_status faiss_append(selector *s, const float *k_search, int n, int slot0, subq_error *err) {
    faiss_sel *f = (faiss_sel *)s;
    subq_status rc = select_check_append(s, f->count, n, slot0, err);
    if (rc || n == 0) return rc;
    if (!k_search) return subq_fail(err, SUBQ_ERR_ARG, "selector faiss: no search keys given");
    if (n > f->rows_cap) {
        float *r = realloc(f->rows, (size_t)n * f->d * sizeof(float));
        if (!r) return subq_fail(err, SUBQ_ERR_NOMEM, "selector faiss: out of memory for %d keys", n);
        f->rows = r;
        f->rows_cap = n;
    }
    for (int t = 0; t < n; t++)
        select_normalize(f->rows + (size_t)t * f->d, k_search + (size_t)t * f->d, f->d);
    char msg[256];
    int c = faiss_shim_add(f->ix, f->rows, n, msg, sizeof msg);
    f->count = (int)faiss_shim_count(f->ix);
    if (c) return shim_error(c, msg, err);
    s->stats.bytes = sizeof *f + faiss_shim_bytes(f->ix) + ((size_t)f->rows_cap + 1) * f->d * sizeof(float);
    return SUBQ_OK;
}

static int mask_filter(void *ctx, int64_t label) { return select_mask_allows(ctx, (int)label); }

static int faiss_query(selector *s, const float *q_search, const float *q_native, int k, const select_mask *m,
                       int32_t *out) {
    faiss_sel *f = (faiss_sel *)s;
    if (!q_search || f->count == 0) return 0;
    int n_elig = select_mask_count(m, f->count);
    if (n_elig == 0) return 0;
    select_normalize(f->qn, q_search, f->d);
    const int efw = select_filtered_ef(s->params.hnsw_ef_search, f->count, n_elig), width = efw > k ? efw : k;
    if (n_elig <= FAISS_BRUTE_FACTOR * width)
        return select_scan_topk(s, f->qn, faiss_shim_vectors(f->ix), (size_t)f->d, f->d, f->dot, f->count, m, k,
                                &f->sc, out);
    if (k > f->res_cap) {
        int64_t *l = select_query_realloc(s, f->labels, (size_t)k * sizeof(int64_t));
        if (l) f->labels = l;
        float *x = select_query_realloc(s, f->sims, (size_t)k * sizeof(float));
        if (x) f->sims = x;
        if (!l || !x) return -1;
        f->res_cap = k;
    }
    int got = faiss_shim_search(f->ix, f->qn, k, efw, mask_filter, (void *)m, f->labels, f->sims, &s->stats.n_visited);
    if (got >= 0 && got < k && got < n_elig)
        got = faiss_shim_search(f->ix, f->qn, k, 4 * width, mask_filter, (void *)m, f->labels, f->sims,
                                &s->stats.n_visited);
    if (got < 0) return -1; /* the index ran out of memory */
    int n = 0;
    for (int i = 0; i < got; i++)
        if (select_mask_allows(m, (int)f->labels[i])) out[n++] = (int32_t)f->labels[i];
    return n;
}

static void faiss_reset(selector *s) {
    faiss_sel *f = (faiss_sel *)s;
    faiss_shim_reset(f->ix, s->params.seed);
    f->count = (int)faiss_shim_count(f->ix);
}

static void faiss_free(selector *s) {
    faiss_sel *f = (faiss_sel *)s;
    faiss_shim_free(f->ix);
    free(f->rows);
    free(f->qn);
    free(f->labels);
    free(f->sims);
    select_scratch_free(&f->sc);
    free(f);
}

static const selector_ops faiss_ops = {faiss_append, faiss_query, faiss_reset, faiss_free};

subq_status select_faiss_new(const selector_params *p, const selector_env *env, selector **out, subq_error *err) {
    faiss_sel *f = calloc(1, sizeof *f);
    if (!f) return subq_fail(err, SUBQ_ERR_NOMEM, "selector faiss: out of memory");
    f->base.ops = &faiss_ops;
    f->d = p->d_search;
    f->dot = kernels_get()->gather_dot_f32;
    f->qn = malloc((size_t)f->d * sizeof(float));
    char msg[256] = "out of memory";
    const int avx2 = kernels_get() == kernels_avx2(); /* the shim inlines the same dot */
    int c = f->qn ? faiss_shim_new(f->d, p->hnsw_m, p->hnsw_ef_construction, p->seed, avx2, &f->ix, msg, sizeof msg)
                  : 1;
    if (c) {
        faiss_free(&f->base);
        return shim_error(c, msg, err);
    }
    f->base.stats.bytes = sizeof *f + faiss_shim_bytes(f->ix) + (size_t)f->d * sizeof(float);
    *out = &f->base;
    return SUBQ_OK;
}

#endif
