/* subq eval's figures (src/eval/eval_run.c) against brute force on a tiny
 * case: stories260K, two packed windows (the first holds two documents),
 * random projections and completion maps on layers 1 and 3, every selector,
 * selection only and hybrid. For every method the test runs the forward
 * passes itself and recomputes, in double:
 *   - perplexity, gap, KL(p_full || p_method), top-1 agreement, and the
 *     two-window block-bootstrap intervals (with two windows the 2.5% and
 *     97.5% percentiles are exactly the two windows' means);
 *   - mass, recall, the seed's mass and recall, ANN recall, filler rate from
 *     the captured q, the cached keys and the recorded candidates, with every
 *     head's full softmax computed from scratch;
 *   - the completion share Z_hat / (Z_E + Z_hat) by summing <phi_q, phi_k>
 *     over the unretrieved mid region token by token;
 *   - each layer substituted alone, and static vs dynamic index;
 * plus the budget plan (rounded-up token budgets), the choice of the static
 * method, the same sparse layers for every selector, and the bootstrap
 * itself against an exact enumeration of all resamples. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sparse/attn_plan.h"
#include "base/rng.h"
#include "eval/bootstrap.h"
#include "eval/eval_run.h"
#include "model/context.h"
#include "complete/phi_maps.h"
#include "test_util.h"
#include "data/corpus.h"

#define CTX 100
#define SINK 2
#define TAIL 4

static subq_model *model;
static search_proj *proj;
static phi_maps *maps;
static const int sparse[] = {1, 3};

/* ---- bootstrap vs exact enumeration ------------------------------------------ */

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* value at quantile q of the exact bootstrap distribution (all n^n ordered resamples) */
static void exact_quantiles(const double *sum, const int64_t *cnt, int n, const double *q, double *out, int nq) {
    int total = 1;
    for (int i = 0; i < n; i++) total *= n;
    double *v = malloc((size_t)total * sizeof(double));
    for (int r = 0; r < total; r++) {
        double s = 0, c = 0;
        for (int i = 0, x = r; i < n; i++, x /= n) s += sum[x % n], c += (double)cnt[x % n];
        v[r] = s / c;
    }
    qsort(v, (size_t)total, sizeof(double), cmp_d);
    for (int i = 0; i < nq; i++) out[i] = v[(int)(q[i] * (total - 1))];
    free(v);
}

static void test_bootstrap(void) {
    subq_error err = {0};
    double mean, lo, hi;
    /* two windows: the resample means are w1's, w2's or the pooled one, the
     * first two with probability 1/4 each, so the interval is exactly
     * [min, max] of the window means (a token-level bootstrap of windows
     * whose tokens agree would give a much narrower one) */
    const double s2[2] = {10 * 0.5, 30 * 0.9};
    const int64_t n2[2] = {10, 30};
    CHECK(!bootstrap_block_mean(s2, n2, 2, 1000, 5, &mean, &lo, &hi, &err), "bootstrap: %s", err.msg);
    CHECK(fabs(mean - 32.0 / 40) < 1e-12 && lo == 0.5 && hi == 0.9, "two blocks: mean %g [%g, %g], want 0.8 [0.5, 0.9]",
          mean, lo, hi);
    /* five windows of different sizes: the Monte-Carlo percentiles lie between
     * the exact 1% and 5% (95% and 99%) quantiles of all 5^5 resamples */
    const double s5[5] = {3.0, -1.0, 7.5, 0.2, 2.0};
    const int64_t n5[5] = {10, 4, 12, 7, 9};
    const double qs[4] = {0.01, 0.05, 0.95, 0.99};
    double ex[4];
    exact_quantiles(s5, n5, 5, qs, ex, 4);
    CHECK(!bootstrap_block_mean(s5, n5, 5, 1000, 9, &mean, &lo, &hi, &err), "bootstrap: %s", err.msg);
    CHECK(fabs(mean - 11.7 / 42) < 1e-12, "five blocks: mean %g, want %g", mean, 11.7 / 42);
    CHECK(lo >= ex[0] && lo <= ex[1] && hi >= ex[2] && hi <= ex[3],
          "five blocks: [%g, %g] outside the exact 1-5%% [%g, %g] / 95-99%% [%g, %g] quantiles", lo, hi, ex[0], ex[1],
          ex[2], ex[3]);
    /* blocks without tokens are left out; no tokens at all: NAN */
    const double s3[3] = {0, 10 * 0.5, 30 * 0.9};
    const int64_t n3[3] = {0, 10, 30};
    CHECK(!bootstrap_block_mean(s3, n3, 3, 1000, 5, &mean, &lo, &hi, &err) && lo == 0.5 && hi == 0.9,
          "an empty block changes the interval: [%g, %g]", lo, hi);
    CHECK(!bootstrap_block_mean(s3, n3, 1, 1000, 5, &mean, &lo, &hi, &err) && isnan(mean) && isnan(lo),
          "no tokens: mean %g", mean);
    CHECK(bootstrap_block_mean(s2, n2, 2, 1, 5, &mean, &lo, &hi, &err) == SUBQ_ERR_ARG, "1 resample is refused");
}

