/* subq eval: quality of sparse attention on held-out text. The experiment
 * itself (methods, runs, aggregation) is the library's subq_eval_run; this
 * file parses flags, calls it and prints a table, --json or SVG charts. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "progress.h"
#include "cli.h"
#include "subq_lab.h"
#include "cli_sparse.h"
#include "cli_svg.h"

static const char *help =
    "usage: subq eval -m MODEL -f TEXT [-f TEXT ...] [--search FILE] [options]\n"
    "Fidelity and retrieval quality of sparse attention vs full attention on held-out\n"
    "windows of -c tokens (the same held-out split as subq train-search for the same files).\n"
    "Per method (SELECTOR@K, +phi with completion): perplexity and its gap, the paired NLL\n"
    "difference, mean KL(p_full || p_method) of the next-token distributions and top-1\n"
    "agreement with full attention (95% block-bootstrap intervals over windows), retrieval\n"
    "mass and recall (head-mean teacher; and the seed's per-head definition over queries\n"
    "with >= K eligible keys), ANN recall vs exact, filler rate, completion share.\n\n"
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
    "                       1%,2%,5%, rounded up to whole tokens; selection only gets K = budget\n"
    "                       - sink - tail, the hybrid pays the cache fetch too, worst case (one\n"
    "                       generated token, +phi1) and amortised over the window (+phiA)\n"
    "  --per-layer          also substitute each sparse layer alone (others full): KL and top-1\n"
    "                       per layer (one more run per method and sparse layer)\n"
    "  --compare A,B        paired NLL difference of two methods, e.g. exact@64,quest@64\n"
    "  --static-split F     dynamic vs static index on the first selector's largest K (selection\n"
    "                       only): the index stops growing at F of each window, suffix PPL and KL\n"
    "                       compared (default 0.5; 0 = off)\n"
    "  --svg-dir DIR        write K-sweep (gap, KL, top-1, mass) and per-layer SVG charts into DIR\n"
    "  --force              replace charts of that name already in DIR (without it, they are refused)\n"
    "  -t, --threads N      threads (default: all cores)\n"
    "  --kv TYPE            KV cache type: f32, f16, q8_0, q4_0 (default f32)\n"
    "  --kv-file FILE       the evaluated windows' KV cache in FILE (subq generate --help)\n"
    "  --json               print one JSON object on stdout\n\n"
    "Every method substitutes the same layers: --sparse-layers, else the layers the projections\n"
    "cover, else (no projections) all layers.\n\n" CLI_SPARSE_OPTS_HELP;

#define MAX_LIST 16

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

static void json_num(double v) { cli_json_num(stdout, v); }

/* {"mean": .., "lo": .., "hi": ..} */
static void json_ci(double mean, double lo, double hi) {
    printf("{\"mean\": ");
    json_num(mean);
    printf(", \"lo\": ");
    json_num(lo);
    printf(", \"hi\": ");
    json_num(hi);
    printf("}");
}

typedef struct bar_state {
    progress bar;
    int started;
} bar_state;

static int on_progress(void *user, int64_t done, int64_t total) {
    bar_state *b = user;
    if (!b->started) progress_begin(&b->bar, "eval", total), b->started = 1;
    progress_update(&b->bar, done, NULL);
    return 0;
}

/* index of the method named `name` ("full": -1); -2 if none */
static int find_method(const subq_eval_result *r, const char *name) {
    char nm[64];
    if (!strcmp(name, "full")) return -1;
    for (int i = 0; i < r->n_methods; i++)
        if (!strcmp(subq_eval_method_name(&r->methods[i], nm, sizeof nm), name)) return i;
    return -2;
}

/* ---- SVG charts ------------------------------------------------------------ */

static double y_gap(const subq_eval_method *m) { return 100 * m->gap; }
static double y_kl(const subq_eval_method *m) { return m->kl; }
static double y_top1(const subq_eval_method *m) { return m->top1; }
static double y_mass(const subq_eval_method *m) { return m->mass; }
static const double *l_mass(const subq_eval_method *m) { return m->layer_mass; }
static const double *l_kl(const subq_eval_method *m) { return m->layer_kl; }

