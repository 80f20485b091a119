/* The engine: slots and the worker thread.
 *
 * Model weights are shared read-only; each slot owns a context (its KV cache
 * and indexes) and remembers the tokens in it. One worker thread computes
 * one request at a time (the machine has 2 cores and every decode already
 * uses them all through the thread pool): requests wait in a FIFO queue. A request
 * takes the slot under the same attention plan whose cached tokens share
 * the longest prefix with its prompt, else the least recently used slot;
 * subq_generate, the loop under `subq generate` too, keeps that prefix and
 * prefills only the rest of the prompt. With a KV file the one slot is the
 * file: a request that would drop tokens it holds (a prompt that does not
 * start with them, another plan, "cache_prompt": false) replaces them only
 * under --kv-replace; else it runs in a slot in memory (made at its first
 * such request) and the file keeps them. The text each request generates
 * equals `subq generate` with the same prompt, seed and sampling settings:
 * the same tokenisation, sampler and stopping rule. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "serve.h"
#include "strbuf.h"

typedef struct slot {
    subq_context *ctx;
    char plan_key[512];   /* plan the context runs ("" before the first request) */
    uint64_t last_used;
} slot;

struct serve_engine {
    subq_model *model;
    subq_model_info info;
    serve_config cfg;
    char model_name[256];
    slot *slots;
    slot mem;             /* with a KV file: the slot in memory for requests that would drop its tokens */
    pthread_t worker;
    int worker_started;
    pthread_mutex_t mu;   /* queue, stopping, clock */
    pthread_cond_t cv;
    serve_job **queue;
    int q_head, q_len, q_cap;
    int stopping;
    serve_job *running;   /* the job the worker computes */
    uint64_t clock;
    uint64_t next_id;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

const char *serve_engine_model_name(const serve_engine *e) { return e->model_name; }

/* ---- jobs ------------------------------------------------------------------ */

void serve_job_release(serve_job *j) {
    pthread_mutex_lock(&j->mu);
    int last = --j->refs == 0;
    pthread_mutex_unlock(&j->mu);
    if (!last) return;
    serve_request_free(&j->req);
    free(j->toks);
    free(j->raw);
    free(j->text);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

void serve_job_cancel(serve_job *j) {
    pthread_mutex_lock(&j->mu);
    j->cancelled = 1;
    pthread_mutex_unlock(&j->mu);
}


/* Mark the job done (with an error when status != 0); caller holds j->mu. */
static void finish_locked(serve_job *j, int status, const char *msg) {
    if (status && !j->http_status) {
        j->http_status = status;
        snprintf(j->error, sizeof j->error, "%.*s", (int)sizeof j->error - 1, msg);
    }
    j->state = JOB_DONE;
    j->t_done = now_s();
    pthread_cond_broadcast(&j->cv);
}

static void finish(serve_job *j, int status, const char *msg) {
    pthread_mutex_lock(&j->mu);
    finish_locked(j, status, msg);
    pthread_mutex_unlock(&j->mu);
}

/* Cancelled because the server stops: the client is told so (503). */
static void job_shutdown(serve_job *j) {
    pthread_mutex_lock(&j->mu);
    j->cancelled = j->shutdown = 1;
    pthread_mutex_unlock(&j->mu);
}

/* The error of a job cancelled before it finished. */
static void finish_cancelled_locked(serve_job *j) {
    if (j->shutdown) finish_locked(j, 503, "the server is shutting down: the request was not completed");
    else finish_locked(j, 499, "the client closed the connection");
}

/* ---- UTF-8 and stop strings ------------------------------------------------ */

/* Length of the valid UTF-8 sequence at s[0..n), 0 if it is not one. */
static size_t utf8_seq(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (!len || len > n || (len == 2 && c < 0xC2) || (len == 4 && c > 0xF4)) return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    if (len == 3 && ((c == 0xE0 && s[1] < 0xA0) || (c == 0xED && s[1] >= 0xA0))) return 0; /* overlong, surrogate */
    if (len == 4 && ((c == 0xF0 && s[1] < 0x90) || (c == 0xF4 && s[1] >= 0x90))) return 0;
    return len;
}

/* Bytes at the end of s[0..n) that may still become a valid character. */
static size_t utf8_pending(const unsigned char *s, size_t n) {
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        unsigned c = s[n - k];
        if ((c & 0xC0) == 0x80) continue;
        size_t need = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
        return need > k ? k : 0;
    }
    return 0;
}

static int grow(char **p, size_t *cap, size_t need) {
    if (need <= *cap) return 1;
    size_t c = *cap ? *cap : 256;
    while (c < need) c *= 2;
    char *q = realloc(*p, c);
    if (!q) return 0;
    *p = q;
    *cap = c;
    return 1;
}

/* Move raw[raw_sent .. upto) to text, invalid bytes as U+FFFD. Caller holds mu. */
static int emit(serve_job *j, size_t upto) {
    const unsigned char *s = (const unsigned char *)j->raw;
    if (!grow(&j->text, &j->text_cap, j->text_len + 3 * (upto - j->raw_sent) + 1)) return 0;
    for (size_t i = j->raw_sent; i < upto;) {
        size_t l = utf8_seq(s + i, upto - i);
        if (l) {
            memcpy(j->text + j->text_len, s + i, l);
            j->text_len += l;
            i += l;
        } else {
            memcpy(j->text + j->text_len, "\xEF\xBF\xBD", 3);
            j->text_len += 3;
            i++;
        }
    }
    j->text[j->text_len] = '\0';
    j->raw_sent = upto;
    return 1;
}

/* Append one token's bytes. Returns 1 when a stop string ended the text.
 * What may still turn into a stop string, or into a character, is held back. */
static int append_piece(serve_job *j, const char *piece, size_t n, int *oom) {
    pthread_mutex_lock(&j->mu);
    size_t old = j->raw_len;
    if (!grow(&j->raw, &j->raw_cap, j->raw_len + n + 1)) {
        *oom = 1;
        pthread_mutex_unlock(&j->mu);
        return 0;
    }
    memcpy(j->raw + j->raw_len, piece, n);
    j->raw_len += n;
    int stopped = 0;
    size_t hold = 0;
    for (int i = 0; i < j->req.n_stop; i++) {
        const char *st = j->req.stop[i];
        size_t sl = strlen(st);
        /* a match must end in the new bytes */
        size_t from = old + 1 > sl ? old + 1 - sl : 0;
        for (size_t p = from; p + sl <= j->raw_len; p++)
            if (!memcmp(j->raw + p, st, sl)) {
                if (!stopped || p < j->raw_len) j->raw_len = p;
                stopped = 1;
                break;
            }
        for (size_t k = sl - 1; !stopped && k > hold; k--) /* longest suffix that starts st */
            if (k <= j->raw_len && !memcmp(j->raw + j->raw_len - k, st, k)) hold = k;
    }
    size_t upto = j->raw_len;
    if (!stopped) upto -= hold > upto - j->raw_sent ? upto - j->raw_sent : hold;
    if (!stopped) upto -= utf8_pending((const unsigned char *)j->raw + j->raw_sent, upto - j->raw_sent);
    if (upto > j->raw_sent && !emit(j, upto)) *oom = 1;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    return stopped;
}

/* ---- the worker -------------------------------------------------------------- */

static int common_prefix(const int32_t *a, int na, const int32_t *b, int nb) {
    int n = 0;
    while (n < na && n < nb && a[n] == b[n]) n++;
    return n;
}

/* The slot for a job: same plan and the longest prefix shared with the
 * prompt, else the least recently used (empty first). */
static slot *pick_slot(serve_engine *e, const serve_job *j) {
    slot *best = NULL, *lru = NULL;
    int best_n = 0;
    for (int i = 0; i < e->cfg.n_slots; i++) {
        slot *s = &e->slots[i];
        if (!lru || s->last_used < lru->last_used) lru = s;
        if (!j->req.cache_prompt || strcmp(s->plan_key, j->plan_key)) continue;
        int n = common_prefix(subq_context_tokens(s->ctx), subq_context_n_past(s->ctx), j->toks, j->n_prompt);
        if (n > best_n) best = s, best_n = n;
    }
    /* a short shared prefix (a BOS, a common opening) is not worth a slot
     * that may hold another document: then the least recently used one
     * (llama-server's similarity threshold, 0.5, plays the same role) */
    if (best && 2 * best_n < j->n_prompt) best = NULL;
    return best ? best : lru;
}

/* Put the slot under the job's plan (an empty context) when it runs another. */
static subq_status set_plan(serve_engine *e, slot *s, const serve_job *j, subq_error *err) {
    if (!strcmp(s->plan_key, j->plan_key)) return SUBQ_OK;
    subq_context_reset(s->ctx);
    subq_context_clear_plan(s->ctx);
    s->plan_key[0] = '\0';
    if (j->sparse) {
        subq_status st = subq_context_set_plan(s->ctx, &j->plan, e->cfg.search, e->cfg.complete, err);
        if (st) return st;
    }
    snprintf(s->plan_key, sizeof s->plan_key, "%s", j->plan_key);
    return SUBQ_OK;
}

static int cancelled(serve_job *j) {
    pthread_mutex_lock(&j->mu);
    int c = j->cancelled;
    pthread_mutex_unlock(&j->mu);
    return c;
}

/* The generation callbacks' view of a job. */
typedef struct job_run {
    serve_job *j;
    int oom, stopped; /* out of memory; a stop string ended the text */
} job_run;

/* Before each prompt batch: note the progress (the log of a cancelled job
 * says how far it got) and stop when the client has left, so that a long
 * prompt it no longer waits for is dropped within one batch. */
static int job_batch(void *user, int n_reused, int n_done, int n_prompt) {
    serve_job *j = ((job_run *)user)->j;
    (void)n_prompt;
    pthread_mutex_lock(&j->mu);
    j->n_cached = n_reused;
    j->n_decoded = n_done;
    const int stop = j->cancelled;
    pthread_mutex_unlock(&j->mu);
    return stop;
}

static int job_prompt_done(void *user, int n_reused) {
    serve_job *j = ((job_run *)user)->j;
    pthread_mutex_lock(&j->mu);
    j->n_cached = n_reused;
    j->n_decoded = j->n_prompt - n_reused;
    j->t_first = now_s();
    j->state = JOB_RUNNING;
    pthread_cond_broadcast(&j->cv);
    int stop = j->cancelled;
    pthread_mutex_unlock(&j->mu);
    return stop;
}

static int job_token(void *user, int32_t tok, const char *piece, size_t len) {
    job_run *r = user;
    serve_job *j = r->j;
    (void)tok;
    pthread_mutex_lock(&j->mu);
    j->n_gen++;
    pthread_mutex_unlock(&j->mu);
    r->stopped = len > 0 && append_piece(j, piece, len, &r->oom);
    return r->stopped || r->oom || cancelled(j);
}

/* The KV file's slot s holds tokens that the job would drop: its prompt does
 * not start with them, or it runs another plan or asks for no cache. */
static int drops_held(const slot *s, const serve_job *j) {
    const int n = subq_context_n_past(s->ctx);
    if (n == 0) return 0;
    if (!j->req.cache_prompt || strcmp(s->plan_key, j->plan_key)) return 1;
    return common_prefix(subq_context_tokens(s->ctx), n, j->toks, j->n_prompt) < n;
}

/* The slot in memory beside a KV file (made at its first use: the file's
 * context size, no file). NULL and err when it cannot be made. */
static slot *memory_slot(serve_engine *e, subq_error *err) {
    if (e->mem.ctx) return &e->mem;
    subq_context_params p = e->cfg.ctx;
    p.kv_file = NULL;
    p.kv_recover = 0;
    if (subq_context_new(e->model, &p, &e->mem.ctx, err)) return NULL;
    e->mem.plan_key[0] = '\0'; /* set_plan puts it under the job's */
    return &e->mem;
}

static void run_job(serve_engine *e, serve_job *j) {
    subq_error err = {0};
    if (cancelled(j)) {
        pthread_mutex_lock(&j->mu);
        finish_cancelled_locked(j);
        pthread_mutex_unlock(&j->mu);
        return;
    }
    pthread_mutex_lock(&j->mu);
    j->t_start = now_s();
    pthread_mutex_unlock(&j->mu);
    slot *s = pick_slot(e, j);
    if (e->cfg.ctx.kv_file && !e->cfg.kv_replace && drops_held(s, j)) {
        const int kept = subq_context_n_past(s->ctx);
        if (!(s = memory_slot(e, &err)))
            return finish(j, 500, err.msg);
        pthread_mutex_lock(&j->mu);
        j->file_kept = kept;
        pthread_mutex_unlock(&j->mu);
    }
    s->last_used = ++e->clock;
    if (set_plan(e, s, j, &err)) return finish(j, 400, err.msg);
    if (!j->req.cache_prompt) subq_context_reset(s->ctx); /* subq_generate reuses what the slot holds */
    job_run r = {.j = j};
    subq_generate_params gp = subq_generate_default_params();
    gp.n_predict = j->max_tokens;
    gp.sampler = j->req.sp;
    gp.end_tokens[0] = j->stop_tok[0];
    gp.end_tokens[1] = j->stop_tok[1];
    gp.on_prompt = job_prompt_done;
    gp.on_batch = job_batch;
    gp.on_token = job_token;
    gp.user = &r;
    subq_generate_result res;
    if (subq_generate(s->ctx, j->toks, j->n_prompt, &gp, &res, &err)) {
        s->plan_key[0] = '\0'; /* the slot is empty: set the plan again next time */
        return finish(j, err.code == SUBQ_ERR_RANGE || err.code == SUBQ_ERR_ARG ? 400 : 500, err.msg);
    }
    /* the KV file's tokens are committed as each request ends (subq info reads them then) */
    if (e->cfg.ctx.kv_file && s != &e->mem && subq_context_sync(s->ctx, &err))
        fprintf(stderr, "subq serve: %s: KV file %s: %s\n", j->id, e->cfg.ctx.kv_file, err.msg);
    const char *reason = res.finish == SUBQ_FINISH_END_TOKEN || r.stopped ? "stop"
                         : res.finish == SUBQ_FINISH_CALLER && !r.oom ? NULL /* cancelled */
                                                                      : "length";
    pthread_mutex_lock(&j->mu);
    if (!r.oom && !emit(j, j->raw_len)) r.oom = 1; /* what was held back for a stop string */
    j->finish = reason;
    if (r.oom) finish_locked(j, 500, "out of memory");
    else if (!reason) finish_cancelled_locked(j);
    else finish_locked(j, 0, NULL);
    pthread_mutex_unlock(&j->mu);
}

/* One line per request on stderr, as llama-server logs them. */
static void log_job(serve_job *j) {
    pthread_mutex_lock(&j->mu);
    if (j->http_status)
        fprintf(stderr, "subq serve: %s: %s (%d) after %d tokens: %s (prompt: %d of %d tokens in the cache after "
                "%.1f ms)\n", j->id, j->http_status == 499 ? "cancelled" : "failed", j->http_status, j->n_gen, j->error,
                j->n_cached + j->n_decoded, j->n_prompt, j->t_start > 0 ? (j->t_done - j->t_start) * 1e3 : 0.0);
    else
        fprintf(stderr, "subq serve: %s: %d prompt tokens (%d cached), %d generated, %s, %.1f ms%s\n", j->id,
                j->n_prompt, j->n_cached, j->n_gen, j->finish, (j->t_done - j->t_submit) * 1e3,
                j->file_kept ? " (in memory: it would drop tokens the KV file holds, which keeps them)" : "");
    pthread_mutex_unlock(&j->mu);
}

static void *worker(void *arg) {
    serve_engine *e = arg;
    for (;;) {
        pthread_mutex_lock(&e->mu);
        while (!e->stopping && e->q_len == 0) pthread_cond_wait(&e->cv, &e->mu);
        if (e->q_len == 0) { /* stopping and nothing left */
            pthread_mutex_unlock(&e->mu);
            break;
        }
        serve_job *j = e->queue[e->q_head];
        e->q_head = (e->q_head + 1) % e->q_cap;
        e->q_len--;
        e->running = j;
        if (e->stopping) job_shutdown(j);
        pthread_mutex_unlock(&e->mu);
        run_job(e, j);
        log_job(j);
        pthread_mutex_lock(&e->mu);
        e->running = NULL;
        pthread_mutex_unlock(&e->mu);
        serve_job_release(j);
    }
    return NULL;
}

/* ---- submission --------------------------------------------------------------- */

/* What identifies a plan among the slots (the search projections and
 * completion maps are the server's, the same for every request). 0 when it
 * does not fit. */
static int plan_key(const subq_attn_plan *p, int sparse, char *out, size_t cap) {
    if (!sparse) return snprintf(out, cap, "full") < (int)cap;
    return snprintf(out, cap, "%s k=%d sink=%d tail=%d layers=%s prefill=%d far=%s:%d", subq_selector_name(p->selector),
                    p->top_k, p->n_sink, p->n_tail, p->layers ? p->layers : "-", p->sparse_prefill,
                    subq_far_name(p->far_pos), p->far_from) < (int)cap;
}

/* The job's plan and its key: the server's, changed by the "subq" field. */
static int job_plan(serve_engine *e, serve_job *j, char *msg, size_t cap) {
    const serve_sparse *x = &j->req.sparse;
    j->sparse = e->cfg.sparse;
    j->plan = e->cfg.plan;
    if (x->given) {
        if (x->select >= 0 || x->top_k >= 0 || x->n_sink >= 0 || x->n_tail >= 0 || x->layers || x->far_pos >= 0 ||
            x->far_from >= 0)
            j->sparse = 1;
        if (x->dense) j->sparse = 0;
        if (x->select >= 0) j->plan.selector = (subq_selector_kind)x->select;
        if (x->top_k >= 0) j->plan.top_k = x->top_k;
        if (x->n_sink >= 0) j->plan.n_sink = x->n_sink;
        if (x->n_tail >= 0) j->plan.n_tail = x->n_tail;
        if (x->layers) j->plan.layers = x->layers;
        if (x->far_pos >= 0) j->plan.far_pos = (subq_far_pos)x->far_pos;
        if (x->far_from >= 0) j->plan.far_from = x->far_from;
    }
    if (!j->sparse) return plan_key(&j->plan, 0, j->plan_key, sizeof j->plan_key) ? 0 : -1;
    if (!subq_selector_available(j->plan.selector)) {
        snprintf(msg, cap, "selector %s is not in this build", subq_selector_name(j->plan.selector));
        return -1;
    }
    if (subq_selector_needs_search(j->plan.selector) && !e->cfg.search) {
        snprintf(msg, cap, "selector %s needs search projections; start the server with --search FILE",
                 subq_selector_name(j->plan.selector));
        return -1;
    }
    if (!plan_key(&j->plan, 1, j->plan_key, sizeof j->plan_key)) {
        snprintf(msg, cap, "layer list too long");
        return -1;
    }
    return 0;
}

static int tokenize(serve_engine *e, serve_job *j, const char *text, int special, char *msg, size_t cap) {
    subq_error err = {0};
    size_t n = 0;
    /* not one id per byte: a vocabulary without U+2581 spends three on a space */
    if (cli_tokenize(e->model, text, strlen(text), e->info.add_bos, special, &j->toks, &n, &err))
        return snprintf(msg, cap, "%s", err.msg), -1;
    if (n > (size_t)INT32_MAX) return snprintf(msg, cap, "the prompt is %zu tokens, too many", n), -1;
    j->n_prompt = (int)n;
    return 0;
}

/* The id of a special token's text, -1 when it is not a single token. */
static int32_t special_id(serve_engine *e, const char *text) {
    int32_t ids[4];
    size_t n = 0;
    subq_error err;
    if (subq_tokenize_special(e->model, text, strlen(text), 0, ids, 4, &n, &err) || n != 1) return -1;
    return ids[0];
}

static int prepare(serve_engine *e, serve_job *j, int *status, char *msg, size_t cap) {
    serve_request *r = &j->req;
    *status = 400;
    if (r->chat) {
        if (e->cfg.chat_template < 0) {
            snprintf(msg, cap, "the model has no chat template; start the server with --chat-template NAME (%s)",
                     chat_template_names());
            return -1;
        }
        char *text = chat_template_apply((chat_tmpl)e->cfg.chat_template, r->msgs, r->n_msgs, 1);
        if (!text) return *status = 500, snprintf(msg, cap, "out of memory"), -1;
        int rc = tokenize(e, j, text, 1, msg, cap);
        free(text);
        if (rc) return -1;
        j->stop_tok[1] = special_id(e, chat_template_end_of_turn((chat_tmpl)e->cfg.chat_template));
    } else if (tokenize(e, j, r->prompt, 0, msg, cap)) {
        return -1;
    }
    const int n_ctx = e->cfg.ctx.n_ctx;
    if (j->n_prompt == 0)
        return snprintf(msg, cap, "empty prompt (the model has no BOS token to start from)"), -1;
    if (j->n_prompt > n_ctx)
        return snprintf(msg, cap, "the prompt has %d tokens, more than the context of %d", j->n_prompt, n_ctx), -1;
    j->max_tokens = r->max_tokens >= 0 ? r->max_tokens : r->chat ? SERVE_MAX_TOKENS : 16;
    if (!r->has_seed) { /* as OpenAI: a fresh stream unless asked */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        r->sp.seed = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)ts.tv_sec;
    }
    return job_plan(e, j, msg, cap);
}

