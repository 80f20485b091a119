/* subq eval: quality of sparse attention on held-out text. For every
 * selector and K: perplexity and its gap to full attention, retrieval mass
 * and recall (overall and per layer), ANN recall vs exact, filler rate, and
 * the paired per-token NLL difference with a bootstrap 95% interval; plus a
 * dynamic-vs-static index comparison. Table, --json and SVG charts. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/attn_plan.h"
#include "base/progress.h"
#include "base/timer.h"
#include "cli.h"
#include "cli_sparse.h"
#include "eval/bootstrap.h"
#include "eval/eval.h"
#include "eval/svg.h"
#include "model/context.h"
#include "phi/phi_cache.h"
#include "train/corpus.h"

static const char *help =
    "usage: subq eval -m MODEL -f TEXT [-f TEXT ...] [--search FILE] [options]\n"
    "Perplexity and retrieval quality of sparse attention vs full attention on held-out\n"
    "windows of -c tokens (the same held-out split as subq train-search for the same files).\n\n"
    "  -m, --model FILE     GGUF model (required)\n"
    "  -f, --file PATH      text file, directory or .jsonl (repeatable); its held-out split is used\n"
    "  --eval-file PATH     text used entirely for evaluation (repeatable)\n"
    "  -c, --ctx-size N     window length in tokens (default 512)\n"
    "  --no-pack            one document piece per window (default: pack, block-causal)\n"
    "  --eval-frac F        held-out fraction of the -f text (default 0.05)\n"
    "  --windows N          evaluate at most N windows (default 32)\n"
    "  --selectors LIST     selectors to compare (default exact,hnsw,quest,oracle,window;\n"
    "                       without projections: quest,oracle,window)\n"
    "  --k-sweep LIST       values of K (default 8,16,32,64)\n"
    "  --complete FILE      also run every selector and K with the completion (SELECTOR@K+phi)\n"
    "  --budget LIST        instead of --k-sweep: KV-read budgets in % of the window, e.g.\n"
    "                       1%,2%,5%; selection-only gets K = budget - sink - tail, the hybrid\n"
    "                       pays the cache fetch too, worst case (one generated token, +phi1)\n"
    "                       and amortised over the window (+phiA)\n"
    "  --compare A,B        paired NLL difference of two methods, e.g. exact@64,quest@64\n"
    "  --static-split F     dynamic vs static index: the index stops growing at F of each\n"
    "                       window, suffix perplexity compared (default 0.5; 0 = off)\n"
    "  --svg-dir DIR        write K-sweep and per-layer SVG charts into DIR\n"
    "  -t, --threads N      threads (default: all cores)\n"
    "  --json               print one JSON object on stdout\n\n" CLI_SPARSE_OPTS_HELP;

#define MAX_LIST 16

enum { PLAIN, HYBRID, HYBRID_WORST, HYBRID_AMORTISED }; /* method.mode */
static const char *mode_suffix[] = {"", "+phi", "+phi1", "+phiA"};

typedef struct method {
    int kind, k;                 /* kind < 0: full attention */
    int mode;                    /* PLAIN: selection only; else with completion */
    double budget;               /* % of the window (--budget), NAN otherwise */
    double reads;                /* token-equivalent KV reads per step, layer and KV head */
    double ppl, gap, mass, recall, ann_recall, filler, share;
    double *layer_mass, *layer_recall; /* [n_layer], NAN where dense */
    float *nll;
    double d_mean, d_lo, d_hi;   /* mean NLL(method) - NLL(full) and its 95% interval */
} method;

typedef struct eval_data {
    train_corpus *corpus;
    int n_windows, seq, n_vocab;
    int32_t *tok, *pos, *seg;
    float *logits;
} eval_data;

/* NLL of every next token inside the same document, window by window, into
 * nll (returns the count); from_frac > 0 keeps only tokens at or after that
 * fraction of each window, and freezes sparse indexes there when `freeze`. */
