/* subq bench: prefill and decode speed of a model, measured side by side
 * with the machine's memory read bandwidth, OpenBLAS sgemm rate and int8
 * peak, and
 * decode with full vs sparse attention at long contexts. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "bench_prefill.h"
#include "cli.h"
#include "subq_lab.h"
#include "cli_sparse.h"

static const char *help =
    "usage: subq bench -m MODEL [--ctx 512,4096] [--attn full,exact,hnsw] [options]\n"
    "Prefill tok/s (one batch) and decode tok/s at each context, with the machine's\n"
    "measured read bandwidth (a fresh buffer, and the filled KV cache itself), sgemm rate\n"
    "and int8 peak (the kernel level's integer instructions on registers) in the same run,\n"
    "and the fractions of the bounds they give;\n"
    "with --attn, decode with each attention kind side by side (speed-up vs full).\n"
    "Decode contexts are filled with synthetic values (a real prefill of 100K tokens\n"
    "takes hours here): random keys and values, on which a scan's speed does not depend,\n"
    "and search keys in clusters, as trained ones lie, on which a graph index's does\n"
    "(--prefill-ctx measures decode at a real context).\n"
    "The kernels' instruction set is printed; SUBQ_ISA=scalar|avx2|avx512 caps it.\n\n"
    "  -m, --model FILE     GGUF model (required)\n"
    "  -t, --threads N      threads (default: all cores)\n"
    "  --ctx LIST           decode contexts, comma separated (default 512,4096)\n"
    "  --attn LIST          attention kinds: full and any selector (default full)\n"
    "  --prefill N          prefill batch size in tokens (default 512; 0 = skip)\n"
    "  -n, --n-decode N     decode steps timed per context (default 16)\n"
    "  --mmap, --no-mmap    map the model file / read it into 2 MiB pages (default: read in\n"
    "                       when it takes at most half the available memory)\n"
    "  --kv TYPE            KV cache type: f32, f16, q8_0, q4_0 (default f16, as llama-bench;\n"
    "                       the other commands default to f32)\n"
    "  --bw-mib N           buffer for the bandwidth test in MiB (default 1024); it runs\n"
    "                       at the start and before and after each decode row, whose\n"
    "                       bound uses the larger of its two\n"
    "  -s, --seed N         seed of the synthetic KV fill and the token ids (default 7)\n"
    "  --json               print one JSON object on stdout\n"
    "  --kv-cold            with --kv-file: drop the file's pages from memory before the timed\n"
    "                       decode steps (they read from disk, as after a reboot)\n"
    "  --contend N          measure everything again beside N busy threads (a competing load:\n"
    "                       one per core is what a laptop or shared server often has), and\n"
    "                       print both with each figure's slowdown (JSON: \"contended\"); with\n"
    "                       --prefill-ctx: the prompts and decode steps run beside them, once\n"
    "                       (JSON: \"busy_threads\"; run without it for the quiet figures)\n"
    "  --prefill-ctx LIST   instead: real prefill of prompts of these lengths (dense, and with\n"
    "                       each sparse kind of --attn its batched sparse prefill), where the\n"
    "                       time goes, the growth exponent a (time ~ N^a), then -n decode\n"
    "                       steps at that real context; -b sets the batch\n"
    "  --prefill-text FILE  prompt tokens for --prefill-ctx from this text (repeated when\n"
    "                       short; default: random ids)\n"
    "  --prefill-svg FILE   with --prefill-ctx: a log-log chart of prefill time against\n"
    "                       length, with the slopes of N and N^2 drawn (replaced if present)\n\n" CLI_SPARSE_OPTS_HELP;

#define MAX_LIST 16

/* The bandwidth bound of a decode row: a step must read at least
 *   bytes = weights (decode_bytes: every matrix and norm once, one embedding row)
 *         + KV rows attended (subq_context_decode_kv_bytes: the whole cache of
 *           each full-attention layer; sinks + tail + K rows of each sparse one;
 *           keys and values, in the KV type)
 *         + what the selectors read (exact: the search keys scanned; hnsw/faiss:
 *           distances x vector bytes, an estimate; from their stats),
 * averaged over the timed steps, so it cannot run faster than
 * bound tok/s = read bandwidth / bytes, the bandwidth measured right before
 * and right after the row (the larger: the host's other tenants move it by
 * up to 2x within minutes, so one probe at the start does not describe a
 * row run ten minutes later);
 * frac_bound = measured tok/s / bound tok/s. The same against the rate the
 * filled KV cache itself reads at (subq_context_kv_read_gbs, also before and
 * after): bandwidth depends on where pages lie, and the cache is most of the
 * bytes at long contexts (bound_cache_tok_s, frac_bound_cache). */
