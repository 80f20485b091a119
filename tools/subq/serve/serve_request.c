/* Request bodies: OpenAI's completions and chat completions fields, read
 * with jansson and checked for type and range (OpenAI's own limits: at
 * most 4 stop strings, max_tokens at least 1). Every field is honoured or
 * refused with a 400 naming it: unknown fields, features this server does
 * not implement (logit_bias, response_format other than text, penalties,
 * n > 1, logprobs, ...) unless they carry their neutral value, tools and
 * functions whatever they hold (OpenAI refuses an empty list too), and
 * message roles other than system, developer (a system message), user and
 * assistant. Nothing is silently ignored but `user`, OpenAI's end-user id,
 * which changes no output. */
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"

static int fail(char *msg, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, cap, fmt, ap);
    va_end(ap);
    return -1;
}


/* The request's fields: honoured (parsed below), accepted only with the
 * value that asks for nothing this server lacks, or refused whatever they
 * hold but null (the client's "not given"). */
typedef enum { FIELD_HONOURED, FIELD_NEUTRAL, FIELD_REFUSED } field_kind;
typedef struct field {
    const char *name;
    field_kind kind;
    int chat;                 /* 0: both endpoints, 1: chat only, -1: completions only */
} field;

static const field fields[] = {
    {"model", FIELD_HONOURED, 0}, {"prompt", FIELD_HONOURED, -1}, {"messages", FIELD_HONOURED, 1},
    {"max_tokens", FIELD_HONOURED, 0}, {"max_completion_tokens", FIELD_HONOURED, 0}, {"temperature", FIELD_HONOURED, 0},
    {"top_p", FIELD_HONOURED, 0}, {"top_k", FIELD_HONOURED, 0}, {"seed", FIELD_HONOURED, 0},
    {"stream", FIELD_HONOURED, 0}, {"stream_options", FIELD_HONOURED, 0}, {"stop", FIELD_HONOURED, 0},
    {"n", FIELD_HONOURED, 0}, {"cache_prompt", FIELD_HONOURED, 0}, {"subq", FIELD_HONOURED, 0},
    {"user", FIELD_HONOURED, 0}, {"logprobs", FIELD_NEUTRAL, 0}, {"top_logprobs", FIELD_NEUTRAL, 1},
    {"echo", FIELD_NEUTRAL, -1}, {"best_of", FIELD_NEUTRAL, -1}, {"suffix", FIELD_NEUTRAL, -1},
    {"presence_penalty", FIELD_NEUTRAL, 0}, {"frequency_penalty", FIELD_NEUTRAL, 0},
    {"logit_bias", FIELD_NEUTRAL, 0}, {"response_format", FIELD_NEUTRAL, 1}, {"tools", FIELD_REFUSED, 1},
    {"tool_choice", FIELD_NEUTRAL, 1}, {"parallel_tool_calls", FIELD_NEUTRAL, 1}, {"functions", FIELD_REFUSED, 1},
    {"function_call", FIELD_NEUTRAL, 1}, {"store", FIELD_NEUTRAL, 1}, {"metadata", FIELD_NEUTRAL, 1},
    {"service_tier", FIELD_NEUTRAL, 0}, {"modalities", FIELD_NEUTRAL, 1}, {"reasoning_effort", FIELD_NEUTRAL, 1},
    {"prediction", FIELD_NEUTRAL, 1}, {"audio", FIELD_NEUTRAL, 1},
};

/* A value that asks for nothing: null, false, 0 (1 for best_of), an empty
 * string, array or object, the text response format, tool_choice "none",
 * service_tier "auto" / "default", modalities ["text"]. */