serve_job *serve_submit(serve_engine *e, serve_request *req, int *http_status, char *msg, size_t cap) {
    serve_job *j = calloc(1, sizeof *j);
    if (!j) {
        serve_request_free(req);
        *http_status = 500;
        snprintf(msg, cap, "out of memory");
        return NULL;
    }
    j->req = *req;
    memset(req, 0, sizeof *req);
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->refs = 1;
    j->stop_tok[0] = e->info.eos_id;
    j->stop_tok[1] = -1;
    j->t_submit = now_s();
    j->created = (long)time(NULL);
    if (prepare(e, j, http_status, msg, cap)) {
        serve_job_release(j);
        return NULL;
    }
    pthread_mutex_lock(&e->mu);
    snprintf(j->id, sizeof j->id, "%s-%llu", j->req.chat ? "chatcmpl" : "cmpl", (unsigned long long)++e->next_id);
    if (e->stopping) {
        pthread_mutex_unlock(&e->mu);
        serve_job_release(j);
        *http_status = 503;
        snprintf(msg, cap, "the server is shutting down");
        return NULL;
    }
    if (e->q_len == e->q_cap) {
        int cap2 = e->q_cap ? 2 * e->q_cap : 64;
        serve_job **q = malloc((size_t)cap2 * sizeof *q);
        if (!q) {
            pthread_mutex_unlock(&e->mu);
            serve_job_release(j);
            *http_status = 503;
            snprintf(msg, cap, "out of memory for the request queue");
            return NULL;
        }
        for (int i = 0; i < e->q_len; i++) q[i] = e->queue[(e->q_head + i) % e->q_cap];
        free(e->queue);
        e->queue = q;
        e->q_head = 0;
        e->q_cap = cap2;
    }
    j->refs = 2; /* the caller's and the queue's */
    e->queue[(e->q_head + e->q_len++) % e->q_cap] = j;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return j;
}

