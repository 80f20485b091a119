/* The coarse-to-fine block scan: the exact selector's prefill queries once
 * a batch sees many keys (issue 45). The batched full scan scores every
 * earlier key for every query, N^2 / 2 products over a prompt of N tokens.
 * Here the keys are grouped in contiguous blocks of B slots, in slot order,
 * each summarised by the mean of its stored keys:
 *
 *   score of block b for query q   s_b = q . mean_{j in b} k_j = mean_{j in b} q . k_j
 *
 * (the block's average score, the gate MoBA ranks blocks by). A batch of
 * queries scores every block summary with one sgemm per chunk of blocks;
 * each query keeps its nprobe best blocks, scores exactly the eligible
 * keys of those and of its last, partial block, and keeps its K best. Per
 * query that is d x N / B products for the summaries plus d x B x nprobe
 * for the keys: the quadratic term is the full scan's divided by B.
 *
 * What it gives up is recall: a block with one strong key among weak ones
 * can rank below a block of middling keys. In a search space part rotated
 * by position, neighbouring keys are alike, which is what makes contiguous
 * blocks a fair grouping; `check` measures the recall against the full
 * scan (bench, subq_context_stats). The answer of a query never depends on
 * keys at or past its n_slots: a block is ranked only when it lies wholly
 * below, and the rest is scanned exactly. */
#include <stdlib.h>

#include "base/blas.h"
#include "select/select_internal.h"

/* Blocks per sgemm: n x 1024 scores. */
#define SUMMARY_CHUNK 1024

/* The full blocks below nb that hold a slot of the ranges [lo, hi), as at
 * most 3 sorted, disjoint block ranges [blo, bhi). */
static int block_ranges(const int *lo, const int *hi, int nr, int block, int nb, int *blo, int *bhi) {
    int n = 0;
    for (int r = 0; r < nr; r++) {
        int a = lo[r] / block, e = (hi[r] + block - 1) / block;
        if (e > nb) e = nb;
        if (n && a < bhi[n - 1]) a = bhi[n - 1]; /* a block shared with the range before */
        if (e > a) blo[n] = a, bhi[n] = e, n++;
    }
    return n;
}

/* Offer the eligible slots of [a, e) (within one block: at most `block`
 * rows) to t; returns the rows scored. dots, at: scratch of `block`. */
static int64_t scan_rows(const select_rows *r, const select_mask *m, const int *lo, const int *hi, int nr, int a, int e,
                         float *dots, int32_t *at, topk_buf *t) {
    int64_t scored = 0;
    for (int q = 0; q < nr; q++) {
        const int x = lo[q] > a ? lo[q] : a, y = hi[q] < e ? hi[q] : e;
        if (y <= x) continue;
        select_offer_run(r, m, x, y - x, dots, at, t);
        scored += y - x;
    }
    return scored;
}

