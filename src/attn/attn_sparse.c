#include "attn/attn_sparse.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/attn_complete.h"
#include "attn/attn_kernels.h"
#include "base/blas.h"
#include "base/error.h"

typedef struct sparse_stage {
    attn_stage base;            /* first member: the stage is cast back from it */
    sparse_params p;
    const float *wq_s, *wk_s;   /* [d_search][n_embd] or NULL */
    int n_embd, d_search;
    selector *sel;
    sparse_record rec;
    int rec_cap;                /* tokens the record can hold */
    float *qs, *ks;             /* search vectors of the current batch */
    int freeze_slot;            /* static-index mode, -1 = off */
    int metrics_on;
    sparse_metrics metrics;
    selector *shadow;           /* exact selector beside an ANN one (metrics) */
    attn_completion *comp;      /* NULL: selection only */
} sparse_stage;

static const char *sparse_name = "sparse";

/* Y[t][:] = W h_t for t < n: Y = H W^T with W [d_search][n_embd] */
static void project(float *Y, const float *H, const float *W, int n, int n_embd, int d_search, int n_threads) {
    blas_sgemm(n_threads, 0, 1, n, d_search, n_embd, 1.0f, H, n_embd, W, n_embd, 0.0f, Y, d_search);
}

static subq_status ensure_buffers(sparse_stage *s, int n, subq_error *err) {
    if (n <= s->rec_cap) return SUBQ_OK;
    /* at least one entry: realloc to 0 bytes would free the old buffer */
    int32_t *cand = realloc(s->rec.cand, (size_t)n * (size_t)(s->p.top_k > 0 ? s->p.top_k : 1) * sizeof(int32_t));
    if (!cand) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory for candidate sets");
    s->rec.cand = cand;
    if (s->d_search > 0) {
        float *qs = realloc(s->qs, (size_t)n * s->d_search * sizeof(float));
        if (qs) s->qs = qs;
        float *ks = realloc(s->ks, (size_t)n * s->d_search * sizeof(float));
        if (ks) s->ks = ks;
        if (!qs || !ks) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory for search vectors");
    }
    s->rec_cap = n;
    return SUBQ_OK;
}

/* Metrics of one query (see sparse_metrics): full head-mean attention over
 * the document prefix, the mass on the attended slots and the recall of the
 * candidates against its top-K retrieval-eligible keys. */
