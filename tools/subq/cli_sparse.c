#include "cli_sparse.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

cli_sparse_opts cli_sparse_default(void) {
    cli_sparse_opts o;
    memset(&o, 0, sizeof o);
    o.plan = subq_attn_plan_default();
    return o;
}

subq_attn_plan cli_plan_with(const cli_sparse_opts *o, subq_selector_kind kind, int top_k) {
    subq_attn_plan p = o->plan;
    p.selector = kind;
    p.top_k = top_k;
    return p;
}

static int quest_mode_parse(const char *v) { return !strcmp(v, "headmean") ? 1 : !strcmp(v, "per-head") ? 0 : -1; }

/* The value of the option at argv[*i] (advances *i) as parse() reads it
 * into *out; 0 after a one-line error naming what it expects. */
static int choice_value(const char *cmd, int argc, char **argv, int *i, int (*parse)(const char *),
                        const char *expects, int *out) {
    const char *flag = argv[*i], *v = cli_value(cmd, argc, argv, i);
    if (!v) return 0;
    *out = parse(v);
    if (*out >= 0) return 1;
    cli_error(cmd, "%s expects %s, got '%s'", flag, expects, v);
    return 0;
}

int cli_parse_sparse_opt(const char *cmd, int argc, char **argv, int *i, cli_sparse_opts *o) {
    const char *a = argv[*i], *v;
    subq_attn_plan *p = &o->plan;
    const char **text = NULL; /* an option whose value is kept as given */
    int *target = NULL, lo = 0, hi = 1 << 20, x;
    if (!strcmp(a, "--search")) {
        text = &o->search_file;
    } else if (!strcmp(a, "--random-search")) {
        target = &o->random_search, lo = 1, hi = SUBQ_SEARCH_MAX_D;
    } else if (!strcmp(a, "--random-search-heads")) {
        if (!(v = cli_value(cmd, argc, argv, i))) return -1;
        if ((o->random_search_heads = subq_search_granularity_parse(v)) < 0) {
            cli_error(cmd, "--random-search-heads expects layer, kv-head or head, got '%s'", v);
            return -1;
        }
        return 1;
    } else if (!strcmp(a, "--search-rope-scale")) {
        if (!(v = cli_value(cmd, argc, argv, i))) return -1;
        char *end = NULL;
        double s = strtod(v, &end);
        if (end == v || *end || !(s > 0 && s <= 1e6)) {
            cli_error(cmd, "--search-rope-scale expects a number in (0, 1e6], got '%s'", v);
            return -1;
        }
        o->search_rope_scale = (float)s;
    } else if (!strcmp(a, "--select")) {
        if (!(v = cli_value(cmd, argc, argv, i))) return -1;
        int k = subq_selector_parse(v);
        if (k < 0) {
            cli_error(cmd, "unknown selector '%s' (exact, hnsw, faiss, quest, oracle, window)", v);
            return -1;
        }
        p->selector = (subq_selector_kind)k;
    } else if (!strcmp(a, "--sparse-layers")) {
        text = &p->layers;
    } else if (!strcmp(a, "--topk-layers")) {
        text = &p->topk_layers;
    } else if (!strcmp(a, "--topk")) {
        target = &p->top_k, lo = 0;
        o->topk_set = 1;
    } else if (!strcmp(a, "--sink")) {
        target = &p->n_sink, lo = 0;
    } else if (!strcmp(a, "--tail")) {
        target = &p->n_tail, lo = 0;
    } else if (!strcmp(a, "--hnsw-m")) {
        target = &p->hnsw_m, lo = 2, hi = 1024;
    } else if (!strcmp(a, "--hnsw-ef-construction")) {
        target = &p->hnsw_ef_construction, lo = 1;
    } else if (!strcmp(a, "--hnsw-ef-search")) {
        target = &p->hnsw_ef_search, lo = 1;
    } else if (!strcmp(a, "--quest-page")) {
        target = &p->quest_page, lo = 1, hi = 1 << 16;
    } else if (!strcmp(a, "--quest-mode")) {
        if (!choice_value(cmd, argc, argv, i, quest_mode_parse, "per-head or headmean", &x)) return -1;
        p->quest_headmean = x;
    } else if (!strcmp(a, "--oracle")) {
        if (!choice_value(cmd, argc, argv, i, subq_oracle_parse, "headmean-dot, headmean-cosine or per-head", &x))
            return -1;
        p->oracle = (subq_oracle_kind)x;
    } else if (!strcmp(a, "--no-search")) {
        o->no_search = 1;
        return 1;
    } else if (!strcmp(a, "--search-f16")) {
        p->search_f16 = 1;
    } else if (!strcmp(a, "--score")) {
        if (!choice_value(cmd, argc, argv, i, subq_score_parse, "cosine or dot", &x)) return -1;
        p->score = (subq_score)x;
    } else if (!strcmp(a, "--scan")) {
        if (!choice_value(cmd, argc, argv, i, subq_scan_parse, "full, int8, int4 or auto", &x)) return -1;
        p->scan = (subq_scan)x;
    } else if (!strcmp(a, "--nprobe")) {
        target = &p->nprobe, lo = 0, hi = 1 << 20;
    } else if (!strcmp(a, "--block-keys")) {
        target = &p->block_keys, lo = 1, hi = 4096;
    } else if (!strcmp(a, "--probe-from")) {
        target = &p->probe_from, lo = 0, hi = INT32_MAX;
    } else if (!strcmp(a, "--group-blocks")) {
        target = &p->group_blocks, lo = 0, hi = 4096;
    } else if (!strcmp(a, "--group-probe")) {
        target = &p->group_probe, lo = 1, hi = 1 << 20;
    } else if (!strcmp(a, "--block-reps")) {
        target = &p->block_reps, lo = 0, hi = 64;
    } else if (!strcmp(a, "--clusters")) {
        target = &p->clusters, lo = 0, hi = 1 << 16;
    } else if (!strcmp(a, "--cluster-probe")) {
        target = &p->cluster_probe, lo = 1, hi = 1 << 16;
    } else if (!strcmp(a, "--cluster-from")) {
        target = &p->cluster_from, lo = 0, hi = INT32_MAX;
    } else if (!strcmp(a, "--group-from")) {
        target = &p->group_from, lo = 0, hi = INT32_MAX;
    } else if (!strcmp(a, "--probe-check")) {
        target = &p->probe_check, lo = 0, hi = INT32_MAX;
    } else if (!strcmp(a, "--complete")) {
        text = &o->complete_file;
    } else if (!strcmp(a, "--complete-heads")) {
        text = &o->complete_heads;
    } else if (!strcmp(a, "--far-pos")) {
        if (!choice_value(cmd, argc, argv, i, subq_far_parse, "none, window, order or group", &x)) return -1;
        p->far_pos = (subq_far_pos)x;
    } else if (!strcmp(a, "--far-from")) {
        target = &p->far_from, lo = 1, hi = INT32_MAX;
    } else if (!strcmp(a, "--sparse-prefill")) {
        p->sparse_prefill = SUBQ_PREFILL_SPARSE;
    } else {
        return 0;
    }
    if (text && !(*text = cli_value(cmd, argc, argv, i))) return -1;
    if (target && (!(v = cli_value(cmd, argc, argv, i)) || !cli_parse_int(cmd, a, v, lo, hi, target))) return -1;
    o->enabled = 1;
    return 1;
}