/* ---- brute force ------------------------------------------------------------------ */

typedef struct capture_buf {
    float *h[8], *q[8]; /* per layer: [CTX][n_embd], [CTX][n_head*head_dim] */
} capture_buf;

static void on_capture(void *user, int layer, int n, int slot0, const float *h, const float *q, const float *k,
                       const float *v) {
    capture_buf *cb = user;
    const model_hparams *hp = &model->hp;
    memcpy(cb->h[layer] + (size_t)slot0 * hp->n_embd, h, (size_t)n * hp->n_embd * sizeof(float));
    memcpy(cb->q[layer] + (size_t)slot0 * hp->n_head * hp->head_dim, q,
           (size_t)n * hp->n_head * hp->head_dim * sizeof(float));
}

/* what eval should report, summed by the test */
typedef struct expect {
    double nll, kl, win_kl[2], win_dnll[2];
    int64_t top1;
    /* recalls: the least and the most that keys tied within rounding at the
     * K-th place allow (recall_range) */
    double mass[8], recall[8], mass_seed[8], recall_seed[8], ann[8];
    double recall_hi[8], recall_seed_hi[8], ann_hi[8];
    int64_t nq[8], n_seed[8], n_ann[8], requested, filler;
    double share;
    int64_t n_share;
    double alone_kl[8];
    int64_t alone_top1[8];
    double sfx_nll, sfx_nll_static;
} expect;

