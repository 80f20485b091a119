#include "complete/completion.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/fingerprint.h"
#include "complete/phi_cache.h"

struct attn_completion {
    const phi_maps *maps;
    int layer, n_sink, n_tail, top_k;
    int n_head, n_head_kv, head_dim, d_phi;
    unsigned char *heads;        /* [n_head] */
    phi_cache *cache;            /* [n_head_kv] */
    phi_residual *res;           /* [n_head_kv] */
    float *lk;                   /* [lk_cap][n_head_kv][d_phi]: log phi_k per slot */
    int lk_cap;
    int doc0, next_cache;        /* current document; next slot to summarise */
    float *row, *lq, *lkr, *scores, *vals;
    const float **vptr;
};

subq_status completion_new(const phi_maps *maps, int layer, int n_sink, int n_tail, int top_k,
                           const unsigned char *heads, attn_completion **out, subq_error *err) {
    *out = NULL;
    if (!phi_layer_params(maps, layer))
        return subq_fail(err, SUBQ_ERR_ARG, "the completion file has no maps for layer %d", layer);
    attn_completion *c = calloc(1, sizeof *c);
    if (!c) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    const phi_dims *d = &maps->dims;
    c->maps = maps;
    c->layer = layer;
    c->n_sink = n_sink;
    c->n_tail = n_tail;
    c->top_k = top_k;
    c->n_head = d->n_head;
    c->n_head_kv = d->n_head_kv;
    c->head_dim = d->head_dim;
    c->d_phi = d->d_phi;
    c->next_cache = n_sink;
    const int D = d->head_dim, F = d->d_phi, max_slots = n_sink + top_k + n_tail;
    c->heads = malloc((size_t)d->n_head);
    c->cache = calloc((size_t)d->n_head_kv, sizeof(phi_cache));
    c->res = calloc((size_t)d->n_head_kv, sizeof(phi_residual));
    c->row = malloc((size_t)D * sizeof(float));
    c->lq = malloc((size_t)F * sizeof(float));
    c->lkr = malloc((size_t)(top_k > 0 ? top_k : 1) * F * sizeof(float));
    c->scores = malloc((size_t)max_slots * sizeof(float));
    c->vals = malloc((size_t)max_slots * D * sizeof(float));
    c->vptr = malloc((size_t)max_slots * sizeof(float *));
    int ok = c->heads && c->cache && c->res && c->row && c->lq && c->lkr && c->scores && c->vals && c->vptr;
    if (ok)
        for (int h = 0; h < d->n_head; h++) c->heads[h] = heads ? heads[h] : 1;
    for (int g = 0; ok && g < d->n_head_kv; g++)
        ok = !phi_cache_init(&c->cache[g], F, D, err) && !phi_residual_init(&c->res[g], F, D, err);
    if (!ok) {
        completion_free(c);
        return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory for the completion cache");
    }
    *out = c;
    return SUBQ_OK;
}

void completion_free(attn_completion *c) {
    if (!c) return;
    for (int g = 0; g < c->n_head_kv; g++) {
        if (c->cache) phi_cache_free(&c->cache[g]);
        if (c->res) phi_residual_free(&c->res[g]);
    }
    free(c->heads);
    free(c->cache);
    free(c->res);
    free(c->lk);
    free(c->row);
    free(c->lq);
    free(c->lkr);
    free(c->scores);
    free(c->vals);
    free(c->vptr);
    free(c);
}

void completion_reset(attn_completion *c) {
    for (int g = 0; g < c->n_head_kv; g++) phi_cache_reset(&c->cache[g]);
    c->doc0 = 0;
    c->next_cache = c->n_sink;
}

uint64_t completion_hash(const attn_completion *c) {
    uint64_t h = fnv1a(FNV_OFFSET, phi_layer_params(c->maps, c->layer), c->maps->layer_size * sizeof(float));
    return fnv1a(h, c->heads, (size_t)c->n_head * sizeof c->heads[0]);
}

