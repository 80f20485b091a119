/* A small recursive-descent JSON reader (RFC 8259), enough to find one
 * string member of an object. Nesting is limited so hostile input cannot
 * exhaust the stack. */
#include "data/jsonl.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "tokenize/utf8.h"

#define MAX_DEPTH 64

typedef struct jp {
    const char *s;
    size_t n, i;
    subq_error *err;
} jp;

static subq_status bad(jp *p, const char *what) {
    return subq_fail(p->err, SUBQ_ERR_FORMAT, "invalid JSON at column %zu: %s", p->i + 1, what);
}

static void ws(jp *p) {
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\r' || p->s[p->i] == '\n')) p->i++;
}

static int hex4(jp *p, unsigned *v) {
    if (p->i + 4 > p->n) return 0;
    unsigned x = 0;
    for (int k = 0; k < 4; k++) {
        char c = p->s[p->i + k];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return 0;
        x = x << 4 | (unsigned)d;
    }
    p->i += 4;
    *v = x;
    return 1;
}

static size_t put_utf8(char *o, unsigned cp) {
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | cp >> 6);
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12);
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18);
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Parse a string at p->i (opening quote). If `out` is not NULL, decode into a
 * malloc'd buffer (escapes never grow the text: \uXXXX is 6 bytes for at most
 * 3 of UTF-8, a surrogate pair 12 for 4). */
static subq_status string(jp *p, char **out, size_t *out_len) {
    if (p->i >= p->n || p->s[p->i] != '"') return bad(p, "expected a string");
    p->i++;
    char *o = NULL;
    size_t k = 0;
    if (out) {
        o = malloc(p->n - p->i + 1);
        if (!o) return subq_fail(p->err, SUBQ_ERR_NOMEM, "out of memory");
    }
    for (;;) {
        if (p->i >= p->n) {
            free(o);
            return bad(p, "unterminated string");
        }
        unsigned char c = (unsigned char)p->s[p->i++];
        if (c == '"') break;
        if (c < 0x20) {
            free(o);
            p->i--;
            return bad(p, "control character inside a string");
        }
        if (c >= 0x80) { /* JSON text is UTF-8: pass whole characters, refuse broken ones */
            int l = utf8_decode((const uint8_t *)p->s + p->i - 1, p->n - p->i + 1, NULL);
            if (l == 0) {
                free(o);
                p->i--;
                return bad(p, "invalid UTF-8 inside a string");
            }
            if (o) memcpy(o + k, p->s + p->i - 1, (size_t)l), k += (size_t)l;
            p->i += (size_t)l - 1;
            continue;
        }
        if (c != '\\') {
            if (o) o[k++] = (char)c;
            continue;
        }
        if (p->i >= p->n) {
            free(o);
            return bad(p, "unterminated escape");
        }
        char e = p->s[p->i++];
        char lit = e == '"' ? '"' : e == '\\' ? '\\' : e == '/' ? '/' : e == 'b' ? '\b' : e == 'f' ? '\f'
                 : e == 'n' ? '\n' : e == 'r' ? '\r' : e == 't' ? '\t' : 0;
        if (lit) {
            if (o) o[k++] = lit;
            continue;
        }
        unsigned cp, lo;
        if (e != 'u' || !hex4(p, &cp)) {
            free(o);
            return bad(p, "bad escape sequence");
        }
        if (cp >= 0xD800 && cp < 0xDC00) { /* high surrogate: a low one must follow */
            if (p->i + 2 > p->n || p->s[p->i] != '\\' || p->s[p->i + 1] != 'u') {
                free(o);
                return bad(p, "unpaired UTF-16 surrogate");
            }
            p->i += 2;
            if (!hex4(p, &lo) || lo < 0xDC00 || lo >= 0xE000) {
                free(o);
                return bad(p, "unpaired UTF-16 surrogate");
            }
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        } else if (cp >= 0xDC00 && cp < 0xE000) {
            free(o);
            return bad(p, "unpaired UTF-16 surrogate");
        }
        if (o) k += put_utf8(o + k, cp);
    }
    if (o) {
        o[k] = '\0';
        *out = o;
        *out_len = k;
    }
    return SUBQ_OK;
}

