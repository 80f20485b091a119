/* exact: top-K in the learned search space by a scan of every eligible key,
 * by cosine (keys normalised on append, the query too, so cosine = inner
 * product: the training metric) or by the raw inner product. Keys are stored
 * f32 or f16; the scan is a SIMD dot over the eligible slots feeding a
 * size-K buffer (no sort of the n scores).
 *
 * Compressed scans (SUBQ_SCAN_INT8 / INT4) keep beside each stored key
 * its row-scaled int8 / int4 codes (kernels/scan_codes.h) and scan those
 * against the query coded as int8: (d + 4) / 4d or (d / 2 + 4) / 4d of the
 * f32 bytes. The best select_rerank_pool(K) slots of that scan are re-ranked on
 * the stored keys, so the result is the full scan's whenever they include
 * its top K (measured in bench/bench_select.c; tests/test_select_exact.c
 * checks recall@K >= 0.99).
 * Sequences that fit in the re-rank pool are scanned in full. SUBQ_SCAN_AUTO
 * keeps int4 codes and scans them from selector_scan_codes_from keys (2 MiB
 * of stored keys), the keys below that. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/bigmem.h"
#include "base/error.h"
#include "base/pool.h"
#include "kernels/scan_codes.h"
#include "quant/quant.h"
#include "select/select_internal.h"

typedef struct exact_sel {
    selector base;      /* first member: cast back from selector * */
    int d, f16;
    int count, cap;     /* slots appended / rows allocated */
    void *keys;         /* [cap][d] stored keys, f32 or f16 */
    kernels_gather_dot_fn dot;
    kernels_kv_scores_fn scores; /* the same over consecutive rows */
    float *qn, *row;    /* the query and one key in stored form */
    float *qf;          /* the query without its rotated dims (far keys: selector_params.far_rot) */
    select_scratch sc;
    /* compressed scan (bits 8 or 4; 0: none), read from code_from keys */
    int bits;
    int64_t code_from;
    size_t code_bytes;  /* bytes per row of codes */
    uint8_t *codes;     /* [cap][code_bytes] */
    float *code_scale;  /* [cap] each row's scale */
    scan_query cq, cqf; /* the query coded, and its far form */
    int32_t *pool;      /* the slots to re-rank */
    int pool_cap;
    scan_codes_fn code_scores;
    /* the prefill's block scan (select_blocks.c; block 0: none, and for
     * search spaces wider than SCAN_CODES_MAX_D) */
    int block, group;
    float *sums;        /* [cap / block][d] the mean stored key of each full block */
    int n_reps;         /* each block's keys farthest from its mean, kept beside it */
    float *reps;        /* [cap / block][n_reps][d] */
    float *greps;       /* [cap / (block * group)][n_reps][d]: each group's among its blocks' */
    float *rep_dist;    /* scratch: max(block, group * n_reps) spreads */
    float *gsums;       /* [cap / (block * group)][d] ... of each full group of blocks */
    /* the far keys' content clusters (select_clusters.c), trained and
     * added to by prompt batches (query_many) */
    select_clusters cl;
} exact_sel;

static size_t elem(const exact_sel *e) { return e->f16 ? sizeof(uint16_t) : sizeof(float); }

/* Room for n more keys. The first allocation takes the whole cache's
 * slots when the selector knows its cache (pages are only touched as keys
 * arrive), so decode never copies the index; past that, or without a
 * cache, it doubles. */
