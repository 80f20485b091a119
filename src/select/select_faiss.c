/* faiss: the hnsw selector's algorithm over FAISS's IndexHNSWFlat (inner
 * product, on L2-normalised vectors for cosine), for comparison with
 * hnswlib; vectors are stored f32 (search_f16 is not used here). Optional at
 * build time (SUBQ_HAVE_FAISS). One index per layer per sequence, grown by
 * add() and never rebuilt; FAISS ids are insertion indices = cache slots.
 * Eligibility goes through an IDSelector in FAISS's search and is checked
 * again here; small eligible sets are scored directly (see select_hnsw.c). */
#include <stdlib.h>

#include "base/error.h"
#include "select/select_internal.h"

#ifdef SUBQ_HAVE_FAISS

#include "select/faiss_shim.h"

typedef struct faiss_sel {
    selector base;
    select_ann ann;         /* ann.ix: the faiss_shim */
    float *rows;            /* normalised keys of one append batch */
    int rows_cap;
} faiss_sel;

static subq_status shim_error(int code, const char *msg, subq_error *err) {
    return subq_fail(err, code == 1 ? SUBQ_ERR_NOMEM : SUBQ_ERR_UNSUPPORTED, "selector faiss: %s", msg);
}

static int search(void *ix, const float *q, int k, int ef, select_filter_fn filter, void *ctx, int64_t *labels,
                  float *sims, int64_t *n_dist, uint64_t *n_bytes) {
    return faiss_shim_search(ix, q, k, ef, filter, ctx, labels, sims, n_dist, n_bytes);
}

static const void *vectors(const void *ix, size_t *stride) { return faiss_shim_vectors(ix, stride); }

/* Add n keys, normalised first unless they already are in stored form. */
static subq_status faiss_insert(selector *s, const float *k_search, int n, int slot0, int normalize,
                                subq_error *err) {
    faiss_sel *f = (faiss_sel *)s;
    select_ann *a = &f->ann;
    subq_status rc = select_check_append(s, a->count, n, slot0, err);
    if (rc || n == 0) return rc;
    if (!k_search) return subq_fail(err, SUBQ_ERR_ARG, "selector faiss: no search keys given");
    if (normalize && n > f->rows_cap) {
        float *r = realloc(f->rows, (size_t)n * a->d * sizeof(float));
        if (!r) return subq_fail(err, SUBQ_ERR_NOMEM, "selector faiss: out of memory for %d keys", n);
        f->rows = r;
        f->rows_cap = n;
    }
    for (int t = 0; normalize && t < n; t++)
        select_prepare(f->rows + (size_t)t * a->d, k_search + (size_t)t * a->d, a->d, a->score);
    char msg[256];
    int c = faiss_shim_add(a->ix, normalize ? f->rows : k_search, n, msg, sizeof msg);
    a->count = (int)faiss_shim_count(a->ix);
    if (c) return shim_error(c, msg, err);
    s->stats.bytes = sizeof *f + faiss_shim_bytes(a->ix) + ((size_t)f->rows_cap + 1) * a->d * sizeof(float);
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
    size_t stride = 0;
    const float *base = faiss_shim_vectors(f->ann.ix, &stride);
    return select_copy_keys(s, f->ann.count, base, stride, f->ann.d, 0, n, dst, err);
}

static int faiss_query(selector *s, const float *q_search, const float *q_native, int k, const select_mask *m,
                       int32_t *out) {
    return select_ann_query(s, &((faiss_sel *)s)->ann, q_search, k, m, out);
}

static void faiss_reset(selector *s) {
    faiss_sel *f = (faiss_sel *)s;
    faiss_shim_reset(f->ann.ix, s->params.plan.seed);
    f->ann.count = (int)faiss_shim_count(f->ann.ix);
}

static void faiss_free(selector *s) {
    faiss_sel *f = (faiss_sel *)s;
    faiss_shim_free(f->ann.ix);
    select_ann_free(&f->ann);
    free(f->rows);
    free(f);
}

/* Rebuilt from the kept stored keys in one add (FAISS adds a batch level by
 * level, so the graph can differ from the one the original appends made;
 * the index holds the same keys). */
static subq_status faiss_truncate(selector *s, int n_keep, subq_error *err) {
    return select_truncate_rebuild(s, ((faiss_sel *)s)->ann.count, n_keep, err);
}

static const selector_ops faiss_ops = {faiss_append, faiss_query, faiss_reset, faiss_free,
                                       faiss_truncate, faiss_get_keys, faiss_put_keys, NULL,
                                       NULL /* one query at a time: the shim's search shares a visited table */,
                                       NULL, NULL, NULL, NULL, NULL, NULL, NULL};

subq_status select_faiss_new(const selector_params *p, const selector_env *env, selector **out, subq_error *err) {
    faiss_sel *f = calloc(1, sizeof *f);
    if (!f) return subq_fail(err, SUBQ_ERR_NOMEM, "selector faiss: out of memory");
    f->base.ops = &faiss_ops;
    f->ann.search = search;
    f->ann.vectors = vectors;
    char msg[256] = "out of memory";
    const int avx2 = kernels_get() == kernels_avx2(); /* the shim inlines the same dot */
    faiss_shim *ix = NULL;
    int c = select_ann_init(&f->ann, p) ? faiss_shim_new(p->d_search, p->plan.hnsw_m, p->plan.hnsw_ef_construction,
                                                         p->plan.seed, avx2, &ix, msg, sizeof msg)
                                        : 1;
    f->ann.ix = ix;
    f->ann.f16 = 0;
    if (c) {
        faiss_free(&f->base);
        return shim_error(c, msg, err);
    }
    f->base.stats.bytes = sizeof *f + faiss_shim_bytes(ix) + (size_t)p->d_search * sizeof(float);
    *out = &f->base;
    return SUBQ_OK;
}

#endif