typedef struct decode_result {
    int ctx, attn;            /* attn: -1 = full, else subq_selector_kind */
    bench_decode_row m;       /* the measurement (bench_model.c) */
    double step_bytes;        /* bytes read per step (see above) */
    double bw;                /* read bandwidth around the row, GB/s */
    double vs_full, bound, cache_bound;       /* tok/s over full's at this context; bounds in tok/s */
} decode_result;

static const char *attn_name(int attn) { return attn < 0 ? "full" : subq_selector_name((subq_selector_kind)attn); }

/* What one pass of measurements needs, and what it gives under one load. */
typedef struct bench_state {
    const char *cmd;
    cli_sparse_opts *so;
    subq_context *c;
    subq_model_info info;
    int nt, n_prefill, n_decode, bw_mib, json, kv_cold;
    const int *ctx, *attn;
    int n_ctx, n_attn;
    uint64_t seed, rng;
    float *logits;
    int32_t *toks;
    double wbytes;            /* weight bytes a decode step reads */
    double int8_peak;         /* G op/s of the kernel level's integer unit (0: none measured) */
} bench_state;

typedef struct load_result {
    int busy;                 /* competing threads running beside the measurements */
    double t_prefill, prefill_gflops;
    decode_result res[MAX_LIST * MAX_LIST];
    int n_res;
} load_result;

/* Prefill (full attention), then every decode row. 0, or the exit status
 * after a one-line error. */
static int measure(bench_state *b, load_result *L) {
    subq_context *c = b->c;
    subq_error err = {0};
    if (b->n_prefill > 0) {
        if (!b->json) fprintf(stderr, "subq bench: prefill %d tokens...\n", b->n_prefill);
        subq_context_reset(c);
        subq_context_clear_plan(c);
        bench_split sp;
        if (bench_prefill(c, b->toks, b->n_prefill, b->logits, &sp, &err)) return cli_error(b->cmd, "%s", err.msg);
        L->t_prefill = sp.seconds;
        L->prefill_gflops = bench_prefill_flops(&b->info, b->n_prefill) / L->t_prefill / 1e9;
    }
    L->n_res = 0;
    for (int ci = 0; ci < b->n_ctx; ci++) {
        for (int ai = 0; ai < b->n_attn; ai++) {
            decode_result *r = &L->res[L->n_res];
            memset(r, 0, sizeof *r);
            r->ctx = b->ctx[ci];
            r->attn = b->attn[ai];
            if (!b->json) fprintf(stderr, "subq bench: decode at context %d, %s attention...\n", r->ctx, attn_name(r->attn));
            subq_context_reset(c);
            subq_context_clear_plan(c);
            if (r->attn >= 0 && !cli_set_plan(b->cmd, b->so, c, (subq_selector_kind)r->attn, b->so->plan.top_k, 0))
                return 1;
            const double bw_before = bench_read_bandwidth((size_t)b->bw_mib << 20, b->nt, 3);
            if (bench_decode_at(c, r->ctx, b->n_decode, b->kv_cold, b->seed, &b->rng, b->logits, &r->m, &err))
                return cli_error(b->cmd, "%s", err.msg);
            r->step_bytes = b->wbytes + r->m.kv_read + r->m.select_read;
            const double bw_after = bench_read_bandwidth((size_t)b->bw_mib << 20, b->nt, 3);
            r->bw = bw_before > bw_after ? bw_before : bw_after;
            L->n_res++;
        }
    }
    subq_context_clear_plan(c);
    for (int i = 0; i < L->n_res; i++) {
        decode_result *r = &L->res[i];
        for (int j = 0; j < L->n_res; j++)
            if (L->res[j].ctx == r->ctx && L->res[j].attn < 0 && L->res[j].m.tok_s > 0)
                r->vs_full = r->m.tok_s / L->res[j].m.tok_s;
        r->bound = r->step_bytes > 0 ? r->bw * 1e9 / r->step_bytes : 0;
        r->cache_bound = r->step_bytes > 0 && r->m.cache_bw > 0 ? r->m.cache_bw * 1e9 / r->step_bytes : 0;
    }
    return 0;
}

