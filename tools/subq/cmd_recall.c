/* subq recall: pass-key / needle-in-a-haystack accuracy over a grid of
 * prompt lengths x needle depths x trials, for full attention and sparse
 * methods side by side on the same prompts. Table, --json, SVG heat maps. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "progress.h"
#include "cli.h"
#include "subq_lab.h"
#include "cli_sparse.h"
#include "cli_svg.h"

static const char *help =
    "usage: subq recall -m MODEL [--haystack PATH] [options]\n"
    "Needle-in-a-haystack recall: a fact stated once inside filler text, then a question;\n"
    "the answer is decoded greedily and must contain the exact number. Every method\n"
    "answers the same prompts. Prompts run the way `subq generate` runs them: dense\n"
    "prefill (sparse decode of the answer), or sparse prefill with --sparse-prefill.\n"
    "With full among the methods, agreement is the share of prompts whose answer gives\n"
    "full attention's numbers (the first as many as the values asked). A dense prefill is run once per prompt and\n"
    "copied into every method's context (its index rebuilt from the copied rows).\n\n"
    "  -m, --model FILE     GGUF model (required)\n"
    "  --haystack PATH      filler text: a file or a directory of files (repeatable); without it,\n"
    "                       the pass-key test's filler (as llama.cpp's passkey example): \"The grass\n"
    "                       is green. The sky is blue. ... There and back again.\" repeated\n"
    "  --task NAME          passkey | niah-multikey | niah-multivalue (default passkey)\n"
    "  --lengths LIST       prompt lengths in tokens (default: 1/4, 1/2 and all of the\n"
    "                       model's context); past it only with a far-key scheme\n"
    "                       (--far-pos, or FAR in a method) and --sparse-prefill\n"
    "  --depths LIST        needle depths in [0, 1] (default 0,0.1,...,1)\n"
    "  --trials N           prompts per cell, each with its own key and filler (default 4)\n"
    "  --methods LIST       full and SELECTOR@K[+phi][:FAR], e.g. full,exact@64,quest@64,\n"
    "                       window@64, exact@64:window (FAR: that method's --far-pos)\n"
    "                       (default: full, plus exact@64 with --search)\n"
    "  --n-keys N           niah-multikey: needles per prompt (default 4)\n"
    "  --n-values N         niah-multivalue: values of the key (default 4)\n"
    "  --max-new N          answer tokens decoded at most (default 16)\n"
    "  -s, --seed N         keys, filler offsets and distractor depths (default 1)\n"
    "  -t, --threads N      threads (default: all cores)\n"
    "  --kv TYPE            KV cache type: f32, f16, q8_0, q4_0 (default f32)\n"
    "  --kv-file FILE       the methods' KV cache in FILE, read from disk where queries attend\n"
    "                       (subq generate --help); the grid's shared dense prefill in FILE.prefill,\n"
    "                       made for the run and removed at its end\n"
    "  -v, --verbose        print every answer on stderr\n"
    "  --json               print one JSON object on stdout\n"
    "  --svg-dir DIR        write one heat map per method (length x depth) into DIR, and\n"
    "                       one of its agreement with full attention\n"
    "  --force              replace charts of that name already in DIR (without it, they are refused)\n\n"
    CLI_SPARSE_OPTS_HELP;

#define MAX_LIST 32
#define MAX_METHODS 16

static int parse_depths(const char *cmd, const char *s, double *out, int *n) {
    *n = 0;
    for (const char *p = s; *p;) {
        char *end;
        double v = strtod(p, &end);
        if (end == p || !(v >= 0 && v <= 1) || *n >= MAX_LIST || (*end && *end != ',')) {
            cli_error(cmd, "--depths expects up to %d comma-separated numbers in [0, 1], got '%s'", MAX_LIST, s);
            return 0;
        }
        out[(*n)++] = v;
        p = *end == ',' ? end + 1 : end;
    }
    return *n > 0;
}

/* "full,exact@64,hnsw@32+phi" -> methods with their plans from the sparse
 * options; with_phi[i] says whether method i takes the completion maps. */
