/* Selection-only / hybrid attention stage for evaluating the completion
 * (phi_stage.h). Queries run in slot order: slot t's key is appended to the
 * selector, slot t - n_tail (if it is a mid-region slot) enters the
 * completion cache, then query t retrieves and attends. */
#include "phi/phi_stage.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "phi/phi_cache.h"

typedef struct phi_stage {
    attn_stage base;            /* first member: the stage is cast back from it */
    phi_stage_params p;
    const phi_maps *maps;
    selector_env env;
    int n_ctx, max_slots;
    selector *sel;
    phi_cache *cache;           /* [n_head_kv] */
    phi_residual *res;          /* [n_head_kv] */
    float *lk;                  /* [n_ctx][n_head_kv][d_phi]: log phi_k of every slot */
    int doc0;                   /* first slot of the current document */
    int next_cache;             /* next mid-region slot to add to the caches */
    int32_t *cand;              /* [top_k] */
    int *slots;                 /* [max_slots] */
    float *scores, *vals, *lkr, *lq, *row;
    const float **vptr;         /* [max_slots] */
    phi_stage_stats stats;
} phi_stage;

static const char *phi_stage_name = "phi";

/* one cached key or value row as floats */
static void load_row(const kv_cache *kv, const void *src, float *dst) {
    if (kv->type == SUBQ_KV_F32) memcpy(dst, src, (size_t)kv->head_dim * sizeof(float));
    else
        for (int i = 0; i < kv->head_dim; i++) dst[i] = fp16_to_fp32(((const uint16_t *)src)[i]);
}

static void reset_caches(phi_stage *s) {
    if (!s->cache) return;
    for (int g = 0; g < s->env.n_head_kv; g++) phi_cache_reset(&s->cache[g]);
}

static subq_status phi_stage_forward(attn_stage *self, const attn_step *st, const kv_cache *kv, subq_error *err) {
    phi_stage *s = (phi_stage *)self;
    const int D = st->head_dim, nkv = st->n_head_kv, g_size = st->n_head / nkv, l = st->layer;
    const int F = s->maps ? s->maps->dims.d_phi : 0, complete = s->p.complete;
    if (st->slot0 + st->n_tokens > s->n_ctx)
        return subq_fail(err, SUBQ_ERR_RANGE, "phi stage: slot %d beyond its %d slots", st->slot0 + st->n_tokens - 1,
                         s->n_ctx);
    for (int t = 0; t < st->n_tokens; t++) {
        const int slot = st->slot0 + t;
        const int32_t seg = kv->seg[slot];
        if (slot == 0 || kv->seg[slot - 1] != seg) { /* a new document */
            s->doc0 = slot;
            s->next_cache = slot + s->p.n_sink;
            reset_caches(s);
        }
        subq_status rc = selector_append(s->sel, NULL, 1, slot, err);
        if (rc) return rc;
        if (complete) {
            /* log phi_k of the new slot, per KV head */
            for (int g = 0; g < nkv; g++) {
                load_row(kv, kv_cache_key(kv, l, g, slot), s->row);
                phi_log_features(s->maps, l, PHI_K, g, s->row, s->lk + ((size_t)slot * nkv + g) * F);
            }
            /* slots that left the tail window enter the mid-region cache */
            for (; s->next_cache <= slot - s->p.n_tail; s->next_cache++)
                for (int g = 0; g < nkv; g++) {
                    load_row(kv, kv_cache_value(kv, l, g, s->next_cache), s->row);
                    phi_cache_add(&s->cache[g], s->lk + ((size_t)s->next_cache * nkv + g) * F, s->row);
                }
        }
        /* sinks [doc0, sink_hi), candidates, tail [tail_lo, slot] */
        const int sink_hi = s->doc0 + s->p.n_sink < slot + 1 ? s->doc0 + s->p.n_sink : slot + 1;
        const int tail_lo = slot + 1 - s->p.n_tail > sink_hi ? slot + 1 - s->p.n_tail : sink_hi;
        select_mask m = {.n_slots = slot + 1, .seg = kv->seg, .query_seg = seg, .ex0_lo = s->doc0, .ex0_hi = sink_hi,
                         .ex1_lo = tail_lo, .ex1_hi = slot + 1};
        const float *q = st->q + (size_t)t * st->n_head * D;
        int got = s->p.top_k > 0 ? selector_query(s->sel, NULL, q, s->p.top_k, &m, s->cand) : 0;
        int ns = 0;
        for (int j = s->doc0; j < sink_hi; j++) s->slots[ns++] = j;
        const int c0 = ns;
        for (int i = 0; i < got; i++) s->slots[ns++] = s->cand[i];
        for (int j = tail_lo; j <= slot; j++) s->slots[ns++] = j;
        const int has_mid = tail_lo > sink_hi;
        s->stats.n_queries++;
        for (int g = 0; g < nkv; g++) {
            for (int j = 0; j < ns; j++) {
                load_row(kv, kv_cache_value(kv, l, g, s->slots[j]), s->vals + (size_t)j * D);
                s->vptr[j] = s->vals + (size_t)j * D;
            }
            if (complete) {
                for (int i = 0; i < got; i++)
                    memcpy(s->lkr + (size_t)i * F, s->lk + ((size_t)s->cand[i] * nkv + g) * F, (size_t)F * sizeof(float));
                phi_residual_compute(&s->res[g], &s->cache[g], s->lkr, s->vptr + c0, got, s->p.eps);
            }
            for (int hi = 0; hi < g_size; hi++) {
                const int h = g * g_size + hi;
                const float *qh = q + (size_t)h * D;
                /* s_j = scale q_h . k_j */
                for (int j = 0; j < ns; j++) {
                    load_row(kv, kv_cache_key(kv, l, g, s->slots[j]), s->row);
                    float dot = 0.0f;
                    for (int c = 0; c < D; c++) dot += qh[c] * s->row[c];
                    s->scores[j] = st->scale * dot;
                }
                phi_hybrid_info info;
                if (complete) phi_log_features(s->maps, l, PHI_Q, h, qh, s->lq);
                phi_complete_head(complete ? &s->res[g] : NULL, D, s->lq, s->scores, s->vptr, ns,
                                  st->out + (size_t)t * st->n_head * D + (size_t)h * D, &info);
                if (has_mid) {
                    s->stats.share_sum += info.z_share;
                    s->stats.n_heads++;
                }
            }
        }
    }
    return SUBQ_OK;
}