int select_block_topk_batch(selector *s, int n, const float *qn, const select_rows *rows, const float *sums,
                            int block, int nprobe, int count, const select_mask *m, int k, int check,
                            int32_t *out, int *got, int n_threads) {
    const int d = rows->d;
    int nb_max = 0; /* full blocks any query may rank */
    for (int i = 0; i < n; i++) {
        const int v = (m[i].n_slots < count ? m[i].n_slots : count) / block;
        nb_max = v > nb_max ? v : nb_max;
    }
    const int chunk = nb_max < SUMMARY_CHUNK ? (nb_max > 0 ? nb_max : 1) : SUMMARY_CHUNK;
    float *S = select_query_realloc(s, NULL, (size_t)n * chunk * sizeof(float));
    float *hs = select_query_realloc(s, NULL, (size_t)n * nprobe * sizeof(float));
    int32_t *hb = select_query_realloc(s, NULL, (size_t)n * nprobe * sizeof(int32_t));
    select_heap *h = select_query_realloc(s, NULL, (size_t)n * sizeof(select_heap));
    uint64_t *keys = select_query_realloc(s, NULL, (size_t)n * 2 * k * sizeof(uint64_t));
    float *dots = select_query_realloc(s, NULL, (size_t)n * block * sizeof(float));
    int32_t *idx = select_query_realloc(s, NULL, (size_t)n * (chunk > block ? chunk : block) * sizeof(int32_t));
    int rc = !S || !hs || !hb || !h || !keys || !dots || !idx ? -1 : 0;
    const kernels *K = kernels_get();
    for (int i = 0; !rc && i < n; i++)
        h[i] = (select_heap){.score = hs + (size_t)i * nprobe, .slot = hb + (size_t)i * nprobe, .k = nprobe};

    /* 1. each query's nprobe best blocks by their summaries */
    for (int c0 = 0; !rc && c0 < nb_max; c0 += chunk) {
        const int c1 = c0 + chunk < nb_max ? c0 + chunk : nb_max, nc = c1 - c0;
        blas_sgemm(n_threads, 0, 1, n, nc, d, 1.0f, qn, d, sums + (size_t)c0 * d, d, 0.0f, S, nc);
#pragma omp parallel for num_threads(n_threads) schedule(static) if (n * nc >= 1 << 16)
        for (int i = 0; i < n; i++) {
            int lo[3], hi[3], blo[3], bhi[3];
            const int nr = select_mask_ranges(&m[i], count, lo, hi);
            const int nb = (m[i].n_slots < count ? m[i].n_slots : count) / block;
            const int nbr = block_ranges(lo, hi, nr, block, nb, blo, bhi);
            const float *row = S + (size_t)i * nc - c0;
            int32_t *at = idx + (size_t)i * chunk;
            for (int q = 0; q < nbr; q++) {
                int a = blo[q] > c0 ? blo[q] : c0;
                const int e = bhi[q] < c1 ? bhi[q] : c1;
                for (; a < e && h[i].n < h[i].k; a++) select_heap_push(&h[i], row[a], a);
                /* a full heap: only scores that reach its worst may enter */
                const int nat = a < e ? K->index_at_least(row + a, e - a, h[i].score[0], at) : 0;
                for (int c = 0; c < nat; c++) select_heap_push(&h[i], row[a + at[c]], a + at[c]);
            }
        }
    }

    /* 2. the keys of those blocks and of the partial one, exactly */
    int64_t scored = 0;
#pragma omp parallel for num_threads(n_threads) schedule(dynamic, 8) reduction(+ : scored) if (!rc)
    for (int i = 0; i < n; i++) {
        if (rc) continue;
        int lo[3], hi[3];
        const int nr = select_mask_ranges(&m[i], count, lo, hi);
        const int vis = m[i].n_slots < count ? m[i].n_slots : count;
        select_rows r = *rows;
        r.q = qn + (size_t)i * d;
        topk_buf t = {.key = keys + (size_t)i * 2 * k, .k = k};
        float *dt = dots + (size_t)i * block;
        int32_t *at = idx + (size_t)i * (chunk > block ? chunk : block);
        /* best block first: the buffer's threshold rises early, and fewer
         * of the later rows enter it */
        int32_t *blocks = h[i].slot;
        const int nbk = select_heap_take(&h[i], blocks, NULL);
        for (int c = 0; c < nbk; c++)
            scored += scan_rows(&r, &m[i], lo, hi, nr, blocks[c] * block, (blocks[c] + 1) * block, dt, at, &t);
        scored += scan_rows(&r, &m[i], lo, hi, nr, vis / block * block, vis, dt, at, &t);
        got[i] = select_topk_take(&t, 0, out + (size_t)i * k, NULL); /* in any order (selector.h) */
    }
    s->stats.n_visited += scored + (int64_t)n * nb_max;
    s->stats.bytes_read += (uint64_t)scored * rows->row_bytes + (uint64_t)nb_max * d * sizeof(float);

    /* 3. recall against the full scan, for every check-th query */
    select_scratch sc = {0};
    int32_t *full = check > 0 && !rc ? select_query_realloc(s, NULL, (size_t)k * sizeof(int32_t)) : NULL;
    if (check > 0 && !rc && !full) rc = -1;
    for (int i = 0; !rc && check > 0 && i < n; i += check) {
        select_rows r = *rows;
        r.q = qn + (size_t)i * d;
        const selector_stats before = s->stats; /* the check is not the block scan's work */
        const int ne = select_scan_topk(s, &r, count, &m[i], k, 0, &sc, full);
        s->stats.n_visited = before.n_visited, s->stats.bytes_read = before.bytes_read;
        if (ne < 0) {
            rc = -1;
            break;
        }
        const int32_t *mine = out + (size_t)i * k;
        for (int a = 0; a < ne; a++) {
            int found = 0;
            for (int b = 0; b < got[i] && !found; b++) found = mine[b] == full[a];
            s->stats.n_check_found += found;
        }
        s->stats.n_check_keys += ne;
    }
    select_scratch_free(&sc);
    free(full);
    free(S);
    free(hs);
    free(hb);
    free(h);
    free(keys);
    free(dots);
    free(idx);
    return rc;
}
