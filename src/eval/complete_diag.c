/* Completion diagnostics per (layer, head) (phi_diag.h). */
#include "eval/complete_diag.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sparse/attn_plan.h"
#include "attn/attn.h"
#include "base/error.h"
#include "base/timer.h"
#include "eval/eval.h"
#include "complete/phi_cache.h"
#include "select/selector.h"
#include "train/capture.h"

void phi_diag_records_free(phi_diag_records *r) {
    free(r->layer);
    free(r->head);
    free(r->n_mid);
    free(r->hmid);
    free(r->err_sel);
    free(r->err_hyb);
    free(r->share);
    free(r->err_sweep);
    memset(r, 0, sizeof *r);
}

static int grow(void **p, int64_t cap, size_t elem) {
    void *np = realloc(*p, (size_t)cap * elem);
    if (!np) return 0;
    *p = np;
    return 1;
}

static subq_status reserve(phi_diag_records *r, int64_t need, subq_error *err) {
    if (need <= r->cap) return SUBQ_OK;
    int64_t cap = r->cap ? r->cap : 4096;
    while (cap < need) cap *= 2;
    const size_t nk = (size_t)(r->n_k > 0 ? r->n_k : 1), ns = (size_t)(r->n_sel_k > 0 ? r->n_sel_k : 1);
    int ok = grow((void **)&r->layer, cap, sizeof(int16_t)) && grow((void **)&r->head, cap, sizeof(int16_t)) &&
             grow((void **)&r->n_mid, cap, sizeof(int32_t)) && grow((void **)&r->hmid, cap, sizeof(float)) &&
             grow((void **)&r->err_sel, cap, nk * sizeof(float)) && grow((void **)&r->err_hyb, cap, nk * sizeof(float)) &&
             grow((void **)&r->share, cap, nk * sizeof(float)) && grow((void **)&r->err_sweep, cap, ns * sizeof(float));
    if (!ok) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory for %lld diagnostic records", (long long)cap);
    r->cap = cap;
    return SUBQ_OK;
}

/* |a - b|_1 / |b|_1 */
static float rel_l1(const float *a, const double *b, int D) {
    double num = 0, den = 0;
    for (int d = 0; d < D; d++) {
        num += fabs(a[d] - b[d]);
        den += fabs(b[d]);
    }
    return (float)(num / (den > 0 ? den : 1e-30));
}

typedef struct diag_buf {
    float *K, *V;               /* [nkv][T][D] keys and values of the layer as floats */
    float *lk;                  /* [T][nkv][F] */
    phi_cache *cache;           /* [nkv] */
    phi_residual *res;          /* [nkv][n_k] */
    int32_t *cand;
    float *sc;                  /* [T] scores */
    double *full;               /* [D] */
    float *se, *lq, *out;       /* exact-set scores, log phi_q, an output */
    const float **ve;           /* exact-set values */
    float *lkr;                 /* [kmax][F] */
} diag_buf;