static subq_status exact_reserve(exact_sel *e, int n, subq_error *err) {
    if (e->count + n <= e->cap) return SUBQ_OK;
    const kv_cache *kv = e->base.env.kv;
    int cap = e->cap ? e->cap : kv && kv->n_ctx > 256 ? kv->n_ctx : 256;
    while (cap < e->count + n) cap = cap > INT32_MAX / 2 ? INT32_MAX : cap * 2;
    const size_t rows = (size_t)cap, used = (size_t)e->count;
    void *k = bigmem_grow(e->keys, used * e->d * elem(e), rows * e->d * elem(e));
    if (k) e->keys = k;
    if (k && e->bits) {
        uint8_t *c = bigmem_grow(e->codes, used * e->code_bytes, rows * e->code_bytes);
        if (c) e->codes = c;
        float *cs = c ? bigmem_grow(e->code_scale, used * sizeof(float), rows * sizeof(float)) : NULL;
        if (cs) e->code_scale = cs;
        if (!cs) k = NULL;
    }
    if (k && e->block) {
        float *b = bigmem_grow(e->sums, used / e->block * e->d * sizeof(float), rows / e->block * e->d * sizeof(float));
        if (b) e->sums = b;
        else k = NULL;
    }
    if (k && e->n_reps) {
        const size_t r = (size_t)e->n_reps * e->d * sizeof(float);
        float *b = bigmem_grow(e->reps, used / e->block * r, rows / e->block * r);
        if (b) e->reps = b;
        else k = NULL;
    }
    if (k && e->group) {
        const size_t g = (size_t)e->block * e->group;
        float *b = bigmem_grow(e->gsums, used / g * e->d * sizeof(float), rows / g * e->d * sizeof(float));
        if (b) e->gsums = b;
        else k = NULL;
        const size_t r = (size_t)e->n_reps * e->d * sizeof(float);
        float *gr = k && r ? bigmem_grow(e->greps, used / g * r, rows / g * r) : NULL;
        if (gr) e->greps = gr;
        else if (r) k = NULL;
    }
    if (!k) return subq_fail(err, SUBQ_ERR_NOMEM, "selector exact: out of memory for %d search keys", cap);
    e->cap = cap;
    return SUBQ_OK;
}

static void update_bytes(exact_sel *e) {
    e->base.stats.bytes = sizeof *e + (size_t)e->cap * (e->d * elem(e) + (e->bits ? e->code_bytes + sizeof(float) : 0)) +
                          (e->block ? (size_t)e->cap / e->block * e->d * sizeof(float) : 0) +
                          (e->group ? (size_t)e->cap / ((size_t)e->block * e->group) * e->d * sizeof(float) : 0) +
                          select_clusters_bytes(&e->cl) +
                          2 * (size_t)e->d * sizeof(float) + (size_t)e->pool_cap * sizeof(int32_t) +
                          e->sc.cap_f * sizeof(float) + e->sc.cap_i * sizeof(int32_t) + e->sc.cap_u * sizeof(uint64_t);
}

/* The stored key of slot j as f32 into row (or row pointed at) */
static const float *key_f32(const exact_sel *e, int j, float *row) {
    if (!e->f16) return (const float *)e->keys + (size_t)j * e->d;
    const uint16_t *x = (const uint16_t *)e->keys + (size_t)j * e->d;
    for (int c = 0; c < e->d; c++) row[c] = fp16_to_fp32(x[c]);
    return row;
}

/* |k - mean|^2 over the dims a far query keeps (a key's rotated dims turn
 * with its position, which would make keys look apart by position alone) */
static float spread(const exact_sel *e, const float *k, const float *mean) {
    double s = 0;
    for (int c = 0; c < e->d - e->base.params.far_rot; c++) s += (double)(k[c] - mean[c]) * (k[c] - mean[c]);
    return (float)s;
}

/* the indices of the n_reps largest of dist[0..n) into best (dist is spent) */
static void largest(float *dist, int n, int r, int *best) {
    for (int x = 0; x < r; x++) { /* r small: repeated max */
        int arg = 0;
        for (int j = 1; j < n; j++) arg = dist[j] > dist[arg] ? j : arg;
        best[x] = arg;
        dist[arg] = -INFINITY;
    }
}

/* Block b's n_reps keys farthest from its mean, into reps: a block with one
 * strong key among weak ones is ranked by that key too. */
static void pick_reps(exact_sel *e, int b, const float *mean) {
    const int B = e->block, R = e->n_reps;
    float *dist = e->rep_dist;
    int best[SELECT_MAX_REPS];
    for (int j = 0; j < B; j++) dist[j] = spread(e, key_f32(e, b * B + j, e->row), mean);
    largest(dist, B, R, best);
    for (int x = 0; x < R; x++)
        memcpy(e->reps + ((size_t)b * R + x) * e->d, key_f32(e, b * B + best[x], e->row), (size_t)e->d * sizeof(float));
}

