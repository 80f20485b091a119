/* Content clusters of far keys: an inverted file, as FAISS's IndexIVFFlat,
 * for the exact selector's prompt queries once far keys are scored without
 * their rotated dims (selector_params.far_rot, issue 56).
 *
 * The block scan (select_blocks.c) groups keys by position, which suits
 * the rotated search space (neighbouring keys are alike there) but not far
 * keys, ranked on the dims that do not turn with position: there, a block
 * is a mixture and its summaries lose its best keys as the prompt grows.
 * Here the first dc = d - far_rot dims of the stored keys are grouped by
 * their content into n lists:
 *
 *   train  centroids c_l by Lloyd's iterations on a strided sample of the
 *          keys held, each sample row x assigned to
 *            argmin_l |x - c_l|^2 = argmax_l (x . c_l - |c_l|^2 / 2)
 *          (one sgemm per chunk of rows)
 *   add    every key, then and later, to its nearest centroid's list: its
 *          dc dims as q8_0 codes (zero-padded to blocks of 32: half an
 *          f16 row) and its slot; lists are in slot order
 *   query  rank the lists by q . c_l (one sgemm for the batch), score the
 *          keys of the nprobe best lists that are far from the query (a
 *          prefix of each list: slots below its far_hi) by the integer
 *          GEMM of the prompt's weights (q8 queries against the codes),
 *          rank the best 2k of them again on the stored keys, score every
 *          eligible near key exactly, and keep the k best.
 *
 * Per query that is dc x n products for the centroids plus dc x (the keys
 * of nprobe lists); the lists are trained once, so they lengthen as the
 * prompt grows, as a FAISS IVF index that is added to does. The codes
 * are FAISS's IndexIVFScalarQuantizer with a refine step: int8 products
 * run 2-3x the rate of sgemm's at a list's 16-64 queries (VNNI). */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "base/blas.h"
#include "base/kth.h"
#include "base/pool.h"
#include "quant/quant.h"
#include "select/select_internal.h"

enum {
    KMEANS_ITERS = 8,     /* Lloyd's iterations */
    KMEANS_PER_LIST = 32, /* sample rows per list (FAISS's min_points_per_centroid is 39) */
    ROWS_CHUNK = 512      /* rows per sgemm against the centroids */
};

static size_t elem_bytes(const select_clusters *c) { return c->f16 ? sizeof(uint16_t) : sizeof(float); }

enum { CODE_BLOCK = 32 }; /* q8_0's */

/* dst[0..dq) = the dc values of x, then zeros (as the codes are padded) */
static void pad_to_code(float *dst, const float *x, int dc, int dq) {
    memcpy(dst, x, (size_t)dc * sizeof(float));
    memset(dst + dc, 0, (size_t)(dq - dc) * sizeof(float));
}

/* the first dc dims of rows [j0, j0 + n) of keys (rows of d, f16 or f32) as f32 into x [n][dc] */
static void rows_f32(const void *keys, int d, int f16, int dc, int j0, int n, float *x) {
    for (int t = 0; t < n; t++) {
        const size_t j = (size_t)(j0 + t);
        float *dst = x + (size_t)t * dc;
        if (f16) {
            const uint16_t *src = (const uint16_t *)keys + j * d;
            for (int c = 0; c < dc; c++) dst[c] = fp16_to_fp32(src[c]);
        } else {
            memcpy(dst, (const float *)keys + j * d, (size_t)dc * sizeof(float));
        }
    }
}

/* the nearest centroid of each of the n rows x [n][dc] into a, on the
 * calling thread; S: n x lists scratch */
static void assign(const select_clusters *c, const float *x, int n, float *S, int32_t *a) {
    const int L = c->n_lists;
    blas_sgemm(1, 0, 1, n, L, c->dc, 1.0f, x, c->dc, c->cent, c->dc, 0.0f, S, L);
    for (int i = 0; i < n; i++) {
        const float *s = S + (size_t)i * L;
        int best = 0;
        float top = s[0] - c->half_norm[0];
        for (int l = 1; l < L; l++)
            if (s[l] - c->half_norm[l] > top) top = s[l] - c->half_norm[l], best = l;
        a[i] = best;
    }
}

