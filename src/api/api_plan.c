/* Public attention plans: selector names, search projections and completion
 * maps as opaque handles, and setting a plan on a context. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "sparse/attn_plan.h"
#include "base/error.h"
#include "base/layers.h"
#include "model/context.h"

int subq_selector_parse(const char *name) { return selector_kind_parse(name); }
int subq_score_parse(const char *name) { return select_score_parse(name); }
const char *subq_score_name(subq_score s) { return select_score_name(s); }
int subq_scan_parse(const char *name) { return select_scan_parse(name); }
const char *subq_scan_name(subq_scan s) { return select_scan_name(s); }

int subq_oracle_parse(const char *name) { return oracle_kind_parse(name); }

const char *subq_oracle_name(subq_oracle_kind k) { return oracle_kind_name(k); }

int subq_far_parse(const char *name) { return attn_far_parse(name); }

const char *subq_far_name(subq_far_pos s) { return attn_far_name(s); }

const char *subq_selector_name(subq_selector_kind k) { return selector_kind_name(k); }

int subq_selector_available(subq_selector_kind k) {
    return (int)k >= 0 && k < SUBQ_SELECT_COUNT && selector_kind_available(k);
}

int subq_selector_needs_search(subq_selector_kind k) {
    return (int)k >= 0 && k < SUBQ_SELECT_COUNT && selector_kind_needs_search(k);
}

/* The engine's defaults (attn_plan_default), with prompts attended dense. */
subq_attn_plan subq_attn_plan_default(void) {
    attn_plan ip;
    attn_plan_default(&ip);
    ip.plan.sparse_prefill = SUBQ_PREFILL_DENSE;
    return ip.plan;
}

/* The plan's enums and distances checked; the plan itself is the engine's
 * (attn_plan.plan), as given. */
subq_status api_plan_to_internal(const subq_attn_plan *p, attn_plan *out, subq_error *err) {
    if ((int)p->selector < 0 || p->selector >= SUBQ_SELECT_COUNT)
        return subq_fail(err, SUBQ_ERR_ARG, "unknown selector kind %d", (int)p->selector);
    if (p->sparse_prefill < SUBQ_PREFILL_DENSE || p->sparse_prefill > SUBQ_PREFILL_TOKENWISE)
        return subq_fail(err, SUBQ_ERR_ARG, "unknown prefill mode %d (0 dense, 1 sparse, 2 token by token)",
                         p->sparse_prefill);
    if ((int)p->oracle < 0 || p->oracle >= SUBQ_ORACLE_COUNT)
        return subq_fail(err, SUBQ_ERR_ARG, "unknown oracle kind %d", (int)p->oracle);
    if ((int)p->far_pos < 0 || p->far_pos >= SUBQ_FAR_COUNT)
        return subq_fail(err, SUBQ_ERR_ARG, "unknown far-key scheme %d (0 none, 1 window, 2 order, 3 group)",
                         (int)p->far_pos);
    if (p->far_from < 0)
        return subq_fail(err, SUBQ_ERR_ARG, "far_from %d: a distance is at least 1 (0: the default)", p->far_from);
    *out = (attn_plan){.plan = *p};
    return SUBQ_OK;
}

subq_status api_complete_head_flags(const phi_maps *maps, int n_layer, int n_head, float min_entropy,
                                    unsigned char **out, subq_error *err) {
    *out = NULL;
    if (!(min_entropy >= 0)) return SUBQ_OK;
    if (!maps->h_mid)
        return subq_fail(err, SUBQ_ERR_ARG, "the completion maps hold no per-head entropies (measure them with the "
                         "completion diagnostics and store them in the file first)");
    unsigned char *flags = calloc((size_t)n_layer * (size_t)n_head, 1);
    if (!flags) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    for (int i = 0; i < maps->n_sel; i++)
        for (int h = 0; h < n_head; h++)
            flags[(size_t)maps->layers[i] * n_head + h] = maps->h_mid[(size_t)i * n_head + h] >= min_entropy;
    *out = flags;
    return SUBQ_OK;
}

/* ---- search projections ---------------------------------------------- */

static subq_status wrap_search(search_proj *proj, subq_search **out, subq_error *err) {
    *out = malloc(sizeof **out);
    if (!*out) {
        search_proj_free(proj);
        return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    }
    (*out)->proj = proj;
    return SUBQ_OK;
}

subq_status subq_search_load(const char *path, const subq_model *m, subq_search **out, subq_error *err) {
    *out = NULL;
    search_proj *proj;
    subq_status s = search_proj_load(path, m, &proj, err);
    return s ? s : wrap_search(proj, out, err);
}

subq_status subq_search_random(const subq_model *m, const char *layers, int d_search, uint64_t seed,
                               subq_search **out, subq_error *err) {
    return subq_search_random_heads(m, layers, d_search, SUBQ_SEARCH_LAYER, seed, out, err);
}

subq_status subq_search_random_heads(const subq_model *m, const char *layers, int d_search, subq_search_granularity g,
                                     uint64_t seed, subq_search **out, subq_error *err) {
    *out = NULL;
    const int n_layer = m->hp.n_layer;
    if (d_search <= 0 || d_search > SEARCH_PROJ_MAX_D)
        return subq_fail(err, SUBQ_ERR_ARG, "search width %d out of range [1, %d]", d_search, SEARCH_PROJ_MAX_D);
    int *list = malloc((size_t)n_layer * sizeof(int));
    unsigned char *mask = calloc((size_t)n_layer, 1);
    subq_status s = !list || !mask ? subq_fail(err, SUBQ_ERR_NOMEM, "out of memory") : SUBQ_OK;
    if (!s && layers) s = model_layers_parse(&m->hp, layers, mask, err);
    else if (!s) /* first and last two layers stay dense, as is usual, and sliding ones to their window */
        for (int l = 2; l <= n_layer - 3; l++) mask[l] = !m->hp.layer[l].window;
    int n = 0;
    for (int l = 0; !s && l < n_layer; l++)
        if (mask[l]) list[n++] = l;
    if (!s && n == 0) s = subq_fail(err, SUBQ_ERR_ARG, "no layers for random search projections");
    search_proj *proj = NULL;
    if (!s) s = search_proj_random_heads(m, list, n, d_search, g, seed, &proj, err);
    free(mask);
    free(list);
    return s ? s : wrap_search(proj, out, err);
}