static void phi_stage_reset(attn_stage *self) {
    phi_stage *s = (phi_stage *)self;
    selector_reset(s->sel);
    reset_caches(s);
    s->doc0 = 0;
    s->next_cache = s->p.n_sink;
}

static void phi_stage_free(attn_stage *self) {
    phi_stage *s = (phi_stage *)self;
    selector_free(s->sel);
    if (s->cache)
        for (int g = 0; g < s->env.n_head_kv; g++) phi_cache_free(&s->cache[g]);
    if (s->res)
        for (int g = 0; g < s->env.n_head_kv; g++) phi_residual_free(&s->res[g]);
    free(s->cache);
    free(s->res);
    free(s->lk);
    free(s->cand);
    free(s->slots);
    free(s->scores);
    free(s->vals);
    free(s->lkr);
    free(s->lq);
    free(s->row);
    free(s->vptr);
    free(s);
}

subq_status phi_stage_new(const phi_stage_params *p, const phi_maps *maps, const selector_env *env, int n_ctx,
                          attn_stage **out, subq_error *err) {
    *out = NULL;
    if (p->top_k < 0 || p->n_sink < 0 || p->n_tail < 1 || n_ctx < 1)
        return subq_fail(err, SUBQ_ERR_ARG, "invalid phi stage (topk %d, sink %d, tail %d; tail must be >= 1)", p->top_k,
                         p->n_sink, p->n_tail);
    if (p->select.kind == SELECT_EXACT || p->select.kind == SELECT_HNSW || p->select.kind == SELECT_FAISS)
        return subq_fail(err, SUBQ_ERR_ARG, "phi stage: selector '%s' needs search projections (use oracle, quest or window)",
                         selector_kind_name(p->select.kind));
    if (p->complete && (!maps || !phi_layer_params(maps, env->layer)))
        return subq_fail(err, SUBQ_ERR_ARG, "no completion maps for layer %d", env->layer);
    if (p->complete && (maps->dims.head_dim != env->head_dim || maps->dims.n_head != env->n_head ||
                        maps->dims.n_head_kv != env->n_head_kv))
        return subq_fail(err, SUBQ_ERR_MISMATCH, "completion maps are for %d/%d heads of width %d, the model has %d/%d of %d",
                         maps->dims.n_head, maps->dims.n_head_kv, maps->dims.head_dim, env->n_head, env->n_head_kv,
                         env->head_dim);
    phi_stage *s = calloc(1, sizeof *s);
    if (!s) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    s->base.name = phi_stage_name;
    s->base.forward = phi_stage_forward;
    s->base.reset = phi_stage_reset;
    s->base.free = phi_stage_free;
    s->p = *p;
    s->maps = p->complete ? maps : NULL;
    s->env = *env;
    s->n_ctx = n_ctx;
    s->max_slots = p->n_sink + p->top_k + p->n_tail;
    s->next_cache = p->n_sink;
    const int D = env->head_dim, F = s->maps ? s->maps->dims.d_phi : 1, nkv = env->n_head_kv;
    s->cand = malloc((size_t)(p->top_k > 0 ? p->top_k : 1) * sizeof(int32_t));
    s->slots = malloc((size_t)s->max_slots * sizeof(int));
    s->scores = malloc((size_t)s->max_slots * sizeof(float));
    s->vals = malloc((size_t)s->max_slots * D * sizeof(float));
    s->vptr = malloc((size_t)s->max_slots * sizeof(float *));
    s->row = malloc((size_t)D * sizeof(float));
    s->lq = malloc((size_t)F * sizeof(float));
    int ok = s->cand && s->slots && s->scores && s->vals && s->vptr && s->row && s->lq;
    if (ok && s->maps) {
        s->lk = malloc((size_t)n_ctx * nkv * F * sizeof(float));
        s->lkr = malloc((size_t)(p->top_k > 0 ? p->top_k : 1) * F * sizeof(float));
        s->cache = calloc((size_t)nkv, sizeof(phi_cache));
        s->res = calloc((size_t)nkv, sizeof(phi_residual));
        ok = s->lk && s->lkr && s->cache && s->res;
        for (int g = 0; ok && g < nkv; g++)
            ok = !phi_cache_init(&s->cache[g], F, D, err) && !phi_residual_init(&s->res[g], F, D, err);
    }
    subq_status rc = ok ? selector_new(&p->select, env, &s->sel, err) : SUBQ_ERR_NOMEM;
    if (rc) {
        phi_stage_free(&s->base);
        return rc == SUBQ_ERR_NOMEM && !ok ? subq_fail(err, SUBQ_ERR_NOMEM, "out of memory for the phi stage") : rc;
    }
    *out = &s->base;
    return SUBQ_OK;
}

