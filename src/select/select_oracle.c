/* oracle: the exact top-K of a native score over the eligible slots, read
 * from the KV cache (the upper-bound baselines: what a perfect retriever of
 * the model's own attention logits would pick). With a far scheme
 * (params.far_from) the slots below a query's mask.far_hi are scored as
 * attended at position mask.far_at: q . R(far_at) k0_j, k0_j = R(-p_j) k_j
 * the key unturned, kept beside the cache (headmean-dot and per-head).
 * Three scores (subq_oracle_kind):
 *
 *   headmean-dot     s_j = (1/n_head) sum_h q_h . k_{j, kvh(h)}, the mean of
 *                    the heads' logits. With grouped-query attention the heads
 *                    of a group share a key, so s_j = sum_g qbar_g . k_{j,g},
 *                    qbar_g = (1/n_head) sum_{h in g} q_h: n_head_kv dots per slot.
 *   headmean-cosine  s_j = cos(qm, km_j), qm = (1/n_head) sum_h q_h,
 *                    km_j = (1/n_head_kv) sum_g k_{j,g}: ann-sparseattention's
 *                    raw-QK oracle (compare_retrieval.py: head-mean q and k,
 *                    L2-normalised, exact top-K). |qm| does not change the
 *                    ranking, so s_j = qm . km_j / |km_j| (0 when km_j = 0).
 *   per-head         each query head h its own top-K of q_h . k_{j, kvh(h)}
 *                    (query_heads; its query op answers headmean-dot).
 *   per-kv-head      each KV head g one top-K of (1/G) sum_{h in g} q_h . k_{j,g},
 *                    shared by its G query heads (query_heads, as per-head). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "select/select_internal.h"

typedef struct oracle_sel {
    selector base;
    int count;
    float *qv;          /* the query per KV head: [n_head_kv][head_dim] */
    float *row, *km;    /* one key decoded to f32, the head-mean key: [head_dim] */
    select_scratch sc;
    /* far keys (params.far_from): every slot's keys unturned [cap][n_head_kv][head_dim], and the query
     * turned to meet them [n_head_kv][head_dim] */
    int far;
    float *k0, *qr;
    size_t k0_cap;
} oracle_sel;

static const char *oracle_names[SUBQ_ORACLE_COUNT] = {"headmean-dot", "headmean-cosine", "per-head", "per-kv-head"};

int oracle_kind_parse(const char *name) {
    for (int i = 0; name && i < SUBQ_ORACLE_COUNT; i++)
        if (!strcmp(name, oracle_names[i])) return i;
    return -1;
}

const char *oracle_kind_name(subq_oracle_kind k) {
    return (int)k >= 0 && k < SUBQ_ORACLE_COUNT ? oracle_names[k] : "?";
}

static subq_status oracle_append(selector *s, const float *k_search, int n, int slot0, subq_error *err) {
    oracle_sel *o = (oracle_sel *)s;
    subq_status rc = select_check_append(s, o->count, n, slot0, err);
    if (rc) return rc;
    if (slot0 + n > s->env.kv->n_ctx)
        return subq_fail(err, SUBQ_ERR_RANGE, "selector oracle: slot %d beyond the KV cache (%d slots)", slot0 + n - 1,
                         s->env.kv->n_ctx);
    if (o->far) { /* k0 = R(-p) k for each KV head of the new slots */
        const kv_cache *kv = s->env.kv;
        const size_t row = (size_t)s->env.n_head_kv * s->env.head_dim;
        if ((size_t)(slot0 + n) > o->k0_cap) {
            size_t cap = o->k0_cap ? o->k0_cap : 256;
            while (cap < (size_t)(slot0 + n)) cap *= 2;
            float *k0 = realloc(o->k0, cap * row * sizeof(float));
            if (!k0) return subq_fail(err, SUBQ_ERR_NOMEM, "selector oracle: out of memory for %zu keys", cap);
            o->k0 = k0;
            o->k0_cap = cap;
        }
        for (int j = slot0; j < slot0 + n; j++)
            for (int g = 0; g < s->env.n_head_kv; g++) {
                float *dst = o->k0 + (size_t)j * row + (size_t)g * s->env.head_dim;
                kv_cache_row_f32(kv, kv_cache_key(kv, s->env.layer, g, j), dst);
                attn_rope_rotate(&s->env.rope, dst, -kv->pos[j]);
            }
    }
    o->count += n;
    return SUBQ_OK;
}

/* Scores of nb slots idx[] into acc: sum_{g in [g0, g1)} qv_g . k_{idx_i, g}
 * (far: qr_g . k0_{idx_i, g}), or with `cosine` the cosine score above
 * (qv_0 = qm). */
