/* The attention seam: each layer's attention step is one attn_stage.
 * The forward pass computes post-RoPE q and writes k/v into the cache, then
 * calls stage->forward; full attention is the default stage and sparse
 * retrieve-then-attend stages plug in here without the forward knowing. */
#ifndef SUBQ_ATTN_H
#define SUBQ_ATTN_H

#include <stddef.h>
#include <stdint.h>

#include "attn/attn_far.h"
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
    const attn_rope *rope;       /* the layer's RoPE as a rotation (NULL: the layer has none) */
    attn_far far;                /* where attn_batch attends its extra slots beyond far.from
                                    (a sparse stage sets it; the forward pass leaves none) */
} attn_step;

typedef struct attn_stage attn_stage;
typedef struct attn_stage_state attn_stage_state;
struct attn_stage {
    const char *name;
    subq_status (*forward)(attn_stage *self, const attn_step *step, const kv_cache *kv,
                           subq_error *err);
    void (*reset)(attn_stage *self);   /* new sequence (may be NULL) */
    void (*free)(attn_stage *self);    /* may be NULL for static stages */
    /* keep only cache slots 0 .. n_keep-1 of the current sequence (may be
     * NULL: a stage that holds nothing per slot) */
    subq_status (*truncate)(attn_stage *self, const kv_cache *kv, int n_keep, subq_error *err);
    const attn_stage_state *state;     /* what it keeps beyond the KV cache (NULL: nothing) */
};

/* Retrieval quality measured inside the sparse run (enabled for evaluation),
 * from p_h, each head's full softmax over the query's document prefix:
 *   mass   = share of p = mean_h p_h on the attended slots (sinks + tail +
 *            candidates);
 *   recall = |candidates ∩ top-K keys of p among the retrieval-eligible
 *            keys| / min(K, #retrieval-eligible);
 *   ann    = |candidates ∩ exact top-K in the search space| / |exact| for
 *            hnsw/faiss and the exact selector's f16 and compressed scans
 *            (a shadow f32 exact selector sees the same keys).
 * The seed's definitions (ann-sparseattention's eval.py), over the n_seed
 * queries with at least K retrieval-eligible keys only:
 *   mass_seed   = mean over heads of the per-head mass p_h on the K
 *                 candidates (sinks and tail not counted);
 *   recall_seed = |candidates ∩ top-K keys of max_h p_h among the eligible
 *                 keys| / K.
 * Every query is counted: a query the stage cannot measure fails the
 * forward call (SUBQ_ERR_NOMEM) rather than being left out of the means. */
typedef struct sparse_metrics {
    double mass_sum, recall_sum, ann_recall_sum;
    int64_t n_queries, n_ann;
    int64_t n_requested, n_filler;
    double mass_seed_sum, recall_seed_sum;
    int64_t n_seed;
    /* completion (always measured when it is on): sum of the mass share
     * Z_hat / (Z_E + Z_hat) over (query, head) pairs with a mid region */
    double share_sum;
    int64_t n_share;
    /* KV rows a query reads per KV head: sinks + tail + the union of the
     * candidate sets of that KV head's query heads (one shared set: its
     * candidates), summed over (query, KV head) pairs */
    double rows_sum;
    int64_t n_rows;
} sparse_metrics;

/* dst += src, field by field (sums over runs). */
void sparse_metrics_add(sparse_metrics *dst, const sparse_metrics *src);


/* Where a stage's selection time and memory went (0 for a stage without an index). */
typedef struct attn_stage_stats {
    double t_select_s, t_append_s;     /* querying its index, adding keys to it */
    uint64_t index_bytes;              /* the index's memory */
    uint64_t select_bytes_read;        /* bytes its queries read (scans: the keys) */
    int64_t check_keys, check_found;   /* the block scan's recall check (selector_stats) */
    int64_t linked_saved;              /* keys its index linked from a saved one (selector_stats) */
} attn_stage_stats;

/* A stage that keeps state per slot beyond the KV cache (a sparse stage's
 * index of search keys, its completion summary, its measurements) gives
 * these; a stage without (full attention) gives none. Code outside attn/
 * calls the attn_stage_* functions below, which answer for a stage without
 * state, so it never knows which stage it holds. */
struct attn_stage_state {
    /* one line naming everything that changes what the layer computes
     * (session files compare plans by it) */
    void (*describe)(const attn_stage *st, char *buf, size_t cap);
    /* floats per slot of its stored search keys (get_keys), and a hash of
     * what makes them (projections, rotation, score): 0 for none */
    int (*search_width)(const attn_stage *st);
    uint64_t (*search_made_by)(const attn_stage *st);
    /* whether b's stored keys are a's (the same function of the hidden state) */
    int (*same_search)(const attn_stage *a, const attn_stage *b);
    subq_status (*get_keys)(const attn_stage *st, int n, float *dst, subq_error *err);
    /* its selector's index as bytes (selector_get_index: hnsw's graph), or NULL */
    subq_status (*get_index)(const attn_stage *st, void **index, size_t *bytes, subq_error *err);
    /* an empty stage takes slots 0 .. n-1 (native keys in kv, search keys
     * in stored form or NULL) as if it had decoded them; index: what
     * get_index gave over the first of them (NULL: none), checked whole */
    subq_status (*restore)(attn_stage *st, const kv_cache *kv, const float *keys, int n, const void *index,
                           size_t index_bytes, subq_error *err);
    /* search keys (the form a forward computes) of slots slot0 .. slot0+n-1,
     * added as a forward would (synthetic fills) */
    subq_status (*append)(attn_stage *st, const kv_cache *kv, const float *ks, int n, int slot0, subq_error *err);
    /* rows per KV head a query seeing n_keys cached tokens attends */
    int (*rows_attended)(const attn_stage *st, int n_keys);
    /* 1 when a query retrieves rows, which it reads one by one besides
     * its runs of sinks and tail: the layer's rows are laid out slot-major
     * (kv_cache.h); a window of recent keys alone reads head-major runs */
    int (*reads_scattered)(const attn_stage *st);
    int (*has_completion)(const attn_stage *st);
    void (*stats)(const attn_stage *st, attn_stage_stats *out);
    /* measurements (eval): turned on, read, static-index mode (keys in
     * slots >= freeze_slot never retrieved; -1 = off) */
    subq_status (*enable_metrics)(attn_stage *st, subq_error *err);
    const sparse_metrics *(*metrics)(const attn_stage *st);
    void (*freeze)(attn_stage *st, int freeze_slot);
    /* a forward's search keys that the stage leaves out of its index
     * until every layer has attended (attn_sparse.c: graph inserts), and
     * adding them: the forward calls index_late before it returns, for all
     * layers at once across its threads (stages are independent) */
    int (*has_late_key)(const attn_stage *st);
    subq_status (*index_late)(attn_stage *st, subq_error *err);
};

