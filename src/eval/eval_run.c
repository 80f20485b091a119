#include "eval/eval_run.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sparse/attn_plan.h"
#include "base/error.h"
#include "base/layers.h"
#include "base/timer.h"
#include "eval/bootstrap.h"
#include "model/context.h"
#include "complete/phi_cache.h"
#include "data/corpus.h"

void eval_config_default(eval_config *c) {
    memset(c, 0, sizeof *c);
    c->ctx = 512;
    c->pack = 1;
    c->max_windows = 32;
    c->eval_frac = 0.05f;
    attn_plan p;
    attn_plan_default(&p);
    c->plan = p.plan;
    c->static_split = 0.5;
    c->n_resamples = 1000;
    c->seed = 17;
}

static const char *completion_suffix[] = {"", "+phi", "+phi1", "+phiA"};

const char *eval_method_name(const subq_eval_method *m, char *buf, size_t cap) {
    snprintf(buf, cap, "%s@%d%s", selector_kind_name((subq_selector_kind)m->select), m->k,
             completion_suffix[m->completion]);
    return buf;
}

/* ---- method planning ---------------------------------------------------- */

static subq_eval_method *add_method(subq_eval_result *r, int kind, int k, subq_eval_completion comp, double budget, double reads) {
    subq_eval_method *m = &r->methods[r->n_methods++];
    m->select = kind, m->k = k, m->completion = comp, m->budget_pct = budget, m->reads = reads;
    return m;
}

/* Per selector, per K: selection only, and with completion when there are
 * maps. Per budget B% of the window: n = ceil(B/100 * ctx) token reads per
 * step (rounded up, as the seed's budget accounting); selection only gets
 * K = n - sink - tail; the hybrid also pays the completion cache's fetch,
 * every step (worst case, one generated token per prefill) or amortised over
 * the window. Budgets the fixed reads alone exceed are recorded as skipped. */
static subq_status plan_methods(const eval_config *cfg, int head_dim, subq_eval_result *r, subq_error *err) {
    const int n_per = cfg->n_budgets ? 3 : 2, n_pts = cfg->n_budgets ? cfg->n_budgets : cfg->n_k;
    const size_t cap = (size_t)cfg->n_selectors * n_pts * n_per;
    r->methods = calloc(cap ? cap : 1, sizeof(subq_eval_method));
    r->skipped = calloc((size_t)(n_pts ? n_pts : 1) * n_per, sizeof(subq_eval_skip));
    if (!r->methods || !r->skipped) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    const int fixed = cfg->plan.n_sink + cfg->plan.n_tail, d_phi = cfg->maps ? cfg->maps->dims.d_phi : 0;
    const double fetch = phi_budget_tokens(0, 0, 0, d_phi, head_dim, 1.0);
    for (int si = 0; si < cfg->n_selectors; si++) {
        const int kind = cfg->selectors[si];
        for (int i = 0; i < n_pts; i++) {
            if (!cfg->n_budgets) {
                const int k = cfg->ks[i];
                add_method(r, kind, k, SUBQ_EVAL_SELECTION, NAN, fixed + k);
                if (cfg->maps)
                    add_method(r, kind, k, SUBQ_EVAL_HYBRID, NAN,
                               phi_budget_tokens(cfg->plan.n_sink, cfg->plan.n_tail, k, d_phi, head_dim, cfg->ctx));
                continue;
            }
            /* 1e-9: a budget that is a whole number of tokens is not rounded up past it */
            const double n = ceil(cfg->budgets[i] / 100.0 * cfg->ctx - 1e-9);
            const double cost[3] = {0, fetch, fetch / cfg->ctx};
            const subq_eval_completion comp[3] = {SUBQ_EVAL_SELECTION, SUBQ_EVAL_HYBRID_WORST, SUBQ_EVAL_HYBRID_AMORTISED};
            for (int j = 0; j < 3; j++) {
                const int k = (int)floor(n - fixed - cost[j] + 1e-9);
                if (k >= 0) {
                    add_method(r, kind, k, comp[j], cfg->budgets[i], fixed + k + cost[j]);
                } else if (si == 0) {
                    subq_eval_skip *s = &r->skipped[r->n_skipped++];
                    s->budget_pct = cfg->budgets[i], s->budget_reads = n, s->completion = comp[j], s->fixed_reads = fixed + cost[j];
                }
            }
        }
    }
    return SUBQ_OK;
}