/* One series per selector and completion mode, in method order: y(method)
 * against K (or the budget); with `per_layer`, the series is instead that
 * per-layer array of the series' last method (its largest K or budget). */
static void fill_chart(svg_chart *ch, char names[][32], const subq_eval_result *r, int by_budget,
                       double (*y)(const subq_eval_method *), const double *(*per_layer)(const subq_eval_method *)) {
    static const char *suffix[] = {"", "+phi", "+phi1", "+phiA"};
    for (int i = 0; i < r->n_methods; i++) {
        const subq_eval_method *m = &r->methods[i];
        char name[32];
        snprintf(name, sizeof name, "%s%s", subq_selector_name((subq_selector_kind)m->select), suffix[m->completion]);
        int si = 0;
        while (si < ch->n_series && strcmp(names[si], name)) si++;
        if (si == SVG_MAX_SERIES) continue;
        if (si == ch->n_series) {
            snprintf(names[si], 32, "%s", name);
            ch->series[si].name = names[si];
            ch->n_series = si + 1;
        }
        svg_series *s = &ch->series[si];
        if (per_layer) {
            const double *v = per_layer(m);
            s->n = 0;
            for (int l = 0; l < r->n_layer && s->n < SVG_MAX_POINTS; l++)
                if (isfinite(v[l])) s->x[s->n] = l, s->y[s->n++] = v[l];
        } else if (s->n < SVG_MAX_POINTS) {
            s->x[s->n] = by_budget ? m->budget_pct : m->k, s->y[s->n++] = y(m);
        }
    }
}

/* The charts of --svg-dir; the last only with --per-layer. */
static const char *const chart_files[6] = {"ppl_gap.svg", "kl.svg", "top1.svg", "mass.svg", "layer_mass.svg",
                                           "layer_kl.svg"};

/* Whether they may be written (before the run). */
static int charts_ok(const char *cmd, const char *dir, int per_layer, int force) {
    if (!cli_output_dir_ok(cmd, "--svg-dir", dir)) return 0;
    for (int i = 0; i < (per_layer ? 6 : 5); i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, chart_files[i]);
        if (!cli_output_ok(cmd, path, force)) return 0;
    }
    return 1;
}

static int write_charts(const char *cmd, const char *dir, const subq_eval_result *r, int by_budget, int per_layer) {
    const char *xl = by_budget ? "KV-read budget (% of window)" : "K";
    svg_chart ch[6] = {
        {.title = "Perplexity gap vs full attention", .x_label = xl, .y_label = "PPL gap (%)", .log_x = 1},
        {.title = "KL(full || sparse) per token", .x_label = xl, .y_label = "KL (nats)", .log_x = 1},
        {.title = "Top-1 agreement with full attention", .x_label = xl, .y_label = "share of tokens", .log_x = 1},
        {.title = "Attention mass captured", .x_label = xl, .y_label = "mass", .log_x = 1},
        {.title = "Mass per layer at the largest K", .x_label = "layer", .y_label = "mass"},
        {.title = "KL per layer substituted alone, largest K", .x_label = "layer", .y_label = "KL (nats)"},
    };
    static char names[6][SVG_MAX_SERIES][32];
    double (*ys[4])(const subq_eval_method *) = {y_gap, y_kl, y_top1, y_mass};
    for (int i = 0; i < 4; i++) fill_chart(&ch[i], names[i], r, by_budget, ys[i], NULL);
    fill_chart(&ch[4], names[4], r, by_budget, NULL, l_mass);
    fill_chart(&ch[5], names[5], r, by_budget, NULL, l_kl);
    for (int i = 0; i < (per_layer ? 6 : 5); i++) {
        char path[4096];
        subq_error err = {0};
        snprintf(path, sizeof path, "%s/%s", dir, chart_files[i]);
        if (svg_write_line_chart(&ch[i], path, &err)) return cli_error(cmd, "%s", err.msg);
    }
    return 0;
}