static int parse_methods(const char *cmd, const char *s, const cli_sparse_opts *so, subq_recall_method *out,
                         int *with_phi, int *n) {
    char buf[512];
    if (strlen(s) >= sizeof buf) return cli_error(cmd, "--methods: the list is too long"), 0;
    snprintf(buf, sizeof buf, "%s", s);
    *n = 0;
    for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
        if (*n == MAX_METHODS) return cli_error(cmd, "--methods: at most %d methods", MAX_METHODS), 0;
        subq_recall_method *me = &out[(*n)++];
        memset(me, 0, sizeof *me);
        subq_error err = {0};
        int complete;
        if (subq_recall_method_parse(t, me, &complete, &err)) return cli_error(cmd, "--methods: %s", err.msg), 0;
        with_phi[*n - 1] = complete;
        if (me->full) continue;
        me->plan = cli_plan_with(so, me->plan.selector, me->plan.top_k);
        if (me->far_pos >= 0) me->plan.far_pos = (subq_far_pos)me->far_pos; /* "SELECTOR@K:FAR" */
        if (!complete) me->plan.complete_min_entropy = -1;
        if (subq_selector_needs_search(me->plan.selector) && !so->search_file && !so->random_search)
            return cli_error(cmd, "method %s needs search projections: give --search FILE (or --random-search D)",
                             me->name), 0;
        if (complete && !so->complete_file)
            return cli_error(cmd, "method %s needs completion maps: give --complete FILE", me->name), 0;
    }
    return *n > 0;
}

/* One grid of per-cell sums over trials (score or count), as shares. */
static void print_grid(const char *title, const char *name, const double *sum, const int *count,
                       const int *lengths, int n_len, const double *depths, int n_dep, int trials) {
    printf("\n%s: %s\n%-10s", name, title, "length");
    for (int d = 0; d < n_dep; d++) printf(" %6.2f", depths[d]);
    printf(" %7s\n", "all");
    double col[MAX_LIST] = {0}, total = 0;
    for (int l = 0; l < n_len; l++) {
        printf("%-10d", lengths[l]);
        double row = 0;
        for (int d = 0; d < n_dep; d++) {
            double a = (sum ? sum[l * n_dep + d] : count[l * n_dep + d]) / trials;
            printf(" %6.2f", a);
            row += a, col[d] += a;
        }
        total += row;
        printf(" %7.3f\n", row / n_dep);
    }
    printf("%-10s", "all");
    for (int d = 0; d < n_dep; d++) printf(" %6.2f", col[d] / n_len);
    printf(" %7.3f\n", total / (n_len * n_dep));
}

/* {"name": [[...], ...]} rows of per-cell shares */
static void json_grid(const char *key, const double *sum, const int *count, int n_len, int n_dep, int trials) {
    printf(", \"%s\": [", key);
    for (int l = 0; l < n_len; l++) {
        printf("%s[", l ? ", " : "");
        for (int d = 0; d < n_dep; d++)
            printf("%s%.4f", d ? ", " : "", (sum ? sum[l * n_dep + d] : count[l * n_dep + d]) / (double)trials);
        printf("]");
    }
    printf("]");
}

/* DIR/PREFIX_NAME.svg with '@', '+' and ':' of the method's name as '_'. */
static void svg_path(char *path, size_t cap, const char *dir, const char *prefix, const char *name) {
    int n = snprintf(path, cap, "%s/%s_", dir, prefix);
    snprintf(path + n, cap - (size_t)n, "%s.svg", name);
    for (char *p = path + n; *p; p++)
        if (*p == '@' || *p == '+' || *p == ':') *p = '_';
}

/* Whether the charts --svg-dir will write may be: recall_ of every method,
 * agree_ of every one but full attention when it is among them. */
static int charts_ok(const char *cmd, const char *dir, const subq_recall_method *methods, int n, int force) {
    if (!cli_output_dir_ok(cmd, "--svg-dir", dir)) return 0;
    int full_at = -1;
    for (int i = 0; i < n && full_at < 0; i++)
        if (methods[i].full) full_at = i;
    char path[4096];
    for (int i = 0; i < n; i++) {
        svg_path(path, sizeof path, dir, "recall", methods[i].name);
        if (!cli_output_ok(cmd, path, force)) return 0;
        if (full_at < 0 || i == full_at) continue;
        svg_path(path, sizeof path, dir, "agree", methods[i].name);
        if (!cli_output_ok(cmd, path, force)) return 0;
    }
    return 1;
}

/* Progress and, with -v, every answer on stderr. */
typedef struct answer_log {
    progress *bar;
    int64_t done;
    int verbose;
    const subq_recall_method *methods;
    const int *lengths;
    const double *depths;
} answer_log;