/* Group g's n_reps among its blocks' representatives farthest from its mean. */
static void pick_group_reps(exact_sel *e, int g, const float *mean) {
    const int G = e->group, R = e->n_reps;
    const float *cand = e->reps + (size_t)g * G * R * e->d;
    float *dist = e->rep_dist;
    int best[SELECT_MAX_REPS];
    for (int j = 0; j < G * R; j++) dist[j] = spread(e, cand + (size_t)j * e->d, mean);
    largest(dist, G * R, R, best);
    for (int x = 0; x < R; x++)
        memcpy(e->greps + ((size_t)g * R + x) * e->d, cand + (size_t)best[x] * e->d, (size_t)e->d * sizeof(float));
}

/* The summaries of the blocks that slots [from, to) complete:
 *   sums[b] = (1/B) sum_{j in [bB, bB + B)} k_j   over the keys as stored
 * (measured: adding each block's per-dim variance to its rank, as an
 * estimate of its best key's score, changed nothing at 4K) */
static void summarise_blocks(exact_sel *e, int from, int to) {
    const int B = e->block;
    for (int b = from / B; b < to / B; b++) {
        if ((b + 1) * B <= from) continue; /* complete before */
        double acc[SCAN_CODES_MAX_D] = {0};
        float *row = e->row;
        for (int j = b * B; j < (b + 1) * B; j++) {
            if (e->f16) {
                const uint16_t *x = (const uint16_t *)e->keys + (size_t)j * e->d;
                for (int c = 0; c < e->d; c++) row[c] = fp16_to_fp32(x[c]);
            } else {
                row = (float *)e->keys + (size_t)j * e->d;
            }
            for (int c = 0; c < e->d; c++) acc[c] += row[c];
        }
        float *dst = e->sums + (size_t)b * e->d;
        for (int c = 0; c < e->d; c++) dst[c] = (float)(acc[c] / B);
        if (e->n_reps) pick_reps(e, b, dst);
    }
    /* the groups those blocks complete: gsums[g] = (1/G) sum of its block means */
    const int G = e->group, GB = G * B;
    for (int g = G ? from / GB : 0; G && g < to / GB; g++) {
        double acc[SCAN_CODES_MAX_D] = {0};
        for (int b = g * G; b < (g + 1) * G; b++)
            for (int c = 0; c < e->d; c++) acc[c] += e->sums[(size_t)b * e->d + c];
        float *dst = e->gsums + (size_t)g * e->d;
        for (int c = 0; c < e->d; c++) dst[c] = (float)(acc[c] / G);
        if (e->n_reps) pick_group_reps(e, g, dst);
    }
}

/* Store n rows (already in stored form when `prepared`, else made so). */
static subq_status exact_store(selector *s, const float *k_search, int n, int slot0, int prepared, subq_error *err) {
    exact_sel *e = (exact_sel *)s;
    subq_status rc = select_check_append(s, e->count, n, slot0, err);
    if (rc) return rc;
    if (n > 0 && !k_search) return subq_fail(err, SUBQ_ERR_ARG, "selector exact: no search keys given");
    if ((rc = exact_reserve(e, n, err))) return rc;
    for (int t = 0; t < n; t++) {
        const int slot = e->count + t;
        const float *x = k_search + (size_t)t * e->d;
        if (!prepared) select_prepare(e->row, x, e->d, s->params.plan.score);
        const float *row = prepared ? x : e->row;
        if (e->f16) {
            /* the codes come from the key as stored (f16 widens exactly) */
            uint16_t *dst = (uint16_t *)e->keys + (size_t)slot * e->d;
            for (int c = 0; c < e->d; c++) e->row[c] = fp16_to_fp32(dst[c] = fp32_to_fp16(row[c]));
            row = e->row;
        } else {
            memcpy((float *)e->keys + (size_t)slot * e->d, row, (size_t)e->d * sizeof(float));
        }
        if (e->bits) e->code_scale[slot] = scan_codes_encode(e->bits, row, e->d, e->codes + (size_t)slot * e->code_bytes);
    }
    if (e->block) summarise_blocks(e, e->count, e->count + n);
    e->count += n;
    update_bytes(e);
    return SUBQ_OK;
}

