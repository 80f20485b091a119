/* HTTP front of subq serve on libmicrohttpd (one thread per connection, so
 * a handler may block until its request is computed) with jansson for the
 * JSON. Responses follow OpenAI's API: JSON objects, or server-sent events
 * ("data: {...}\n\n" chunks, then "data: [DONE]") when stream is true.
 * A client that goes away is noticed while its request waits or streams
 * (the socket reads as closed): its job is cancelled and the slot freed.
 *
 * Slow and greedy clients: a watchdog thread closes every connection whose
 * request has not arrived whole within read_timeout_s of its start (the
 * first byte, or the end of the previous response on a kept-alive
 * connection), however steadily its bytes trickle in, and answers a
 * partial connection opened after its address's max_per_client oldest live
 * ones with a 429 before closing it. Beyond max_connections live connections
 * requests get 503 (libmicrohttpd's own limit sits higher, so that the
 * refusal can be sent at all: at its limit it stops accepting and clients
 * hang); /health is always answered. A body whose Content-Length is over
 * max_body gets its 413 from the head, without being waited for (what
 * comes of it is then read and dropped, so that a client still sending
 * reads the answer); after a large body the allocator gives its free pages
 * back (malloc_trim).
 *
 * Oversized heads: libmicrohttpd keeps a request's line and headers in a
 * per-connection memory pool and answers a head that outgrows it itself,
 * with an HTML page (431 or 414). The pool is raised to MEM_POOL so that
 * heads up to 1 MiB reach the handler, which refuses any over MAX_HEAD
 * with an OpenAI-shaped 431 (414 when the request line is at fault).
 * libmicrohttpd 0.9.75 has no hook to replace the bodies of the
 * errors it sends itself: heads beyond the pool, request lines with a space
 * but no HTTP/1.x version (400, or 505 for HTTP/0.x and 2+), header lines
 * without a colon and bad Content-Length values (400, 413) get its short
 * HTML; a request line without a space gets no answer (the connection is
 * closed). See README, subq serve. */
#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h> /* malloc_trim */
#endif

#include "serve.h"
#include "strbuf.h"

/* The request line and headers together may take MAX_HEAD bytes. MEM_POOL
 * holds a 1 MiB head (as Go's net/http limit) with room for libmicrohttpd's
 * records of it (a head of many short header lines needs more: those beyond
 * the pool still get its HTML). The pool is mmap'ed, but libmicrohttpd
 * zeroes all of it after each request: a kept-alive connection holds
 * MEM_POOL resident (the 128 connections of the default limit: 136 MiB). */
enum { MAX_HEAD = 64 << 10, MEM_POOL = (1 << 20) + (64 << 10) };

/* A live connection, as the watchdog sees it. */
typedef struct conn_track {
    int fd;
    char addr[INET6_ADDRSTRLEN];
    double t_request;          /* when its current request began */
    double t_open;
    int busy;                  /* its request arrived whole: being answered */
    int closed;                /* shut down by the watchdog */
    struct conn_track *prev, *next;
} conn_track;

struct serve_http {
    struct MHD_Daemon *d;
    serve_engine *e;
    serve_http_config cfg;
    _Atomic int streams;       /* streamed responses not yet finished */
    pthread_mutex_t mu;        /* conns, n_conns */
    conn_track *conns;
    int n_conns;
    pthread_t watchdog;
    int watchdog_started;
    _Atomic int stopping;
};

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct conn_state {
    strbuf body;
    size_t received;           /* body bytes read, kept or not */
    int too_large;
    unsigned long long unread; /* answered from the head: the body bytes declared, to drop when the answer is sent */
} conn_state;

/* After a body of this many bytes the allocator is trimmed: glibc kept
 * what large bodies (and their JSON) took, so that the resident size grew
 * by tens of MB (cmd_serve.c makes it one arena, which malloc_trim can
 * shrink whole). */
enum { TRIM_BODY = 1 << 20 };

/* ---- helpers ---------------------------------------------------------------- */

