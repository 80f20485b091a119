/* faiss: the hnsw selector's algorithm over FAISS's IndexHNSWFlat (inner
 * product on L2-normalised vectors), for comparison with hnswlib. Optional at
 * build time (SUBQ_HAVE_FAISS). One index per layer per sequence, grown by
 * add() and never rebuilt; FAISS ids are insertion indices = cache slots.
 * Eligibility goes through an IDSelector in FAISS's search and is checked
 * again here; small eligible sets are scored directly (see select_hnsw.c). */
#include <stdlib.h>

#include "base/cpu.h"
#include "base/error.h"
#include "select/select_internal.h"

#ifndef SUBQ_HAVE_FAISS

subq_status select_faiss_new(const selector_params *p, const selector_env *env, selector **out, subq_error *err) {
    *out = NULL;
    return subq_fail(err, SUBQ_ERR_UNSUPPORTED, "this build has no FAISS (install libfaiss-dev and rebuild)");
}

#else

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
    select_dot_rows_fn dot;
} faiss_sel;

static subq_status shim_error(int code, const char *msg, subq_error *err) {
    return subq_fail(err, code == 1 ? SUBQ_ERR_NOMEM : SUBQ_ERR_UNSUPPORTED, "selector faiss: %s", msg);
}

/* Add n keys, normalised first unless they already are in stored form. */
static subq_status faiss_insert(selector *s, const float *k_search, int n, int slot0, int normalize,
                                subq_error *err) {
    faiss_sel *f = (faiss_sel *)s;
    subq_status rc = select_check_append(s, f->count, n, slot0, err);
    if (rc || n == 0) return rc;
    if (!k_search) return subq_fail(err, SUBQ_ERR_ARG, "selector faiss: no search keys given");
    if (normalize && n > f->rows_cap) {
        float *r = realloc(f->rows, (size_t)n * f->d * sizeof(float));
        if (!r) return subq_fail(err, SUBQ_ERR_NOMEM, "selector faiss: out of memory for %d keys", n);
        f->rows = r;
        f->rows_cap = n;
    }
    for (int t = 0; normalize && t < n; t++)
        select_normalize(f->rows + (size_t)t * f->d, k_search + (size_t)t * f->d, f->d);
    char msg[256];
    int c = faiss_shim_add(f->ix, normalize ? f->rows : k_search, n, msg, sizeof msg);
    f->count = (int)faiss_shim_count(f->ix);
    if (c) return shim_error(c, msg, err);
    s->stats.bytes = sizeof *f + faiss_shim_bytes(f->ix) + ((size_t)f->rows_cap + 1) * f->d * sizeof(float);
    return SUBQ_OK;
}

static subq_status faiss_append(selector *s, const float *k_search, int n, int slot0, subq_error *err) {
    return faiss_insert(s, k_search, n, slot0, 1, err);
}

static subq_status faiss_put_keys(selector *s, const float *keys, int n, int slot0, subq_error *err) {
    return faiss_insert(s, keys, n, slot0, 0, err);
}

static subq_status faiss_get_keys(const selector *s, int n, float *dst, subq_error *err) {
    const faiss_sel *f = (const faiss_sel *)s;
    return select_copy_keys(s, f->count, faiss_shim_vectors(f->ix), (size_t)f->d, f->d, n, dst, err);
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
        return select_scan_topk(f->qn, faiss_shim_vectors(f->ix), (size_t)f->d, f->d, f->dot,
                                f->count, m, k, &f->sc, out, &s->stats.n_visited);
    if (k > f->res_cap) {
        int64_t *l = realloc(f->labels, (size_t)k * sizeof(int64_t));
        if (l) f->labels = l;
        float *x = realloc(f->sims, (size_t)k * sizeof(float));
        if (x) f->sims = x;
        if (!l || !x) return 0;
        f->res_cap = k;
    }
    int got = faiss_shim_search(f->ix, f->qn, k, efw, mask_filter, (void *)m, f->labels, f->sims, &s->stats.n_visited);
    if (got >= 0 && got < k && got < n_elig)
        got = faiss_shim_search(f->ix, f->qn, k, 4 * width, mask_filter, (void *)m, f->labels, f->sims,
                                &s->stats.n_visited);
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

/* Rebuilt from the kept stored keys in one add (FAISS adds a batch level by
 * level, so the graph can differ from the one the original appends made;
 * the index holds the same keys). */
static subq_status faiss_truncate(selector *s, int n_keep, subq_error *err) {
    return select_truncate_rebuild(s, ((faiss_sel *)s)->count, n_keep, err);
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

static const selector_ops faiss_ops = {"faiss", faiss_append, faiss_query, faiss_reset, faiss_free,
                                       faiss_truncate, faiss_get_keys, faiss_put_keys};

subq_status select_faiss_new(const selector_params *p, const selector_env *env, selector **out, subq_error *err) {
    faiss_sel *f = calloc(1, sizeof *f);
    if (!f) return subq_fail(err, SUBQ_ERR_NOMEM, "selector faiss: out of memory");
    f->base.ops = &faiss_ops;
    f->d = p->d_search;
    f->dot = select_dot_rows_f32();
    f->qn = malloc((size_t)f->d * sizeof(float));
    char msg[256] = "out of memory";
    int c = f->qn ? faiss_shim_new(f->d, p->hnsw_m, p->hnsw_ef_construction, p->seed, cpu_has_avx2(), &f->ix, msg,
                                    sizeof msg) : 1;
    if (c) {
        faiss_free(&f->base);
        return shim_error(c, msg, err);
    }
    f->base.stats.bytes = sizeof *f + faiss_shim_bytes(f->ix) + (size_t)f->d * sizeof(float);
    *out = &f->base;
    return SUBQ_OK;
}

#endif