static void measure_query(sparse_stage *s, const kv_cache *kv, int slot, int doc0, const float *q_s,
                          const float *q_native, const select_mask *m, const int32_t *cand, int got) {
    const selector_env *env = &s->sel->env;
    const int n = slot + 1 - doc0, hd = env->head_dim, g = env->n_head / env->n_head_kv, topk = s->p.top_k;
    float *p = calloc((size_t)n, sizeof(float)), *sc = malloc((size_t)n * sizeof(float));
    int *idx = malloc((size_t)n * sizeof(int)), *exact = malloc((size_t)(topk > 0 ? topk : 1) * sizeof(int32_t));
    unsigned char *attended = calloc((size_t)n, 1);
    if (!p || !sc || !idx || !exact || !attended) goto done;
    const float scale = 1.0f / sqrtf((float)hd);
    const attn_kernels *K = attn_kernels_get();
    /* p_j = mean_h softmax_j(scale q_h . k_j) over the document prefix */
    for (int h = 0; h < env->n_head; h++) {
        float mx = -INFINITY;
        for (int j = 0; j < n; j++) {
            const void *key = kv_cache_key(kv, env->layer, h / g, doc0 + j);
            const float *qh = q_native + (size_t)h * hd;
            sc[j] = scale * (kv->type == SUBQ_KV_F16 ? K->dot_f16(qh, key, hd) : K->dot_f32(qh, key, hd));
            mx = sc[j] > mx ? sc[j] : mx;
        }
        double z = 0.0;
        for (int j = 0; j < n; j++) z += exp((double)sc[j] - mx);
        for (int j = 0; j < n; j++) p[j] += (float)(exp((double)sc[j] - mx) / z / env->n_head);
    }
    /* attended = sinks + tail (everything the mask excludes in this document) + candidates */
    int n_elig = 0;
    for (int j = 0; j < n; j++) {
        int slot_j = doc0 + j;
        attended[j] = (slot_j >= m->ex0_lo && slot_j < m->ex0_hi) || (slot_j >= m->ex1_lo && slot_j < m->ex1_hi);
        if (select_mask_allows(m, slot_j)) idx[n_elig++] = j;
    }
    for (int i = 0; i < got; i++) attended[cand[i] - doc0] = 1;
    double mass = 0.0;
    for (int j = 0; j < n; j++)
        if (attended[j]) mass += p[j];
    s->metrics.mass_sum += mass;
    /* recall: teacher top-K among retrieval-eligible keys (partial sort by p) */
    int kk = topk < n_elig ? topk : n_elig;
    if (kk > 0) {
        for (int a = 0; a < kk; a++) { /* selection sort of the first kk: K is small */
            int best = a;
            for (int b = a + 1; b < n_elig; b++)
                if (p[idx[b]] > p[idx[best]]) best = b;
            int t = idx[a];
            idx[a] = idx[best];
            idx[best] = t;
        }
        int hit = 0;
        for (int a = 0; a < kk; a++)
            for (int i = 0; i < got; i++)
                if (cand[i] == doc0 + idx[a]) {
                    hit++;
                    break;
                }
        s->metrics.recall_sum += (double)hit / kk;
    } else {
        s->metrics.recall_sum += 1.0;
    }
    s->metrics.n_queries++;
    s->metrics.n_requested += topk;
    s->metrics.n_filler += topk - got;
    if (s->shadow && topk > 0) {
        int ne = selector_query(s->shadow, q_s, q_native, topk, m, exact);
        if (ne > 0) {
            int hit = 0;
            for (int a = 0; a < ne; a++)
                for (int i = 0; i < got; i++)
                    if (cand[i] == exact[a]) {
                        hit++;
                        break;
                    }
            s->metrics.ann_recall_sum += (double)hit / ne;
            s->metrics.n_ann++;
        }
    }
done:
    free(p);
    free(sc);
    free(idx);
    free(exact);
    free(attended);
}

/* Slots a query attends to: sinks (first n_sink slots of its document),
 * then the retrieved candidates, then the tail (the n_tail most recent
 * slots of its document up to itself); the selector never returns sinks or
 * tail, so the three sets are disjoint. Returns the count written to
 * `slots`; the candidates are slots[*cand_off .. *cand_off + *n_cand). */
static int gather_slots(sparse_stage *s, const kv_cache *kv, int slot, const float *q_s, const float *q_native,
                        int32_t *cand, int *slots, int *cand_off, int *n_cand) {
    const int32_t seg = kv->seg[slot];
    int doc0 = slot; /* first slot of the query's document: segments are contiguous runs */
    while (doc0 > 0 && kv->seg[doc0 - 1] == seg) doc0--;
    int sink_hi = doc0 + s->p.n_sink < slot + 1 ? doc0 + s->p.n_sink : slot + 1;
    int tail_lo = slot + 1 - s->p.n_tail > sink_hi ? slot + 1 - s->p.n_tail : sink_hi;
    int visible = s->freeze_slot >= 0 && s->freeze_slot < slot + 1 ? s->freeze_slot : slot + 1;
    select_mask m = {.n_slots = visible, .seg = kv->seg, .query_seg = seg,
                     .ex0_lo = doc0, .ex0_hi = sink_hi, .ex1_lo = tail_lo, .ex1_hi = slot + 1};
    int got = s->p.top_k > 0 ? selector_query(s->sel, q_s, q_native, s->p.top_k, &m, cand) : 0;
    if (s->metrics_on) measure_query(s, kv, slot, doc0, q_s, q_native, &m, cand, got);
    for (int i = got; i < s->p.top_k; i++) cand[i] = -1; /* filler: masked out */
    int n = 0;
    for (int j = doc0; j < sink_hi; j++) slots[n++] = j;
    *cand_off = n;
    *n_cand = got;
    for (int i = 0; i < got; i++) slots[n++] = cand[i];
    for (int j = tail_lo; j <= slot; j++) slots[n++] = j;
    return n;
}