static void half_norms(select_clusters *c) {
    for (int l = 0; l < c->n_lists; l++) {
        const float *v = c->cent + (size_t)l * c->dc;
        double s = 0;
        for (int q = 0; q < c->dc; q++) s += (double)v[q] * v[q];
        c->half_norm[l] = (float)(s / 2);
    }
}

int select_clusters_lists(int clusters, int count) {
    return clusters < count / SELECT_CLUSTER_KEYS ? clusters : count / SELECT_CLUSTER_KEYS;
}

/* Lloyd's assignment step, one chunk of ROWS_CHUNK sample rows per pool
 * chunk, each with its thread's scratch: the pool's threads, not an
 * OpenMP team inside the sgemm, whose threads spin at every call's
 * barrier and stall it when another process holds one of the cores. */
typedef struct assign_job {
    const select_clusters *c;
    const float *x;
    int n;
    float *S; /* [threads][ROWS_CHUNK][lists] */
    int32_t *a;
} assign_job;

static void assign_chunk(void *ctx, int chunk, int thread) {
    const assign_job *j = ctx;
    const int i0 = chunk * ROWS_CHUNK, n = j->n - i0 < ROWS_CHUNK ? j->n - i0 : ROWS_CHUNK;
    assign(j->c, j->x + (size_t)i0 * j->c->dc, n, j->S + (size_t)thread * ROWS_CHUNK * j->c->n_lists, j->a + i0);
}

int select_clusters_train(select_clusters *c, int n_lists, int dc, int f16, const void *keys, int d, int count,
                          pool *pl) {
    select_clusters_free(c);
    const int ns = count < n_lists * KMEANS_PER_LIST ? count : n_lists * KMEANS_PER_LIST;
    if (n_lists < 1 || ns < n_lists) return 0; /* too few keys: stay untrained */
    if (dc > KV_MAX_HEAD_DIM - CODE_BLOCK) return 0; /* wider than a code row's scratch: the block scan serves */
    c->n_lists = n_lists, c->dc = dc, c->f16 = f16;
    c->dq = (dc + CODE_BLOCK - 1) / CODE_BLOCK * CODE_BLOCK;
    c->code_bytes = kernels_kv_row_bytes(SUBQ_KV_Q8_0, c->dq);
    float *x = malloc((size_t)ns * dc * sizeof(float));
    float *S = malloc((size_t)pool_threads(pl) * ROWS_CHUNK * n_lists * sizeof(float));
    double *sum = malloc((size_t)n_lists * dc * sizeof(double));
    int32_t *a = malloc((size_t)ns * sizeof(int32_t)), *cnt = malloc((size_t)n_lists * sizeof(int32_t));
    c->cent = malloc((size_t)n_lists * dc * sizeof(float));
    c->half_norm = malloc((size_t)n_lists * sizeof(float));
    c->len = calloc((size_t)n_lists, sizeof(int32_t));
    c->cap = calloc((size_t)n_lists, sizeof(int32_t));
    c->rows = calloc((size_t)n_lists, sizeof(void *));
    c->slots = calloc((size_t)n_lists, sizeof(int32_t *));
    int rc = x && S && sum && a && cnt && c->cent && c->half_norm && c->len && c->cap && c->rows && c->slots ? 0 : -1;
    if (!rc) {
        /* the sample: every count / ns-th key; the first centroids: every ns / n_lists-th of it */
        for (int i = 0; i < ns; i++) rows_f32(keys, d, f16, dc, (int)((int64_t)i * count / ns), 1, x + (size_t)i * dc);
        for (int l = 0; l < n_lists; l++)
            memcpy(c->cent + (size_t)l * dc, x + (size_t)((int64_t)l * ns / n_lists) * dc, (size_t)dc * sizeof(float));
    }
    assign_job j = {.c = c, .x = x, .n = ns, .S = S, .a = a};
    for (int it = 0; !rc && it < KMEANS_ITERS; it++) {
        half_norms(c);
        pool_run(pl, (ns + ROWS_CHUNK - 1) / ROWS_CHUNK, assign_chunk, &j);
        /* c_l = the mean of its rows; an empty list takes a row of the sample */
        memset(sum, 0, (size_t)n_lists * dc * sizeof(double));
        memset(cnt, 0, (size_t)n_lists * sizeof(int32_t));
        for (int i = 0; i < ns; i++) {
            cnt[a[i]]++;
            for (int q = 0; q < dc; q++) sum[(size_t)a[i] * dc + q] += x[(size_t)i * dc + q];
        }
        for (int l = 0; l < n_lists; l++) {
            float *v = c->cent + (size_t)l * dc;
            if (!cnt[l]) {
                memcpy(v, x + (size_t)(((int64_t)l * 7919 + it) % ns) * dc, (size_t)dc * sizeof(float));
                continue;
            }
            for (int q = 0; q < dc; q++) v[q] = (float)(sum[(size_t)l * dc + q] / cnt[l]);
        }
    }
    if (!rc) half_norms(c);
    free(x);
    free(S);
    free(sum);
    free(a);
    free(cnt);
    if (rc) select_clusters_free(c);
    return rc;
}

