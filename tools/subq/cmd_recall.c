/* subq recall: pass-key / needle-in-a-haystack accuracy over a grid of
 * prompt lengths x needle depths x trials, for full attention and sparse
 * methods side by side on the same prompts. Table, --json, SVG heat maps. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "progress.h"
#include "cli.h"
#include "cli_sparse.h"
#include "cli_svg.h"

static const char *help =
    "usage: subq recall -m MODEL --haystack PATH [options]\n"
    "Needle-in-a-haystack recall: a fact stated once inside filler text, then a question;\n"
    "the answer is decoded greedily and must contain the exact number. Every method\n"
    "answers the same prompts. Prompts run the way `subq generate` runs them: dense\n"
    "prefill (sparse decode of the answer), or sparse prefill with --sparse-prefill.\n"
    "With full among the methods, agreement is the share of prompts whose answer states\n"
    "the same numbers as full attention's. A dense prefill is run once per prompt and\n"
    "copied into every method's context (its index rebuilt from the copied rows).\n\n"
    "  -m, --model FILE     GGUF model (required)\n"
    "  --haystack PATH      filler text: a file or a directory of files (repeatable)\n"
    "  --task NAME          passkey | niah-multikey | niah-multivalue (default passkey)\n"
    "  --lengths LIST       prompt lengths in tokens (default: 1/4, 1/2 and all of the\n"
    "                       model's context)\n"
    "  --depths LIST        needle depths in [0, 1] (default 0,0.1,...,1)\n"
    "  --trials N           prompts per cell, each with its own key and filler (default 4)\n"
    "  --methods LIST       full and SELECTOR@K[+phi], e.g. full,exact@64,quest@64,window@64\n"
    "                       (default: full, plus exact@64 with --search)\n"
    "  --n-keys N           niah-multikey: needles per prompt (default 4)\n"
    "  --n-values N         niah-multivalue: values of the key (default 4)\n"
    "  --max-new N          answer tokens decoded at most (default 16)\n"
    "  -s, --seed N         keys, filler offsets and distractor depths (default 1)\n"
    "  -t, --threads N      threads (default: all cores)\n"
    "  --kv TYPE            KV cache type: f32, f16, q8_0, q4_0 (default f32)\n"
    "  -v, --verbose        print every answer on stderr\n"
    "  --json               print one JSON object on stdout\n"
    "  --svg-dir DIR        write one heat map per method (length x depth) into DIR, and\n"
    "                       one of its agreement with full attention\n\n" CLI_SPARSE_OPTS_HELP;

#define MAX_LIST 32
#define MAX_METHODS 16

typedef struct method {
    char name[48];
    int full;                  /* full attention */
    subq_selector_kind kind;
    int k, complete;
    double *score;             /* [n_len][n_depth], sums over trials */
    int *exact;                /* trials with every value recalled */
    int *agree;                /* trials whose answer states full attention's numbers */
} method;

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

/* "full", "exact@64", "hnsw@32+phi" */
static int parse_methods(const char *cmd, const char *s, method *out, int *n) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s", s);
    *n = 0;
    for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
        if (*n == MAX_METHODS) return cli_error(cmd, "--methods: at most %d methods", MAX_METHODS), 0;
        method *me = &out[(*n)++];
        memset(me, 0, sizeof *me);
        snprintf(me->name, sizeof me->name, "%s", t);
        if (!strcmp(t, "full")) {
            me->full = 1;
            continue;
        }
        char *at = strchr(t, '@'), *end = NULL;
        if (at) *at = '\0';
        int kind = subq_selector_parse(t);
        long k = at ? strtol(at + 1, &end, 10) : -1;
        me->complete = end && !strcmp(end, "+phi");
        if (kind < 0 || !at || end == at + 1 || k < 0 || k > (1 << 20) || (*end && !me->complete)) {
            cli_error(cmd, "--methods: '%s' is not full or SELECTOR@K[+phi] (selectors: exact, hnsw, faiss, quest, "
                      "oracle, window)", me->name);
            return 0;
        }
        if (!subq_selector_available((subq_selector_kind)kind))
            return cli_error(cmd, "selector '%s' is not in this build (see subq info --features)", t), 0;
        me->kind = (subq_selector_kind)kind;
        me->k = (int)k;
    }
    return *n > 0;
}

/* Append a file, or every regular file under a directory (name order,
 * hidden names skipped), to the haystack buffer. */