/* --complete-heads entropy>=X -> plan.complete_min_entropy = X */
static int entropy_threshold(const char *cmd, cli_sparse_opts *o) {
    const char *prefix = "entropy>=";
    char *end = NULL;
    double x = NAN;
    if (!strncmp(o->complete_heads, prefix, strlen(prefix))) x = strtod(o->complete_heads + strlen(prefix), &end);
    if (!(x >= 0 && x <= 1) || end == o->complete_heads + strlen(prefix) || *end) {
        cli_error(cmd, "--complete-heads expects entropy>=X with X in [0, 1], got '%s'", o->complete_heads);
        return 0;
    }
    if (!subq_complete_has_entropy(o->complete)) {
        cli_error(cmd, "%s holds no per-head entropies; run subq train-phi --diagnose %s --annotate first",
                  o->complete_file, o->complete_file);
        return 0;
    }
    o->plan.complete_min_entropy = (float)x;
    return 1;
}

/* Layers of --random-search projections: the --sparse-layers, else 2 .. L-3
 * (first and last layers stay dense, as is usual), and the layers of
 * --topk-layers ("L:K" items, L a layer or range) as a malloc'd list;
 * NULL without --topk-layers. */
static char *random_search_layers(const subq_attn_plan *p) {
    if (!p->topk_layers) return NULL;
    const char *base = p->layers ? p->layers : "2--3";
    char *list = malloc(strlen(base) + strlen(p->topk_layers) + 2), *w = list;
    if (!list) return NULL;
    w += sprintf(w, "%s", base);
    for (const char *q = p->topk_layers; *q;) {
        size_t n = strcspn(q, ","), l = strcspn(q, ":,"); /* the L of "L:K" */
        w += sprintf(w, ",%.*s", (int)l, q);
        q += n + (q[n] == ',');
    }
    return list;
}

int cli_sparse_model_default(const char *cmd, cli_sparse_opts *o, const char *model_path) {
    if (o->search_file || o->random_search || o->no_search || !model_path) return 1;
    subq_search_info si;
    subq_error err = {0};
    subq_gguf *g;
    if (subq_gguf_open(model_path, &g, &err)) return 1; /* the model loader says what is wrong */
    subq_gguf_close(g);
    subq_status s = subq_search_info_file(model_path, &si, &err);
    if (s == SUBQ_ERR_RANGE || (!s && !si.merged)) return 1; /* none (or not a model: the loader will say) */
    if (s) return !cli_error(cmd, "%s (give --no-search to run without them)", err.msg);
    o->search_file = model_path;
    o->model_search = 1;
    o->enabled = 1;
    if (!o->topk_set && si.top_k > 0) o->plan.top_k = si.top_k;
    return 1;
}

