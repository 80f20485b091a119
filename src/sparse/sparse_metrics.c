#include "sparse/sparse_metrics.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/blas.h"
#include "base/error.h"
#include "base/kth.h"
#include "kernels/kernels.h"

/* Queries per block: x the heads of a KV head are the rows of one sgemm ... */
#define MEASURE_BLOCK 32
/* ... fewer when a block's scores would pass this many floats (16 MiB). */
#define MEASURE_SCORE_FLOATS (4 << 20)

/* One query's figures, summed over the batch in token order at the end. */
typedef struct query_sums {
    double mass, recall, mass_seed, recall_seed;
    int seed;                   /* counted in the seed's figures (>= K eligible keys) */
} query_sums;

typedef struct measure_scratch {
    float *q;                   /* [rows][head_dim]: the block's queries of one KV head */
    float *s;                   /* [rows][keys]: their scores, then softmax rows */
    float *p, *pmax;            /* [tokens][keys]: mean and max over heads (one shared set) */
    float *sel;                 /* [keys]: eligible scores for the K-th largest */
    unsigned char *mark;        /* [keys]: candidate slots */
} measure_scratch;

/* The runs [lo, hi) of the query's document [doc0, slot] that retrieval may
 * pick (at most 3): every slot of it is in the query's segment, so only the
 * mask's excluded ranges (sinks, tail) cut it. Slot by slot
 * (select_mask_allows), these scans were most of the metrics' own time. */
static int eligible_runs(const select_mask *m, int doc0, int slot, int lo[3], int hi[3]) {
    int n = 0, all = select_mask_ranges(m, slot + 1, lo, hi);
    for (int r = 0; r < all; r++) {
        const int a = lo[r] > doc0 ? lo[r] : doc0;
        if (a < hi[r]) lo[n] = a, hi[n] = hi[r], n++;
    }
    return n;
}

/* score[j - kb] of the eligible slots j of the query's document into sel;
 * returns their count. */
static int eligible_scores(const float *score, const select_mask *m, int doc0, int slot, int kb, float *sel) {
    int lo[3], hi[3], n = 0;
    const int runs = eligible_runs(m, doc0, slot, lo, hi);
    for (int r = 0; r < runs; r++) {
        memcpy(sel + n, score + lo[r] - kb, (size_t)(hi[r] - lo[r]) * sizeof(float));
        n += hi[r] - lo[r];
    }
    return n;
}

/* Share of the teacher's top-kk eligible keys among the candidates: the
 * candidates at or above the kk-th largest eligible score (ties counted at
 * most kk), / kk; 1 when nothing is eligible. sel holds the n_elig eligible
 * scores (reordered). */
static double recall_of(const float *score, float *sel, int n_elig, int kk, const int32_t *cand, int k, int kb) {
    if (kk == 0) return 1.0;
    /* The least candidate score lb bounds the threshold from below when at
     * least kk eligible scores reach it: then it is the kk-th largest of
     * those alone, often little more than the candidates themselves. */
    float lb = INFINITY;
    for (int i = 0; i < k; i++)
        if (cand[i] >= 0 && score[cand[i] - kb] < lb) lb = score[cand[i] - kb];
    int m = 0;
    for (int i = 0; i < n_elig; i++) m += sel[i] >= lb;
    if (m >= kk) {
        m = 0;
        for (int i = 0; i < n_elig; i++) {
            sel[m] = sel[i];
            m += sel[i] >= lb;
        }
        n_elig = m;
    }
    const float thr = kth_largest_f32(sel, n_elig, kk);
    int hit = 0;
    for (int i = 0; i < k; i++) hit += cand[i] >= 0 && score[cand[i] - kb] >= thr;
    return (double)(hit < kk ? hit : kk) / kk;
}

/* Σ score over what every query attends anyway: the slots of its document
 * outside the eligible runs (sinks and tail), in slot order. */
static double fixed_mass(const float *score, const select_mask *m, int doc0, int slot, int kb) {
    int lo[3], hi[3], runs = eligible_runs(m, doc0, slot, lo, hi), at = doc0;
    double s = 0.0;
    for (int r = 0; r <= runs; r++) {
        const int end = r < runs ? lo[r] : slot + 1;
        for (int j = at; j < end; j++) s += score[j - kb];
        if (r < runs) at = hi[r];
    }
    return s;
}

/* Head h of token t, one set per head: the mass of p_h on the head's
 * attended slots and the recall of its candidates against the top-K of p_h,
 * added to the query's sums (averaged over heads by the caller). */