const phi_stage_stats *phi_stage_get_stats(attn_stage *st) {
    return st && st->name == phi_stage_name ? &((phi_stage *)st)->stats : NULL;
}

void phi_stage_clear_stats(attn_stage *st) {
    if (st && st->name == phi_stage_name) memset(&((phi_stage *)st)->stats, 0, sizeof(phi_stage_stats));
}

void phi_context_clear_stages(subq_context *c) {
    for (int l = 0; l < c->model->hp.n_layer; l++) {
        attn_stage *st = c->stages[l];
        if (st && st->free) st->free(st);
        c->stages[l] = attn_full_stage();
    }
}

subq_status phi_context_set_stages(subq_context *c, const phi_maps *maps, const phi_stage_params *p, subq_error *err) {
    const model_hparams *hp = &c->model->hp;
    for (int i = 0; i < maps->n_sel; i++) {
        const int l = maps->layers[i];
        selector_env env = {.kv = &c->kv, .layer = l, .n_head = hp->n_head, .n_head_kv = hp->n_head_kv,
                            .head_dim = hp->head_dim};
        attn_stage *st;
        subq_status s = phi_stage_new(p, maps, &env, c->kv.n_ctx, &st, err);
        if (s) return s;
        if (c->stages[l] && c->stages[l]->free) c->stages[l]->free(c->stages[l]);
        c->stages[l] = st;
    }
    return SUBQ_OK;
}