/* Add search keys of slots slot0.. to the index (and the shadow), except in
 * static-index mode past the freeze point. */
static subq_status append_keys(sparse_stage *s, const float *ks, int n, int slot0, subq_error *err) {
    if (s->freeze_slot >= 0) {
        if (slot0 >= s->freeze_slot) return SUBQ_OK;
        if (slot0 + n > s->freeze_slot) n = s->freeze_slot - slot0;
    }
    subq_status rc = selector_append(s->sel, ks, n, slot0, err);
    if (!rc && s->shadow) rc = selector_append(s->shadow, ks, n, slot0, err);
    return rc;
}

static subq_status sparse_forward(attn_stage *self, const attn_step *st, const kv_cache *kv, subq_error *err) {
    sparse_stage *s = (sparse_stage *)self;
    const int n = st->n_tokens, hd = st->head_dim, g = st->n_head / st->n_head_kv;
    subq_status rc = ensure_buffers(s, n, err);
    if (rc) return rc;
    s->rec.n_tokens = n;
    s->rec.top_k = s->p.top_k;
    if (s->d_search > 0) {
        project(s->ks, st->h_norm, s->wk_s, n, s->n_embd, s->d_search, st->n_threads);
        project(s->qs, st->h_norm, s->wq_s, n, s->n_embd, s->d_search, st->n_threads);
    }
    /* the index grows with the cache: every new key is appended, also when
     * this batch itself is attended densely */
    if (n > 1 && s->p.dense_prefill) {
        if ((rc = append_keys(s, s->d_search > 0 ? s->ks : NULL, n, st->slot0, err))) return rc;
        for (int t = 0; t < n && s->comp && !rc; t++) rc = completion_advance(s->comp, kv, st->slot0 + t, err);
        if (rc) return rc;
        for (int i = 0; i < n * s->p.top_k; i++) s->rec.cand[i] = -1;
        return attn_full_stage()->forward(attn_full_stage(), st, kv, err);
    }
    /* Teacher forcing: query t sees exactly the keys of slots <= its own.
     * Appending key t right before query t keeps that true for ANN indexes
     * too, so queries run in slot order. */
    int max_slots = s->p.n_sink + s->p.top_k + s->p.n_tail;
    int *slots = malloc((size_t)max_slots * sizeof(int));
    float *scores = malloc((size_t)max_slots * sizeof(float));
    if (!slots || !scores) {
        free(slots);
        free(scores);
        return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory for sparse attention");
    }
    for (int t = 0; t < n && !rc; t++) {
        int slot = st->slot0 + t;
        rc = append_keys(s, s->d_search > 0 ? s->ks + (size_t)t * s->d_search : NULL, 1, slot, err);
        if (!rc && s->comp) rc = completion_advance(s->comp, kv, slot, err);
        if (rc) break;
        const float *q = st->q + (size_t)t * st->n_head * hd;
        int cand_off, n_cand;
        int ns = gather_slots(s, kv, slot, s->d_search > 0 ? s->qs + (size_t)t * s->d_search : NULL, q,
                              s->rec.cand + (size_t)t * s->p.top_k, slots, &cand_off, &n_cand);
        if (s->comp) {
            completion_attend(s->comp, kv, slot, q, st->scale, slots, ns, cand_off, n_cand,
                              st->out + (size_t)t * st->n_head * hd, &s->metrics.share_sum, &s->metrics.n_share);
            continue;
        }
        /* exact softmax of the native q, k, v over the chosen slots, per head */
        for (int h = 0; h < st->n_head; h++)
            attn_head_over_slots(kv, st->layer, h / g, q + (size_t)h * hd, st->scale, slots, ns, scores,
                                 st->out + (size_t)t * st->n_head * hd + (size_t)h * hd);
    }
    free(slots);
    free(scores);
    return rc;
}

