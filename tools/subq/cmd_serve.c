/* subq serve: OpenAI-compatible HTTP server (serve.h has the pieces). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __GLIBC__
#include <malloc.h> /* mallopt */
#endif

#include "cli.h"
#include "cli_sparse.h"
#include "serve/serve.h"

static const char *help =
    "usage: subq serve -m MODEL [options]\n"
    "OpenAI-compatible HTTP server: POST /v1/completions, POST /v1/chat/completions (\"stream\": true\n"
    "for server-sent events), GET /v1/models, GET /health. A request whose prompt extends an earlier\n"
    "one reuses that KV cache and index (usage.prompt_tokens_details.cached_tokens says how many\n"
    "tokens). Per-request attention plan: \"subq\": {\"dense\": true} or {\"select\": KIND, \"topk\": K,\n"
    "\"sink\": N, \"tail\": N, \"sparse_layers\": L}. Stops on SIGINT/SIGTERM.\n\n" CLI_MODEL_OPTS_HELP
    "  --host ADDR          address to listen on (default 127.0.0.1)\n"
    "  --port N             port (default 8080; 0: any free port, printed at start-up)\n"
    "  --slots N            sequences (prompt caches) held at once, least recently used\n"
    "                       evicted first (default 1); requests beyond wait in a queue\n"
    "  --api-key KEY        require \"Authorization: Bearer KEY\" on /v1/*\n"
    "  --chat-template NAME chat format when the model has none or an unknown one:\n"
    "                       chatml, llama2, llama2-sys, llama2-sys-bos, llama2-sys-strip, mistral-v1,\n"
    "                       mistral-v3, mistral-v3-tekken, mistral-v7, llama3, gemma, phi3\n"
    "  --max-body BYTES     largest request body; a larger Content-Length is answered 413 from\n"
    "                       the head, before any body (default 16777216)\n"
    "  --max-connections N  connections served at once; requests beyond get 503, /health\n"
    "                       is always answered (default 64)\n"
    "  --max-per-client N   connections one client address may hold; partial ones beyond are\n"
    "                       answered 429 and closed (default 16)\n"
    "  --timeout N          seconds a request has to arrive whole, from its first byte (a\n"
    "                       slow or stalled client is disconnected; default 30)\n"
    "  --sparse-prefill     run prompts sparse too, as subq generate --sparse-prefill (default: dense\n"
    "                       prompt, sparse decode)\n"
    "  --kv-replace         with --kv-file: a request that would drop tokens the file holds (a prompt\n"
    "                       that does not start with them, another plan, \"cache_prompt\": false)\n"
    "                       replaces them. Without it the server continues the file's tokens for a\n"
    "                       request that starts with them and runs any other in memory, leaving\n"
    "                       the file as it is\n"
    "\n" CLI_SPARSE_OPTS_HELP;

/* The chat template: --chat-template NAME, else the model's, recognised;
 * -1 when the model has none (chat requests are refused then). */
static int chat_template(const char *cmd, const subq_model *m, const char *name, int *out) {
    if (name) {
        if ((*out = chat_template_from_name(name)) < 0)
            return !cli_error(cmd, "unknown chat template '%s' (%s)", name, chat_template_names());
        return 1;
    }
    size_t len = 0;
    char probe[1];
    *out = -1;
    if (subq_model_meta(m, "tokenizer.chat_template", probe, sizeof probe, &len, NULL)) return 1;
    char *text = malloc(len + 1);
    if (!text) return !cli_error(cmd, "out of memory");
    subq_model_meta(m, "tokenizer.chat_template", text, len + 1, &len, NULL);
    *out = chat_template_detect(text);
    if (*out < 0) {
        for (char *p = text; *p; p++)
            if (*p == '\n' || *p == '\r') *p = ' ';
        cli_error(cmd, "the model's chat template is not one this server knows ('%.60s...'); give --chat-template "
                  "NAME (%s)", text, chat_template_names());
    }
    free(text);
    return *out >= 0;
}

