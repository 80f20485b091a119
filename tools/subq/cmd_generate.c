/* subq generate: prompt -> streamed text. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_sparse.h"

static const char *help =
    "usage: subq generate -m MODEL [-p PROMPT | -f FILE] [options]\n"
    "Generate text; the prompt and the continuation stream to stdout, speed to stderr.\n\n" CLI_MODEL_OPTS_HELP
    "  -p, --prompt TEXT    prompt (default: empty, start from BOS)\n"
    "  -f, --file FILE      read the prompt from a file\n"
    "  -n, --n-predict N    tokens to generate (default 128)\n"
    "  --temp T             temperature; 0 = greedy (default 0.8)\n"
    "  --top-k K            keep the K most likely tokens; 0 = off (default 40)\n"
    "  --top-p P            nucleus sampling; 1 = off (default 0.95)\n"
    "  -s, --seed N         sampling seed (default 42)\n"
    "  --ignore-eos         keep generating after end-of-sequence\n"
    "  --sparse-prefill     run the prompt sparse too, in batches of -b: each prompt token attends to\n"
    "                       the sinks, its batch up to itself (at least the tail) and --topk keys\n"
    "                       retrieved from the earlier batches (default: dense prompt, sparse decode)\n"
    "  --prompt-cache FILE  session file: load the KV cache and indexes of an earlier run and reuse\n"
    "                       the prompt prefix they share; save the prompt's state there after it\n"
    "\n" CLI_SPARSE_OPTS_HELP;

/* --prompt-cache: when the file exists, load it and keep the prefix it
 * shares with the prompt (*n_keep tokens; all of them, with the logits,
 * when it holds exactly this prompt). Prints the error and returns 0 on
 * failure. */
static int load_prompt_cache(const char *path, subq_context *c, const int32_t *toks, int n_prompt, int n_vocab,
                             float *logits, int *n_keep) {
    subq_error err = {0};
    *n_keep = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return 1; /* made after this run's prompt */
    fclose(f);
    if (subq_context_load(c, path, &err)) return !cli_error("generate", "%s", err.msg);
    const int32_t *cached = subq_context_tokens(c);
    int n_past = subq_context_n_past(c), n = 0;
    while (n < n_past && n < n_prompt && cached[n] == toks[n]) n++;
    const float *known = subq_context_last_logits(c);
    if (n == n_prompt && n_past == n_prompt && known) {
        memcpy(logits, known, (size_t)n_vocab * sizeof(float));
    } else {
        if (n >= n_prompt) n = n_prompt - 1; /* decode the last prompt token again for its logits */
        if (subq_context_truncate(c, n, &err)) return !cli_error("generate", "%s", err.msg);
    }
    *n_keep = n;
    fprintf(stderr, "subq generate: prompt cache %s: %d of %d prompt tokens reused\n", path, n, n_prompt);
    return 1;
}