/* The peer closed its end (poll, then a peek: pending bytes are not a close). */
static int client_gone(int fd) {
    if (fd < 0) return 0;
    struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return 0;
    if (p.revents & (POLLHUP | POLLERR | POLLRDHUP | POLLNVAL)) return 1;
    char b;
    return recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

static int conn_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

/* Wait (j->mu held) up to 100 ms for the job to change. */
static void wait_a_little(serve_job *j) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 100 * 1000 * 1000;
    if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
    pthread_cond_timedwait(&j->cv, &j->mu, &ts);
}

/* Block until the job reaches `state` (or fails); 0, or -1 when the client
 * left (the job is cancelled then). */
static int wait_job(serve_job *j, int state, int fd) {
    pthread_mutex_lock(&j->mu);
    while (j->state < state && !j->http_status) {
        wait_a_little(j);
        if (j->state < state && client_gone(fd)) {
            j->cancelled = 1;
            pthread_mutex_unlock(&j->mu);
            return -1;
        }
    }
    pthread_mutex_unlock(&j->mu);
    return 0;
}

static enum MHD_Result send_text(struct MHD_Connection *c, unsigned status, char *body, const char *type) {
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", type);
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result send_json(struct MHD_Connection *c, unsigned status, json_t *o) {
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!s) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"code\":null}}";
        struct MHD_Response *r = MHD_create_response_from_buffer(sizeof oom - 1, (void *)oom, MHD_RESPMEM_PERSISTENT);
        enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_INTERNAL_SERVER_ERROR, r);
        MHD_destroy_response(r);
        return ret;
    }
    return send_text(c, status, s, "application/json");
}

/* A JSON string of text that should be UTF-8; other bytes become '?'. */
static json_t *jstr(const char *s, size_t n) {
    json_t *v = json_stringn(s, n);
    if (v) return v;
    char *copy = malloc(n + 1);
    if (!copy) return NULL;
    for (size_t i = 0; i < n; i++) copy[i] = (unsigned char)s[i] < 0x80 && s[i] ? s[i] : '?';
    v = json_stringn(copy, n);
    free(copy);
    return v;
}

/* OpenAI's error shape: {"error": {"message", "type", "param", "code"}};
 * param names the request field at fault, code a machine-readable reason
 * (either may be NULL: null). */
static json_t *error_object(int status, const char *msg, const char *param, const char *code) {
    const char *type = status == 401 ? "authentication_error" : status == 404 ? "not_found_error"
                     : status == 429 ? "rate_limit_error" : status >= 500 ? "server_error"
                     : "invalid_request_error";
    return json_pack("{s:{s:o,s:s,s:o,s:o}}", "error", "message", jstr(msg, strlen(msg)), "type", type, "param",
                     param && param[0] ? jstr(param, strlen(param)) : json_null(), "code",
                     code ? json_string(code) : json_null());
}

static enum MHD_Result send_error(struct MHD_Connection *c, int status, const char *msg) {
    return send_json(c, (unsigned)status, error_object(status, msg, NULL, NULL));
}

static enum MHD_Result send_error_param(struct MHD_Connection *c, int status, const char *msg, const char *param,
                                        const char *code) {
    return send_json(c, (unsigned)status, error_object(status, msg, param, code));
}

/* ---- responses ------------------------------------------------------------------ */

static json_t *usage_object(const serve_job *j) {
    return json_pack("{s:i,s:i,s:i,s:{s:i}}", "prompt_tokens", j->n_prompt, "completion_tokens", j->n_gen,
                     "total_tokens", j->n_prompt + j->n_gen, "prompt_tokens_details", "cached_tokens", j->n_cached);
}

/* llama-server's timings: where the time of this request went. */
static json_t *timings_object(const serve_job *j) {
    return json_pack("{s:i,s:f,s:i,s:f,s:f}", "prompt_n", j->n_decoded, "prompt_ms", (j->t_first - j->t_start) * 1e3,
                     "predicted_n", j->n_gen, "predicted_ms", (j->t_done - j->t_first) * 1e3, "queued_ms",
                     (j->t_start - j->t_submit) * 1e3);
}