static subq_status exact_append(selector *s, const float *k_search, int n, int slot0, subq_error *err) {
    return exact_store(s, k_search, n, slot0, 0, err);
}

/* Keys in stored form: copied (f32) or narrowed (f16; exact for keys that
 * came from get_keys of an f16 selector). */
static subq_status exact_put_keys(selector *s, const float *keys, int n, int slot0, subq_error *err) {
    return exact_store(s, keys, n, slot0, 1, err);
}

static subq_status exact_get_keys(const selector *s, int n, float *dst, subq_error *err) {
    const exact_sel *e = (const exact_sel *)s;
    return select_copy_keys(s, e->count, e->keys, (size_t)e->d, e->d, e->f16, n, dst, err);
}

/* Keys are rows in slot order: dropping the tail is forgetting it. */
static subq_status exact_truncate(selector *s, int n_keep, subq_error *err) {
    exact_sel *e = (exact_sel *)s;
    subq_status rc = select_truncate_count(s, &e->count, n_keep, err);
    if (!rc) select_clusters_truncate(&e->cl, n_keep);
    return rc;
}

/* Top-k over the rows, one scan or split across threads (long scans only:
 * short ones are not worth waking them). */
static int scan(selector *s, const select_rows *rows, int n, const select_mask *m, int k, int sorted, int32_t *out) {
    exact_sel *e = (exact_sel *)s;
    if (select_scan_split(s, rows, n)) return select_scan_topk_parallel(s, rows, n, m, k, sorted, &e->sc, out);
    return select_scan_topk(s, rows, n, m, k, sorted, &e->sc, out);
}

/* The stored keys as scan rows for the query q (and below far_hi its far
 * form q_far), and their codes for the coded query cq (cq_far). */
static select_rows key_rows(const exact_sel *e, const float *q, const float *q_far, int far_hi) {
    return (select_rows){.base = e->keys, .stride = (size_t)e->d, .d = e->d, .q = q, .dot = e->dot,
                         .scores = e->scores, .row_bytes = (size_t)e->d * elem(e), .far_hi = far_hi, .q_far = q_far};
}

static select_rows code_rows(const exact_sel *e, const scan_query *cq, const scan_query *cq_far, int far_hi) {
    return (select_rows){.base = e->codes, .stride = e->code_bytes, .d = e->d, .cq = cq, .code_scale = e->code_scale,
                         .code_scores = e->code_scores, .row_bytes = e->code_bytes + sizeof(float), .far_hi = far_hi,
                         .cq_far = cq_far};
}

static int exact_query(selector *s, const float *q_search, const float *q_native, int k, const select_mask *m,
                       int32_t *out) {
    exact_sel *e = (exact_sel *)s;
    if (!q_search || e->count == 0) return 0;
    select_prepare(e->qn, q_search, e->d, s->params.plan.score);
    const int far_hi = s->params.far_rot > 0 ? m->far_hi : 0; /* far keys without the rotated dims */
    if (far_hi) select_far_query(e->qf, e->qn, e->d, s->params.far_rot);
    const select_rows full = key_rows(e, e->qn, e->qf, far_hi);
    const int64_t want = select_rerank_pool(k);
    const int n_pool = want < e->count ? (int)want : e->count;
    if (!e->bits || n_pool >= e->count || e->count < e->code_from) return scan(s, &full, e->count, m, k, 1, out);
    /* the codes' best `pool` slots, re-ranked on the stored keys */
    if (n_pool > e->pool_cap) {
        int32_t *p = select_query_realloc(s, e->pool, (size_t)n_pool * sizeof(int32_t));
        if (!p) return -1;
        e->pool = p;
        e->pool_cap = n_pool;
    }
    scan_codes_query(e->bits, e->qn, e->d, &e->cq);
    if (far_hi) scan_codes_query(e->bits, e->qf, e->d, &e->cqf);
    const select_rows codes = code_rows(e, &e->cq, &e->cqf, far_hi);
    int got = scan(s, &codes, e->count, m, n_pool, 0, e->pool);
    return got < 0 ? -1 : select_rank_slots(s, &full, e->pool, got, k, &e->sc, out);
}