/* append key slot's dc dims x (f32) to list l as q8_0 codes */
static int list_push(select_clusters *c, int l, const float *x, int32_t slot) {
    if (c->len[l] == c->cap[l]) {
        const int cap = c->cap[l] ? 2 * c->cap[l] : 16;
        void *r = realloc(c->rows[l], (size_t)cap * c->code_bytes);
        if (r) c->rows[l] = r;
        int32_t *s = r ? realloc(c->slots[l], (size_t)cap * sizeof(int32_t)) : NULL;
        if (!s) return -1;
        c->slots[l] = s;
        c->bytes += (size_t)(cap - c->cap[l]) * (c->code_bytes + sizeof(int32_t));
        c->cap[l] = cap;
    }
    float row[KV_MAX_HEAD_DIM];
    pad_to_code(row, x, c->dc, c->dq);
    kernels_kv_from_f32(SUBQ_KV_Q8_0, row, (char *)c->rows[l] + (size_t)c->len[l] * c->code_bytes, c->dq);
    c->slots[l][c->len[l]++] = slot;
    return 0;
}

int select_clusters_add(select_clusters *c, const void *keys, int d, int to) {
    if (!c->n_lists || to <= c->count) return 0;
    const int n = to - c->count < ROWS_CHUNK ? to - c->count : ROWS_CHUNK;
    float *x = malloc((size_t)n * c->dc * sizeof(float)), *S = malloc((size_t)n * c->n_lists * sizeof(float));
    int32_t *a = malloc((size_t)n * sizeof(int32_t));
    int rc = x && S && a ? 0 : -1;
    while (!rc && c->count < to) {
        const int j0 = c->count, nb = to - j0 < n ? to - j0 : n;
        rows_f32(keys, d, c->f16, c->dc, j0, nb, x);
        assign(c, x, nb, S, a);
        for (int t = 0; t < nb && !rc; t++)
            rc = list_push(c, a[t], x + (size_t)t * c->dc, j0 + t);
        if (rc) select_clusters_truncate(c, j0); /* none of the chunk: a later call adds it whole */
        else c->count = j0 + nb;
    }
    free(x);
    free(S);
    free(a);
    return rc;
}

void select_clusters_truncate(select_clusters *c, int n_keep) {
    for (int l = 0; l < c->n_lists; l++)
        while (c->len[l] > 0 && c->slots[l][c->len[l] - 1] >= n_keep) c->len[l]--;
    if (c->count > n_keep) c->count = n_keep;
}

void select_clusters_free(select_clusters *c) {
    for (int l = 0; c->rows && l < c->n_lists; l++) free(c->rows[l]);
    for (int l = 0; c->slots && l < c->n_lists; l++) free(c->slots[l]);
    free(c->rows);
    free(c->slots);
    free(c->len);
    free(c->cap);
    free(c->cent);
    free(c->half_norm);
    *c = (select_clusters){0};
}

size_t select_clusters_bytes(const select_clusters *c) {
    const size_t L = (size_t)c->n_lists;
    return c->bytes + L * ((size_t)c->dc * sizeof(float) + sizeof(float) + 2 * sizeof(int32_t) + 2 * sizeof(void *));
}