void subq_search_free(subq_search *s) {
    if (!s) return;
    search_proj_free(s->proj);
    free(s);
}

subq_status subq_search_from_model(const subq_model *m, subq_search **out, subq_error *err) {
    *out = NULL;
    search_proj *proj;
    subq_status s = search_proj_from_model(m, &proj, err);
    if (s == SUBQ_ERR_RANGE) {
        if (err) memset(err, 0, sizeof *err);
        return SUBQ_OK;
    }
    return s ? s : wrap_search(proj, out, err);
}

int subq_search_top_k(const subq_search *s) { return s->proj->top_k; }

int subq_search_d(const subq_search *s) { return s->proj->d_search; }
int subq_search_granularity_parse(const char *name) { return search_granularity_parse(name); }
const char *subq_search_granularity_name(subq_search_granularity g) { return search_granularity_name(g); }

void subq_search_get_rope(const subq_search *s, int *rope_dims, float *rope_base, float *rope_scale) {
    *rope_dims = s->proj->rope.n_rot;
    *rope_base = (float)s->proj->rope.base;
    *rope_scale = (float)s->proj->rope.scale;
}

subq_status subq_search_set_rope(subq_search *s, int rope_dims, float rope_base, float rope_scale, subq_error *err) {
    const search_rope r = {.n_rot = rope_dims, .base = rope_base, .scale = rope_scale};
    subq_status st = search_rope_check(&r, s->proj->d_search, "search rotation", err);
    if (!st) s->proj->rope = r;
    return st;
}

int subq_search_has_layer(const subq_search *s, int layer) {
    return layer >= 0 && layer < s->proj->n_layer && s->proj->wq[layer] != NULL;
}

/* ---- completion maps -------------------------------------------------- */

subq_status subq_complete_load(const char *path, const subq_model *m, subq_complete **out, subq_error *err) {
    *out = NULL;
    phi_maps *maps;
    subq_status s = phi_maps_load(path, m, &maps, err);
    if (s) return s;
    if (!(*out = malloc(sizeof **out))) {
        phi_maps_free(maps);
        return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    }
    (*out)->maps = maps;
    return SUBQ_OK;
}

int subq_complete_has_entropy(const subq_complete *c) { return c && c->maps->h_mid != NULL; }

void subq_complete_free(subq_complete *c) {
    if (!c) return;
    phi_maps_free(c->maps);
    free(c);
}

/* ---- plans on a context ----------------------------------------------- */

/* With a KV file: it stores the search keys of the plan's layers. Tokens it
 * already holds from other search keys refuse the plan (the plan stays
 * unset): resume needs the keys they were made with. */
static subq_status file_plan(subq_context *c, subq_error *err) {
    if (!c->kv.file) return SUBQ_OK;
    const int n_layer = c->model->hp.n_layer;
    int *d = calloc((size_t)n_layer, sizeof(int));
    uint64_t *by = calloc((size_t)n_layer, sizeof(uint64_t));
    subq_status s = d && by ? SUBQ_OK : subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    for (int l = 0; !s && l < n_layer; l++) {
        d[l] = attn_stage_search_width(c->stages[l]);
        by[l] = attn_stage_search_made_by(c->stages[l]);
    }
    if (!s) s = context_file_plan(c, d, by, err);
    free(d);
    free(by);
    if (!s && !c->file_writable) {
        s = subq_fail(err, SUBQ_ERR_MISMATCH, "the KV file holds %d tokens made with the search keys of another "
                      "attention plan: give the same --search and --sparse-layers (with exact, hnsw or faiss), or delete the file",
                      kv_file_committed(c->kv.file));
        context_clear_plan(c);
    }
    return s;
}

subq_status subq_context_set_plan(subq_context *c, const subq_attn_plan *plan, const subq_search *search,
                                  const subq_complete *complete, subq_error *err) {
    attn_plan ip;
    subq_status s = api_plan_to_internal(plan, &ip, err);
    if (s) return s;
    if (plan->complete_min_entropy >= 0 && !complete)
        return subq_fail(err, SUBQ_ERR_ARG, "a completion entropy threshold needs completion maps");
    unsigned char *flags = NULL;
    if (complete) {
        const model_hparams *hp = &c->model->hp;
        s = api_complete_head_flags(complete->maps, hp->n_layer, hp->n_head, plan->complete_min_entropy, &flags, err);
        if (s) return s;
        ip.complete = complete->maps;
        ip.complete_heads = flags;
    }
    s = context_set_plan(c, &ip, search ? search->proj : NULL, err);
    free(flags); /* the stages keep their own copy */
    if (!s) s = file_plan(c, err);
    return s;
}

void subq_context_clear_plan(subq_context *c) {
    subq_error ignored; /* a file of another plan's tokens: the next decode says so */
    context_clear_plan(c);
    file_plan(c, &ignored);
}

subq_status subq_parse_layers(const char *s, int n_layer, unsigned char *mask, subq_error *err) {
    return layers_parse(s, n_layer, mask, err);
}