/* g queries under one mask (ops->query_group), as exact_query answers
 * each: the scan reads the keys (or their codes, whose best
 * select_rerank_pool(k) slots each query then re-ranks on the stored
 * keys) once for all of them, far keys with each query's far form. */
static int exact_query_group(selector *s, int g, const float *q_search, const float *q_native, int k,
                             const select_mask *m, int32_t *out, int *got) {
    (void)q_native;
    exact_sel *e = (exact_sel *)s;
    const int d = e->d, far_hi = s->params.far_rot > 0 ? m->far_hi : 0, G = SELECT_GROUP_MAX;
    for (int i = 0; i < g; i++) got[i] = 0;
    if (!q_search || e->count == 0) return 0;
    const int64_t want = select_rerank_pool(k);
    const int n_pool = want < e->count ? (int)want : e->count,
              codes = e->bits && n_pool < e->count && e->count >= e->code_from;
    /* the prepared queries and their far forms; over codes, both coded, and each query's pool */
    float *qn = select_query_realloc(s, NULL, (size_t)2 * G * d * sizeof(float));
    scan_query *cq = codes ? select_query_realloc(s, NULL, (size_t)2 * G * sizeof(scan_query)) : NULL;
    int32_t *pools = codes ? select_query_realloc(s, NULL, (size_t)G * n_pool * sizeof(int32_t)) : NULL;
    int pool_got[SELECT_GROUP_MAX];
    float *qf = qn ? qn + (size_t)G * d : NULL;
    int rc = qn && (!codes || (cq && pools)) ? 0 : -1;
    for (int i0 = 0; !rc && i0 < g; i0 += G) {
        const int n = g - i0 < G ? g - i0 : G;
        for (int i = 0; i < n; i++) {
            float *q = qn + (size_t)i * d;
            select_prepare(q, q_search + (size_t)(i0 + i) * d, d, s->params.plan.score);
            if (far_hi) select_far_query(qf + (size_t)i * d, q, d, s->params.far_rot);
            if (codes) scan_codes_query(e->bits, q, d, &cq[i]);
            if (codes && far_hi) scan_codes_query(e->bits, qf + (size_t)i * d, d, &cq[G + i]);
        }
        if (!codes) {
            const select_rows full = key_rows(e, qn, far_hi ? qf : NULL, far_hi);
            rc = select_scan_topk_group(s, &full, e->count, m, k, n, 1, out + (size_t)i0 * k, got + i0);
            continue;
        }
        const select_rows rows = code_rows(e, cq, far_hi ? cq + G : NULL, far_hi);
        rc = select_scan_topk_group(s, &rows, e->count, m, n_pool, n, 0, pools, pool_got);
        for (int i = 0; !rc && i < n; i++) {
            const select_rows fi = key_rows(e, qn + (size_t)i * d, far_hi ? qf + (size_t)i * d : NULL, far_hi);
            got[i0 + i] = select_rank_slots(s, &fi, pools + (size_t)i * n_pool, pool_got[i], k, &e->sc,
                                            out + (size_t)(i0 + i) * k);
            if (got[i0 + i] < 0) rc = -1;
        }
    }
    free(qn);
    free(cq);
    free(pools);
    return rc;
}

/* A batch of queries: the stored keys in full (compressed scans too: a
 * batch's scan is one GEMM), or, for a prompt's batch (`prefill`) that
 * sees probe_from keys and more blocks than it probes, the block scan.
 * With the context's pool, the batch goes out in pieces of queries, each
 * scanned on one thread with its own sgemm: OpenMP's team of the same
 * size spun after each of a prompt's thousands of parallel regions, on
 * the cores the attention that followed needed (4.2% of a 32K prompt's
 * samples). */