/* ---- output ------------------------------------------------------------------ */

static const char *completion_json[] = {"null", "\"on\"", "\"worst\"", "\"amortised\""};

static void print_json(const cli_model_opts *mo, const cli_sparse_opts *so, const subq_eval_params *cfg,
                       const subq_eval_result *r, int cmp_a, int cmp_b, const double *cmp) {
    char nm[64];
    printf("{\"model\": ");
    cli_json_string(stdout, mo->model, strlen(mo->model));
    printf(", \"search\": ");
    if (so->search_file) cli_json_string(stdout, so->search_file, strlen(so->search_file));
    else printf(so->random_search ? "\"random-%d\"" : "null", so->random_search);
    printf(", \"windows\": %d, \"ctx\": %d, \"packed\": %s, \"tokens_scored\": %lld, \"sink\": %d, \"tail\": %d, "
           "\"sparse_layers\": [",
           r->n_windows, r->ctx, cfg->pack ? "true" : "false", (long long)r->n_scored, cfg->plan.n_sink, cfg->plan.n_tail);
    for (int l = 0, first = 1; l < r->n_layer; l++)
        if (r->sparse_layers[l]) printf("%s%d", first ? "" : ", ", l), first = 0;
    printf("], \"per_layer\": %s, \"seconds\": %.2f,\n \"full_ppl\": ", cfg->per_layer ? "true" : "false", r->seconds);
    json_num(r->full_ppl);
    printf(",\n \"methods\": [");
    for (int i = 0; i < r->n_methods; i++) {
        const subq_eval_method *m = &r->methods[i];
        printf("%s\n  {\"method\": \"%s\", \"select\": \"%s\", \"k\": %d, \"completion\": %s, \"budget_pct\": ",
               i ? "," : "", subq_eval_method_name(m, nm, sizeof nm), subq_selector_name((subq_selector_kind)m->select), m->k,
               completion_json[m->completion]);
        json_num(m->budget_pct);
        printf(", \"kv_reads\": %.3f, \"ppl\": ", m->reads);
        json_num(m->ppl);
        printf(", \"gap\": ");
        json_num(m->gap);
        printf(", \"nll_diff\": ");
        json_ci(m->nll_diff, m->nll_diff_lo, m->nll_diff_hi);
        printf(", \"kl\": ");
        json_ci(m->kl, m->kl_lo, m->kl_hi);
        printf(", \"top1\": ");
        json_num(m->top1);
        const double v[8] = {m->mass, m->recall, m->mass_seed, m->recall_seed, m->ann_recall, m->share, m->filler,
                             m->kv_rows};
        const char *k[8] = {"mass", "recall", "mass_seed", "recall_seed", "ann_recall", "completion_share",
                            "filler_rate", "kv_rows"};
        for (int j = 0; j < 8; j++) {
            printf(", \"%s\": ", k[j]);
            json_num(v[j]);
        }
        printf(", \"layers\": [");
        for (int l = 0, first = 1; l < r->n_layer; l++) {
            if (!r->sparse_layers[l]) continue;
            printf("%s{\"layer\": %d, \"mass\": ", first ? "" : ", ", l);
            json_num(m->layer_mass[l]);
            printf(", \"recall\": ");
            json_num(m->layer_recall[l]);
            printf(", \"mass_seed\": ");
            json_num(m->layer_mass_seed[l]);
            printf(", \"recall_seed\": ");
            json_num(m->layer_recall_seed[l]);
            if (cfg->per_layer) {
                printf(", \"alone_kl\": ");
                json_ci(m->layer_kl[l], m->layer_kl_lo[l], m->layer_kl_hi[l]);
                printf(", \"alone_top1\": ");
                json_num(m->layer_top1[l]);
            }
            printf("}");
            first = 0;
        }
        printf("]}");
    }
    printf("]");
    if (r->stat.method >= 0) {
        const subq_eval_method *m = &r->methods[r->stat.method];
        printf(",\n \"static_vs_dynamic\": {\"method\": \"%s\", \"select\": \"%s\", \"k\": %d, \"budget_pct\": ",
               subq_eval_method_name(m, nm, sizeof nm), subq_selector_name((subq_selector_kind)m->select), m->k);
        json_num(m->budget_pct);
        printf(", \"split\": %.3f, \"suffix_ppl_full\": ", r->stat.split);
        json_num(r->stat.ppl_full);
        printf(", \"suffix_ppl_dynamic\": ");
        json_num(r->stat.ppl_dynamic);
        printf(", \"suffix_ppl_static\": ");
        json_num(r->stat.ppl_static);
        printf(", \"suffix_kl_dynamic\": ");
        json_num(r->stat.kl_dynamic);
        printf(", \"suffix_kl_static\": ");
        json_num(r->stat.kl_static);
        printf("}");
    }
    if (cmp) {
        printf(",\n \"compare\": {\"a\": \"%s\", ", cmp_a < 0 ? "full" : subq_eval_method_name(&r->methods[cmp_a], nm, 64));
        printf("\"b\": \"%s\", \"mean\": ", cmp_b < 0 ? "full" : subq_eval_method_name(&r->methods[cmp_b], nm, 64));
        json_num(cmp[0]);
        printf(", \"lo\": ");
        json_num(cmp[1]);
        printf(", \"hi\": ");
        json_num(cmp[2]);
        printf("}");
    }
    printf("}\n");
}