static void head_figures(const sparse_measure *b, int t, int h, const float *row, int kb, measure_scratch *w,
                         query_sums *q) {
    const int slot = b->slot0 + t, K = b->top_k;
    const int32_t *cand = b->cand + ((size_t)t * b->n_head + h) * K;
    double on_cand = 0.0;
    for (int i = 0; i < K; i++)
        if (cand[i] >= 0) on_cand += row[cand[i] - kb];
    q->mass += fixed_mass(row, &b->mask[t], b->doc0[t], slot, kb) + on_cand;
    q->mass_seed += on_cand;
    const int n_elig = eligible_scores(row, &b->mask[t], b->doc0[t], slot, kb, w->sel);
    const int kk = K < n_elig ? K : n_elig;
    q->recall += recall_of(row, w->sel, n_elig, kk, cand, K, kb);
    q->seed = K > 0 && n_elig >= K;
}

/* Token t, one set for every head: the head-mean teacher p (today's
 * definition) for mass and recall; the seed's definition over queries with
 * >= K eligible keys: the mass of p on the K candidates (the head mean of the
 * per-head masses, as every head attends them) and the recall of the top-K
 * of pmax, the max over heads. */
static void query_figures(const sparse_measure *b, int t, const float *p, const float *pmax, int kb,
                          measure_scratch *w, query_sums *q) {
    const int slot = b->slot0 + t, K = b->top_k, doc0 = b->doc0[t];
    const int32_t *cand = b->cand + (size_t)t * K;
    const select_mask *m = &b->mask[t];
    double on_cand = 0.0;
    for (int i = 0; i < K; i++) { /* each slot once, should a selector repeat one */
        if (cand[i] < 0 || w->mark[cand[i] - kb]) continue;
        w->mark[cand[i] - kb] = 1;
        on_cand += p[cand[i] - kb];
    }
    for (int i = 0; i < K; i++)
        if (cand[i] >= 0) w->mark[cand[i] - kb] = 0;
    q->mass = fixed_mass(p, m, doc0, slot, kb) + on_cand;
    const int n_elig = eligible_scores(p, m, doc0, slot, kb, w->sel);
    const int kk = K < n_elig ? K : n_elig;
    q->recall = recall_of(p, w->sel, n_elig, kk, cand, K, kb);
    q->seed = K > 0 && n_elig >= K;
    if (!q->seed) return;
    q->mass_seed = on_cand;
    eligible_scores(pmax, m, doc0, slot, kb, w->sel);
    q->recall_seed = recall_of(pmax, w->sel, n_elig, K, cand, K, kb);
}

/* Tokens [t0, t1): per KV head, S = scale Q K^T over the block's keys
 * [kb, slot0 + t1) by sgemm; each row's softmax over its document prefix
 *   p_h(j) = exp(s_j - max) / Σ_{j' in [doc0, slot]} exp(s_j' - max);
 * then per head (per-head sets) or from p = mean_h p_h, pmax = max_h p_h. */
static void measure_block(const sparse_measure *b, const float **keys, int k_lo, int t0, int t1,
                          measure_scratch *w, query_sums *qs) {
    const kernels *kern = kernels_get();
    const int g = b->n_head / b->n_head_kv, hd = b->head_dim, nh = b->n_head, nt = t1 - t0, rows = nt * g;
    int kb = b->doc0[t0];
    for (int t = t0; t < t1; t++) kb = b->doc0[t] < kb ? b->doc0[t] : kb;
    const int nk = b->slot0 + t1 - kb;
    const float scale = b->scale, inv_nh = 1.0f / (float)nh;
    if (!b->per_head) {
        memset(w->p, 0, (size_t)nt * nk * sizeof(float));
        memset(w->pmax, 0, (size_t)nt * nk * sizeof(float));
    }
    for (int kh = 0; kh < b->n_head_kv; kh++) {
        for (int t = t0; t < t1; t++)
            memcpy(w->q + (size_t)(t - t0) * g * hd, b->q + ((size_t)t * nh + (size_t)kh * g) * hd,
                   (size_t)g * hd * sizeof(float));
        blas_sgemm(1, 0, 1, rows, nk, hd, scale, w->q, hd, keys[kh] + (size_t)(kb - k_lo) * hd, hd, 0.0f, w->s, nk);
        for (int r = 0; r < rows; r++) {
            const int t = t0 + r / g, h = kh * g + r % g, a = b->doc0[t] - kb, e = b->slot0 + t - kb;
            float *row = w->s + (size_t)r * nk, mx = -INFINITY;
            mx = kern->max_f32(row + a, e - a + 1, mx);
            const float inv = 1.0f / kern->exp_shift_sum(row + a, e - a + 1, mx); /* sum >= 1 */
            for (int j = a; j <= e; j++) row[j] *= inv;
            if (b->per_head) {
                head_figures(b, t, h, row, kb, w, &qs[t]);
                continue;
            }
            float *p = w->p + (size_t)(t - t0) * nk, *pm = w->pmax + (size_t)(t - t0) * nk;
            for (int j = a; j <= e; j++) {
                p[j] += row[j] * inv_nh;
                pm[j] = row[j] > pm[j] ? row[j] : pm[j];
            }
        }
    }
    for (int t = t0; t < t1; t++) {
        if (b->per_head) {
            query_sums *q = &qs[t];
            q->mass /= nh, q->recall /= nh, q->mass_seed /= nh;
            q->recall_seed = q->recall;
            continue;
        }
        query_figures(b, t, w->p + (size_t)(t - t0) * nk, w->pmax + (size_t)(t - t0) * nk, kb, w, &qs[t]);
    }
}

