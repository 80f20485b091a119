/* oracle: exact top-K of the head-mean native score
 *   s_j = (1/n_head) sum_h q_h . k_{j, kvh(h)}
 * over the eligible slots, read from the KV cache (the upper-bound baseline:
 * what a perfect retriever of the model's own attention logits would pick).
 * With grouped-query attention the heads of a group share a key, so
 *   s_j = sum_g qbar_g . k_{j,g},  qbar_g = (1/n_head) sum_{h in g} q_h,
 * which costs n_head_kv dots per slot instead of n_head. */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "select/select_internal.h"

typedef struct oracle_sel {
    selector base;
    int count;
    float *qbar;        /* [n_head_kv][head_dim] */
    kernels_gather_dot_fn dot;
    select_scratch sc;
} oracle_sel;

static subq_status oracle_append(selector *s, const float *k_search, int n, int slot0, subq_error *err) {
    oracle_sel *o = (oracle_sel *)s;
    subq_status rc = select_check_append(s, o->count, n, slot0, err);
    if (rc) return rc;
    if (slot0 + n > s->env.kv->n_ctx)
        return subq_fail(err, SUBQ_ERR_RANGE, "selector oracle: slot %d beyond the KV cache (%d slots)", slot0 + n - 1,
                         s->env.kv->n_ctx);
    o->count += n;
    return SUBQ_OK;
}

static int oracle_query(selector *s, const float *q_search, const float *q_native, int k, const select_mask *m,
                        int32_t *out) {
    oracle_sel *o = (oracle_sel *)s;
    const selector_env *env = &s->env;
    const kv_cache *kv = env->kv;
    const int hd = env->head_dim, nkv = env->n_head_kv, grp = env->n_head / env->n_head_kv;
    if (!q_native || o->count == 0) return 0;
    const size_t blk = SELECT_BLOCK;
    if (!select_scratch_f(s, &o->sc, (size_t)k + 2 * blk) || !select_scratch_i(s, &o->sc, (size_t)k + blk)) return -1;
    select_heap best = {.score = o->sc.f, .slot = o->sc.i, .n = 0, .k = k};
    int32_t *idx = o->sc.i + k;
    float *acc = o->sc.f + k, *tmp = acc + blk;
    /* qbar_g = (1/n_head) sum_{h in group g} q_h */
    const float inv = 1.0f / (float)env->n_head;
    memset(o->qbar, 0, (size_t)nkv * hd * sizeof(float));
    for (int h = 0; h < env->n_head; h++)
        for (int c = 0; c < hd; c++) o->qbar[(h / grp) * hd + c] += q_native[(size_t)h * hd + c] * inv;
    int lo[3], hi[3], nr = select_mask_ranges(m, o->count, lo, hi);
    int64_t scored = 0;
    for (int r = 0; r < nr; r++) {
        for (int j0 = lo[r]; j0 < hi[r]; j0 += (int)blk) {
            int j1 = j0 + (int)blk < hi[r] ? j0 + (int)blk : hi[r], nb = 0;
            for (int j = j0; j < j1; j++)
                if (!m->seg || m->seg[j] == m->query_seg) idx[nb++] = j;
            /* acc_i = sum_g qbar_g . k_{idx_i, g}: one contiguous key plane per KV head */
            for (int i = 0; i < nb; i++) acc[i] = 0.0f;
            for (int g = 0; g < nkv; g++) {
                o->dot(o->qbar + (size_t)g * hd, kv_cache_key(kv, env->layer, g, 0), (size_t)hd, hd, idx, nb, tmp);
                for (int i = 0; i < nb; i++) acc[i] += tmp[i];
            }
            for (int i = 0; i < nb; i++) select_heap_push(&best, acc[i], idx[i]);
            scored += nb;
        }
    }
    s->stats.n_visited += scored;
    s->stats.bytes_read += (uint64_t)scored * (uint64_t)nkv * kv->row_bytes;
    return select_heap_take(&best, out, NULL);
}

static void oracle_reset(selector *s) { ((oracle_sel *)s)->count = 0; }

/* The keys live in the KV cache: only the count changes. */
static subq_status oracle_truncate(selector *s, int n_keep, subq_error *err) {
    oracle_sel *o = (oracle_sel *)s;
    subq_status rc = select_check_truncate(s, o->count, n_keep, err);
    if (!rc) o->count = n_keep;
    return rc;
}

static void oracle_free(selector *s) {
    oracle_sel *o = (oracle_sel *)s;
    free(o->qbar);
    select_scratch_free(&o->sc);
    free(o);
}

static const selector_ops oracle_ops = {oracle_append, oracle_query, oracle_reset, oracle_free,
                                        oracle_truncate, NULL, NULL};

subq_status select_oracle_new(const selector_params *p, const selector_env *env, selector **out, subq_error *err) {
    oracle_sel *o = calloc(1, sizeof *o);
    if (!o) return subq_fail(err, SUBQ_ERR_NOMEM, "selector oracle: out of memory");
    o->base.ops = &oracle_ops;
    o->dot = kv_cache_ops(env->kv)->gather_dot;
    o->qbar = malloc((size_t)env->n_head_kv * env->head_dim * sizeof(float));
    if (!o->qbar) {
        oracle_free(&o->base);
        return subq_fail(err, SUBQ_ERR_NOMEM, "selector oracle: out of memory");
    }
    o->base.stats.bytes = sizeof *o + (size_t)env->n_head_kv * env->head_dim * sizeof(float);
    *out = &o->base;
    return SUBQ_OK;
}