/* the entries of a list in slot order below slot hi */
static int prefix_below(const int32_t *slots, int len, int hi) {
    int a = 0, b = len;
    while (a < b) {
        const int mid = a + (b - a) / 2;
        if (slots[mid] < hi) a = mid + 1;
        else b = mid;
    }
    return a;
}

enum {
    /* far keys kept by their codes, per key asked for, then ranked again on
     * the stored keys: at 256K (layers 3 and 6) 2 gave the recall of f32
     * scores (0.9707), 1 0.9667, and 4 (select_rerank_pool) cost 20% more
     * selection, its lower bar letting more keys through */
    RERANK_FACTOR = 2,
    NEAR_RUN = 1024,  /* near keys scored per run */
    LIST_CHUNK = 1024  /* list rows scored at once (68 KiB of codes of 64 dims) */
};

/* Offer the scores dt [p] of list l's first p rows to query i's buffer t,
 * those that reach its threshold and its mask; ix: scratch of p. */
static void offer_list(const select_clusters *c, int l, int j0, const float *dt, int p, const select_mask *m,
                       int32_t *ix, topk_buf *t) {
    const float worst = t->thr ? select_key_score(t->thr) : -INFINITY;
    const int nat = kernels_get()->index_at_least(dt, p, worst, ix);
    for (int a = 0; a < nat; a++) {
        const int32_t j = c->slots[l][j0 + ix[a]];
        if (select_mask_allows(m, j)) select_topk_push(t, dt[ix[a]], j);
    }
}

/* The np-th largest of x[0..L) into *kth, and the indices of the scores
 * at least as large as a bound below it into ix (ascending), their count
 * returned. The bound is a sample's: every SAMPLE_STRIDE-th score ranked
 * at 1.5 times np's share plus 2 (quickselect over L / 8 scores), which
 * is at most the np-th largest whenever at least np scores reach it; the
 * np-th largest is then among those. Otherwise the bound is the np-th
 * largest itself, by quickselect over all L. tmp: scratch of L. */
static int np_best(const kernels *K, const float *x, int L, int np, float *tmp, int32_t *ix, float *kth) {
    enum { SAMPLE_STRIDE = 8 };
    const int m = L / SAMPLE_STRIDE, r = (int)(((int64_t)np * m * 3 / 2 + L - 1) / L) + 2;
    if (r < m) {
        for (int a = 0; a < m; a++) tmp[a] = x[(size_t)a * SAMPLE_STRIDE];
        const int nat = K->index_at_least(x, L, kth_largest_f32(tmp, m, r), ix);
        if (nat >= np) {
            for (int a = 0; a < nat; a++) tmp[a] = x[ix[a]];
            *kth = kth_largest_f32(tmp, nat, np);
            return nat;
        }
    }
    memcpy(tmp, x, (size_t)L * sizeof(float));
    *kth = kth_largest_f32(tmp, L, np);
    return K->index_at_least(x, L, *kth, ix);
}