static void sparse_reset(attn_stage *self) {
    sparse_stage *s = (sparse_stage *)self;
    selector_reset(s->sel);
    if (s->shadow) selector_reset(s->shadow);
    if (s->comp) completion_reset(s->comp);
    s->rec.n_tokens = 0;
}

static void sparse_free(attn_stage *self) {
    sparse_stage *s = (sparse_stage *)self;
    selector_free(s->sel);
    selector_free(s->shadow);
    completion_free(s->comp);
    free(s->rec.cand);
    free(s->qs);
    free(s->ks);
    free(s);
}

subq_status attn_sparse_new(const sparse_params *p, const float *wq_s, const float *wk_s, int n_embd,
                            const selector_env *env, attn_stage **out, subq_error *err) {
    *out = NULL;
    if (p->top_k < 0 || p->n_sink < 0 || p->n_tail < 1)
        return subq_fail(err, SUBQ_ERR_ARG, "invalid sparse attention plan (topk %d, sink %d, tail %d; tail must be >= 1)",
                         p->top_k, p->n_sink, p->n_tail);
    int needs_search = p->select.kind == SELECT_EXACT || p->select.kind == SELECT_HNSW || p->select.kind == SELECT_FAISS;
    if (needs_search && (!wq_s || !wk_s || p->select.d_search <= 0))
        return subq_fail(err, SUBQ_ERR_ARG, "selector '%s' needs search projections for layer %d",
                         selector_kind_name(p->select.kind), env->layer);
    sparse_stage *s = calloc(1, sizeof *s);
    if (!s) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    s->base.name = sparse_name;
    s->base.forward = sparse_forward;
    s->base.reset = sparse_reset;
    s->base.free = sparse_free;
    s->p = *p;
    s->n_embd = n_embd;
    s->freeze_slot = -1;
    if (needs_search) {
        s->wq_s = wq_s;
        s->wk_s = wk_s;
        s->d_search = p->select.d_search;
    }
    subq_status rc = selector_new(&p->select, env, &s->sel, err);
    if (rc) {
        free(s);
        return rc;
    }
    if (p->complete && phi_layer_params(p->complete, env->layer)) {
        const phi_dims *d = &p->complete->dims;
        if (d->head_dim != env->head_dim || d->n_head != env->n_head || d->n_head_kv != env->n_head_kv)
            rc = subq_fail(err, SUBQ_ERR_MISMATCH, "completion maps are for %d/%d heads of width %d, the model has "
                           "%d/%d of %d", d->n_head, d->n_head_kv, d->head_dim, env->n_head, env->n_head_kv, env->head_dim);
        else
            rc = completion_new(p->complete, env->layer, p->n_sink, p->n_tail, p->top_k,
                                p->complete_heads ? p->complete_heads + (size_t)env->layer * env->n_head : NULL,
                                &s->comp, err);
        if (rc) {
            sparse_free(&s->base);
            return rc;
        }
    }
    *out = &s->base;
    return SUBQ_OK;
}

selector *attn_sparse_selector(attn_stage *st) {
    return st && st->name == sparse_name ? ((sparse_stage *)st)->sel : NULL;
}

int attn_sparse_has_completion(const attn_stage *st) {
    return st && st->name == sparse_name && ((const sparse_stage *)st)->comp != NULL;
}

const sparse_record *attn_sparse_record(attn_stage *st) {
    return st && st->name == sparse_name ? &((sparse_stage *)st)->rec : NULL;
}

subq_status attn_sparse_enable_metrics(attn_stage *st, subq_error *err) {
    if (!st || st->name != sparse_name) return SUBQ_OK;
    sparse_stage *s = (sparse_stage *)st;
    s->metrics_on = 1;
    selector_kind k = s->p.select.kind;
    if (!s->shadow && (k == SELECT_HNSW || k == SELECT_FAISS)) {
        selector_params ep;
        selector_params_default(&ep, SELECT_EXACT, s->d_search);
        return selector_new(&ep, &s->sel->env, &s->shadow, err);
    }
    return SUBQ_OK;
}

const sparse_metrics *attn_sparse_get_metrics(attn_stage *st) {
    return st && st->name == sparse_name ? &((sparse_stage *)st)->metrics : NULL;
}

