#include "sparse/attn_plan.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/layers.h"

/* The selector's defaults (selector_params_default), K 64, sinks 4, tail
 * 16, prompts token by token (eval's teacher forcing; subq_attn_plan_default
 * makes them dense), every completion head, far keys at their own distance. */
void attn_plan_default(attn_plan *p) {
    memset(p, 0, sizeof *p);
    selector_params sel;
    selector_params_default(&sel, SUBQ_SELECT_EXACT, 0);
    p->plan = sel.plan;
    p->plan.top_k = 64;
    p->plan.n_sink = 4;
    p->plan.n_tail = 16;
    p->plan.sparse_prefill = SUBQ_PREFILL_TOKENWISE;
    p->plan.complete_min_entropy = -1.0f;
    p->plan.far_pos = SUBQ_FAR_NONE;
}

subq_status attn_topk_layers_parse(const char *s, int n_layer, int *topk, subq_error *err) {
    for (int l = 0; l < n_layer; l++) topk[l] = -1;
    unsigned char *mask = malloc((size_t)n_layer);
    char item[64];
    subq_status rc = mask ? SUBQ_OK : subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    for (const char *p = s; !rc;) {
        /* one "LAYERS:K" item, K decimal digits */
        size_t n = strcspn(p, ",");
        const char *colon = memchr(p, ':', n);
        char *end = NULL;
        long k = colon && colon[1] >= '0' && colon[1] <= '9' ? strtol(colon + 1, &end, 10) : -1;
        if (!colon || colon == p || (size_t)(colon - p) >= sizeof item || end != p + n || k < 0 || k > (1 << 24)) {
            rc = subq_fail(err, SUBQ_ERR_ARG, "bad per-layer top-K list '%s': expected e.g. '0:2048,1:1024' or "
                           "'0-1:2048,-1:512'", s);
            break;
        }
        memcpy(item, p, (size_t)(colon - p));
        item[colon - p] = '\0';
        if ((rc = layers_parse(item, n_layer, mask, err))) break;
        for (int l = 0; l < n_layer; l++)
            if (mask[l]) topk[l] = (int)k;
        if (!p[n]) break;
        p += n + 1;
    }
    free(mask);
    return rc;
}

void context_clear_plan(subq_context *c) {
    for (int l = 0; l < c->model->hp.n_layer; l++) {
        if (c->stages[l]->free) c->stages[l]->free(c->stages[l]);
        c->stages[l] = attn_full_stage();
    }
    context_lay_out(c);
}

/* The far scheme's distances for this model: from (0: the trained
 * context less the tail) and limit (the trained context - 1), checked; a
 * plan with a far scheme needs a sparse layer. */
static subq_status far_resolve(const model_hparams *hp, const attn_plan *plan, const unsigned char *mask,
                               const int *topk, attn_far *far, subq_error *err) {
    int any = 0;
    for (int l = 0; l < hp->n_layer; l++) any |= mask[l] || topk[l] >= 0;
    if (!any)
        return subq_fail(err, SUBQ_ERR_ARG, "far keys at trained distances (--far-pos %s) need a sparse layer, and "
                         "the plan has none", attn_far_name(far->scheme));
    const int n_tail = plan->plan.n_tail;
    far->limit = hp->n_ctx_train - 1;
    if (far->from <= 0) far->from = hp->n_ctx_train - n_tail;
    if (far->from > far->limit)
        return subq_fail(err, SUBQ_ERR_ARG, "--far-from %d lies beyond the model's trained context (%d tokens: "
                         "distances up to %d)", far->from, hp->n_ctx_train, far->limit);
    if (far->from < 1 || n_tail > far->from + 1)
        return subq_fail(err, SUBQ_ERR_ARG, "far keys from distance %d: the tail (%d keys) must lie within it%s",
                         far->from, n_tail, plan->plan.far_from <= 0 ? " (give --far-from)" : "");
    if (far->scheme == SUBQ_FAR_GROUP && far->from >= far->limit)
        return subq_fail(err, SUBQ_ERR_ARG, "--far-pos group divides the distances past --far-from %d into the "
                         "trained ones, up to %d: give a smaller --far-from", far->from, far->limit);
    return SUBQ_OK;
}

/* Layer l's stage: a sparse one of sp (projections from proj, or NULL). */
static subq_status set_stage(subq_context *c, int l, const sparse_params *sp, const search_proj *proj,
                             subq_error *err) {
    const model_hparams *hp = &c->model->hp;
    sparse_params p = *sp;
    p.select.n_threads = c->n_threads;
    const rope_hparams *R = layer_rope(hp, l);
    const double *freq = hp->layer[l].rope == LAYER_ROPE_LOCAL ? hp->rope_local.freq : c->rope_freq;
    selector_env env = {.kv = &c->kv, .layer = l, .n_head = hp->n_head, .n_head_kv = hp->n_head_kv,
                        .head_dim = hp->head_dim, .pool = c->pool,
                        .rope = {.n_rot = R ? R->n_rot : 0, .neox = R ? R->neox : 0, .freq = freq,
                                 .turns = R ? rope_turns_of(R, freq) : NULL}};
    attn_stage *st;
    subq_status s = attn_sparse_new(&p, proj ? proj->wq[l] : NULL, proj ? proj->wk[l] : NULL,
                                    proj ? &proj->rope : NULL, hp->n_embd, &env, &st, err);
    if (s) return s;
    if (c->stages[l]->free) c->stages[l]->free(c->stages[l]);
    c->stages[l] = st;
    return SUBQ_OK;
}