subq_status phi_diag_window(phi_diag_records *r, const subq_context *ctx, const phi_maps *maps, const float *const *q,
                            const int32_t *seg, int T, const phi_diag_config *cfg, subq_error *err) {
    const kv_cache *kv = &ctx->kv;
    const phi_dims *d = &maps->dims;
    const int D = d->head_dim, F = d->d_phi, nh = d->n_head, nkv = d->n_head_kv, grp = nh / nkv;
    const int nk = cfg->n_k, nsk = cfg->n_sel_k;
    if (nk < 1 || nk > SUBQ_PHI_DIAG_MAX_K || nsk < 0 || nsk > SUBQ_PHI_DIAG_MAX_K)
        return subq_fail(err, SUBQ_ERR_ARG, "diagnostics need 1..%d K values", SUBQ_PHI_DIAG_MAX_K);
    if (r->n == 0) {
        r->n_k = nk;
        r->n_sel_k = nsk;
    } else if (r->n_k != nk || r->n_sel_k != nsk) {
        return subq_fail(err, SUBQ_ERR_ARG, "diagnostic records were started with other K lists");
    }
    int kmax = 0;
    for (int i = 0; i < nk; i++) kmax = cfg->ks[i] > kmax ? cfg->ks[i] : kmax;
    for (int i = 0; i < nsk; i++) kmax = cfg->sel_ks[i] > kmax ? cfg->sel_ks[i] : kmax;
    const int min_mid = cfg->min_mid;
    const int max_e = cfg->n_sink + kmax + cfg->n_tail;
    diag_buf b = {0};
    subq_status s = SUBQ_OK;
    b.K = malloc((size_t)nkv * T * D * sizeof(float));
    b.V = malloc((size_t)nkv * T * D * sizeof(float));
    b.lk = malloc((size_t)T * nkv * F * sizeof(float));
    b.cache = calloc((size_t)nkv, sizeof(phi_cache));
    b.res = calloc((size_t)nkv * nk, sizeof(phi_residual));
    b.cand = malloc((size_t)(kmax > 0 ? kmax : 1) * sizeof(int32_t));
    b.sc = malloc((size_t)T * sizeof(float));
    b.full = malloc((size_t)D * sizeof(double));
    b.se = malloc((size_t)max_e * sizeof(float));
    b.ve = malloc((size_t)max_e * sizeof(float *));
    b.lq = malloc((size_t)F * sizeof(float));
    b.out = malloc((size_t)D * sizeof(float));
    b.lkr = malloc((size_t)(kmax > 0 ? kmax : 1) * F * sizeof(float));
    int ok = b.K && b.V && b.lk && b.cache && b.res && b.cand && b.sc && b.full && b.se && b.ve && b.lq && b.out && b.lkr;
    for (int g = 0; ok && g < nkv; g++) {
        ok = !phi_cache_init(&b.cache[g], F, D, err);
        for (int i = 0; ok && i < nk; i++) ok = !phi_residual_init(&b.res[g * nk + i], F, D, err);
    }
    if (!ok) s = subq_fail(err, SUBQ_ERR_NOMEM, "out of memory for completion diagnostics");
    for (int li = 0; !s && li < maps->n_sel; li++) {
        const int l = maps->layers[li];
        const double scale = ctx->model->hp.layer[l].scale;
        const float *ql = q[li];
        for (int g = 0; g < nkv; g++)
            for (int t = 0; t < T; t++) {
                kv_cache_row_f32(kv, kv_cache_key(kv, l, g, t), b.K + ((size_t)g * T + t) * D);
                kv_cache_row_f32(kv, kv_cache_value(kv, l, g, t), b.V + ((size_t)g * T + t) * D);
                phi_log_features(maps, l, PHI_K, g, b.K + ((size_t)g * T + t) * D, b.lk + ((size_t)t * nkv + g) * F);
            }
        selector *sel = NULL;
        selector_params sp;
        selector_params_default(&sp, SUBQ_SELECT_ORACLE, 0);
        selector_env env = {.kv = kv, .layer = l, .n_head = nh, .n_head_kv = nkv, .head_dim = D};
        if ((s = selector_new(&sp, &env, &sel, err)) || (s = selector_append(sel, NULL, T, 0, err))) {
            selector_free(sel);
            break;
        }
        int doc0 = 0, next_cache = cfg->n_sink;
        for (int g = 0; g < nkv; g++) phi_cache_reset(&b.cache[g]);
        for (int t = 0; t < T && !s; t++) {
            if (t > 0 && seg && seg[t] != seg[t - 1]) {
                doc0 = t;
                next_cache = t + cfg->n_sink;
                for (int g = 0; g < nkv; g++) phi_cache_reset(&b.cache[g]);
            }
            /* the cache holds M_t = [doc0 + n_sink, t - n_tail] */
            for (; next_cache <= t - cfg->n_tail; next_cache++)
                for (int g = 0; g < nkv; g++)
                    phi_cache_add(&b.cache[g], b.lk + ((size_t)next_cache * nkv + g) * F,
                                  b.V + ((size_t)g * T + next_cache) * D);
            const int mlo = doc0 + cfg->n_sink, mhi = t - cfg->n_tail, n_mid = mhi - mlo + 1;
            if (n_mid <= min_mid || n_mid < 2) continue;
            const int sink_hi = mlo, tail_lo = mhi + 1;
            select_mask m = {.n_slots = t + 1, .seg = seg, .query_seg = seg ? seg[t] : 0, .ex0_lo = doc0,
                             .ex0_hi = sink_hi, .ex1_lo = tail_lo, .ex1_hi = t + 1};
            const int got = selector_query(sel, NULL, ql + (size_t)t * nh * D, kmax, &m, b.cand);
            if (got < 0) {
                s = subq_fail(err, SUBQ_ERR_NOMEM, "completion diagnostics: out of memory in the oracle selector");
                break;
            }
            /* residuals per KV head and K (the top-K prefix of the candidates) */
            for (int g = 0; g < nkv; g++)
                for (int i = 0; i < nk; i++) {
                    const int k = cfg->ks[i] < got ? cfg->ks[i] : got;
                    for (int c = 0; c < k; c++) {
                        memcpy(b.lkr + (size_t)c * F, b.lk + ((size_t)b.cand[c] * nkv + g) * F, (size_t)F * sizeof(float));
                        b.ve[c] = b.V + ((size_t)g * T + b.cand[c]) * D;
                    }
                    phi_residual_compute(&b.res[g * nk + i], &b.cache[g], b.lkr, b.ve, k, cfg->eps);
                }
            if ((s = reserve(r, r->n + nh, err))) break;
            for (int h = 0; h < nh; h++) {
                const int g = h / grp;
                const float *qh = ql + (size_t)t * nh * D + (size_t)h * D;
                const float *Kg = b.K + (size_t)g * T * D, *Vg = b.V + (size_t)g * T * D;
                /* full attention over [doc0, t] in double, and H over M */
                double mx = -INFINITY;
                for (int j = doc0; j <= t; j++) {
                    double dot = 0;
                    for (int c = 0; c < D; c++) dot += (double)qh[c] * Kg[(size_t)j * D + c];
                    b.sc[j] = (float)(dot * scale);
                    mx = b.sc[j] > mx ? b.sc[j] : mx;
                }
                double z = 0, zm = 0, mm = -INFINITY;
                for (int c = 0; c < D; c++) b.full[c] = 0;
                for (int j = doc0; j <= t; j++) {
                    double w = exp(b.sc[j] - mx);
                    z += w;
                    for (int c = 0; c < D; c++) b.full[c] += w * Vg[(size_t)j * D + c];
                }
                for (int c = 0; c < D; c++) b.full[c] /= z;
                for (int j = mlo; j <= mhi; j++) mm = b.sc[j] > mm ? b.sc[j] : mm;
                for (int j = mlo; j <= mhi; j++) zm += exp(b.sc[j] - mm);
                /* H = -sum p log p, p_j = e^{s_j - mm} / zm */
                double H = 0;
                for (int j = mlo; j <= mhi; j++) {
                    double lp = b.sc[j] - mm - log(zm);
                    H -= exp(lp) * lp;
                }
                const int64_t ri = r->n++;
                r->layer[ri] = (int16_t)l;
                r->head[ri] = (int16_t)h;
                r->n_mid[ri] = n_mid;
                r->hmid[ri] = (float)(H / log((double)n_mid));
                phi_log_features(maps, l, PHI_Q, h, qh, b.lq);
                /* exact set of a given K: sinks, top-K, tail */
                for (int pass = 0; pass < nk + nsk; pass++) {
                    const int want = pass < nk ? cfg->ks[pass] : cfg->sel_ks[pass - nk];
                    const int k = want < got ? want : got;
                    int ne = 0;
                    for (int j = doc0; j < sink_hi; j++, ne++) b.se[ne] = b.sc[j], b.ve[ne] = Vg + (size_t)j * D;
                    for (int c = 0; c < k; c++, ne++) b.se[ne] = b.sc[b.cand[c]], b.ve[ne] = Vg + (size_t)b.cand[c] * D;
                    for (int j = tail_lo; j <= t; j++, ne++) b.se[ne] = b.sc[j], b.ve[ne] = Vg + (size_t)j * D;
                    phi_complete_head(NULL, D, NULL, b.se, b.ve, ne, b.out, NULL);
                    float e_sel = rel_l1(b.out, b.full, D);
                    if (pass >= nk) {
                        r->err_sweep[ri * nsk + (pass - nk)] = e_sel;
                        continue;
                    }
                    phi_hybrid_info info;
                    phi_complete_head(&b.res[g * nk + pass], D, b.lq, b.se, b.ve, ne, b.out, &info);
                    r->err_sel[ri * nk + pass] = e_sel;
                    r->err_hyb[ri * nk + pass] = rel_l1(b.out, b.full, D);
                    r->share[ri * nk + pass] = (float)info.z_share;
                }
            }
        }
        selector_free(sel);
    }
    for (int g = 0; b.cache && g < nkv; g++) {
        phi_cache_free(&b.cache[g]);
        for (int i = 0; b.res && i < nk; i++) phi_residual_free(&b.res[g * nk + i]);
    }
    free(b.K);
    free(b.V);
    free(b.lk);
    free(b.cache);
    free(b.res);
    free(b.cand);
    free(b.sc);
    free(b.full);
    free(b.se);
    free(b.ve);
    free(b.lq);
    free(b.out);
    free(b.lkr);
    return s;
}

