/* Completion of the unretrieved mass for one sparse layer (Hoshi, Miyashita,
 * Deguchi 2026): the mid region of each query's document, everything but
 * the sinks and the recent tail, is summarised per KV head by a fixed-size
 * phi cache (complete/phi_cache.h); a query attends exactly over sinks +
 * tail + retrieved candidates and adds the completion's estimate of the
 * rest, merged before one normalisation.
 *
 * The mid region of query slot t is [doc0 + n_sink, t - n_tail], which is
 * exactly the set the selector retrieves from, so every candidate is in the
 * cache and its contribution can be subtracted. Slot t - n_tail enters the
 * cache when slot t is appended: in teacher-forced evaluation every position
 * sees its own prefix summarised, and in decode the summary grows as tokens
 * leave the tail window (the paper keeps generated tokens exact; here they
 * join the summary once they are n_tail old, so the exact set stays bounded).
 * log phi_k of every slot is kept (d_phi floats per KV head and slot) so the
 * retrieved tokens can be subtracted without re-running the feature map. */
#ifndef SUBQ_COMPLETE_COMPLETION_H
#define SUBQ_COMPLETE_COMPLETION_H

#include "complete/phi_maps.h"
#include "kv/kv_cache.h"

typedef struct attn_completion attn_completion;

/* heads: [n_head] flags, 1 = complete this query head (NULL: every head);
 * the maps must have `layer` and the model's head shape. */
subq_status completion_new(const phi_maps *maps, int layer, int n_sink, int n_tail, int top_k,
                           const unsigned char *heads, attn_completion **out, subq_error *err);
void completion_free(attn_completion *c);
void completion_reset(attn_completion *c);
/* Identity of what the completion computes with: its layer's maps and the
 * completed heads (FNV-1a; for session files). */
uint64_t completion_hash(const attn_completion *c);

/* Slot `slot` (its key and value already in kv) was appended: compute its
 * log phi_k, restart the summary when it begins a document, and add the
 * slot that left the tail window. Slots must come in order. */
subq_status completion_advance(attn_completion *c, const kv_cache *kv, int slot, subq_error *err);

/* Hybrid attention of one query q [n_head][head_dim] at `slot` over the
 * exact slots (sinks, then the n_cand retrieved candidates at
 * slots[cand_off ..], then the tail) plus the completion; out [n_head][head_dim].
 * Adds the completion's mass share Z_hat / (Z_E + Z_hat) of each completed
 * head to *share_sum and counts it in *n_share when the mid region is not
 * empty. */
void completion_attend(attn_completion *c, const kv_cache *kv, int slot, const float *q, float scale,
                       const int *slots, int n_slots, int cand_off, int n_cand, float *out, double *share_sum,
                       int64_t *n_share);
/* The same for query head h alone, over its own exact slots (selectors that
 * pick per head); writes out + h*head_dim. */
void completion_attend_head(attn_completion *c, const kv_cache *kv, int slot, const float *q, float scale, int h,
                            const int *slots, int n_slots, int cand_off, int n_cand, float *out, double *share_sum,
                            int64_t *n_share);

#endif