/* "prefill": {...}, "decode": [...] of one load */
static void print_json_load(const bench_state *b, const load_result *L, double sgemm) {
    const int np = b->n_prefill;
    printf(" \"prefill\": {\"n_tokens\": %d, \"seconds\": %.4f, \"tok_s\": %.3f, \"gflops\": %.3f, \"frac_sgemm\": %.4f, "
           "\"frac_int8_peak\": %.4f},\n",
           np, L->t_prefill, np > 0 ? np / L->t_prefill : 0.0, L->prefill_gflops,
           sgemm > 0 ? L->prefill_gflops / sgemm : 0.0, b->int8_peak > 0 ? L->prefill_gflops / b->int8_peak : 0.0);
    printf(" \"decode\": [");
    for (int i = 0; i < L->n_res; i++) {
        const decode_result *r = &L->res[i];
        const double w = b->wbytes;
        printf("%s\n  {\"ctx\": %d, \"attn\": \"%s\", \"decode_tok_s\": %.3f, \"speedup_vs_full\": %.3f, "
               "\"attn_ms\": %.3f, \"select_ms\": %.3f, \"insert_ms\": %.4f, \"fill_s\": %.2f, "
               "\"weight_gbs\": %.3f, \"frac_bw_weights\": %.4f, \"kv_read_bytes\": %.0f, "
               "\"select_read_bytes\": %.0f, \"bytes_per_step\": %.0f, \"bound_tok_s\": %.3f, "
               "\"frac_bound\": %.4f, \"read_bw_gbs\": %.3f, \"kv_bytes\": %.0f, \"index_bytes\": %.0f, "
               "\"sync_s\": %.2f, \"kv_fill_s\": %.2f, \"rss_anon_bytes\": %.0f",
               i ? "," : "", r->ctx, attn_name(r->attn), r->m.tok_s, r->vs_full, r->m.attn_ms, r->m.select_ms, r->m.insert_ms,
               r->m.fill_s, w * r->m.tok_s / 1e9, r->bw > 0 ? w * r->m.tok_s / 1e9 / r->bw : 0, r->m.kv_read, r->m.select_read,
               r->step_bytes, r->bound, r->bound > 0 ? r->m.tok_s / r->bound : 0, r->bw, r->m.kv_bytes, r->m.index_bytes, r->m.sync_s, r->m.kv_fill_s, r->m.rss_anon);
        /* null where the cache was too small to time (subq_context_kv_read_gbs) */
        const int timed = r->cache_bound > 0;
        printf(", \"cache_bw_gbs\": ");
        cli_json_num(stdout, timed ? r->m.cache_bw : NAN);
        printf(", \"bound_cache_tok_s\": ");
        cli_json_num(stdout, timed ? r->cache_bound : NAN);
        printf(", \"frac_bound_cache\": ");
        cli_json_num(stdout, timed ? r->m.tok_s / r->cache_bound : NAN);
        printf("}");
    }
    printf("]");
}

/* The prefill line and the decode table of one load; beside a quiet run
 * (quiet != NULL), each figure's slowdown against it. */
