/* Top-k by a min-heap of the k best seen so far: the root is the worst kept
 * element, so each new element is compared with it once and replaces it
 * when better. A final heap sort gives the order best-first. The scan runs
 * from the last element to the first: attention over keys in time order
 * grows toward the recent end, and a forward scan would replace the root
 * (and sift) at almost every element. The result does not depend on the
 * order (better() is a strict total order). */
#include "train/search/topk.h"

/* a ranks before b: larger value, or equal value and lower index */
static int better(const float *v, int a, int b) { return v[a] > v[b] || (v[a] == v[b] && a < b); }

/* restore the heap property (root = worst) below position i of heap[0..n) */
static void sift_down(const float *v, int *heap, int n, int i) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && better(v, heap[w], heap[l])) w = l;
        if (r < n && better(v, heap[w], heap[r])) w = r;
        if (w == i) return;
        int tmp = heap[i];
        heap[i] = heap[w];
        heap[w] = tmp;
        i = w;
    }
}

int topk_indices(const float *v, int n, int k, int *idx) {
    if (k > n) k = n;
    if (k <= 0) return 0;
    /* heapify the last k, then let each earlier element challenge the root */
    for (int i = 0; i < k; i++) idx[i] = n - k + i;
    for (int i = k / 2 - 1; i >= 0; i--) sift_down(v, idx, k, i);
    for (int i = n - k - 1; i >= 0; i--) {
        if (better(v, i, idx[0])) {
            idx[0] = i;
            sift_down(v, idx, k, 0);
        }
    }
    /* heap sort: repeatedly move the worst to the end -> best-first order */
    for (int end = k - 1; end > 0; end--) {
        int tmp = idx[0];
        idx[0] = idx[end];
        idx[end] = tmp;
        sift_down(v, idx, end, 0);
    }
    return k;
}