int cmd_generate(int argc, char **argv) {
    const char *cmd = "generate";
    cli_model_opts mo = {0};
    cli_sparse_opts so;
    cli_sparse_init(&so);
    const char *prompt = "", *prompt_file = NULL, *prompt_cache = NULL, *v;
    int n_predict = 128, ignore_eos = 0;
    subq_sampler_params sp = subq_sampler_default_params();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const int r = cli_common_opt(cmd, help, argc, argv, &i, &mo, &so);
        if (r == CLI_OPT_TAKEN) continue;
        if (r != CLI_OPT_NONE) return r == CLI_OPT_HELP ? 0 : 1;
        if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            if (!(prompt = cli_value(cmd, argc, argv, &i))) return 1;
        } else if (!strcmp(a, "-f") || !strcmp(a, "--file")) {
            if (!(prompt_file = cli_value(cmd, argc, argv, &i))) return 1;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || !cli_parse_int(cmd, a, v, 0, 1 << 24, &n_predict)) return 1;
        } else if (!strcmp(a, "--temp")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || !cli_parse_float(cmd, a, v, &sp.temp)) return 1;
        } else if (!strcmp(a, "--top-k")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || !cli_parse_int(cmd, a, v, 0, 1 << 30, &sp.top_k)) return 1;
        } else if (!strcmp(a, "--top-p")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || !cli_parse_float(cmd, a, v, &sp.top_p)) return 1;
        } else if (!strcmp(a, "-s") || !strcmp(a, "--seed")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || !cli_parse_u64(cmd, a, v, &sp.seed)) return 1;
        } else if (!strcmp(a, "--prompt-cache")) {
            if (!(prompt_cache = cli_value(cmd, argc, argv, &i))) return 1;
        } else if (!strcmp(a, "--ignore-eos")) {
            ignore_eos = 1;
        } else {
            return cli_error(cmd, "unknown option '%s' (see subq generate --help)", a);
        }
    }
    subq_error err = {0};
    char *file_text = NULL;
    size_t prompt_len = strlen(prompt);
    if (prompt_file) {
        if (subq_read_file(prompt_file, 0, &file_text, &prompt_len, &err)) return cli_error(cmd, "%s", err.msg);
        prompt = file_text;
    }
    subq_model *m = NULL;
    subq_context *c = NULL;
    subq_sampler *smp = NULL;
    int32_t *toks = NULL;
    size_t n_prompt = 0;
    float *logits = NULL;
    int rc = 0;
    /* the sampler first: bad --temp/--top-p fail before anything is loaded or printed */
    if (subq_sampler_new(&sp, &smp, &err)) {
        rc = cli_error(cmd, "%s", err.msg);
        goto done;
    }
    if (!cli_sparse_model_default(cmd, &so, mo.model) || !cli_load(cmd, &mo, &m, &c) ||
        !cli_apply_sparse(cmd, &so, m, c)) {
        rc = 1;
        goto done;
    }
    subq_model_info info;
    subq_model_get_info(m, &info);
    logits = malloc((size_t)info.n_vocab * sizeof(float));
    if (!logits) {
        rc = cli_error(cmd, "out of memory");
        goto done;
    }
    if (cli_tokenize(m, prompt, prompt_len, info.add_bos, 0, &toks, &n_prompt, &err)) {
        rc = cli_error(cmd, "%s", err.msg);
        goto done;
    }
    if (n_prompt == 0) {
        rc = cli_error(cmd, "empty prompt and the model has no BOS token; give a prompt with -p");
        goto done;
    }
    if (n_prompt > (size_t)subq_context_n_ctx(c)) {
        rc = cli_error(cmd, "the prompt is %zu tokens, more than the context of %d; give a larger -c or a shorter prompt",
                       n_prompt, subq_context_n_ctx(c));
        goto done;
    }
    /* echo the prompt as the model sees it */
    for (size_t i = 0; i < n_prompt; i++) {
        if (cli_write_piece(stdout, m, i ? toks[i - 1] : -1, toks[i], &err)) {
            rc = cli_error(cmd, "%s", err.msg);
            goto done;
        }
    }
    fflush(stdout);
    double t0 = cli_now_s();
    int n_keep = 0;
    if (prompt_cache && !load_prompt_cache(prompt_cache, c, toks, (int)n_prompt, info.n_vocab, logits, &n_keep)) {
        rc = 1;
        goto done;
    }
    if (n_keep < (int)n_prompt) {
        if (subq_decode(c, toks + n_keep, (int)n_prompt - n_keep, logits, 0, &err)) {
            rc = cli_error(cmd, "%s", err.msg);
            goto done;
        }
        if (prompt_cache && subq_context_save(c, prompt_cache, &err)) {
            rc = cli_error(cmd, "%s", err.msg);
            goto done;
        }
    }
    double t1 = cli_now_s();
    int32_t prev = toks[n_prompt - 1];
    int n_gen = 0;
    while (n_gen < n_predict) {
        int32_t tok = subq_sampler_sample(smp, logits, info.n_vocab);
        if (tok == info.eos_id && !ignore_eos) break;
        if (cli_write_piece(stdout, m, prev, tok, &err)) {
            rc = cli_error(cmd, "%s", err.msg);
            goto done;
        }
        fflush(stdout);
        prev = tok;
        if (++n_gen == n_predict) break;
        if (subq_decode(c, &tok, 1, logits, 0, &err)) {
            if (err.code != SUBQ_ERR_RANGE) {
                rc = cli_error(cmd, "%s", err.msg);
                goto done;
            }
            /* context full: stop, as llama.cpp does */
            fprintf(stderr, "\nsubq generate: context of %d tokens is full; stopping\n", subq_context_n_past(c));
            break;
        }
    }
    double t2 = cli_now_s();
    fputc('\n', stdout);
    fflush(stdout);
    fprintf(stderr, "subq generate: prompt %zu tokens in %.3f s (%.1f tok/s), generated %d tokens in %.3f s (%.1f tok/s)\n",
            n_prompt, t1 - t0, (double)n_prompt / (t1 - t0 + 1e-12), n_gen, t2 - t1,
            (double)n_gen / (t2 - t1 + 1e-12));
done:
    subq_sampler_free(smp);
    free(logits);
    free(toks);
    free(file_text);
    subq_context_free(c);
    cli_sparse_free(&so);
    subq_model_free(m);
    return rc;
}