typedef struct batch_query {
    selector *s;
    const float *q_search;
    const select_mask *m;
    int n, k, blocks, clusters, sorted, pieces;
    int32_t *out;
    int *got;
    selector_stats *stats; /* [pieces] what each piece's scan counted */
    int *rc;               /* [pieces] */
} batch_query;

/* what a batch's scans count (select_scan_topk_batch, select_block_topk_batch) */
static void add_counts(selector_stats *dst, const selector_stats *src) {
    dst->n_visited += src->n_visited;
    dst->bytes_read += src->bytes_read;
    dst->n_check_keys += src->n_check_keys;
    dst->n_check_found += src->n_check_found;
}

/* queries [i0, i1) of the batch, on n_threads threads; their counts go to st */
static int query_range(selector *s, const float *q_search, const select_mask *m, int i0, int i1, int k, int blocks,
                       int clusters, int sorted, int32_t *out, int *got, int n_threads, selector_stats *st) {
    exact_sel *e = (exact_sel *)s;
    const selector_params *p = &s->params;
    const int n = i1 - i0;
    int far = 0;
    for (int i = i0; i < i1 && p->far_rot > 0; i++) far |= m[i].far_hi > 0;
    float *qn = select_query_realloc(s, NULL, (size_t)n * e->d * sizeof(float) * (far ? 2 : 1));
    if (!qn) return -1;
    float *qf = far ? qn + (size_t)n * e->d : NULL; /* without the rotated dims, for far keys */
    for (int i = 0; i < n; i++) {
        select_prepare(qn + (size_t)i * e->d, q_search + (size_t)(i0 + i) * e->d, e->d, p->plan.score);
        if (qf) select_far_query(qf + (size_t)i * e->d, qn + (size_t)i * e->d, e->d, p->far_rot);
    }
    /* a copy of the base counts for this piece alone (the scans add to
     * s->stats, and pieces run at once) */
    selector piece = *s;
    piece.stats = (selector_stats){0};
    const select_rows full = key_rows(e, NULL, NULL, 0);
    /* the block scan reads the codes where there are some (a third of an
     * f16 row for int4), as decode's scan does, unless its re-rank pool
     * would hold more than a quarter of the rows it scans (K = 2048 of
     * 4096: nearly every row would be scored twice, the second time
     * scattered), or under auto while it scans fewer keys than code_from */
    const int64_t probed = (int64_t)p->plan.nprobe * e->block;
    const int use_codes =
        !clusters && blocks && e->bits && select_rerank_pool(k) * 4 <= probed && probed >= e->code_from;
    scan_query *cq = use_codes ? select_query_realloc(s, NULL, (size_t)n * (far ? 2 : 1) * sizeof(scan_query)) : NULL;
    if (use_codes && !cq) {
        free(qn);
        return -1;
    }
    for (int i = 0; cq && i < n; i++) scan_codes_query(e->bits, qn + (size_t)i * e->d, e->d, &cq[i]);
    for (int i = 0; cq && qf && i < n; i++) scan_codes_query(e->bits, qf + (size_t)i * e->d, e->d, &cq[n + i]);
    const select_rows codes = code_rows(e, cq, cq && qf ? cq + n : NULL, 0);
    const select_block_index ix = {.sums = e->sums, .gsums = e->gsums, .reps = e->reps, .greps = e->greps,
                                   .n_reps = e->n_reps,
                                   .block = e->block, .nprobe = p->plan.nprobe,
                                   .group = e->group, .gprobe = p->plan.group_probe, .group_from = p->plan.group_from};
    /* as many lists probed, of the lists there are, as cluster_probe of clusters */
    const int probe = clusters ? (int)(((int64_t)p->plan.cluster_probe * e->cl.n_lists + p->plan.clusters - 1) /
                                       p->plan.clusters)
                               : 0;
    int rc = clusters ? select_cluster_topk_batch(&piece, &e->cl, probe, n, qn, &full, e->count, m + i0, k,
                                                  out + (size_t)i0 * k, got + i0, n_threads)
             : blocks ? select_block_topk_batch(&piece, n, qn, qf, &full, cq ? &codes : NULL, &ix, e->count, m + i0, k,
                                              out + (size_t)i0 * k, got + i0, n_threads)
                    : select_scan_topk_batch(&piece, n, qn, e->keys, (size_t)e->d, e->d, e->f16, e->count, m + i0, k,
                                             sorted, out + (size_t)i0 * k, got + i0, n_threads);
    if (!rc && (blocks || clusters) && p->plan.probe_check > 0)
        rc = select_check_recall(&piece, n, qn, qf, &full, e->count, m + i0, k, p->plan.probe_check,
                                 out + (size_t)i0 * k, got + i0);
    add_counts(st, &piece.stats);
    free(cq);
    free(qn);
    return rc;
}