static int neutral(const char *key, json_t *v) {
    if (!v || json_is_null(v) || json_is_false(v)) return 1;
    if (json_is_integer(v) || json_is_real(v))
        return json_number_value(v) == (!strcmp(key, "best_of") || !strcmp(key, "n") ? 1.0 : 0.0);
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        return !s[0] || (!strcmp(key, "tool_choice") && !strcmp(s, "none")) ||
               (!strcmp(key, "service_tier") && (!strcmp(s, "auto") || !strcmp(s, "default")));
    }
    if (json_is_array(v)) {
        if (!strcmp(key, "modalities") && json_array_size(v) == 1) {
            json_t *m = json_array_get(v, 0);
            return json_is_string(m) && !strcmp(json_string_value(m), "text");
        }
        return json_array_size(v) == 0;
    }
    if (json_is_object(v)) {
        if (!strcmp(key, "response_format")) {
            json_t *t = json_object_get(v, "type");
            return json_object_size(v) == 1 && json_is_string(t) && !strcmp(json_string_value(t), "text");
        }
        return json_object_size(v) == 0;
    }
    return 0;
}

/* Every key of o is a field of this endpoint, and those this server does not
 * implement ask for nothing. */
static int check_fields(json_t *o, int chat, char *msg, size_t cap, char *param, size_t pcap) {
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v) {
        const field *f = NULL;
        for (size_t i = 0; i < sizeof fields / sizeof fields[0] && !f; i++)
            if (!strcmp(fields[i].name, key) && (fields[i].chat == 0 || (fields[i].chat == 1) == (chat != 0)))
                f = &fields[i];
        if (!f || (f->kind == FIELD_NEUTRAL && !neutral(key, v)) || (f->kind == FIELD_REFUSED && !json_is_null(v))) {
            snprintf(param, pcap, "%.*s", (int)(pcap > 0 ? pcap - 1 : 0), key);
            return fail(msg, cap, !f ? "unknown field '%.100s' for %s"
                                  : f->kind == FIELD_REFUSED ? "'%.100s' is not supported by this server (it calls "
                                                               "no tools or functions)"
                                  : "'%.100s' is not supported by this server (only its default, which asks for "
                                    "nothing, is accepted)", key, chat ? "/v1/chat/completions" : "/v1/completions");
        }
    }
    return 0;
}

static char *dup_str(const json_t *s) {
    size_t n = json_string_length(s);
    char *p = malloc(n + 1);
    if (p) {
        memcpy(p, json_string_value(s), n);
        p[n] = '\0';
    }
    return p;
}

/* A string without NUL bytes (they would end the text early in C). */
static int plain_string(const json_t *v) {
    return json_is_string(v) && strlen(json_string_value(v)) == json_string_length(v);
}

/* Optional number field in [lo, hi] into *out. */
static int get_number(json_t *o, const char *key, double lo, double hi, double *out, char *msg, size_t cap) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return fail(msg, cap, "'%s' must be a number", key);
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi)) return fail(msg, cap, "'%s' must be in [%g, %g], got %g", key, lo, hi, x);
    *out = x;
    return 1;
}

/* Optional integer field in [lo, hi]. */
static int get_int(json_t *o, const char *key, long lo, long hi, long *out, char *msg, size_t cap) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v)) return fail(msg, cap, "'%s' must be an integer", key);
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi) return fail(msg, cap, "'%s' must be in [%ld, %ld], got %lld", key, lo, hi, (long long)x);
    *out = (long)x;
    return 1;
}

static int get_bool(json_t *o, const char *key, int *out, char *msg, size_t cap) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return fail(msg, cap, "'%s' must be true or false", key);
    *out = json_is_true(v);
    return 1;
}

static int parse_stop(json_t *o, serve_request *r, char *msg, size_t cap) {
    json_t *v = json_object_get(o, "stop");
    if (!v || json_is_null(v)) return 0;
    json_t *one[1] = {v};
    json_t **items = one;
    size_t n = 1;
    if (json_is_array(v)) {
        n = json_array_size(v);
        if (n > SERVE_MAX_STOP)
            return fail(msg, cap, "'stop' holds at most %d strings, got %zu", SERVE_MAX_STOP, n);
        items = NULL;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *s = items ? items[i] : json_array_get(v, i);
        if (!plain_string(s)) return fail(msg, cap, "'stop' must be a string or an array of strings");
        size_t len = json_string_length(s);
        if (len == 0 || len > SERVE_MAX_STOP_LEN)
            return fail(msg, cap, "stop strings must have 1 to %d bytes", SERVE_MAX_STOP_LEN);
        if (!(r->stop[r->n_stop] = dup_str(s))) return fail(msg, cap, "out of memory");
        r->n_stop++;
    }
    return 0;
}

