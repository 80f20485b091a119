/* subq generate: prompt -> streamed text. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_sparse.h"
#include "progress.h"

static const char *help =
    "usage: subq generate -m MODEL [-p PROMPT | -f FILE] [options]\n"
    "Generate text; the prompt and the continuation stream to stdout, speed to stderr.\n\n" CLI_MODEL_OPTS_HELP
    "  -p, --prompt TEXT    prompt (default: empty, start from BOS; with a --kv-file that holds\n"
    "                       tokens: continue after them)\n"
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
    "                       (--kv-file does the same in place, for contexts of any size)\n"
    "With --kv-file, a prompt must start with the tokens the file holds (it continues them; without\n"
    "-p/-f generation continues after them); one that would drop any is refused unless --kv-reset\n"
    "is given. SIGINT or SIGTERM stops at the next token (or prompt batch), commits what was\n"
    "computed to the file, and exits 130 (SIGINT) or 143 (SIGTERM); a second one ends it at once.\n"
    "\n" CLI_SPARSE_OPTS_HELP;

/* The signal that asked a run with a --kv-file to stop (0: none). */
static volatile sig_atomic_t stop_signal;

static void on_stop_signal(int sig) { stop_signal = sig; }

/* SIGINT and SIGTERM stop the generation at the next token or prompt batch
 * (the callbacks see stop_signal), so what was computed is committed; the
 * handler is reset by the first one, so that a second ends the process. */
static void catch_stop_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESETHAND | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* What the generation callbacks need: the prompt cache to save once the
 * prompt is in, the clock, and the model for the pieces. */
typedef struct gen_state {
    subq_context *c;
    const char *prompt_cache;
    int n_prompt;
    int32_t last;               /* the last token passed on */
    int n_reused;               /* prompt tokens the cache held already */
    progress bar;               /* a long prompt's batches (stderr, TTY only) */
    double t_prompt;
    subq_status save_status;
    subq_error err;
    int write_errno;            /* stdout refused a token's text: generation stopped there */
} gen_state;

/* Flush what stdout holds: 0, or the errno of the write that failed (a full
 * disk, /dev/full), EIO when the error left none. */
static int flush_out(void) {
    errno = 0;
    if (fflush(stdout) == 0 && !ferror(stdout)) return 0;
    return errno ? errno : EIO;
}

static int write_error(const char *cmd, int e) {
    return cli_error(cmd, "cannot write the output to stdout: %s", strerror(e));
}

/* The prompt is in the cache: save it there when it was not all reused. */
static int on_prompt(void *user, int n_reused) {
    gen_state *g = user;
    g->t_prompt = cli_now_s();
    g->n_reused = n_reused;
    if (g->bar.label && g->n_prompt - n_reused > subq_context_n_batch(g->c)) {
        progress_update(&g->bar, g->n_prompt - n_reused, "");
        progress_end(&g->bar);
    }
    if (g->prompt_cache) {
        subq_context_stats st;
        subq_context_get_stats(g->c, &st);
        fprintf(stderr, "subq generate: prompt cache %s: %d of %d prompt tokens reused", g->prompt_cache, n_reused,
                g->n_prompt);
        if (st.index_tokens_linked > 0)
            fprintf(stderr, " (HNSW graphs of %lld read)", (long long)st.index_tokens_linked);
        fputc('\n', stderr);
        if (n_reused < g->n_prompt) g->save_status = subq_context_save(g->c, g->prompt_cache, &g->err);
    }
    return g->save_status != SUBQ_OK || stop_signal;
}

static int on_batch(void *user, int n_reused, int n_done, int n_prompt) {
    gen_state *g = user;
    if (stop_signal) return 1;
    if (n_prompt - n_reused <= subq_context_n_batch(g->c)) return 0; /* one batch: no bar */
    if (n_done == 0) progress_begin(&g->bar, "prompt", n_prompt - n_reused);
    progress_update(&g->bar, n_done, "");
    return 0;
}

/* Each token's text is written and flushed at once; a failed write stops
 * the generation at that token. */
static int on_token(void *user, int32_t tok, const char *piece, size_t len) {
    gen_state *g = user;
    g->last = tok;
    fwrite(piece, 1, len, stdout);
    g->write_errno = flush_out();
    return g->write_errno != 0 || stop_signal != 0;
}

