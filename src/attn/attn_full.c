/* Full (dense) causal attention: the reference every sparse stage is
 * measured against. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn/attn.h"
#include "base/error.h"

static float dot_key(const kv_cache *kv, const void *key, const float *q) {
    float s = 0.0f;
    if (kv->type == SUBQ_KV_F16) {
        const uint16_t *k = key;
        for (int i = 0; i < kv->head_dim; i++) s += q[i] * fp16_to_fp32(k[i]);
    } else {
        const float *k = key;
        for (int i = 0; i < kv->head_dim; i++) s += q[i] * k[i];
    }
    return s;
}

static void axpy_value(const kv_cache *kv, const void *val, float w, float *out) {
    if (kv->type == SUBQ_KV_F16) {
        const uint16_t *v = val;
        for (int i = 0; i < kv->head_dim; i++) out[i] += w * fp16_to_fp32(v[i]);
    } else {
        const float *v = val;
        for (int i = 0; i < kv->head_dim; i++) out[i] += w * v[i];
    }
}

/* softmax over scores[0..n) in place (max-shifted), returns nothing; masked
 * entries hold -INFINITY and get weight 0. */
static void softmax_inplace(float *scores, int n) {
    float mx = -INFINITY;
    for (int j = 0; j < n; j++) mx = scores[j] > mx ? scores[j] : mx;
    if (mx == -INFINITY) { /* nothing eligible: all weights zero */
        for (int j = 0; j < n; j++) scores[j] = 0.0f;
        return;
    }
    float sum = 0.0f;
    for (int j = 0; j < n; j++) {
        scores[j] = expf(scores[j] - mx);
        sum += scores[j];
    }
    float inv = 1.0f / sum;
    for (int j = 0; j < n; j++) scores[j] *= inv;
}

void attn_head_over_slots(const kv_cache *kv, int layer, int kv_head, const float *q, float scale,
                          const int *slots, int n, float *scores, float *out) {
    for (int j = 0; j < n; j++)
        scores[j] = scale * dot_key(kv, kv_cache_key(kv, layer, kv_head, slots[j]), q);
    softmax_inplace(scores, n);
    memset(out, 0, (size_t)kv->head_dim * sizeof(float));
    for (int j = 0; j < n; j++)
        if (scores[j] != 0.0f) axpy_value(kv, kv_cache_value(kv, layer, kv_head, slots[j]), scores[j], out);
}

void attn_head_causal(const kv_cache *kv, int layer, int kv_head, const float *q, float scale, int n,
                      int seg, float *scores, float *out) {
    /* s_j = scale * q.k_j for eligible j; softmax; out = sum_j p_j v_j */
    for (int j = 0; j < n; j++)
        scores[j] = (seg < 0 || kv->seg[j] == seg)
                        ? scale * dot_key(kv, kv_cache_key(kv, layer, kv_head, j), q)
                        : -INFINITY;
    softmax_inplace(scores, n);
    memset(out, 0, (size_t)kv->head_dim * sizeof(float));
    for (int j = 0; j < n; j++)
        if (scores[j] != 0.0f) axpy_value(kv, kv_cache_value(kv, layer, kv_head, j), scores[j], out);
}

static subq_status full_forward(attn_stage *self, const attn_step *st, const kv_cache *kv,
                                subq_error *err) {
    int n_ctx_needed = st->slot0 + st->n_tokens;
    int group = st->n_head / st->n_head_kv;
    int n_pairs = st->n_tokens * st->n_head;
    int failed = 0;
    /* threads only pay off once there is real work (pairs x keys x dims) */
    int64_t work = (int64_t)n_pairs * n_ctx_needed * st->head_dim;
#pragma omp parallel num_threads(st->n_threads) if (work >= (1 << 16))
    {
        float *scores = malloc((size_t)n_ctx_needed * sizeof(float));
        if (!scores) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic, 4)
        for (int p = 0; p < n_pairs; p++) {
            if (!scores) continue;
            int t = p / st->n_head, h = p % st->n_head;
            int slot = st->slot0 + t;
            const float *q = st->q + (size_t)t * st->n_head * st->head_dim + (size_t)h * st->head_dim;
            float *o = st->out + (size_t)t * st->n_head * st->head_dim + (size_t)h * st->head_dim;
            /* block-causal: only keys of the query's own segment */
            attn_head_causal(kv, st->layer, h / group, q, st->scale, slot + 1, kv->seg[slot], scores, o);
        }
        free(scores);
    }
    if (failed) return subq_fail(err, SUBQ_ERR_NOMEM, "attention scratch allocation failed");
    return SUBQ_OK;
}

static attn_stage full_stage = {"full", full_forward, NULL};

attn_stage *attn_full_stage(void) { return &full_stage; }