static subq_status value(jp *p, int depth);

static subq_status container(jp *p, int depth, char close) {
    if (depth > MAX_DEPTH) return bad(p, "nested too deeply");
    p->i++; /* '{' or '[' */
    ws(p);
    if (p->i < p->n && p->s[p->i] == close) {
        p->i++;
        return SUBQ_OK;
    }
    for (;;) {
        subq_status s;
        ws(p);
        if (close == '}') {
            if ((s = string(p, NULL, NULL))) return s;
            ws(p);
            if (p->i >= p->n || p->s[p->i] != ':') return bad(p, "expected ':'");
            p->i++;
        }
        if ((s = value(p, depth + 1))) return s;
        ws(p);
        if (p->i < p->n && p->s[p->i] == ',') {
            p->i++;
            continue;
        }
        if (p->i < p->n && p->s[p->i] == close) {
            p->i++;
            return SUBQ_OK;
        }
        return bad(p, close == '}' ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static subq_status value(jp *p, int depth) {
    ws(p);
    if (p->i >= p->n) return bad(p, "expected a value");
    char c = p->s[p->i];
    if (c == '"') return string(p, NULL, NULL);
    if (c == '{') return container(p, depth, '}');
    if (c == '[') return container(p, depth, ']');
    static const char *lits[] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++) {
        size_t L = strlen(lits[i]);
        if (p->n - p->i >= L && !memcmp(p->s + p->i, lits[i], L)) {
            p->i += L;
            return SUBQ_OK;
        }
    }
    /* number: -? int frac? exp? */
    size_t i0 = p->i;
    if (p->s[p->i] == '-') p->i++;
    size_t digits = 0;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++, digits++;
    if (!digits) {
        p->i = i0;
        return bad(p, "expected a value");
    }
    if (p->i < p->n && p->s[p->i] == '.') {
        p->i++;
        digits = 0;
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++, digits++;
        if (!digits) return bad(p, "bad number");
    }
    if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
        p->i++;
        if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-')) p->i++;
        digits = 0;
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++, digits++;
        if (!digits) return bad(p, "bad number");
    }
    return SUBQ_OK;
}

subq_status jsonl_text(const char *line, size_t len, char **out, size_t *out_len, int *found, subq_error *err) {
    jp p = {.s = line, .n = len, .i = 0, .err = err};
    *out = NULL;
    *out_len = 0;
    *found = 0;
    subq_status s;
    ws(&p);
    if (p.i >= p.n || p.s[p.i] != '{') return bad(&p, "a JSON-lines record must be an object");
    p.i++;
    ws(&p);
    if (p.i < p.n && p.s[p.i] == '}') {
        p.i++;
    } else {
        for (;;) {
            ws(&p);
            char *key = NULL;
            size_t klen = 0;
            if ((s = string(&p, &key, &klen))) goto fail;
            int is_text = klen == 4 && !memcmp(key, "text", 4);
            free(key);
            ws(&p);
            if (p.i >= p.n || p.s[p.i] != ':') {
                s = bad(&p, "expected ':'");
                goto fail;
            }
            p.i++;
            ws(&p);
            if (is_text && !*found) {
                if (p.i >= p.n || p.s[p.i] != '"') {
                    s = bad(&p, "\"text\" must be a string");
                    goto fail;
                }
                if ((s = string(&p, out, out_len))) goto fail;
                *found = 1;
            } else if ((s = value(&p, 1))) {
                goto fail;
            }
            ws(&p);
            if (p.i < p.n && p.s[p.i] == ',') {
                p.i++;
                continue;
            }
            if (p.i < p.n && p.s[p.i] == '}') {
                p.i++;
                break;
            }
            s = bad(&p, "expected ',' or '}'");
            goto fail;
        }
    }
    ws(&p);
    if (p.i != p.n) {
        s = bad(&p, "trailing characters after the object");
        goto fail;
    }
    return SUBQ_OK;
fail:
    free(*out);
    *out = NULL;
    *out_len = 0;
    *found = 0;
    return s;
}
