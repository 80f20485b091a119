/* An attention stage that retrieves top-K slots with a selector that needs
 * no search projections (oracle, quest, window) and attends exactly over
 * sinks + tail + candidates, optionally adding the completion of the
 * unretrieved mid region (phi_cache.h). For evaluation (teacher-forced
 * perplexity and decode) of the completion on its own, beside the sparse
 * stage in src/attn: the slot sets are the same (sinks = first n_sink slots
 * of the document, tail = the n_tail most recent slots up to the query,
 * candidates from the rest), and the mid region of the completion is exactly
 * "the rest": slot t - n_tail enters the cache when query t arrives, so the
 * cache grows as tokens leave the tail window. */
#ifndef SUBQ_PHI_STAGE_H
#define SUBQ_PHI_STAGE_H

#include "attn/attn.h"
#include "model/context.h"
#include "phi/phi_maps.h"
#include "select/selector.h"

typedef struct phi_stage_params {
    int top_k, n_sink, n_tail;   /* K, 4, 16 */
    int complete;                /* 0: selection only (the baseline), 1: hybrid */
    double eps;                  /* clamp of the subtraction (PHI_EPS_DEFAULT) */
    selector_params select;      /* oracle, quest or window */
} phi_stage_params;

typedef struct phi_stage_stats {
    double share_sum;            /* sum of Z_hat / (Z_E + Z_hat) over (query, head) */
    int64_t n_heads;             /* (query, head) pairs with a non-empty mid region */
    int64_t n_queries;
} phi_stage_stats;

/* Stage for one layer (maps must have that layer when complete; the maps
 * outlive the stage). n_ctx: slots the stage may see (the KV capacity). */
subq_status phi_stage_new(const phi_stage_params *p, const phi_maps *maps, const selector_env *env, int n_ctx,
                          attn_stage **out, subq_error *err);
/* Statistics of a phi stage (NULL for another stage); clear resets them. */
const phi_stage_stats *phi_stage_get_stats(attn_stage *st);
void phi_stage_clear_stats(attn_stage *st);

/* Put a phi stage on every layer that has maps (selection-only when
 * !p->complete), replacing (and freeing) the stages there; the maps must
 * outlive the context or the next clear. */
subq_status phi_context_set_stages(subq_context *c, const phi_maps *maps, const phi_stage_params *p, subq_error *err);
/* Back to full attention on every layer. */
void phi_context_clear_stages(subq_context *c);

#endif