static void print_text_load(const bench_state *b, const load_result *L, double sgemm, const load_result *quiet) {
    if (b->n_prefill > 0) {
        printf("prefill %d tokens: %.2f s, %.1f tok/s, %.1f G op/s = %.0f%% of sgemm", b->n_prefill, L->t_prefill,
               b->n_prefill / L->t_prefill, L->prefill_gflops, 100 * L->prefill_gflops / sgemm);
        if (b->int8_peak > 0) printf(", %.0f%% of the int8 peak", 100 * L->prefill_gflops / b->int8_peak);
        if (quiet && L != quiet) printf(", %.2fx the quiet time", L->t_prefill / quiet->t_prefill);
        printf("\n");
    }
    printf("%8s %-7s %9s %8s %9s %9s %9s %9s %8s %9s %8s %9s %8s %10s %10s %8s %8s %9s%s\n", "ctx", "attn", "tok/s",
           "vs full", "attn ms", "select ms", "insert ms", "MB/step", "bw GB/s", "bound", "% bound", "cache bw",
           "% cache", "KV MiB", "index MiB", "fill s", "sync s", "anon MiB", quiet && L != quiet ? "  vs quiet" : "");
    for (int i = 0; i < L->n_res; i++) {
        const decode_result *r = &L->res[i];
        char cache_bw[16] = "-", cache_pct[16] = "-"; /* small caches: not measured */
        if (r->cache_bound > 0) {
            snprintf(cache_bw, sizeof cache_bw, "%.1f", r->m.cache_bw);
            snprintf(cache_pct, sizeof cache_pct, "%.0f%%", 100 * r->m.tok_s / r->cache_bound);
        }
        printf("%8d %-7s %9.2f %7.2fx %9.2f %9.2f %9.3f %9.1f %8.1f %9.2f %7.0f%% %9s %8s %10.0f %10.1f %8.1f %8.1f "
               "%9.0f",
               r->ctx, attn_name(r->attn), r->m.tok_s, r->vs_full, r->m.attn_ms, r->m.select_ms, r->m.insert_ms,
               r->step_bytes / 1e6, r->bw, r->bound, r->bound > 0 ? 100 * r->m.tok_s / r->bound : 0, cache_bw,
               cache_pct, r->m.kv_bytes / 1048576.0, r->m.index_bytes / 1048576.0, r->m.fill_s, r->m.sync_s,
               r->m.rss_anon / 1048576.0);
        if (quiet && L != quiet && i < quiet->n_res && r->m.tok_s > 0)
            printf("  %7.2fx", quiet->res[i].m.tok_s / r->m.tok_s);
        printf("\n");
    }
}