static json_t *choice(const serve_job *j, json_t *text, const char *finish, int delta) {
    json_t *fr = finish ? json_string(finish) : json_null();
    if (!j->req.chat) return json_pack("{s:o,s:i,s:n,s:o}", "text", text, "index", 0, "logprobs", "finish_reason", fr);
    json_t *msg = text ? json_pack("{s:s,s:o}", "role", "assistant", "content", text) : json_object();
    if (delta && text) json_object_del(msg, "role");
    return json_pack("{s:i,s:o,s:o}", "index", 0, delta ? "delta" : "message", msg, "finish_reason", fr);
}

static json_t *envelope(const serve_engine *e, const serve_job *j, const char *object, json_t *choices) {
    return json_pack("{s:s,s:s,s:I,s:s,s:o}", "id", j->id, "object", object, "created", (json_int_t)j->created,
                     "model", serve_engine_model_name(e), "choices", choices);
}

static enum MHD_Result answer_whole(struct MHD_Connection *c, serve_engine *e, serve_job *j) {
    pthread_mutex_lock(&j->mu);
    json_t *o = envelope(e, j, j->req.chat ? "chat.completion" : "text_completion",
                         json_pack("[o]", choice(j, jstr(j->text ? j->text : "", j->text_len), j->finish, 0)));
    if (o) {
        json_object_set_new(o, "usage", usage_object(j));
        json_object_set_new(o, "timings", timings_object(j));
    }
    pthread_mutex_unlock(&j->mu);
    return send_json(c, MHD_HTTP_OK, o);
}

/* ---- streaming -------------------------------------------------------------------- */

typedef struct stream {
    serve_http *h;
    serve_engine *e;
    serve_job *j;
    int fd;
    strbuf out;           /* events ready to send ... */
    size_t out_off;       /* ... from here */
    size_t text_sent;     /* bytes of j->text already sent */
    int started, ended;
} stream;

static void add_event(stream *s, json_t *o) {
    char *p = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    sb_puts(&s->out, "data: ");
    sb_puts(&s->out, p ? p : "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\"}}");
    sb_puts(&s->out, "\n\n");
    free(p);
}

static json_t *chunk(stream *s, json_t *text, const char *finish) {
    const serve_job *j = s->j;
    return envelope(s->e, j, j->req.chat ? "chat.completion.chunk" : "text_completion",
                    json_pack("[o]", choice(j, text, finish, 1)));
}

/* Wait for more text or the end, and turn it into events. 0, or -1 when the
 * client left. */
