/* subq bench --prefill-ctx: real prefill of a prompt of each length (real
 * tokens, real KV cache, real index inserts) with full attention and with
 * each sparse kind's batched sparse prefill, then decode at that real
 * context; prints tok/s, where the time went and the growth exponent a of
 * time ~ N^a. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>

#include "bench.h"
#include "bench_prefill.h"
#include "cli.h"
#include "cli_svg.h"

typedef struct prefill_row {
    int n, attn; /* attn: -1 = full, else subq_selector_kind */
    double seconds, attn_s, select_s, insert_s, decode_tok_s;
    double decode_select_ms, decode_insert_ms, decode_select_read; /* a decode step's, at the real context */
    double rss_anon; /* anonymous resident bytes after the row */
    double recall;   /* --probe-check: the block scan's recall against the full scan (NAN: not checked) */
    double file_bytes; /* --kv-file: the file's size after the row (0: in memory) */
} prefill_row;

/* Prompt tokens: the text file's tokens repeated up to n (a shorter text
 * starts over), or random ids when there is no file. */
static int prompt_tokens(const char *cmd, const subq_model *m, const char *path, int n_vocab, uint64_t seed,
                         int32_t *out, int n) {
    if (!path) {
        uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1; /* never 0 */
        for (int i = 0; i < n; i++) out[i] = bench_random_token(&x, n_vocab);
        return 1;
    }
    subq_error err = {0};
    char *text = NULL;
    size_t len = 0, got = 0;
    if (subq_read_file(path, 0, &text, &len, &err)) return !cli_error(cmd, "%s", err.msg);
    /* count first: a text longer than needed gives its first n tokens */
    subq_status s = subq_tokenize(m, text, len, 1, NULL, 0, &got, &err);
    int32_t *all = s == SUBQ_ERR_RANGE ? malloc((got > 0 ? got : 1) * sizeof(int32_t)) : NULL;
    if (s == SUBQ_ERR_RANGE) s = all ? subq_tokenize(m, text, len, 1, all, got, &got, &err) : SUBQ_ERR_NOMEM;
    free(text);
    if (!s && all) memcpy(out, all, (got < (size_t)n ? got : (size_t)n) * sizeof(int32_t));
    free(all);
    if (s == SUBQ_ERR_NOMEM) return !cli_error(cmd, "out of memory");
    if (s) return !cli_error(cmd, "%s: %s", path, err.msg);
    if (got > (size_t)n) got = (size_t)n;
    if (got < 2) return !cli_error(cmd, "%s: too little text (%zu tokens)", path, got);
    for (size_t i = got; i < (size_t)n; i++) out[i] = out[1 + (i - 1) % (got - 1)]; /* repeat, BOS once */
    return 1;
}

/* Least-squares slope of log t against log n over rows[0..k). */
static double fit_exponent(const prefill_row *const *rows, int k) {
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (int i = 0; i < k; i++) {
        double x = log(rows[i]->n), y = log(rows[i]->seconds);
        sx += x, sy += y, sxx += x * x, sxy += x * y;
    }
    double den = k * sxx - sx * sx;
    return k >= 2 && den > 0 ? (k * sxy - sx * sy) / den : 0.0;
}

static const char *kind_name(int attn) { return attn < 0 ? "full" : subq_selector_name((subq_selector_kind)attn); }

/* Prefill seconds against length on log-log axes, one line per attention
 * kind, and the slopes of N and N^2 through the first row's point (a line
 * parallel to N^2 is quadratic growth). */
static int write_chart(const char *cmd, const bench_prefill_opts *o, const prefill_row *rows, int n_rows) {
    svg_chart ch = {.title = "prefill time against prompt length", .x_label = "prompt tokens",
                    .y_label = "seconds", .log_x = 1, .log_y = 1};
    for (int ai = 0; ai < o->n_attn && ch.n_series < SVG_MAX_SERIES - 2; ai++) {
        svg_series *se = &ch.series[ch.n_series++];
        se->name = kind_name(o->attn[ai]);
        for (int i = 0; i < n_rows && se->n < SVG_MAX_POINTS; i++)
            if (rows[i].attn == o->attn[ai]) se->x[se->n] = rows[i].n, se->y[se->n++] = rows[i].seconds;
    }
    for (int p = 1; p <= 2 && n_rows > 0; p++) {
        svg_series *se = &ch.series[ch.n_series++];
        se->name = p == 1 ? "slope N" : "slope N^2";
        for (int i = 0; i < n_rows && se->n < SVG_MAX_POINTS; i++)
            if (rows[i].attn == rows[0].attn)
                se->x[se->n] = rows[i].n, se->y[se->n++] = rows[0].seconds * pow((double)rows[i].n / rows[0].n, p);
    }
    subq_error err = {0};
    if (svg_write_line_chart(&ch, o->svg_file, &err)) return !cli_error(cmd, "%s", err.msg);
    return 1;
}