static int64_t run_windows(subq_context *c, eval_data *d, float *nll, double from_frac, int freeze, progress *bar,
                           int64_t *done, subq_error *err) {
    int64_t n = 0;
    for (int w = 0; w < d->n_windows; w++) {
        int len = corpus_get(d->corpus, &d->corpus->eval, w, d->tok, d->pos, d->seg);
        int from = (int)(from_frac * len);
        subq_context_reset(c);
        for (int l = 0; l < c->model->hp.n_layer; l++) attn_sparse_freeze(c->stages[l], freeze ? from : -1);
        if (context_forward(c, d->tok, len, d->pos, d->seg, d->logits, 1, err)) return -1;
        for (int t = from; t + 1 < len; t++)
            if (d->seg[t + 1] == d->seg[t])
                nll[n++] = (float)eval_token_nll(d->logits + (size_t)t * d->n_vocab, d->n_vocab, d->tok[t + 1]);
        progress_update(bar, ++*done, NULL);
    }
    return n;
}

static double ppl_of(const float *nll, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += nll[i];
    return n ? exp(s / (double)n) : NAN;
}

/* "1%,2.5%,5" -> percentages */
static int parse_budgets(const char *cmd, const char *s, double *out, int *n) {
    *n = 0;
    for (const char *p = s; *p;) {
        char *end;
        double v = strtod(p, &end);
        if (*end == '%') end++;
        if (end == p || !(v > 0 && v <= 100) || *n >= MAX_LIST || (*end && *end != ',')) {
            cli_error(cmd, "--budget expects comma-separated percentages in (0, 100], e.g. 1%%,2%%,5%%; got '%s'", s);
            return 0;
        }
        out[(*n)++] = v;
        p = *end == ',' ? end + 1 : end;
    }
    return *n > 0;
}

static int parse_list(const char *cmd, const char *flag, const char *s, int *out, int *n) {
    *n = 0;
    for (const char *p = s; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > (1 << 20) || *n >= MAX_LIST || (*end && *end != ',')) {
            cli_error(cmd, "%s expects comma-separated integers, got '%s'", flag, s);
            return 0;
        }
        out[(*n)++] = (int)v;
        p = *end == ',' ? end + 1 : end;
    }
    return *n > 0;
}

static const char *method_name(const method *m, char *buf, size_t cap) {
    if (m->kind < 0) snprintf(buf, cap, "full");
    else snprintf(buf, cap, "%s@%d%s", selector_kind_name((selector_kind)m->kind), m->k, mode_suffix[m->mode]);
    return buf;
}

static void json_num(double v) { cli_json_num(stdout, v); }