static void query_piece(void *ctx, int c, int thread) {
    (void)thread;
    const batch_query *b = ctx;
    /* equal pieces (the recall check picks its tokens by slot) */
    const int i0 = (int)((int64_t)b->n * c / b->pieces), i1 = (int)((int64_t)b->n * (c + 1) / b->pieces);
    b->stats[c] = (selector_stats){0};
    b->rc[c] = i1 > i0 ? query_range(b->s, b->q_search, b->m, i0, i1, b->k, b->blocks, b->clusters, b->sorted, b->out,
                                     b->got, 1, &b->stats[c])
                       : 0;
}

static int query_many(selector *s, int n, const float *q_search, int k, const select_mask *m, int32_t *out, int *got,
                      int n_threads, int prefill) {
    exact_sel *e = (exact_sel *)s;
    const selector_params *p = &s->params;
    if (!q_search || e->count == 0) {
        for (int i = 0; i < n; i++) got[i] = 0;
        return 0;
    }
    int top = 0; /* keys any query may see */
    for (int i = 0; i < n; i++) {
        const int v = m[i].n_slots < e->count ? m[i].n_slots : e->count;
        top = v > top ? v : top;
    }
    const int blocks = prefill && e->block && top >= p->plan.probe_from && top / e->block > p->plan.nprobe;
    /* far keys in content clusters: trained by the first prompt batch with
     * far keys that sees cluster_from keys, and again while the lists the
     * keys held call for have doubled (select_clusters_lists); the keys
     * stored since the last such batch join their lists here, in one pass,
     * so that decode steps (which scan every key) do not assign theirs (one
     * thread: two measured no faster at 128K) */
    int far = 0;
    for (int i = 0; i < n && p->far_rot > 0; i++) far |= m[i].far_hi > 0;
    const int want = prefill && far && p->plan.clusters > 0 && top >= p->plan.cluster_from;
    const int lists = select_clusters_lists(p->plan.clusters, e->count);
    if (want && lists > 0 && lists >= 2 * e->cl.n_lists &&
        select_clusters_train(&e->cl, lists, e->d - p->far_rot, e->f16, e->keys, e->d, e->count,
                              n_threads > 1 ? s->env.pool : NULL))
        return -1;
    if (want && select_clusters_add(&e->cl, e->keys, e->d, e->count)) return -1;
    if (want) update_bytes(e);
    const int clusters = want && e->cl.n_lists > 0;
    pool *pl = s->env.pool;
    const int threads = pl && n_threads > 1 ? pool_threads(pl) : 1;
    if (threads == 1)
        return query_range(s, q_search, m, 0, n, k, blocks, clusters, !prefill, out, got, n_threads, &s->stats);
    /* two pieces a thread: a thread that finishes early takes another */
    enum { MAX_PIECES = 64 };
    int pieces = 2 * threads < MAX_PIECES ? 2 * threads : MAX_PIECES;
    if (pieces > n) pieces = n;
    selector_stats stats[MAX_PIECES];
    int rcs[MAX_PIECES];
    batch_query b = {.s = s, .q_search = q_search, .m = m, .n = n, .k = k, .blocks = blocks, .clusters = clusters,
                     .sorted = !prefill, .pieces = pieces, .out = out, .got = got, .stats = stats, .rc = rcs};
    pool_run(pl, pieces, query_piece, &b);
    int rc = 0;
    for (int c = 0; c < pieces; c++) {
        if (rcs[c]) rc = -1;
        add_counts(&s->stats, &stats[c]);
    }
    return rc;
}

