/* subq perplexity: llama.cpp-compatible perplexity of a text file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "progress.h"
#include "cli.h"
#include "subq_lab.h"
#include "cli_sparse.h"

static const char *help =
    "usage: subq perplexity -m MODEL -f FILE [options]\n"
    "Perplexity as llama.cpp computes it: BOS + whole-text tokens, chunks of -c tokens\n"
    "whose first token is replaced by BOS, the second half of each chunk scored. Sparse\n"
    "layers retrieve for every position as decode does (teacher forcing), or with\n"
    "--sparse-prefill as a sparse prompt runs (batches of -b tokens, each token\n"
    "retrieving from the batches before its own).\n\n" CLI_MODEL_OPTS_HELP
    "  -f, --file FILE      UTF-8 text to score (required)\n"
    "  --chunks N           score at most N chunks (default: all)\n"
    "  --window W           score the same tokens through windows of W tokens (W divides -c),\n"
    "                       half a window apart, each scoring its second half: the context\n"
    "                       of -c against a model that sees W (e.g. -c 16384 --window 4096)\n"
    "  --json               print one JSON object on stdout instead of the text report\n"
    "\n" CLI_SPARSE_OPTS_HELP;

typedef struct ppl_print {
    int json;
    progress bar;
} ppl_print;

static int on_chunk(void *user, int chunk, int n_chunks, const subq_ppl_result *r) {
    ppl_print *pp = user;
    if (pp->json) {
        char extra[64];
        snprintf(extra, sizeof extra, "ppl %.4f", r->ppl);
        progress_update(&pp->bar, chunk + 1, extra);
    } else {
        printf("[%d]%.4f,", chunk + 1, r->ppl);
        if (chunk + 1 == n_chunks) printf("\n");
        fflush(stdout);
    }
    return 0;
}

int cmd_perplexity(int argc, char **argv) {
    const char *cmd = "perplexity";
    cli_model_opts mo = {0};
    cli_sparse_opts so = cli_sparse_default();
    const char *file = NULL;
    int max_chunks = 0, json = 0, window = 0;
    mo.n_ctx = 512;
    const cli_flag flags[] = {
        CLI_STRING("-f", "--file", &file),
        CLI_INT(NULL, "--chunks", &max_chunks, 0, 1 << 30),
        CLI_INT(NULL, "--window", &window, 4, 1 << 30),
        CLI_SET(NULL, "--json", &json),
    };
    int rc;
    if (!cli_parse_command(cmd, help, argc, argv, &mo, &so, flags, sizeof flags / sizeof flags[0], &rc)) return rc;
    if (!file) return cli_error(cmd, "no text given; use -f FILE");
    subq_error err = {0};
    char *text;
    size_t len;
    if (subq_read_file(file, 0, &text, &len, &err)) return cli_error(cmd, "%s", err.msg);
    if (len == 0) {
        free(text);
        return cli_error(cmd, "%s is empty; perplexity needs text", file);
    }
    subq_model *m = NULL;
    subq_context *c = NULL;
    int32_t *toks = NULL;
    size_t n_toks = 0;
    rc = 0;
    /* teacher forcing: every position retrieves as in decode; with
     * --sparse-prefill each chunk is scored as a sparse prompt runs */
    if (so.plan.sparse_prefill != SUBQ_PREFILL_SPARSE) so.plan.sparse_prefill = SUBQ_PREFILL_TOKENWISE;
    mo.far_keys = so.plan.far_pos != SUBQ_FAR_NONE;
    if (!cli_sparse_model_default(cmd, &so, mo.model) || !cli_load(cmd, &mo, &m, &c) ||
        !cli_apply_sparse(cmd, &so, m, c)) {
        rc = 1;
        goto done;
    }
    if (cli_tokenize(m, text, len, 1, 0, &toks, &n_toks, &err)) {
        rc = cli_error(cmd, "%s: %s", file, err.msg);
        goto done;
    }
    ppl_print pp = {.json = json};
    int n_chunks = (int)(n_toks / (size_t)mo.n_ctx);
    if (max_chunks > 0 && n_chunks > max_chunks) n_chunks = max_chunks;
    if (n_chunks == 0) {
        rc = cli_error(cmd, "%s has %zu tokens, fewer than one chunk of %d; use a smaller -c", file, n_toks, mo.n_ctx);
        goto done;
    }
    progress_begin(&pp.bar, "perplexity", n_chunks);
    if (!json)
        fprintf(stderr, "subq perplexity: %zu tokens, %d chunks of %d, scoring %d tokens per chunk%s\n", n_toks,
                n_chunks, mo.n_ctx, mo.n_ctx - 1 - mo.n_ctx / 2,
                window && window < mo.n_ctx ? " through windows of --window tokens" : "");
    subq_ppl_result res;
    double t0 = cli_now_s();
    subq_status s = subq_perplexity(c, toks, n_toks, mo.n_ctx, window, max_chunks, on_chunk, &pp, &res, NULL, &err);
    double el = cli_now_s() - t0;
    progress_end(&pp.bar);
    if (s) {
        rc = cli_error(cmd, "%s", err.msg);
        goto done;
    }
    if (json) {
        printf("{\"ppl\": ");
        cli_json_num(stdout, res.ppl);
        printf(", \"ppl_stderr\": ");
        cli_json_num(stdout, res.ppl_stderr);
        printf(", \"nll_mean\": ");
        cli_json_num(stdout, res.nll_mean);
        printf(", \"n_chunks\": %d, \"n_ctx\": %d, \"window\": %d, \"n_tokens_scored\": %lld, \"n_tokens_text\": %zu, "
               "\"seconds\": ", res.n_chunks, mo.n_ctx, window ? window : mo.n_ctx, (long long)res.n_scored, n_toks);
        cli_json_num(stdout, el);
        printf("}\n");
    } else {
        printf("Final estimate: PPL = %.4f +/- %.5f\n", res.ppl, res.ppl_stderr);
        fprintf(stderr, "subq perplexity: %.2f s, %.1f tok/s\n", el, (double)res.n_chunks * mo.n_ctx / (el + 1e-12));
    }
done:
    free(toks);
    free(text);
    cli_unload(m, c, &so);
    return rc;
}