static int next_events(stream *s) {
    serve_job *j = s->j;
    if (!s->started) { /* chat streams open with the assistant's role */
        s->started = 1;
        if (j->req.chat) {
            json_t *o = chunk(s, NULL, NULL);
            json_t *d = json_object_get(json_array_get(json_object_get(o, "choices"), 0), "delta");
            json_object_set_new(d, "role", json_string("assistant"));
            json_object_set_new(d, "content", json_string(""));
            add_event(s, o);
            return 0;
        }
    }
    pthread_mutex_lock(&j->mu);
    if (j->state != JOB_DONE && client_gone(s->fd)) { /* checked while text flows too: stop generating at once */
        j->cancelled = 1;
        pthread_mutex_unlock(&j->mu);
        return -1;
    }
    while (j->text_len == s->text_sent && j->state != JOB_DONE) {
        wait_a_little(j);
        if (j->text_len == s->text_sent && j->state != JOB_DONE && client_gone(s->fd)) {
            j->cancelled = 1;
            pthread_mutex_unlock(&j->mu);
            return -1;
        }
    }
    if (j->text_len > s->text_sent) {
        add_event(s, chunk(s, jstr(j->text + s->text_sent, j->text_len - s->text_sent), NULL));
        s->text_sent = j->text_len;
    }
    if (j->state == JOB_DONE) {
        if (j->http_status) {
            add_event(s, error_object(j->http_status, j->error, NULL, NULL));
        } else {
            add_event(s, chunk(s, j->req.chat ? NULL : json_string(""), j->finish));
            if (j->req.include_usage) {
                json_t *o = envelope(s->e, j, j->req.chat ? "chat.completion.chunk" : "text_completion", json_array());
                if (o) json_object_set_new(o, "usage", usage_object(j));
                add_event(s, o);
            }
        }
        sb_puts(&s->out, "data: [DONE]\n\n");
        s->ended = 1;
    }
    pthread_mutex_unlock(&j->mu);
    return 0;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    stream *s = cls;
    while (s->out_off == s->out.n) {
        if (s->ended || s->out.oom) return MHD_CONTENT_READER_END_OF_STREAM;
        s->out.n = s->out_off = 0;
        if (next_events(s)) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    size_t n = s->out.n - s->out_off < max ? s->out.n - s->out_off : max;
    memcpy(buf, s->out.p + s->out_off, n);
    s->out_off += n;
    return (ssize_t)n;
}

/* The response is gone (sent, or the connection dropped): stop the job. */
static void stream_free(void *cls) {
    stream *s = cls;
    serve_job_cancel(s->j);
    serve_job_release(s->j);
    sb_free(&s->out);
    atomic_fetch_sub(&s->h->streams, 1);
    free(s);
}

static enum MHD_Result answer_stream(struct MHD_Connection *c, serve_http *h, serve_job *j, int fd) {
    stream *s = calloc(1, sizeof *s);
    if (!s) {
        serve_job_release(j);
        return send_error(c, 500, "out of memory");
    }
    atomic_fetch_add(&h->streams, 1);
    s->h = h;
    s->e = h->e;
    s->j = j;
    s->fd = fd;
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, s, stream_free);
    if (!r) {
        stream_free(s);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
}

/* ---- routes ------------------------------------------------------------------------- */

static enum MHD_Result completions(struct MHD_Connection *c, serve_http *h, const conn_state *cs, int chat) {
    char msg[512], param[64];
    serve_request req;
    if (serve_parse_request(cs->body.p ? cs->body.p : "", cs->body.n, chat, &req, msg, sizeof msg, param, sizeof param))
        return send_error_param(c, 400, msg, param, NULL);
    const char *served = serve_engine_model_name(h->e);
    if (req.model && strcmp(req.model, served)) {
        snprintf(msg, sizeof msg, "the model '%.200s' is not served here (this server runs '%.200s')", req.model,
                 served);
        serve_request_free(&req);
        return send_error_param(c, 400, msg, "model", "model_not_found");
    }
    int status = 0, fd = conn_fd(c), stream_it = req.stream;
    serve_job *j = serve_submit(h->e, &req, &status, msg, sizeof msg);
    if (!j) return send_error(c, status, msg);
    /* errors found before the first token are plain HTTP errors, also when streaming */
    if (wait_job(j, stream_it ? JOB_RUNNING : JOB_DONE, fd)) {
        serve_job_release(j);
        return MHD_NO; /* nobody to answer */
    }
    pthread_mutex_lock(&j->mu);
    int failed = j->http_status;
    snprintf(msg, sizeof msg, "%s", j->error);
    pthread_mutex_unlock(&j->mu);
    if (failed) {
        serve_job_release(j);
        return failed == 499 ? MHD_NO : send_error(c, failed, msg);
    }
    if (stream_it) return answer_stream(c, h, j, fd);
    enum MHD_Result ret = answer_whole(c, h->e, j);
    serve_job_release(j);
    return ret;
}

static json_t *model_object(serve_http *h) {
    return json_pack("{s:s,s:s,s:I,s:s}", "id", serve_engine_model_name(h->e), "object", "model", "created",
                     (json_int_t)0, "owned_by", "subq");
}

static enum MHD_Result models(struct MHD_Connection *c, serve_http *h) {
    return send_json(c, MHD_HTTP_OK, json_pack("{s:s,s:[o]}", "object", "list", "data", model_object(h)));
}

/* GET /v1/models/{id} (the client's models.retrieve) */
static enum MHD_Result model_by_id(struct MHD_Connection *c, serve_http *h, const char *id) {
    if (!strcmp(id, serve_engine_model_name(h->e))) return send_json(c, MHD_HTTP_OK, model_object(h));
    char msg[512];
    snprintf(msg, sizeof msg, "the model '%.200s' does not exist here (this server runs '%.200s')", id,
             serve_engine_model_name(h->e));
    return send_error_param(c, 404, msg, "model", "model_not_found");
}

/* Constant-time comparison of the bearer token. */
static int authorized(struct MHD_Connection *c, const char *key) {
    if (!key) return 1;
    const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!v || strncmp(v, "Bearer ", 7)) return 0;
    v += 7;
    size_t n = strlen(v), k = strlen(key);
    unsigned diff = (unsigned)(n != k);
    for (size_t i = 0; i < k; i++) diff |= (unsigned)(unsigned char)key[i] ^ (unsigned)(unsigned char)(i < n ? v[i] : 0);
    return diff == 0;
}