/* measure_block over one block of tokens (pool chunk), with the thread's scratch */
typedef struct measure_job {
    const sparse_measure *b;
    const float **keys;
    int k_lo, tb;
    measure_scratch *w;
    query_sums *qs;
} measure_job;

static void measure_chunk(void *ctx, int bi, int thread) {
    const measure_job *j = ctx;
    const int t0 = bi * j->tb, t1 = t0 + j->tb < j->b->n_tokens ? t0 + j->tb : j->b->n_tokens;
    measure_block(j->b, j->keys, j->k_lo, t0, t1, &j->w[thread], j->qs);
}

subq_status sparse_metrics_measure(const sparse_measure *b, const kv_cache *kv, sparse_metrics *acc,
                                   subq_error *err) {
    const int n = b->n_tokens, hd = b->head_dim, g = b->n_head / b->n_head_kv, nkv = b->n_head_kv;
    if (n <= 0) return SUBQ_OK;
    int k_lo = b->slot0;
    for (int t = 0; t < n; t++) k_lo = b->doc0[t] < k_lo ? b->doc0[t] : k_lo;
    const int n_keys = b->slot0 + n - k_lo;
    const float **keys = malloc((size_t)nkv * sizeof *keys);
    const int need_conv = kv_cache_rows_f32_copied(kv, b->layer);
    float *conv = need_conv ? malloc((size_t)nkv * n_keys * hd * sizeof(float)) : NULL;
    if (!keys || (need_conv && !conv)) {
        free(keys);
        free(conv);
        return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory for the metrics' keys (%d x %d)", nkv, n_keys);
    }
    for (int kh = 0; kh < nkv; kh++)
        keys[kh] = kv_cache_rows_f32(kv, b->layer, kh, 0, k_lo, n_keys, conv ? conv + (size_t)kh * n_keys * hd : NULL);
    query_sums *qs = calloc((size_t)n, sizeof(query_sums));
    const int nt = pool_threads(b->pool);
    int tb = MEASURE_BLOCK;
    const int per_thread = (n + nt - 1) / nt;
    if (tb > per_thread) tb = per_thread;
    while (tb > 1 && (int64_t)g * tb * n_keys > MEASURE_SCORE_FLOATS) tb /= 2;
    const size_t rows = (size_t)g * tb, shared = b->per_head ? 0 : (size_t)tb * n_keys;
    measure_scratch *w = calloc((size_t)nt, sizeof *w);
    int failed = !qs || !w;
    for (int i = 0; !failed && i < nt; i++) {
        w[i] = (measure_scratch){
            .q = malloc(rows * hd * sizeof(float)), .s = malloc(rows * n_keys * sizeof(float)),
            .p = malloc((shared + 1) * sizeof(float)), .pmax = malloc((shared + 1) * sizeof(float)),
            .sel = malloc((size_t)n_keys * sizeof(float)), .mark = calloc((size_t)n_keys, 1),
        };
        failed = !w[i].q || !w[i].s || !w[i].p || !w[i].pmax || !w[i].sel || !w[i].mark;
    }
    measure_job job = {.b = b, .keys = keys, .k_lo = k_lo, .tb = tb, .w = w, .qs = qs};
    if (!failed) pool_run(b->pool, (n + tb - 1) / tb, measure_chunk, &job);
    for (int i = 0; w && i < nt; i++) {
        free(w[i].q);
        free(w[i].s);
        free(w[i].p);
        free(w[i].pmax);
        free(w[i].sel);
        free(w[i].mark);
    }
    free(w);
    free(conv);
    free(keys);
    if (failed) {
        free(qs);
        return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory for the metrics of %d queries over %d keys", n, n_keys);
    }
    for (int t = 0; t < n; t++) {
        acc->mass_sum += qs[t].mass;
        acc->recall_sum += qs[t].recall;
        acc->n_queries++;
        if (!qs[t].seed) continue;
        acc->mass_seed_sum += qs[t].mass_seed;
        acc->recall_seed_sum += qs[t].recall_seed;
        acc->n_seed++;
    }
    free(qs);
    return SUBQ_OK;
}

