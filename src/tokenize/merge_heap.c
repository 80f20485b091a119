#include "tokenize/merge_heap.h"

#include <stdlib.h>

/* Higher score first, then the leftmost pair. */
static inline bool before(const merge_cand *x, const merge_cand *y) {
    return x->score > y->score || (x->score == y->score && x->left < y->left);
}

bool merge_heap_push(merge_heap *h, merge_cand c) {
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 256;
        merge_cand *a = realloc(h->a, cap * sizeof *a);
        if (!a) return false;
        h->a = a, h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!before(&c, &h->a[p])) break;
        h->a[i] = h->a[p];
        i = p;
    }
    h->a[i] = c;
    return true;
}

merge_cand merge_heap_pop(merge_heap *h) {
    merge_cand top = h->a[0], last = h->a[--h->n];
    size_t i = 0, n = h->n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && before(&h->a[c + 1], &h->a[c])) c++;
        if (!before(&h->a[c], &last)) break;
        h->a[i] = h->a[c];
        i = c;
    }
    if (n) h->a[i] = last;
    return top;
}

void merge_heap_free(merge_heap *h) {
    free(h->a);
    h->a = NULL;
    h->n = h->cap = 0;
}
