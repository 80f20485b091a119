/* A growable byte string for building prompts and responses. Appends after
 * a failed allocation are ignored and remembered in `oom`. */
#ifndef SUBQ_STRBUF_H
#define SUBQ_STRBUF_H

#include <stddef.h>

typedef struct strbuf {
    char *p;        /* NUL-terminated while not oom */
    size_t n, cap;
    int oom;
} strbuf;

void sb_put(strbuf *b, const char *s, size_t n);
void sb_puts(strbuf *b, const char *s);
/* The string (caller frees), or NULL after a failed allocation; b is emptied. */
char *sb_take(strbuf *b);
void sb_free(strbuf *b);

#endif