/* v with fmt, right-aligned in `width` columns; "-" there when v is NaN:
 * the figure does not apply to the method (ann for a selector that is not
 * approximate, share without completion) or nothing measured it (seed
 * mass and recall without a query of >= K eligible keys). */
static void cell(double v, const char *fmt, int width) {
    char b[32] = "-";
    if (!isnan(v)) snprintf(b, sizeof b, fmt, v);
    printf(" %*s", width, b);
}

/* Rows: methods; columns: sparse layers; cells from v(method)[layer]. */
static void print_layer_table(const char *title, const subq_eval_result *r, const double *(*v)(const subq_eval_method *),
                              int largest_only, int largest_k, double largest_budget) {
    char nm[64];
    printf("\n%s\n%-18s", title, "method");
    for (int l = 0; l < r->n_layer; l++)
        if (r->sparse_layers[l]) printf(" %7d", l);
    printf("\n");
    for (int i = 0; i < r->n_methods; i++) {
        const subq_eval_method *m = &r->methods[i];
        if (largest_only && (isnan(largest_budget) ? m->k != largest_k : m->budget_pct != largest_budget)) continue;
        printf("%-18s", subq_eval_method_name(m, nm, sizeof nm));
        for (int l = 0; l < r->n_layer; l++)
            if (r->sparse_layers[l]) cell(v(m)[l], "%.4f", 7);
        printf("\n");
    }
}

static const double *l_top1(const subq_eval_method *m) { return m->layer_top1; }