/* ---- checks and layers ---------------------------------------------------- */

static subq_status check_config(const subq_context *c, const eval_config *cfg, subq_error *err) {
    if (cfg->ctx < 4 || cfg->ctx > c->kv.n_ctx)
        return subq_fail(err, SUBQ_ERR_ARG, "evaluation windows of %d tokens need 4 to %d (the context's KV cache)",
                         cfg->ctx, c->kv.n_ctx);
    if (cfg->n_files + cfg->n_eval_files == 0) return subq_fail(err, SUBQ_ERR_ARG, "no evaluation text given");
    if (cfg->max_windows < 1) return subq_fail(err, SUBQ_ERR_ARG, "at least one window is needed");
    if (!(cfg->eval_frac > 0 && cfg->eval_frac < 1))
        return subq_fail(err, SUBQ_ERR_ARG, "held-out fraction %g is outside (0, 1)", cfg->eval_frac);
    if (!(cfg->static_split >= 0 && cfg->static_split < 1))
        return subq_fail(err, SUBQ_ERR_ARG, "static split %g is outside [0, 1)", cfg->static_split);
    if (cfg->n_budgets ? !cfg->budgets : (cfg->n_k < 1 || !cfg->ks))
        return subq_fail(err, SUBQ_ERR_ARG, "no K values or budgets to evaluate");
    if (cfg->n_budgets && !cfg->maps)
        return subq_fail(err, SUBQ_ERR_ARG, "budgets compare selection only with the hybrid: completion maps needed");
    for (int i = 0; i < cfg->n_budgets; i++)
        if (!(cfg->budgets[i] > 0 && cfg->budgets[i] <= 100))
            return subq_fail(err, SUBQ_ERR_ARG, "budget %g%% is outside (0, 100]", cfg->budgets[i]);
    for (int i = 0; !cfg->n_budgets && i < cfg->n_k; i++)
        if (cfg->ks[i] < 0) return subq_fail(err, SUBQ_ERR_ARG, "K %d is negative", cfg->ks[i]);
    if (cfg->n_resamples < 2) return subq_fail(err, SUBQ_ERR_ARG, "bootstrap needs at least 2 resamples");
    for (int i = 0; i < cfg->n_selectors; i++) {
        int k = cfg->selectors[i];
        if (k < 0 || k >= SUBQ_SELECT_COUNT) return subq_fail(err, SUBQ_ERR_ARG, "unknown selector kind %d", k);
        if (!selector_kind_available((subq_selector_kind)k))
            return subq_fail(err, SUBQ_ERR_UNSUPPORTED, "selector '%s' is not in this build",
                             selector_kind_name((subq_selector_kind)k));
        if (selector_kind_needs_search((subq_selector_kind)k) && !cfg->proj)
            return subq_fail(err, SUBQ_ERR_ARG, "selector '%s' needs search projections",
                             selector_kind_name((subq_selector_kind)k));
    }
    return SUBQ_OK;
}

/* The sparse layers, the same for every method: the given list, else the
 * layers with projections, else all. Also as a list string for plans. */
static subq_status sparse_layers(const eval_config *cfg, const model_hparams *hp, unsigned char *mask, char *list,
                                 size_t cap, subq_error *err) {
    const int n_layer = hp->n_layer;
    if (cfg->plan.layers) {
        subq_status s = model_layers_parse(hp, cfg->plan.layers, mask, err);
        if (s) return s;
    } else { /* sliding layers keep their window */
        for (int l = 0; l < n_layer; l++) mask[l] = (cfg->proj ? cfg->proj->wq[l] != NULL : 1) && !hp->layer[l].window;
    }
    size_t len = 0;
    list[0] = '\0';
    for (int l = 0; l < n_layer; l++)
        if (mask[l]) len += (size_t)snprintf(list + len, cap - len, "%s%d", len ? "," : "", l);
    if (len == 0) return subq_fail(err, SUBQ_ERR_ARG, "no sparse layers to evaluate");
    return SUBQ_OK;
}

/* ---- scoring --------------------------------------------------------------- */

