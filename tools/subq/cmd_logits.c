/* subq logits: raw logits of a token sequence, for comparing against
 * reference implementations (prefill, or prefill + token-by-token decode). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_sparse.h"

static const char *help =
    "usage: subq logits -m MODEL --tokens \"ID ID ...\" -o OUT [--decode-from P] [--force]\n"
    "Write float32 logits [n_tokens][n_vocab] (little-endian) of a token sequence.\n\n" CLI_MODEL_OPTS_HELP
    "  --tokens LIST        token ids separated by spaces or commas (required, or --tokens-file)\n"
    "  --tokens-file FILE   the token ids from a file (as subq tokenize prints them)\n"
    "  --decode-from P      prefill the first P tokens in one batch, then feed the\n"
    "                       rest one at a time through the KV cache (default: all in one batch)\n"
    "  --decoded-only       OUT holds the logits of the tokens from --decode-from on only (the\n"
    "                       prefill computes none)\n"
    "  -o, --output FILE    output file (required; written atomically)\n"
    "  --force              replace an existing output file (without it, one is refused)\n"
    "With a --kv-file that holds tokens, --tokens must start with them: they are reused and OUT\n"
    "holds the logits of the tokens after them (the file then holds all of --tokens); tokens that\n"
    "would drop any are refused unless --kv-reset is given (then every token is computed again).\n"
    "Attention is full unless sparse flags are given (projections merged into the model file\n"
    "are used only when --search names it): the prefill is dense, sparse with\n"
    "--sparse-prefill, or with --tokenwise each of its tokens retrieves among every earlier\n"
    "key as decode does (perplexity's teacher forcing); the tokens from --decode-from on\n"
    "run sparse as decode does.\n\n" CLI_SPARSE_OPTS_HELP;

int cmd_logits(int argc, char **argv) {
    const char *cmd = "logits";
    cli_model_opts mo = {0};
    cli_sparse_opts so = cli_sparse_default();
    const char *list = NULL, *out = NULL, *tokens_file = NULL;
    int decode_from = -1, force = 0, decoded_only = 0;
    int tokenwise = 0;
    const cli_flag flags[] = {
        CLI_STRING(NULL, "--tokens", &list),
        CLI_STRING(NULL, "--tokens-file", &tokens_file),
        CLI_INT(NULL, "--decode-from", &decode_from, 0, 1 << 24),
        CLI_SET(NULL, "--decoded-only", &decoded_only),
        CLI_SET(NULL, "--tokenwise", &tokenwise),
        CLI_STRING("-o", "--output", &out),
        CLI_SET(NULL, "--force", &force),
    };
    int rc;
    if (!cli_parse_command(cmd, help, argc, argv, &mo, &so, flags, sizeof flags / sizeof flags[0], &rc)) return rc;
    if (tokenwise) so.plan.sparse_prefill = SUBQ_PREFILL_TOKENWISE;
    if ((!list == !tokens_file) || !out) return cli_error(cmd, "-o and one of --tokens, --tokens-file are required");
    if (!cli_output_ok(cmd, out, force)) return 1;
    char *file_text = NULL;
    if (tokens_file) {
        subq_error ferr = {0};
        size_t flen;
        if (subq_read_file(tokens_file, 0, &file_text, &flen, &ferr)) return cli_error(cmd, "%s", ferr.msg);
        list = file_text;
    }
    size_t cap = strlen(list) / 2 + 1, n = 0;
    int32_t *toks = malloc(cap * sizeof(int32_t));
    if (!toks) {
        free(file_text);
        return cli_error(cmd, "out of memory");
    }
    for (const char *p = list; *p;) {
        while (*p == ' ' || *p == ',' || *p == '\n' || *p == '\t' || *p == '\r') p++;
        if (!*p) break;
        char *end;
        long t = strtol(p, &end, 10);
        if (end == p || t < 0 || t > 0x7FFFFFFF || n >= cap) {
            free(toks);
            rc = cli_error(cmd, "%s: cannot parse '%.32s'", tokens_file ? tokens_file : "--tokens", p);
            free(file_text);
            return rc;
        }
        toks[n++] = (int32_t)t;
        p = end;
    }
    free(file_text);
    if (n == 0) {
        free(toks);
        return cli_error(cmd, "%s is empty", tokens_file ? tokens_file : "--tokens");
    }
    if (decode_from < 0 || decode_from > (int)n) decode_from = (int)n;
    subq_model *m;
    subq_context *c;
    mo.kv_continues = 1; /* the tokens are checked against the held ones below */
    if (!cli_load(cmd, &mo, &m, &c)) {
        free(toks);
        return 1;
    }
    if (!cli_apply_sparse(cmd, &so, m, c)) {
        free(toks);
        subq_context_free(c);
        subq_model_free(m);
        return 1;
    }
    subq_model_info info;
    subq_model_get_info(m, &info);
    rc = 0;
    subq_error err = {0};
    float *logits = NULL;
    /* --kv-file: the tokens it holds are reused when --tokens start with them */
    size_t held = 0;
    if (mo.kv_file && mo.kv_reset) {
        subq_context_reset(c);
    } else if (mo.kv_file) {
        if (subq_context_resume(c, &err)) {
            rc = cli_error(cmd, "%s: %s", mo.kv_file, err.msg);
            goto done;
        }
        held = (size_t)subq_context_n_past(c);
        const int32_t *h = subq_context_tokens(c);
        size_t same = 0;
        while (same < n && same < held && h[same] == toks[same]) same++;
        if (same < held) {
            rc = cli_error(cmd, "%s holds %zu tokens and --tokens %s the first %zu of them: give tokens that start "
                           "with them (their logits are not written again), or give --kv-reset to replace them",
                           mo.kv_file, held, same == n ? "are" : "share", same);
            goto done;
        }
        if (held == n) {
            rc = cli_error(cmd, "%s holds the %zu tokens of --tokens already: give more tokens after them, or give "
                           "--kv-reset to compute them all again", mo.kv_file, held);
            goto done;
        }
        if (held > 0)
            fprintf(stderr, "subq logits: %s holds the first %zu tokens: %s gets the logits of the %zu after them\n",
                    mo.kv_file, held, out, n - held);
    }
    if ((size_t)decode_from < held) decode_from = (int)held;
    const size_t first = decoded_only ? (size_t)decode_from : held; /* the first token whose logits OUT holds */
    if (!(logits = malloc((n - first + 1) * (size_t)info.n_vocab * sizeof(float)))) {
        rc = cli_error(cmd, "out of memory");
        goto done;
    }
    if ((size_t)decode_from > held &&
        subq_decode(c, toks + held, decode_from - (int)held, decoded_only ? NULL : logits, 1, &err)) {
        rc = cli_error(cmd, "%s", err.msg);
        goto done;
    }
    for (size_t t = (size_t)decode_from; t < n; t++) {
        if (subq_decode(c, &toks[t], 1, logits + (t - first) * info.n_vocab, 0, &err)) {
            rc = cli_error(cmd, "%s", err.msg);
            goto done;
        }
    }
    if (subq_write_file(out, logits, (n - first) * (size_t)info.n_vocab * sizeof(float), &err))
        rc = cli_error(cmd, "%s", err.msg);
done:
    free(logits);
    free(toks);
    cli_unload(m, c, &so);
    return rc;
}