/* "content" as a string or as an array of {"type": "text", "text": ...} parts. */
static char *message_content(json_t *c, char *msg, size_t cap) {
    if (plain_string(c)) {
        char *p = dup_str(c);
        if (!p) fail(msg, cap, "out of memory");
        return p;
    }
    if (!json_is_array(c)) {
        fail(msg, cap, "message 'content' must be a string or an array of text parts");
        return NULL;
    }
    size_t total = 0, i;
    json_t *part;
    json_array_foreach(c, i, part) {
        json_t *type = json_object_get(part, "type"), *text = json_object_get(part, "text");
        if (!json_is_object(part) || !json_is_string(type) || strcmp(json_string_value(type), "text") ||
            !plain_string(text)) {
            fail(msg, cap, "message content parts must be {\"type\": \"text\", \"text\": STRING}");
            return NULL;
        }
        total += json_string_length(text);
    }
    char *p = malloc(total + 1);
    if (!p) {
        fail(msg, cap, "out of memory");
        return NULL;
    }
    size_t n = 0;
    json_array_foreach(c, i, part) {
        json_t *text = json_object_get(part, "text");
        memcpy(p + n, json_string_value(text), json_string_length(text));
        n += json_string_length(text);
    }
    p[n] = '\0';
    return p;
}

static int parse_messages(json_t *o, serve_request *r, char *msg, size_t cap, char *param, size_t pcap) {
    json_t *ms = json_object_get(o, "messages");
    if (!json_is_array(ms) || json_array_size(ms) == 0)
        return fail(msg, cap, "'messages' must be a non-empty array");
    if (json_array_size(ms) > 100000) return fail(msg, cap, "too many messages");
    r->msgs = calloc(json_array_size(ms), sizeof *r->msgs);
    if (!r->msgs) return fail(msg, cap, "out of memory");
    size_t i;
    json_t *m;
    json_array_foreach(ms, i, m) {
        json_t *role = json_object_get(m, "role");
        if (!json_is_object(m) || !plain_string(role) || json_string_length(role) == 0 ||
            json_string_length(role) > 64)
            return snprintf(param, pcap, "messages[%zu].role", i), fail(msg, cap, "message %zu needs a 'role' string", i);
        const char *rs = json_string_value(role);
        if (strcmp(rs, "system") && strcmp(rs, "developer") && strcmp(rs, "user") && strcmp(rs, "assistant"))
            return snprintf(param, pcap, "messages[%zu].role", i),
                   fail(msg, cap, "message %zu: role '%.64s' is not supported (system, developer, user, assistant)", i, rs);
        const char *mkey;
        json_t *mv;
        json_object_foreach(m, mkey, mv) {
            if (strcmp(mkey, "role") && strcmp(mkey, "content"))
                return snprintf(param, pcap, "messages[%zu].%.40s", i, mkey),
                       fail(msg, cap, "message %zu: field '%.64s' is not supported (role and content only)", i, mkey);
        }
        json_t *content = json_object_get(m, "content");
        if (!content) return snprintf(param, pcap, "messages[%zu].content", i), fail(msg, cap, "message %zu needs a 'content'", i);
        chat_msg *cm = &r->msgs[r->n_msgs++];
        /* developer messages are OpenAI's newer name for system messages */
        if (!(cm->role = strdup(strcmp(rs, "developer") ? rs : "system"))) return fail(msg, cap, "out of memory");
        if (json_is_null(content)) content = json_string("");
        else json_incref(content);
        cm->content = message_content(content, msg, cap);
        json_decref(content);
        if (!cm->content) return -1;
    }
    return 0;
}

