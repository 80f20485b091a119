#include "sparse/attn_sparse.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sparse/sparse_metrics.h"
#include "base/error.h"
#include "base/fingerprint.h"
#include "complete/completion.h"
#include "kernels/kernels.h"
#include "model/matmul.h"

typedef struct sparse_stage {
    attn_stage base;            /* first member: the stage is cast back from it */
    sparse_params p;
    const float *wq_s, *wk_s;   /* [dq_row][n_embd], [dk_row][n_embd] or NULL */
    int n_embd, d_search;       /* d_search: of one search head */
    int dq_row, dk_row;         /* a token's search query / key row: its heads' d_search each */
    search_rope rope;           /* the rotary part of the search space (n_rot 0: none) */
    selector *sel;
    sparse_record rec;
    int rec_cap;                /* tokens the record can hold */
    float *qs, *ks;             /* search vectors of the current batch */
    int late_slot0, late_n;     /* keys of slots late_slot0.. that ks still holds, for
                                   index_late; late_n 0: none */
    int freeze_slot;            /* static-index mode, -1 = off */
    sparse_probe probe;         /* the retrieval metrics of subq eval (sparse_metrics.c) */
    attn_completion *comp;      /* NULL: selection only */
    int per_head;               /* the selector picks one set per query head */
    int32_t *hcand;             /* its sets: [n_head][top_k] */
    int *hgot;                  /* [n_head] */
    int32_t *far_dist, *far_shift; /* a query's slots: their distances and turns (attn_far.h) */
    int64_t *far_order;
} sparse_stage;

static const char *sparse_name = "sparse";

/* The batch's search keys and queries: ks[t] = R(pos_t) W_Ks h_t, qs[t] =
 * R(pos_t) W_Qs h_t (W [d_search][n_embd], f32; R the rotary part, at the
 * slots' positions). Through matmul: a decode step's few tokens as row dot
 * products across the threads, batches through sgemm (which on one row
 * first packs W on one thread: 2.7 ms of a 45 ms step at 32K over 24
 * layers, for 0.4 ms of reads). */
static void project(sparse_stage *s, const kv_cache *kv, int slot0, const float *H, int n, pool *p) {
    matrix wk = {.type = GGML_TYPE_F32, .rows = s->dk_row, .cols = s->n_embd,
                 .row_bytes = (size_t)s->n_embd * sizeof(float)};
    matrix wq = wk;
    wk.data = s->wk_s;
    wq.data = s->wq_s;
    wq.rows = s->dq_row;
    matmul(s->ks, H, &wk, n, NULL, p);
    matmul(s->qs, H, &wq, n, NULL, p);
    search_rope_rotate_rows_heads(&s->rope, s->d_search, kv->pos + slot0, n, s->ks, s->dk_row / s->d_search, s->qs,
                                  s->dq_row / s->d_search, 0, p);
}

static subq_status ensure_buffers(sparse_stage *s, int n, subq_error *err) {
    if (n <= s->rec_cap) return SUBQ_OK;
    /* at least one entry: realloc to 0 bytes would free the old buffer */
    int32_t *cand = realloc(s->rec.cand, (size_t)n * (size_t)(s->p.select.plan.top_k > 0 ? s->p.select.plan.top_k : 1) *
                                             sizeof(int32_t));
    if (!cand) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory for candidate sets");
    s->rec.cand = cand;
    if (s->d_search > 0) {
        float *qs = realloc(s->qs, (size_t)n * s->dq_row * sizeof(float));
        if (qs) s->qs = qs;
        float *ks = realloc(s->ks, (size_t)n * s->dk_row * sizeof(float));
        if (ks) s->ks = ks;
        if (!qs || !ks) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory for search vectors");
    }
    s->rec_cap = n;
    return SUBQ_OK;
}

/* Metric buffers for batches of up to n tokens. */
/* The teacher's figures of the batch's queries (sparse_metrics.c), from the
 * documents, masks and candidates noted while they were attended. */