subq_status completion_advance(attn_completion *c, const kv_cache *kv, int slot, subq_error *err) {
    const int nkv = c->n_head_kv, F = c->d_phi;
    if (slot >= c->lk_cap) { /* grow the log-feature store with the cache */
        int cap = c->lk_cap ? c->lk_cap : 256;
        while (cap <= slot) cap = cap > kv->n_ctx / 2 ? kv->n_ctx : cap * 2;
        if (cap <= slot) cap = slot + 1;
        float *lk = realloc(c->lk, (size_t)cap * nkv * F * sizeof(float));
        if (!lk) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory for completion features (%d slots)", cap);
        c->lk = lk;
        c->lk_cap = cap;
    }
    if (slot == 0 || kv->seg[slot - 1] != kv->seg[slot]) { /* a new document */
        c->doc0 = slot;
        c->next_cache = slot + c->n_sink;
        for (int g = 0; g < nkv; g++) phi_cache_reset(&c->cache[g]);
    }
    for (int g = 0; g < nkv; g++) {
        kv_cache_row_f32(kv, kv_cache_key(kv, c->layer, g, slot), c->row);
        phi_log_features(c->maps, c->layer, PHI_K, g, c->row, c->lk + ((size_t)slot * nkv + g) * F);
    }
    /* slots that left the tail window of query `slot` join the mid region */
    for (; c->next_cache <= slot - c->n_tail; c->next_cache++)
        for (int g = 0; g < nkv; g++) {
            kv_cache_row_f32(kv, kv_cache_value(kv, c->layer, g, c->next_cache), c->row);
            phi_cache_add(&c->cache[g], c->lk + ((size_t)c->next_cache * nkv + g) * F, c->row);
        }
    return SUBQ_OK;
}

/* completion_attend for the query heads [h0, h1) of KV group g, which share
 * the exact slots. */
static void attend_group(attn_completion *c, const kv_cache *kv, int slot, const float *q, float scale, int g, int h0,
                         int h1, const int *slots, int n_slots, int cand_off, int n_cand, float *out,
                         double *share_sum, int64_t *n_share) {
    const int D = c->head_dim, F = c->d_phi, nkv = c->n_head_kv;
    const kernels_kv *ops = kv_cache_ops(kv);
    const int has_mid = slot - c->n_tail >= c->doc0 + c->n_sink;
    for (int j = 0; j < n_slots; j++) {
        kv_cache_row_f32(kv, kv_cache_value(kv, c->layer, g, slots[j]), c->vals + (size_t)j * D);
        c->vptr[j] = c->vals + (size_t)j * D;
    }
    /* the summary minus the retrieved tokens, shared by the heads */
    for (int i = 0; i < n_cand; i++)
        memcpy(c->lkr + (size_t)i * F, c->lk + ((size_t)slots[cand_off + i] * nkv + g) * F, (size_t)F * sizeof(float));
    phi_residual_compute(&c->res[g], &c->cache[g], c->lkr, c->vptr + cand_off, n_cand, PHI_EPS_DEFAULT);
    for (int h = h0; h < h1; h++) {
        const float *qh = q + (size_t)h * D;
        /* s_j = scale q_h . k_j over the exact set */
        for (int j = 0; j < n_slots; j++) {
            const void *key = kv_cache_key(kv, c->layer, g, slots[j]);
            c->scores[j] = scale * ops->dot(qh, key, D);
        }
        phi_hybrid_info info;
        if (c->heads[h]) phi_log_features(c->maps, c->layer, PHI_Q, h, qh, c->lq);
        phi_complete_head(c->heads[h] ? &c->res[g] : NULL, D, c->lq, c->scores, c->vptr, n_slots,
                          out + (size_t)h * D, &info);
        if (has_mid && c->heads[h]) {
            *share_sum += info.z_share;
            (*n_share)++;
        }
    }
}

void completion_attend(attn_completion *c, const kv_cache *kv, int slot, const float *q, float scale,
                       const int *slots, int n_slots, int cand_off, int n_cand, float *out, double *share_sum,
                       int64_t *n_share) {
    const int g_size = c->n_head / c->n_head_kv;
    for (int g = 0; g < c->n_head_kv; g++)
        attend_group(c, kv, slot, q, scale, g, g * g_size, (g + 1) * g_size, slots, n_slots, cand_off, n_cand, out,
                     share_sum, n_share);
}

void completion_attend_head(attn_completion *c, const kv_cache *kv, int slot, const float *q, float scale, int h,
                            const int *slots, int n_slots, int cand_off, int n_cand, float *out, double *share_sum,
                            int64_t *n_share) {
    const int g = h / (c->n_head / c->n_head_kv);
    attend_group(c, kv, slot, q, scale, g, h, h + 1, slots, n_slots, cand_off, n_cand, out, share_sum, n_share);
}
