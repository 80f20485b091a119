/* Per-head search: one selector of the plan's search kind (exact, hnsw,
 * faiss) per key search head, each over its own d_search-wide keys, and one
 * top-K set per query head (query_heads; subq_search_granularity).
 *
 * A search key row holds n_khead heads, head b's d_search values at
 * b * d_search; a search query row n_qhead heads. Query search head a serves
 * the query heads [a * n_head / n_qhead, (a + 1) * n_head / n_qhead) and
 * ranks among key head b = a / (n_qhead / n_khead): with one query search
 * head per KV head (kv-head) a group shares one set, scanned once; with one
 * per query head (head) the query search heads of a KV head rank its keys
 * together (selector_query_group: the exact scan reads each run of keys
 * once for all of them, each query with its own sampled threshold, split
 * across the context's threads when long; other kinds query one by one).
 * A prompt's batch goes through each key head's prefill path instead
 * (query_heads_prefill: the exact selector's batched scan), one batch of
 * the prompt's tokens per query search head. */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "select/select_internal.h"

typedef struct heads_sel {
    selector base;
    int n_qhead, n_khead;
    selector **inner;   /* [n_khead] */
    float *rows;        /* one head's rows of a batch: [rows_cap][d_search] */
    size_t rows_cap;
} heads_sel;

/* The inner selectors' counters, summed (the outer ones keep their own time). */
static void sync_stats(heads_sel *h) {
    selector_stats *st = &h->base.stats;
    st->n_visited = 0, st->bytes_read = 0, st->bytes = sizeof *h + h->rows_cap * h->base.params.d_search * sizeof(float);
    for (int b = 0; b < h->n_khead; b++) {
        st->n_visited += h->inner[b]->stats.n_visited;
        st->bytes_read += h->inner[b]->stats.bytes_read;
        st->bytes += h->inner[b]->stats.bytes;
    }
}

static float *rows_for(heads_sel *h, int n) {
    if ((size_t)n <= h->rows_cap) return h->rows;
    float *r = realloc(h->rows, (size_t)n * h->base.params.d_search * sizeof(float));
    if (!r) return NULL;
    h->rows = r;
    h->rows_cap = (size_t)n;
    return r;
}

/* rows[i] = src[i][b*ds .. (b+1)*ds) for n rows of n_heads*ds */
static void head_rows(const heads_sel *h, const float *src, int n, int n_heads, int b, float *rows) {
    const int ds = h->base.params.d_search;
    for (int i = 0; i < n; i++)
        memcpy(rows + (size_t)i * ds, src + ((size_t)i * n_heads + b) * ds, (size_t)ds * sizeof(float));
}

typedef subq_status (*add_fn)(selector *s, const float *keys, int n, int slot0, subq_error *err);

/* append / put_keys: each head's slice to its selector */
static subq_status add_rows(heads_sel *h, add_fn fn, const float *keys, int n, int slot0, subq_error *err) {
    float *rows = n > 0 ? rows_for(h, n) : h->rows;
    if (n > 0 && !rows) return subq_fail(err, SUBQ_ERR_NOMEM, "per-head search: out of memory for %d keys", n);
    subq_status rc = SUBQ_OK;
    for (int b = 0; b < h->n_khead && !rc; b++) {
        if (n > 0) head_rows(h, keys, n, h->n_khead, b, rows);
        rc = fn(h->inner[b], rows, n, slot0, err);
    }
    sync_stats(h);
    return rc;
}

static subq_status heads_append(selector *s, const float *k_search, int n, int slot0, subq_error *err) {
    return add_rows((heads_sel *)s, selector_append, k_search, n, slot0, err);
}

static subq_status heads_put_keys(selector *s, const float *keys, int n, int slot0, subq_error *err) {
    return add_rows((heads_sel *)s, selector_put_keys, keys, n, slot0, err);
}

static subq_status heads_get_keys(const selector *s, int n, float *dst, subq_error *err) {
    heads_sel *h = (heads_sel *)s;
    const int ds = s->params.d_search;
    float *rows = n > 0 ? rows_for(h, n) : h->rows;
    if (n > 0 && !rows) return subq_fail(err, SUBQ_ERR_NOMEM, "per-head search: out of memory for %d keys", n);
    for (int b = 0; b < h->n_khead; b++) {
        subq_status rc = selector_get_keys(h->inner[b], n, rows, err);
        if (rc) return rc;
        for (int i = 0; i < n; i++)
            memcpy(dst + ((size_t)i * h->n_khead + b) * ds, rows + (size_t)i * ds, (size_t)ds * sizeof(float));
    }
    return SUBQ_OK;
}

/* One set per query: query search head 0's (what a caller that wants a
 * single set gets; attention asks per head). */
static int heads_query(selector *s, const float *q_search, const float *q_native, int k, const select_mask *m,
                       int32_t *out) {
    heads_sel *h = (heads_sel *)s;
    int got = selector_query(h->inner[0], q_search, q_native, k, m, out);
    sync_stats(h);
    return got;
}