static enum MHD_Result add_field_bytes(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    *(size_t *)cls += strlen(key) + (value ? strlen(value) : 0) + 4; /* "key: value\r\n" */
    return MHD_YES;
}

/* A head over MAX_HEAD is refused: its status (0: none), message and code:
 * 431, or 414 when the header fields alone fit (the request line is at
 * fault). */
static int head_error(struct MHD_Connection *c, char *msg, size_t cap, const char **code) {
    size_t fields = 0;
    MHD_get_connection_values(c, MHD_HEADER_KIND, add_field_bytes, &fields);
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
    const size_t head = ci && ci->header_size > fields ? ci->header_size : fields;
    if (head <= MAX_HEAD) return 0;
    if (fields > MAX_HEAD) {
        snprintf(msg, cap, "request header fields of %zu bytes, more than the %d this server accepts", fields,
                 MAX_HEAD);
        *code = "request_header_fields_too_large";
        return 431;
    }
    snprintf(msg, cap, "request line and headers of %zu bytes, more than the %d this server accepts", head, MAX_HEAD);
    *code = "uri_too_long";
    return 414;
}

/* The Content-Length the client declares, 0 when none (libmicrohttpd has
 * checked that it is a number; chunked bodies declare none). */
static unsigned long long declared_length(struct MHD_Connection *c) {
    const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (!v) return 0;
    char *end;
    errno = 0;
    const unsigned long long n = strtoull(v, &end, 10);
    return end == v ? 0 : errno == ERANGE ? ULLONG_MAX : n;
}

/* A request answered from its head still has its body coming: libmicrohttpd
 * reads none of it and closes once the answer is sent, and a close with
 * bytes unread resets the connection, so that a client still sending got a
 * send error instead of the answer. Read and drop the body first (as
 * nginx's lingering close): until the declared bytes have come, a second
 * passes without one, read_timeout_s has passed, or the server stops. */
static void drain_body(serve_http *h, struct MHD_Connection *c, unsigned long long left) {
    const int fd = conn_fd(c);
    const double end = mono_s() + h->cfg.read_timeout_s;
    char buf[16384];
    while (fd >= 0 && left > 0 && !atomic_load(&h->stopping)) {
        const double now = mono_s();
        if (now >= end) break;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, end - now > 1 ? 1000 : (int)((end - now) * 1e3) + 1) <= 0) break;
        const ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n <= 0) break; /* the client closed (or reset): nothing more to drop */
        left -= (unsigned long long)n < left ? (unsigned long long)n : left;
    }
}

