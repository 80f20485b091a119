/* The two top-k structures of the selectors: a bounded heap (few pairs,
 * per-query batches) and a 2k buffer cut by quickselect (long scans). */
#include <stdlib.h>
#include <string.h>

#include "select/select_internal.h"

/* ---- bounded top-k heap -------------------------------------------------- */

/* pair a is worse than pair b: lower score, or equal score and higher slot */
static int worse(float sa, int32_t ja, float sb, int32_t jb) { return sa < sb || (sa == sb && ja > jb); }

static void heap_swap(select_heap *h, int a, int b) {
    float s = h->score[a];
    int32_t j = h->slot[a];
    h->score[a] = h->score[b];
    h->slot[a] = h->slot[b];
    h->score[b] = s;
    h->slot[b] = j;
}

/* restore "root = worst" below position i of heap[0..n) */
static void heap_down(select_heap *h, int n, int i) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && worse(h->score[l], h->slot[l], h->score[w], h->slot[w])) w = l;
        if (r < n && worse(h->score[r], h->slot[r], h->score[w], h->slot[w])) w = r;
        if (w == i) return;
        heap_swap(h, i, w);
        i = w;
    }
}

void select_heap_push(select_heap *h, float score, int32_t slot) {
    if (h->k <= 0) return;
    if (h->n < h->k) {
        /* append and sift up while worse than the parent */
        int i = h->n++;
        h->score[i] = score;
        h->slot[i] = slot;
        while (i > 0) {
            int p = (i - 1) / 2;
            if (!worse(h->score[i], h->slot[i], h->score[p], h->slot[p])) break;
            heap_swap(h, i, p);
            i = p;
        }
        return;
    }
    if (!worse(h->score[0], h->slot[0], score, slot)) return;
    h->score[0] = score;
    h->slot[0] = slot;
    heap_down(h, h->n, 0);
}

int select_heap_take(select_heap *h, int32_t *out, float *scores) {
    int n = h->n;
    /* heap sort: move the worst to the end each time -> best-first order */
    for (int end = n - 1; end > 0; end--) {
        heap_swap(h, 0, end);
        heap_down(h, end, 0);
    }
    for (int i = 0; i < n; i++) {
        out[i] = h->slot[i];
        if (scores) scores[i] = h->score[i];
    }
    h->n = 0;
    return n;
}



static int32_t key_slot(uint64_t key) { return (int32_t)~(uint32_t)key; }

float select_key_score(uint64_t key) {
    uint32_t u = (uint32_t)(key >> 32);
    u = u & 0x80000000u ? u & 0x7FFFFFFFu : ~u;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Partition a[lo, hi] about the pivot p, which the caller moved to a[hi]:
 * the keys above it first, then p (its position returned), then the
 * others. Branch-free either way. In place, each step loads a slot the step
 * before may have stored (a chain of store-to-load forwards); through a
 * copy (tmp: hi - lo keys), the two write positions are registers, four
 * times as fast for a cut of 1024. */
static int partition_in_place(uint64_t *a, int lo, int hi, uint64_t p) {
    int at = lo; /* keys above the pivot go to [lo, at) */
    for (int i = lo; i < hi; i++) {
        const uint64_t x = a[i], y = a[at];
        const int gt = x > p;
        a[at] = gt ? x : y;
        a[i] = gt ? y : x;
        at += gt;
    }
    a[hi] = a[at];
    a[at] = p;
    return at;
}

static int partition_copy(uint64_t *a, int lo, int hi, uint64_t p, uint64_t *tmp) {
    /* above the pivot to tmp's front, the others to its back: each key is
     * stored at both ends and kept where its side's position moves on */
    const int len = hi - lo;
    int at = 0, bt = len - 1;
    for (int i = lo; i < hi; i++) {
        const uint64_t x = a[i];
        const int gt = x > p;
        tmp[at] = x;
        tmp[bt] = x;
        at += gt;
        bt -= !gt;
    }
    memcpy(a + lo, tmp, (size_t)at * sizeof(uint64_t));
    a[lo + at] = p;
    memcpy(a + lo + at + 1, tmp + at, (size_t)(len - at) * sizeof(uint64_t));
    return lo + at;
}

/* Ranges up to CUT_COPY keys partition through a copy (tmp, on the
 * caller's stack). */
enum { CUT_COPY = 2048 };

/* Partition a[lo, hi] about its middle key; returns the key's position. */
static int partition_mid(uint64_t *a, int lo, int hi, uint64_t *tmp) {
    const int mid = lo + (hi - lo) / 2;
    const uint64_t p = a[mid];
    a[mid] = a[hi];
    a[hi] = p;
    return hi - lo <= CUT_COPY ? partition_copy(a, lo, hi, p, tmp) : partition_in_place(a, lo, hi, p);
}

/* Keep the k largest of the n keys held, in any order: quickselect with
 * the middle key as pivot (keys are distinct: every slot is offered once). */
void select_topk_cut(topk_buf *t, int k) {
    uint64_t *a = t->key, tmp[CUT_COPY];
    int lo = 0, hi = t->n - 1;
    while (k < t->n && lo < hi) {
        const int at = partition_mid(a, lo, hi, tmp);
        if (at == k - 1 || at == k) break;
        if (at > k) hi = at - 1;
        else lo = at + 1;
    }
    if (t->n > k) t->n = k;
}

uint64_t select_topk_cut_worst(topk_buf *t, int k) {
    select_topk_cut(t, k);
    uint64_t w = t->key[0];
    for (int i = 1; i < t->n; i++) w = t->key[i] < w ? t->key[i] : w;
    return w;
}

/* a[lo, hi] from the largest key down: quicksort with select_topk_cut's
 * partitions, the smaller side first, insertion sort below 16 keys (no
 * comparison callback: qsort's took a twentieth of an int4 query for 128) */
static void sort_desc(uint64_t *a, int lo, int hi, uint64_t *tmp) {
    while (hi - lo >= 16) {
        const int at = partition_mid(a, lo, hi, tmp);
        if (at - lo < hi - at) {
            sort_desc(a, lo, at - 1, tmp);
            lo = at + 1;
        } else {
            sort_desc(a, at + 1, hi, tmp);
            hi = at - 1;
        }
    }
    for (int i = lo + 1; i <= hi; i++) {
        const uint64_t x = a[i];
        int j = i;
        for (; j > lo && a[j - 1] < x; j--) a[j] = a[j - 1];
        a[j] = x;
    }
}

/* The k best pairs into out (and scores, if not NULL), best first when
 * sorted; returns the count. */
int select_topk_take(topk_buf *t, int sorted, int32_t *out, float *scores) {
    select_topk_cut(t, t->k);
    if (sorted && t->n > 1) {
        uint64_t tmp[CUT_COPY];
        sort_desc(t->key, 0, t->n - 1, tmp);
    }
    for (int i = 0; i < t->n; i++) {
        out[i] = key_slot(t->key[i]);
        if (scores) scores[i] = select_key_score(t->key[i]);
    }
    return t->n;
}