static int add_haystack(const char *cmd, const char *path, char **buf, size_t *len, int depth) {
    struct stat st;
    if (stat(path, &st) != 0) return cli_error(cmd, "cannot read haystack %s", path), 0;
    if (S_ISDIR(st.st_mode)) {
        if (depth > 16) return cli_error(cmd, "haystack %s: directories nested too deep", path), 0;
        struct dirent **names;
        int n = scandir(path, &names, NULL, alphasort);
        if (n < 0) return cli_error(cmd, "cannot list haystack directory %s", path), 0;
        int ok = 1;
        for (int i = 0; i < n; i++) {
            if (ok && names[i]->d_name[0] != '.') {
                char sub[4096];
                snprintf(sub, sizeof sub, "%s/%s", path, names[i]->d_name);
                ok = add_haystack(cmd, sub, buf, len, depth + 1);
            }
            free(names[i]);
        }
        free(names);
        return ok;
    }
    if (!S_ISREG(st.st_mode)) return 1;
    subq_error err = {0};
    char *text;
    size_t n;
    if (subq_read_file(path, 0, &text, &n, &err)) return cli_error(cmd, "%s", err.msg), 0;
    char *grown = realloc(*buf, *len + n + 3);
    if (!grown) {
        free(text);
        return cli_error(cmd, "out of memory reading %s", path), 0;
    }
    *buf = grown;
    if (*len && n) { /* documents apart */
        memcpy(*buf + *len, "\n\n", 2);
        *len += 2;
    }
    memcpy(*buf + *len, text, n);
    *len += n;
    (*buf)[*len] = '\0';
    free(text);
    return 1;
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

int cmd_recall(int argc, char **argv) {
    const char *cmd = "recall";
    cli_model_opts mo = {0};
    cli_sparse_opts so;
    cli_sparse_init(&so);
    subq_recall_params rp = subq_recall_default_params();
    const char *haystacks[64], *methods_arg = NULL, *svg_dir = NULL, *v;
    int n_hay = 0, lengths[MAX_LIST], n_len = 0, trials = 4, max_new = 16, json = 0, n_dep = 11, verbose = 0;
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
        } else {
            return cli_error(cmd, "unknown option '%s' (see subq recall --help)", a);
        }
    }
    if (!mo.model) return cli_error(cmd, "no model given; use -m FILE.gguf");
    if (n_hay == 0) return cli_error(cmd, "no haystack given; use --haystack FILE or DIR");
    if (!cli_sparse_model_default(cmd, &so, mo.model)) return 1;
    int have_search = so.search_file || so.random_search;
    method methods[MAX_METHODS];
    int n_methods = 0;
    if (!parse_methods(cmd, methods_arg ? methods_arg : have_search ? "full,exact@64" : "full", methods, &n_methods))
        return 1;
    for (int i = 0; i < n_methods; i++) {
        if (!methods[i].full && subq_selector_needs_search(methods[i].kind) && !have_search)
            return cli_error(cmd, "method %s needs search projections: give --search FILE (or --random-search D)",
                             methods[i].name);
        if (methods[i].complete && !so.complete_file)
            return cli_error(cmd, "method %s needs completion maps: give --complete FILE", methods[i].name);
    }
    char *hay = NULL;
    size_t hay_len = 0;
    for (int i = 0; i < n_hay; i++)
        if (!add_haystack(cmd, haystacks[i], &hay, &hay_len, 0)) {
            free(hay);
            return 1;
        }
    rp.haystack = hay;
    rp.haystack_len = hay_len;

    subq_model *m = NULL;
    subq_context *c = NULL;
    subq_context *c_pre = NULL; /* the shared dense prefill */
    subq_recall *rec = NULL;
    float *logits = NULL;
    int rc = 0;
    /* the context holds the longest prompt and its answer */
    {
        subq_error err = {0};
        if (subq_model_load_ex(mo.model, mo.load_mode, &m, &err)) {
            free(hay);
            return cli_error(cmd, "%s", err.msg);
        }
    }
    subq_model_info info;
    subq_model_get_info(m, &info);
    if (n_len == 0) {
        int full = info.n_ctx_train;
        lengths[0] = full / 4, lengths[1] = full / 2, lengths[2] = full, n_len = 3;
    }
    int max_len = 0;
    for (int i = 0; i < n_len; i++) {
        if (lengths[i] > info.n_ctx_train) {
            rc = cli_error(cmd, "length %d is above the model's context (%d)", lengths[i], info.n_ctx_train);
            goto done;
        }
        if (lengths[i] > max_len) max_len = lengths[i];
    }
    subq_model_free(m);
    m = NULL;
    mo.n_ctx = max_len + max_new;
    if (!cli_load(cmd, &mo, &m, &c) || !cli_sparse_load(cmd, &so, m)) {
        rc = 1;
        goto done;
    }
    for (int i = 0; i < n_methods; i++) {
        methods[i].score = calloc((size_t)n_len * n_dep, sizeof(double));
        methods[i].exact = calloc((size_t)n_len * n_dep, sizeof(int));
        methods[i].agree = calloc((size_t)n_len * n_dep, sizeof(int));
        if (!methods[i].score || !methods[i].exact || !methods[i].agree) {
            rc = cli_error(cmd, "out of memory");
            goto done;
        }
    }
    /* full attention answers first, so the others can be compared with it */
    int full_at = -1;
    for (int i = 0; i < n_methods && full_at < 0; i++)
        if (methods[i].full) full_at = i;
    int order[MAX_METHODS], n_order = 0;
    if (full_at >= 0) order[n_order++] = full_at;
    for (int i = 0; i < n_methods; i++)
        if (i != full_at) order[n_order++] = i;
    /* dense prefill: once per prompt, in a context whose plan computes the
     * search keys every method needs (the first method with projections) */
    if (!so.plan.sparse_prefill) {
        int donor = -1;
        for (int i = 0; i < n_methods && donor < 0; i++)
            if (!methods[i].full && subq_selector_needs_search(methods[i].kind)) donor = i;
        subq_context_params cp = subq_context_default_params();
        cp.n_ctx = mo.n_ctx, cp.n_threads = mo.n_threads, cp.kv_type = mo.kv_type;
        if (mo.n_batch > 0) cp.n_batch = mo.n_batch;
        subq_error e = {0};
        if (subq_context_new(m, &cp, &c_pre, &e)) {
            rc = cli_error(cmd, "%s", e.msg);
            goto done;
        }
        if (donor >= 0 && !cli_set_plan(cmd, &so, c_pre, methods[donor].kind, methods[donor].k, 0)) {
            rc = 1;
            goto done;
        }
    }
    subq_error err = {0};
    if (!(logits = malloc((size_t)info.n_vocab * sizeof(float)))) {
        rc = cli_error(cmd, "out of memory");
        goto done;
    }
    if (subq_recall_new(m, &rp, &rec, &err)) {
        rc = cli_error(cmd, "%s", err.msg);
        goto done;
    }
    progress bar;
    progress_begin(&bar, "recall", (int64_t)n_len * n_dep * trials * n_methods);
    int64_t done_n = 0;
    for (int li = 0; li < n_len && !rc; li++)
        for (int di = 0; di < n_dep && !rc; di++)
            for (int t = 0; t < trials && !rc; t++) {
                subq_recall_prompt pr;
                if (subq_recall_make_prompt(rec, lengths[li], depths[di], t, &pr, &err)) {
                    rc = cli_error(cmd, "%s", err.msg);
                    break;
                }
                if (c_pre) {
                    subq_context_reset(c_pre);
                    if (subq_decode(c_pre, pr.tokens, pr.n_tokens, logits, 0, &err)) {
                        rc = cli_error(cmd, "%s", err.msg);
                        subq_recall_prompt_free(&pr);
                        break;
                    }
                }
                char full_answer[1024] = "";
                for (int oi = 0; oi < n_methods && !rc; oi++) {
                    method *me = &methods[order[oi]];
                    subq_context_clear_plan(c);
                    subq_context_reset(c);
                    if (!me->full && !cli_set_plan(cmd, &so, c, me->kind, me->k, me->complete)) {
                        rc = 1;
                        break;
                    }
                    char answer[1024];
                    double score;
                    subq_status st = c_pre ? subq_context_copy(c, c_pre, &err) : SUBQ_OK;
                    if (!st)
                        st = c_pre ? subq_recall_continue(c, &pr, max_new, answer, sizeof answer, &score, &err)
                                   : subq_recall_answer(c, &pr, max_new, answer, sizeof answer, &score, &err);
                    if (st) {
                        rc = cli_error(cmd, "%s: %s", me->name, err.msg);
                        break;
                    }
                    if (order[oi] == full_at) snprintf(full_answer, sizeof full_answer, "%s", answer);
                    if (full_at >= 0) me->agree[li * n_dep + di] += subq_recall_same_numbers(answer, full_answer);
                    if (verbose) {
                        fprintf(stderr, "%s length %d depth %g trial %d: want", me->name, lengths[li], depths[di], t);
                        for (int vi = 0; vi < pr.n_values; vi++) fprintf(stderr, " %s", pr.values[vi]);
                        fprintf(stderr, ", got \"%s\" (%.2f)\n", answer, score);
                    }
                    me->score[li * n_dep + di] += score;
                    me->exact[li * n_dep + di] += score == 1.0;
                    progress_update(&bar, ++done_n, NULL);
                }
                subq_recall_prompt_free(&pr);
            }
    progress_end(&bar);
    if (rc) goto done;

    const char *prefill = so.plan.sparse_prefill ? "sparse" : "dense";
    if (svg_dir) {
        for (int i = 0; i < n_methods && !rc; i++) {
            char path[4096], title[256];
            double grid[MAX_LIST * MAX_LIST];
            for (int j = 0; j < n_len * n_dep; j++) grid[j] = methods[i].score[j] / trials;
            snprintf(path, sizeof path, "%s/recall_%s.svg", svg_dir, methods[i].name);
            for (char *p = path + strlen(svg_dir) + 1; *p; p++)
                if (*p == '@' || *p == '+') *p = '_';
            snprintf(title, sizeof title, "%.48s: %s recall, %s prefill, %d trials per cell", methods[i].name,
                     subq_recall_task_name(rp.task), prefill, trials);
            if (cli_svg_heatmap(path, title, "needle depth", "prompt length (tokens)", lengths, n_len, depths, n_dep,
                                grid, &err))
                rc = cli_error(cmd, "%s", err.msg);
            if (rc || full_at < 0 || i == full_at) continue;
            for (int j = 0; j < n_len * n_dep; j++) grid[j] = (double)methods[i].agree[j] / trials;
            snprintf(path, sizeof path, "%s/agree_%s.svg", svg_dir, methods[i].name);
            for (char *p = path + strlen(svg_dir) + 1; *p; p++)
                if (*p == '@' || *p == '+') *p = '_';
            snprintf(title, sizeof title, "%.48s: agreement with full, %s, %s prefill, %d trials per cell",
                     methods[i].name, subq_recall_task_name(rp.task), prefill, trials);
            if (cli_svg_heatmap(path, title, "needle depth", "prompt length (tokens)", lengths, n_len, depths, n_dep,
                                grid, &err))
                rc = cli_error(cmd, "%s", err.msg);
        }
        if (rc) goto done;
    }
    if (json) {
        printf("{\"model\": ");
        cli_json_string(stdout, mo.model, strlen(mo.model));
        printf(", \"task\": \"%s\", \"prefill\": \"%s\", \"trials\": %d, \"seed\": %llu, \"sink\": %d, \"tail\": %d, "
               "\"lengths\": [",
               subq_recall_task_name(rp.task), prefill, trials, (unsigned long long)rp.seed, so.plan.n_sink,
               so.plan.n_tail);
        for (int l = 0; l < n_len; l++) printf("%s%d", l ? ", " : "", lengths[l]);
        printf("], \"depths\": [");
        for (int d = 0; d < n_dep; d++) printf("%s%g", d ? ", " : "", depths[d]);
        printf("],\n \"methods\": [");
        for (int i = 0; i < n_methods; i++) {
            const method *me = &methods[i];
            double total = 0;
            printf("%s\n  {\"method\": ", i ? "," : "");
            cli_json_string(stdout, me->name, strlen(me->name));
            json_grid("accuracy", me->score, NULL, n_len, n_dep, trials);
            int agree = 0;
            for (int j = 0; j < n_len * n_dep; j++) total += me->score[j], agree += me->agree[j];
            if (full_at >= 0) json_grid("agreement", NULL, me->agree, n_len, n_dep, trials);
            printf(", \"exact\": [");
            for (int l = 0; l < n_len; l++) {
                printf("%s[", l ? ", " : "");
                for (int d = 0; d < n_dep; d++) printf("%s%d", d ? ", " : "", me->exact[l * n_dep + d]);
                printf("]");
            }
            printf("], \"overall\": %.4f", total / ((double)n_len * n_dep * trials));
            if (full_at >= 0) printf(", \"overall_agreement\": %.4f", agree / ((double)n_len * n_dep * trials));
            printf("}");
        }
        printf("]}\n");
    } else {
        printf("%s recall, %d trials per cell, %s prefill, sink %d, tail %d\n", subq_recall_task_name(rp.task), trials,
               prefill, so.plan.n_sink, so.plan.n_tail);
        for (int i = 0; i < n_methods; i++) {
            const method *me = &methods[i];
            print_grid("share of the answer values recalled (1 = every value exact)", me->name, me->score, NULL,
                       lengths, n_len, depths, n_dep, trials);
            if (full_at >= 0 && i != full_at)
                print_grid("share of prompts answered with full attention's numbers", me->name, NULL, me->agree,
                           lengths, n_len, depths, n_dep, trials);
        }
    }
done:
    subq_recall_free(rec);
    for (int i = 0; i < n_methods; i++) {
        free(methods[i].score);
        free(methods[i].exact);
        free(methods[i].agree);
    }
    free(hay);
    free(logits);
    subq_context_free(c_pre);
    subq_context_free(c);
    cli_sparse_free(&so);
    subq_model_free(m);
    return rc;
}