int cmd_generate(int argc, char **argv) {
    const char *cmd = "generate";
    cli_model_opts mo = {0};
    cli_sparse_opts so = cli_sparse_default();
    const char *prompt = NULL, *prompt_file = NULL, *prompt_cache = NULL;
    int ignore_eos = 0;
    subq_generate_params gp = subq_generate_default_params();
    subq_sampler_params *sp = &gp.sampler;
    const cli_flag flags[] = {
        CLI_STRING("-p", "--prompt", &prompt),
        CLI_STRING("-f", "--file", &prompt_file),
        CLI_INT("-n", "--n-predict", &gp.n_predict, 0, 1 << 24),
        CLI_FLOAT(NULL, "--temp", &sp->temp),
        CLI_INT(NULL, "--top-k", &sp->top_k, 0, 1 << 30),
        CLI_FLOAT(NULL, "--top-p", &sp->top_p),
        CLI_U64("-s", "--seed", &sp->seed),
        CLI_STRING(NULL, "--prompt-cache", &prompt_cache),
        CLI_SET(NULL, "--ignore-eos", &ignore_eos),
    };
    int rc;
    if (!cli_parse_command(cmd, help, argc, argv, &mo, &so, flags, sizeof flags / sizeof flags[0], &rc)) return rc;
    const int prompt_given = prompt || prompt_file;
    if (!prompt) prompt = "";
    subq_error err = {0};
    char *file_text = NULL;
    size_t prompt_len = strlen(prompt);
    if (prompt_cache && mo.kv_file)
        return cli_error(cmd, "--prompt-cache and --kv-file are two sessions: give one (the KV file is one already)");
    const int kv_reset = mo.kv_reset;
    mo.kv_continues = 1; /* the prompt is checked against the held tokens below */
    if (prompt_file) {
        if (subq_read_file(prompt_file, 0, &file_text, &prompt_len, &err)) return cli_error(cmd, "%s", err.msg);
        prompt = file_text;
    }
    subq_model *m = NULL;
    subq_context *c = NULL;
    subq_sampler *smp = NULL;
    int32_t *toks = NULL;
    size_t n_prompt = 0;
    rc = 0;
    /* the sampler first: bad --temp/--top-p fail before anything is loaded or printed */
    if (subq_sampler_new(sp, &smp, &err)) {
        rc = cli_error(cmd, "%s", err.msg);
        goto done;
    }
    mo.far_keys = so.plan.far_pos != SUBQ_FAR_NONE;
    if (!cli_sparse_model_default(cmd, &so, mo.model) || !cli_load(cmd, &mo, &m, &c) ||
        !cli_apply_sparse(cmd, &so, m, c)) {
        rc = 1;
        goto done;
    }
    subq_model_info info;
    subq_model_get_info(m, &info);
    /* --kv-file: the tokens it holds (the plan is set: their search keys match) */
    int n_held = 0;
    if (mo.kv_file) {
        if (subq_context_resume(c, &err)) {
            rc = cli_error(cmd, "%s: %s", mo.kv_file, err.msg);
            goto done;
        }
        n_held = subq_context_n_past(c);
        subq_context_stats st;
        subq_context_get_stats(c, &st);
        fprintf(stderr, "subq generate: KV file %s: %d tokens held", mo.kv_file, n_held);
        if (st.index_tokens_linked > 0) /* else rebuilt from the keys (or no graph) */
            fprintf(stderr, " (HNSW graphs of %lld read from %s.hnsw)", (long long)st.index_tokens_linked, mo.kv_file);
        fputc('\n', stderr);
    }
    const int continuing = n_held > 0 && !prompt_given && !kv_reset;
    if (continuing) {
        /* no prompt: continue after the held tokens (they are the prompt, not echoed) */
        if (!(toks = malloc((size_t)n_held * sizeof *toks))) {
            rc = cli_error(cmd, "out of memory");
            goto done;
        }
        memcpy(toks, subq_context_tokens(c), (size_t)n_held * sizeof *toks);
        n_prompt = (size_t)n_held;
        for (int i = 0; i < n_held; i++)
            if (toks[i] < 0) {
                rc = cli_error(cmd, "%s: slot %d holds no token (a synthetic fill): nothing to continue; give "
                               "--kv-reset to start over", mo.kv_file, i);
                goto done;
            }
        fprintf(stderr, "subq generate: continuing after the %d tokens %s holds\n", n_held, mo.kv_file);
    } else if (cli_tokenize(m, prompt, prompt_len, info.add_bos, 0, &toks, &n_prompt, &err)) {
        rc = cli_error(cmd, "%s", err.msg);
        goto done;
    }
    if (n_held > 0 && prompt_given && !kv_reset) {
        /* a prompt continues the held tokens; one that leaves them would drop them */
        const int32_t *held = subq_context_tokens(c);
        size_t same = 0;
        while (same < n_prompt && same < (size_t)n_held && held[same] == toks[same]) same++;
        if (same < (size_t)n_held) {
            rc = cli_error(cmd, "%s holds %d tokens and the prompt %s the first %zu of them: continue them without "
                           "-p/-f, give a prompt that starts with them, or give --kv-reset to replace them",
                           mo.kv_file, n_held, same == n_prompt ? "is" : "shares", same);
            goto done;
        }
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
    /* echo the prompt as the model sees it (held tokens continued are not echoed) */
    for (size_t i = continuing ? n_prompt : 0; i < n_prompt; i++) {
        if (cli_write_piece(stdout, m, i ? toks[i - 1] : -1, toks[i], &err)) {
            rc = cli_error(cmd, "%s", err.msg);
            goto done;
        }
    }
    int e = flush_out();
    if (e) {
        rc = write_error(cmd, e);
        goto done;
    }
    /* --prompt-cache: an existing file holds the prefix to reuse; one made
     * after this run's prompt otherwise */
    if (prompt_cache && cli_path_exists(prompt_cache)) { /* not opened here: a FIFO would block the open */
        if (subq_context_load(c, prompt_cache, &err)) {
            rc = cli_error(cmd, "%s", err.msg);
            goto done;
        }
    }
    gen_state g = {.c = c, .prompt_cache = prompt_cache, .n_prompt = (int)n_prompt};
    if (!ignore_eos) gp.end_tokens[0] = info.eos_id;
    gp.on_prompt = on_prompt;
    gp.on_batch = on_batch;
    gp.on_token = on_token;
    gp.user = &g;
    if (mo.kv_file) catch_stop_signals();
    subq_generate_result res;
    double t0 = cli_now_s();
    if (subq_generate(c, toks, (int)n_prompt, &gp, &res, &err)) {
        rc = cli_error(cmd, "%s", err.msg);
        goto done;
    }
    if (g.save_status) {
        rc = cli_error(cmd, "%s", g.err.msg);
        goto done;
    }
    if (g.write_errno) {
        rc = write_error(cmd, g.write_errno);
        goto done;
    }
    double t1 = g.t_prompt, t2 = cli_now_s();
    /* the last token printed is not in the cache yet (nothing needed its
     * logits): a KV file must hold all the text shown, to continue after it
     * (also when a signal stopped the run there) */
    if (mo.kv_file && res.n_generated > 0 &&
        (res.finish == SUBQ_FINISH_LENGTH || (res.finish == SUBQ_FINISH_CALLER && stop_signal)) &&
        subq_context_n_past(c) < subq_context_n_ctx(c)) {
        float *logits = malloc((size_t)info.n_vocab * sizeof *logits);
        subq_status s = logits ? subq_decode(c, &g.last, 1, logits, 0, &err) : SUBQ_ERR_NOMEM;
        free(logits);
        if (s) {
            rc = cli_error(cmd, "%s", s == SUBQ_ERR_NOMEM && !err.code ? "out of memory" : err.msg);
            goto done;
        }
    }
    if (res.finish == SUBQ_FINISH_CONTEXT_FULL) /* stop, as llama.cpp does */
        fprintf(stderr, "\nsubq generate: context of %d tokens is full; stopping\n", subq_context_n_past(c));
    fputc('\n', stdout);
    if ((e = flush_out())) {
        rc = write_error(cmd, e);
        goto done;
    }
    if (stop_signal) { /* commit now (the context's free would too), to say what the file holds */
        const int sig = stop_signal;
        if (subq_context_sync(c, &err)) {
            rc = cli_error(cmd, "%s", err.msg);
            goto done;
        }
        fprintf(stderr, "subq generate: %s: stopped after %d generated tokens; %s holds %d tokens\n",
                sig == SIGINT ? "interrupted" : "terminated", res.n_generated, mo.kv_file, subq_context_n_past(c));
        rc = 128 + sig;
        goto done;
    }
    /* tok/s of the prompt counts the tokens computed, not those the cache held */
    const int n_computed = (int)n_prompt - g.n_reused;
    char cached[48] = "";
    if (g.n_reused > 0) snprintf(cached, sizeof cached, " (%d cached)", g.n_reused);
    fprintf(stderr, "subq generate: prompt %zu tokens%s, %d computed in %.3f s (%.1f tok/s), generated %d tokens in "
            "%.3f s (%.1f tok/s)\n", n_prompt, cached, n_computed, t1 - t0, (double)n_computed / (t1 - t0 + 1e-12),
            res.n_generated, t2 - t1, (double)res.n_generated / (t2 - t1 + 1e-12));
done:
    subq_sampler_free(smp);
    free(toks);
    free(file_text);
    cli_unload(m, c, &so);
    return rc;
}