int cmd_bench(int argc, char **argv) {
    const char *cmd = "bench";
    cli_model_opts mo = {.kv_type = SUBQ_KV_F16};
    cli_sparse_opts so = cli_sparse_default();
    int ctx[MAX_LIST] = {512, 4096}, n_ctx_list = 2, n_prefill = 512, n_decode = 16, bw_mib = 1024, json = 0;
    int contend = 0, kv_cold = 0;
    int attn[MAX_LIST] = {-1}, n_attn = 1;
    int prefill_ctx[MAX_LIST], n_prefill_ctx = 0;
    const char *prefill_text = NULL, *prefill_svg = NULL;
    uint64_t seed = 7;
    const char *v;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const int r = cli_common_opt(cmd, help, argc, argv, &i, &mo, &so);
        if (r == CLI_OPT_TAKEN) continue;
        if (r != CLI_OPT_NONE) return r == CLI_OPT_HELP ? 0 : 1;
        if (!strcmp(a, "--ctx")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || !cli_parse_int_list(cmd, a, v, 1, 1 << 30, MAX_LIST, ctx, &n_ctx_list)) return 1;
        } else if (!strcmp(a, "--attn")) {
            if (!(v = cli_value(cmd, argc, argv, &i))) return 1;
            n_attn = 0;
            char buf[256];
            snprintf(buf, sizeof buf, "%s", v);
            for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
                int k = strcmp(tok, "full") == 0 ? -1 : subq_selector_parse(tok);
                if ((k < 0 && strcmp(tok, "full") != 0) || n_attn >= MAX_LIST)
                    return cli_error(cmd, "--attn: unknown kind '%s' (full, exact, hnsw, faiss, quest, oracle, window)", tok);
                attn[n_attn++] = k;
            }
        } else if (!strcmp(a, "-s") || !strcmp(a, "--seed")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || !cli_parse_u64(cmd, a, v, &seed)) return 1;
        } else if (!strcmp(a, "--prefill")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || !cli_parse_int(cmd, a, v, 0, 1 << 16, &n_prefill)) return 1;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-decode")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || !cli_parse_int(cmd, a, v, 1, 1 << 20, &n_decode)) return 1;
        } else if (!strcmp(a, "--bw-mib")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || !cli_parse_int(cmd, a, v, 16, 1 << 16, &bw_mib)) return 1;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--kv-cold")) {
            kv_cold = 1;
        } else if (!strcmp(a, "--contend")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || !cli_parse_int(cmd, a, v, 1, 1024, &contend)) return 1;
        } else if (!strcmp(a, "--prefill-ctx")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || !cli_parse_int_list(cmd, a, v, 1, 1 << 30, MAX_LIST, prefill_ctx, &n_prefill_ctx))
                return 1;
        } else if (!strcmp(a, "--prefill-text")) {
            if (!(prefill_text = cli_value(cmd, argc, argv, &i))) return 1;
        } else if (!strcmp(a, "--prefill-svg")) {
            if (!(prefill_svg = cli_value(cmd, argc, argv, &i))) return 1;
        } else {
            return cli_error(cmd, "unknown option '%s' (see subq bench --help)", a);
        }
    }
    if (!cli_sparse_model_default(cmd, &so, mo.model)) return 1;
    mo.far_keys = so.plan.far_pos != SUBQ_FAR_NONE;
    if (so.complete_file || so.complete_heads)
        return cli_error(cmd, "--complete is not supported here: the KV cache is filled synthetically, without the "
                         "completion's summary; measure completion quality with subq eval");
    int any_sparse = 0;
    for (int i = 0; i < n_attn; i++) any_sparse |= attn[i] >= 0;
    for (int i = 0; i < n_attn; i++)
        if (attn[i] >= 0 && !subq_selector_available((subq_selector_kind)attn[i]))
            return cli_error(cmd, "selector '%s' is not in this build (see subq info --features)", attn_name(attn[i]));
    if ((prefill_text || prefill_svg) && !n_prefill_ctx)
        return cli_error(cmd, "--%s needs --prefill-ctx", prefill_text ? "prefill-text" : "prefill-svg");
    if (kv_cold && !mo.kv_file) return cli_error(cmd, "--kv-cold needs --kv-file");
    if (n_prefill_ctx) {
        bench_prefill_opts po = {.lengths = prefill_ctx, .n_len = n_prefill_ctx, .attn = attn, .n_attn = n_attn,
                                 .text_file = prefill_text, .svg_file = prefill_svg, .n_decode = n_decode,
                                 .contend = contend, .seed = seed, .json = json};
        int prc = bench_prefill_run(cmd, &po, &mo, &so);
        cli_sparse_free(&so);
        return prc;
    }
    int max_ctx = n_prefill;
    for (int i = 0; i < n_ctx_list; i++)
        if (ctx[i] > max_ctx) max_ctx = ctx[i];
    mo.n_ctx = max_ctx + n_decode + 2;
    subq_model *m;
    subq_context *c;
    if (!cli_load(cmd, &mo, &m, &c)) return 1;
    subq_model_info info;
    subq_model_get_info(m, &info);
    int nt = subq_context_n_threads(c), rc = 0;
    float *logits = malloc((size_t)info.n_vocab * sizeof(float));
    int32_t *toks = malloc((size_t)(n_prefill > 0 ? n_prefill : 1) * sizeof(int32_t));
    if (!logits || !toks) {
        rc = cli_error(cmd, "out of memory");
        goto done;
    }
    uint64_t rng = seed * 0x9E3779B97F4A7C15ull + 1; /* never 0 */
    for (int i = 0; i < (n_prefill > 0 ? n_prefill : 1); i++) toks[i] = bench_random_token(&rng, info.n_vocab);

    /* search projections once, for every sparse kind (a plan per kind below) */
    if (any_sparse && !cli_sparse_load(cmd, &so, m)) {
        rc = 1;
        goto done;
    }
    so.plan.sparse_prefill = SUBQ_PREFILL_SPARSE;

    /* machine limits, measured now so the ratios below compare like with like */
    if (!json) fprintf(stderr, "subq bench: measuring memory bandwidth, sgemm and the int8 peak (%d threads)...\n", nt);
    double bw = bench_read_bandwidth((size_t)bw_mib << 20, nt, 5);
    double sgemm = bench_sgemm_gflops(512, info.n_ff, info.n_embd, nt, 3);
    double int8_peak = bench_int8_peak_gops(subq_isa_name(), nt, 3);
    bench_state b = {.int8_peak = int8_peak,
                     .cmd = cmd, .so = &so, .c = c, .info = info, .nt = nt, .n_prefill = n_prefill,
                     .n_decode = n_decode, .bw_mib = bw_mib, .json = json, .ctx = ctx, .n_ctx = n_ctx_list,
                     .attn = attn, .n_attn = n_attn, .seed = seed, .rng = rng, .logits = logits, .toks = toks, .kv_cold = kv_cold,
                     .wbytes = (double)info.decode_bytes};
    load_result loads[2] = {{.busy = 0}, {.busy = contend}};
    const int n_loads = contend > 0 ? 2 : 1;
    for (int li = 0; li < n_loads && !rc; li++) {
        bench_contend *load = NULL;
        if (loads[li].busy > 0) {
            if (!json) fprintf(stderr, "subq bench: again beside %d busy threads...\n", loads[li].busy);
            if (!(load = bench_contend_start(loads[li].busy))) {
                rc = cli_error(cmd, "cannot start %d busy threads", loads[li].busy);
                break;
            }
        }
        rc = measure(&b, &loads[li]);
        bench_contend_stop(load);
    }
    if (rc) goto done;

    if (json) {
        printf("{\"model\": ");
        cli_json_string(stdout, mo.model, strlen(mo.model));
        printf(", \"arch\": \"%s\", \"threads\": %d, \"kv_type\": \"%s\", \"kv_fill\": \"synthetic\",\n",
               info.arch, nt, subq_kv_type_name(mo.kv_type));
        printf(" \"machine\": {\"isa\": \"%s\", \"read_bw_gbs\": %.3f, \"sgemm_gflops\": %.3f, \"int8_peak_gops\": %.3f},\n",
               subq_isa_name(), bw, sgemm, int8_peak);
        printf(" \"topk\": %d, \"sink\": %d, \"tail\": %d,\n", so.plan.top_k, so.plan.n_sink, so.plan.n_tail);
        printf(" \"decode_weight_bytes\": %.0f,\n", b.wbytes);
        print_json_load(&b, &loads[0], sgemm);
        if (n_loads > 1) {
            printf(",\n \"contended\": {\"busy_threads\": %d,\n", contend);
            print_json_load(&b, &loads[1], sgemm);
            printf("}");
        }
        printf("}\n");
    } else {
        printf("model %s (%s), %d threads, KV %s\n", mo.model, info.arch, nt, subq_kv_type_name(mo.kv_type));
        printf("machine: kernels %s, read bandwidth %.2f GB/s, sgemm %.1f GFLOP/s, int8 peak %.0f G op/s "
               "(its GEMM's instructions on registers)\n", subq_isa_name(), bw, sgemm, int8_peak);
        printf("decode reads %.1f MB of weights per token; KV cache and indexes filled synthetically\n", b.wbytes / 1e6);
        printf("bound: read bandwidth around the row (bw) / bytes a step reads (weights + KV rows attended + selector "
               "reads); %% cache: the same with the filled KV cache's own read rate\n");
        for (int li = 0; li < n_loads; li++) {
            if (n_loads > 1)
                printf("\n%s\n", li == 0 ? "quiet machine:" : "beside the competing load:");
            if (li == 1) printf("(%d busy threads, as many processes on the cores as subq's own threads)\n", contend);
            print_text_load(&b, &loads[li], sgemm, n_loads > 1 ? &loads[0] : NULL);
        }
    }
done:
    free(logits);
    free(toks);
    cli_unload(m, c, &so);
    return rc;
}