/* One window and the full-attention reference of its tokens. */
typedef struct window {
    int len, from;            /* tokens; first token of the suffix (static vs dynamic) */
    int32_t *tok, *pos, *seg;
    float *logits_full;       /* [len][n_vocab] */
    double *lse_full;         /* log Σ_v exp(logits_full[t][v]) */
    int *top_full;            /* argmax_v logits_full[t][v] */
} window;

typedef struct score_sums {
    double nll, kl, nll_suffix, kl_suffix;
    int64_t n, top1, n_suffix;
} score_sums;

/* log Σ exp(x) in double and the index of the first maximum */
static double logsumexp_argmax(const float *x, int n, int *arg) {
    int a = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[a]) a = i;
    double s = 0.0;
    for (int i = 0; i < n; i++) s += exp((double)x[i] - x[a]);
    *arg = a;
    return log(s) + x[a];
}

/* Over the scored tokens t (t + 1 in the same document) of the window, with
 * lp = log softmax of the method's logits and lf of full attention's:
 *   nll = -lp[tok[t+1]];  KL(p_full || p) = Σ_v exp(lf_v) (lf_v - lp_v);
 *   top1 = [argmax lp == argmax lf]; suffix sums for t >= from. */
static void score_window(const window *w, const float *logits, int n_vocab, score_sums *s) {
    memset(s, 0, sizeof *s);
    for (int t = 0; t + 1 < w->len; t++) {
        if (w->seg[t + 1] != w->seg[t]) continue;
        const float *x = logits + (size_t)t * n_vocab, *f = w->logits_full + (size_t)t * n_vocab;
        int top;
        const double lse = logsumexp_argmax(x, n_vocab, &top), lse_f = w->lse_full[t];
        double kl = 0.0;
        for (int v = 0; v < n_vocab; v++) {
            const double lf = (double)f[v] - lse_f;
            kl += exp(lf) * (lf - ((double)x[v] - lse));
        }
        const double nll = lse - x[w->tok[t + 1]];
        s->nll += nll, s->kl += kl, s->n++;
        s->top1 += top == w->top_full[t];
        if (t >= w->from) s->nll_suffix += nll, s->kl_suffix += kl, s->n_suffix++;
    }
}

/* ---- running ---------------------------------------------------------------- */

typedef struct method_acc {
    sparse_metrics *layer;    /* [n_layer] retrieval metrics summed over windows */
    double *win_kl;           /* [n_windows] */
    int64_t top1;
    double nll_suffix, kl_suffix;
    double *layer_win_kl;     /* [n_layer][n_windows]: the layer alone (per_layer) */
    int64_t *layer_top1;      /* [n_layer] */
} method_acc;

typedef struct run_state {
    subq_context *c;
    const eval_config *cfg;
    subq_eval_result *r;
    char layers[4096];        /* the sparse layers as a list */
    float *logits;            /* [ctx][n_vocab] of the method being run */
    subq_eval_progress_fn progress;
    void *user;
    int64_t done, total;
    /* suffix tokens (static vs dynamic): count, full attention's NLL, the
     * frozen index's NLL and KL */
    int64_t sfx_n;
    double sfx_full_nll, sfx_static_nll, sfx_static_kl;
} run_state;

static attn_plan method_plan(const eval_config *cfg, const subq_eval_method *m, const char *layers) {
    attn_plan p = {.plan = cfg->plan, .complete = m->completion == SUBQ_EVAL_SELECTION ? NULL : cfg->maps,
                   .complete_heads = cfg->complete_heads};
    p.plan.layers = layers;
    p.plan.selector = (subq_selector_kind)m->select;
    p.plan.top_k = m->k;
    p.plan.sparse_prefill = SUBQ_PREFILL_TOKENWISE; /* teacher forcing: every query retrieves */
    return p;
}

/* Forward the window under `plan` (NULL: full attention) into st->logits;
 * with `acc`, the sparse stages measure retrieval and their metrics are
 * added to acc[layer]; freeze >= 0 freezes the indexes at that slot. */