static int exact_query_batch(selector *s, int n, const float *q_search, const float *q_native, size_t q_stride, int k,
                             const select_mask *m, int32_t *out, int *got, int n_threads) {
    return query_many(s, n, q_search, k, m, out, got, n_threads, 0);
}

static int exact_query_prefill(selector *s, int n, const float *q_search, const float *q_native, size_t q_stride,
                               int k, const select_mask *m, int32_t *out, int *got, int n_threads) {
    return query_many(s, n, q_search, k, m, out, got, n_threads, 1);
}

static void exact_reset(selector *s) {
    exact_sel *e = (exact_sel *)s;
    e->count = 0; /* keep the allocation: the next sequence reuses it */
    select_clusters_free(&e->cl); /* the next sequence trains its own */
}

static void exact_free(selector *s) {
    exact_sel *e = (exact_sel *)s;
    free(e->keys);
    free(e->codes);
    free(e->code_scale);
    free(e->sums);
    free(e->reps);
    free(e->greps);
    free(e->rep_dist);
    free(e->gsums);
    select_clusters_free(&e->cl);
    free(e->pool);
    free(e->qn);
    free(e->qf);
    free(e->row);
    select_scratch_free(&e->sc);
    free(e);
}

static const selector_ops exact_ops = {exact_append,      exact_query,        exact_reset,    exact_free,
                                       exact_truncate,    exact_get_keys,     exact_put_keys, NULL,
                                       exact_query_batch, exact_query_prefill, NULL,           exact_query_group,
                                       NULL,              NULL,                NULL,           NULL};

subq_status select_exact_new(const selector_params *p, const selector_env *env, selector **out, subq_error *err) {
    exact_sel *e = calloc(1, sizeof *e);
    if (!e) return subq_fail(err, SUBQ_ERR_NOMEM, "selector exact: out of memory");
    const kernels *K = kernels_get();
    e->base.ops = &exact_ops;
    e->d = p->d_search;
    e->f16 = p->plan.search_f16 != 0;
    e->dot = e->f16 ? K->gather_dot_f16 : K->gather_dot_f32;
    e->scores = kernels_kv_decode_get(e->f16 ? SUBQ_KV_F16 : SUBQ_KV_F32).scores;
    e->code_from = selector_scan_codes_from(p);
    e->bits = p->plan.scan == SUBQ_SCAN_INT8 ? 8 : e->code_from < INT64_MAX ? 4 : 0;
    e->code_bytes = e->bits ? scan_codes_row_bytes(e->bits, e->d) : 0;
    e->code_scores = scan_codes_scores();
    e->block = p->plan.nprobe > 0 && p->d_search <= SCAN_CODES_MAX_D ? p->plan.block_keys : 0;
    e->group = e->block ? p->plan.group_blocks : 0;
    e->n_reps = e->block ? p->plan.block_reps : 0;
    if (e->n_reps) {
        const size_t n = (size_t)e->group * e->n_reps > (size_t)e->block ? (size_t)e->group * e->n_reps : (size_t)e->block;
        if (!(e->rep_dist = malloc(n * sizeof(float)))) {
            exact_free(&e->base);
            return subq_fail(err, SUBQ_ERR_NOMEM, "selector exact: out of memory");
        }
    }
    e->qn = malloc((size_t)e->d * sizeof(float));
    e->qf = malloc((size_t)e->d * sizeof(float));
    e->row = malloc((size_t)e->d * sizeof(float));
    if (!e->qn || !e->qf || !e->row) {
        exact_free(&e->base);
        return subq_fail(err, SUBQ_ERR_NOMEM, "selector exact: out of memory");
    }
    update_bytes(e);
    *out = &e->base;
    return SUBQ_OK;
}
