/* HTTP front of subq serve on libmicrohttpd (one thread per connection, so
 * a handler may block until its request is computed) with jansson for the
 * JSON. Responses follow OpenAI's API: JSON objects, or server-sent events
 * ("data: {...}\n\n" chunks, then "data: [DONE]") when stream is true.
 * A client that goes away is noticed while its request waits or streams
 * (the socket reads as closed): its job is cancelled and the slot freed. */
#include <arpa/inet.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "serve.h"
#include "strbuf.h"

struct serve_http {
    struct MHD_Daemon *d;
    serve_engine *e;
    serve_http_config cfg;
};

typedef struct conn_state {
    strbuf body;
    int too_large;
} conn_state;

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

static json_t *error_object(int status, const char *msg) {
    const char *type = status == 401 ? "authentication_error" : status == 404 ? "not_found_error"
                     : status >= 500 ? "server_error" : "invalid_request_error";
    return json_pack("{s:{s:o,s:s,s:n}}", "error", "message", jstr(msg, strlen(msg)), "type", type, "code");
}

static enum MHD_Result send_error(struct MHD_Connection *c, int status, const char *msg) {
    return send_json(c, (unsigned)status, error_object(status, msg));
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
            add_event(s, error_object(j->http_status, j->error));
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
    free(s);
}

static enum MHD_Result answer_stream(struct MHD_Connection *c, serve_engine *e, serve_job *j, int fd) {
    stream *s = calloc(1, sizeof *s);
    if (!s) {
        serve_job_release(j);
        return send_error(c, 500, "out of memory");
    }
    s->e = e;
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
    char msg[512];
    serve_request req;
    if (serve_parse_request(cs->body.p ? cs->body.p : "", cs->body.n, chat, &req, msg, sizeof msg))
        return send_error(c, 400, msg);
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
    if (stream_it) return answer_stream(c, h->e, j, fd);
    enum MHD_Result ret = answer_whole(c, h->e, j);
    serve_job_release(j);
    return ret;
}

static enum MHD_Result models(struct MHD_Connection *c, serve_http *h) {
    return send_json(c, MHD_HTTP_OK,
                     json_pack("{s:s,s:[{s:s,s:s,s:I,s:s}]}", "object", "list", "data", "id",
                               serve_engine_model_name(h->e), "object", "model", "created", (json_int_t)0,
                               "owned_by", "subq"));
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

static enum MHD_Result route(struct MHD_Connection *c, serve_http *h, const char *url, const char *method,
                             const conn_state *cs) {
    int get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    if (!strcmp(url, "/health")) return get ? send_json(c, 200, json_pack("{s:s}", "status", "ok"))
                                            : send_error(c, 405, "use GET");
    int chat = !strcmp(url, "/v1/chat/completions"), cmpl = !strcmp(url, "/v1/completions");
    int list = !strcmp(url, "/v1/models");
    if (!chat && !cmpl && !list) return send_error(c, 404, "no such endpoint");
    if (!authorized(c, h->cfg.api_key)) return send_error(c, 401, "invalid or missing API key (Authorization: Bearer KEY)");
    if (list) return get ? models(c, h) : send_error(c, 405, "use GET");
    if (!post) return send_error(c, 405, "use POST");
    if (cs->too_large) {
        char msg[128];
        snprintf(msg, sizeof msg, "request body larger than %zu bytes", h->cfg.max_body);
        return send_error(c, 413, msg);
    }
    return completions(c, h, cs, chat);
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    serve_http *h = cls;
    conn_state *cs = *con_cls;
    if (!cs) { /* headers only: set up the body buffer */
        if (!(cs = calloc(1, sizeof *cs))) return MHD_NO;
        *con_cls = cs;
        return MHD_YES;
    }
    if (*upload_size) { /* a piece of the body; the whole of a too large one is read and dropped */
        if (!cs->too_large && cs->body.n + *upload_size <= h->cfg.max_body) sb_put(&cs->body, upload, *upload_size);
        else cs->too_large = 1;
        *upload_size = 0;
        return MHD_YES;
    }
    if (cs->body.oom) return send_error(c, 500, "out of memory");
    return route(c, h, url, method, cs);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    conn_state *cs = *con_cls;
    if (!cs) return;
    sb_free(&cs->body);
    free(cs);
    *con_cls = NULL;
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
    h->d = MHD_start_daemon(flags, (uint16_t)cfg->port, NULL, NULL, handler, h, MHD_OPTION_SOCK_ADDR, addr,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)cfg->max_connections,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)120, MHD_OPTION_NOTIFY_COMPLETED, completed,
                            NULL, MHD_OPTION_END);
    if (!h->d) {
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
    MHD_stop_daemon(h->d);
    free(h);
}