static void score_block(oracle_sel *o, const int32_t *idx, int nb, int g0, int g1, int cosine, int far, float *acc,
                        float *tmp) {
    const selector_env *env = &o->base.env;
    const kv_cache *kv = env->kv;
    const int hd = env->head_dim, nkv = env->n_head_kv;
    if (cosine) {
        const kernels *K = kernels_get();
        for (int i = 0; i < nb; i++) {
            memset(o->km, 0, (size_t)hd * sizeof(float));
            for (int g = 0; g < nkv; g++) {
                kv_cache_row_f32(kv, kv_cache_key(kv, env->layer, g, idx[i]), o->row);
                for (int c = 0; c < hd; c++) o->km[c] += o->row[c] / (float)nkv;
            }
            float norm = sqrtf(K->dot_f32(o->km, o->km, hd));
            acc[i] = norm > 0.0f ? K->dot_f32(o->qv, o->km, hd) / norm : 0.0f;
        }
        return;
    }
    for (int i = 0; i < nb; i++) acc[i] = 0.0f;
    if (far) { /* the unturned keys, f32 rows of every KV head side by side */
        const kernels *K = kernels_get();
        for (int g = g0; g < g1; g++) {
            K->gather_dot_f32(o->qr + (size_t)g * hd, o->k0 + (size_t)g * hd, (size_t)nkv * hd, hd, idx, nb, tmp);
            for (int i = 0; i < nb; i++) acc[i] += tmp[i];
        }
        return;
    }
    /* one key plane per KV head (rows a slot stride apart) */
    for (int g = g0; g < g1; g++) {
        kv_cache_gather_dot(kv, env->layer, g, o->qv + (size_t)g * hd, idx, nb, tmp);
        for (int i = 0; i < nb; i++) acc[i] += tmp[i];
    }
}

/* Exact top-k of the prepared query o->qv over the eligible slots (see
 * score_block); returns the count, -1 when out of memory. */
static int scan(oracle_sel *o, const select_mask *m, int k, int g0, int g1, int cosine, int32_t *out) {
    selector *s = &o->base;
    const size_t blk = SELECT_BLOCK;
    if (!select_scratch_f(s, &o->sc, 2 * blk) || !select_scratch_i(s, &o->sc, blk) ||
        !select_scratch_u(s, &o->sc, 2 * (size_t)(k > 0 ? k : 1)))
        return -1;
    /* a 2k buffer cut by quickselect: a bounded heap sifted at most keys
     * was 5% of an eval of K = 256 */
    topk_buf best = {.key = o->sc.u, .k = k};
    int32_t *idx = o->sc.i;
    float *acc = o->sc.f, *tmp = acc + blk;
    int lo[3], hi[3], nr = select_mask_ranges(m, o->count, lo, hi);
    int64_t scored = 0;
    /* far slots meet the query turned back to where they are attended */
    const int far_hi = o->far && !cosine ? m->far_hi : 0;
    const int hd = s->env.head_dim;
    for (int g = g0; far_hi && g < g1; g++) {
        memcpy(o->qr + (size_t)g * hd, o->qv + (size_t)g * hd, (size_t)hd * sizeof(float));
        attn_rope_rotate(&s->env.rope, o->qr + (size_t)g * hd, -m->far_at);
    }
    /* the most recent keys first: scores tend to grow toward them, so the
     * buffer's threshold rises early; the result is the same */
    for (int r = nr - 1; r >= 0; r--) {
        for (int j1 = hi[r]; j1 > lo[r]; j1 -= (int)blk) {
            int j0 = j1 - (int)blk > lo[r] ? j1 - (int)blk : lo[r];
            /* [j0, far_hi) far, [far_hi, j1) near, in blocks that do not straddle */
            if (j0 < far_hi && j1 > far_hi) j0 = far_hi;
            int nb = 0;
            for (int j = j0; j < j1; j++)
                if (!m->seg || m->seg[j] == m->query_seg) idx[nb++] = j;
            score_block(o, idx, nb, g0, g1, cosine, j0 < far_hi, acc, tmp);
            for (int i = nb - 1; i >= 0; i--) select_topk_push(&best, acc[i], idx[i]);
            scored += nb;
            j1 = j0 + (int)blk; /* the loop steps back by blk from j0 */
        }
    }
    s->stats.n_visited += scored;
    /* the cosine score reads every KV head's key, the others those of heads [g0, g1) */
    s->stats.bytes_read += (uint64_t)scored * (uint64_t)(cosine ? s->env.n_head_kv : g1 - g0) * s->env.kv->row_bytes;
    return select_topk_take(&best, 1, out, NULL);
}

/* qv_g = w sum_{h in group g, h0 <= h < h1} q_h (groups with no such head
 * are left as they are) */
static void group_sum(oracle_sel *o, const float *q_native, int h0, int h1, float w) {
    const selector_env *env = &o->base.env;
    const int hd = env->head_dim, grp = env->n_head / env->n_head_kv;
    memset(o->qv + (size_t)(h0 / grp) * hd, 0, (size_t)((h1 - 1) / grp + 1 - h0 / grp) * hd * sizeof(float));
    for (int h = h0; h < h1; h++)
        for (int c = 0; c < hd; c++) o->qv[(size_t)(h / grp) * hd + c] += q_native[(size_t)h * hd + c] * w;
}