void attn_stage_describe(const attn_stage *st, char *buf, size_t cap);   /* "" without state */
int attn_stage_search_width(const attn_stage *st);                         /* 0 */
uint64_t attn_stage_search_made_by(const attn_stage *st);                  /* 0 */
int attn_stage_same_search(const attn_stage *a, const attn_stage *b);      /* 0 */
subq_status attn_stage_get_keys(const attn_stage *st, int n, float *dst, subq_error *err);            /* no-op */
subq_status attn_stage_get_index(const attn_stage *st, void **index, size_t *bytes, subq_error *err); /* NULL */
subq_status attn_stage_restore(attn_stage *st, const kv_cache *kv, const float *keys, int n, const void *index,
                               size_t index_bytes, subq_error *err);                         /* no-op */
subq_status attn_stage_append(attn_stage *st, const kv_cache *kv, const float *ks, int n, int slot0,
                              subq_error *err);                            /* no-op */
int attn_stage_rows_attended(const attn_stage *st, int n_keys);            /* n_keys */
int attn_stage_reads_scattered(const attn_stage *st);                      /* 0 */
int attn_stage_has_completion(const attn_stage *st);                       /* 0 */
void attn_stage_get_stats(const attn_stage *st, attn_stage_stats *out);    /* zeros */
subq_status attn_stage_enable_metrics(attn_stage *st, subq_error *err);   /* no-op */
const sparse_metrics *attn_stage_metrics(const attn_stage *st);            /* NULL */
void attn_stage_freeze(attn_stage *st, int freeze_slot);                   /* no-op */
int attn_stage_has_late_key(const attn_stage *st);                         /* 0 */
subq_status attn_stage_index_late(attn_stage *st, subq_error *err);        /* no-op */

/* Exact softmax attention over every eligible cached key (a stateless
 * singleton: never freed). */
attn_stage *attn_full_stage(void);

/* Attention of a batch (prefill) through sgemm, in blocks of queries per KV
 * head: query t (cache slot slot0 + t) attends to the contiguous slots
 * [lo[t], slot0 + t] (lo NULL: from the first slot of its document;
 * segments are contiguous runs of slots) and, when n_extra > 0, to the slots
 * extra[t * n_extra + x] that are >= 0 (each below lo[t], none twice), under
 * one softmax; with extra_heads n_head each query head h has its own list,
 * extra[(t * n_head + h) * n_extra + x] (per-head sets), with extra_heads
 * n_head_kv each KV head one for its query heads (a group's set). Full
 * attention is lo = NULL, n_extra = 0; sparse prefill gives its local
 * window and its sinks + retrieved slots. Extra slots farther than
 * st->far.from are attended at the distance st->far gives them
 * (attn_far.h; the range is the caller's to keep within it). The range goes
 * through sgemm; the extra slots, scattered rows, are scored and summed as
 * a decode step's are (kernels_kv_decode: on q8_0 / q4_0 keys with the
 * query quantised per block, kernels.h). Scratch is bounded by the keys in
 * [min lo, slot0 + n_tokens), never tokens x tokens. */
subq_status attn_batch(const attn_step *st, const kv_cache *kv, const int32_t *lo, const int32_t *extra, int n_extra,
                       int extra_heads, subq_error *err);

/* Attention over an explicit list of cache slots for g query heads of KV
 * head kv_head (q and out: g adjacent heads of hd values; scores: g * n
 * floats of scratch; g = 1 for one head with its own slots):
 *   out_i = sum_j softmax_j(scale * q_i.R(shift_j) k_j) v_j,
 * shift NULL (all 0) or each slot's turn by the layer's RoPE `rope`
 * (attn_far.h: a far key attended nearer),
 * each key and value row loaded once for the g heads (s soft-capped at
 * cap when cap > 0). The rows of a
 * retrieved set lie anywhere in the cache, so a usual set is asked for
 * whole before its first row is used (a window of rows for larger sets):
 * the misses overlap instead of each waiting for DRAM in turn. Rows are
 * then copied side by side in blocks and scored and summed by the dense
 * decode kernels (q8_0 / q4_0 keys: the quantised query, as dense decode). */
void attn_group_over_slots(const kv_cache *kv, int layer, int kv_head, int g, const float *q, float scale, float cap,
                           const int *slots, int n, const attn_rope *rope, const int32_t *shift, float *scores,
                           float *out);

#endif