static void print_table(const subq_eval_params *cfg, const subq_eval_result *r, int cmp_a, int cmp_b, const double *cmp) {
    char nm[64], nm2[64];
    printf("held-out: %d windows of %d tokens (%s), %lld tokens scored, sink %d, tail %d, sparse layers ",
           r->n_windows, r->ctx, cfg->pack ? "packed, block-causal" : "unpacked", (long long)r->n_scored, cfg->plan.n_sink,
           cfg->plan.n_tail);
    for (int l = 0, first = 1; l < r->n_layer; l++)
        if (r->sparse_layers[l]) printf("%s%d", first ? "" : ",", l), first = 0;
    printf("; %.1f s\nfull attention: PPL %.4f\n\n", r->seconds, r->full_ppl);
    printf("fidelity to full attention:\n%-18s %7s %7s %10s %8s  %-26s  %-26s %7s\n", "method", "budget", "reads",
           "PPL", "gap", "dNLL vs full [95% CI]", "KL(full||method) [95% CI]", "top-1");
    for (int i = 0; i < r->n_methods; i++) {
        const subq_eval_method *m = &r->methods[i];
        char dnll[64], kl[64];
        snprintf(dnll, sizeof dnll, "%+.4f [%+.4f, %+.4f]", m->nll_diff, m->nll_diff_lo, m->nll_diff_hi);
        snprintf(kl, sizeof kl, "%.4f [%.4f, %.4f]", m->kl, m->kl_lo, m->kl_hi);
        printf("%-18s %6.2f%% %7.2f %10.4f %+7.2f%%  %-26s  %-26s %6.2f%%\n", subq_eval_method_name(m, nm, sizeof nm),
               m->reads / r->ctx * 100, m->reads, m->ppl, 100 * m->gap, dnll, kl, 100 * m->top1);
    }
    printf("\nretrieval:\n%-18s %7s %7s %9s %11s %7s %7s %7s %7s\n", "method", "mass", "recall", "seed mass",
           "seed recall", "ann", "share", "filler", "rows");
    for (int i = 0; i < r->n_methods; i++) {
        const subq_eval_method *m = &r->methods[i];
        printf("%-18s", subq_eval_method_name(m, nm, sizeof nm));
        cell(m->mass, "%.4f", 7);
        cell(m->recall, "%.4f", 7);
        cell(m->mass_seed, "%.4f", 9);
        cell(m->recall_seed, "%.4f", 11);
        cell(m->ann_recall, "%.4f", 7);
        cell(m->share, "%.4f", 7);
        printf(" %6.1f%%", 100 * m->filler);
        cell(m->kv_rows, "%.1f", 7);
        printf("\n");
    }
    printf("\n(reads: token-equivalent KV reads per step, layer and KV head; budget: reads / window length;\n"
           " KL in nats per scored token; top-1: tokens whose argmax equals full attention's;\n"
           " intervals: 95%% bootstrap over windows; mass: share of the head-mean softmax on sinks + tail +\n"
           " candidates; recall: candidates among the top-K of the head-mean softmax; seed mass / recall:\n"
           " per-head softmax mass on the K candidates and recall of the top-K of the max over heads, over\n"
           " queries with >= K eligible keys; per-head selectors (quest, --oracle per-head / per-kv-head,\n"
           " projections with search heads): each head's own softmax and top-K, averaged over heads;\n"
           " rows: KV rows a query read per layer and KV head, measured (per-head: the union of the KV\n"
           " head's query heads' sets); ann: the approximate selector's recall of the exact\n"
           " f32 scan's top-K by the same score (hnsw, faiss, --scan int8/int4, --search-f16); share:\n"
           " completion mass share Z_hat / (Z_E + Z_hat) (+phi); -: the column does not apply, null in --json)\n");
    if (r->n_methods == 0) return;
    const subq_eval_method *last = &r->methods[r->n_methods - 1];
    print_layer_table("mass per layer at the largest K or budget:", r, l_mass, 1, last->k, last->budget_pct);
    if (cfg->per_layer) {
        print_layer_table("KL(full||method) with each layer substituted alone (others full):", r, l_kl, 0, 0, NAN);
        print_layer_table("top-1 agreement with each layer substituted alone:", r, l_top1, 0, 0, NAN);
    }
    if (r->stat.method >= 0) {
        const subq_eval_method *m = &r->methods[r->stat.method];
        char why[64] = "the largest K of the run";
        if (!isnan(m->budget_pct)) snprintf(why, sizeof why, "selection only at the %g%% budget", m->budget_pct);
        printf("\nstatic vs dynamic index (%s, %s; index frozen at %.0f%% of each window), suffix tokens:\n"
               "  PPL full %.4f, dynamic %.4f, static %.4f; KL(full||.) dynamic %.4f, static %.4f\n",
               subq_eval_method_name(m, nm, sizeof nm), why, 100 * r->stat.split, r->stat.ppl_full, r->stat.ppl_dynamic,
               r->stat.ppl_static, r->stat.kl_dynamic, r->stat.kl_static);
    }
    if (cmp)
        printf("\n%s - %s: mean NLL difference %+.4f [%+.4f, %+.4f] (95%% block-bootstrap CI)\n",
               cmp_a < 0 ? "full" : subq_eval_method_name(&r->methods[cmp_a], nm, sizeof nm),
               cmp_b < 0 ? "full" : subq_eval_method_name(&r->methods[cmp_b], nm2, sizeof nm2), cmp[0], cmp[1], cmp[2]);
}

