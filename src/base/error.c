#include "base/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *subq_status_name(subq_status s) {
    switch (s) {
    case SUBQ_OK: return "ok";
    case SUBQ_ERR_IO: return "i/o error";
    case SUBQ_ERR_FORMAT: return "format error";
    case SUBQ_ERR_UNSUPPORTED: return "unsupported";
    case SUBQ_ERR_SHAPE: return "shape error";
    case SUBQ_ERR_NOMEM: return "out of memory";
    case SUBQ_ERR_ARG: return "invalid argument";
    case SUBQ_ERR_TOKENIZE: return "tokenizer error";
    case SUBQ_ERR_MISMATCH: return "model mismatch";
    case SUBQ_ERR_RANGE: return "out of range";
    case SUBQ_ERR_BUSY: return "in use";
    case SUBQ_ERR_CANCELLED: return "cancelled";
    }
    return "unknown error";
}

/* Length of the printable UTF-8 character at s[0..n): 1-4, or 0 when s[0]
 * is a control byte (below 0x20, 0x7f), starts a C1 control (U+0080 to
 * U+009F) or no valid sequence (overlong, surrogate, above U+10FFFF, cut). */
static size_t printable_char(const unsigned char *s, size_t n) {
    const unsigned char c = s[0];
    if (c < 0x20 || c == 0x7f) return 0;
    if (c < 0x80) return 1;
    size_t len;
    unsigned char lo = 0x80, hi = 0xbf; /* the range of the second byte */
    if (c >= 0xc2 && c <= 0xdf) len = 2;
    else if (c >= 0xe0 && c <= 0xef) len = 3, lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
    else if (c >= 0xf0 && c <= 0xf4) len = 4, lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
    else return 0;
    if (n < len || s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xbf) return 0;
    if (c == 0xc2 && s[1] <= 0x9f) return 0; /* C1 control */
    return len;
}

size_t text_escape(char *dst, size_t cap, const char *s, size_t n) {
    static const char hex[] = "0123456789abcdef";
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, j = 0;
    if (cap == 0) return 0;
    while (i < n) {
        const size_t len = printable_char(u + i, n - i);
        if (len > 0) {
            if (j + len >= cap) break;
            memcpy(dst + j, u + i, len);
            j += len, i += len;
        } else {
            if (j + 4 >= cap) break;
            dst[j] = '\\', dst[j + 1] = 'x', dst[j + 2] = hex[u[i] >> 4], dst[j + 3] = hex[u[i] & 15];
            j += 4, i++;
        }
    }
    dst[j] = '\0';
    return i;
}

subq_status subq_fail(subq_error *err, subq_status code, const char *fmt, ...) {
    if (err) {
        char msg[SUBQ_ERROR_MSG_MAX];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        /* Messages are one line whatever text they quote (a layer list, a
         * file name, a metadata string), and printable UTF-8: other bytes
         * from a file (a damaged tensor name) show as \xNN. */
        for (char *c = msg; *c; c++)
            if (*c == '\n' || *c == '\r') *c = ' ';
        text_escape(err->msg, sizeof err->msg, msg, strlen(msg));
        err->code = code;
    }
    return code;
}