/* The "subq" extension: {"dense": bool, "select": NAME, "topk": K,
 * "sink": N, "tail": N, "sparse_layers": "1-4", "far_pos": SCHEME,
 * "far_from": N}. */
static int parse_sparse(json_t *o, serve_sparse *s, char *msg, size_t cap) {
    json_t *x = json_object_get(o, "subq");
    s->select = s->top_k = s->n_sink = s->n_tail = s->far_pos = s->far_from = -1;
    if (!x || json_is_null(x)) return 0;
    if (!json_is_object(x)) return fail(msg, cap, "'subq' must be an object");
    s->given = 1;
    long v = 0;
    int rc;
    if (get_bool(x, "dense", &s->dense, msg, cap) < 0) return -1;
    json_t *sel = json_object_get(x, "select");
    if (sel && !json_is_null(sel)) {
        if (!json_is_string(sel) || (s->select = subq_selector_parse(json_string_value(sel))) < 0)
            return fail(msg, cap, "'subq.select' must be one of exact, hnsw, faiss, quest, oracle, window");
    }
    if ((rc = get_int(x, "topk", 0, 1 << 20, &v, msg, cap)) < 0) return -1;
    if (rc) s->top_k = (int)v;
    if ((rc = get_int(x, "sink", 0, 1 << 20, &v, msg, cap)) < 0) return -1;
    if (rc) s->n_sink = (int)v;
    if ((rc = get_int(x, "tail", 0, 1 << 20, &v, msg, cap)) < 0) return -1;
    if (rc) s->n_tail = (int)v;
    json_t *far = json_object_get(x, "far_pos");
    if (far && !json_is_null(far)) {
        if (!json_is_string(far) || (s->far_pos = subq_far_parse(json_string_value(far))) < 0)
            return fail(msg, cap, "'subq.far_pos' must be one of none, window, order, group");
    }
    if ((rc = get_int(x, "far_from", 1, 1 << 30, &v, msg, cap)) < 0) return -1;
    if (rc) s->far_from = (int)v;
    json_t *layers = json_object_get(x, "sparse_layers");
    if (layers && !json_is_null(layers)) {
        if (!plain_string(layers) || json_string_length(layers) > 256)
            return fail(msg, cap, "'subq.sparse_layers' must be a layer list such as \"all\" or \"2-10\"");
        if (!(s->layers = dup_str(layers))) return fail(msg, cap, "out of memory");
    }
    return 0;
}

