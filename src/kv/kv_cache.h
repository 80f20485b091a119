/* KV cache: per layer and KV head, keys and values of every cached token
 * (post-RoPE keys), stored f32 or f16, plus each slot's position and
 * document (segment) id for causal and block-causal masks. */
#ifndef SUBQ_KV_CACHE_H
#define SUBQ_KV_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "subq.h"

typedef struct kv_cache {
    int n_layer, n_head_kv, head_dim, n_ctx;
    int n_used;                 /* slots filled: 0 .. n_used-1 */
    subq_kv_type type;
    size_t elem_size;
    void **k, **v;              /* [layer] -> [n_head_kv][n_ctx][head_dim] */
    int32_t *pos;               /* [n_ctx] */
    int32_t *seg;               /* [n_ctx] */
} kv_cache;

/* Bytes the cache would take; used to refuse contexts larger than memory. */
size_t kv_cache_bytes(int n_layer, int n_head_kv, int head_dim, int n_ctx, subq_kv_type type);
subq_status kv_cache_init(kv_cache *kv, int n_layer, int n_head_kv, int head_dim, int n_ctx,
                          subq_kv_type type, subq_error *err);
void kv_cache_free(kv_cache *kv);

/* Write n tokens' keys and values (rows [t][n_head_kv*head_dim]) of one layer
 * into slots slot0 .. slot0+n-1. */
void kv_cache_store(kv_cache *kv, int layer, int slot0, int n, const float *k, const float *v);

/* Pointer to the key / value of (layer, kv head, slot) in the cache's type. */
static inline const void *kv_cache_key(const kv_cache *kv, int layer, int h, int slot) {
    return (const char *)kv->k[layer] +
           ((size_t)h * (size_t)kv->n_ctx + (size_t)slot) * (size_t)kv->head_dim * kv->elem_size;
}
static inline const void *kv_cache_value(const kv_cache *kv, int layer, int h, int slot) {
    return (const char *)kv->v[layer] +
           ((size_t)h * (size_t)kv->n_ctx + (size_t)slot) * (size_t)kv->head_dim * kv->elem_size;
}

/* One cached key or value row (head_dim values, from kv_cache_key/value) as floats. */
void kv_cache_row_f32(const kv_cache *kv, const void *row, float *dst);

#endif