static subq_status run_window(run_state *st, const window *w, const attn_plan *plan, int freeze, sparse_metrics *acc,
                              subq_error *err) {
    subq_context *c = st->c;
    const int n_layer = c->model->hp.n_layer;
    subq_context_reset(c);
    context_clear_plan(c);
    subq_status s = plan ? context_set_plan(c, plan, st->cfg->proj, err) : SUBQ_OK;
    for (int l = 0; !s && l < n_layer; l++) {
        if (acc) s = attn_stage_enable_metrics(c->stages[l], err);
        attn_stage_freeze(c->stages[l], freeze);
    }
    if (!s) s = context_forward(c, w->tok, w->len, w->pos, w->seg, st->logits, 1, err);
    for (int l = 0; !s && acc && l < n_layer; l++) {
        const sparse_metrics *m = attn_stage_metrics(c->stages[l]);
        if (m) sparse_metrics_add(&acc[l], m);
    }
    if (!s && st->progress && st->progress(st->user, ++st->done, st->total))
        s = subq_fail(err, SUBQ_ERR_CANCELLED, "evaluation stopped by the caller after %lld of %lld forward passes",
                      (long long)st->done, (long long)st->total);
    return s;
}

/* Full attention, then every method (and each layer alone), then the frozen
 * index, on window wi. */
static subq_status eval_window(run_state *st, int wi, window *w, method_acc *acc, subq_error *err) {
    const eval_config *cfg = st->cfg;
    subq_eval_result *r = st->r;
    const int n_vocab = st->c->model->hp.n_vocab;
    subq_status s = run_window(st, w, NULL, -1, NULL, err);
    if (s) return s;
    memcpy(w->logits_full, st->logits, (size_t)w->len * n_vocab * sizeof(float));
    for (int t = 0; t < w->len; t++)
        w->lse_full[t] = logsumexp_argmax(w->logits_full + (size_t)t * n_vocab, n_vocab, &w->top_full[t]);
    score_sums sc;
    score_window(w, st->logits, n_vocab, &sc);
    r->win_n[wi] = sc.n;
    r->full_win_nll[wi] = sc.nll;
    st->sfx_full_nll += sc.nll_suffix;
    st->sfx_n += sc.n_suffix;
    for (int mi = 0; mi < r->n_methods; mi++) {
        subq_eval_method *m = &r->methods[mi];
        method_acc *a = &acc[mi];
        attn_plan plan = method_plan(cfg, m, st->layers);
        if ((s = run_window(st, w, &plan, -1, a->layer, err))) return s;
        score_window(w, st->logits, n_vocab, &sc);
        m->win_nll[wi] = sc.nll;
        a->win_kl[wi] = sc.kl;
        a->top1 += sc.top1;
        a->nll_suffix += sc.nll_suffix;
        a->kl_suffix += sc.kl_suffix;
        for (int l = 0; cfg->per_layer && l < r->n_layer; l++) {
            if (!r->sparse_layers[l]) continue;
            char one[16];
            snprintf(one, sizeof one, "%d", l);
            plan.plan.layers = one;
            if ((s = run_window(st, w, &plan, -1, NULL, err))) return s;
            score_window(w, st->logits, n_vocab, &sc);
            a->layer_win_kl[(size_t)l * r->n_windows + wi] = sc.kl;
            a->layer_top1[l] += sc.top1;
        }
    }
    if (r->stat.method >= 0) {
        attn_plan plan = method_plan(cfg, &r->methods[r->stat.method], st->layers);
        if ((s = run_window(st, w, &plan, w->from, NULL, err))) return s;
        score_window(w, st->logits, n_vocab, &sc);
        st->sfx_static_nll += sc.nll_suffix;
        st->sfx_static_kl += sc.kl_suffix;
    }
    return SUBQ_OK;
}

/* ---- aggregation ------------------------------------------------------------- */

static double ratio(double num, double den) { return den > 0 ? num / den : NAN; }

/* Per-layer means of the retrieval metrics, and their means over the layers
 * that measured them (filler and share: pooled over layers). */
