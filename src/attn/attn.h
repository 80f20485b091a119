/* The attention seam: each layer's attention step is one attn_stage.
 * The forward pass computes post-RoPE q and writes k/v into the cache, then
 * calls stage->forward; full attention is the default stage and sparse
 * retrieve-then-attend stages plug in here without the forward knowing. */
#ifndef SUBQ_ATTN_H
#define SUBQ_ATTN_H

#include "base/pool.h"
#include "kv/kv_cache.h"
#include "subq.h"

/* One layer's attention over a batch of new tokens. Query t sits in cache
 * slot slot0 + t and may attend to slots j <= slot0 + t with seg[j] == its seg. */
typedef struct attn_step {
    int layer;
    int n_tokens;
    int slot0;
    int n_head, n_head_kv, head_dim;
    float scale;                 /* of q . k (the layer's layer_attn.scale) */
    float softcap;               /* s <- softcap tanh(s / softcap) before the softmax; 0: none */
    int window;                  /* keys at slots > slot - window only (sliding layers); 0: all */
    const float *q;              /* [n_tokens][n_head*head_dim], post-RoPE */
    const float *h_norm;         /* [n_tokens][n_embd]: normed hidden state entering attention */
    int n_embd;
    float *out;                  /* [n_tokens][n_head*head_dim] */
    int n_threads;
    pool *pool;                  /* n_threads threads (decode paths), or NULL */
} attn_step;

typedef struct attn_stage attn_stage;
struct attn_stage {
    const char *name;
    subq_status (*forward)(attn_stage *self, const attn_step *step, const kv_cache *kv,
                           subq_error *err);
    void (*reset)(attn_stage *self);   /* new sequence (may be NULL) */
    void (*free)(attn_stage *self);    /* may be NULL for static stages */
    /* keep only cache slots 0 .. n_keep-1 of the current sequence (may be
     * NULL: a stage that holds nothing per slot) */
    subq_status (*truncate)(attn_stage *self, const kv_cache *kv, int n_keep, subq_error *err);
};

/* Exact softmax attention over every eligible cached key (a stateless
 * singleton: never freed). */
attn_stage *attn_full_stage(void);

/* Attention of a batch (prefill) through sgemm, in blocks of queries per KV
 * head: query t (cache slot slot0 + t) attends to the contiguous slots
 * [lo[t], slot0 + t] (lo NULL: from the first slot of its document;
 * segments are contiguous runs of slots) and, when n_extra > 0, to the slots
 * extra[t * n_extra + x] that are >= 0 (each below lo[t], none twice), under
 * one softmax. Full attention is lo = NULL, n_extra = 0; sparse prefill
 * gives its local window and its sinks + retrieved slots. Scratch is bounded
 * by the keys in [min lo, slot0 + n_tokens), never tokens x tokens. */
subq_status attn_batch(const attn_step *st, const kv_cache *kv, const int32_t *lo, const int32_t *extra, int n_extra,
                       subq_error *err);

/* Attention over an explicit list of cache slots for g query heads of KV
 * head kv_head (q and out: g adjacent heads of hd values; scores: g * n
 * floats of scratch; g = 1 for one head with its own slots):
 *   out_i = sum_j softmax_j(scale * q_i.k_j) v_j,
 * each key and value row loaded once for the g heads (s soft-capped at
 * cap when cap > 0). The rows of a
 * retrieved set lie anywhere in the cache, so a usual set is asked for
 * whole before its first row is used (a window of rows for larger sets):
 * the misses overlap instead of each waiting for DRAM in turn. Rows are
 * then copied side by side in blocks and scored and summed by the dense
 * decode kernels (q8_0 / q4_0 keys: the quantised query, as dense decode). */
void attn_group_over_slots(const kv_cache *kv, int layer, int kv_head, int g, const float *q, float scale, float cap,
                           const int *slots, int n, float *scores, float *out);

#endif