void attn_sparse_clear_metrics(attn_stage *st) {
    if (st && st->name == sparse_name) memset(&((sparse_stage *)st)->metrics, 0, sizeof(sparse_metrics));
}

void attn_sparse_freeze(attn_stage *st, int freeze_slot) {
    if (st && st->name == sparse_name) ((sparse_stage *)st)->freeze_slot = freeze_slot;
}

static sparse_stage *as_sparse(const attn_stage *st) {
    return st && st->name == sparse_name ? (sparse_stage *)st : NULL;
}

/* Rebuild the completion's summary over slots 0 .. n-1 from the KV cache. */
static subq_status completion_replay(sparse_stage *s, const kv_cache *kv, int n, subq_error *err) {
    if (!s->comp) return SUBQ_OK;
    completion_reset(s->comp);
    subq_status rc = SUBQ_OK;
    for (int t = 0; t < n && !rc; t++) rc = completion_advance(s->comp, kv, t, err);
    return rc;
}

subq_status attn_sparse_truncate(attn_stage *st, const kv_cache *kv, int n_keep, subq_error *err) {
    sparse_stage *s = as_sparse(st);
    if (!s) return SUBQ_OK;
    int keys = s->freeze_slot >= 0 && s->freeze_slot < n_keep ? s->freeze_slot : n_keep;
    subq_status rc = selector_truncate(s->sel, keys, err);
    if (!rc && s->shadow) rc = selector_truncate(s->shadow, keys, err);
    if (!rc) rc = completion_replay(s, kv, n_keep, err);
    s->rec.n_tokens = 0;
    return rc;
}

subq_status attn_sparse_restore(attn_stage *st, const kv_cache *kv, const float *keys, int n, subq_error *err) {
    sparse_stage *s = as_sparse(st);
    if (!s) return SUBQ_OK;
    if (s->d_search > 0 && !keys) return subq_fail(err, SUBQ_ERR_ARG, "restoring a sparse layer needs its search keys");
    subq_status rc = selector_put_keys(s->sel, s->d_search > 0 ? keys : NULL, n, 0, err);
    if (!rc && s->shadow) rc = selector_put_keys(s->shadow, keys, n, 0, err);
    return rc ? rc : completion_replay(s, kv, n, err);
}

int attn_sparse_search_width(const attn_stage *st) {
    const sparse_stage *s = as_sparse(st);
    return s ? s->d_search : 0;
}

subq_status attn_sparse_get_keys(const attn_stage *st, int n, float *dst, subq_error *err) {
    const sparse_stage *s = as_sparse(st);
    return s && s->d_search > 0 ? selector_get_keys(s->sel, n, dst, err) : SUBQ_OK;
}

/* FNV-1a over a layer's projection rows */
static uint64_t hash_floats(uint64_t h, const float *x, size_t n) {
    const unsigned char *b = (const unsigned char *)x;
    for (size_t i = 0; x && i < n * sizeof(float); i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

void attn_sparse_describe(const attn_stage *st, char *buf, size_t cap) {
    const sparse_stage *s = as_sparse(st);
    if (!cap) return;
    buf[0] = '\0';
    if (!s) return;
    const selector_params *sp = &s->p.select;
    size_t nw = (size_t)s->d_search * s->n_embd;
    uint64_t proj = hash_floats(hash_floats(0xcbf29ce484222325ull, s->wq_s, nw), s->wk_s, nw);
    snprintf(buf, cap,
             "sparse %s k=%d sink=%d tail=%d dense_prefill=%d d=%d f16=%d m=%d efc=%d efs=%d page=%d seed=%" PRIu64
             " proj=%016" PRIx64 " complete=%016" PRIx64,
             selector_kind_name(sp->kind), s->p.top_k, s->p.n_sink, s->p.n_tail, s->p.dense_prefill, s->d_search,
             sp->f16_keys, sp->hnsw_m, sp->hnsw_ef_construction, sp->hnsw_ef_search, sp->quest_page, sp->seed, proj,
             s->comp ? completion_hash(s->comp) : 0);
}