static conn_track *track_of(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

static enum MHD_Result route(struct MHD_Connection *c, serve_http *h, const char *url, const char *method,
                             const conn_state *cs) {
    int get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    if (!strcmp(url, "/health")) return get ? send_json(c, 200, json_pack("{s:s}", "status", "ok"))
                                            : send_error(c, 405, "use GET");
    pthread_mutex_lock(&h->mu);
    const int n_conns = h->n_conns;
    pthread_mutex_unlock(&h->mu);
    if (n_conns > h->cfg.max_connections) {
        char msg[160];
        snprintf(msg, sizeof msg, "the server holds %d connections, more than its limit of %d: retry later", n_conns,
                 h->cfg.max_connections);
        return send_error(c, 503, msg);
    }
    int chat = !strcmp(url, "/v1/chat/completions"), cmpl = !strcmp(url, "/v1/completions");
    int list = !strcmp(url, "/v1/models"), one = !strncmp(url, "/v1/models/", 11) && url[11];
    if (!chat && !cmpl && !list && !one) return send_error(c, 404, "no such endpoint");
    if (!authorized(c, h->cfg.api_key)) return send_error(c, 401, "invalid or missing API key (Authorization: Bearer KEY)");
    if (list) return get ? models(c, h) : send_error(c, 405, "use GET");
    if (one) return get ? model_by_id(c, h, url + 11) : send_error(c, 405, "use GET");
    if (!post) return send_error(c, 405, "use POST");
    if (cs->too_large) {
        char msg[128];
        snprintf(msg, sizeof msg, "request body larger than %zu bytes", h->cfg.max_body);
        return send_error(c, 413, msg);
    }
    return completions(c, h, cs, chat);
}

/* The request is to be answered: the read deadline no longer applies, and
 * the watchdog leaves the connection alone. 0 when the watchdog has closed
 * it already (it may have answered 429 on the socket: nothing more is sent). */
static int take_request(serve_http *h, struct MHD_Connection *c) {
    conn_track *t = track_of(c);
    if (!t) return 1;
    pthread_mutex_lock(&h->mu);
    const int closed = t->closed;
    t->busy = !closed;
    pthread_mutex_unlock(&h->mu);
    return !closed;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    serve_http *h = cls;
    conn_state *cs = *con_cls;
    if (!cs) { /* headers only: set up the body buffer */
        if (!(cs = calloc(1, sizeof *cs))) return MHD_NO;
        *con_cls = cs;
        /* a head too large, or a body declared larger than max_body, is
         * answered now, before any body arrives: the client does not wait
         * for its timeout (libmicrohttpd then reads no body and closes;
         * what comes of it is dropped first, drain_body) */
        char msg[160];
        const char *code = NULL;
        const int status = head_error(c, msg, sizeof msg, &code);
        const unsigned long long declared = declared_length(c);
        if (!status && declared <= h->cfg.max_body) return MHD_YES;
        if (!take_request(h, c)) return MHD_NO;
        cs->unread = declared; /* dropped once the answer is sent (drain_body) */
        if (status) return send_error_param(c, status, msg, NULL, code);
        cs->too_large = 1;
        return route(c, h, url, method, cs); /* 413, unless the route answers first (404, 401, 405) */
    }
    if (*upload_size) { /* a piece of the body; the whole of a too large one (chunked) is read and dropped */
        cs->received += *upload_size;
        if (!cs->too_large && cs->body.n + *upload_size <= h->cfg.max_body) sb_put(&cs->body, upload, *upload_size);
        else cs->too_large = 1;
        *upload_size = 0;
        return MHD_YES;
    }
    if (!take_request(h, c)) return MHD_NO;
    if (cs->body.oom) return send_error(c, 500, "out of memory");
    return route(c, h, url, method, cs);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    serve_http *h = cls;
    conn_state *cs = *con_cls;
    /* the answer is sent; the connection is still busy, which the watchdog leaves alone */
    if (cs && cs->unread && toe == MHD_REQUEST_TERMINATED_COMPLETED_OK) drain_body(h, c, cs->unread);
    conn_track *t = track_of(c);
    if (t) { /* a kept-alive connection's next request starts now */
        pthread_mutex_lock(&h->mu);
        t->busy = 0;
        t->t_request = mono_s();
        pthread_mutex_unlock(&h->mu);
    }
    if (!cs) return;
    const int trim = cs->received > TRIM_BODY;
    sb_free(&cs->body);
    free(cs);
    *con_cls = NULL;
#ifdef __GLIBC__
    if (trim) malloc_trim(0); /* the body, its JSON and its copies are freed: give the pages back */
#else
    (void)trim;
#endif
}

/* MHD_OPTION_NOTIFY_CONNECTION: every connection is tracked from its start. */
static void connection_event(void *cls, struct MHD_Connection *c, void **socket_context,
                             enum MHD_ConnectionNotificationCode toe) {
    serve_http *h = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        conn_track *t = calloc(1, sizeof *t);
        if (!t) return; /* untracked: the watchdog leaves it alone */
        t->fd = conn_fd(c);
        t->t_open = t->t_request = mono_s();
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        const struct sockaddr *sa = ci ? ci->client_addr : NULL;
        if (sa && sa->sa_family == AF_INET)
            inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, t->addr, sizeof t->addr);
        else if (sa && sa->sa_family == AF_INET6)
            inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, t->addr, sizeof t->addr);
        pthread_mutex_lock(&h->mu);
        t->next = h->conns;
        if (h->conns) h->conns->prev = t;
        h->conns = t;
        h->n_conns++;
        pthread_mutex_unlock(&h->mu);
        *socket_context = t;
    } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED && *socket_context) {
        conn_track *t = *socket_context;
        pthread_mutex_lock(&h->mu);
        if (t->prev) t->prev->next = t->next;
        else h->conns = t->next;
        if (t->next) t->next->prev = t->prev;
        h->n_conns--;
        pthread_mutex_unlock(&h->mu);
        free(t);
        *socket_context = NULL;
    }
}

