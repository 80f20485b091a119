#include "attn/attn_sparse.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "complete/completion.h"
#include "kernels/kernels.h"
#include "model/matmul.h"

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
    /* per-query metric buffers (measure_query), for documents of m_cap slots */
    float *m_p, *m_pmax, *m_sc, *m_sel;
    int *m_idx;
    unsigned char *m_att;
    int32_t *m_exact;
    int m_cap;
    selector *shadow;           /* exact selector beside an ANN one (metrics) */
    attn_completion *comp;      /* NULL: selection only */
    int per_head;               /* the selector picks one set per query head */
    int32_t *hcand;             /* its sets: [n_head][top_k] */
    int *hgot;                  /* [n_head] */
} sparse_stage;

static const char *sparse_name = "sparse";

/* The batch's search keys and queries: ks[t] = W_Ks h_t, qs[t] = W_Qs h_t
 * (W [d_search][n_embd], f32). Through matmul: a decode step's few tokens
 * as row dot products across the threads, batches through sgemm (which on
 * one row first packs W on one thread: 2.7 ms of a 45 ms step at 32K over
 * 24 layers, for 0.4 ms of reads). */
static void project(sparse_stage *s, const float *H, int n, int n_threads) {
    matrix wk = {.type = GGML_TYPE_F32, .rows = s->d_search, .cols = s->n_embd,
                 .row_bytes = (size_t)s->n_embd * sizeof(float)};
    matrix wq = wk;
    wk.data = s->wk_s;
    wq.data = s->wq_s;
    matmul(s->ks, H, &wk, n, NULL, n_threads);
    matmul(s->qs, H, &wq, n, NULL, n_threads);
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

/* Per-query metric buffers for documents of up to n slots (allocated once,
 * for the whole cache, when n is its capacity). */
static subq_status ensure_metric_buffers(sparse_stage *s, int n, subq_error *err) {
    if (n <= s->m_cap) return SUBQ_OK;
    float *p = realloc(s->m_p, (size_t)n * sizeof(float));
    if (p) s->m_p = p;
    float *pmax = realloc(s->m_pmax, (size_t)n * sizeof(float));
    if (pmax) s->m_pmax = pmax;
    float *sc = realloc(s->m_sc, (size_t)n * sizeof(float));
    if (sc) s->m_sc = sc;
    float *sel = realloc(s->m_sel, (size_t)n * sizeof(float));
    if (sel) s->m_sel = sel;
    int *idx = realloc(s->m_idx, (size_t)n * sizeof(int));
    if (idx) s->m_idx = idx;
    unsigned char *att = realloc(s->m_att, (size_t)n);
    if (att) s->m_att = att;
    if (!s->m_exact) s->m_exact = malloc((size_t)(s->p.top_k > 0 ? s->p.top_k : 1) * sizeof(int32_t));
    if (!p || !pmax || !sc || !sel || !idx || !att || !s->m_exact)
        return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory for retrieval metrics (%d keys)", n);
    s->m_cap = n;
    return SUBQ_OK;
}

/* Move the kk largest score[idx[.]] of idx[0..n) to the front, best first
 * (selection sort: K is small next to the document). */
static void top_by(int *idx, int n, int kk, const float *score) {
    for (int a = 0; a < kk; a++) {
        int best = a;
        for (int b = a + 1; b < n; b++)
            if (score[idx[b]] > score[idx[best]]) best = b;
        int t = idx[a];
        idx[a] = idx[best];
        idx[best] = t;
    }
}

/* The k-th largest of a[0..n) (1 <= k <= n; a is reordered): quickselect,
 * O(n) on average where top_by is O(k n). */
static float kth_largest(float *a, int n, int k) {
    int lo = 0, hi = n - 1, want = k - 1;
    while (lo < hi) {
        float pivot = a[lo + (hi - lo) / 2];
        int i = lo, j = hi;
        while (i <= j) { /* larger values to the front */
            while (a[i] > pivot) i++;
            while (a[j] < pivot) j--;
            if (i <= j) {
                float t = a[i];
                a[i++] = a[j], a[j--] = t;
            }
        }
        if (want <= j) hi = j;
        else if (want >= i) lo = i;
        else break;
    }
    return a[want];
}

/* 1 if x is one of set[0..n) */
static int in_set(const int32_t *set, int n, int32_t x) {
    for (int i = 0; i < n; i++)
        if (set[i] == x) return 1;
    return 0;
}

/* |{doc0 + idx[0..kk)} ∩ cand[0..got)| */
static int hits(const int *idx, int kk, int doc0, const int32_t *cand, int got) {
    int hit = 0;
    for (int a = 0; a < kk; a++) hit += in_set(cand, got, doc0 + idx[a]);
    return hit;
}

/* Metrics of one query (see sparse_metrics) from the full per-head softmax
 * over the document prefix: the mass on the attended slots and the recall of
 * the candidates, in today's and the seed's definitions, and the ANN recall
 * against the shadow exact selector. Every query is counted or the call
 * fails: a dropped query would skew the means. The candidates are cand[0 ..
 * got[0]), or with a per-head selector head h's cand[h*K .. h*K + got[h]). */
static subq_status measure_query(sparse_stage *s, const kv_cache *kv, int slot, int doc0, const float *q_s,
                                 const float *q_native, const select_mask *m, const int32_t *cand, const int *got,
                                 subq_error *err) {
    const selector_env *env = &s->sel->env;
    const int n = slot + 1 - doc0, hd = env->head_dim, g = env->n_head / env->n_head_kv, topk = s->p.top_k;
    const int nh = env->n_head;
    subq_status rc = ensure_metric_buffers(s, kv->n_ctx, err);
    if (rc) return rc;
    float *p = s->m_p, *pmax = s->m_pmax, *sc = s->m_sc;
    int *idx = s->m_idx;
    unsigned char *attended = s->m_att;
    const float scale = 1.0f / sqrtf((float)hd);
    const kernels_kv *ops = kv_cache_ops(kv);
    /* the retrieval-eligible keys, and what every query attends anyway: the
     * sinks + tail (everything the mask excludes in this document) */
    int n_elig = 0;
    for (int j = 0; j < n; j++) {
        int slot_j = doc0 + j;
        attended[j] = (slot_j >= m->ex0_lo && slot_j < m->ex0_hi) || (slot_j >= m->ex1_lo && slot_j < m->ex1_hi);
        if (select_mask_allows(m, slot_j)) idx[n_elig++] = j;
    }
    const int kk = topk < n_elig ? topk : n_elig, seed_q = topk > 0 && n_elig >= topk;
    /* p_h(j) = softmax_j(scale q_h . k_j) over the document prefix (in sc);
     * p = mean_h p_h (today's teacher), pmax = max_h p_h (the seed's).
     * Per-head sets are measured head by head against p_h: the mass of p_h
     * on head h's attended slots, the recall of its candidates against the
     * top-K of p_h (the seed's per-head Quest protocol, quest_sweep.py), both
     * averaged over heads. */
    double mass_h = 0.0, recall_h = 0.0, mass_seed_h = 0.0;
    memset(p, 0, (size_t)n * sizeof(float));
    memset(pmax, 0, (size_t)n * sizeof(float));
    for (int h = 0; h < nh; h++) {
        float mx = -INFINITY;
        for (int j = 0; j < n; j++) {
            const void *key = kv_cache_key(kv, env->layer, h / g, doc0 + j);
            const float *qh = q_native + (size_t)h * hd;
            sc[j] = scale * ops->dot(qh, key, hd);
            mx = sc[j] > mx ? sc[j] : mx;
        }
        double z = 0.0;
        for (int j = 0; j < n; j++) z += sc[j] = (float)exp((double)sc[j] - mx);
        for (int j = 0; j < n; j++) {
            sc[j] = (float)(sc[j] / z);
            p[j] += sc[j] / (float)nh;
            pmax[j] = sc[j] > pmax[j] ? sc[j] : pmax[j];
        }
        if (!s->per_head) continue;
        const int32_t *ch = cand + (size_t)h * topk;
        double fixed = 0.0, on_cand = 0.0;
        for (int j = 0; j < n; j++)
            if (attended[j]) fixed += sc[j];
        for (int i = 0; i < got[h]; i++) on_cand += sc[ch[i] - doc0];
        mass_h += fixed + on_cand;
        mass_seed_h += on_cand;
        if (kk == 0) {
            recall_h += 1.0;
            continue;
        }
        /* the candidates (all eligible) at or above the K-th largest p_h
         * among the eligible keys (ties counted at most K) */
        for (int e = 0; e < n_elig; e++) s->m_sel[e] = sc[idx[e]];
        const float thr = kth_largest(s->m_sel, n_elig, kk);
        int hit = 0;
        for (int i = 0; i < got[h]; i++) hit += sc[ch[i] - doc0] >= thr;
        recall_h += (double)(hit < kk ? hit : kk) / kk;
    }
    if (s->per_head) {
        s->metrics.mass_sum += mass_h / nh;
        s->metrics.recall_sum += recall_h / nh;
        if (seed_q) { /* kk == topk: the recall above is the seed's too */
            s->metrics.mass_seed_sum += mass_seed_h / nh;
            s->metrics.recall_seed_sum += recall_h / nh;
            s->metrics.n_seed++;
        }
        s->metrics.n_queries++;
        for (int h = 0; h < nh; h++) {
            s->metrics.n_requested += topk;
            s->metrics.n_filler += topk - got[h];
        }
        return SUBQ_OK;
    }
    for (int i = 0; i < got[0]; i++) attended[cand[i] - doc0] = 1;
    double mass = 0.0;
    for (int j = 0; j < n; j++)
        if (attended[j]) mass += p[j];
    s->metrics.mass_sum += mass;
    /* recall: top-K of p among retrieval-eligible keys */
    if (kk > 0) {
        top_by(idx, n_elig, kk, p);
        s->metrics.recall_sum += (double)hits(idx, kk, doc0, cand, got[0]) / kk;
    } else {
        s->metrics.recall_sum += 1.0;
    }
    /* the seed's: only queries with >= K eligible keys; the head mean of the
     * per-head masses on the K candidates (= the mass of p there, as every
     * head attends the same candidates); recall against the top-K of pmax */
    if (seed_q) {
        double ms = 0.0;
        for (int i = 0; i < got[0]; i++) ms += p[cand[i] - doc0];
        top_by(idx, n_elig, topk, pmax);
        s->metrics.mass_seed_sum += ms;
        s->metrics.recall_seed_sum += (double)hits(idx, topk, doc0, cand, got[0]) / topk;
        s->metrics.n_seed++;
    }
    s->metrics.n_queries++;
    s->metrics.n_requested += topk;
    s->metrics.n_filler += topk - got[0];
    if (s->shadow && topk > 0) {
        int ne = selector_query(s->shadow, q_s, q_native, topk, m, s->m_exact);
        if (ne < 0) return subq_fail(err, SUBQ_ERR_NOMEM, "the exact selector beside %s failed (layer %d)",
                                     selector_kind_name(s->p.select.kind), env->layer);
        if (ne > 0) {
            int hit = 0;
            for (int a = 0; a < ne; a++) hit += in_set(cand, got[0], s->m_exact[a]);
            s->metrics.ann_recall_sum += (double)hit / ne;
            s->metrics.n_ann++;
        }
    }
    return SUBQ_OK;
}

/* The query in `slot` attends the sinks [doc0, sink_hi) (first n_sink slots
 * of its document), the tail [tail_lo, slot] (the n_tail most recent slots of
 * its document up to itself) and the candidates a selector returns under m,
 * which never returns sinks or tail, so the three sets are disjoint.
 * Documents are contiguous runs of slots (context_forward refuses segment
 * ids that go down), so m is ranges alone: everything before sink_hi is
 * excluded, and a scan never reads segment ids. */
typedef struct query_window {
    int doc0, sink_hi, tail_lo;
    select_mask m;
} query_window;

static query_window window_of(const sparse_stage *s, const kv_cache *kv, int slot) {
    const int doc0 = kv_cache_doc_start(kv, slot);
    int sink_hi = doc0 + s->p.n_sink < slot + 1 ? doc0 + s->p.n_sink : slot + 1;
    int tail_lo = slot + 1 - s->p.n_tail > sink_hi ? slot + 1 - s->p.n_tail : sink_hi;
    int visible = s->freeze_slot >= 0 && s->freeze_slot < slot + 1 ? s->freeze_slot : slot + 1;
    query_window w = {.doc0 = doc0, .sink_hi = sink_hi, .tail_lo = tail_lo,
                      .m = {.n_slots = visible, .ex0_lo = 0, .ex0_hi = sink_hi, .ex1_lo = tail_lo, .ex1_hi = slot + 1}};
    return w;
}

/* sinks, cand[0 .. got), tail into slots; returns the count */
static int assemble(const query_window *w, int slot, const int32_t *cand, int got, int *slots) {
    int n = 0;
    for (int j = w->doc0; j < w->sink_hi; j++) slots[n++] = j;
    for (int i = 0; i < got; i++) slots[n++] = cand[i];
    for (int j = w->tail_lo; j <= slot; j++) slots[n++] = j;
    return n;
}

/* Slots a query attends to (see query_window), one set for every head.
 * *n_slots receives the count written to `slots`; the candidates are
 * slots[*cand_off .. *cand_off + *n_cand). */
static subq_status gather_slots(sparse_stage *s, const kv_cache *kv, int slot, const float *q_s, const float *q_native,
                                int32_t *cand, int *slots, int *n_slots, int *cand_off, int *n_cand, subq_error *err) {
    const query_window w = window_of(s, kv, slot);
    int got = s->p.top_k > 0 ? selector_query(s->sel, q_s, q_native, s->p.top_k, &w.m, cand) : 0;
    if (got < 0)
        return subq_fail(err, SUBQ_ERR_NOMEM, "selector %s (layer %d): out of memory for a query",
                         selector_kind_name(s->p.select.kind), s->sel->env.layer);
    subq_status rc = s->metrics_on ? measure_query(s, kv, slot, w.doc0, q_s, q_native, &w.m, cand, &got, err) : SUBQ_OK;
    if (rc) return rc;
    for (int i = got; i < s->p.top_k; i++) cand[i] = -1; /* filler: masked out */
    *cand_off = w.sink_hi - w.doc0;
    *n_cand = got;
    *n_slots = assemble(&w, slot, cand, got, slots);
    return SUBQ_OK;
}

/* Per-head selectors: each query head h attends the sinks, its own
 * candidates and the tail (with the completion of the rest, when on). The
 * record keeps head 0's candidates. */
static subq_status attend_per_head(sparse_stage *s, const attn_step *st, const kv_cache *kv, int t, int32_t *rec,
                                   int *slots, float *scores, subq_error *err) {
    const int slot = st->slot0 + t, K = s->p.top_k, hd = st->head_dim, g = st->n_head / st->n_head_kv;
    const float *q = st->q + (size_t)t * st->n_head * hd;
    const query_window w = window_of(s, kv, slot);
    if (selector_query_heads(s->sel, q, K, &w.m, s->hcand, s->hgot) < 0)
        return subq_fail(err, SUBQ_ERR_NOMEM, "selector %s (layer %d): out of memory for a query",
                         selector_kind_name(s->p.select.kind), st->layer);
    subq_status rc = s->metrics_on ? measure_query(s, kv, slot, w.doc0, NULL, q, &w.m, s->hcand, s->hgot, err) : SUBQ_OK;
    if (rc) return rc;
    for (int i = 0; i < K; i++) rec[i] = i < s->hgot[0] ? s->hcand[i] : -1;
    for (int h = 0; h < st->n_head; h++) {
        int ns = assemble(&w, slot, s->hcand + (size_t)h * K, s->hgot[h], slots);
        if (s->comp)
            completion_attend_head(s->comp, kv, slot, q, st->scale, h, slots, ns, w.sink_hi - w.doc0, s->hgot[h],
                                   st->out + (size_t)t * st->n_head * hd, &s->metrics.share_sum,
                                   &s->metrics.n_share);
        else
            attn_group_over_slots(kv, st->layer, h / g, 1, q + (size_t)h * hd, st->scale, slots, ns, scores,
                                  st->out + (size_t)t * st->n_head * hd + (size_t)h * hd);
    }
    return SUBQ_OK;
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

/* SPARSE_PREFILL_BATCH (attn_sparse.h): one batched index query per token
 * over the slots before the batch, then sinks + candidates as the extra
 * slots and the local window as the contiguous range of attn_batch; the
 * batch's keys are indexed afterwards. */
static subq_status sparse_forward_batch(sparse_stage *s, const attn_step *st, const kv_cache *kv, subq_error *err) {
    const int n = st->n_tokens, K = s->p.top_k, n_extra = s->p.n_sink + K;
    int visible = st->slot0;
    if (s->freeze_slot >= 0 && s->freeze_slot < visible) visible = s->freeze_slot;
    int32_t *lo = malloc((size_t)n * sizeof(int32_t));
    int32_t *extra = malloc(((size_t)n * n_extra + 1) * sizeof(int32_t));
    int *doc0 = malloc((size_t)n * sizeof(int)), *got = malloc((size_t)n * sizeof(int));
    select_mask *m = malloc((size_t)n * sizeof(select_mask));
    subq_status rc = !lo || !extra || !doc0 || !got || !m ? subq_fail(err, SUBQ_ERR_NOMEM, "out of memory for sparse prefill")
                                                          : SUBQ_OK;
    for (int t = 0; !rc && t < n; t++) {
        const int slot = st->slot0 + t;
        const int d = kv_cache_doc_start(kv, slot);
        doc0[t] = d;
        const int sink_hi = d + s->p.n_sink < slot + 1 ? d + s->p.n_sink : slot + 1;
        int w = d > st->slot0 ? d : st->slot0; /* the batch's part of the document ... */
        if (slot + 1 - s->p.n_tail < w) w = slot + 1 - s->p.n_tail; /* ... or the tail, whichever reaches further */
        lo[t] = w > sink_hi ? w : sink_hi;
        m[t] = (select_mask){.n_slots = visible, .ex0_lo = 0, .ex0_hi = sink_hi, .ex1_lo = lo[t], .ex1_hi = slot + 1};
    }
    int32_t *cand = s->rec.cand;
    if (!rc && K > 0 &&
        selector_query_batch(s->sel, n, s->d_search > 0 ? s->qs : NULL, st->q, (size_t)st->n_head * st->head_dim, K, m,
                             cand, got, st->n_threads) < 0)
        rc = subq_fail(err, SUBQ_ERR_NOMEM, "selector %s (layer %d): out of memory for a batch of queries",
                       selector_kind_name(s->p.select.kind), s->sel->env.layer);
    for (int t = 0; !rc && t < n; t++) {
        const int slot = st->slot0 + t, k_got = K > 0 ? got[t] : 0;
        int32_t *c = cand + (size_t)t * K, *x = extra + (size_t)t * n_extra;
        if (s->metrics_on)
            rc = measure_query(s, kv, slot, doc0[t], s->d_search > 0 ? s->qs + (size_t)t * s->d_search : NULL,
                               st->q + (size_t)t * st->n_head * st->head_dim, &m[t], c, &k_got, err);
        for (int i = k_got; i < K; i++) c[i] = -1; /* filler: masked out */
        int e = 0;
        for (int j = doc0[t]; j < m[t].ex0_hi; j++) x[e++] = j;
        for (int i = 0; i < K; i++) x[e++] = c[i];
        while (e < n_extra) x[e++] = -1;
    }
    if (!rc) rc = attn_batch(st, kv, lo, extra, n_extra, err);
    if (!rc) rc = append_keys(s, s->d_search > 0 ? s->ks : NULL, n, st->slot0, err);
    free(lo);
    free(extra);
    free(doc0);
    free(got);
    free(m);
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
        project(s, st->h_norm, n, st->n_threads);
    }
    /* the index grows with the cache: every new key is appended, also when
     * this batch itself is attended densely */
    if (n > 1 && s->p.prefill == SPARSE_PREFILL_DENSE) {
        if ((rc = append_keys(s, s->d_search > 0 ? s->ks : NULL, n, st->slot0, err))) return rc;
        for (int t = 0; t < n && s->comp && !rc; t++) rc = completion_advance(s->comp, kv, st->slot0 + t, err);
        if (rc) return rc;
        for (int i = 0; i < n * s->p.top_k; i++) s->rec.cand[i] = -1;
        return attn_full_stage()->forward(attn_full_stage(), st, kv, err);
    }
    if (n > 1 && s->p.prefill == SPARSE_PREFILL_BATCH && !s->comp && !s->per_head)
        return sparse_forward_batch(s, st, kv, err);
    /* Teacher forcing: query t sees exactly the keys of slots <= its own.
     * Appending key t right before query t keeps that true for ANN indexes
     * too, so queries run in slot order. */
    int max_slots = s->p.n_sink + s->p.top_k + s->p.n_tail;
    int *slots = malloc((size_t)max_slots * sizeof(int));
    float *scores = malloc((size_t)max_slots * st->n_head * sizeof(float)); /* per query head */
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
        if (s->per_head) {
            rc = attend_per_head(s, st, kv, t, s->rec.cand + (size_t)t * s->p.top_k, slots, scores, err);
            continue;
        }
        const float *q = st->q + (size_t)t * st->n_head * hd;
        int ns = 0, cand_off = 0, n_cand = 0;
        rc = gather_slots(s, kv, slot, s->d_search > 0 ? s->qs + (size_t)t * s->d_search : NULL, q,
                          s->rec.cand + (size_t)t * s->p.top_k, slots, &ns, &cand_off, &n_cand, err);
        if (rc) break;
        if (s->comp) {
            completion_attend(s->comp, kv, slot, q, st->scale, slots, ns, cand_off, n_cand,
                              st->out + (size_t)t * st->n_head * hd, &s->metrics.share_sum, &s->metrics.n_share);
            continue;
        }
        /* exact softmax of the native q, k, v over the chosen slots, per KV
         * head for its g query heads; the heads' gathers run in parallel so
         * both cores have misses in flight (threads pay off from ~100 rows) */
        const int n_kv = st->n_head_kv;
#pragma omp parallel for num_threads(st->n_threads) schedule(static) if (ns * n_kv >= 512)
        for (int kh = 0; kh < n_kv; kh++)
            attn_group_over_slots(kv, st->layer, kh, g, q + (size_t)kh * g * hd, st->scale, slots, ns,
                                  scores + (size_t)kh * g * ns, st->out + (size_t)t * st->n_head * hd + (size_t)kh * g * hd);
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
    free(s->m_p);
    free(s->m_pmax);
    free(s->m_sc);
    free(s->m_sel);
    free(s->m_idx);
    free(s->m_att);
    free(s->m_exact);
    free(s->qs);
    free(s->ks);
    free(s->hcand);
    free(s->hgot);
    free(s);
}

static subq_status completion_replay(sparse_stage *s, const kv_cache *kv, int n, subq_error *err);

/* Forget slots n_keep..: the index is truncated, the completion's summary
 * rebuilt from the kept slots of kv (O(n_keep) feature maps). */
static subq_status sparse_truncate(attn_stage *st, const kv_cache *kv, int n_keep, subq_error *err) {
    sparse_stage *s = (sparse_stage *)st;
    int keys = s->freeze_slot >= 0 && s->freeze_slot < n_keep ? s->freeze_slot : n_keep;
    subq_status rc = selector_truncate(s->sel, keys, err);
    if (!rc && s->shadow) rc = selector_truncate(s->shadow, keys, err);
    if (!rc) rc = completion_replay(s, kv, n_keep, err);
    s->rec.n_tokens = 0;
    return rc;
}

subq_status attn_sparse_new(const sparse_params *p, const float *wq_s, const float *wk_s, int n_embd,
                            const selector_env *env, attn_stage **out, subq_error *err) {
    *out = NULL;
    if (p->top_k < 0 || p->n_sink < 0 || p->n_tail < 0 || p->top_k + p->n_sink + p->n_tail < 1)
        return subq_fail(err, SUBQ_ERR_ARG, "invalid sparse attention plan (topk %d, sink %d, tail %d; none may be "
                         "negative, and a query must attend at least one key)", p->top_k, p->n_sink, p->n_tail);
    int needs_search = selector_kind_needs_search(p->select.kind);
    if (needs_search && (!wq_s || !wk_s || p->select.d_search <= 0))
        return subq_fail(err, SUBQ_ERR_ARG, "selector '%s' needs search projections for layer %d",
                         selector_kind_name(p->select.kind), env->layer);
    sparse_stage *s = calloc(1, sizeof *s);
    if (!s) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    s->base.name = sparse_name;
    s->base.forward = sparse_forward;
    s->base.reset = sparse_reset;
    s->base.free = sparse_free;
    s->base.truncate = sparse_truncate;
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
    if ((s->per_head = selector_per_head(s->sel))) {
        s->hcand = malloc((size_t)env->n_head * (size_t)(p->top_k > 0 ? p->top_k : 1) * sizeof(int32_t));
        s->hgot = malloc((size_t)env->n_head * sizeof(int));
        if (!s->hcand || !s->hgot) {
            sparse_free(&s->base);
            return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
        }
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

int attn_sparse_rows_attended(const attn_stage *st, int n_keys) {
    if (!st || st->name != sparse_name || n_keys <= 0) return n_keys > 0 ? n_keys : 0;
    const sparse_stage *s = (const sparse_stage *)st;
    const int n = s->p.n_sink + s->p.n_tail + s->p.top_k;
    return n < n_keys ? n : n_keys;
}

const sparse_record *attn_sparse_record(attn_stage *st) {
    return st && st->name == sparse_name ? &((sparse_stage *)st)->rec : NULL;
}

subq_status attn_sparse_enable_metrics(attn_stage *st, subq_error *err) {
    if (!st || st->name != sparse_name) return SUBQ_OK;
    sparse_stage *s = (sparse_stage *)st;
    s->metrics_on = 1;
    if (!s->shadow && selector_params_approximate(&s->p.select)) {
        /* the reference: a full f32 scan by the same score */
        selector_params ep;
        selector_params_default(&ep, SELECT_EXACT, s->d_search);
        ep.score = s->p.select.score;
        return selector_new(&ep, &s->sel->env, &s->shadow, err);
    }
    return SUBQ_OK;
}

const sparse_metrics *attn_sparse_get_metrics(attn_stage *st) {
    return st && st->name == sparse_name ? &((sparse_stage *)st)->metrics : NULL;
}

void sparse_metrics_add(sparse_metrics *dst, const sparse_metrics *src) {
    dst->mass_sum += src->mass_sum;
    dst->recall_sum += src->recall_sum;
    dst->ann_recall_sum += src->ann_recall_sum;
    dst->n_queries += src->n_queries;
    dst->n_ann += src->n_ann;
    dst->n_requested += src->n_requested;
    dst->n_filler += src->n_filler;
    dst->mass_seed_sum += src->mass_seed_sum;
    dst->recall_seed_sum += src->recall_seed_sum;
    dst->n_seed += src->n_seed;
    dst->share_sum += src->share_sum;
    dst->n_share += src->n_share;
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
             "sparse %s k=%d sink=%d tail=%d prefill=%d d=%d score=%s scan=%s f16=%d m=%d efc=%d efs=%d "
             "page=%d qhm=%d oracle=%d seed=%" PRIu64 " proj=%016" PRIx64 " complete=%016" PRIx64,
             selector_kind_name(sp->kind), s->p.top_k, s->p.n_sink, s->p.n_tail, (int)s->p.prefill, s->d_search,
             select_score_name(sp->score), select_scan_name(sp->scan), sp->f16_keys, sp->hnsw_m,
             sp->hnsw_ef_construction, sp->hnsw_ef_search, sp->quest_page, sp->quest_headmean, (int)sp->oracle,
             sp->seed, proj,
             s->comp ? completion_hash(s->comp) : 0);
}
