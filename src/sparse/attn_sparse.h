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

/* How the queries of a batch of several tokens (a prompt) attend
 * (subq_prefill_mode, SUBQ_PREFILL_*); a one-token step (decode) is the
 * same in every mode: sinks + tail + K retrieved from every earlier slot
 * of its document.
 *   DENSE: full attention; the batch's search keys are indexed after it.
 *   SPARSE: query t (slot s = slot0 + t) attends to
 *            - the sinks: the first n_sink slots of its document;
 *            - its local window: every slot of its document from the batch's
 *              first slot up to s, reaching further back so that it holds
 *              at least the n_tail most recent slots (never into the sinks);
 *            - K retrieved by the selector among the slots before the batch
 *              (the index holds the earlier batches; each batch's keys are
 *              indexed after its queries), outside the sinks and the window;
 *          under one exact softmax (per-head selectors: each query head
 *          its own K). Every token costs one index query and a
 *          window of at most batch + tail keys, so a prompt costs ~linear
 *          time; the batch's attention runs as dense blocks (attn_batch).
 *   TOKENWISE: teacher forcing, token by token: each key is indexed just before
 *          its query, which sees sinks + tail + K retrieved from every
 *          earlier slot, as decode would (eval, perplexity; with a
 *          completion, or a per-head selector under eval's metrics, SPARSE
 *          runs this way too).
 *          Selectors whose answer under a mask ignores the keys past it
 *          (exact over full keys, the head-mean oracle, window) give the
 *          same sets when the batch's keys are indexed first and every
 *          query retrieves among slots <= its own: they run so, in one
 *          batched query and one attn_batch, at GEMM speed. */

/* One layer's sparse stage: select.plan is the public plan as given
 * (top_k, n_sink, n_tail, sparse_prefill: the modes above, the selector's
 * settings; a topk_layers layer: exact, its K), what the layer adds beside
 * it. */
typedef struct sparse_params {
    selector_params select;
    /* completion of the unretrieved mid region (complete/completion.h) on the
     * layers these maps cover; NULL: selection only */
    const phi_maps *complete;
    const unsigned char *complete_heads; /* [n_layer][n_head] flags; NULL: every head */
    /* the plan's far_pos and far_from resolved for the model: keys farther
     * than far.from attended at the distance far.scheme gives them
     * (attn_far.h; scheme none: at their own). The local window is never
     * far: a prompt batch's window stops at far.from. */
    attn_far far;
    /* a layer the plan keeps dense, under a far scheme: full attention
     * while every key of the batch lies within far.from, else sinks + the
     * tail (n_tail = far.from + 1 with the window selector) */
    int dense_near;
} sparse_params;

/* Per-layer retrieval record of the last forward call (for evaluation):
 * for each of the n tokens, up to top_k candidate slots (-1 = filler). */
typedef struct sparse_record {
    int n_tokens, top_k;
    int32_t *cand;      /* [n_tokens][top_k] */
} sparse_record;

/* Create the stage for one layer. wq_s / wk_s are [d_search][n_embd] row-major
 * (NULL for selectors that need no search space: quest, oracle, window); the
 * caller keeps them alive. rope (NULL: none) rotates the search vectors by
 * the slots' positions (kv_cache pos) as they are projected, so every index,
 * the KV file and session files hold rotated keys. env gives the selector
 * access to the KV cache. */
subq_status attn_sparse_new(const sparse_params *p, const float *wq_s, const float *wk_s, const search_rope *rope,
                            int n_embd, const selector_env *env, attn_stage **out, subq_error *err);

/* The selector and last retrieval record of a sparse stage (NULL if `st` is
 * not a sparse stage): for the attention's own modules and tests. Everything
 * else reaches a stage through the calls of attn.h (describe, search keys,
 * append, restore, stats, metrics). */
selector *attn_sparse_selector(attn_stage *st);
const sparse_record *attn_sparse_record(attn_stage *st);

#endif