/* Shut a connection's socket: its thread sees the close and ends it. */
static void close_track(conn_track *t) {
    if (t->fd >= 0) shutdown(t->fd, SHUT_RDWR);
    t->closed = 1;
}

/* Answer a partial connection that is one too many for its address with a
 * 429 in OpenAI's shape, then close it. Its request has not arrived whole,
 * so libmicrohttpd writes nothing to it and its handler will not answer
 * (take_request): the answer goes straight to the socket, without waiting
 * (a few hundred bytes into an empty send buffer). h->mu held. */
static void refuse_extra(conn_track *t, int held, int limit) {
    char msg[200];
    snprintf(msg, sizeof msg, "this address holds %d connections, more than the %d per client this server allows: "
             "retry later", held, limit);
    json_t *o = error_object(429, msg, NULL, "too_many_connections");
    char *body = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    strbuf out = {0};
    if (body) {
        char head[200];
        snprintf(head, sizeof head, "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\n"
                 "Content-Length: %zu\r\nRetry-After: 1\r\nConnection: close\r\n\r\n", strlen(body));
        sb_puts(&out, head);
        sb_puts(&out, body);
    }
    if (t->fd >= 0 && out.n && !out.oom) (void)send(t->fd, out.p, out.n, MSG_DONTWAIT | MSG_NOSIGNAL);
    sb_free(&out);
    free(body);
    close_track(t);
}

/* Ten times a second: requests past their deadline, and the partial
 * connections an address holds beyond max_per_client. An address keeps its
 * max_per_client oldest live connections; a partial one newer than those is
 * refused once it is half a second old (younger ones are left to finish
 * arriving), so a 429 never falls on a connection that came in under the
 * limit. */