static subq_status measure_batch(sparse_stage *s, const attn_step *st, const kv_cache *kv, const int *doc0,
                                 const select_mask *mask, const int32_t *cand, subq_error *err) {
    const sparse_measure b = {
        .layer = st->layer, .n_tokens = st->n_tokens, .slot0 = st->slot0, .n_head = st->n_head,
        .n_head_kv = st->n_head_kv, .head_dim = st->head_dim, .top_k = s->p.select.plan.top_k, .scale = st->scale,
        .per_head = s->per_head, .q = st->q, .doc0 = doc0, .mask = mask, .cand = cand, .pool = st->pool,
    };
    return sparse_metrics_measure(&b, kv, &s->probe.totals, err);
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

/* The first slot of the document of `slot` (from doc0) within far.from of
 * it: the ones before are far (doc0 when none is; positions rise along a
 * document). */
static int far_boundary(const sparse_stage *s, const kv_cache *kv, int doc0, int slot) {
    if (s->p.far.scheme == SUBQ_FAR_NONE || kv->pos[slot] - kv->pos[doc0] <= s->p.far.from) return doc0;
    int lo = doc0, hi = slot; /* pos[slot] - pos[lo] > from >= pos[slot] - pos[hi] */
    while (hi - lo > 1) {
        const int mid = lo + (hi - lo) / 2;
        if (kv->pos[slot] - kv->pos[mid] > s->p.far.from) lo = mid;
        else hi = mid;
    }
    return hi;
}

static query_window window_of(const sparse_stage *s, const kv_cache *kv, int slot) {
    const int doc0 = kv_cache_doc_start(kv, slot);
    int sink_hi = doc0 + s->p.select.plan.n_sink < slot + 1 ? doc0 + s->p.select.plan.n_sink : slot + 1;
    int tail_lo = slot + 1 - s->p.select.plan.n_tail > sink_hi ? slot + 1 - s->p.select.plan.n_tail : sink_hi;
    int visible = s->freeze_slot >= 0 && s->freeze_slot < slot + 1 ? s->freeze_slot : slot + 1;
    const int far_hi = far_boundary(s, kv, doc0, slot);
    query_window w = {.doc0 = doc0, .sink_hi = sink_hi, .tail_lo = tail_lo,
                      .m = {.n_slots = visible, .ex0_lo = 0, .ex0_hi = sink_hi, .ex1_lo = tail_lo, .ex1_hi = slot + 1,
                            .far_hi = far_hi > doc0 ? far_hi : 0, .far_at = kv->pos[slot] - s->p.far.from}};
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

/* Whether the step's far keys move: a far scheme on a layer with RoPE. */
static int far_on(const sparse_stage *s, const attn_step *st) {
    return s->p.far.scheme != SUBQ_FAR_NONE && st->rope && st->rope->n_rot > 0;
}

/* The turns of the n slots the query in `slot` attends (attn_far.h), in
 * s->far_shift: the first n_placed (sinks and retrieved keys) as the
 * scheme places them, the rest (the tail, its local window) as they are;
 * NULL when none is far. */
static const int32_t *far_shifts(sparse_stage *s, const attn_step *st, const kv_cache *kv, int slot, const int *slots,
                                 int n, int n_placed) {
    if (!far_on(s, st)) return NULL;
    attn_far_distances(kv, slot, slots, n_placed, s->far_dist);
    for (int j = n_placed; j < n; j++) s->far_shift[j] = 0;
    return attn_far_shifts(&s->p.far, s->far_dist, n_placed, n - n_placed, s->far_shift, s->far_order) ? s->far_shift
                                                                                                    : NULL;
}

/* Slots a query attends to (see query_window), one set for every head.
 * *n_slots receives the count written to `slots`; the candidates are
 * slots[*cand_off .. *cand_off + *n_cand). */
static subq_status gather_slots(sparse_stage *s, const kv_cache *kv, int t, int slot, const float *q_s,
                                const float *q_native, const float *k_next, pool *p, int32_t *cand, int *slots,
                                int *n_slots, int *cand_off, int *n_cand, subq_error *err) {
    const query_window w = window_of(s, kv, slot);
    int got = s->p.select.plan.top_k > 0 ? selector_query_ahead(s->sel, q_s, q_native, s->p.select.plan.top_k, &w.m,
                                                                cand, k_next, slot, p)
                                         : 0;
    if (got < 0)
        return subq_fail(err, SUBQ_ERR_NOMEM, "selector %s (layer %d): out of memory for a query",
                         selector_kind_name(s->p.select.plan.selector), s->sel->env.layer);
    if (s->probe.on) {
        s->probe.doc0[t] = w.doc0, s->probe.mask[t] = w.m;
        subq_status rc = sparse_probe_count(&s->probe, q_s, q_native, &w.m, s->p.select.plan.top_k, cand, got,
                                            s->sel->env.layer, err);
        if (rc) return rc;
    }
    for (int i = got; i < s->p.select.plan.top_k; i++) cand[i] = -1; /* filler: masked out */
    *cand_off = w.sink_hi - w.doc0;
    *n_cand = got;
    *n_slots = assemble(&w, slot, cand, got, slots);
    if (s->probe.on) s->probe.totals.rows_sum += *n_slots, s->probe.totals.n_rows++;
    return SUBQ_OK;
}

/* Per-head selectors: each query head h attends the sinks, its own
 * candidates and the tail (with the completion of the rest, when on). The
 * record keeps head 0's candidates. */
static subq_status attend_per_head(sparse_stage *s, const attn_step *st, const kv_cache *kv, int t, int32_t *rec,
                                   int *slots, float *scores, subq_error *err) {
    const int slot = st->slot0 + t, K = s->p.select.plan.top_k, hd = st->head_dim, g = st->n_head / st->n_head_kv;
    const float *q = st->q + (size_t)t * st->n_head * hd;
    const query_window w = window_of(s, kv, slot);
    const float *q_s = s->d_search > 0 ? s->qs + (size_t)t * s->dq_row : NULL;
    if (selector_query_heads(s->sel, q_s, q, K, &w.m, s->hcand, s->hgot) < 0)
        return subq_fail(err, SUBQ_ERR_NOMEM, "selector %s (layer %d): out of memory for a query",
                         selector_kind_name(s->p.select.plan.selector), st->layer);
    for (int i = 0; i < K; i++) rec[i] = i < s->hgot[0] ? s->hcand[i] : -1;
    if (s->probe.on) {
        s->probe.doc0[t] = w.doc0, s->probe.mask[t] = w.m;
        sparse_probe_heads(&s->probe, t, st->n_head, K, s->hcand, s->hgot);
        sparse_probe_rows(&s->probe, st->n_head, st->n_head_kv, K, s->hcand, s->hgot,
                          (w.sink_hi - w.doc0) + (slot + 1 - w.tail_lo));
    }
    /* a group's one set (selector_group_set): its rows read once for its g heads */
    const int gs = !s->comp && selector_group_set(s->sel) ? g : 1;
    for (int h = 0; h < st->n_head; h += gs) {
        int ns = assemble(&w, slot, s->hcand + (size_t)h * K, s->hgot[h], slots);
        if (s->comp)
            completion_attend_head(s->comp, kv, slot, q, st->scale, h, slots, ns, w.sink_hi - w.doc0, s->hgot[h],
                                   st->out + (size_t)t * st->n_head * hd, &s->probe.totals.share_sum,
                                   &s->probe.totals.n_share);
        else
            attn_group_over_slots(kv, st->layer, h / g, gs, q + (size_t)h * hd, st->scale, st->softcap, slots, ns,
                                  st->rope, far_shifts(s, st, kv, slot, slots, ns, w.sink_hi - w.doc0 + s->hgot[h]),
                                  scores,
                                  st->out + (size_t)t * st->n_head * hd + (size_t)h * hd);
    }
    return SUBQ_OK;
}

/* Search keys of slots slot0.. into the KV file, if any, which holds them
 * in stored form (the file is the session). */
static void file_keys(sparse_stage *s, const kv_cache *kv, const float *ks, int n, int slot0) {
    int d_file = 0;
    float *rows = kv->file && ks ? kv_file_search_rows(kv->file, s->sel->env.layer, &d_file) : NULL;
    for (int i = 0; rows && d_file == s->dk_row && i < n; i++)
        selector_stored_form(s->sel, ks + (size_t)i * d_file, rows + (size_t)(slot0 + i) * d_file);
}

/* The same keys into the index (and the shadow), except in static-index
 * mode past the freeze point. */
static subq_status index_keys(sparse_stage *s, const float *ks, int n, int slot0, subq_error *err) {
    if (s->freeze_slot >= 0) {
        if (slot0 >= s->freeze_slot) return SUBQ_OK;
        if (slot0 + n > s->freeze_slot) n = s->freeze_slot - slot0;
    }
    subq_status rc = selector_append(s->sel, ks, n, slot0, err);
    if (!rc && s->probe.shadow) rc = selector_append(s->probe.shadow, ks, n, slot0, err);
    return rc;
}

static subq_status append_keys(sparse_stage *s, const kv_cache *kv, const float *ks, int n, int slot0,
                               subq_error *err) {
    file_keys(s, kv, ks, n, slot0);
    return index_keys(s, ks, n, slot0, err);
}

/* Whether the stage's inserts are graph inserts (hnsw, faiss): each a
 * search and relinking (~0.3 ms a layer at 32K), so the forward runs them
 * once every layer has attended, all layers across its threads
 * (index_late), wherever no query of the forward needs them: a batch
 * attended densely or retrieving among the slots before it, and a
 * one-token forward (index_after_query). */
static int index_is_graph(const sparse_stage *s) {
    return s->d_search > 0 && selector_kind_is_ann(s->p.select.plan.selector);
}

/* The batch's keys, slots slot0 .. slot0 + n - 1, into the KV file now and
 * into the index now, or for a graph index by index_late (ks holds them
 * until then). */
static subq_status append_batch_keys(sparse_stage *s, const kv_cache *kv, int n, int slot0, subq_error *err) {
    const float *ks = s->d_search > 0 ? s->ks : NULL;
    if (!index_is_graph(s)) return append_keys(s, kv, ks, n, slot0, err);
    file_keys(s, kv, ks, n, slot0);
    s->late_slot0 = slot0;
    s->late_n = n;
    return SUBQ_OK;
}

/* Whether a query's own key goes into a graph index after the query: a
 * one-token forward then leaves it to index_late; a batch taken token by
 * token inserts each key right after its query, so every query searches
 * the graph of the keys before its own, in decode and in evaluation alike.
 * The query never needed its own key from the index: the tail (n_tail >=
 * 1) holds it. */
static int index_after_query(const sparse_stage *s) {
    return index_is_graph(s) && s->p.select.plan.n_tail >= 1;
}

/* A batch at once: one batched index query, then sinks + candidates as the
 * extra slots and a contiguous range of attn_batch for each query.
 *   SUBQ_PREFILL_SPARSE (attn_sparse.h): queries retrieve among the slots
 *     before the batch; the range is the batch's part of the document (or
 *     the tail, if longer); the batch's keys are indexed afterwards.
 *   teacher: TOKEN mode for the selectors teacher_batchable admits: the
 *     batch's keys are indexed first, every query retrieves among the slots
 *     up to its own, and the range is its tail. */
static subq_status sparse_forward_batch(sparse_stage *s, const attn_step *st, const kv_cache *kv, int teacher,
                                        subq_error *err) {
    const int n = st->n_tokens, K = s->p.select.plan.top_k, n_extra = s->p.select.plan.n_sink + K;
    const int H = s->per_head ? st->n_head : 1; /* sets a token: one per query head for per-head selectors */
    /* lists a token for attention: one a KV head when a group shares its set */
    const int HL = H > 1 && selector_group_set(s->sel) ? st->n_head_kv : H, g = st->n_head / st->n_head_kv;
    subq_status rc = teacher ? append_keys(s, kv, s->d_search > 0 ? s->ks : NULL, n, st->slot0, err) : SUBQ_OK;
    if (rc) return rc;
    int visible = st->slot0;
    if (s->freeze_slot >= 0 && s->freeze_slot < visible) visible = s->freeze_slot;
    int32_t *lo = malloc((size_t)n * sizeof(int32_t));
    int32_t *extra = malloc(((size_t)n * HL * n_extra + 1) * sizeof(int32_t));
    int *doc0 = malloc((size_t)n * sizeof(int)), *got = malloc((size_t)n * H * sizeof(int));
    select_mask *m = malloc((size_t)n * sizeof(select_mask));
    int32_t *cand = H > 1 ? malloc(((size_t)n * H * K + 1) * sizeof(int32_t)) : s->rec.cand; /* [n][H][K] */
    if (!lo || !extra || !doc0 || !got || !m || !cand)
        rc = subq_fail(err, SUBQ_ERR_NOMEM, "out of memory for sparse attention");
    for (int t = 0; !rc && t < n; t++) {
        const int slot = st->slot0 + t;
        if (teacher) {
            const query_window w = window_of(s, kv, slot);
            doc0[t] = w.doc0, m[t] = w.m, lo[t] = w.tail_lo;
            continue;
        }
        const int d = kv_cache_doc_start(kv, slot);
        doc0[t] = d;
        const int sink_hi = d + s->p.select.plan.n_sink < slot + 1 ? d + s->p.select.plan.n_sink : slot + 1;
        int w = d > st->slot0 ? d : st->slot0; /* the batch's part of the document ... */
        if (slot + 1 - s->p.select.plan.n_tail < w)
            w = slot + 1 - s->p.select.plan.n_tail; /* ... or the tail, whichever reaches further */
        const int far_hi = far_boundary(s, kv, d, slot);
        if (far_on(s, st) && w < far_hi) w = far_hi; /* ... within far.from: the window is never far */
        lo[t] = w > sink_hi ? w : sink_hi;
        m[t] = (select_mask){.n_slots = visible, .ex0_lo = 0, .ex0_hi = sink_hi, .ex1_lo = lo[t], .ex1_hi = slot + 1,
                             .far_hi = far_hi > d ? far_hi : 0, .far_at = kv->pos[slot] - s->p.far.from};
    }
    const size_t q_stride = (size_t)st->n_head * st->head_dim;
    const float *qs = s->d_search > 0 ? s->qs : NULL;
    if (!rc && K > 0 &&
        (H > 1 ? selector_query_heads_prefill(s->sel, n, qs, st->q, q_stride, K, m, cand, got, st->n_threads)
               : (teacher ? selector_query_batch : selector_query_prefill)(s->sel, n, qs, st->q, q_stride, K, m, cand,
                                                                            got, st->n_threads)) < 0)
        rc = subq_fail(err, SUBQ_ERR_NOMEM, "selector %s (layer %d): out of memory for a batch of queries",
                       selector_kind_name(s->p.select.plan.selector), s->sel->env.layer);
    for (int t = 0; !rc && t < n; t++)
        for (int l = 0; l < HL; l++) { /* sinks, then the set (fillers -1): list l, a query head's or a group's */
            const size_t L = (size_t)t * H + (HL < H ? l * g : l);
            const int k_got = K > 0 ? got[L] : 0;
            int32_t *c = cand + L * K, *x = extra + ((size_t)t * HL + l) * n_extra;
            if (s->probe.on) /* (per-head stages are not probed in batches: sparse_forward) */
                rc = sparse_probe_count(&s->probe, qs ? qs + (size_t)t * s->dq_row : NULL, st->q + (size_t)t * q_stride,
                                        &m[t], K, c, k_got, st->layer, err);
            for (int i = k_got; i < K; i++) c[i] = -1; /* filler: masked out */
            int e = 0;
            for (int j = doc0[t]; j < m[t].ex0_hi; j++) x[e++] = j;
            for (int i = 0; i < K; i++) x[e++] = c[i];
            while (e < n_extra) x[e++] = -1;
            if (s->probe.on) { /* sinks, candidates and the range lo[t] .. slot */
                s->probe.totals.rows_sum += (m[t].ex0_hi - doc0[t]) + k_got + (st->slot0 + t + 1 - lo[t]);
                s->probe.totals.n_rows++;
            }
        }
    for (int t = 0; !rc && H > 1 && t < n; t++) /* the record keeps query head 0's set */
        memcpy(s->rec.cand + (size_t)t * K, cand + (size_t)t * H * K, (size_t)K * sizeof(int32_t));
    if (!rc && s->probe.on) rc = measure_batch(s, st, kv, doc0, m, cand, err);
    attn_step far_step = *st; /* sinks and candidates beyond far.from at the distance it gives them */
    if (far_on(s, st)) far_step.far = s->p.far;
    if (!rc) rc = attn_batch(&far_step, kv, lo, extra, n_extra, HL, err);
    if (!rc && !teacher) rc = append_batch_keys(s, kv, n, st->slot0, err);
    if (H > 1) free(cand);
    free(lo);
    free(extra);
    free(doc0);
    free(got);
    free(m);
    return rc;
}

/* One query's exact softmax over its slots for KV head kh's g query heads
 * (a pool chunk: the heads' gathers in parallel). */
typedef struct group_job {
    const attn_step *st;
    const kv_cache *kv;
    int g, ns;
    const float *q;
    const int *slots;
    const int32_t *shift;
    float *scores, *out;
} group_job;

static void attend_group(void *ctx, int kh, int thread) {
    const group_job *j = ctx;
    const int hd = j->st->head_dim;
    attn_group_over_slots(j->kv, j->st->layer, kh, j->g, j->q + (size_t)kh * j->g * hd, j->st->scale, j->st->softcap,
                          j->slots, j->ns, j->st->rope, j->shift, j->scores + (size_t)kh * j->g * j->ns,
                          j->out + (size_t)kh * j->g * hd);
}

/* Whether a query of the batch slot0 .. slot0 + n - 1 sees a key of its
 * document farther than far.from (the document's first key is its farthest). */
static int batch_reaches_far(const sparse_stage *s, const kv_cache *kv, int slot0, int n) {
    for (int t = 0; t < n; t++) {
        const int slot = slot0 + t;
        if (kv->pos[slot] - kv->pos[kv_cache_doc_start(kv, slot)] > s->p.far.from) return 1;
    }
    return 0;
}

/* TOKEN mode in one batch (attn_sparse.h): for selectors whose answer
 * under a mask does not depend on the keys the mask hides (the exact scan
 * while it reads the keys, not codes, for every key the cache can hold). */
static int teacher_batchable(const sparse_stage *s) {
    const selector_params *sp = &s->p.select;
    const kv_cache *kv = s->sel->env.kv;
    const int64_t codes_from = selector_scan_codes_from(sp);
    return !s->comp && !s->per_head &&
           ((sp->plan.selector == SUBQ_SELECT_EXACT && (codes_from == INT64_MAX || (kv && kv->n_ctx < codes_from))) ||
            sp->plan.selector == SUBQ_SELECT_ORACLE || sp->plan.selector == SUBQ_SELECT_WINDOW);
}

/* Query t of a batch taken token by token, with one set for every head:
 * its slots (gather_slots), then attention over them. k_next: the key of
 * the query's own slot, whose insert-time search a graph index may do
 * beside the query (selector_query_ahead), or NULL. */
static subq_status attend_token(sparse_stage *s, const attn_step *st, const kv_cache *kv, int t, const float *k_next,
                                int *slots, float *scores, subq_error *err) {
    const int slot = st->slot0 + t, hd = st->head_dim;
    const float *q = st->q + (size_t)t * st->n_head * hd;
    float *out = st->out + (size_t)t * st->n_head * hd;
    int ns = 0, cand_off = 0, n_cand = 0;
    subq_status rc = gather_slots(s, kv, t, slot, s->d_search > 0 ? s->qs + (size_t)t * s->dq_row : NULL, q, k_next,
                                  st->pool, s->rec.cand + (size_t)t * s->p.select.plan.top_k, slots, &ns, &cand_off,
                                  &n_cand, err);
    if (rc) return rc;
    if (kv->prefetch) kv_cache_prefetch(kv, st->layer, slots, ns);
    if (s->comp) {
        completion_attend(s->comp, kv, slot, q, st->scale, slots, ns, cand_off, n_cand, out,
                          &s->probe.totals.share_sum, &s->probe.totals.n_share);
        return SUBQ_OK;
    }
    /* exact softmax of the native q, k, v over the chosen slots, per KV
     * head for its g query heads; the heads' gathers run in parallel so
     * both cores have misses in flight (threads pay off from ~100 rows) */
    group_job gj = {.st = st, .kv = kv, .g = st->n_head / st->n_head_kv, .q = q, .slots = slots, .ns = ns,
                    .shift = far_shifts(s, st, kv, slot, slots, ns, cand_off + n_cand), .scores = scores, .out = out};
    pool_run(ns * st->n_head_kv >= 512 ? st->pool : NULL, st->n_head_kv, attend_group, &gj);
    return SUBQ_OK;
}

static subq_status sparse_forward(attn_stage *self, const attn_step *st, const kv_cache *kv, subq_error *err) {
    sparse_stage *s = (sparse_stage *)self;
    const int n = st->n_tokens;
    s->late_n = 0; /* keys left by a forward that failed before index_late: their slots come again */
    /* a sliding layer reads a bounded window already; the plans leave it
     * dense (attn_plan), and completion's maps know no soft cap */
    if (st->window > 0)
        return subq_fail(err, SUBQ_ERR_ARG, "layer %d attends to a sliding window of %d keys: sparse attention "
                         "applies to the global layers", st->layer, st->window);
    if (st->softcap > 0.0f && s->comp)
        return subq_fail(err, SUBQ_ERR_UNSUPPORTED, "layer %d soft-caps its attention scores, which completion "
                         "does not model: use sparse attention without completion", st->layer);
    subq_status rc = ensure_buffers(s, n, err);
    if (!rc && s->probe.on)
        rc = sparse_probe_reserve(&s->probe, n, st->n_head, s->p.select.plan.top_k, s->per_head, err);
    if (rc) return rc;
    s->rec.n_tokens = n;
    s->rec.top_k = s->p.select.plan.top_k;
    if (s->d_search > 0) {
        project(s, kv, st->slot0, st->h_norm, n, st->pool);
    }
    if (s->p.dense_near && !batch_reaches_far(s, kv, st->slot0, n)) { /* a dense layer, nothing far yet */
        if ((rc = append_keys(s, kv, NULL, n, st->slot0, err))) return rc;
        for (int i = 0; i < n * s->p.select.plan.top_k; i++) s->rec.cand[i] = -1;
        return attn_full_stage()->forward(attn_full_stage(), st, kv, err);
    }
    /* the index grows with the cache: every new key is appended, also when
     * this batch itself is attended densely */
    if (n > 1 && s->p.select.plan.sparse_prefill == SUBQ_PREFILL_DENSE) {
        if ((rc = append_batch_keys(s, kv, n, st->slot0, err))) return rc;
        for (int t = 0; t < n && s->comp && !rc; t++) rc = completion_advance(s->comp, kv, st->slot0 + t, err);
        if (rc) return rc;
        for (int i = 0; i < n * s->p.select.plan.top_k; i++) s->rec.cand[i] = -1;
        return attn_full_stage()->forward(attn_full_stage(), st, kv, err);
    }
    if (n > 1 && s->p.select.plan.sparse_prefill == SUBQ_PREFILL_SPARSE && !s->comp && !(s->per_head && s->probe.on))
        return sparse_forward_batch(s, st, kv, 0, err);
    if (n > 1 && s->p.select.plan.sparse_prefill == SUBQ_PREFILL_TOKENWISE && teacher_batchable(s))
        return sparse_forward_batch(s, st, kv, 1, err);
    /* Teacher forcing: query t sees exactly the keys of slots <= its own:
     * key t goes into the index right before query t (graph indexes: right
     * after it, index_after_query), so queries run in slot order. */
    int max_slots = s->p.select.plan.n_sink + s->p.select.plan.top_k + s->p.select.plan.n_tail;
    int *slots = malloc((size_t)max_slots * sizeof(int));
    float *scores = malloc((size_t)max_slots * st->n_head * sizeof(float)); /* per query head */
    if (!slots || !scores) {
        free(slots);
        free(scores);
        return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory for sparse attention");
    }
    const int late = index_after_query(s);
    /* a one-token forward leaves its key to index_late: the key's insert-time
     * search can run beside this query, on the thread that would wait
     * (the evaluation's probes read the index alone: not there) */
    const int ahead = late && n == 1 && !s->probe.on && (s->freeze_slot < 0 || st->slot0 < s->freeze_slot);
    for (int t = 0; t < n && !rc; t++) {
        const int slot = st->slot0 + t;
        const float *ks = s->d_search > 0 ? s->ks + (size_t)t * s->dk_row : NULL;
        if (late) file_keys(s, kv, ks, 1, slot);
        else rc = append_keys(s, kv, ks, 1, slot, err);
        if (!rc && s->comp) rc = completion_advance(s->comp, kv, slot, err);
        if (!rc)
            rc = s->per_head ? attend_per_head(s, st, kv, t, s->rec.cand + (size_t)t * s->p.select.plan.top_k, slots,
                                               scores, err)
                             : attend_token(s, st, kv, t, ahead ? ks : NULL, slots, scores, err);
        if (!rc && late) {
            if (n == 1) { /* ks stays until the forward's index_late */
                s->late_slot0 = slot;
                s->late_n = 1;
            } else {
                rc = index_keys(s, ks, 1, slot, err);
            }
        }
    }
    free(slots);
    free(scores);
    if (!rc && s->probe.on)
        rc = measure_batch(s, st, kv, s->probe.doc0, s->probe.mask, s->per_head ? s->probe.hcand : s->rec.cand, err);
    return rc;
}

static void sparse_reset(attn_stage *self) {
    sparse_stage *s = (sparse_stage *)self;
    selector_reset(s->sel);
    if (s->probe.shadow) selector_reset(s->probe.shadow);
    if (s->comp) completion_reset(s->comp);
    s->rec.n_tokens = 0;
    s->late_n = 0;
}

static void sparse_free(attn_stage *self) {
    sparse_stage *s = (sparse_stage *)self;
    selector_free(s->sel);
    sparse_probe_free(&s->probe);
    completion_free(s->comp);
    free(s->rec.cand);
    free(s->qs);
    free(s->ks);
    free(s->hcand);
    free(s->hgot);
    free(s->far_dist);
    free(s->far_shift);
    free(s->far_order);
    free(s);
}

static subq_status completion_replay(sparse_stage *s, const kv_cache *kv, int n, subq_error *err);

/* Forget slots n_keep..: the index is truncated, the completion's summary
 * rebuilt from the kept slots of kv (O(n_keep) feature maps). */
static subq_status sparse_truncate(attn_stage *st, const kv_cache *kv, int n_keep, subq_error *err) {
    sparse_stage *s = (sparse_stage *)st;
    int keys = s->freeze_slot >= 0 && s->freeze_slot < n_keep ? s->freeze_slot : n_keep;
    subq_status rc = selector_truncate(s->sel, keys, err);
    if (!rc && s->probe.shadow) rc = selector_truncate(s->probe.shadow, keys, err);
    if (!rc) rc = completion_replay(s, kv, n_keep, err);
    s->rec.n_tokens = 0;
    s->late_n = 0;
    return rc;
}

selector *attn_sparse_selector(attn_stage *st) {
    return st && st->name == sparse_name ? ((sparse_stage *)st)->sel : NULL;
}

static int sparse_has_completion(const attn_stage *st) { return ((const sparse_stage *)st)->comp != NULL; }

static int sparse_rows_attended(const attn_stage *st, int n_keys) {
    const sparse_stage *s = (const sparse_stage *)st;
    const int n = s->p.select.plan.n_sink + s->p.select.plan.n_tail + s->p.select.plan.top_k;
    return n < n_keys ? n : n_keys;
}

static int sparse_reads_scattered(const attn_stage *st) { return ((const sparse_stage *)st)->p.select.plan.top_k > 0; }

const sparse_record *attn_sparse_record(attn_stage *st) {
    return st && st->name == sparse_name ? &((sparse_stage *)st)->rec : NULL;
}

static subq_status sparse_enable_metrics(attn_stage *st, subq_error *err) {
    sparse_stage *s = (sparse_stage *)st;
    return sparse_probe_enable(&s->probe, &s->p.select, &s->sel->env, s->d_search, err);
}

static const sparse_metrics *sparse_get_metrics(const attn_stage *st) {
    return &((const sparse_stage *)st)->probe.totals;
}

static void sparse_freeze(attn_stage *st, int freeze_slot) { ((sparse_stage *)st)->freeze_slot = freeze_slot; }

static void sparse_stats(const attn_stage *st, attn_stage_stats *out) {
    const selector_stats *ss = &((const sparse_stage *)st)->sel->stats;
    *out = (attn_stage_stats){.t_select_s = ss->t_query_s, .t_append_s = ss->t_append_s, .index_bytes = ss->bytes,
                              .select_bytes_read = ss->bytes_read, .check_keys = ss->n_check_keys,
                              .check_found = ss->n_check_found, .linked_saved = ss->n_linked_saved};
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


static subq_status sparse_append(attn_stage *st, const kv_cache *kv, const float *ks, int n, int slot0,
                               subq_error *err) {
    sparse_stage *s = as_sparse(st);
    return s ? append_keys(s, kv, s->d_search > 0 ? ks : NULL, n, slot0, err) : SUBQ_OK;
}

static subq_status sparse_restore(attn_stage *st, const kv_cache *kv, const float *keys, int n, const void *index,
                                  size_t index_bytes, subq_error *err) {
    sparse_stage *s = as_sparse(st);
    if (!s) return SUBQ_OK;
    if (s->d_search > 0 && !keys) return subq_fail(err, SUBQ_ERR_ARG, "restoring a sparse layer needs its search keys");
    subq_status rc = selector_put_index(s->sel, s->d_search > 0 ? keys : NULL, n, index, index_bytes, err);
    if (!rc && s->probe.shadow) rc = selector_put_keys(s->probe.shadow, keys, n, 0, err);
    return rc ? rc : completion_replay(s, kv, n, err);
}

static subq_status sparse_get_index(const attn_stage *st, void **index, size_t *bytes, subq_error *err) {
    const sparse_stage *s = as_sparse(st);
    return s ? selector_get_index(s->sel, index, bytes, err) : SUBQ_OK;
}

static int sparse_search_width(const attn_stage *st) {
    const sparse_stage *s = as_sparse(st);
    return s ? s->dk_row : 0;
}

static int sparse_same_search(const attn_stage *a, const attn_stage *b) {
    const sparse_stage *x = as_sparse(a), *y = as_sparse(b);
    if (!x || !y || x->d_search <= 0 || x->d_search != y->d_search || x->n_embd != y->n_embd ||
        x->dq_row != y->dq_row || x->dk_row != y->dk_row)
        return 0;
    /* the stored form (get_keys) depends on these */
    if (x->p.select.plan.score != y->p.select.plan.score || x->p.select.plan.search_f16 != y->p.select.plan.search_f16)
        return 0;
    if (!search_rope_same(&x->rope, &y->rope)) return 0;
    const size_t row = (size_t)x->n_embd * sizeof(float);
    return !memcmp(x->wq_s, y->wq_s, row * x->dq_row) && !memcmp(x->wk_s, y->wk_s, row * x->dk_row);
}

static subq_status sparse_get_keys(const attn_stage *st, int n, float *dst, subq_error *err) {
    const sparse_stage *s = as_sparse(st);
    return s && s->d_search > 0 ? selector_get_keys(s->sel, n, dst, err) : SUBQ_OK;
}

/* The search space's identity: W_Qs, W_Ks and the rotary part, which joins
 * only when there is one (keys stored before it existed keep theirs). */
static uint64_t projection_hash(const sparse_stage *s) {
    const size_t row = (size_t)s->n_embd * sizeof(float);
    uint64_t h = fnv1a(fnv1a(FNV_OFFSET, s->wq_s, row * s->dq_row), s->wk_s, row * s->dk_row);
    if (s->rope.n_rot <= 0) return h;
    const double v[3] = {(double)s->rope.n_rot, s->rope.base, s->rope.scale};
    return fnv1a(h, v, sizeof v);
}

static uint64_t sparse_search_made_by(const attn_stage *st) {
    const sparse_stage *s = as_sparse(st);
    if (!s || s->d_search <= 0) return 0;
    const int score = (int)s->p.select.plan.score;
    return fnv1a(projection_hash(s), &score, sizeof score);
}

static void sparse_describe(const attn_stage *st, char *buf, size_t cap) {
    const sparse_stage *s = as_sparse(st);
    const selector_params *sp = &s->p.select;
    const uint64_t proj = projection_hash(s);
    snprintf(buf, cap,
             "sparse %s k=%d sink=%d tail=%d prefill=%d d=%d score=%s scan=%s f16=%d m=%d efc=%d efs=%d "
             "page=%d qhm=%d oracle=%d block=%d nprobe=%d from=%d group=%d gprobe=%d gfrom=%d seed=%" PRIu64
             " proj=%016" PRIx64 " complete=%016" PRIx64,
             selector_kind_name(sp->plan.selector), s->p.select.plan.top_k, s->p.select.plan.n_sink,
             s->p.select.plan.n_tail, (int)s->p.select.plan.sparse_prefill, s->d_search,
             select_score_name(sp->plan.score), select_scan_name(sp->plan.scan), sp->plan.search_f16, sp->plan.hnsw_m,
             sp->plan.hnsw_ef_construction, sp->plan.hnsw_ef_search, sp->plan.quest_page, sp->plan.quest_headmean,
             (int)sp->plan.oracle, sp->plan.block_keys, sp->plan.nprobe, sp->plan.probe_from, sp->plan.group_blocks,
             sp->plan.group_probe, sp->plan.group_from, sp->plan.seed, proj, s->comp ? completion_hash(s->comp) : 0);
    /* only when on: plans from before these settings describe as they did */
    size_t used = strlen(buf);
    if (sp->plan.block_reps && used < cap) snprintf(buf + used, cap - used, " reps=%d", sp->plan.block_reps);
    used = strlen(buf);
    if (sp->plan.clusters && sp->far_rot > 0 && used < cap)
        snprintf(buf + used, cap - used, " clusters=%d/%d/%d", sp->plan.clusters, sp->plan.cluster_probe,
                 sp->plan.cluster_from);
    used = strlen(buf);
    if (s->dk_row != s->d_search || s->dq_row != s->d_search)
        snprintf(buf + used, cap - used, " heads=%d/%d", s->dq_row / s->d_search, s->dk_row / s->d_search);
    used = strlen(buf);
    if (s->p.far.scheme != SUBQ_FAR_NONE && used < cap)
        snprintf(buf + used, cap - used, " far=%s from=%d limit=%d dense_near=%d", attn_far_name(s->p.far.scheme),
                 s->p.far.from, s->p.far.limit, s->p.dense_near);
}

static int sparse_has_late_key(const attn_stage *st) {
    const sparse_stage *s = as_sparse(st);
    return s && s->late_n > 0;
}

static subq_status sparse_index_late(attn_stage *st, subq_error *err) {
    sparse_stage *s = as_sparse(st);
    if (!s || s->late_n <= 0) return SUBQ_OK;
    const int n = s->late_n;
    s->late_n = 0;
    return index_keys(s, s->ks, n, s->late_slot0, err);
}

static const attn_stage_state sparse_state = {
    .describe = sparse_describe, .search_width = sparse_search_width, .search_made_by = sparse_search_made_by,
    .same_search = sparse_same_search, .get_keys = sparse_get_keys, .get_index = sparse_get_index,
    .restore = sparse_restore,
    .append = sparse_append, .rows_attended = sparse_rows_attended,
    .reads_scattered = sparse_reads_scattered, .has_completion = sparse_has_completion,
    .stats = sparse_stats, .enable_metrics = sparse_enable_metrics, .metrics = sparse_get_metrics,
    .freeze = sparse_freeze, .has_late_key = sparse_has_late_key, .index_late = sparse_index_late,
};

subq_status attn_sparse_new(const sparse_params *p, const float *wq_s, const float *wk_s, const search_rope *rope,
                            int n_embd, const selector_env *env, attn_stage **out, subq_error *err) {
    *out = NULL;
    if (p->select.plan.top_k < 0 || p->select.plan.n_sink < 0 || p->select.plan.n_tail < 0 ||
        p->select.plan.top_k + p->select.plan.n_sink + p->select.plan.n_tail < 1)
        return subq_fail(err, SUBQ_ERR_ARG,
                         "invalid sparse attention plan (topk %d, sink %d, tail %d; none may be "
                         "negative, and a query must attend at least one key)",
                         p->select.plan.top_k, p->select.plan.n_sink, p->select.plan.n_tail);
    int needs_search = selector_kind_needs_search(p->select.plan.selector);
    if (needs_search && (!wq_s || !wk_s || p->select.d_search <= 0))
        return subq_fail(err, SUBQ_ERR_ARG, "selector '%s' needs search projections for layer %d",
                         selector_kind_name(p->select.plan.selector), env->layer);
    sparse_stage *s = calloc(1, sizeof *s);
    if (!s) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    s->base.name = sparse_name;
    s->base.forward = sparse_forward;
    s->base.reset = sparse_reset;
    s->base.free = sparse_free;
    s->base.truncate = sparse_truncate;
    s->base.state = &sparse_state;
    s->p = *p;
    s->n_embd = n_embd;
    s->freeze_slot = -1;
    if (needs_search) {
        s->wq_s = wq_s;
        s->wk_s = wk_s;
        s->d_search = p->select.d_search;
        s->dq_row = s->d_search * selector_query_heads_of(&p->select);
        s->dk_row = s->d_search * selector_key_heads(&p->select);
        if (rope) s->rope = *rope;
    }
    subq_status rc = search_rope_check(&s->rope, s->d_search, "search rotation", err);
    if (!rc && p->far.scheme != SUBQ_FAR_NONE && p->complete)
        rc = subq_fail(err, SUBQ_ERR_UNSUPPORTED, "completion maps model the unretrieved keys at their own distances: "
                       "a far-key scheme (%s) runs without completion", attn_far_name(p->far.scheme));
    if (!rc && p->far.scheme != SUBQ_FAR_NONE && (p->far.from < 1 || p->far.from > p->far.limit))
        rc = subq_fail(err, SUBQ_ERR_ARG, "far keys from distance %d: must lie in [1, %d]", p->far.from, p->far.limit);
    if (!rc) rc = selector_new(&p->select, env, &s->sel, err);
    if (rc) {
        free(s);
        return rc;
    }
    if (p->far.scheme != SUBQ_FAR_NONE) {
        const size_t n =
            (size_t)p->select.plan.n_sink + (size_t)p->select.plan.top_k + (size_t)p->select.plan.n_tail + 1;
        s->far_dist = malloc(n * sizeof(int32_t));
        s->far_shift = malloc(n * sizeof(int32_t));
        s->far_order = malloc(n * sizeof(int64_t));
        if (!s->far_dist || !s->far_shift || !s->far_order) {
            sparse_free(&s->base);
            return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
        }
    }
    if ((s->per_head = selector_per_head(s->sel))) {
        s->hcand = malloc((size_t)env->n_head * (size_t)(p->select.plan.top_k > 0 ? p->select.plan.top_k : 1) *
                          sizeof(int32_t));
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
            rc = completion_new(
                p->complete, env->layer, p->select.plan.n_sink, p->select.plan.n_tail, p->select.plan.top_k,
                p->complete_heads ? p->complete_heads + (size_t)env->layer * env->n_head : NULL, &s->comp, err);
        if (rc) {
            sparse_free(&s->base);
            return rc;
        }
    }
    *out = &s->base;
    return SUBQ_OK;
}
