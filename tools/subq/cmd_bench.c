/* subq bench: prefill and decode speed of a model, measured side by side
 * with the machine's memory read bandwidth and OpenBLAS sgemm rate. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "base/timer.h"
#include "bench/bench.h"
#include "cli.h"
#include "model/context.h"

static const char *help =
    "usage: subq bench -m MODEL [--ctx 512,4096] [options]\n"
    "Prefill tok/s (one batch) and decode tok/s at each context, with the machine's\n"
    "measured read bandwidth and sgemm rate in the same run and the fractions achieved.\n"
    "Decode contexts are filled with synthetic keys/values (speed does not depend on them).\n\n"
    "  -m, --model FILE     GGUF model (required)\n"
    "  -t, --threads N      threads (default: all cores)\n"
    "  --ctx LIST           decode contexts, comma separated (default 512,4096)\n"
    "  --prefill N          prefill batch size in tokens (default 512; 0 = skip)\n"
    "  -n, --n-decode N     decode steps timed per context (default 16)\n"
    "  --kv f32|f16         KV cache type (default f32)\n"
    "  --bw-mib N           buffer for the bandwidth test in MiB (default 1024)\n"
    "  --json               print one JSON object on stdout\n";

#define MAX_CTX 16

static int parse_ctx_list(const char *cmd, const char *s, int *ctx, int *n) {
    *n = 0;
    for (const char *p = s; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > (1 << 30) || *n >= MAX_CTX) {
            cli_error(cmd, "--ctx expects up to %d comma-separated positive integers, got '%s'", MAX_CTX, s);
            return 0;
        }
        ctx[(*n)++] = (int)v;
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') {
            cli_error(cmd, "--ctx: cannot parse '%s'", s);
            return 0;
        }
    }
    return *n > 0;
}

/* Bytes a one-token decode step reads from the weights: every layer matrix
 * and norm, the output matrix, and one embedding row. */
static double decode_weight_bytes(const subq_model *m) {
    double b = (double)m->weight_bytes;
    int tied = m->output.data == m->token_embd.data;
    double embd = (double)m->token_embd.row_bytes * (double)m->token_embd.rows;
    if (!tied) b -= embd; /* only one row of the embedding is read */
    return b + (double)m->token_embd.row_bytes;
}

