/* exact: top-K by cosine in the learned search space (the training metric).
 * Keys are L2-normalised on append and stored f32 or f16; a query is
 * normalised too, so cosine = inner product. The scan is a SIMD dot over the
 * eligible slots feeding a size-K heap (no sort of the n scores). */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "quant/quant.h"
#include "select/select_internal.h"

typedef struct exact_sel {
    selector base;      /* first member: cast back from selector * */
    int d, f16;
    int count, cap;     /* slots appended / rows allocated */
    void *keys;         /* [cap][d] unit vectors, f32 or f16 */
    kernels_gather_dot_fn dot;
    float *qn, *row;    /* normalised query; one normalised key on append */
    select_scratch sc;
} exact_sel;

static size_t elem(const exact_sel *e) { return e->f16 ? sizeof(uint16_t) : sizeof(float); }

/* Room for n more keys. */
static subq_status exact_reserve(exact_sel *e, int n, subq_error *err) {
    if (e->count + n > e->cap) {
        /* geometric growth: appends one token at a time in decode */
        int cap = e->cap ? e->cap : 256;
        while (cap < e->count + n) cap *= 2;
        void *k = realloc(e->keys, (size_t)cap * e->d * elem(e));
        if (!k) return subq_fail(err, SUBQ_ERR_NOMEM, "selector exact: out of memory for %d search keys", cap);
        e->keys = k;
        e->cap = cap;
    }
    return SUBQ_OK;
}

static void update_bytes(exact_sel *e) {
    e->base.stats.bytes = sizeof *e + (size_t)e->cap * e->d * elem(e) + 2 * (size_t)e->d * sizeof(float) +
                          e->sc.cap_f * sizeof(float) + e->sc.cap_i * sizeof(int32_t);
}

static subq_status exact_append(selector *s, const float *k_search, int n, int slot0, subq_error *err) {
    exact_sel *e = (exact_sel *)s;
    subq_status rc = select_check_append(s, e->count, n, slot0, err);
    if (rc) return rc;
    if (n > 0 && !k_search) return subq_fail(err, SUBQ_ERR_ARG, "selector exact: no search keys given");
    if ((rc = exact_reserve(e, n, err))) return rc;
    for (int t = 0; t < n; t++) {
        size_t at = (size_t)(e->count + t) * e->d;
        if (e->f16) {
            select_normalize(e->row, k_search + (size_t)t * e->d, e->d);
            uint16_t *dst = (uint16_t *)e->keys + at;
            for (int c = 0; c < e->d; c++) dst[c] = fp32_to_fp16(e->row[c]);
        } else {
            select_normalize((float *)e->keys + at, k_search + (size_t)t * e->d, e->d);
        }
    }
    e->count += n;
    update_bytes(e);
    return SUBQ_OK;
}

/* Keys in stored form: copied (f32) or narrowed (f16; exact for keys that
 * came from get_keys of an f16 selector). */
static subq_status exact_put_keys(selector *s, const float *keys, int n, int slot0, subq_error *err) {
    exact_sel *e = (exact_sel *)s;
    subq_status rc = select_check_append(s, e->count, n, slot0, err);
    if (rc) return rc;
    if (n > 0 && !keys) return subq_fail(err, SUBQ_ERR_ARG, "selector exact: no search keys given");
    if ((rc = exact_reserve(e, n, err))) return rc;
    size_t at = (size_t)e->count * e->d, nf = (size_t)n * e->d;
    if (e->f16) {
        uint16_t *dst = (uint16_t *)e->keys + at;
        for (size_t i = 0; i < nf; i++) dst[i] = fp32_to_fp16(keys[i]);
    } else {
        memcpy((float *)e->keys + at, keys, nf * sizeof(float));
    }
    e->count += n;
    update_bytes(e);
    return SUBQ_OK;
}