void phi_diag_mean(const phi_diag_records *r, int layer, int head, double hmid_lo, double hmid_hi, subq_complete_diag_cell *out) {
    memset(out, 0, sizeof *out);
    const int nk = r->n_k, nsk = r->n_sel_k;
    for (int64_t i = 0; i < r->n; i++) {
        if ((layer >= 0 && r->layer[i] != layer) || (head >= 0 && r->head[i] != head)) continue;
        if (!(r->hmid[i] >= hmid_lo && r->hmid[i] < hmid_hi)) continue;
        out->n++;
        out->hmid += r->hmid[i];
        for (int k = 0; k < nk; k++) {
            out->err_sel[k] += r->err_sel[i * nk + k];
            out->err_hyb[k] += r->err_hyb[i * nk + k];
            out->share[k] += r->share[i * nk + k];
            out->win[k] += r->err_hyb[i * nk + k] < r->err_sel[i * nk + k];
            const double dh = (double)r->err_hyb[i * nk + k] - r->err_sel[i * nk + k];
            out->harm[k] += dh > 0 ? dh : 0.0;
        }
        for (int k = 0; k < nsk; k++) out->err_sweep[k] += r->err_sweep[i * nsk + k];
    }
    if (out->n == 0) return;
    const double inv = 1.0 / (double)out->n;
    out->hmid *= inv;
    for (int k = 0; k < nk; k++) {
        out->err_sel[k] *= inv;
        out->err_hyb[k] *= inv;
        out->share[k] *= inv;
        out->win[k] *= inv;
        out->harm[k] *= inv;
    }
    for (int k = 0; k < nsk; k++) out->err_sweep[k] *= inv;
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

void phi_diag_quartiles(const phi_diag_records *r, double q[5]) {
    for (int i = 0; i < 5; i++) q[i] = 0;
    if (r->n == 0) return;
    float *v = malloc((size_t)r->n * sizeof(float));
    if (!v) return;
    memcpy(v, r->hmid, (size_t)r->n * sizeof(float));
    qsort(v, (size_t)r->n, sizeof(float), cmp_float);
    for (int i = 0; i < 4; i++) q[i] = v[(size_t)((double)i / 4 * (double)r->n)];
    q[0] = -INFINITY;
    q[4] = INFINITY;
    free(v);
}

/* ---- the whole measurement ------------------------------------------------- */

void phi_diag_report_free(subq_complete_diag_report *r) {
    free(r->layers);
    free(r->heads);
    memset(r, 0, sizeof *r);
}

static void stage(const subq_complete_diag_hooks *h, const char *name, int64_t total) {
    if (h && h->on_stage) h->on_stage(h->user, name, total);
}
static void progress(const subq_complete_diag_hooks *h, int64_t done) {
    if (h && h->on_progress) h->on_progress(h->user, done);
}

/* Perplexity over the first n_windows held-out sequences: every next token
 * in the same document is scored (*n_scored of them). */
static subq_status window_ppl(subq_context *c, const subq_corpus *corpus, int n_windows, int32_t *tok, int32_t *pos,
                              int32_t *seg, float *logits, double *ppl, int64_t *n_scored, subq_error *err) {
    const int n_vocab = c->model->hp.n_vocab;
    double nll = 0;
    int64_t n = 0;
    for (int w = 0; w < n_windows; w++) {
        int len;
        subq_status s = corpus_get(corpus, &corpus->eval, w, tok, pos, seg, &len, err);
        if (s) return s;
        subq_context_reset(c);
        if ((s = context_forward(c, tok, len, pos, seg, logits, 1, err))) return s;
        for (int t = 0; t + 1 < len; t++)
            if (seg[t + 1] == seg[t]) {
                nll += eval_token_nll(logits + (size_t)t * n_vocab, n_vocab, tok[t + 1]);
                n++;
            }
    }
    *ppl = exp(nll / (double)n);
    *n_scored = n;
    return SUBQ_OK;
}

/* Perplexity of full attention, then per K of selection-only (mode 0),
 * hybrid (1) and selection-only at K + fetch_k (2), oracle top-K on the
 * maps' layers. */
static subq_status perplexities(subq_context *c, const subq_corpus *corpus, const phi_maps *maps,
                                const subq_complete_diag_options *o, const subq_complete_diag_hooks *hooks, int32_t *tok, int32_t *pos,
                                int32_t *seg, float *logits, subq_complete_diag_report *r, subq_error *err) {
    stage(hooks, "perplexity", 1 + 3 * (int64_t)o->n_k);
    subq_status s = window_ppl(c, corpus, r->n_windows, tok, pos, seg, logits, &r->ppl_full, &r->n_scored, err);
    if (s) return s;
    progress(hooks, 1);
    char layer_list[1024] = "";
    for (int li = 0, at = 0; li < maps->n_sel && at < (int)sizeof layer_list - 16; li++)
        at += snprintf(layer_list + at, sizeof layer_list - at, li ? ",%d" : "%d", maps->layers[li]);
    for (int i = 0; i < o->n_k && !s; i++)
        for (int mode = 0; mode < 3 && !s; mode++) {
            attn_plan plan;
            attn_plan_default(&plan);
            plan.plan.layers = layer_list;
            plan.plan.selector = SUBQ_SELECT_ORACLE;
            plan.plan.top_k = o->ks[i] + (mode == 2 ? r->fetch_k : 0);
            plan.plan.n_sink = o->n_sink;
            plan.plan.n_tail = o->n_tail;
            plan.complete = mode == 1 ? maps : NULL;
            subq_context_reset(c);
            context_clear_plan(c);
            double p;
            int64_t n;
            if ((s = context_set_plan(c, &plan, NULL, err)) ||
                (s = window_ppl(c, corpus, r->n_windows, tok, pos, seg, logits, &p, &n, err)))
                break;
            if (mode == 0) r->ppl_sel[i] = p;
            else if (mode == 1) r->ppl_hyb[i] = p;
            else r->ppl_match[i] = p;
            if (mode == 1) {
                double sum = 0;
                int64_t nh = 0;
                for (int li = 0; li < maps->n_sel; li++) {
                    const sparse_metrics *sm = attn_stage_metrics(c->stages[maps->layers[li]]);
                    if (sm) sum += sm->share_sum, nh += sm->n_share;
                }
                r->share[i] = nh ? sum / nh : NAN;
            }
            progress(hooks, 2 + 3 * i + mode);
        }
    context_clear_plan(c);
    return s;
}

/* Means over all records, by H_mid quartile and per (layer, head); the
 * selection-only K matching the hybrid; the entropies into the maps file. */
static subq_status summarise(const phi_diag_records *rec, const phi_maps *maps, const subq_complete_diag_options *o,
                             subq_complete_diag_report *r, subq_error *err) {
    const int n_h = maps->n_sel * maps->dims.n_head;
    if (!(r->heads = calloc((size_t)n_h, sizeof *r->heads))) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    phi_diag_mean(rec, -1, -1, -INFINITY, INFINITY, &r->all);
    phi_diag_quartiles(rec, r->quartile_bounds);
    for (int b = 0; b < 4; b++)
        phi_diag_mean(rec, -1, -1, r->quartile_bounds[b], r->quartile_bounds[b + 1], &r->quartile[b]);
    for (int li = 0; li < maps->n_sel; li++)
        for (int h = 0; h < maps->dims.n_head; h++)
            phi_diag_mean(rec, maps->layers[li], h, -INFINITY, INFINITY, &r->heads[li * maps->dims.n_head + h]);
    for (int i = 0; i < o->n_k; i++) {
        r->match_k[i] = -1;
        for (int j = 0; j < o->n_sel_k; j++)
            if (r->all.err_sweep[j] <= r->all.err_hyb[i] && (r->match_k[i] < 0 || o->sel_ks[j] < r->match_k[i]))
                r->match_k[i] = o->sel_ks[j];
    }
    if (!o->annotate) return SUBQ_OK;
    float *h_mid = malloc((size_t)n_h * sizeof(float));
    if (!h_mid) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n_h; i++) h_mid[i] = r->heads[i].n ? (float)r->heads[i].hmid : 0.0f;
    subq_status s = phi_maps_annotate_entropy(o->maps_path, h_mid, err);
    free(h_mid);
    return s;
}