int cmd_eval(int argc, char **argv) {
    const char *cmd = "eval";
    cli_model_opts mo = {0};
    cli_sparse_opts so = cli_sparse_default();
    subq_eval_params cfg = subq_eval_default_params();
    const char *files[64], *eval_files[64], *svg_dir = NULL, *compare = NULL, *selectors = NULL, *v;
    int ks[MAX_LIST] = {8, 16, 32, 64}, json = 0, force = 0;
    subq_selector_kind kinds[MAX_LIST];
    double budgets[MAX_LIST];
    float eval_frac = cfg.eval_frac, static_split = (float)cfg.static_split;
    cfg.ks = ks, cfg.n_k = 4, cfg.budgets = budgets, cfg.selectors = kinds;
    cfg.files = files, cfg.eval_files = eval_files;
    mo.n_ctx = cfg.ctx;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const int r = cli_common_opt(cmd, help, argc, argv, &i, &mo, &so);
        if (r == CLI_OPT_TAKEN) continue;
        if (r != CLI_OPT_NONE) return r == CLI_OPT_HELP ? 0 : 1;
        if (!strcmp(a, "-f") || !strcmp(a, "--file")) {
            if (!(v = cli_value(cmd, argc, argv, &i))) return 1;
            if (cfg.n_files == 64) return cli_error(cmd, "too many -f (max 64)");
            files[cfg.n_files++] = v;
        } else if (!strcmp(a, "--eval-file")) {
            if (!(v = cli_value(cmd, argc, argv, &i))) return 1;
            if (cfg.n_eval_files == 64) return cli_error(cmd, "too many --eval-file (max 64)");
            eval_files[cfg.n_eval_files++] = v;
        } else if (!strcmp(a, "--no-pack")) {
            cfg.pack = 0;
        } else if (!strcmp(a, "--eval-frac")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || !cli_parse_float(cmd, a, v, &eval_frac)) return 1;
            if (!(eval_frac > 0 && eval_frac < 1)) return cli_error(cmd, "--eval-frac must be in (0, 1)");
        } else if (!strcmp(a, "--windows")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || !cli_parse_int(cmd, a, v, 1, 1 << 20, &cfg.max_windows))
                return 1;
        } else if (!strcmp(a, "--selectors")) {
            if (!(selectors = cli_value(cmd, argc, argv, &i))) return 1;
        } else if (!strcmp(a, "--k-sweep")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || !cli_parse_int_list(cmd, a, v, 0, 1 << 20, MAX_LIST, ks, &cfg.n_k)) return 1;
        } else if (!strcmp(a, "--budget")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || !parse_budgets(cmd, v, budgets, &cfg.n_budgets)) return 1;
        } else if (!strcmp(a, "--per-layer")) {
            cfg.per_layer = 1;
        } else if (!strcmp(a, "--compare")) {
            if (!(compare = cli_value(cmd, argc, argv, &i))) return 1;
        } else if (!strcmp(a, "--static-split")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || !cli_parse_float(cmd, a, v, &static_split)) return 1;
            if (!(static_split >= 0 && static_split < 1)) return cli_error(cmd, "--static-split must be in [0, 1)");
        } else if (!strcmp(a, "--svg-dir")) {
            if (!(svg_dir = cli_value(cmd, argc, argv, &i))) return 1;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--force")) {
            force = 1;
        } else {
            return cli_error(cmd, "unknown option '%s' (see subq eval --help)", a);
        }
    }
    cfg.eval_frac = eval_frac;
    cfg.static_split = static_split;
    if (cfg.n_files == 0 && cfg.n_eval_files == 0)
        return cli_error(cmd, "no text given; use -f PATH or --eval-file PATH");
    if (cfg.n_budgets && !so.complete_file)
        return cli_error(cmd, "--budget compares selection only with the hybrid: give --complete FILE");
    if (!cli_sparse_model_default(cmd, &so, mo.model)) return 1;
    const int have_search = so.search_file || so.random_search;
    if (!selectors) selectors = have_search ? "exact,hnsw,quest,oracle,window" : "quest,oracle,window";
    {
        char buf[256];
        snprintf(buf, sizeof buf, "%s", selectors);
        for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
            int k = subq_selector_parse(t);
            if (k < 0 || cfg.n_selectors == MAX_LIST) return cli_error(cmd, "--selectors: unknown selector '%s'", t);
            if (!subq_selector_available((subq_selector_kind)k))
                return cli_error(cmd, "selector '%s' is not in this build (see subq info --features)", t);
            if (subq_selector_needs_search((subq_selector_kind)k) && !have_search)
                return cli_error(cmd, "selector '%s' needs --search FILE (or --random-search D)", t);
            kinds[cfg.n_selectors++] = (subq_selector_kind)k;
        }
    }
    if (cfg.n_selectors == 0) return cli_error(cmd, "--selectors: no selector given");
    const char *comma = compare ? strchr(compare, ',') : NULL;
    if (compare && (!comma || comma - compare >= 63 || !comma[1]))
        return cli_error(cmd, "--compare expects two methods like exact@64,quest@64; got '%s'", compare);
    cfg.ctx = mo.n_ctx;
    if (svg_dir && !charts_ok(cmd, svg_dir, cfg.per_layer, force)) return 1;

    subq_model *m;
    subq_context *c;
    subq_eval_result *r = NULL;
    subq_error err = {0};
    int rc = 0;
    mo.far_keys = so.plan.far_pos != SUBQ_FAR_NONE;
    if (!cli_load(cmd, &mo, &m, &c)) return 1;
    if (!cli_sparse_load(cmd, &so, m)) {
        rc = 1;
        goto done;
    }
    cfg.plan = so.plan;
    cfg.search = so.search;
    cfg.complete = so.complete;
    bar_state bar = {0};
    subq_status s = subq_eval_run(c, &cfg, on_progress, &bar, &r, &err);
    if (bar.started) progress_end(&bar.bar);
    if (s) {
        rc = cli_error(cmd, "%s", err.msg);
        goto done;
    }
    for (int i = 0; i < r->n_skipped; i++) {
        const subq_eval_skip *k = &r->skipped[i];
        fprintf(stderr, "%s: budget %g%% (%.0f reads) is below %s's %.1f fixed reads; skipped\n", cmd, k->budget_pct,
                k->budget_reads, k->completion == SUBQ_EVAL_SELECTION ? "selection" : "the hybrid", k->fixed_reads);
    }
    /* --compare A,B: paired NLL difference of two named methods */
    int cmp_a = -2, cmp_b = -2;
    double cmp[3];
    if (compare) {
        char a[64] = "";
        memcpy(a, compare, (size_t)(comma - compare));
        cmp_a = find_method(r, a);
        cmp_b = find_method(r, comma + 1);
        if (cmp_a < -1 || cmp_b < -1) {
            rc = cli_error(cmd, "--compare: '%s' names a method that was not evaluated (methods are full, SELECTOR@K "
                           "and, with --complete, SELECTOR@K+phi)", compare);
            goto done;
        }
        if (subq_eval_compare(r, cmp_a, cmp_b, cfg.n_resamples, 23, &cmp[0], &cmp[1], &cmp[2], &err)) {
            rc = cli_error(cmd, "%s", err.msg);
            goto done;
        }
    }
    if (svg_dir && (rc = write_charts(cmd, svg_dir, r, cfg.n_budgets > 0, cfg.per_layer))) goto done;
    if (json) print_json(&mo, &so, &cfg, r, cmp_a, cmp_b, compare ? cmp : NULL);
    else print_table(&cfg, r, cmp_a, cmp_b, compare ? cmp : NULL);
done:
    subq_eval_result_free(r);
    cli_unload(m, c, &so);
    return rc;
}
