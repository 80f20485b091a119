/* Retrieve-then-attend: for a substituted layer, each query's search vector
 * q_s = W_Qs h picks top-K candidate slots through a selector (over the
 * search keys k_s = W_Ks h of earlier tokens), and attention is the exact
 * softmax of the model's own q, k, v over sinks + recent tail + candidates. */
#ifndef SUBQ_ATTN_SPARSE_H
#define SUBQ_ATTN_SPARSE_H

#include "attn/attn.h"
#include "complete/phi_maps.h"
#include "search/search_rope.h"
#include "select/selector.h"

/* How the queries of a batch of several tokens (a prompt) attend; a
 * one-token step (decode) is the same in every mode: sinks + tail + K
 * retrieved from every earlier slot of its document.
 *   DENSE: full attention; the batch's search keys are indexed after it.
 *   BATCH: query t (slot s = slot0 + t) attends to
 *            - the sinks: the first n_sink slots of its document;
 *            - its local window: every slot of its document from the batch's
 *              first slot up to s, reaching further back so that it holds
 *              at least the n_tail most recent slots (never into the sinks);
 *            - K retrieved by the selector among the slots before the batch
 *              (the index holds the earlier batches; each batch's keys are
 *              indexed after its queries), outside the sinks and the window;
 *          under one exact softmax. Every token costs one index query and a
 *          window of at most batch + tail keys, so a prompt costs ~linear
 *          time; the batch's attention runs as dense blocks (attn_batch).
 *   TOKEN: teacher forcing, token by token: each key is indexed just before
 *          its query, which sees sinks + tail + K retrieved from every
 *          earlier slot, as decode would (eval, perplexity; with a
 *          completion or a per-head selector, BATCH runs this way too).
 *          Selectors whose answer under a mask ignores the keys past it
 *          (exact over full keys, the head-mean oracle, window) give the
 *          same sets when the batch's keys are indexed first and every
 *          query retrieves among slots <= its own: they run so, in one
 *          batched query and one attn_batch, at GEMM speed. */
typedef enum sparse_prefill {
    SPARSE_PREFILL_DENSE = 0,
    SPARSE_PREFILL_BATCH = 1,
    SPARSE_PREFILL_TOKEN = 2,
} sparse_prefill;

typedef struct sparse_params {
    int top_k;          /* K candidates retrieved per query */
    int n_sink;         /* first tokens of the document, always kept (default 4) */
    int n_tail;         /* most recent tokens incl. the query, always kept (default 16);
                           with 0 the query's own key is retrieved like any other */
    sparse_prefill prefill; /* batches of several tokens (default TOKEN) */
    selector_params select;
    /* completion of the unretrieved mid region (complete/completion.h) on the
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
} sparse_metrics;

/* dst += src, field by field (sums over runs). */
void sparse_metrics_add(sparse_metrics *dst, const sparse_metrics *src);

/* Create the stage for one layer. wq_s / wk_s are [d_search][n_embd] row-major
 * (NULL for selectors that need no search space: quest, oracle, window); the
 * caller keeps them alive. rope (NULL: none) rotates the search vectors by
 * the slots' positions (kv_cache pos) as they are projected, so every index,
 * the KV file and session files hold rotated keys. env gives the selector
 * access to the KV cache. */
subq_status attn_sparse_new(const sparse_params *p, const float *wq_s, const float *wk_s, const search_rope *rope,
                            int n_embd, const selector_env *env, attn_stage **out, subq_error *err);

/* The selector and last retrieval record of a sparse stage (NULL if `st` is
 * not a sparse stage). */
selector *attn_sparse_selector(attn_stage *st);
const sparse_record *attn_sparse_record(attn_stage *st);
/* 1 if `st` is a sparse stage with the completion on. */
int attn_sparse_has_completion(const attn_stage *st);

/* Rows per KV head a query that sees n_keys cached tokens attends: sinks +
 * tail + K (at most n_keys) in a sparse stage, all n_keys in any other. */
int attn_sparse_rows_attended(const attn_stage *st, int n_keys);

/* Turn metrics on (allocates the shadow exact selector for approximate
 * selectors: selector_params_approximate). */
subq_status attn_sparse_enable_metrics(attn_stage *st, subq_error *err);
const sparse_metrics *attn_sparse_get_metrics(attn_stage *st);
void attn_sparse_clear_metrics(attn_stage *st);

/* Static-index mode: keys in slots >= freeze_slot are not added to the index
 * and are never retrieved (they are still seen through the tail); -1 = off. */
void attn_sparse_freeze(attn_stage *st, int freeze_slot);

/* What makes a sparse layer's stored search keys (its projections and
 * score), as a hash; 0 for layers without a search space. */
uint64_t attn_sparse_search_made_by(const attn_stage *st);

/* Append search keys (the form a forward computes) of slots slot0 .. as a
 * forward would: to the index and, with a KV file, to its search region
 * (synthetic fills). No-op on other stages. */
subq_status attn_sparse_append(attn_stage *st, const kv_cache *kv, const float *ks, int n, int slot0,
                               subq_error *err);

/* Session files (no-ops on other stages; truncation is the stage's own op):
 * restore: an empty stage takes slots 0 .. n-1, whose native keys are in kv,
 *   with their search keys in stored form (selector_get_keys; NULL for kinds
 *   without a search space), as if they had been decoded;
 * search_width: floats per slot that get_keys writes (0: none);
 * describe: one line naming everything that changes what the layer computes
 *   (kind, K, sinks, tail, prefill mode, selector and its parameters, and
 *   hashes of the projections and completion maps), empty for other stages. */
subq_status attn_sparse_restore(attn_stage *st, const kv_cache *kv, const float *keys, int n, subq_error *err);
int attn_sparse_search_width(const attn_stage *st);
/* 1 when a and b are sparse stages whose search keys are the same function
 * of the hidden state (equal projections of equal width), so that a's
 * stored keys can restore b. */
int attn_sparse_same_search(const attn_stage *a, const attn_stage *b);
subq_status attn_sparse_get_keys(const attn_stage *st, int n, float *dst, subq_error *err);
void attn_sparse_describe(const attn_stage *st, char *buf, size_t cap);

#endif