int select_cluster_topk_batch(selector *s, const select_clusters *c, int nprobe, int n, const float *qn,
                              const select_rows *rows, int count, const select_mask *m, int k, int32_t *out, int *got,
                              int n_threads) {
    const kernels *K = kernels_get();
    const gemm_q8_fn gemm = kernels_gemm_q8(GGML_TYPE_Q8_0);
    const int d = rows->d, dc = c->dc, dq = c->dq, nbq = dq / CODE_BLOCK, L = c->n_lists, np = nprobe < L ? nprobe : L;
    const int n_pool = RERANK_FACTOR * k;
    int run = NEAR_RUN > LIST_CHUNK ? NEAR_RUN : LIST_CHUNK;
    if (run < n_pool) run = n_pool;
    float *S = select_query_realloc(s, NULL, (size_t)n * L * sizeof(float));
    float *dots = select_query_realloc(s, NULL, (size_t)n_threads * run * sizeof(float));
    int32_t *at = select_query_realloc(s, NULL, (size_t)n_threads * run * sizeof(int32_t));
    int32_t *chosen = select_query_realloc(s, NULL, (size_t)n * np * sizeof(int32_t));
    int32_t *start = select_query_realloc(s, NULL, ((size_t)L + 1) * sizeof(int32_t));
    int32_t *by_list = select_query_realloc(s, NULL, (size_t)n * np * 2 * sizeof(int32_t)); /* query, prefix */
    float *ltmp = select_query_realloc(s, NULL, (size_t)n_threads * L * sizeof(float));
    int32_t *lix = select_query_realloc(s, NULL, (size_t)n_threads * L * sizeof(int32_t));
    uint64_t *keys = select_query_realloc(s, NULL, (size_t)n * 2 * n_pool * sizeof(uint64_t));
    topk_buf *t = select_query_realloc(s, NULL, (size_t)n * sizeof(topk_buf));
    int8_t *qq = select_query_realloc(s, NULL, (size_t)n * dq * 2); /* the queries' codes, then a list's */
    float *qd = select_query_realloc(s, NULL, (size_t)n * nbq * 2 * sizeof(float));
    float *R = select_query_realloc(s, NULL, (size_t)n * LIST_CHUNK * sizeof(float));
    int *nch = select_query_realloc(s, NULL, (size_t)n * sizeof(int));
    int rc = gemm && S && dots && at && chosen && start && by_list && ltmp && lix && keys && t && qq && qd && R && nch
                 ? 0 : -1;
    int8_t *Qq = qq + (size_t)n * dq;
    float *Qd = qd + (size_t)n * nbq;
    /* 1. every query's best lists by q . c over its first dc dims */
    if (!rc) blas_sgemm(n_threads, 0, 1, n, L, dc, 1.0f, qn, d, c->cent, dc, 0.0f, S, L);
#pragma omp parallel for num_threads(n_threads) schedule(static) if (!rc && n * L >= 1 << 16)
    for (int i = 0; i < n; i++) {
        if (rc) continue;
        t[i] = (topk_buf){.key = keys + (size_t)i * 2 * n_pool, .k = n_pool};
        const int vis = m[i].n_slots < count ? m[i].n_slots : count;
        nch[i] = 0;
        if (m[i].far_hi <= 0 || vis <= 0) continue;
        float x[KV_MAX_HEAD_DIM];
        pad_to_code(x, qn + (size_t)i * d, dc, dq);
        K->quantize_q8(x, dq, qq + (size_t)i * dq, qd + (size_t)i * nbq);
        /* the np best: those above the np-th largest score, then those
         * equal to it, by list (ties to the lower list) */
        const int th = omp_get_thread_num();
        const float *row = S + (size_t)i * L;
        int32_t *ix = lix + (size_t)th * L, *ch = chosen + (size_t)i * np;
        float kth;
        const int nat = np_best(K, row, L, np, ltmp + (size_t)th * L, ix, &kth);
        for (int a = 0; a < nat; a++)
            if (row[ix[a]] > kth) ch[nch[i]++] = ix[a];
        for (int a = 0; a < nat && nch[i] < np; a++)
            if (row[ix[a]] == kth) ch[nch[i]++] = ix[a];
    }
    /* ... and, list by list, the queries that probe it with the prefix
     * below each one's far_hi (a counting sort) */
    for (int l = 0; !rc && l <= L; l++) start[l] = 0;
    for (int i = 0; !rc && i < n; i++)
        for (int x = 0; x < nch[i]; x++) start[chosen[(size_t)i * np + x] + 1]++;
    for (int l = 0; !rc && l < L; l++) start[l + 1] += start[l];
    for (int i = 0; !rc && i < n; i++) {
        const int vis = m[i].n_slots < count ? m[i].n_slots : count, far_hi = m[i].far_hi < vis ? m[i].far_hi : vis;
        for (int x = 0; x < nch[i]; x++) {
            const int l = chosen[(size_t)i * np + x], at_l = start[l]++;
            by_list[2 * at_l] = i, by_list[2 * at_l + 1] = prefix_below(c->slots[l], c->len[l], far_hi);
        }
    }
    for (int l = L; !rc && l > 0; l--) start[l] = start[l - 1];
    if (!rc) start[0] = 0;
    /* 2. the far keys, list by list: the queries that probe a list are
     * scored together, a chunk of its rows at a time, by one integer GEMM
     * of their codes against the rows' (the rows come from memory once
     * for all of them); each query offers the rows below its far_hi. */
    int64_t listed = 0, read = 0, scored = 0;
    for (int l = 0; !rc && l < L; l++) {
        const int32_t *ql = by_list + 2 * (size_t)start[l];
        const int nq = start[l + 1] - start[l];
        int P = 0;
        for (int x = 0; x < nq; x++) P = ql[2 * x + 1] > P ? ql[2 * x + 1] : P;
        if (!P) continue;
        read += P;
        for (int x = 0; x < nq; x++) {
            memcpy(Qq + (size_t)x * dq, qq + (size_t)ql[2 * x] * dq, (size_t)dq);
            memcpy(Qd + (size_t)x * nbq, qd + (size_t)ql[2 * x] * nbq, (size_t)nbq * sizeof(float));
        }
        for (int j0 = 0; j0 < P; j0 += LIST_CHUNK) {
            const int nb = P - j0 < LIST_CHUNK ? P - j0 : LIST_CHUNK;
            gemm((const char *)c->rows[l] + (size_t)j0 * c->code_bytes, c->code_bytes, nb, Qq, Qd, nq, dq, R, nb);
            for (int x = 0; x < nq; x++) {
                const int i = ql[2 * x], p = ql[2 * x + 1] - j0;
                if (p <= 0) continue;
                offer_list(c, l, j0, R + (size_t)x * nb, p < nb ? p : nb, &m[i], at, &t[i]);
                listed += p < nb ? p : nb;
            }
        }
    }
    /* 3. per query: its far keys' pool ranked again, then its near keys in full */
    int64_t reranked = 0;
#pragma omp parallel for num_threads(n_threads) schedule(dynamic, 8) reduction(+ : scored, reranked) if (!rc)
    for (int i = 0; i < n; i++) {
        if (rc) continue;
        const int th = omp_get_thread_num();
        float *dt = dots + (size_t)th * run;
        int32_t *ix = at + (size_t)th * run;
        const int vis = m[i].n_slots < count ? m[i].n_slots : count, far_hi = m[i].far_hi < vis ? m[i].far_hi : vis;
        const int np_i = select_topk_take(&t[i], 0, ix, NULL);
        t[i] = (topk_buf){.key = keys + (size_t)i * 2 * n_pool, .k = k};
        rows->dot(qn + (size_t)i * d, rows->base, rows->stride, dc, ix, np_i, dt); /* the first dc dims */
        for (int a = 0; a < np_i; a++) select_topk_push(&t[i], dt[a], ix[a]);
        reranked += np_i;
        int lo[3], hi[3];
        const int nr = select_mask_ranges(&m[i], count, lo, hi);
        select_rows r = *rows;
        r.q = qn + (size_t)i * d, r.far_hi = 0;
        for (int u = 0; u < nr; u++)
            for (int j0 = lo[u] > far_hi ? lo[u] : far_hi; j0 < hi[u]; j0 += NEAR_RUN) {
                const int len = hi[u] - j0 < NEAR_RUN ? hi[u] - j0 : NEAR_RUN;
                select_offer_run(&r, &m[i], j0, len, dt, ix, &t[i]);
                scored += len;
            }
        got[i] = select_topk_take(&t[i], 0, out + (size_t)i * k, NULL); /* in any order (selector.h) */
    }
    s->stats.n_visited += scored + listed + reranked + (int64_t)n * L;
    s->stats.bytes_read += (uint64_t)scored * rows->row_bytes + (uint64_t)read * (c->code_bytes + 4) +
                           (uint64_t)reranked * dc * elem_bytes(c) +
                           (uint64_t)L * dc * sizeof(float);
    free(S);
    free(dots);
    free(at);
    free(chosen);
    free(start);
    free(by_list);
    free(ltmp);
    free(lix);
    free(keys);
    free(t);
    free(R);
    free(qq);
    free(qd);
    free(nch);
    return rc;
}