int bench_prefill_run(const char *cmd, bench_prefill_opts *o, const cli_model_opts *mo, cli_sparse_opts *so) {
    cli_model_opts mopt = *mo;
    int max_n = 0;
    for (int i = 0; i < o->n_len; i++) max_n = o->lengths[i] > max_n ? o->lengths[i] : max_n;
    if (mopt.n_ctx > 0 && mopt.n_ctx < max_n + o->n_decode + 1)
        return cli_error(cmd, "--prefill-ctx %d and %d decode steps need a context of %d tokens; -c is %d", max_n,
                         o->n_decode, max_n + o->n_decode + 1, mopt.n_ctx);
    if (mopt.n_ctx <= 0) mopt.n_ctx = max_n + o->n_decode + 1;
    subq_model *m;
    subq_context *c;
    if (!cli_load(cmd, &mopt, &m, &c)) return 1;
    subq_model_info info;
    subq_model_get_info(m, &info);
    int any_sparse = 0, rc = 0, n_rows = 0;
    bench_contend *load = NULL; /* --contend: the competing load, for the whole run */
    for (int i = 0; i < o->n_attn; i++) any_sparse |= o->attn[i] >= 0;
    subq_error err = {0};
    int32_t *toks = malloc((size_t)max_n * sizeof(int32_t));
    float *logits = malloc((size_t)info.n_vocab * sizeof(float));
    prefill_row *rows = calloc((size_t)o->n_len * o->n_attn, sizeof *rows);
    if (!toks || !logits || !rows) {
        rc = cli_error(cmd, "out of memory");
        goto done;
    }
    if (!prompt_tokens(cmd, m, o->text_file, info.n_vocab, o->seed, toks, max_n) ||
        (any_sparse && !cli_sparse_load(cmd, so, m))) {
        rc = 1;
        goto done;
    }
    so->plan.sparse_prefill = SUBQ_PREFILL_SPARSE;
    if (o->contend > 0 && !(load = bench_contend_start(o->contend))) {
        rc = cli_error(cmd, "cannot start %d busy threads", o->contend);
        goto done;
    }
    uint64_t rng = o->seed * 0x9E3779B97F4A7C15ull + 1; /* never 0 */
    for (int ai = 0; ai < o->n_attn; ai++) {
        for (int li = 0; li < o->n_len; li++) {
            prefill_row *r = &rows[n_rows];
            r->n = o->lengths[li];
            r->attn = o->attn[ai];
            if (!o->json)
                fprintf(stderr, "subq bench: prefill %d tokens, %s attention (batches of %d)...\n", r->n,
                        kind_name(r->attn), subq_context_n_batch(c));
            subq_context_reset(c);
            subq_context_clear_plan(c);
            if (r->attn >= 0 && !cli_set_plan(cmd, so, c, (subq_selector_kind)r->attn, so->plan.top_k, 0)) {
                rc = 1;
                goto done;
            }
            bench_split sp, per;
            subq_context_stats st0, st1;
            if (bench_prefill(c, toks, r->n, logits, &sp, &err) ||
                (o->n_decode > 0 &&
                 bench_decode_steps(c, o->n_decode, 0, &rng, logits, &r->decode_tok_s, &per, &st0, &st1, &err))) {
                rc = cli_error(cmd, "%s", err.msg);
                goto done;
            }
            r->seconds = sp.seconds;
            r->decode_select_ms = 1e3 * per.select_s;
            r->decode_insert_ms = 1e3 * per.insert_s;
            r->decode_select_read = o->n_decode > 0
                                        ? (double)(st1.select_bytes_read - st0.select_bytes_read) / o->n_decode
                                        : 0.0;
            r->attn_s = sp.attn_s;
            r->select_s = sp.select_s;
            r->insert_s = sp.insert_s;
            r->rss_anon = bench_rss_anon();
            subq_context_stats st;
            subq_context_get_stats(c, &st);
            r->recall = st.check_keys > 0 ? (double)st.check_found / (double)st.check_keys : NAN;
            struct stat fs;
            r->file_bytes = mopt.kv_file && !stat(mopt.kv_file, &fs) ? (double)fs.st_size : 0.0;
            n_rows++;
        }
    }
    bench_contend_stop(load);
    load = NULL;

    if (o->json) {
        printf("{\"model\": ");
        cli_json_string(stdout, mopt.model, strlen(mopt.model));
        printf(", \"arch\": \"%s\", \"threads\": %d, \"batch\": %d, \"kv_type\": \"%s\", \"tokens\": \"%s\", "
               "\"n_decode\": %d, \"topk\": %d, \"sink\": %d, \"tail\": %d, \"busy_threads\": %d,\n \"prefill\": [",
               info.arch, subq_context_n_threads(c), subq_context_n_batch(c),
               subq_kv_type_name(mopt.kv_type), o->text_file ? "text" : "random", o->n_decode,
               so->plan.top_k, so->plan.n_sink, so->plan.n_tail, o->contend);
    } else {
        printf("model %s (%s), %d threads, batches of %d, KV %s, %s tokens; sparse: top-%d, %d sinks, tail %d\n",
               mopt.model, info.arch, subq_context_n_threads(c), subq_context_n_batch(c),
               subq_kv_type_name(mopt.kv_type), o->text_file ? "text" : "random", so->plan.top_k,
               so->plan.n_sink, so->plan.n_tail);
        if (o->contend > 0)
            printf("beside %d busy thread%s (a competing load) throughout\n", o->contend, o->contend > 1 ? "s" : "");
        printf("%8s %-7s %9s %9s %8s %8s %9s %9s %9s %9s %10s %8s%s\n", "tokens", "attn", "seconds", "tok/s", "vs full",
               "a (prev)", "attn s", "select s", "insert s", "other s", "decode t/s", "anon MiB",
               mopt.kv_file ? " file MiB" : "");
    }
    for (int i = 0; i < n_rows; i++) {
        const prefill_row *r = &rows[i], *prev = i > 0 && rows[i - 1].attn == r->attn ? &rows[i - 1] : NULL, *full = NULL;
        for (int j = 0; j < n_rows; j++)
            if (rows[j].n == r->n && rows[j].attn < 0) full = &rows[j];
        double a = prev ? log(r->seconds / prev->seconds) / log((double)r->n / prev->n) : NAN;
        double other = r->seconds - r->attn_s - r->select_s - r->insert_s, speedup = full ? full->seconds / r->seconds : 0.0;
        if (o->json) {
            printf("%s\n  {\"n_tokens\": %d, \"attn\": \"%s\", \"seconds\": %.4f, \"tok_s\": %.3f, \"speedup_vs_full\": %.3f, "
                   "\"exponent_vs_prev\": ",
                   i ? "," : "", r->n, kind_name(r->attn), r->seconds, r->n / r->seconds, speedup);
            if (prev) printf("%.4f", a);
            else printf("null");
            printf(", \"attn_s\": %.4f, \"select_s\": %.4f, \"insert_s\": %.4f, \"other_s\": %.4f, \"decode_tok_s\": %.3f, "
                   "\"decode_select_ms\": %.4f, \"decode_insert_ms\": %.4f, \"decode_select_read_bytes\": %.0f, "
                   "\"rss_anon_bytes\": %.0f, \"kv_file_bytes\": %.0f, \"check_recall\": ",
                   r->attn_s, r->select_s, r->insert_s, other, r->decode_tok_s, r->decode_select_ms,
                   r->decode_insert_ms, r->decode_select_read, r->rss_anon, r->file_bytes);
            if (isnan(r->recall)) printf("null}");
            else printf("%.4f}", r->recall);
        } else {
            char as[16] = "-";
            if (prev) snprintf(as, sizeof as, "%.2f", a);
            printf("%8d %-7s %9.2f %9.1f %7.2fx %8s %9.2f %9.2f %9.2f %9.2f %10.2f", r->n, kind_name(r->attn),
                   r->seconds, r->n / r->seconds, speedup, as, r->attn_s, r->select_s, r->insert_s, other,
                   r->decode_tok_s);
            printf(" %8.0f", r->rss_anon / (1 << 20));
            if (r->file_bytes > 0) printf(" %8.0f", r->file_bytes / (1 << 20));
            if (!isnan(r->recall)) printf("  recall@%d vs full scan %.4f", so->plan.top_k, r->recall);
            printf("\n");
        }
    }
    if (o->json) printf("],\n \"exponent\": {");
    else printf("growth exponent a of prefill time ~ N^a (least squares over all lengths):");
    for (int ai = 0; ai < o->n_attn; ai++) {
        const prefill_row *kr[32];
        int k = 0;
        for (int i = 0; i < n_rows && k < 32; i++)
            if (rows[i].attn == o->attn[ai]) kr[k++] = &rows[i];
        double a = fit_exponent(kr, k);
        if (o->json) printf("%s\"%s\": %.4f", ai ? ", " : "", kind_name(o->attn[ai]), a);
        else printf(" %s %.2f", kind_name(o->attn[ai]), a);
    }
    printf(o->json ? "}}\n" : "\n");
    if (o->svg_file && !write_chart(cmd, o, rows, n_rows)) rc = 1;
    if (!o->json)
        printf("attn s: attention (softmax, Q K^T, P V); select s: index queries; insert s: index inserts;\n"
               "other s: the rest (weight matrices, norms, rope); decode t/s: %d steps at the real context\n",
               o->n_decode);
done:
    bench_contend_stop(load);
    free(toks);
    free(logits);
    free(rows);
    subq_context_free(c);
    subq_model_free(m);
    return rc;
}