subq_status phi_diag_run(subq_model *m, const subq_corpus *corpus, const subq_complete_diag_options *o,
                         const subq_complete_diag_hooks *hooks, subq_complete_diag_report *r, subq_error *err) {
    memset(r, 0, sizeof *r);
    phi_maps *maps = NULL;
    subq_context *c = NULL;
    train_capture *cap = NULL;
    phi_diag_records rec = {0};
    int32_t *tok = NULL, *pos = NULL, *seg = NULL;
    float *logits = NULL;
    const float **qs = NULL;
    const int seq = corpus->p.seq;
    subq_status s = phi_maps_load(o->maps_path, m, &maps, err);
    if (s) return s;
    r->n_windows = corpus->eval.n_seq < o->windows ? corpus->eval.n_seq : o->windows;
    if (r->n_windows == 0) {
        s = subq_fail(err, SUBQ_ERR_ARG, "the held-out split is empty: nothing to measure the maps on");
        goto done;
    }
    subq_context_params cp = subq_context_default_params();
    cp.n_ctx = seq;
    cp.n_threads = o->n_threads;
    if ((s = subq_context_new(m, &cp, &c, err)) || (s = train_capture_new(m, maps->layers, maps->n_sel, seq, &cap, err)))
        goto done;
    tok = malloc((size_t)seq * sizeof(int32_t));
    pos = malloc((size_t)seq * sizeof(int32_t));
    seg = malloc((size_t)seq * sizeof(int32_t));
    qs = malloc((size_t)maps->n_sel * sizeof(float *));
    logits = o->ppl ? malloc((size_t)seq * m->hp.n_vocab * sizeof(float)) : NULL;
    r->layers = malloc((size_t)maps->n_sel * sizeof(int));
    if (!tok || !pos || !seg || !qs || (o->ppl && !logits) || !r->layers) {
        s = subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
        goto done;
    }
    memcpy(r->layers, maps->layers, (size_t)maps->n_sel * sizeof(int));
    r->d_phi = maps->dims.d_phi;
    r->head_dim = maps->dims.head_dim;
    r->n_head = maps->dims.n_head;
    r->n_sel = maps->n_sel;
    r->fetch_tokens = phi_budget_tokens(0, 0, 0, maps->dims.d_phi, maps->dims.head_dim, 1.0);
    r->fetch_k = (int)ceil(r->fetch_tokens);
    phi_diag_config dc = {.n_sink = o->n_sink, .n_tail = o->n_tail, .n_k = o->n_k, .n_sel_k = o->n_sel_k,
                          .eps = PHI_EPS_DEFAULT};
    memcpy(dc.ks, o->ks, sizeof dc.ks);
    memcpy(dc.sel_ks, o->sel_ks, sizeof dc.sel_ks);
    for (int i = 0; i < o->n_k; i++) dc.min_mid = o->ks[i] > dc.min_mid ? o->ks[i] : dc.min_mid;
    r->min_mid = dc.min_mid;
    stage(hooks, "diagnose", r->n_windows);
    const double t0 = time_now_s();
    for (int w = 0; w < r->n_windows && !s; w++) {
        int len;
        if ((s = corpus_get(corpus, &corpus->eval, w, tok, pos, seg, &len, err))) break;
        if ((s = train_capture_run(cap, c, tok, pos, seg, len, NULL, NULL, err))) break;
        for (int i = 0; i < maps->n_sel; i++) qs[i] = cap->q[i];
        s = phi_diag_window(&rec, c, maps, qs, seg, len, &dc, err);
        r->n_tokens += len;
        progress(hooks, w + 1);
    }
    r->seconds = time_now_s() - t0;
    r->n_records = rec.n;
    r->ppl_full = NAN;
    if (!s && o->ppl) s = perplexities(c, corpus, maps, o, hooks, tok, pos, seg, logits, r, err);
    if (!s) s = summarise(&rec, maps, o, r, err);
done:
    phi_diag_records_free(&rec);
    free(tok);
    free(pos);
    free(seg);
    free(logits);
    free(qs);
    train_capture_free(cap);
    subq_context_free(c);
    phi_maps_free(maps);
    if (s) phi_diag_report_free(r);
    return s;
}