/* ---- the stage's probe ------------------------------------------------------- */

subq_status sparse_probe_enable(sparse_probe *p, const selector_params *sel, const selector_env *env, int d_search,
                                subq_error *err) {
    p->on = 1;
    if (p->shadow || !selector_params_approximate(sel, env && env->kv ? env->kv->n_ctx : INT64_MAX)) return SUBQ_OK;
    /* the reference: a full f32 scan by the same score, far keys without the rotated dims as the selector */
    selector_params ep;
    selector_params_default(&ep, SUBQ_SELECT_EXACT, d_search);
    ep.plan.score = sel->plan.score;
    ep.far_rot = sel->far_rot;
    ep.search_heads = sel->search_heads, ep.search_qheads = sel->search_qheads;
    return selector_new(&ep, env, &p->shadow, err);
}

subq_status sparse_probe_reserve(sparse_probe *p, int n, int n_head, int top_k, int per_head, subq_error *err) {
    if (n <= p->cap) return SUBQ_OK;
    const size_t k = (size_t)(top_k > 0 ? top_k : 1);
    int *doc0 = realloc(p->doc0, (size_t)n * sizeof(int));
    if (doc0) p->doc0 = doc0;
    select_mask *mask = realloc(p->mask, (size_t)n * sizeof(select_mask));
    if (mask) p->mask = mask;
    int32_t *hcand = per_head ? realloc(p->hcand, (size_t)n * n_head * k * sizeof(int32_t)) : NULL;
    if (hcand) p->hcand = hcand;
    if (per_head && !p->rows) p->rows = malloc((size_t)n_head * k * sizeof(int32_t));
    if (!p->exact) p->exact = malloc(k * sizeof(int32_t));
    if (!doc0 || !mask || (per_head && (!hcand || !p->rows)) || !p->exact)
        return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory for retrieval metrics (%d queries)", n);
    p->cap = n;
    return SUBQ_OK;
}

/* 1 if x is one of set[0..n) */
static int in_set(const int32_t *set, int n, int32_t x) {
    for (int i = 0; i < n; i++)
        if (set[i] == x) return 1;
    return 0;
}

subq_status sparse_probe_count(sparse_probe *p, const float *q_s, const float *q_native, const select_mask *m,
                               int top_k, const int32_t *cand, int got, int layer, subq_error *err) {
    p->totals.n_requested += top_k;
    p->totals.n_filler += top_k - got;
    if (!p->shadow || top_k == 0) return SUBQ_OK;
    int ne = selector_query(p->shadow, q_s, q_native, top_k, m, p->exact);
    if (ne < 0) return subq_fail(err, SUBQ_ERR_NOMEM, "the exact selector beside the ANN one failed (layer %d)", layer);
    if (ne > 0) {
        int hit = 0;
        for (int a = 0; a < ne; a++) hit += in_set(cand, got, p->exact[a]);
        p->totals.ann_recall_sum += (double)hit / ne;
        p->totals.n_ann++;
    }
    return SUBQ_OK;
}

static int cmp_i32(const void *a, const void *b) {
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

void sparse_probe_rows(sparse_probe *p, int n_head, int n_head_kv, int top_k, const int32_t *hcand, const int *hgot,
                       int n_fixed) {
    const int g = n_head / n_head_kv;
    int32_t *u = p->rows;
    for (int kvh = 0; kvh < n_head_kv; kvh++) {
        int n = 0;
        for (int h = kvh * g; h < (kvh + 1) * g; h++)
            for (int i = 0; i < hgot[h]; i++) u[n++] = hcand[(size_t)h * top_k + i];
        qsort(u, (size_t)n, sizeof *u, cmp_i32);
        int distinct = 0;
        for (int i = 0; i < n; i++) distinct += i == 0 || u[i] != u[i - 1];
        p->totals.rows_sum += n_fixed + distinct;
        p->totals.n_rows++;
    }
}

void sparse_probe_heads(sparse_probe *p, int t, int n_head, int top_k, const int32_t *hcand, const int *hgot) {
    for (int h = 0; h < n_head; h++) {
        int32_t *dst = p->hcand + ((size_t)t * n_head + h) * top_k;
        for (int i = 0; i < top_k; i++) dst[i] = i < hgot[h] ? hcand[(size_t)h * top_k + i] : -1;
        p->totals.n_requested += top_k;
        p->totals.n_filler += top_k - hgot[h];
    }
}

void sparse_probe_free(sparse_probe *p) {
    selector_free(p->shadow);
    free(p->doc0);
    free(p->mask);
    free(p->hcand);
    free(p->rows);
    free(p->exact);
    memset(p, 0, sizeof *p);
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
    dst->rows_sum += src->rows_sum;
    dst->n_rows += src->n_rows;
}
