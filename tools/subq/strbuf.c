#include "strbuf.h"

#include <stdlib.h>
#include <string.h>

void sb_put(strbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

void sb_puts(strbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

char *sb_take(strbuf *b) {
    if (!b->oom && !b->p) sb_put(b, "", 0);
    char *p = b->oom ? NULL : b->p;
    if (b->oom) free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
    b->oom = 0;
    return p;
}

void sb_free(strbuf *b) {
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
    b->oom = 0;
}