static void on_answer(void *user, int method, int length_i, int depth_i, int trial, const subq_recall_prompt *pr,
                      const char *answer, double score) {
    answer_log *log = user;
    if (log->verbose) {
        fprintf(stderr, "%s length %d depth %g trial %d: want", log->methods[method].name, log->lengths[length_i],
                log->depths[depth_i], trial);
        for (int vi = 0; vi < pr->n_values; vi++) fprintf(stderr, " %s", pr->values[vi]);
        fprintf(stderr, ", got \"%s\" (%.2f)\n", answer, score);
    }
    progress_update(log->bar, ++log->done, NULL);
}

int cmd_recall(int argc, char **argv) {
    const char *cmd = "recall";
    cli_model_opts mo = {0};
    cli_sparse_opts so = cli_sparse_default();
    subq_recall_params rp = subq_recall_default_params();
    const char *haystacks[64], *methods_arg = NULL, *svg_dir = NULL, *v;
    int n_hay = 0, lengths[MAX_LIST], n_len = 0, trials = 4, max_new = 16, json = 0, n_dep = 11, verbose = 0;
    int force = 0;
    double depths[MAX_LIST];
    for (int d = 0; d < n_dep; d++) depths[d] = d / 10.0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const int r = cli_common_opt(cmd, help, argc, argv, &i, &mo, &so);
        if (r == CLI_OPT_TAKEN) continue;
        if (r != CLI_OPT_NONE) return r == CLI_OPT_HELP ? 0 : 1;
        if (!strcmp(a, "--haystack")) {
            if (!(v = cli_value(cmd, argc, argv, &i))) return 1;
            if (n_hay == 64) return cli_error(cmd, "too many --haystack (max 64)");
            haystacks[n_hay++] = v;
        } else if (!strcmp(a, "--task")) {
            if (!(v = cli_value(cmd, argc, argv, &i))) return 1;
            int t = subq_recall_task_parse(v);
            if (t < 0) return cli_error(cmd, "unknown task '%s' (passkey, niah-multikey, niah-multivalue)", v);
            rp.task = (subq_recall_task)t;
        } else if (!strcmp(a, "--lengths")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || !cli_parse_int_list(cmd, a, v, 1, 1 << 24, MAX_LIST, lengths, &n_len)) return 1;
        } else if (!strcmp(a, "--depths")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || !parse_depths(cmd, v, depths, &n_dep)) return 1;
        } else if (!strcmp(a, "--trials")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || !cli_parse_int(cmd, a, v, 1, 1 << 20, &trials)) return 1;
        } else if (!strcmp(a, "--methods")) {
            if (!(methods_arg = cli_value(cmd, argc, argv, &i))) return 1;
        } else if (!strcmp(a, "--n-keys")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || !cli_parse_int(cmd, a, v, 1, 8, &rp.n_keys)) return 1;
        } else if (!strcmp(a, "--n-values")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || !cli_parse_int(cmd, a, v, 1, 8, &rp.n_values)) return 1;
        } else if (!strcmp(a, "--max-new")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || !cli_parse_int(cmd, a, v, 1, 256, &max_new)) return 1;
        } else if (!strcmp(a, "-s") || !strcmp(a, "--seed")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || !cli_parse_u64(cmd, a, v, &rp.seed)) return 1;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
            verbose = 1;
        } else if (!strcmp(a, "--svg-dir")) {
            if (!(svg_dir = cli_value(cmd, argc, argv, &i))) return 1;
        } else if (!strcmp(a, "--force")) {
            force = 1;
        } else {
            return cli_error(cmd, "unknown option '%s' (see subq recall --help)", a);
        }
    }
    if (!mo.model) return cli_error(cmd, "no model given; use -m FILE.gguf");
    if (!cli_sparse_model_default(cmd, &so, mo.model)) return 1;
    subq_recall_method methods[MAX_METHODS];
    int with_phi[MAX_METHODS], n_methods = 0;
    if (!parse_methods(cmd, methods_arg ? methods_arg : so.search_file || so.random_search ? "full,exact@64" : "full",
                       &so, methods, with_phi, &n_methods))
        return 1;
    if (svg_dir && !charts_ok(cmd, svg_dir, methods, n_methods, force)) return 1;
    subq_error err = {0};
    char *hay = NULL;
    size_t hay_len = 0;
    for (int i = 0; i < n_hay; i++) {
        char *text;
        size_t len;
        if (subq_read_texts(haystacks[i], &text, &len, &err)) {
            free(hay);
            return cli_error(cmd, "%s", err.msg);
        }
        char *grown = realloc(hay, hay_len + len + 3);
        if (!grown) {
            free(text);
            free(hay);
            return cli_error(cmd, "out of memory reading %s", haystacks[i]);
        }
        hay = grown;
        if (hay_len && len) memcpy(hay + hay_len, "\n\n", 2), hay_len += 2; /* documents apart */
        memcpy(hay + hay_len, text, len + 1);
        hay_len += len;
        free(text);
    }
    rp.haystack = hay;
    rp.haystack_len = hay_len;

    subq_model *m = NULL;
    subq_context *c = NULL;
    subq_recall *rec = NULL;
    subq_recall_grid grid = {0};
    int rc = 0;
    /* the context holds the longest prompt and its answer */
    if (subq_model_load_ex(mo.model, mo.load_mode, &m, &err)) {
        free(hay);
        return cli_error(cmd, "%s", err.msg);
    }
    subq_model_info info;
    subq_model_get_info(m, &info);
    if (n_len == 0) {
        int full = info.n_ctx_train;
        lengths[0] = full / 4, lengths[1] = full / 2, lengths[2] = full, n_len = 3;
    }
    int max_len = 0, far = 0;
    for (int i = 0; i < n_methods; i++) far |= !methods[i].full && methods[i].plan.far_pos != SUBQ_FAR_NONE;
    for (int i = 0; i < n_len; i++) {
        if (lengths[i] > info.n_ctx_train && !far) {
            rc = cli_error(cmd, "length %d is above the model's context (%d); give --far-pos to read past it with "
                           "far keys at trained distances", lengths[i], info.n_ctx_train);
            goto done;
        }
        if (lengths[i] > info.n_ctx_train && so.plan.sparse_prefill != SUBQ_PREFILL_SPARSE) {
            rc = cli_error(cmd, "length %d is above the model's context (%d): give --sparse-prefill (a dense "
                           "prefill attends at distances the model was never trained on)", lengths[i],
                           info.n_ctx_train);
            goto done;
        }
        if (lengths[i] > max_len) max_len = lengths[i];
    }
    subq_model_free(m);
    m = NULL;
    mo.n_ctx = max_len + max_new;
    mo.far_keys = far;
    if (!cli_load(cmd, &mo, &m, &c) || !cli_sparse_load(cmd, &so, m)) {
        rc = 1;
        goto done;
    }
    for (int i = 0; i < n_methods; i++) {
        methods[i].search = so.search;
        methods[i].complete = with_phi[i] ? so.complete : NULL;
    }
    if (subq_recall_new(m, &rp, &rec, &err)) {
        rc = cli_error(cmd, "%s", err.msg);
        goto done;
    }
    progress bar;
    progress_begin(&bar, "recall", (int64_t)n_len * n_dep * trials * n_methods);
    answer_log log = {&bar, 0, verbose, methods, lengths, depths};
    char prefill_file[4096]; /* with --kv-file, the shared dense prefill's cache goes to disk beside it */
    if (mo.kv_file) snprintf(prefill_file, sizeof prefill_file, "%s.prefill", mo.kv_file);
    subq_recall_grid_params gp = {
        .lengths = lengths, .n_lengths = n_len, .depths = depths, .n_depths = n_dep, .trials = trials,
        .max_new = max_new, .sparse_prefill = so.plan.sparse_prefill, .methods = methods, .n_methods = n_methods,
        .prefill_kv_file = mo.kv_file ? prefill_file : NULL, .on_answer = on_answer, .user = &log,
    };
    subq_status st = subq_recall_run_grid(c, rec, &gp, &grid, &err);
    progress_end(&bar);
    if (st) {
        rc = cli_error(cmd, "%s", err.msg);
        goto done;
    }
    const int full_at = grid.full_method;
    const int nc = grid.n_cells;

    const char *prefill = so.plan.sparse_prefill ? "sparse" : "dense";
    for (int i = 0; svg_dir && i < n_methods && !rc; i++) {
        const double *score = grid.score + (size_t)i * nc;
        const int *agree = grid.agree ? grid.agree + (size_t)i * nc : NULL;
        char path[4096], title[256];
        double cells[MAX_LIST * MAX_LIST];
        for (int j = 0; j < nc; j++) cells[j] = score[j] / trials;
        svg_path(path, sizeof path, svg_dir, "recall", methods[i].name);
        snprintf(title, sizeof title, "%.48s: %s recall, %s prefill, %d trials per cell", methods[i].name,
                 subq_recall_task_name(rp.task), prefill, trials);
        if (cli_svg_heatmap(path, title, "needle depth", "prompt length (tokens)", lengths, n_len, depths, n_dep,
                            cells, &err))
            rc = cli_error(cmd, "%s", err.msg);
        if (rc || !agree || i == full_at) continue;
        for (int j = 0; j < nc; j++) cells[j] = (double)agree[j] / trials;
        svg_path(path, sizeof path, svg_dir, "agree", methods[i].name);
        snprintf(title, sizeof title, "%.48s: agreement with full, %s, %s prefill, %d trials per cell",
                 methods[i].name, subq_recall_task_name(rp.task), prefill, trials);
        if (cli_svg_heatmap(path, title, "needle depth", "prompt length (tokens)", lengths, n_len, depths, n_dep,
                            cells, &err))
            rc = cli_error(cmd, "%s", err.msg);
    }
    if (rc) goto done;
    if (json) {
        printf("{\"model\": ");
        cli_json_string(stdout, mo.model, strlen(mo.model));
        printf(", \"haystack\": [");
        for (int i = 0; i < n_hay; i++) {
            printf("%s", i ? ", " : "");
            cli_json_string(stdout, haystacks[i], strlen(haystacks[i]));
        }
        printf("%s]", n_hay ? "" : "\"passkey filler\"");
        printf(", \"task\": \"%s\", \"prefill\": \"%s\", \"trials\": %d, \"seed\": %llu, \"sink\": %d, \"tail\": %d, "
               "\"lengths\": [",
               subq_recall_task_name(rp.task), prefill, trials, (unsigned long long)rp.seed, so.plan.n_sink,
               so.plan.n_tail);
        for (int l = 0; l < n_len; l++) printf("%s%d", l ? ", " : "", lengths[l]);
        printf("], \"depths\": [");
        for (int d = 0; d < n_dep; d++) printf("%s%g", d ? ", " : "", depths[d]);
        printf("],\n \"methods\": [");
        for (int i = 0; i < n_methods; i++) {
            const double *score = grid.score + (size_t)i * nc;
            const int *exact = grid.exact + (size_t)i * nc, *agree = grid.agree ? grid.agree + (size_t)i * nc : NULL;
            double total = 0;
            int n_agree = 0;
            printf("%s\n  {\"method\": ", i ? "," : "");
            cli_json_string(stdout, methods[i].name, strlen(methods[i].name));
            json_grid("accuracy", score, NULL, n_len, n_dep, trials);
            for (int j = 0; j < nc; j++) total += score[j], n_agree += agree ? agree[j] : 0;
            if (agree) json_grid("agreement", NULL, agree, n_len, n_dep, trials);
            printf(", \"exact\": [");
            for (int l = 0; l < n_len; l++) {
                printf("%s[", l ? ", " : "");
                for (int d = 0; d < n_dep; d++) printf("%s%d", d ? ", " : "", exact[l * n_dep + d]);
                printf("]");
            }
            printf("], \"overall\": %.4f", total / ((double)nc * trials));
            if (agree) printf(", \"overall_agreement\": %.4f", n_agree / ((double)nc * trials));
            printf("}");
        }
        printf("]}\n");
    } else {
        printf("%s recall, %d trials per cell, %s prefill, sink %d, tail %d\n", subq_recall_task_name(rp.task), trials,
               prefill, so.plan.n_sink, so.plan.n_tail);
        for (int i = 0; i < n_methods; i++) {
            print_grid("share of the answer values recalled (1 = every value exact)", methods[i].name,
                       grid.score + (size_t)i * nc, NULL, lengths, n_len, depths, n_dep, trials);
            if (grid.agree && i != full_at)
                print_grid("share of prompts answered with full attention's numbers", methods[i].name, NULL,
                           grid.agree + (size_t)i * nc, lengths, n_len, depths, n_dep, trials);
        }
    }
done:
    subq_recall_grid_free(&grid);
    subq_recall_free(rec);
    free(hay);
    cli_unload(m, c, &so);
    return rc;
}