static void *watchdog_main(void *arg) {
    serve_http *h = arg;
    while (!atomic_load(&h->stopping)) {
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
        const double now = mono_s();
        pthread_mutex_lock(&h->mu);
        for (conn_track *t = h->conns; t; t = t->next)
            if (!t->busy && !t->closed && now - t->t_request > h->cfg.read_timeout_s) close_track(t);
        for (conn_track *t = h->conns; t; t = t->next) { /* the list is newest first */
            if (t->closed || t->busy || now - t->t_open < 0.5) continue;
            int older = 0, held = 0; /* live connections of t's address opened before t; all of them */
            for (conn_track *u = t->next; u; u = u->next) older += !u->closed && !strcmp(u->addr, t->addr);
            for (conn_track *u = h->conns; u; u = u->next) held += !u->closed && !strcmp(u->addr, t->addr);
            if (older >= h->cfg.max_per_client) refuse_extra(t, held, h->cfg.max_per_client);
        }
        pthread_mutex_unlock(&h->mu);
    }
    return NULL;
}

subq_status serve_http_start(serve_engine *e, const serve_http_config *cfg, serve_http **out, int *port,
                             subq_error *err) {
    *out = NULL;
    struct sockaddr_in a4 = {0};
    struct sockaddr_in6 a6 = {0};
    struct sockaddr *addr;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD;
    if (inet_pton(AF_INET, cfg->host, &a4.sin_addr) == 1) {
        a4.sin_family = AF_INET;
        a4.sin_port = htons((uint16_t)cfg->port);
        addr = (struct sockaddr *)&a4;
    } else if (inet_pton(AF_INET6, cfg->host, &a6.sin6_addr) == 1) {
        a6.sin6_family = AF_INET6;
        a6.sin6_port = htons((uint16_t)cfg->port);
        addr = (struct sockaddr *)&a6;
        flags |= MHD_USE_IPv6;
    } else {
        snprintf(err->msg, sizeof err->msg, "host '%s' is not an IPv4 or IPv6 address", cfg->host);
        return err->code = SUBQ_ERR_ARG;
    }
    serve_http *h = calloc(1, sizeof *h);
    if (!h) return err->code = SUBQ_ERR_NOMEM;
    h->e = e;
    h->cfg = *cfg;
    pthread_mutex_init(&h->mu, NULL);
    /* room above the cap for the 503s (and /health) */
    const unsigned mhd_limit = (unsigned)cfg->max_connections + (unsigned)(cfg->max_connections > 16 ? cfg->max_connections : 16);
    h->d = MHD_start_daemon(flags, (uint16_t)cfg->port, NULL, NULL, handler, h, MHD_OPTION_SOCK_ADDR, addr,
                            MHD_OPTION_CONNECTION_LIMIT, mhd_limit, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)120,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)MEM_POOL,
                            MHD_OPTION_NOTIFY_COMPLETED, completed, h, MHD_OPTION_NOTIFY_CONNECTION,
                            connection_event, h, MHD_OPTION_END);
    if (h->d && pthread_create(&h->watchdog, NULL, watchdog_main, h) == 0) h->watchdog_started = 1;
    else if (h->d) {
        MHD_stop_daemon(h->d);
        h->d = NULL;
    }
    if (!h->d) {
        pthread_mutex_destroy(&h->mu);
        free(h);
        snprintf(err->msg, sizeof err->msg, "cannot listen on %s port %d (in use, or not an address of this machine)",
                 cfg->host, cfg->port);
        return err->code = SUBQ_ERR_IO;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    *port = di ? di->port : cfg->port;
    *out = h;
    return SUBQ_OK;
}

void serve_http_stop(serve_http *h) {
    if (!h) return;
    /* streams whose jobs have ended get up to two seconds to send their last
     * events (a shutdown's error event among them) before the sockets close */
    MHD_socket listen = MHD_quiesce_daemon(h->d);
    for (int i = 0; i < 200 && atomic_load(&h->streams) > 0; i++) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    atomic_store(&h->stopping, 1);
    if (h->watchdog_started) pthread_join(h->watchdog, NULL);
    MHD_stop_daemon(h->d);
    if (listen != MHD_INVALID_SOCKET) close(listen);
    pthread_mutex_destroy(&h->mu);
    free(h);
}