int cmd_serve(int argc, char **argv) {
    const char *cmd = "serve", *v;
    cli_model_opts mo = {0};
    cli_sparse_opts so = cli_sparse_default();
    serve_http_config hc = {.host = "127.0.0.1", .port = 8080, .max_body = 16u << 20, .max_connections = 64,
                            .max_per_client = 16, .read_timeout_s = 30};
    const char *template_name = NULL;
    int n_slots = 1, kv_replace = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const int r = cli_common_opt(cmd, help, argc, argv, &i, &mo, &so);
        if (r == CLI_OPT_TAKEN) continue;
        if (r != CLI_OPT_NONE) return r == CLI_OPT_HELP ? 0 : 1;
        int bytes = 0;
        if (!strcmp(a, "--host")) {
            if (!(hc.host = cli_value(cmd, argc, argv, &i))) return 1;
        } else if (!strcmp(a, "--port")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || !cli_parse_int(cmd, a, v, 0, 65535, &hc.port)) return 1;
        } else if (!strcmp(a, "--slots")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || !cli_parse_int(cmd, a, v, 1, 256, &n_slots)) return 1;
        } else if (!strcmp(a, "--api-key")) {
            if (!(hc.api_key = cli_value(cmd, argc, argv, &i))) return 1;
        } else if (!strcmp(a, "--chat-template")) {
            if (!(template_name = cli_value(cmd, argc, argv, &i))) return 1;
        } else if (!strcmp(a, "--max-body")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || !cli_parse_int(cmd, a, v, 1024, 1 << 30, &bytes)) return 1;
            hc.max_body = (size_t)bytes;
        } else if (!strcmp(a, "--max-per-client")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || !cli_parse_int(cmd, a, v, 1, 4096, &hc.max_per_client))
                return 1;
        } else if (!strcmp(a, "--timeout")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || !cli_parse_int(cmd, a, v, 1, 86400, &hc.read_timeout_s))
                return 1;
        } else if (!strcmp(a, "--kv-replace")) {
            kv_replace = 1;
        } else if (!strcmp(a, "--max-connections")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || !cli_parse_int(cmd, a, v, 1, 4096, &hc.max_connections))
                return 1;
        } else {
            return cli_error(cmd, "unknown option '%s' (see subq serve --help)", a);
        }
    }
    if (!mo.model) return cli_error(cmd, "no model given; use -m FILE.gguf");
    if (hc.api_key && !*hc.api_key) return cli_error(cmd, "--api-key must not be empty");
    if (!cli_sparse_model_default(cmd, &so, mo.model)) return 1;
    /* the model's name as clients see it: the file name without .gguf, as llama-server does */
    const char *base = strrchr(mo.model, '/') ? strrchr(mo.model, '/') + 1 : mo.model;
    char name[256];
    snprintf(name, sizeof name, "%.*s", (int)(strlen(base) > 5 && !strcmp(base + strlen(base) - 5, ".gguf")
                                                  ? strlen(base) - 5 : strlen(base)), base);
    serve_config cfg = {.model_name = name, .n_slots = n_slots, .ctx = subq_context_default_params()};
    cfg.ctx.n_ctx = mo.n_ctx;
    cfg.ctx.n_threads = mo.n_threads;
    cfg.ctx.kv_type = mo.kv_type;
    cfg.ctx.kv_file = mo.kv_file;
    cfg.ctx.swa_full = mo.swa_full;
    if (mo.n_batch > 0) cfg.ctx.n_batch = mo.n_batch;
    cfg.sparse = so.enabled;
    if ((mo.kv_reset || mo.kv_recover || kv_replace) && !mo.kv_file)
        return cli_error(cmd, "%s applies to a --kv-file: give one",
                         kv_replace ? "--kv-replace" : mo.kv_reset ? "--kv-reset" : "--kv-recover");
    cfg.ctx.kv_recover = mo.kv_recover;
    cfg.kv_reset = mo.kv_reset;
    cfg.kv_replace = kv_replace;
    if (mo.kv_file && n_slots > 1)
        return cli_error(cmd, "--kv-file holds one context: give --slots 1 (or no --kv-file for %d slots)", n_slots);

#ifdef __GLIBC__
    /* Request bodies (up to --max-body) and their JSON come and go in the
     * connections' threads. glibc gave each thread an arena of its own and
     * raises its thresholds to the largest block freed, so that every arena
     * kept about a body's worth, and malloc_trim (after a large body,
     * serve_http.c) does not shrink the top of a thread's arena: one arena
     * for all, which it gives back whole. (Threshold settings would instead
     * map and fault in the prefill's large scratch buffers at each batch.) */
    mallopt(M_ARENA_MAX, 1);
#endif
    /* signals go to sigwait below, not to the threads started from here on */
    sigset_t stop, block;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    block = stop;
    sigaddset(&block, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &block, NULL);

    subq_error err = {0};
    subq_model *m = NULL;
    serve_engine *e = NULL;
    serve_http *h = NULL;
    int rc = 1, port = 0;
    if (subq_model_load_ex(mo.model, mo.load_mode, &m, &err)) {
        cli_error(cmd, "%s", err.msg);
        goto done;
    }
    if (!cli_sparse_load(cmd, &so, m)) goto done;
    cfg.plan = so.plan;
    cfg.search = so.search;
    cfg.complete = so.complete;
    if (!chat_template(cmd, m, template_name, &cfg.chat_template)) goto done;
    if (serve_engine_new(m, &cfg, &e, &err)) {
        cli_error(cmd, "%s", err.msg);
        goto done;
    }
    if (serve_http_start(e, &hc, &h, &port, &err)) {
        cli_error(cmd, "%s", err.msg);
        goto done;
    }
    fprintf(stderr, "subq serve: listening on http://%s%s%s:%d (model %s, %d slot%s, %s attention, chat template %s)\n",
            strchr(hc.host, ':') ? "[" : "", hc.host, strchr(hc.host, ':') ? "]" : "", port,
            serve_engine_model_name(e), n_slots, n_slots == 1 ? "" : "s",
            cfg.sparse ? subq_selector_name(cfg.plan.selector) : "full",
            cfg.chat_template >= 0 ? chat_template_name((chat_tmpl)cfg.chat_template) : "none");
    fflush(stderr);
    int sig = 0;
    sigwait(&stop, &sig);
    fprintf(stderr, "subq serve: %s, shutting down\n", sig == SIGINT ? "interrupted" : "terminated");
    rc = 0;
done:
    if (e) serve_engine_stop(e); /* every request ends, so the connection threads can */
    serve_http_stop(h);
    serve_engine_free(e);
    cli_sparse_free(&so);
    subq_model_free(m);
    return rc;
}