static void aggregate_metrics(subq_eval_method *m, const sparse_metrics *acc, int n_layer) {
    double mass = 0, recall = 0, ms = 0, rs = 0, ann = 0, req = 0, fill = 0, share = 0, rows = 0;
    int64_t n_rows = 0;
    int nl = 0, ns = 0, na = 0;
    int64_t n_share = 0;
    for (int l = 0; l < n_layer; l++) {
        const sparse_metrics *a = &acc[l];
        m->layer_mass[l] = ratio(a->mass_sum, (double)a->n_queries);
        m->layer_recall[l] = ratio(a->recall_sum, (double)a->n_queries);
        m->layer_mass_seed[l] = ratio(a->mass_seed_sum, (double)a->n_seed);
        m->layer_recall_seed[l] = ratio(a->recall_seed_sum, (double)a->n_seed);
        if (a->n_queries) mass += m->layer_mass[l], recall += m->layer_recall[l], nl++;
        if (a->n_seed) ms += m->layer_mass_seed[l], rs += m->layer_recall_seed[l], ns++;
        if (a->n_ann) ann += a->ann_recall_sum / (double)a->n_ann, na++;
        req += (double)a->n_requested;
        fill += (double)a->n_filler;
        share += a->share_sum;
        n_share += a->n_share;
        rows += a->rows_sum;
        n_rows += a->n_rows;
    }
    m->kv_rows = ratio(rows, (double)n_rows);
    m->mass = ratio(mass, nl), m->recall = ratio(recall, nl);
    m->mass_seed = ratio(ms, ns), m->recall_seed = ratio(rs, ns);
    m->ann_recall = ratio(ann, na);
    m->filler = req > 0 ? fill / req : 0;
    m->share = ratio(share, (double)n_share);
}

static subq_status aggregate(const run_state *st, method_acc *acc, subq_error *err) {
    const eval_config *cfg = st->cfg;
    subq_eval_result *r = st->r;
    const int nw = r->n_windows;
    double *diff = malloc((size_t)nw * sizeof(double));
    if (!diff) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    double full_nll = 0;
    r->n_scored = 0;
    for (int w = 0; w < nw; w++) full_nll += r->full_win_nll[w], r->n_scored += r->win_n[w];
    r->full_ppl = exp(ratio(full_nll, (double)r->n_scored));
    subq_status s = SUBQ_OK;
    for (int mi = 0; mi < r->n_methods && !s; mi++) {
        subq_eval_method *m = &r->methods[mi];
        method_acc *a = &acc[mi];
        double nll = 0;
        for (int w = 0; w < nw; w++) nll += m->win_nll[w], diff[w] = m->win_nll[w] - r->full_win_nll[w];
        m->ppl = exp(ratio(nll, (double)r->n_scored));
        m->gap = m->ppl / r->full_ppl - 1.0;
        m->top1 = ratio((double)a->top1, (double)r->n_scored);
        s = bootstrap_block_mean(diff, r->win_n, nw, cfg->n_resamples, cfg->seed, &m->nll_diff, &m->nll_diff_lo,
                                 &m->nll_diff_hi, err);
        if (!s) s = bootstrap_block_mean(a->win_kl, r->win_n, nw, cfg->n_resamples, cfg->seed + 1, &m->kl, &m->kl_lo,
                                         &m->kl_hi, err);
        aggregate_metrics(m, a->layer, r->n_layer);
        for (int l = 0; l < r->n_layer && !s; l++) {
            m->layer_kl[l] = m->layer_kl_lo[l] = m->layer_kl_hi[l] = m->layer_top1[l] = NAN;
            if (!cfg->per_layer || !r->sparse_layers[l]) continue;
            s = bootstrap_block_mean(a->layer_win_kl + (size_t)l * nw, r->win_n, nw, cfg->n_resamples,
                                     cfg->seed + 2 + (uint64_t)l, &m->layer_kl[l], &m->layer_kl_lo[l],
                                     &m->layer_kl_hi[l], err);
            m->layer_top1[l] = ratio((double)a->layer_top1[l], (double)r->n_scored);
        }
    }
    free(diff);
    if (!s && r->stat.method >= 0) {
        const method_acc *a = &acc[r->stat.method];
        const double n = (double)st->sfx_n;
        r->stat.ppl_full = exp(ratio(st->sfx_full_nll, n));
        r->stat.ppl_dynamic = exp(ratio(a->nll_suffix, n));
        r->stat.ppl_static = exp(ratio(st->sfx_static_nll, n));
        r->stat.kl_dynamic = ratio(a->kl_suffix, n);
        r->stat.kl_static = ratio(st->sfx_static_kl, n);
    }
    return s;
}

/* ---- entry point --------------------------------------------------------------- */