static int oracle_query(selector *s, const float *q_search, const float *q_native, int k, const select_mask *m,
                        int32_t *out) {
    oracle_sel *o = (oracle_sel *)s;
    const selector_env *env = &s->env;
    const int hd = env->head_dim;
    if (!q_native || o->count == 0) return 0;
    group_sum(o, q_native, 0, env->n_head, 1.0f / (float)env->n_head);
    if (s->params.plan.oracle != SUBQ_ORACLE_HEADMEAN_COSINE) return scan(o, m, k, 0, env->n_head_kv, 0, out);
    /* qm = sum_g qbar_g, into qv_0 */
    for (int g = 1; g < env->n_head_kv; g++)
        for (int c = 0; c < hd; c++) o->qv[c] += o->qv[(size_t)g * hd + c];
    return scan(o, m, k, 0, 1, 1, out);
}

static int oracle_query_heads(selector *s, const float *q_search, const float *q_native, int k, const select_mask *m,
                              int32_t *out, int *n_out) {
    (void)q_search;
    oracle_sel *o = (oracle_sel *)s;
    const int grp = s->env.n_head / s->env.n_head_kv;
    if (o->count == 0) return 0;
    if (s->params.plan.oracle == SUBQ_ORACLE_PER_KV_HEAD) { /* the group's mean logit: one scan per KV head */
        for (int g = 0; g < s->env.n_head_kv; g++) {
            group_sum(o, q_native, g * grp, (g + 1) * grp, 1.0f / (float)grp);
            int32_t *dst = out + (size_t)g * grp * k;
            int got = scan(o, m, k, g, g + 1, 0, dst);
            if (got < 0) return -1;
            for (int x = 0; x < grp; x++) {
                if (x) memcpy(dst + (size_t)x * k, dst, (size_t)got * sizeof(int32_t));
                n_out[g * grp + x] = got;
            }
        }
        return 0;
    }
    for (int h = 0; h < s->env.n_head; h++) {
        group_sum(o, q_native, h, h + 1, 1.0f);
        int got = scan(o, m, k, h / grp, h / grp + 1, 0, out + (size_t)h * k);
        if (got < 0) return -1;
        n_out[h] = got;
    }
    return 0;
}

static void oracle_reset(selector *s) { ((oracle_sel *)s)->count = 0; }

/* The keys live in the KV cache: only the count changes. */
static subq_status oracle_truncate(selector *s, int n_keep, subq_error *err) {
    return select_truncate_count(s, &((oracle_sel *)s)->count, n_keep, err);
}

static void oracle_free(selector *s) {
    oracle_sel *o = (oracle_sel *)s;
    free(o->qv);
    free(o->row);
    free(o->km);
    free(o->k0);
    free(o->qr);
    select_scratch_free(&o->sc);
    free(o);
}

static const selector_ops oracle_ops = {oracle_append, oracle_query, oracle_reset, oracle_free,
                                        oracle_truncate, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                                        NULL, NULL};
static const selector_ops oracle_head_ops = {oracle_append, oracle_query, oracle_reset, oracle_free,
                                             oracle_truncate, NULL, NULL, oracle_query_heads, NULL, NULL, NULL, NULL,
                                             NULL, NULL, NULL, NULL};

subq_status select_oracle_new(const selector_params *p, const selector_env *env, selector **out, subq_error *err) {
    if ((int)p->plan.oracle < 0 || p->plan.oracle >= SUBQ_ORACLE_COUNT)
        return subq_fail(err, SUBQ_ERR_ARG, "selector oracle: unknown score %d", (int)p->plan.oracle);
    oracle_sel *o = calloc(1, sizeof *o);
    if (!o) return subq_fail(err, SUBQ_ERR_NOMEM, "selector oracle: out of memory");
    o->base.ops = p->plan.oracle == SUBQ_ORACLE_PER_HEAD || p->plan.oracle == SUBQ_ORACLE_PER_KV_HEAD ? &oracle_head_ops
                                                                                                      : &oracle_ops;
    o->qv = malloc((size_t)env->n_head_kv * env->head_dim * sizeof(float));
    o->row = malloc((size_t)env->head_dim * sizeof(float));
    o->km = malloc((size_t)env->head_dim * sizeof(float));
    o->far = p->far_from > 0 && env->rope.n_rot > 0 && p->plan.oracle != SUBQ_ORACLE_HEADMEAN_COSINE;
    o->qr = o->far ? malloc((size_t)env->n_head_kv * env->head_dim * sizeof(float)) : NULL;
    if (!o->qv || !o->row || !o->km || (o->far && !o->qr)) {
        oracle_free(&o->base);
        return subq_fail(err, SUBQ_ERR_NOMEM, "selector oracle: out of memory");
    }
    o->base.stats.bytes = sizeof *o + ((size_t)env->n_head_kv + 2) * env->head_dim * sizeof(float);
    *out = &o->base;
    return SUBQ_OK;
}
