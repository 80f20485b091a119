/* Top-k over the blocks of a vector that can hold one of the k best (below):
 * when few values there can, by a threshold (their k-th largest thr splits
 * the k best from the rest: those above thr, then those equal to it, lower
 * index first), else by a heap; the k are then sorted best-first. The
 * result does not depend on the method (better() is a strict total order). */
#include "train/search/topk.h"

#include <math.h>

#include "base/kth.h"
#include "kernels/kernels.h"

/* at most this many blocks (of 4 values or more) in the block pass */
#define TOPK_BLOCKS 256
/* the quickselect takes at most this many times k values; more go to the heap */
#define TOPK_CANDIDATES 8

/* a ranks before b: larger value, or equal value and lower index */
static int better(const float *v, int a, int b) { return v[a] > v[b] || (v[a] == v[b] && a < b); }

/* restore the heap property (root = worst) below position i of heap[0..n) */
static void sift_down(const float *v, int *heap, int n, int i) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && better(v, heap[w], heap[l])) w = l;
        if (r < n && better(v, heap[w], heap[r])) w = r;
        if (w == i) return;
        int t = heap[i];
        heap[i] = heap[w], heap[w] = t;
        i = w;
    }
}

/* ... and above position i, after heap[i] was appended */
static void sift_up(const float *v, int *heap, int i) {
    while (i > 0 && better(v, heap[(i - 1) / 2], heap[i])) {
        int t = heap[i];
        heap[i] = heap[(i - 1) / 2], heap[(i - 1) / 2] = t;
        i = (i - 1) / 2;
    }
}

/* The k best of the blocks b with bmax[b] >= bound by a min-heap of the k
 * best seen so far (the root is the worst kept: one compare per value),
 * scanned from the last value to the first: attention over keys in time
 * order grows toward the recent end, and a forward scan would replace the
 * root at almost every value. Returns how many (unordered). */
static int topk_heap(const float *v, int n, int k, int B, const float *bmax, float bound, int *idx) {
    int m = 0;
    for (int b = (n + B - 1) / B - 1; b >= 0; b--) {
        if (!(bmax[b] >= bound)) continue;
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
    return m;
}

int topk_indices(const float *v, int n, int k, int *idx, float *scratch) {
    if (k > n) k = n;
    if (k <= 0) return 0;
    /* Blocks of B values: the k-th largest block maximum L bounds the k-th
     * largest value from below (the maxima are k values >= L), so a block
     * whose maximum is below L holds none of the k best. A trained model's
     * attention rises and falls along the keys: few values reach L. */
    int B = 32;
    while ((n + B - 1) / B > TOPK_BLOCKS) B *= 2;
    /* short vectors: enough blocks for a bound */
    while (B > 4 && (n + B - 1) / B < 4 * k && 2 * ((n + B - 1) / B) <= TOPK_BLOCKS) B /= 2;
    const int nb = (n + B - 1) / B;
    float bmax[TOPK_BLOCKS], bound = -INFINITY;
    const kernels *K = kernels_get();
    for (int b = 0; b < nb; b++) {
        const int end = (b + 1) * B < n ? (b + 1) * B : n;
        bmax[b] = scratch[b] = K->max_f32(v + b * B, end - b * B, -INFINITY);
    }
    if (nb > k) bound = kth_largest_f32(scratch, nb, k);
    /* the values >= L; when they are few, thr = their k-th largest, else
     * (flat scores) the heap over the blocks that reach L */
    int nc = 0, m = 0;
    if (nb <= k && n > TOPK_CANDIDATES * k) nc = n; /* no bound (all are candidates): too many */
    for (int b = 0; b < nb && nc <= TOPK_CANDIDATES * k; b++) {
        if (!(bmax[b] >= bound)) continue;
        const int end = (b + 1) * B < n ? (b + 1) * B : n;
        for (int i = b * B; i < end; i++)
            if (v[i] >= bound) scratch[nc++] = v[i];
    }
    if (nc > TOPK_CANDIDATES * k) {
        m = topk_heap(v, n, k, B, bmax, bound, idx);
    } else {
        const float thr = kth_largest_f32(scratch, nc, k);
        for (int pass = 0; pass < 2 && m < k; pass++)
            for (int b = 0; b < nb && m < k; b++) {
                if (!(bmax[b] >= thr)) continue;
                const int end = (b + 1) * B < n ? (b + 1) * B : n;
                for (int i = b * B; i < end && m < k; i++)
                    if (pass == 0 ? v[i] > thr : v[i] == thr) idx[m++] = i;
            }
    }
    /* best first: insertion sort for a few, else heap sort (the worst at
     * the root goes to the end, repeatedly) */
    if (m <= 32) {
        for (int i = 1; i < m; i++) {
            const int x = idx[i];
            int j = i;
            for (; j > 0 && better(v, x, idx[j - 1]); j--) idx[j] = idx[j - 1];
            idx[j] = x;
        }
        return m;
    }
    for (int p = m / 2 - 1; p >= 0; p--) sift_down(v, idx, m, p);
    for (int end = m - 1; end > 0; end--) {
        const int t = idx[0];
        idx[0] = idx[end], idx[end] = t;
        sift_down(v, idx, end, 0);
    }
    return m;
}