static subq_status alloc_method(subq_eval_method *m, method_acc *a, int n_layer, int n_windows, int per_layer) {
    const size_t L = (size_t)n_layer, W = (size_t)n_windows;
    double **arrays[] = {&m->layer_mass, &m->layer_recall, &m->layer_mass_seed, &m->layer_recall_seed,
                         &m->layer_kl,   &m->layer_kl_lo,  &m->layer_kl_hi,     &m->layer_top1};
    for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++)
        if (!(*arrays[i] = malloc(L * sizeof(double)))) return SUBQ_ERR_NOMEM;
    m->win_nll = calloc(W, sizeof(double));
    a->win_kl = calloc(W, sizeof(double));
    a->layer = calloc(L, sizeof(sparse_metrics));
    a->layer_win_kl = per_layer ? calloc(L * W, sizeof(double)) : NULL;
    a->layer_top1 = calloc(L, sizeof(int64_t));
    if (!m->win_nll || !a->win_kl || !a->layer || (per_layer && !a->layer_win_kl) || !a->layer_top1)
        return SUBQ_ERR_NOMEM;
    return SUBQ_OK;
}

static void free_acc(method_acc *a) {
    free(a->layer);
    free(a->win_kl);
    free(a->layer_win_kl);
    free(a->layer_top1);
}

/* The static vs dynamic comparison runs the first selector's selection-only
 * method with the largest K of this run (with budgets: the largest budget's). */
static int static_method(const subq_eval_result *r) {
    int best = -1;
    for (int i = 0; i < r->n_methods; i++) {
        const subq_eval_method *m = &r->methods[i];
        if (m->select != r->methods[0].select || m->completion != SUBQ_EVAL_SELECTION) continue;
        if (best < 0 || m->k > r->methods[best].k) best = i;
    }
    return best;
}