static int parse_object(json_t *o, int chat, serve_request *r, char *msg, size_t cap, char *param, size_t pcap) {
    if (!json_is_object(o)) return fail(msg, cap, "the request body must be a JSON object");
    if (check_fields(o, chat, msg, cap, param, pcap)) return -1;
    json_t *model = json_object_get(o, "model");
    if (model && !json_is_null(model)) {
        if (!plain_string(model) || json_string_length(model) > 256)
            return snprintf(param, pcap, "model"), fail(msg, cap, "'model' must be a string");
        if (!(r->model = dup_str(model))) return fail(msg, cap, "out of memory");
    }
    json_t *user = json_object_get(o, "user");
    if (user && !json_is_null(user) && !json_is_string(user))
        return snprintf(param, pcap, "user"), fail(msg, cap, "'user' must be a string");
    if (chat) {
        if (parse_messages(o, r, msg, cap, param, pcap)) return -1;
    } else {
        json_t *p = json_object_get(o, "prompt");
        if (json_is_array(p) && json_array_size(p) == 1) p = json_array_get(p, 0); /* ["text"] */
        if (!plain_string(p)) return snprintf(param, pcap, "prompt"), fail(msg, cap, "'prompt' must be a string");
        if (!(r->prompt = dup_str(p))) return fail(msg, cap, "out of memory");
    }
    double x = 0;
    long v = 0;
    int rc;
    if ((rc = get_number(o, "temperature", 0, 100, &x, msg, cap)) < 0) return -1;
    if (rc) r->sp.temp = (float)x;
    if ((rc = get_number(o, "top_p", 0, 1, &x, msg, cap)) < 0) return -1;
    if (rc) r->sp.top_p = (float)x;
    if ((rc = get_int(o, "top_k", 0, 1 << 30, &v, msg, cap)) < 0) return -1;
    if (rc) r->sp.top_k = (int)v;
    json_t *seed = json_object_get(o, "seed");
    if (seed && !json_is_null(seed)) {
        if (!json_is_integer(seed)) return fail(msg, cap, "'seed' must be an integer");
        r->sp.seed = (uint64_t)json_integer_value(seed);
        r->has_seed = 1;
    }
    /* at least 1 (as OpenAI); absurd values are refused, large ones stop at
     * the context's end. max_completion_tokens is OpenAI's newer name: both
     * may be given, with one value. */
    long mct = 0;
    if ((rc = get_int(o, "max_tokens", 1, SERVE_MAX_TOKENS, &v, msg, cap)) < 0) return -1;
    if (rc) r->max_tokens = v;
    if ((rc = get_int(o, "max_completion_tokens", 1, SERVE_MAX_TOKENS, &mct, msg, cap)) < 0) return -1;
    if (rc && r->max_tokens >= 0 && mct != r->max_tokens)
        return snprintf(param, pcap, "max_completion_tokens"),
               fail(msg, cap, "'max_tokens' (%ld) and 'max_completion_tokens' (%ld) differ: give one", r->max_tokens,
                    mct);
    if (rc) r->max_tokens = mct;
    if (get_bool(o, "stream", &r->stream, msg, cap) < 0) return -1;
    if (get_bool(o, "cache_prompt", &r->cache_prompt, msg, cap) < 0) return -1;
    json_t *so = json_object_get(o, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) return fail(msg, cap, "'stream_options' must be an object");
        if (get_bool(so, "include_usage", &r->include_usage, msg, cap) < 0) return -1;
    }
    if ((rc = get_int(o, "n", 1, 1, &v, msg, cap)) < 0) return snprintf(param, pcap, "n"), fail(msg, cap, "only 'n': 1 is supported");
    json_t *lp = json_object_get(o, "logprobs");
    if (lp && !json_is_null(lp) && !json_is_false(lp)) return fail(msg, cap, "'logprobs' is not supported");
    if (parse_stop(o, r, msg, cap)) return -1;
    return parse_sparse(o, &r->sparse, msg, cap);
}

int serve_parse_request(const char *body, size_t len, int chat, serve_request *r, char *msg, size_t cap, char *param,
                        size_t pcap) {
    memset(r, 0, sizeof *r);
    if (pcap) param[0] = '\0';
    r->chat = chat;
    r->max_tokens = -1;
    r->cache_prompt = 1;
    r->sp = subq_sampler_default_params();
    json_error_t je;
    json_t *o = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!o) return fail(msg, cap, "invalid JSON at line %d, column %d: %s", je.line, je.column, je.text);
    int rc = parse_object(o, chat, r, msg, cap, param, pcap);
    /* the field checks name their field first: "'temperature' must be ..." */
    const char *q = rc && pcap && !param[0] && msg[0] == '\'' ? strchr(msg + 1, '\'') : NULL;
    if (q) snprintf(param, pcap, "%.*s", (int)(q - msg - 1), msg + 1);
    json_decref(o);
    if (rc) serve_request_free(r);
    return rc;
}

void serve_request_free(serve_request *r) {
    free(r->prompt);
    free(r->model);
    for (int i = 0; i < r->n_msgs; i++) {
        free(r->msgs[i].role);
        free(r->msgs[i].content);
    }
    free(r->msgs);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->sparse.layers);
    memset(r, 0, sizeof *r);
}