int cli_sparse_load(const char *cmd, cli_sparse_opts *o, const subq_model *m) {
    subq_error err = {0};
    if (o->search_file && o->random_search) {
        cli_error(cmd, "give either --search FILE or --random-search D, not both");
        return 0;
    }
    if (o->complete_heads && !o->complete_file) {
        cli_error(cmd, "--complete-heads needs --complete FILE");
        return 0;
    }
    subq_status s = SUBQ_OK;
    if (o->model_search && !o->search) {
        s = subq_search_from_model(m, &o->search, &err);
    } else if (o->search_file && !o->search) {
        s = subq_search_load(o->search_file, m, &o->search, &err);
    } else if (o->random_search && !o->search) {
        char *layers = random_search_layers(&o->plan);
        if (o->plan.topk_layers && !layers) {
            cli_error(cmd, "out of memory");
            return 0;
        }
        s = subq_search_random_heads(m, layers ? layers : o->plan.layers, o->random_search,
                                     (subq_search_granularity)o->random_search_heads, 1, &o->search, &err);
        free(layers);
    }
    if (!s && o->search && o->search_rope_scale > 0) {
        int dims;
        float base, scale;
        subq_search_get_rope(o->search, &dims, &base, &scale);
        if (dims == 0) {
            cli_error(cmd, "--search-rope-scale: the search projections do not rotate by position (trained without "
                      "--rope-dims)");
            cli_sparse_free(o);
            return 0;
        }
        s = subq_search_set_rope(o->search, dims, base, o->search_rope_scale, &err);
    } else if (!s && o->search_rope_scale > 0 && !o->search) {
        cli_error(cmd, "--search-rope-scale needs --search FILE");
        cli_sparse_free(o);
        return 0;
    }
    if (!s && o->complete_file && !o->complete) s = subq_complete_load(o->complete_file, m, &o->complete, &err);
    if (s) {
        cli_error(cmd, "%s", err.msg);
        cli_sparse_free(o);
        return 0;
    }
    if (o->complete_heads && !entropy_threshold(cmd, o)) {
        cli_sparse_free(o);
        return 0;
    }
    return 1;
}

int cli_set_plan(const char *cmd, const cli_sparse_opts *o, subq_context *c, subq_selector_kind kind, int top_k,
                 int complete) {
    subq_error err = {0};
    subq_attn_plan p = cli_plan_with(o, kind, top_k);
    if (!complete) p.complete_min_entropy = -1;
    if (subq_selector_needs_search(kind) && !o->search)
        return !cli_error(cmd, "selector '%s' needs search projections: give --search FILE (from subq "
                          "train-search) or --random-search D", subq_selector_name(kind));
    if (subq_context_set_plan(c, &p, o->search, complete ? o->complete : NULL, &err))
        return !cli_error(cmd, "%s", err.msg);
    return 1;
}

int cli_apply_sparse(const char *cmd, cli_sparse_opts *o, const subq_model *m, subq_context *c) {
    if (!o->enabled) return 1;
    if (!cli_sparse_load(cmd, o, m)) return 0;
    if (!cli_set_plan(cmd, o, c, o->plan.selector, o->plan.top_k, 1)) {
        cli_sparse_free(o);
        return 0;
    }
    return 1;
}

void cli_sparse_free(cli_sparse_opts *o) {
    subq_search_free(o->search);
    subq_complete_free(o->complete);
    o->search = NULL;
    o->complete = NULL;
}

void cli_unload(subq_model *m, subq_context *c, cli_sparse_opts *so) {
    subq_context_free(c);
    cli_sparse_free(so);
    subq_model_free(m);
}

int cli_common_opt(const char *cmd, const char *help, int argc, char **argv, int *i, cli_model_opts *mo,
                   cli_sparse_opts *so) {
    int r = cli_parse_model_opt(cmd, argc, argv, i, mo);
    if (r == 0 && so) r = cli_parse_sparse_opt(cmd, argc, argv, i, so);
    if (r < 0) return CLI_OPT_ERROR;
    if (r > 0) return CLI_OPT_TAKEN;
    if (!cli_is_help(argv[*i])) return CLI_OPT_NONE;
    cli_help(help);
    return CLI_OPT_HELP;
}

int cli_parse_command(const char *cmd, const char *help, int argc, char **argv, cli_model_opts *mo,
                      cli_sparse_opts *so, const cli_flag *flags, int n_flags, int *exit_code) {
    *exit_code = 1;
    for (int i = 1; i < argc; i++) {
        int r = cli_common_opt(cmd, help, argc, argv, &i, mo, so);
        if (r == CLI_OPT_TAKEN) continue;
        if (r != CLI_OPT_NONE) {
            *exit_code = r == CLI_OPT_HELP ? 0 : 1;
            return 0;
        }
        if ((r = cli_flag_take(cmd, flags, n_flags, argc, argv, &i)) > 0) continue;
        if (r == 0) cli_error(cmd, "unknown option '%s' (see subq %s --help)", argv[i], cmd);
        return 0;
    }
    return 1;
}
