#include "base/error.h"

#include <stdarg.h>
#include <stdio.h>

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
    }
    return "unknown error";
}

subq_status subq_fail(subq_error *err, subq_status code, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        /* Messages are one line whatever text they quote (a layer list, a
         * file name, a metadata string). */
        for (char *c = err->msg; *c; c++)
            if (*c == '\n' || *c == '\r') *c = ' ';
        err->code = code;
    }
    return code;
}

void subq_error_clear(subq_error *err) {
    if (err) {
        err->code = SUBQ_OK;
        err->msg[0] = '\0';
    }
}
