/* Top-k by a min-heap of the k best seen so far: the root is the worst kept
 * element, so each new element is compared with it once and replaces it
 * when better. A final heap sort gives the order best-first. The scan runs
 * from the last element to the first: attention over keys in time order
 * grows toward the recent end, and a forward scan would replace the root
 * (and sift) at almost every element. Long vectors are cut into blocks
 * first, and only the blocks that can hold one of the k best are scanned
 * (below). The result does not depend on the order (better() is a strict
 * total order). */
#include "train/search/topk.h"

#include <math.h>

#include "base/kth.h"

/* at most this many blocks (of 32 values or more) in the block pass */
#define TOPK_BLOCKS 256

/* a ranks before b: larger value, or equal value and lower index */
static int better(const float *v, int a, int b) { return v[a] > v[b] || (v[a] == v[b] && a < b); }

static void swap_int(int *a, int *b) {
    int t = *a;
    *a = *b;
    *b = t;
}

/* restore the heap property (root = worst) below position i of heap[0..n) */
static void sift_down(const float *v, int *heap, int n, int i) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && better(v, heap[w], heap[l])) w = l;
        if (r < n && better(v, heap[w], heap[r])) w = r;
        if (w == i) return;
        swap_int(&heap[i], &heap[w]);
        i = w;
    }
}

/* ... and above position i, after heap[i] was appended */
static void sift_up(const float *v, int *heap, int i) {
    while (i > 0 && better(v, heap[(i - 1) / 2], heap[i])) {
        swap_int(&heap[i], &heap[(i - 1) / 2]);
        i = (i - 1) / 2;
    }
}

int topk_indices(const float *v, int n, int k, int *idx) {
    if (k > n) k = n;
    if (k <= 0) return 0;
    /* Blocks of B values: the k-th largest block maximum L bounds the k-th
     * largest value from below (the maxima are k values >= L), so a block
     * whose maximum is below L holds none of the k best. A trained model's
     * attention rises and falls along the keys, and the heap was replaced at
     * most of them (8% of train-search). */
    int B = 32;
    while ((n + B - 1) / B > TOPK_BLOCKS) B *= 2;
    const int nb = (n + B - 1) / B;
    float bmax[TOPK_BLOCKS], sel[TOPK_BLOCKS], bound = -INFINITY;
    if (nb > k) {
        for (int b = 0; b < nb; b++) {
            const int end = (b + 1) * B < n ? (b + 1) * B : n;
            float m = v[b * B];
            for (int i = b * B + 1; i < end; i++) m = v[i] > m ? v[i] : m;
            bmax[b] = sel[b] = m;
        }
        bound = kth_largest_f32(sel, nb, k);
    }
    int m = 0; /* heap size */
    for (int b = nb - 1; b >= 0; b--) {
        if (nb > k && !(bmax[b] >= bound)) continue;
        const int end = (b + 1) * B < n ? (b + 1) * B : n;
        for (int i = end - 1; i >= b * B; i--) {
            if (m < k) {
                idx[m] = i;
                sift_up(v, idx, m++);
            } else if (better(v, i, idx[0])) {
                idx[0] = i;
                sift_down(v, idx, k, 0);
            }
        }
    }
    /* heap sort: repeatedly move the worst to the end -> best-first order */
    for (int end = m - 1; end > 0; end--) {
        swap_int(&idx[0], &idx[end]);
        sift_down(v, idx, end, 0);
    }
    return m;
}
