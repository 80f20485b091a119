/* Attention plan: which layers run sparse retrieve-then-attend and how
 * (K, sinks, tail, selector and its parameters); applied to a context. */
#ifndef SUBQ_ATTN_PLAN_H
#define SUBQ_ATTN_PLAN_H

#include "sparse/attn_sparse.h"
#include "model/context.h"
#include "search/search_proj.h"

typedef struct attn_plan {
    /* the public plan as given: layer lists (layers NULL: the layers that
     * have search projections, or all layers for selectors without a
     * search space; topk_layers: "L:K,..." layers, or ranges as in layer
     * lists, whose attention retrieves K keys by exact selection whatever
     * the selector kind, sparse whether or not `layers` lists them), the
     * selector and its settings, K, sinks, tail, far keys */
    subq_attn_plan plan;
    /* completion maps and their head flags, as in sparse_params */
    const phi_maps *complete;
    const unsigned char *complete_heads;
} attn_plan;

void attn_plan_default(attn_plan *p);

/* topk[l] = the K topk_layers gives layer l, -1 for layers it does not
 * name; SUBQ_ERR_ARG naming the list when it is malformed. */
subq_status attn_topk_layers_parse(const char *s, int n_layer, int *topk, subq_error *err);

/* Replace the attention stage of every planned layer of c by a sparse stage
 * (proj may be NULL for quest/oracle/window). The projections must outlive c.
 * A planned layer without projections when the selector needs them is an
 * error naming the layer. */
subq_status context_set_plan(subq_context *c, const attn_plan *plan, const search_proj *proj, subq_error *err);

/* Back to full attention on every layer. */
void context_clear_plan(subq_context *c);

#endif