int cmd_eval(int argc, char **argv) {
    const char *cmd = "eval";
    cli_model_opts mo = {0};
    cli_sparse_opts so;
    cli_sparse_init(&so);
    const char *files[64], *eval_files[64], *svg_dir = NULL, *compare = NULL, *v;
    int n_files = 0, n_eval_files = 0, pack = 1, max_windows = 32, json = 0;
    float eval_frac = 0.05f, static_split = 0.5f;
    int ks[MAX_LIST] = {8, 16, 32, 64}, n_k = 4, kinds[MAX_LIST], n_kinds = 0, n_budget = 0;
    double budgets[MAX_LIST];
    const char *selectors = NULL;
    mo.n_ctx = 512;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int r = cli_parse_model_opt(cmd, argc, argv, &i, &mo);
        if (r == 0) r = cli_parse_sparse_opt(cmd, argc, argv, &i, &so);
        if (r < 0) return 1;
        if (r > 0) continue;
        if (cli_is_help(a)) {
            fputs(help, stdout);
            return 0;
        } else if (!strcmp(a, "-f") || !strcmp(a, "--file")) {
            if (!(v = cli_value(cmd, argc, argv, &i))) return 1;
            if (n_files == 64) return cli_error(cmd, "too many -f (max 64)");
            files[n_files++] = v;
        } else if (!strcmp(a, "--eval-file")) {
            if (!(v = cli_value(cmd, argc, argv, &i))) return 1;
            if (n_eval_files == 64) return cli_error(cmd, "too many --eval-file (max 64)");
            eval_files[n_eval_files++] = v;
        } else if (!strcmp(a, "--no-pack")) {
            pack = 0;
        } else if (!strcmp(a, "--eval-frac")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || !cli_parse_float(cmd, a, v, &eval_frac)) return 1;
            if (!(eval_frac > 0 && eval_frac < 1)) return cli_error(cmd, "--eval-frac must be in (0, 1)");
        } else if (!strcmp(a, "--windows")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || !cli_parse_int(cmd, a, v, 1, 1 << 20, &max_windows)) return 1;
        } else if (!strcmp(a, "--selectors")) {
            if (!(selectors = cli_value(cmd, argc, argv, &i))) return 1;
        } else if (!strcmp(a, "--k-sweep")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || !parse_list(cmd, a, v, ks, &n_k)) return 1;
        } else if (!strcmp(a, "--budget")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || !parse_budgets(cmd, v, budgets, &n_budget)) return 1;
        } else if (!strcmp(a, "--compare")) {
            if (!(compare = cli_value(cmd, argc, argv, &i))) return 1;
        } else if (!strcmp(a, "--static-split")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || !cli_parse_float(cmd, a, v, &static_split)) return 1;
            if (!(static_split >= 0 && static_split < 1)) return cli_error(cmd, "--static-split must be in [0, 1)");
        } else if (!strcmp(a, "--svg-dir")) {
            if (!(svg_dir = cli_value(cmd, argc, argv, &i))) return 1;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else {
            return cli_error(cmd, "unknown option '%s' (see subq eval --help)", a);
        }
    }
    if (n_files == 0 && n_eval_files == 0) return cli_error(cmd, "no text given; use -f PATH or --eval-file PATH");
    if (n_budget && !so.complete_file)
        return cli_error(cmd, "--budget compares selection only with the hybrid: give --complete FILE");
    int have_search = so.search_file || so.random_search;
    if (!selectors) selectors = have_search ? "exact,hnsw,quest,oracle,window" : "quest,oracle,window";
    {
        char buf[256];
        snprintf(buf, sizeof buf, "%s", selectors);
        for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
            int k = selector_kind_parse(t);
            if (k < 0 || n_kinds == MAX_LIST) return cli_error(cmd, "--selectors: unknown selector '%s'", t);
            if (!selector_kind_available((selector_kind)k))
                return cli_error(cmd, "selector '%s' is not in this build (see subq info --features)", t);
            if ((k == SELECT_EXACT || k == SELECT_HNSW || k == SELECT_FAISS) && !have_search)
                return cli_error(cmd, "selector '%s' needs --search FILE (or --random-search D)", t);
            kinds[n_kinds++] = k;
        }
    }

    subq_model *m;
    subq_context *c;
    search_proj *proj = NULL;
    if (!cli_load(cmd, &mo, &m, &c)) return 1;
    subq_error err = {0};
    int rc = 0, n_layer = m->hp.n_layer;
    eval_data d = {0};
    method *methods = calloc((size_t)(1 + n_kinds * MAX_LIST * 3), sizeof(method));
    int n_methods = 0, n_methods_planned = 0;
    float *nll_dyn = NULL, *nll_static = NULL, *nll_full_suffix = NULL;
    if (!methods) {
        rc = cli_error(cmd, "out of memory");
        goto done;
    }
    /* the held-out windows */
    corpus_params cp = {.seq = mo.n_ctx, .pack = pack, .eval_frac = eval_frac, .seed = 1, .eval_only = 1};
    if (corpus_new(m, &cp, &d.corpus, &err)) {
        rc = cli_error(cmd, "%s", err.msg);
        goto done;
    }
    for (int i = 0; i < n_files && !rc; i++)
        if (corpus_add_path(d.corpus, m, files[i], 0, &err)) rc = cli_error(cmd, "%s", err.msg);
    for (int i = 0; i < n_eval_files && !rc; i++)
        if (corpus_add_path(d.corpus, m, eval_files[i], 1, &err)) rc = cli_error(cmd, "%s", err.msg);
    if (rc) goto done;
    if (corpus_finish(d.corpus, &err)) {
        rc = cli_error(cmd, "%s", err.msg);
        goto done;
    }
    d.n_windows = d.corpus->eval.n_seq < max_windows ? d.corpus->eval.n_seq : max_windows;
    if (d.n_windows == 0) {
        rc = cli_error(cmd, "the held-out split is empty; give more text or a larger --eval-frac");
        goto done;
    }
    d.seq = mo.n_ctx;
    d.n_vocab = m->hp.n_vocab;
    d.tok = malloc((size_t)d.seq * sizeof(int32_t));
    d.pos = malloc((size_t)d.seq * sizeof(int32_t));
    d.seg = malloc((size_t)d.seq * sizeof(int32_t));
    d.logits = malloc((size_t)d.seq * d.n_vocab * sizeof(float));
    size_t max_scored = (size_t)d.n_windows * d.seq;
    if (!d.tok || !d.pos || !d.seg || !d.logits) {
        rc = cli_error(cmd, "out of memory for %d x %d logits", d.seq, d.n_vocab);
        goto done;
    }
    /* load or create the projections and completion maps once; plans are set per method */
    if (!cli_sparse_load(cmd, &so, m, &proj)) {
        rc = 1;
        goto done;
    }
    /* the methods: per selector, per K (or budget), selection only and with completion */
    for (int ki = 0; ki < n_kinds; ki++) {
        const int fixed = so.plan.sparse.n_sink + so.plan.sparse.n_tail;
        const int d_phi = so.maps ? so.maps->dims.d_phi : 0, hd = m->hp.head_dim;
        for (int kk = 0; kk < (n_budget ? n_budget : n_k); kk++) {
            if (!n_budget) {
                for (int mode = PLAIN; mode <= (so.maps ? HYBRID : PLAIN); mode++) {
                    method *me = &methods[1 + n_methods_planned++];
                    me->kind = kinds[ki], me->k = ks[kk], me->mode = mode, me->budget = NAN;
                    me->reads = mode == PLAIN ? fixed + ks[kk]
                                              : phi_budget_tokens(so.plan.sparse.n_sink, so.plan.sparse.n_tail, ks[kk],
                                                                  d_phi, hd, d.seq);
                }
            } else {
                /* reads per step: selection n_sink + n_tail + K; hybrid adds the fetch / L_gen */
                const double B = budgets[kk] / 100.0 * d.seq;
                const double fetch = phi_budget_tokens(0, 0, 0, d_phi, hd, 1.0);
                const double cost[3] = {0, fetch, fetch / d.seq};
                const int modes[3] = {PLAIN, HYBRID_WORST, HYBRID_AMORTISED};
                for (int i = 0; i < 3; i++) {
                    int k = (int)floor(B - fixed - cost[i]);
                    if (k < 0) { /* sinks + tail (+ the fetch) alone exceed the budget */
                        if (ki == 0)
                            fprintf(stderr, "%s: budget %g%% (%.1f reads) is below %s's %.1f fixed reads; skipped\n",
                                    cmd, budgets[kk], B, i ? "the hybrid" : "selection", fixed + cost[i]);
                        continue;
                    }
                    method *me = &methods[1 + n_methods_planned++];
                    me->kind = kinds[ki], me->k = k, me->mode = modes[i], me->budget = budgets[kk];
                    me->reads = fixed + k + cost[i];
                }
            }
        }
    }

    int use_static = static_split > 0;
    progress bar;
    int64_t done_w = 0;
    progress_begin(&bar, "eval", (int64_t)d.n_windows * (1 + n_methods_planned + (use_static ? 3 : 0)));
    double t0 = time_now_s();
    /* full attention first: the reference for every gap */
    method *full = &methods[n_methods++];
    full->kind = -1;
    int64_t n_tok = 0;
    if (!(full->nll = malloc(max_scored * sizeof(float))) ||
        (n_tok = run_windows(c, &d, full->nll, 0, 0, &bar, &done_w, &err)) < 0) {
        rc = cli_error(cmd, "%s", full->nll ? err.msg : "out of memory");
        goto done;
    }
    full->ppl = ppl_of(full->nll, n_tok);
    full->mass = full->recall = 1.0;
    full->ann_recall = NAN;
    for (int mi = 0; mi < n_methods_planned; mi++) {
        method *me = &methods[n_methods++];
        me->layer_mass = malloc((size_t)n_layer * sizeof(double));
        me->layer_recall = malloc((size_t)n_layer * sizeof(double));
        me->nll = malloc(max_scored * sizeof(float));
        if (!me->layer_mass || !me->layer_recall || !me->nll) {
            rc = cli_error(cmd, "out of memory");
            goto done;
        }
        attn_plan plan = cli_plan_with_kind(&so, (selector_kind)me->kind);
        plan.sparse.top_k = me->k;
        plan.sparse.dense_prefill = 0;
        plan.sparse.complete = me->mode == PLAIN ? NULL : so.maps;
        context_clear_plan(c);
        subq_context_reset(c);
        if (context_set_plan(c, &plan, proj, &err)) {
            rc = cli_error(cmd, "%s", err.msg);
            goto done;
        }
        for (int l = 0; l < n_layer; l++)
            if (attn_sparse_enable_metrics(c->stages[l], &err)) {
                rc = cli_error(cmd, "%s", err.msg);
                goto done;
            }
        int64_t n = run_windows(c, &d, me->nll, 0, 0, &bar, &done_w, &err);
        if (n < 0) {
            rc = cli_error(cmd, "%s", err.msg);
            goto done;
        }
        me->ppl = ppl_of(me->nll, n);
        me->gap = me->ppl / full->ppl - 1.0;
        /* metrics: mean over queries within a layer, then over sparse layers */
        double ms = 0, rs = 0, as = 0, req = 0, fill = 0, share = 0;
        int nl = 0, na = 0;
        int64_t n_share = 0;
        for (int l = 0; l < n_layer; l++) {
            const sparse_metrics *sm = attn_sparse_get_metrics(c->stages[l]);
            me->layer_mass[l] = me->layer_recall[l] = NAN;
            if (!sm || sm->n_queries == 0) continue;
            me->layer_mass[l] = sm->mass_sum / (double)sm->n_queries;
            me->layer_recall[l] = sm->recall_sum / (double)sm->n_queries;
            ms += me->layer_mass[l];
            rs += me->layer_recall[l];
            nl++;
            if (sm->n_ann) {
                as += sm->ann_recall_sum / (double)sm->n_ann;
                na++;
            }
            req += (double)sm->n_requested;
            fill += (double)sm->n_filler;
            share += sm->share_sum;
            n_share += sm->n_share;
        }
        me->share = n_share ? share / (double)n_share : NAN;
        me->mass = nl ? ms / nl : NAN;
        me->recall = nl ? rs / nl : NAN;
        me->ann_recall = na ? as / na : NAN;
        me->filler = req > 0 ? fill / req : 0;
        bootstrap_mean_diff(me->nll, full->nll, (size_t)n, 1000, 17, &me->d_mean, &me->d_lo, &me->d_hi);
    }
    /* dynamic vs static index on the first selector at the largest K: the
     * suffix of each window retrieves from every earlier key (dynamic) or
     * only from the prefix + its local tail (static) */
    double ppl_full_suffix = NAN, ppl_dyn = NAN, ppl_static = NAN;
    int static_kind = n_kinds ? kinds[0] : -1, static_k = ks[n_k - 1];
    if (use_static && static_kind >= 0) {
        nll_dyn = malloc(max_scored * sizeof(float));
        nll_static = malloc(max_scored * sizeof(float));
        nll_full_suffix = malloc(max_scored * sizeof(float));
        if (!nll_dyn || !nll_static || !nll_full_suffix) {
            rc = cli_error(cmd, "out of memory");
            goto done;
        }
        context_clear_plan(c);
        int64_t nf = run_windows(c, &d, nll_full_suffix, static_split, 0, &bar, &done_w, &err);
        attn_plan plan = cli_plan_with_kind(&so, (selector_kind)static_kind);
        plan.sparse.complete = NULL;
        plan.sparse.top_k = static_k;
        plan.sparse.dense_prefill = 0;
        subq_context_reset(c);
        int64_t n1 = -1, n2 = -1;
        if (nf >= 0 && !context_set_plan(c, &plan, proj, &err)) {
            n1 = run_windows(c, &d, nll_dyn, static_split, 0, &bar, &done_w, &err);
            if (n1 >= 0) n2 = run_windows(c, &d, nll_static, static_split, 1, &bar, &done_w, &err);
        }
        if (n2 < 0) {
            rc = cli_error(cmd, "%s", err.msg);
            goto done;
        }
        ppl_full_suffix = ppl_of(nll_full_suffix, nf);
        ppl_dyn = ppl_of(nll_dyn, n1);
        ppl_static = ppl_of(nll_static, n2);
        context_clear_plan(c);
    }
    progress_end(&bar);
    double elapsed = time_now_s() - t0;

    /* --compare A,B: paired NLL difference of two named methods */
    int cmp_a = -1, cmp_b = -1;
    double cmp_mean = 0, cmp_lo = 0, cmp_hi = 0;
    if (compare) {
        char a[64] = "", b[64] = "", nm[64];
        const char *comma = strchr(compare, ',');
        if (!comma || comma - compare >= 63) {
            rc = cli_error(cmd, "--compare expects two methods like exact@64,quest@64");
            goto done;
        }
        memcpy(a, compare, (size_t)(comma - compare));
        snprintf(b, sizeof b, "%s", comma + 1);
        for (int i = 0; i < n_methods; i++) {
            if (!strcmp(method_name(&methods[i], nm, sizeof nm), a)) cmp_a = i;
            if (!strcmp(method_name(&methods[i], nm, sizeof nm), b)) cmp_b = i;
        }
        if (cmp_a < 0 || cmp_b < 0) {
            rc = cli_error(cmd, "--compare: '%s' or '%s' was not evaluated (methods are full, SELECTOR@K and, with "
                           "--complete, SELECTOR@K+phi)", a, b);
            goto done;
        }
        bootstrap_mean_diff(methods[cmp_a].nll, methods[cmp_b].nll, (size_t)n_tok, 1000, 23, &cmp_mean, &cmp_lo,
                            &cmp_hi);
    }

    if (svg_dir) {
        const char *xl = n_budget ? "KV-read budget (% of window)" : "K";
        svg_chart gap = {.title = "Perplexity gap vs full attention", .x_label = xl, .y_label = "PPL gap (%)", .log_x = 1};
        svg_chart mass = {.title = "Attention mass captured", .x_label = xl, .y_label = "mass", .log_x = 1};
        svg_chart lay = {.title = "Mass per layer at the largest K", .x_label = "layer", .y_label = "mass"};
        char series_names[SVG_MAX_SERIES][32];
        for (int i = 1; i < n_methods; i++) { /* one series per selector and mode, in method order */
            const method *me = &methods[i];
            char name[32];
            snprintf(name, sizeof name, "%s%s", selector_kind_name((selector_kind)me->kind), mode_suffix[me->mode]);
            int si = 0;
            while (si < gap.n_series && strcmp(series_names[si], name)) si++;
            if (si == SVG_MAX_SERIES) continue;
            if (si == gap.n_series) {
                snprintf(series_names[si], sizeof series_names[si], "%s", name);
                gap.series[si].name = mass.series[si].name = lay.series[si].name = series_names[si];
                gap.n_series = mass.n_series = lay.n_series = si + 1;
            }
            svg_series *g = &gap.series[si], *ms = &mass.series[si], *L = &lay.series[si];
            double x = n_budget ? me->budget : me->k;
            if (g->n < SVG_MAX_POINTS) g->x[g->n] = x, g->y[g->n++] = 100 * me->gap;
            if (ms->n < SVG_MAX_POINTS) ms->x[ms->n] = x, ms->y[ms->n++] = me->mass;
            L->n = 0; /* the last (largest K or budget) method of the series */
            for (int l = 0; l < n_layer && L->n < SVG_MAX_POINTS; l++)
                if (isfinite(me->layer_mass[l])) L->x[L->n] = l, L->y[L->n++] = me->layer_mass[l];
        }
        char path[4096];
        const svg_chart *charts[] = {&gap, &mass, &lay};
        const char *names[] = {"ppl_gap.svg", "mass.svg", "layer_mass.svg"};
        for (int i = 0; i < 3; i++) {
            snprintf(path, sizeof path, "%s/%s", svg_dir, names[i]);
            if (svg_write_line_chart(charts[i], path, &err)) {
                rc = cli_error(cmd, "%s (does the directory exist?)", err.msg);
                goto done;
            }
        }
    }

    char nm[64];
    if (json) {
        printf("{\"model\": ");
        cli_json_string(stdout, mo.model, strlen(mo.model));
        printf(", \"search\": ");
        if (so.search_file) cli_json_string(stdout, so.search_file, strlen(so.search_file));
        else printf(so.random_search ? "\"random-%d\"" : "null", so.random_search);
        printf(", \"windows\": %d, \"ctx\": %d, \"packed\": %s, \"tokens_scored\": %lld, \"sink\": %d, \"tail\": %d, "
               "\"seconds\": %.2f,\n \"full_ppl\": ",
               d.n_windows, d.seq, pack ? "true" : "false", (long long)n_tok, so.plan.sparse.n_sink,
               so.plan.sparse.n_tail, elapsed);
        json_num(full->ppl);
        printf(",\n \"methods\": [");
        for (int i = 1; i < n_methods; i++) {
            const method *me = &methods[i];
            printf("%s\n  {\"method\": \"%s\", \"select\": \"%s\", \"k\": %d, \"completion\": %s, \"budget_pct\": ",
                   i > 1 ? "," : "", method_name(me, nm, sizeof nm), selector_kind_name((selector_kind)me->kind), me->k,
                   me->mode == PLAIN ? "null" : me->mode == HYBRID ? "\"on\"" : me->mode == HYBRID_WORST ? "\"worst\""
                                                                                              : "\"amortised\"");
            json_num(me->budget);
            printf(", \"kv_reads\": %.3f, \"ppl\": ", me->reads);
            json_num(me->ppl);
            printf(", \"gap\": ");
            json_num(me->gap);
            printf(", \"mass\": ");
            json_num(me->mass);
            printf(", \"recall\": ");
            json_num(me->recall);
            printf(", \"ann_recall\": ");
            json_num(me->ann_recall);
            printf(", \"completion_share\": ");
            json_num(me->share);
            const double vals[4] = {me->filler, me->d_mean, me->d_lo, me->d_hi};
            const char *names[4] = {", \"filler_rate\": ", ", \"nll_diff\": {\"mean\": ", ", \"lo\": ", ", \"hi\": "};
            for (int j = 0; j < 4; j++) {
                fputs(names[j], stdout);
                json_num(vals[j]);
            }
            printf("}, \"layers\": [");
            int first = 1;
            for (int l = 0; l < n_layer; l++) {
                if (!isfinite(me->layer_mass[l])) continue;
                printf("%s{\"layer\": %d, \"mass\": ", first ? "" : ", ", l);
                json_num(me->layer_mass[l]);
                printf(", \"recall\": ");
                json_num(me->layer_recall[l]);
                printf("}");
                first = 0;
            }
            printf("]}");
        }
        printf("]");
        if (use_static && static_kind >= 0) {
            printf(",\n \"static_vs_dynamic\": {\"select\": \"%s\", \"k\": %d, \"split\": %.3f, \"suffix_ppl_full\": ",
                   selector_kind_name((selector_kind)static_kind), static_k, static_split);
            json_num(ppl_full_suffix);
            printf(", \"suffix_ppl_dynamic\": ");
            json_num(ppl_dyn);
            printf(", \"suffix_ppl_static\": ");
            json_num(ppl_static);
            printf("}");
        }
        if (compare) {
            printf(",\n \"compare\": {\"a\": \"%s\", \"b\": \"%s\", \"mean\": ",
                   method_name(&methods[cmp_a], nm, sizeof nm), method_name(&methods[cmp_b], (char[64]){0}, 64));
            json_num(cmp_mean);
            printf(", \"lo\": ");
            json_num(cmp_lo);
            printf(", \"hi\": ");
            json_num(cmp_hi);
            printf("}");
        }
        printf("}\n");
    } else {
        printf("held-out: %d windows of %d tokens (%s), %lld tokens scored, sink %d, tail %d; %.1f s\n", d.n_windows,
               d.seq, pack ? "packed, block-causal" : "unpacked", (long long)n_tok, so.plan.sparse.n_sink,
               so.plan.sparse.n_tail, elapsed);
        printf("full attention: PPL %.4f\n\n", full->ppl);
        printf("%-18s %7s %7s %10s %8s %7s %7s %7s %7s %7s   %s\n", "method", "budget", "reads", "PPL", "gap", "mass",
               "recall", "ann", "share", "filler", "dNLL vs full [95% CI]");
        for (int i = 1; i < n_methods; i++) {
            const method *me = &methods[i];
            printf("%-18s %6.2f%% %7.2f %10.4f %+7.2f%% %7.4f %7.4f %7.4f %7.4f %6.1f%%   %+.4f [%+.4f, %+.4f]\n",
                   method_name(me, nm, sizeof nm), me->reads / d.seq * 100, me->reads, me->ppl, 100 * me->gap, me->mass,
                   me->recall, me->ann_recall, me->share, 100 * me->filler, me->d_mean, me->d_lo, me->d_hi);
        }
        printf("\n(reads: token-equivalent KV reads per step, layer and KV head; budget: reads / window length;\n"
               " share: completion mass share Z_hat / (Z_E + Z_hat))\n");
        printf("\nmass per layer at the largest K or budget:\n%-18s", "method");
        for (int l = 0; l < n_layer; l++) printf(" %6d", l);
        printf("\n");
        for (int i = 1; i < n_methods; i++) {
            const method *me = &methods[i];
            if (n_budget ? me->budget != budgets[n_budget - 1] : me->k != ks[n_k - 1]) continue;
            printf("%-18s", method_name(me, nm, sizeof nm));
            for (int l = 0; l < n_layer; l++)
                if (isfinite(me->layer_mass[l])) printf(" %6.3f", me->layer_mass[l]);
                else printf(" %6s", "-");
            printf("\n");
        }
        if (use_static && static_kind >= 0)
            printf("\nstatic vs dynamic index (%s@%d, index frozen at %.0f%% of each window): suffix PPL full %.4f, "
                   "dynamic %.4f, static %.4f\n",
                   selector_kind_name((selector_kind)static_kind), static_k, 100 * static_split, ppl_full_suffix,
                   ppl_dyn, ppl_static);
        if (compare)
            printf("\n%s - %s: mean NLL difference %+.4f [%+.4f, %+.4f] (95%% bootstrap CI)\n",
                   method_name(&methods[cmp_a], nm, sizeof nm), method_name(&methods[cmp_b], (char[64]){0}, 64),
                   cmp_mean, cmp_lo, cmp_hi);
    }
done:
    for (int i = 0; methods && i < n_methods; i++) {
        free(methods[i].nll);
        free(methods[i].layer_mass);
        free(methods[i].layer_recall);
    }
    free(methods);
    free(nll_dyn);
    free(nll_static);
    free(nll_full_suffix);
    free(d.tok);
    free(d.pos);
    free(d.seg);
    free(d.logits);
    corpus_free(d.corpus);
    subq_context_free(c);
    search_proj_free(proj);
    cli_sparse_free(&so);
    subq_model_free(m);
    return rc;
}