subq_status eval_run(subq_context *c, const eval_config *cfg, subq_eval_progress_fn progress, void *user,
                     subq_eval_result **out, subq_error *err) {
    *out = NULL;
    subq_status s = check_config(c, cfg, err);
    if (s) return s;
    const model_hparams *hp = &c->model->hp;
    const double t0 = time_now_s();
    subq_eval_result *r = calloc(1, sizeof *r);
    run_state *st = calloc(1, sizeof *st);
    subq_corpus *corpus = NULL;
    method_acc *acc = NULL;
    window w = {0};
    if (!r || !st) {
        s = subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
        goto done;
    }
    r->n_layer = hp->n_layer;
    r->ctx = cfg->ctx;
    r->stat.method = -1;
    r->stat.split = cfg->static_split;
    r->stat.ppl_full = r->stat.ppl_dynamic = r->stat.ppl_static = r->stat.kl_dynamic = r->stat.kl_static = NAN;
    if (!(r->sparse_layers = calloc((size_t)hp->n_layer, 1))) {
        s = subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
        goto done;
    }
    if ((s = sparse_layers(cfg, hp, r->sparse_layers, st->layers, sizeof st->layers, err))) goto done;
    /* the held-out windows */
    subq_corpus_params cp = {.seq = cfg->ctx, .pack = cfg->pack, .eval_frac = cfg->eval_frac, .seed = 1, .eval_only = 1};
    if ((s = corpus_new(c->model, &cp, &corpus, err))) goto done;
    for (int i = 0; i < cfg->n_files && !s; i++) s = corpus_add_path(corpus, c->model, cfg->files[i], 0, err);
    for (int i = 0; i < cfg->n_eval_files && !s; i++) s = corpus_add_path(corpus, c->model, cfg->eval_files[i], 1, err);
    if (s || (s = corpus_finish(corpus, err))) goto done;
    r->n_windows = corpus->eval.n_seq < cfg->max_windows ? corpus->eval.n_seq : cfg->max_windows;
    if (r->n_windows == 0) {
        s = subq_fail(err, SUBQ_ERR_ARG, "the held-out split is empty: more text or a larger held-out fraction needed");
        goto done;
    }
    if ((s = plan_methods(cfg, hp->head_dim, r, err))) goto done;
    const size_t nw = (size_t)r->n_windows, logits_n = (size_t)cfg->ctx * hp->n_vocab;
    r->win_n = calloc(nw, sizeof(int64_t));
    r->full_win_nll = calloc(nw, sizeof(double));
    acc = calloc((size_t)(r->n_methods ? r->n_methods : 1), sizeof(method_acc));
    w.tok = malloc((size_t)cfg->ctx * sizeof(int32_t));
    w.pos = malloc((size_t)cfg->ctx * sizeof(int32_t));
    w.seg = malloc((size_t)cfg->ctx * sizeof(int32_t));
    w.logits_full = malloc(logits_n * sizeof(float));
    w.lse_full = malloc((size_t)cfg->ctx * sizeof(double));
    w.top_full = malloc((size_t)cfg->ctx * sizeof(int));
    st->logits = malloc(logits_n * sizeof(float));
    s = r->win_n && r->full_win_nll && acc && w.tok && w.pos && w.seg && w.logits_full && w.lse_full && w.top_full &&
                st->logits ? SUBQ_OK : SUBQ_ERR_NOMEM;
    for (int i = 0; i < r->n_methods && !s; i++) s = alloc_method(&r->methods[i], &acc[i], hp->n_layer, r->n_windows, cfg->per_layer);
    if (s) {
        s = subq_fail(err, SUBQ_ERR_NOMEM, "out of memory for %d x %d logits and %d methods", cfg->ctx, hp->n_vocab,
                      r->n_methods);
        goto done;
    }
    if (cfg->static_split > 0) r->stat.method = static_method(r);
    int n_alone = 0;
    for (int l = 0; l < hp->n_layer; l++) n_alone += cfg->per_layer && r->sparse_layers[l];
    st->c = c, st->cfg = cfg, st->r = r, st->progress = progress, st->user = user;
    st->total = (int64_t)nw * (1 + (int64_t)r->n_methods * (1 + n_alone) + (r->stat.method >= 0));
    for (int wi = 0; wi < r->n_windows && !s; wi++) {
        if ((s = corpus_get(corpus, &corpus->eval, wi, w.tok, w.pos, w.seg, &w.len, err))) break;
        w.from = (int)(cfg->static_split * w.len);
        s = eval_window(st, wi, &w, acc, err);
    }
    if (!s) s = aggregate(st, acc, err);
    r->seconds = time_now_s() - t0;
done:
    context_clear_plan(c);
    subq_context_reset(c);
    for (int i = 0; acc && i < r->n_methods; i++) free_acc(&acc[i]);
    free(acc);
    free(w.tok);
    free(w.pos);
    free(w.seg);
    free(w.logits_full);
    free(w.lse_full);
    free(w.top_full);
    if (st) free(st->logits);
    free(st);
    corpus_free(corpus);
    if (s) eval_result_free(r);
    else *out = r;
    return s;
}

void eval_result_free(subq_eval_result *r) {
    if (!r) return;
    for (int i = 0; r->methods && i < r->n_methods; i++) {
        subq_eval_method *m = &r->methods[i];
        free(m->layer_mass);
        free(m->layer_recall);
        free(m->layer_mass_seed);
        free(m->layer_recall_seed);
        free(m->layer_kl);
        free(m->layer_kl_lo);
        free(m->layer_kl_hi);
        free(m->layer_top1);
        free(m->win_nll);
    }
    free(r->methods);
    free(r->skipped);
    free(r->sparse_layers);
    free(r->win_n);
    free(r->full_win_nll);
    free(r);
}

subq_status eval_compare(const subq_eval_result *r, int a, int b, int n_resamples, uint64_t seed, double *mean, double *lo,
                         double *hi, subq_error *err) {
    if (a < -1 || b < -1 || a >= r->n_methods || b >= r->n_methods)
        return subq_fail(err, SUBQ_ERR_ARG, "no method %d or %d in this evaluation", a, b);
    const double *na = a < 0 ? r->full_win_nll : r->methods[a].win_nll;
    const double *nb = b < 0 ? r->full_win_nll : r->methods[b].win_nll;
    double *diff = malloc((size_t)r->n_windows * sizeof(double));
    if (!diff) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    for (int w = 0; w < r->n_windows; w++) diff[w] = na[w] - nb[w];
    subq_status s = bootstrap_block_mean(diff, r->win_n, r->n_windows, n_resamples, seed, mean, lo, hi, err);
    free(diff);
    return s;
}
