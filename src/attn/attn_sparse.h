/* Retrieve-then-attend: for a substituted layer, each query's search vector
 * q_s = W_Qs h picks top-K candidate slots through a selector (over the
 * search keys k_s = W_Ks h of earlier tokens), and attention is the exact
 * softmax of the model's own q, k, v over sinks + recent tail + candidates. */
#ifndef SUBQ_ATTN_SPARSE_H
#define SUBQ_ATTN_SPARSE_H

#include "attn/attn.h"
#include "phi/phi_maps.h"
#include "select/selector.h"

typedef struct sparse_params {
    int top_k;          /* K candidates retrieved per query */
    int n_sink;         /* first tokens of the document, always kept (default 4) */
    int n_tail;         /* most recent tokens incl. the query, always kept (default 16) */
    int dense_prefill;  /* batches of more than one token use full attention
                           (their search keys are still appended) */
    selector_params select;
    /* completion of the unretrieved mid region (attn_complete.h) on the
     * layers these maps cover; NULL: selection only */
    const phi_maps *complete;
    const unsigned char *complete_heads; /* [n_layer][n_head] flags; NULL: every head */
} sparse_params;

/* Per-layer retrieval record of the last forward call (for evaluation):
 * for each of the n tokens, up to top_k candidate slots (-1 = filler). */
typedef struct sparse_record {
    int n_tokens, top_k;
    int32_t *cand;      /* [n_tokens][top_k] */
} sparse_record;

/* Retrieval quality measured inside the sparse run (enabled for evaluation):
 *   mass   = head-mean share of the full softmax (over every eligible key)
 *            that falls on the attended slots (sinks + tail + candidates);
 *   recall = |candidates ∩ top-K keys of the head-mean full softmax among
 *            the retrieval-eligible keys| / min(K, #retrieval-eligible);
 *   ann    = |candidates ∩ exact top-K in the search space| / |exact| for
 *            hnsw/faiss (a shadow exact selector sees the same keys). */
typedef struct sparse_metrics {
    double mass_sum, recall_sum, ann_recall_sum;
    int64_t n_queries, n_ann;
    int64_t n_requested, n_filler;
    /* completion (always measured when it is on): sum of the mass share
     * Z_hat / (Z_E + Z_hat) over (query, head) pairs with a mid region */
    double share_sum;
    int64_t n_share;
} sparse_metrics;

/* Create the stage for one layer. wq_s / wk_s are [d_search][n_embd] row-major
 * (NULL for selectors that need no search space: quest, oracle, window); the
 * caller keeps them alive. env gives the selector access to the KV cache. */
subq_status attn_sparse_new(const sparse_params *p, const float *wq_s, const float *wk_s, int n_embd,
                            const selector_env *env, attn_stage **out, subq_error *err);

/* The selector and last retrieval record of a sparse stage (NULL if `st` is
 * not a sparse stage). */
selector *attn_sparse_selector(attn_stage *st);
const sparse_record *attn_sparse_record(attn_stage *st);
/* 1 if `st` is a sparse stage with the completion on. */
int attn_sparse_has_completion(const attn_stage *st);

/* Turn metrics on (allocates the shadow exact selector for ANN kinds). */
subq_status attn_sparse_enable_metrics(attn_stage *st, subq_error *err);
const sparse_metrics *attn_sparse_get_metrics(attn_stage *st);
void attn_sparse_clear_metrics(attn_stage *st);

/* Static-index mode: keys in slots >= freeze_slot are not added to the index
 * and are never retrieved (they are still seen through the tail); -1 = off. */
void attn_sparse_freeze(attn_stage *st, int freeze_slot);

/* Prompt caches and session files (no-ops on other stages):
 * truncate: forget slots n_keep.. (the index is truncated, the completion's
 *   summary rebuilt from the kept slots of kv: O(n_keep) feature maps);
 * restore: an empty stage takes slots 0 .. n-1, whose native keys are in kv,
 *   with their search keys in stored form (selector_get_keys; NULL for kinds
 *   without a search space), as if they had been decoded;
 * search_width: floats per slot that get_keys writes (0: none);
 * describe: one line naming everything that changes what the layer computes
 *   (kind, K, sinks, tail, prefill mode, selector and its parameters, and
 *   hashes of the projections and completion maps), empty for other stages. */
subq_status attn_sparse_truncate(attn_stage *st, const kv_cache *kv, int n_keep, subq_error *err);
subq_status attn_sparse_restore(attn_stage *st, const kv_cache *kv, const float *keys, int n, subq_error *err);
int attn_sparse_search_width(const attn_stage *st);
subq_status attn_sparse_get_keys(const attn_stage *st, int n, float *dst, subq_error *err);
void attn_sparse_describe(const attn_stage *st, char *buf, size_t cap);

#endif