static subq_status exact_get_keys(const selector *s, int n, float *dst, subq_error *err) {
    const exact_sel *e = (const exact_sel *)s;
    if (!e->f16) return select_copy_keys(s, e->count, e->keys, (size_t)e->d, e->d, n, dst, err);
    if (n < 0 || n > e->count)
        return subq_fail(err, SUBQ_ERR_RANGE, "selector exact: asked for %d keys, it holds %d", n, e->count);
    const uint16_t *src = e->keys;
    for (size_t i = 0; i < (size_t)n * e->d; i++) dst[i] = fp16_to_fp32(src[i]);
    return SUBQ_OK;
}

/* Keys are rows in slot order: dropping the tail is forgetting it. */
static subq_status exact_truncate(selector *s, int n_keep, subq_error *err) {
    exact_sel *e = (exact_sel *)s;
    subq_status rc = select_check_truncate(s, e->count, n_keep, err);
    if (!rc) e->count = n_keep;
    return rc;
}

static int exact_query(selector *s, const float *q_search, const float *q_native, int k, const select_mask *m,
                       int32_t *out) {
    exact_sel *e = (exact_sel *)s;
    if (!q_search || e->count == 0) return 0;
    select_normalize(e->qn, q_search, e->d);
    const int64_t v0 = s->stats.n_visited;
    int got;
    /* long scans are split across threads; short ones are not worth waking them */
    if (s->params.n_threads > 1 && e->count >= 8192)
        got = select_scan_topk_parallel(s, e->qn, e->keys, (size_t)e->d, e->d, e->dot, e->count, m, k, out);
    else
        got = select_scan_topk(s, e->qn, e->keys, (size_t)e->d, e->d, e->dot, e->count, m, k, &e->sc, out);
    s->stats.bytes_read += (uint64_t)(s->stats.n_visited - v0) * (uint64_t)e->d * elem(e);
    return got;
}

static int exact_query_batch(selector *s, int n, const float *q_search, const float *q_native, size_t q_stride, int k,
                             const select_mask *m, int32_t *out, int *got, int n_threads) {
    exact_sel *e = (exact_sel *)s;
    if (!q_search || e->count == 0) {
        for (int i = 0; i < n; i++) got[i] = 0;
        return 0;
    }
    float *qn = select_query_realloc(s, NULL, (size_t)n * e->d * sizeof(float));
    if (!qn) return -1;
    for (int i = 0; i < n; i++) select_normalize(qn + (size_t)i * e->d, q_search + (size_t)i * e->d, e->d);
    int rc = select_scan_topk_batch(s, n, qn, e->keys, (size_t)e->d, e->d, e->f16, e->count, m, k, out, got, n_threads);
    free(qn);
    return rc;
}

static void exact_reset(selector *s) {
    exact_sel *e = (exact_sel *)s;
    e->count = 0; /* keep the allocation: the next sequence reuses it */
}

static void exact_free(selector *s) {
    exact_sel *e = (exact_sel *)s;
    free(e->keys);
    free(e->qn);
    free(e->row);
    select_scratch_free(&e->sc);
    free(e);
}

static const selector_ops exact_ops = {exact_append, exact_query, exact_reset, exact_free,
                                       exact_truncate, exact_get_keys, exact_put_keys, NULL, exact_query_batch};

subq_status select_exact_new(const selector_params *p, const selector_env *env, selector **out, subq_error *err) {
    exact_sel *e = calloc(1, sizeof *e);
    if (!e) return subq_fail(err, SUBQ_ERR_NOMEM, "selector exact: out of memory");
    e->base.ops = &exact_ops;
    e->d = p->d_search;
    e->f16 = p->f16_keys != 0;
    e->dot = e->f16 ? kernels_get()->gather_dot_f16 : kernels_get()->gather_dot_f32;
    e->qn = malloc((size_t)e->d * sizeof(float));
    e->row = malloc((size_t)e->d * sizeof(float));
    if (!e->qn || !e->row) {
        exact_free(&e->base);
        return subq_fail(err, SUBQ_ERR_NOMEM, "selector exact: out of memory");
    }
    e->base.stats.bytes = sizeof *e + 2 * (size_t)e->d * sizeof(float);
    *out = &e->base;
    return SUBQ_OK;
}