static double dot_d(const float *a, const float *b, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

/* p = softmax(x) in double */
static void softmax_d(const float *x, int n, double *p) {
    double mx = x[0], z = 0;
    for (int i = 1; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    for (int i = 0; i < n; i++) z += p[i] = exp(x[i] - mx);
    for (int i = 0; i < n; i++) p[i] /= z;
}

typedef struct win {
    int len;
    int32_t tok[CTX], pos[CTX], seg[CTX];
} win;

/* Σ over scored tokens of -log p_m(next), KL(p_f || p_m), [argmax equal]; suffix NLL from `from` */
static void score(const win *w, const float *lf, const float *lm, double *nll, double *kl, int64_t *top1,
                  int from, double *sfx) {
    const int V = model->hp.n_vocab;
    double *pf = malloc((size_t)V * sizeof(double)), *pm = malloc((size_t)V * sizeof(double));
    *nll = *kl = 0, *top1 = 0;
    if (sfx) *sfx = 0;
    for (int t = 0; t + 1 < w->len; t++) {
        if (w->seg[t] != w->seg[t + 1]) continue;
        softmax_d(lf + (size_t)t * V, V, pf);
        softmax_d(lm + (size_t)t * V, V, pm);
        int af = 0, am = 0;
        for (int v = 0; v < V; v++) {
            *kl += pf[v] * log(pf[v] / pm[v]);
            if (lf[(size_t)t * V + v] > lf[(size_t)t * V + af]) af = v;
            if (lm[(size_t)t * V + v] > lm[(size_t)t * V + am]) am = v;
        }
        *nll -= log(pm[w->tok[t + 1]]);
        *top1 += af == am;
        if (sfx && t >= from) *sfx -= log(pm[w->tok[t + 1]]);
    }
    free(pf);
    free(pm);
}

static int is_cand(const int32_t *cand, int k, int j) {
    for (int i = 0; i < k; i++)
        if (cand[i] == j) return 1;
    return 0;
}

/* Recall of the candidates against the top kk of score[elig[a] - off] (a
 * in [0, n_elig)), with keys whose scores tie within eps of each other
 * counting as either choice, as (least, most) / kk: a candidate counts in
 * the least when every top kk holds it (fewer than kk other keys score
 * eps-close to it or above) and in the most when some top kk may (fewer
 * than kk score above it by more than eps), at most kk. The library ranks
 * float scores, this test double ones: without ties the two are one. */
static void recall_range(const double *score, const int *elig, int n_elig, int off, int kk, const int32_t *cand, int K,
                         double eps, double *lo, double *hi) {
    if (kk == 0) {
        *lo = *hi = 1.0;
        return;
    }
    int sure = 0, may = 0;
    for (int a = 0; a < n_elig; a++) {
        if (!is_cand(cand, K, elig[a])) continue;
        const double sa = score[elig[a] - off];
        int above = 0, close = 0;
        for (int b = 0; b < n_elig; b++) {
            const double sb = score[elig[b] - off];
            above += sb > sa + eps;
            close += b != a && sb >= sa - eps;
        }
        sure += close < kk;
        may += above < kk;
    }
    *lo = (double)sure / kk, *hi = (double)(may < kk ? may : kk) / kk;
}

/* Retrieval metrics of layer l for every query of the window, from scratch. */
static void brute_metrics(const win *w, subq_context *c, const capture_buf *cb, int l, const subq_eval_method *m,
                          expect *e) {
    const model_hparams *hp = &model->hp;
    const int H = hp->n_head, D = hp->head_dim, g = H / hp->n_head_kv, K = m->k, ds = proj->d_search;
    const sparse_record *rec = attn_sparse_record(c->stages[l]);
    double *ph = malloc((size_t)H * CTX * sizeof(double)), *p = malloc(CTX * sizeof(double));
    double *pmax = malloc(CTX * sizeof(double)), *cs = malloc(CTX * sizeof(double));
    for (int t = 0; t < w->len; t++) {
        int doc0 = t;
        while (doc0 > 0 && w->seg[doc0 - 1] == w->seg[t]) doc0--;
        const int n = t + 1 - doc0, sink_hi = doc0 + SINK < t + 1 ? doc0 + SINK : t + 1;
        const int tail_lo = t + 1 - TAIL > sink_hi ? t + 1 - TAIL : sink_hi;
        const int32_t *cand = rec->cand + (size_t)t * K;
        int got = 0;
        for (int i = 0; i < K; i++) got += cand[i] >= 0;
        /* every head's full softmax over the document prefix */
        for (int j = 0; j < n; j++) p[j] = 0, pmax[j] = 0;
        for (int h = 0; h < H; h++) {
            double mx = -INFINITY, z = 0, *r = ph + (size_t)h * CTX;
            for (int j = 0; j < n; j++) {
                const float *key = kv_cache_key(&c->kv, l, h / g, doc0 + j);
                r[j] = dot_d(cb->q[l] + ((size_t)t * H + h) * D, key, D) / sqrt((double)D);
                mx = r[j] > mx ? r[j] : mx;
            }
            for (int j = 0; j < n; j++) z += r[j] = exp(r[j] - mx);
            for (int j = 0; j < n; j++) r[j] /= z, p[j] += r[j] / H, pmax[j] = fmax(pmax[j], r[j]);
        }
        int elig[CTX], n_elig = 0;
        double mass = 0;
        for (int j = doc0; j <= t; j++) {
            const int fixed = j < sink_hi || j >= tail_lo;
            if (!fixed) elig[n_elig++] = j;
            if (fixed || is_cand(cand, K, j)) mass += p[j - doc0];
        }
        e->mass[l] += mass;
        /* top-K of a score among the eligible keys, by brute-force ranking;
         * the library's float teacher ties within 1e-5 of the row's largest
         * value count as either choice */
        int kk = K < n_elig ? K : n_elig;
        const double *scores[2] = {p, pmax};
        double rec_v[2], rec_hi[2];
        for (int s = 0; s < 2; s++) {
            double top = 0;
            for (int a = 0; a < n_elig; a++) top = fmax(top, scores[s][elig[a] - doc0]);
            recall_range(scores[s], elig, n_elig, doc0, kk, cand, K, 1e-5 * top, &rec_v[s], &rec_hi[s]);
        }
        e->recall[l] += rec_v[0];
        e->recall_hi[l] += rec_hi[0];
        e->nq[l]++;
        if (K > 0 && n_elig >= K) {
            double ms = 0;
            for (int h = 0; h < H; h++)
                for (int i = 0; i < K; i++)
                    if (cand[i] >= 0) ms += ph[(size_t)h * CTX + cand[i] - doc0] / H;
            e->mass_seed[l] += ms;
            e->recall_seed[l] += rec_v[1];
            e->recall_seed_hi[l] += rec_hi[1];
            e->n_seed[l]++;
        }
        e->requested += K;
        e->filler += K - got;
        if (m->select == SUBQ_SELECT_HNSW && n_elig > 0) {
            /* exact top-K by cosine of the search vectors W_Qs h, W_Ks h */
            double qs[64], kn;
            for (int d = 0; d < ds; d++) qs[d] = dot_d(proj->wq[l] + (size_t)d * hp->n_embd, cb->h[l] + (size_t)t * hp->n_embd, hp->n_embd);
            for (int a = 0; a < n_elig; a++) {
                double dq = 0;
                kn = 0;
                for (int d = 0; d < ds; d++) {
                    double kd = dot_d(proj->wk[l] + (size_t)d * hp->n_embd, cb->h[l] + (size_t)elig[a] * hp->n_embd, hp->n_embd);
                    dq += qs[d] * kd, kn += kd * kd;
                }
                cs[a] = dq / sqrt(kn);
            }
            /* cosines tied within 1e-5 (the shadow scan's float rounding) count as either choice */
            double by_slot[CTX], lo, hi;
            for (int a = 0; a < n_elig; a++) by_slot[elig[a] - doc0] = cs[a];
            recall_range(by_slot, elig, n_elig, doc0, kk, cand, K, 1e-5, &lo, &hi);
            e->ann[l] += lo;
            e->ann_hi[l] += hi;
            e->n_ann[l]++;
        }
    }
    free(ph);
    free(p);
    free(pmax);
    free(cs);
}

/* Completion share of layer l, from Z_E = Σ_attended exp(s_j) and Z_hat =
 * Σ_{i in mid, not retrieved} <phi_q(q), phi_k(k_i)>, head by head. */
static void brute_share(const win *w, subq_context *c, const capture_buf *cb, int l, int K, expect *e) {
    const model_hparams *hp = &model->hp;
    const int H = hp->n_head, D = hp->head_dim, g = H / hp->n_head_kv, F = maps->dims.d_phi;
    const sparse_record *rec = attn_sparse_record(c->stages[l]);
    float lq[PHI_MAX_DIM], lk[PHI_MAX_DIM], key[PHI_MAX_DIM];
    for (int t = 0; t < w->len; t++) {
        int doc0 = t;
        while (doc0 > 0 && w->seg[doc0 - 1] == w->seg[t]) doc0--;
        const int sink_hi = doc0 + SINK < t + 1 ? doc0 + SINK : t + 1;
        const int tail_lo = t + 1 - TAIL > sink_hi ? t + 1 - TAIL : sink_hi;
        if (t - TAIL < doc0 + SINK) continue; /* no mid region yet */
        const int32_t *cand = rec->cand + (size_t)t * K;
        for (int h = 0; h < H; h++) {
            const float *q = cb->q[l] + ((size_t)t * H + h) * D;
            phi_log_features(maps, l, PHI_Q, h, q, lq);
            double ze = 0, zh = 0;
            for (int j = doc0; j <= t; j++) {
                memcpy(key, kv_cache_key(&c->kv, l, h / g, j), (size_t)D * sizeof(float));
                if (j < sink_hi || j >= tail_lo || is_cand(cand, K, j)) {
                    ze += exp(dot_d(q, key, D) / sqrt((double)D));
                } else {
                    phi_log_features(maps, l, PHI_K, h / g, key, lk);
                    for (int f = 0; f < F; f++) zh += exp((double)lq[f] + lk[f]);
                }
            }
            e->share += zh / (ze + zh);
            e->n_share++;
        }
    }
}

static subq_context *ctx;
static capture_buf cap;

static attn_plan plan_of(const subq_eval_method *m, const char *layers) {
    attn_plan p;
    attn_plan_default(&p);
    p.plan.layers = layers;
    p.plan.top_k = m->k;
    p.plan.n_sink = SINK;
    p.plan.n_tail = TAIL;
    p.plan.sparse_prefill = SUBQ_PREFILL_TOKENWISE;
    p.plan.selector = (subq_selector_kind)m->select;
    p.plan.quest_headmean = 1; /* one candidate set per query: the record is what attention used */
    p.complete = m->completion == SUBQ_EVAL_SELECTION ? NULL : maps;
    return p;
}

/* Forward window w under plan (NULL: full) into logits; freeze >= 0 freezes the index. */
static int forward(const win *w, const attn_plan *plan, int freeze, float *logits) {
    subq_error err = {0};
    subq_context_reset(ctx);
    context_clear_plan(ctx);
    if (plan && context_set_plan(ctx, plan, proj, &err)) {
        CHECK(0, "plan: %s", err.msg);
        return 0;
    }
    for (int l = 0; l < model->hp.n_layer; l++) attn_stage_freeze(ctx->stages[l], freeze);
    if (context_forward(ctx, w->tok, w->len, w->pos, w->seg, logits, 1, &err)) {
        CHECK(0, "forward: %s", err.msg);
        return 0;
    }
    return 1;
}

static int close_to(double a, double b, double tol) { return fabs(a - b) <= tol * (1 + fabs(b)); }

/* v in [lo, hi] up to the rounding of a mean */
static int in_range(double v, double lo, double hi) { return v >= lo - 1e-9 && v <= hi + 1e-9; }

/* Recompute everything eval reported for method m of r and compare. */
static void check_method(const subq_eval_result *r, int mi, const win *ws, int n_win, float *lf, float *lm) {
    const subq_eval_method *m = &r->methods[mi];
    char name[64];
    eval_method_name(m, name, sizeof name);
    expect e;
    memset(&e, 0, sizeof e);
    int64_t n_tok = 0;
    double full_nll = 0, full_sfx = 0;
    for (int wi = 0; wi < n_win; wi++) {
        const win *w = &ws[wi];
        const int from = (int)(r->stat.split * w->len);
        double nf, kf, nll, kl, sfx;
        int64_t tf, top1;
        attn_plan plan = plan_of(m, "1,3");
        if (!forward(w, NULL, -1, lf)) return;
        score(w, lf, lf, &nf, &kf, &tf, from, &sfx);
        full_nll += nf, full_sfx += sfx, n_tok += tf;
        ctx->capture = on_capture, ctx->capture_user = &cap;
        int ok = forward(w, &plan, -1, lm);
        ctx->capture = NULL;
        if (!ok) return;
        score(w, lf, lm, &nll, &kl, &top1, from, &sfx);
        e.nll += nll, e.kl += kl, e.top1 += top1, e.sfx_nll += sfx;
        e.win_kl[wi] = kl / tf, e.win_dnll[wi] = (nll - nf) / tf;
        for (int i = 0; i < 2; i++) {
            brute_metrics(w, ctx, &cap, sparse[i], m, &e);
            if (m->completion != SUBQ_EVAL_SELECTION) brute_share(w, ctx, &cap, sparse[i], m->k, &e);
        }
        for (int i = 0; i < 2; i++) { /* each layer alone */
            char one[8];
            snprintf(one, sizeof one, "%d", sparse[i]);
            plan.plan.layers = one;
            if (!forward(w, &plan, -1, lm)) return;
            score(w, lf, lm, &nll, &kl, &top1, from, NULL);
            e.alone_kl[sparse[i]] += kl, e.alone_top1[sparse[i]] += top1;
        }
        if (r->stat.method == mi) { /* the frozen index */
            plan.plan.layers = "1,3";
            if (!forward(w, &plan, from, lm)) return;
            score(w, lf, lm, &nll, &kl, &top1, from, &sfx);
            e.sfx_nll_static += sfx;
        }
    }
    const double full_ppl = exp(full_nll / n_tok), ppl = exp(e.nll / n_tok);
    CHECK(r->n_scored == n_tok && close_to(r->full_ppl, full_ppl, 1e-9), "full: %lld tokens ppl %.9g, want %lld %.9g",
          (long long)r->n_scored, r->full_ppl, (long long)n_tok, full_ppl);
    CHECK(close_to(m->ppl, ppl, 1e-9) && close_to(m->gap, ppl / full_ppl - 1, 1e-9), "%s: ppl %.9g gap %.9g, want %.9g",
          name, m->ppl, m->gap, ppl);
    CHECK(fabs(m->kl - e.kl / n_tok) < 1e-9, "%s: KL %.9g, want %.9g", name, m->kl, e.kl / n_tok);
    CHECK(fabs(m->top1 - (double)e.top1 / n_tok) < 1e-12, "%s: top-1 %.6f, want %.6f", name, m->top1,
          (double)e.top1 / n_tok);
    CHECK(fabs(m->nll_diff - (e.nll - full_nll) / n_tok) < 1e-9, "%s: dNLL %.9g", name, m->nll_diff);
    /* two windows: the interval is [min, max] of the two windows' means */
    CHECK(fabs(m->kl_lo - fmin(e.win_kl[0], e.win_kl[1])) < 1e-9 && fabs(m->kl_hi - fmax(e.win_kl[0], e.win_kl[1])) < 1e-9,
          "%s: KL interval [%.6g, %.6g], window means %.6g, %.6g", name, m->kl_lo, m->kl_hi, e.win_kl[0], e.win_kl[1]);
    CHECK(fabs(m->nll_diff_lo - fmin(e.win_dnll[0], e.win_dnll[1])) < 1e-9 &&
              fabs(m->nll_diff_hi - fmax(e.win_dnll[0], e.win_dnll[1])) < 1e-9,
          "%s: dNLL interval [%.6g, %.6g], window means %.6g, %.6g", name, m->nll_diff_lo, m->nll_diff_hi,
          e.win_dnll[0], e.win_dnll[1]);
    /* retrieval: per layer means over queries, then means over the two layers */
    double mass = 0, recall = 0, ms = 0, rs = 0, ann = 0, recall_hi = 0, rs_hi = 0, ann_hi = 0;
    int n_ann_layers = 0;
    for (int l = 0; l < model->hp.n_layer; l++) {
        const int is_sparse = l == 1 || l == 3;
        if (!is_sparse) {
            CHECK(isnan(m->layer_mass[l]) && isnan(m->layer_kl[l]), "%s: layer %d is dense, mass %g", name, l,
                  m->layer_mass[l]);
            continue;
        }
        const double lm_ = e.mass[l] / e.nq[l], lr = e.recall[l] / e.nq[l], lr_hi = e.recall_hi[l] / e.nq[l];
        const double lms = e.mass_seed[l] / e.n_seed[l], lrs = e.recall_seed[l] / e.n_seed[l];
        const double lrs_hi = e.recall_seed_hi[l] / e.n_seed[l];
        CHECK(fabs(m->layer_mass[l] - lm_) < 2e-5 && in_range(m->layer_recall[l], lr, lr_hi), "%s layer %d: mass %.6f "
              "recall %.6f, want %.6f [%.6f, %.6f]", name, l, m->layer_mass[l], m->layer_recall[l], lm_, lr, lr_hi);
        CHECK(e.n_seed[l] > 0 && fabs(m->layer_mass_seed[l] - lms) < 2e-5 && in_range(m->layer_recall_seed[l], lrs, lrs_hi),
              "%s layer %d: seed mass %.6f recall %.6f, want %.6f [%.6f, %.6f]", name, l, m->layer_mass_seed[l],
              m->layer_recall_seed[l], lms, lrs, lrs_hi);
        CHECK(fabs(m->layer_kl[l] - e.alone_kl[l] / n_tok) < 1e-9 &&
                  fabs(m->layer_top1[l] - (double)e.alone_top1[l] / n_tok) < 1e-12,
              "%s layer %d alone: KL %.6g top-1 %.4f, want %.6g %.4f", name, l, m->layer_kl[l], m->layer_top1[l],
              e.alone_kl[l] / n_tok, (double)e.alone_top1[l] / n_tok);
        CHECK(m->layer_kl_lo[l] <= m->layer_kl[l] && m->layer_kl[l] <= m->layer_kl_hi[l], "%s layer %d: KL interval",
              name, l);
        mass += lm_ / 2, recall += lr / 2, ms += lms / 2, rs += lrs / 2;
        recall_hi += lr_hi / 2, rs_hi += lrs_hi / 2;
        if (e.n_ann[l]) ann += e.ann[l] / e.n_ann[l], ann_hi += e.ann_hi[l] / e.n_ann[l], n_ann_layers++;
    }
    CHECK(fabs(m->mass - mass) < 2e-5 && in_range(m->recall, recall, recall_hi) && fabs(m->mass_seed - ms) < 2e-5 &&
              in_range(m->recall_seed, rs, rs_hi),
          "%s: mass %.6f recall %.6f seed %.6f %.6f, want %.6f [%.6f, %.6f] %.6f [%.6f, %.6f]", name, m->mass,
          m->recall, m->mass_seed, m->recall_seed, mass, recall, recall_hi, ms, rs, rs_hi);
    CHECK(fabs(m->filler - (double)e.filler / e.requested) < 1e-12, "%s: filler %.6f, want %.6f", name, m->filler,
          (double)e.filler / e.requested);
    if (m->select == SUBQ_SELECT_HNSW)
        CHECK(n_ann_layers == 2 && in_range(m->ann_recall, ann / 2, ann_hi / 2), "%s: ANN recall %.6f, want "
              "[%.6f, %.6f]", name, m->ann_recall, ann / 2, ann_hi / 2);
    else
        CHECK(isnan(m->ann_recall), "%s: ANN recall without an ANN index", name);
    if (m->completion != SUBQ_EVAL_SELECTION)
        CHECK(e.n_share > 0 && fabs(m->share - e.share / e.n_share) < 1e-4, "%s: share %.6f, want %.6f", name,
              m->share, e.share / e.n_share);
    else
        CHECK(isnan(m->share), "%s: share without completion", name);
    if (r->stat.method == mi) {
        int64_t n_sfx = 0; /* suffix token count from the full run */
        for (int wi = 0; wi < n_win; wi++)
            for (int t = (int)(r->stat.split * ws[wi].len); t + 1 < ws[wi].len; t++) n_sfx += ws[wi].seg[t] == ws[wi].seg[t + 1];
        CHECK(close_to(r->stat.ppl_full, exp(full_sfx / n_sfx), 1e-9) &&
                  close_to(r->stat.ppl_dynamic, exp(e.sfx_nll / n_sfx), 1e-9) &&
                  close_to(r->stat.ppl_static, exp(e.sfx_nll_static / n_sfx), 1e-9),
              "static vs dynamic (%s): full %.6f dynamic %.6f static %.6f, want %.6f %.6f %.6f", name, r->stat.ppl_full,
              r->stat.ppl_dynamic, r->stat.ppl_static, exp(full_sfx / n_sfx), exp(e.sfx_nll / n_sfx),
              exp(e.sfx_nll_static / n_sfx));
    }
}

/* The planned methods and skipped budgets of a budget run (no forward passes
 * needed: planning happens before the windows; a run on one window). */
static void test_budgets(const char *text_path) {
    subq_error err = {0};
    eval_config cfg;
    eval_config_default(&cfg);
    const char *files[1] = {text_path};
    /* CTX 100, sink 2 + tail 4 = 6 fixed reads, completion fetch d_phi/2 + d_phi/head_dim = 8 + 2 = 10 */
    const int kinds[2] = {SUBQ_SELECT_ORACLE, SUBQ_SELECT_WINDOW};
    const double budgets[3] = {7, 10, 25}; /* 7% of 100 = 7.000000000000001 must stay 7 tokens */
    cfg.eval_files = files, cfg.n_eval_files = 1, cfg.ctx = CTX, cfg.max_windows = 1;
    cfg.selectors = kinds, cfg.n_selectors = 2, cfg.budgets = budgets, cfg.n_budgets = 3;
    cfg.plan.n_sink = SINK, cfg.plan.n_tail = TAIL, cfg.maps = maps, cfg.plan.layers = "1,3";
    subq_eval_result *r;
    if (eval_run(ctx, &cfg, NULL, NULL, &r, &err)) {
        CHECK(0, "budget run: %s", err.msg);
        return;
    }
    /* n = ceil(f N); selection K = n - 6; worst K = floor(n - 16); amortised K = floor(n - 6 - 10/100) */
    struct { double b; subq_eval_completion c; int k; } want[] = {
        {7, SUBQ_EVAL_SELECTION, 1},  {7, SUBQ_EVAL_HYBRID_AMORTISED, 0},  {10, SUBQ_EVAL_SELECTION, 4},
        {10, SUBQ_EVAL_HYBRID_AMORTISED, 3}, {25, SUBQ_EVAL_SELECTION, 19}, {25, SUBQ_EVAL_HYBRID_WORST, 9},
        {25, SUBQ_EVAL_HYBRID_AMORTISED, 18},
    };
    const int nw = sizeof want / sizeof want[0];
    CHECK(r->n_methods == 2 * nw, "%d methods planned, want %d", r->n_methods, 2 * nw);
    for (int i = 0; i < r->n_methods && i < 2 * nw; i++) {
        const subq_eval_method *m = &r->methods[i];
        CHECK(m->select == kinds[i / nw] && m->budget_pct == want[i % nw].b && m->completion == want[i % nw].c &&
                  m->k == want[i % nw].k,
              "method %d: %s@%d budget %g completion %d, want budget %g completion %d K %d", i,
              selector_kind_name((subq_selector_kind)m->select), m->k, m->budget_pct, m->completion, want[i % nw].b,
              want[i % nw].c, want[i % nw].k);
    }
    CHECK(r->n_skipped == 2 && r->skipped[0].budget_pct == 7 && r->skipped[0].budget_reads == 7 &&
              r->skipped[0].completion == SUBQ_EVAL_HYBRID_WORST && r->skipped[1].budget_pct == 10,
          "skipped: %d (want the worst-case hybrid at 7%% and 10%%)", r->n_skipped);
    /* static vs dynamic: the first selector's selection-only method of the largest budget */
    CHECK(r->stat.method == 4 && r->methods[4].k == 19, "static method %d, want 4 (oracle@19, 25%%)", r->stat.method);
    for (int i = 0; i < r->n_methods; i++)
        CHECK(r->methods[i].completion == SUBQ_EVAL_SELECTION || isfinite(r->methods[i].share), "hybrid %d has no share", i);
    eval_result_free(r);
}

int main(void) {
    char path[1024];
    subq_error err = {0};
    test_bootstrap();
    if (subq_model_load(test_shared_path("models/stories260K.gguf", path, sizeof path), &model, &err)) {
        CHECK(0, "load: %s", err.msg);
        return test_summary();
    }
    const model_hparams *hp = &model->hp;
    subq_context_params cp = subq_context_default_params();
    cp.n_ctx = CTX;
    cp.n_threads = 1;
    uint64_t rng = rng_seed(11);
    phi_dims d = {.head_dim = hp->head_dim, .d_emb = 16, .d_hidden = 16, .d_phi = 16, .n_head = hp->n_head,
                  .n_head_kv = hp->n_head_kv};
    if (subq_context_new(model, &cp, &ctx, &err) || search_proj_random(model, sparse, 2, 16, 7, &proj, &err) ||
        phi_maps_new(&d, hp->n_layer, sparse, 2, model_fingerprint(model), &maps, &err)) {
        CHECK(0, "setup: %s", err.msg);
        return test_summary();
    }
    phi_maps_init(maps, 0.5f, &rng);
    for (int l = 0; l < hp->n_layer; l++) {
        cap.h[l] = malloc((size_t)CTX * hp->n_embd * sizeof(float));
        cap.q[l] = malloc((size_t)CTX * hp->n_head * hp->head_dim * sizeof(float));
    }
    /* three documents of about 60, 30 and 85 tokens: the first two pack into the first window */
    const char *tmp = getenv("SUBQ_TMP");
    char text_path[1024];
    snprintf(text_path, sizeof text_path, "%s/test_eval.jsonl", tmp ? tmp : "/tmp");
    FILE *f = fopen(text_path, "w");
    const char *story = "Once upon a time, there was a little dog named Max. Max liked to run in the park with his "
                        "friend Sue. One day they found a big red ball under a tree and played until the sun went down. "
                        "Then they went home and ate soup with bread. ";
    const int chars[3] = {150, 75, 215};
    for (int i = 0; i < 3 && f; i++) {
        char doc[1024];
        int n = 0;
        while (n < chars[i]) n += snprintf(doc + n, sizeof doc - (size_t)n, "%s", story);
        doc[chars[i]] = '\0';
        fprintf(f, "{\"text\": \"%s\"}\n", doc);
    }
    CHECK(f && !fclose(f), "cannot write %s", text_path);

    eval_config cfg;
    eval_config_default(&cfg);
    const char *files[1] = {text_path};
    const int kinds[5] = {SUBQ_SELECT_EXACT, SUBQ_SELECT_HNSW, SUBQ_SELECT_QUEST, SUBQ_SELECT_ORACLE,
                          SUBQ_SELECT_WINDOW};
    const int ks[2] = {3, 8};
    cfg.eval_files = files, cfg.n_eval_files = 1, cfg.ctx = CTX;
    cfg.selectors = kinds, cfg.n_selectors = 5, cfg.ks = ks, cfg.n_k = 2;
    cfg.plan.n_sink = SINK, cfg.plan.n_tail = TAIL, cfg.proj = proj, cfg.maps = maps, cfg.per_layer = 1;
    cfg.plan.quest_headmean = 1; /* as plan_of (per-head Quest: tests/test_select_heads.c) */
    subq_eval_result *r;
    if (eval_run(ctx, &cfg, NULL, NULL, &r, &err)) {
        CHECK(0, "eval: %s", err.msg);
        return test_summary();
    }
    /* the windows, as the corpus cuts them */
    win ws[2];
    subq_corpus *corpus;
    subq_corpus_params kp = {.seq = CTX, .pack = 1, .eval_frac = 0.05f, .seed = 1, .eval_only = 1};
    CHECK(!corpus_new(model, &kp, &corpus, &err) && !corpus_add_path(corpus, model, text_path, 1, &err) &&
              !corpus_finish(corpus, &err),
          "corpus: %s", err.msg);
    CHECK(corpus->eval.n_seq == 2 && r->n_windows == 2, "%d windows, want 2", r->n_windows);
    for (int i = 0; i < 2; i++)
        CHECK(!corpus_get(corpus, &corpus->eval, i, ws[i].tok, ws[i].pos, ws[i].seg, &ws[i].len, &err), "window %d", i);
    CHECK(ws[0].seg[ws[0].len - 1] == 1 && ws[1].seg[ws[1].len - 1] == 0, "window 1 holds two documents, window 2 one");
    corpus_free(corpus);
    /* every selector on the projections' layers only (1 and 3) */
    for (int l = 0; l < hp->n_layer; l++)
        CHECK(r->sparse_layers[l] == (l == 1 || l == 3), "layer %d sparse: %d", l, r->sparse_layers[l]);
    CHECK(r->n_methods == 5 * 2 * 2, "%d methods", r->n_methods);
    CHECK(r->stat.method == 2 && r->methods[2].k == 8 && r->methods[2].select == SUBQ_SELECT_EXACT &&
              r->methods[2].completion == SUBQ_EVAL_SELECTION,
          "static method %d, want exact@8", r->stat.method);
    float *lf = malloc((size_t)CTX * hp->n_vocab * sizeof(float)), *lm = malloc((size_t)CTX * hp->n_vocab * sizeof(float));
    for (int i = 0; i < r->n_methods; i++) check_method(r, i, ws, 2, lf, lm);
    /* --compare: exact@8 vs quest@8 from the per-window sums */
    double mean, lo, hi;
    CHECK(!eval_compare(r, 2, 10, 1000, 23, &mean, &lo, &hi, &err) &&
              fabs(mean - (r->methods[2].nll_diff - r->methods[10].nll_diff)) < 1e-9 && lo <= mean && mean <= hi,
          "compare exact@8, quest@8: %g [%g, %g]", mean, lo, hi);
    eval_result_free(r);

    test_budgets(text_path);

    free(lf);
    free(lm);
    for (int l = 0; l < hp->n_layer; l++) free(cap.h[l]), free(cap.q[l]);
    phi_maps_free(maps);
    search_proj_free(proj);
    subq_context_free(ctx);
    subq_model_free(model);
    return test_summary();
}