int cmd_bench(int argc, char **argv) {
    const char *cmd = "bench";
    cli_model_opts mo = {0};
    int ctx[MAX_CTX] = {512, 4096}, n_ctx_list = 2, n_prefill = 512, n_decode = 16, bw_mib = 1024, json = 0;
    const char *v;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int r = cli_parse_model_opt(cmd, argc, argv, &i, &mo);
        if (r < 0) return 1;
        if (r > 0) continue;
        if (cli_is_help(a)) {
            fputs(help, stdout);
            return 0;
        } else if (!strcmp(a, "--ctx")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || !parse_ctx_list(cmd, v, ctx, &n_ctx_list)) return 1;
        } else if (!strcmp(a, "--prefill")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || !cli_parse_int(cmd, a, v, 0, 1 << 16, &n_prefill)) return 1;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-decode")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || !cli_parse_int(cmd, a, v, 1, 1 << 20, &n_decode)) return 1;
        } else if (!strcmp(a, "--bw-mib")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || !cli_parse_int(cmd, a, v, 16, 1 << 16, &bw_mib)) return 1;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else {
            return cli_error(cmd, "unknown option '%s' (see subq bench --help)", a);
        }
    }
    int max_ctx = n_prefill;
    for (int i = 0; i < n_ctx_list; i++)
        if (ctx[i] > max_ctx) max_ctx = ctx[i];
    mo.n_ctx = max_ctx + n_decode + 1;
    subq_model *m;
    subq_context *c;
    if (!cli_load(cmd, &mo, &m, &c)) return 1;
    const model_hparams *hp = &m->hp;
    int nt = c->n_threads, rc = 0;
    subq_error err = {0};
    float *logits = malloc((size_t)hp->n_vocab * sizeof(float));
    int32_t *toks = malloc((size_t)(n_prefill > 0 ? n_prefill : 1) * sizeof(int32_t));
    if (!logits || !toks) {
        rc = cli_error(cmd, "out of memory");
        goto done;
    }
    uint64_t rng = rng_seed(7);
    for (int i = 0; i < n_prefill; i++) toks[i] = (int32_t)(rng_next_u64(&rng) % (uint64_t)hp->n_vocab);

    /* machine limits, measured now so the ratios below compare like with like */
    if (!json) fprintf(stderr, "subq bench: measuring memory bandwidth and sgemm (%d threads)...\n", nt);
    double bw = bench_read_bandwidth((size_t)bw_mib << 20, nt, 5);
    double sgemm = bench_sgemm_gflops(512, hp->n_ff, hp->n_embd, nt, 3);

    /* prefill: flops = 2 * (layer matrix params) * T + attention 2 * 2 * (T^2/2) * n_head * head_dim * L */
    double t_prefill = 0, prefill_gflops = 0;
    if (n_prefill > 0) {
        if (!json) fprintf(stderr, "subq bench: prefill %d tokens...\n", n_prefill);
        subq_context_reset(c);
        double t0 = time_now_s();
        if (subq_decode(c, toks, n_prefill, logits, 0, &err)) {
            rc = cli_error(cmd, "%s", err.msg);
            goto done;
        }
        t_prefill = time_now_s() - t0;
        double layer_params = 0;
        for (int l = 0; l < hp->n_layer; l++) {
            const layer_weights *L = &m->layers[l];
            const matrix *mats[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
            for (int j = 0; j < 7; j++) layer_params += (double)mats[j]->rows * (double)mats[j]->cols;
        }
        double T = n_prefill;
        double flops = 2.0 * layer_params * T + 2.0 * T * T * hp->n_head * hp->head_dim * hp->n_layer +
                       2.0 * (double)m->output.rows * m->output.cols;
        prefill_gflops = flops / t_prefill / 1e9;
    }

    double wbytes = decode_weight_bytes(m);
    double kv_per_tok = 2.0 * hp->n_layer * hp->n_head_kv * hp->head_dim * (double)c->kv.elem_size;
    double tok_s[MAX_CTX];
    for (int i = 0; i < n_ctx_list; i++) {
        if (!json) fprintf(stderr, "subq bench: decode at context %d...\n", ctx[i]);
        subq_context_reset(c);
        if (bench_fill_kv(c, ctx[i], 11, &err)) {
            rc = cli_error(cmd, "%s", err.msg);
            goto done;
        }
        int32_t tok = toks[0];
        /* one untimed step warms caches and thread pools */
        if (subq_decode(c, &tok, 1, logits, 0, &err)) {
            rc = cli_error(cmd, "%s", err.msg);
            goto done;
        }
        double t0 = time_now_s();
        for (int s = 0; s < n_decode; s++) {
            tok = (int32_t)(rng_next_u64(&rng) % (uint64_t)hp->n_vocab);
            if (subq_decode(c, &tok, 1, logits, 0, &err)) {
                rc = cli_error(cmd, "%s", err.msg);
                goto done;
            }
        }
        tok_s[i] = n_decode / (time_now_s() - t0);
    }

    if (json) {
        printf("{\"model\": ");
        cli_json_string(stdout, mo.model, strlen(mo.model));
        printf(", \"arch\": \"%s\", \"threads\": %d, \"kv_type\": \"%s\", \"kv_fill\": \"synthetic\",\n",
               model_arch_name(hp->arch), nt, mo.kv_type == SUBQ_KV_F16 ? "f16" : "f32");
        printf(" \"machine\": {\"read_bw_gbs\": %.3f, \"sgemm_gflops\": %.3f},\n", bw, sgemm);
        printf(" \"prefill\": {\"n_tokens\": %d, \"seconds\": %.4f, \"tok_s\": %.3f, \"gflops\": %.3f, "
               "\"frac_sgemm\": %.4f},\n",
               n_prefill, t_prefill, n_prefill > 0 ? n_prefill / t_prefill : 0.0, prefill_gflops,
               sgemm > 0 ? prefill_gflops / sgemm : 0.0);
        printf(" \"decode_weight_bytes\": %.0f,\n \"decode\": [", wbytes);
        for (int i = 0; i < n_ctx_list; i++) {
            double kvb = kv_per_tok * (ctx[i] + 1);
            printf("%s\n  {\"ctx\": %d, \"decode_tok_s\": %.3f, \"weight_gbs\": %.3f, \"frac_bw_weights\": %.4f, "
                   "\"kv_bytes\": %.0f, \"total_gbs\": %.3f, \"frac_bw_total\": %.4f}",
                   i ? "," : "", ctx[i], tok_s[i], wbytes * tok_s[i] / 1e9, bw > 0 ? wbytes * tok_s[i] / 1e9 / bw : 0,
                   kvb, (wbytes + kvb) * tok_s[i] / 1e9, bw > 0 ? (wbytes + kvb) * tok_s[i] / 1e9 / bw : 0);
        }
        printf("]}\n");
    } else {
        printf("model %s (%s), %d threads, KV %s\n", mo.model, model_arch_name(hp->arch), nt,
               mo.kv_type == SUBQ_KV_F16 ? "f16" : "f32");
        printf("machine: read bandwidth %.2f GB/s, sgemm %.1f GFLOP/s\n", bw, sgemm);
        if (n_prefill > 0)
            printf("prefill %d tokens: %.2f s, %.1f tok/s, %.1f GFLOP/s = %.0f%% of sgemm\n", n_prefill, t_prefill,
                   n_prefill / t_prefill, prefill_gflops, 100 * prefill_gflops / sgemm);
        printf("decode reads %.1f MB of weights per token; KV cache filled synthetically\n", wbytes / 1e6);
        printf("%8s %10s %12s %10s %14s\n", "ctx", "tok/s", "weights GB/s", "% of bw", "+KV % of bw");
        for (int i = 0; i < n_ctx_list; i++) {
            double kvb = kv_per_tok * (ctx[i] + 1);
            printf("%8d %10.2f %12.2f %9.0f%% %13.0f%%\n", ctx[i], tok_s[i], wbytes * tok_s[i] / 1e9,
                   100 * wbytes * tok_s[i] / 1e9 / bw, 100 * (wbytes + kvb) * tok_s[i] / 1e9 / bw);
        }
    }
done:
    free(logits);
    free(toks);
    subq_context_free(c);
    subq_model_free(m);
    return rc;
}