/* ---- life cycle --------------------------------------------------------------- */

subq_status serve_engine_new(subq_model *m, const serve_config *cfg, serve_engine **out, subq_error *err) {
    *out = NULL;
    serve_engine *e = calloc(1, sizeof *e);
    if (!e) return SUBQ_ERR_NOMEM;
    e->model = m;
    e->cfg = *cfg;
    subq_model_get_info(m, &e->info);
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    snprintf(e->model_name, sizeof e->model_name, "%s", cfg->model_name ? cfg->model_name : e->info.arch);
    e->slots = calloc((size_t)cfg->n_slots, sizeof *e->slots);
    subq_status s = !e->slots ? SUBQ_ERR_NOMEM : SUBQ_OK;
    if (s) snprintf(err->msg, sizeof err->msg, "out of memory"), err->code = s;
    for (int i = 0; i < cfg->n_slots && !s; i++) {
        slot *sl = &e->slots[i];
        s = subq_context_new(m, &cfg->ctx, &sl->ctx, err);
        if (!s && cfg->ctx.kv_file) cli_kv_warn("serve", cfg->ctx.kv_file, sl->ctx);
        if (!s && cfg->kv_reset) subq_context_reset(sl->ctx); /* before the plan: the file's may be another */
        if (!s && cfg->sparse) s = subq_context_set_plan(sl->ctx, &cfg->plan, cfg->search, cfg->complete, err);
        if (!s) s = subq_context_resume(sl->ctx, err); /* --kv-file: the tokens it holds (else nothing) */
        if (!s && cfg->ctx.kv_file)
            fprintf(stderr, "subq serve: KV file %s: %d tokens held\n", cfg->ctx.kv_file, subq_context_n_past(sl->ctx));
        if (!s) plan_key(&cfg->plan, cfg->sparse, sl->plan_key, sizeof sl->plan_key);
    }
    if (!s) {
        e->cfg.ctx.n_ctx = subq_context_n_ctx(e->slots[0].ctx);
        if (pthread_create(&e->worker, NULL, worker, e)) {
            s = SUBQ_ERR_NOMEM;
            snprintf(err->msg, sizeof err->msg, "cannot start the worker thread");
            err->code = s;
        } else {
            e->worker_started = 1;
        }
    }
    if (s) {
        serve_engine_free(e);
        return s;
    }
    *out = e;
    return SUBQ_OK;
}

void serve_engine_stop(serve_engine *e) {
    pthread_mutex_lock(&e->mu);
    e->stopping = 1;
    for (int i = 0; i < e->q_len; i++) job_shutdown(e->queue[(e->q_head + i) % e->q_cap]);
    if (e->running) job_shutdown(e->running);
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    if (e->worker_started) pthread_join(e->worker, NULL);
    e->worker_started = 0;
}

void serve_engine_free(serve_engine *e) {
    if (!e) return;
    serve_engine_stop(e);
    for (int i = 0; e->slots && i < e->cfg.n_slots; i++) subq_context_free(e->slots[i].ctx);
    subq_context_free(e->mem.ctx);
    free(e->slots);
    free(e->queue);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e);
}