static int heads_query_heads(selector *s, const float *q_search, const float *q_native, int k, const select_mask *m,
                             int32_t *out, int *n_out) {
    heads_sel *h = (heads_sel *)s;
    const int ds = s->params.d_search, per_a = s->env.n_head / h->n_qhead, a_per_b = h->n_qhead / h->n_khead;
    /* key head b's query search heads a = b * a_per_b + x, together */
    int32_t *cand = malloc(((size_t)a_per_b * k + 1) * sizeof(int32_t));
    int *got = malloc((size_t)a_per_b * sizeof(int));
    int rc = cand && got ? 0 : -1;
    for (int b = 0; b < h->n_khead && !rc; b++) {
        const int a0 = b * a_per_b;
        rc = selector_query_group(h->inner[b], a_per_b, q_search + (size_t)a0 * ds, q_native, k, m, cand, got);
        for (int x = 0; !rc && x < a_per_b; x++)
            for (int y = 0; y < per_a; y++) { /* the query heads search head a serves */
                const int hq = (a0 + x) * per_a + y;
                memcpy(out + (size_t)hq * k, cand + (size_t)x * k, (size_t)got[x] * sizeof(int32_t));
                n_out[hq] = got[x];
            }
    }
    free(cand);
    free(got);
    sync_stats(h);
    return rc;
}

/* A prefill batch: per query search head a, its rows of the n queries
 * through its key head's selector as one prefill batch (the exact
 * selector's batched scan), the answer shared by the query heads it
 * serves. */
static int heads_query_heads_prefill(selector *s, int n, const float *q_search, const float *q_native, size_t q_stride,
                                     int k, const select_mask *m, int32_t *out, int *n_out, int n_threads) {
    heads_sel *h = (heads_sel *)s;
    const int nh = s->env.n_head, per_a = nh / h->n_qhead, a_per_b = h->n_qhead / h->n_khead;
    float *rows = n > 0 ? rows_for(h, n) : h->rows;
    int32_t *cand = malloc(((size_t)n * k + 1) * sizeof(int32_t));
    int *got = malloc(((size_t)n + 1) * sizeof(int));
    int rc = (n > 0 && !rows) || !cand || !got ? -1 : 0;
    for (int a = 0; a < h->n_qhead && !rc; a++) {
        head_rows(h, q_search, n, h->n_qhead, a, rows);
        rc = selector_query_prefill(h->inner[a / a_per_b], n, rows, q_native, q_stride, k, m, cand, got, n_threads);
        for (int i = 0; !rc && i < n; i++)
            for (int x = 0; x < per_a; x++) {
                const int hq = a * per_a + x;
                memcpy(out + ((size_t)i * nh + hq) * k, cand + (size_t)i * k, (size_t)got[i] * sizeof(int32_t));
                n_out[(size_t)i * nh + hq] = got[i];
            }
    }
    free(cand);
    free(got);
    sync_stats(h);
    return rc;
}

static void heads_reset(selector *s) {
    heads_sel *h = (heads_sel *)s;
    for (int b = 0; b < h->n_khead; b++) selector_reset(h->inner[b]);
    sync_stats(h);
}

static subq_status heads_truncate(selector *s, int n_keep, subq_error *err) {
    heads_sel *h = (heads_sel *)s;
    subq_status rc = SUBQ_OK;
    for (int b = 0; b < h->n_khead && !rc; b++) rc = selector_truncate(h->inner[b], n_keep, err);
    sync_stats(h);
    return rc;
}

static void heads_free(selector *s) {
    heads_sel *h = (heads_sel *)s;
    for (int b = 0; h->inner && b < h->n_khead; b++) selector_free(h->inner[b]);
    free(h->inner);
    free(h->rows);
    free(h);
}

static const selector_ops heads_ops = {heads_append, heads_query, heads_reset, heads_free, heads_truncate,
                                       heads_get_keys, heads_put_keys, heads_query_heads, NULL, NULL,
                                       heads_query_heads_prefill, NULL, NULL, NULL, NULL, NULL};

subq_status select_heads_new(const selector_params *p, const selector_env *env, selector **out, subq_error *err) {
    *out = NULL;
    const int nq = p->search_qheads, nk = p->search_heads;
    if (nk < 1 || nq < nk || nq % nk || !env || env->n_head <= 0 || env->n_head % nq)
        return subq_fail(err, SUBQ_ERR_SHAPE, "per-head search: %d query / %d key search heads do not divide the "
                         "layer's %d query heads", nq, nk, env ? env->n_head : 0);
    heads_sel *h = calloc(1, sizeof *h);
    if (!h || !(h->inner = calloc((size_t)nk, sizeof *h->inner))) {
        free(h);
        return subq_fail(err, SUBQ_ERR_NOMEM, "per-head search: out of memory");
    }
    h->base.ops = &heads_ops;
    h->n_qhead = nq, h->n_khead = nk;
    selector_params one = *p;
    one.search_heads = one.search_qheads = 1;
    for (int b = 0; b < nk; b++) {
        subq_status rc = selector_new(&one, env, &h->inner[b], err);
        if (rc) {
            heads_free(&h->base);
            return rc;
        }
    }
    sync_stats(h);
    *out = &h->base;
    return SUBQ_OK;
}