subq_status context_set_plan(subq_context *c, const attn_plan *plan, const search_proj *proj, subq_error *err) {
    const model_hparams *hp = &c->model->hp;
    subq_selector_kind kind = plan->plan.selector;
    int needs_search = selector_kind_needs_search(kind);
    if (needs_search && !proj)
        return subq_fail(err, SUBQ_ERR_ARG, "selector '%s' needs search projections",
                         selector_kind_name(kind));
    if (proj && proj->n_embd != hp->n_embd)
        return subq_fail(err, SUBQ_ERR_MISMATCH, "search projections are for d_model %d, this model has %d",
                         proj->n_embd, hp->n_embd);
    if (c->kv.n_used != 0)
        return subq_fail(err, SUBQ_ERR_ARG, "attention plans are set on an empty context (reset it first)");
    unsigned char *mask = calloc((size_t)hp->n_layer, 1);
    int *topk = malloc((size_t)hp->n_layer * sizeof(int));
    if (!mask || !topk) {
        free(mask);
        free(topk);
        return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    }
    subq_status s = SUBQ_OK;
    if (plan->plan.layers) {
        s = model_layers_parse(hp, plan->plan.layers, mask, err);
    } else { /* the layers with projections, sliding ones left to their window */
        for (int l = 0; l < hp->n_layer; l++) mask[l] = (needs_search ? proj->wq[l] != NULL : 1) && !hp->layer[l].window;
    }
    if (!s && plan->plan.topk_layers) s = attn_topk_layers_parse(plan->plan.topk_layers, hp->n_layer, topk, err);
    else
        for (int l = 0; l < hp->n_layer; l++) topk[l] = -1;
    attn_far far = {.scheme = plan->plan.far_pos, .from = plan->plan.far_from};
    if (!s && far.scheme != SUBQ_FAR_NONE) s = far_resolve(hp, plan, mask, topk, &far, err);
    /* each layer's stage: the plan as given, its layer lists consumed here */
    sparse_params base = {.select = {.plan = plan->plan}, .complete = plan->complete,
                          .complete_heads = plan->complete_heads, .far = far};
    base.select.plan.layers = base.select.plan.topk_layers = NULL;
    for (int l = 0; l < hp->n_layer && !s; l++) {
        if (!mask[l] && topk[l] < 0) {
            if (far.scheme != SUBQ_FAR_NONE && !hp->layer[l].window && layer_rope(hp, l)) {
                /* a dense layer under a far scheme: sinks + the keys within far.from once
                 * there are farther ones, the sinks at the distance the scheme gives */
                sparse_params sp = base;
                sp.select.plan.selector = SUBQ_SELECT_WINDOW;
                sp.select.plan.top_k = 0;
                sp.select.plan.n_tail = far.from + 1;
                sp.complete = NULL;
                sp.dense_near = 1;
                s = set_stage(c, l, &sp, NULL, err);
            }
            continue;
        }
        if (hp->layer[l].window) {
            s = subq_fail(err, SUBQ_ERR_ARG, "layer %d attends to a sliding window of %d keys; a per-layer top-K "
                          "applies to the global layers", l, hp->layer[l].window);
            break;
        }
        sparse_params sp = base;
        if (topk[l] >= 0) { /* a large-K exact selection */
            sp.select.plan.top_k = topk[l];
            sp.select.plan.selector = SUBQ_SELECT_EXACT;
        }
        const int search = selector_kind_needs_search(sp.select.plan.selector);
        if (search && (!proj || !proj->wq[l])) {
            s = subq_fail(err, SUBQ_ERR_ARG, "layer %d is planned sparse%s but the search projections have none "
                          "for it", l, topk[l] >= 0 ? " (a per-layer top-K)" : "");
            break;
        }
        if (search) {
            sp.select.d_search = proj->d_search;
            sp.select.search_heads = proj->n_khead;
            sp.select.search_qheads = proj->n_qhead;
        }
        /* far keys are scored without the search's rotated dims (their distances are past its
         * training), and by the oracle as attended at far.from */
        if (search && far.scheme != SUBQ_FAR_NONE) sp.select.far_rot = proj->rope.n_rot;
        if (far.scheme != SUBQ_FAR_NONE) sp.select.far_from = far.from;
        s = set_stage(c, l, &sp, search ? proj : NULL, err);
    }
    free(mask);
    free(topk);
    if (s) context_clear_plan(c); /* which lays the cache out again too */
    else context_lay_out(c);
    return s;
}
