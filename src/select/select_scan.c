/* The exact masked scans over stored keys: serial, split across threads,
 * and batched through sgemm. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/blas.h"
#include "select/select_internal.h"

/* A top-k buffer over scratch sc (2k keys, SELECT_BLOCK floats and
 * int32): the keys, then one block of slots and scores. */
typedef struct scan_buf {
    topk_buf t;
    int32_t *idx;
    float *dots;
} scan_buf;

static int scan_buf_init(const selector *s, select_scratch *sc, int k, scan_buf *b) {
    if (!select_scratch_u(s, sc, 2 * (size_t)k) || !select_scratch_f(s, sc, SELECT_BLOCK) ||
        !select_scratch_i(s, sc, SELECT_BLOCK))
        return 0;
    b->t = (topk_buf){.key = sc->u, .k = k};
    b->idx = sc->i;
    b->dots = sc->f;
    return 1;
}

void select_far_query(float *q_far, const float *q, int d, int far_rot) {
    memcpy(q_far, q, (size_t)d * sizeof(float));
    for (int c = d - far_rot; c < d; c++) q_far[c] = 0.0f;
}

void select_far_correct(int n, const float *qn, int d, int far_rot, const float *U, int ldu, int j0, int nu,
                        const int *unit_hi, float *s, int ld, float *R, int n_threads) {
    int any = 0;
    for (int i = 0; i < n && !any; i++) any = unit_hi[i] > j0;
    if (!any || far_rot <= 0) return;
    const int o = d - far_rot;
    blas_sgemm(n_threads, 0, 1, n, nu, far_rot, 1.0f, qn + o, d, U + o, ldu, 0.0f, R, nu);
    for (int i = 0; i < n; i++) {
        const int hi = unit_hi[i] - j0 < nu ? unit_hi[i] - j0 : nu;
        for (int j = 0; j < hi; j++) s[(size_t)i * ld + j] -= R[(size_t)i * nu + j];
    }
}

/* r as it scores the rows below its far boundary */
static select_rows far_rows(const select_rows *r) {
    select_rows f = *r;
    f.q = r->q_far;
    f.cq = r->cq_far;
    f.far_hi = 0;
    return f;
}

void select_score_slots(const select_rows *r, const int32_t *slots, int n, float *out) {
    if (r->far_hi <= 0) {
        r->dot(r->q, r->base, r->stride, r->d, slots, n, out);
        return;
    }
    /* far and near slots apart, each with its query, in blocks */
    for (int i0 = 0; i0 < n; i0 += SELECT_BLOCK) {
        const int nb = n - i0 < SELECT_BLOCK ? n - i0 : SELECT_BLOCK;
        int32_t sl[2][SELECT_BLOCK], at[2][SELECT_BLOCK];
        float sc[SELECT_BLOCK];
        int c[2] = {0, 0};
        for (int i = i0; i < i0 + nb; i++) {
            const int far = slots[i] < r->far_hi;
            sl[far][c[far]] = slots[i], at[far][c[far]++] = i;
        }
        for (int far = 0; far < 2; far++) {
            if (!c[far]) continue;
            r->dot(far ? r->q_far : r->q, r->base, r->stride, r->d, sl[far], c[far], sc);
            for (int x = 0; x < c[far]; x++) out[at[far][x]] = sc[x];
        }
    }
}

/* score rows idx[0..nb) (b->idx may be idx) and offer them */
static void scan_block(const select_rows *r, scan_buf *b, const int32_t *idx, int nb) {
    select_score_slots(r, idx, nb, b->dots);
    for (int i = 0; i < nb; i++) select_topk_push(&b->t, b->dots[i], idx[i]);
}

static void score_run(const select_rows *r, int j0, int n, float *out) {
    if (r->code_scores)
        r->code_scores(r->cq, (const uint8_t *)r->base + (size_t)j0 * r->stride, r->code_scale + j0, n, out);
    else
        r->scores(r->q, 1, (const char *)r->base + (size_t)j0 * r->row_bytes, n, r->d, 1.0f, out, n);
}

void select_score_run(const select_rows *r, int j0, int n, float *out) {
    const int nf = r->far_hi > j0 ? (r->far_hi - j0 < n ? r->far_hi - j0 : n) : 0;
    if (nf > 0) {
        const select_rows f = far_rows(r);
        score_run(&f, j0, nf, out);
    }
    if (n > nf) score_run(r, j0 + nf, n - nf, out + nf);
}

/* Offer the scores dots[0..n) of slots j0.. of the query's segment to t.
 * Most lose to the worst kept at the last cut: the others are listed
 * (idx: scratch of n), then offered. */
static void offer_scores(const float *dots, int j0, int n, const select_mask *m, int32_t *idx, topk_buf *t) {
    const float worst = t->thr ? select_key_score(t->thr) : -INFINITY;
    const int nc = kernels_get()->index_at_least(dots, n, worst, idx);
    for (int c = 0; c < nc; c++) {
        const int j = j0 + idx[c];
        if (!m->seg || m->seg[j] == m->query_seg) select_topk_push(t, dots[idx[c]], j);
    }
}

void select_offer_run(const select_rows *r, const select_mask *m, int j0, int n, float *dots, int32_t *idx,
                      topk_buf *t) {
    select_score_run(r, j0, n, dots);
    offer_scores(dots, j0, n, m, idx, t);
}

/* Scan the eligible slots in [from, to) for the k best; returns the count,
 * (best first when sorted), with their scores when `scores` is not NULL. */
static int scan_range(const selector *s, const select_rows *r, int n, int from, int to, const select_mask *m, int k,
                      uint64_t thr0, int sorted, select_scratch *sc, int32_t *out, float *scores, int64_t *n_scored) {
    scan_buf b;
    if (k <= 0) return 0;
    if (!scan_buf_init(s, sc, k, &b)) return -1;
    b.t.thr = thr0;
    int lo[3], hi[3], nr = select_mask_ranges(m, n, lo, hi);
    int64_t scored = 0;
    /* per block: gather the eligible slots, score them, offer them */
    for (int q = 0; q < nr; q++) {
        int a = lo[q] > from ? lo[q] : from, e = hi[q] < to ? hi[q] : to;
        for (int j0 = a; j0 < e; j0 += SELECT_BLOCK) {
            int j1 = j0 + SELECT_BLOCK < e ? j0 + SELECT_BLOCK : e, nb = 0;
            if (r->scores || r->code_scores) { /* consecutive rows: no slot list, several rows per sum */
                select_offer_run(r, m, j0, j1 - j0, b.dots, b.idx, &b.t);
                scored += j1 - j0; /* every row of the run is read and scored */
                continue;
            }
            if (m->seg) {
                for (int j = j0; j < j1; j++)
                    if (m->seg[j] == m->query_seg) b.idx[nb++] = j;
            } else {
                for (int j = j0; j < j1; j++) b.idx[nb++] = j;
            }
            scan_block(r, &b, b.idx, nb);
            scored += nb;
        }
    }
    *n_scored += scored;
    return select_topk_take(&b.t, sorted, out, scores);
}

/* A scan's buffer admits a row only above the worst kept, but from an
 * empty buffer that is about 2k + k ln(n / 2k) admissions and a cut per k
 * of them (128K Gaussian keys, a re-rank pool of 1024: 20K admissions and
 * 30 cuts per query, more time than the int4 scores). So a long scan
 * first scores a sample, SAMPLE_RUNS runs of consecutive rows spread over
 * its slots, 1/SAMPLE_FRACTION of them, and starts the buffer's threshold
 * at the r-th best sampled score, r chosen so that about 4k rows of the
 * whole should beat it. A scan that keeps fewer than k rows (the estimate
 * came out too high) runs again from no threshold: the result is the same
 * either way. 0: no threshold (scans of under 4096 eligible slots, runs of
 * under 8 rows: a split scan's parts of 8K slots less the sinks sampled
 * nothing with runs of 16 and admitted as from an empty buffer; rows
 * without a contiguous kernel; too few eligible rows in the sample). */
enum { SAMPLE_RUNS = 16, SAMPLE_FRACTION = 32, SAMPLE_MAX = 4096 };

/* slots of [from, to) in the mask's ranges */
static int64_t mask_span(const int *lo, const int *hi, int nr, int from, int to) {
    int64_t span = 0;
    for (int q = 0; q < nr; q++) {
        const int a = lo[q] > from ? lo[q] : from, e = hi[q] < to ? hi[q] : to;
        span += e > a ? e - a : 0;
    }
    return span;
}

/* The threshold from a sample of n_seen slots of span (n_key of them
 * eligible, their pairs in key): the r-th best, r chosen so that about
 * `admit` of the span's rows beat it; 0 when the sample is too small. */
static uint64_t threshold_of_sample(uint64_t *key, int n_key, int n_seen, int64_t span, int64_t admit) {
    /* r / n_seen of the sample beat the threshold, so about r * span / n_seen rows of the whole */
    const int64_t want = (admit * n_seen + span - 1) / span;
    if (n_seen == 0 || want < 1 || 2 * want > n_key) return 0;
    topk_buf t = {.key = key, .n = n_key, .k = (int)want};
    const uint64_t w = select_topk_cut_worst(&t, (int)want);
    /* every pair with the r-th best sampled score, or higher, is admitted */
    return select_pair_key(select_key_score(w), INT32_MAX);
}

/* Ask for rows [j0, j0 + n) of r (and their codes' scales). */
static void prefetch_run(const select_rows *r, int j0, int n) {
    const size_t row = r->code_scores ? r->stride : r->row_bytes;
    const char *p = (const char *)r->base + (size_t)j0 * row;
    for (size_t o = 0; o < (size_t)n * row; o += 64) __builtin_prefetch(p + o);
    if (!r->code_scores) return;
    const char *scale = (const char *)(r->code_scale + j0);
    for (size_t o = 0; o < (size_t)n * sizeof(float); o += 64) __builtin_prefetch(scale + o);
}

static uint64_t sample_threshold(const select_rows *r, int n, int from, int to, const select_mask *m,
                                 int64_t admit, int64_t *n_scored) {
    int lo[3], hi[3], nr = select_mask_ranges(m, n, lo, hi);
    const int64_t span = mask_span(lo, hi, nr, from, to);
    const int run = (int)(span / ((int64_t)SAMPLE_FRACTION * SAMPLE_RUNS));
    if ((!r->scores && !r->code_scores) || run < 8 || admit <= 0) return 0;
    const int len = run * SAMPLE_RUNS > SAMPLE_MAX ? SAMPLE_MAX / SAMPLE_RUNS : run;
    float dots[SAMPLE_MAX / SAMPLE_RUNS];
    uint64_t key[SAMPLE_MAX];
    int n_key = 0, n_seen = 0, at[SAMPLE_RUNS];
    /* the runs lie apart, each a miss of its own: all asked for first */
    for (int c = 0; c < SAMPLE_RUNS; c++) {
        const int p = from + (int)((int64_t)(to - from) * (2 * c + 1) / (2 * SAMPLE_RUNS)) - len / 2;
        at[c] = p < from ? from : p + len > to ? to - len : p;
        prefetch_run(r, at[c], len);
    }
    for (int c = 0; c < SAMPLE_RUNS; c++) {
        const int p = at[c];
        for (int q = 0; q < nr; q++) {
            const int a = lo[q] > p ? lo[q] : p, e = hi[q] < p + len ? hi[q] : p + len;
            if (e <= a) continue;
            select_score_run(r, a, e - a, dots);
            n_seen += e - a;
            for (int j = a; j < e; j++)
                if (!m->seg || m->seg[j] == m->query_seg) key[n_key++] = select_pair_key(dots[j - a], j);
        }
    }
    *n_scored += n_seen;
    return threshold_of_sample(key, n_key, n_seen, span, admit);
}

/* scan_range from a sampled threshold, again from none when it kept fewer
 * than k */
static int scan_part(const selector *s, const select_rows *r, int n, int from, int to, const select_mask *m, int k,
                     int sorted, select_scratch *sc, int32_t *out, float *scores, int64_t *n_scored) {
    const uint64_t thr0 = sample_threshold(r, n, from, to, m, 4 * (int64_t)k, n_scored);
    int got = scan_range(s, r, n, from, to, m, k, thr0, sorted, sc, out, scores, n_scored);
    if (thr0 && got >= 0 && got < k) got = scan_range(s, r, n, from, to, m, k, 0, sorted, sc, out, scores, n_scored);
    return got;
}

static void count_rows(selector *s, const select_rows *r, int64_t scored) {
    s->stats.n_visited += scored;
    s->stats.bytes_read += (uint64_t)scored * r->row_bytes;
}

int select_scan_topk(selector *s, const select_rows *rows, int n, const select_mask *m, int k, int sorted,
                     select_scratch *sc, int32_t *out) {
    return select_scan_topk_range(s, rows, n, 0, n, m, k, sorted, sc, out, NULL);
}

int select_scan_topk_range(selector *s, const select_rows *rows, int n, int from, int to, const select_mask *m, int k,
                           int sorted, select_scratch *sc, int32_t *out, float *scores) {
    int64_t scored = 0;
    int got = scan_part(s, rows, n, from, to, m, k, sorted, sc, out, scores, &scored);
    count_rows(s, rows, scored);
    return got;
}

int select_rank_slots(selector *s, const select_rows *rows, const int32_t *slots, int n, int k, select_scratch *sc,
                      int32_t *out) {
    scan_buf b;
    if (k <= 0) return 0;
    if (!scan_buf_init(s, sc, k, &b)) return -1;
    for (int i0 = 0; i0 < n; i0 += SELECT_BLOCK) scan_block(rows, &b, slots + i0, n - i0 < SELECT_BLOCK ? n - i0 : SELECT_BLOCK);
    count_rows(s, rows, n);
    return select_topk_take(&b.t, 1, out, NULL);
}

/* The k best of the parts' results through one more buffer: part t's
 * got[t * got_step] pairs at best + t * step and slots + t * step (their
 * scores to `scores` when not NULL). Returns the count, or -1 when out of
 * memory. */
static int merge_parts(const selector *s, int k, int n_parts, const float *best, const int32_t *slots, size_t step,
                       const int *got, int got_step, int sorted, int32_t *out, float *scores) {
    select_scratch sc = {0};
    scan_buf b;
    int n_out = -1;
    if (scan_buf_init(s, &sc, k, &b)) {
        for (int t = 0; t < n_parts; t++)
            for (int i = 0; i < got[(size_t)t * got_step]; i++)
                select_topk_push(&b.t, best[(size_t)t * step + i], slots[(size_t)t * step + i]);
        n_out = select_topk_take(&b.t, sorted, out, scores);
    }
    select_scratch_free(&sc);
    return n_out;
}

int select_scan_split(const selector *s, const select_rows *rows, int n) {
    return s->params.n_threads > 1 && n >= 8192 && (size_t)n * rows->row_bytes >= ((size_t)2 << 20);
}

/* One query's scan split across threads: contiguous parts, each into its
 * own buffer of k from its own sampled threshold, merged at the end. A
 * part's threshold aims at its share of the whole scan's 4k admissions (k
 * each of 4 parts: aimed at 4k each, the parts admitted 4 times the rows a
 * whole scan does, and cut their buffers as often). A part may then miss
 * rows of the k best: where the merged k-th best does not beat a part's
 * threshold, that part is scanned again from none (the same result). */
typedef struct scan_job {
    const selector *s;
    const select_rows *rows;
    const select_mask *m;
    int n, k, n_parts;
    int64_t span; /* the whole scan's eligible slots */
    float *best;
    int32_t *slots;
    int *got;
    uint64_t *thr0;
    int64_t *scored;
} scan_job;

/* part t of n_parts contiguous parts of the n slots */
static void part_range(int n, int n_parts, int t, int *from, int *to) {
    *from = (int)((int64_t)n * t / n_parts);
    *to = (int)((int64_t)n * (t + 1) / n_parts);
}

/* A part's aim: its share of the whole scan's 4k admissions (span: the
 * whole scan's eligible slots). */
static int64_t part_share(const select_mask *m, int n, int from, int to, int64_t span, int k) {
    int lo[3], hi[3], nr = select_mask_ranges(m, n, lo, hi);
    return (4 * (int64_t)k * mask_span(lo, hi, nr, from, to) + span - 1) / (span ? span : 1);
}

/* After a merge of n_out pairs (out, their scores merged): the parts whose
 * threshold (thr0[t * thr_step]) the merged k-th best does not beat may
 * have turned away one of the k best, and are scanned again for r from
 * none into their buffers (best and slots + t * step, got[t * got_step]).
 * Returns whether any was, -1 when out of memory; the rows read to *rows. */
static int rescan_parts(const selector *s, const select_rows *r, int n, const select_mask *m, int k, int n_parts,
                        const uint64_t *thr0, int thr_step, int n_out, const float *merged, const int32_t *out,
                        float *best, int32_t *slots, size_t step, int *got, int got_step, select_scratch *sc,
                        int64_t *rows) {
    uint64_t kth = UINT64_MAX;
    for (int i = 0; i < n_out; i++) {
        const uint64_t key = select_pair_key(merged[i], out[i]);
        kth = key < kth ? key : kth;
    }
    int again = 0;
    for (int t = 0; t < n_parts; t++) {
        const uint64_t thr = thr0[(size_t)t * thr_step];
        if (!thr || (n_out == k && kth > thr)) continue;
        int from, to;
        part_range(n, n_parts, t, &from, &to);
        const size_t o = (size_t)t * step;
        got[(size_t)t * got_step] = scan_range(s, r, n, from, to, m, k, 0, 0, sc, slots + o, best + o, rows);
        if (got[(size_t)t * got_step] < 0) return -1;
        again = 1;
    }
    return again;
}

static void scan_part_chunk(void *ctx, int t, int thread) {
    (void)thread;
    scan_job *j = ctx;
    select_scratch sc = {0};
    int from, to;
    part_range(j->n, j->n_parts, t, &from, &to);
    j->scored[t] = 0;
    j->thr0[t] = sample_threshold(j->rows, j->n, from, to, j->m, part_share(j->m, j->n, from, to, j->span, j->k),
                                  &j->scored[t]);
    j->got[t] = scan_range(j->s, j->rows, j->n, from, to, j->m, j->k, j->thr0[t], 0, &sc, j->slots + (size_t)t * j->k,
                           j->best + (size_t)t * j->k, &j->scored[t]);
    select_scratch_free(&sc);
}

int select_scan_topk_parallel(selector *s, const select_rows *rows, int n, const select_mask *m, int k, int sorted,
                              select_scratch *sc, int32_t *out) {
    if (k <= 0) return 0;
    /* two parts per thread: a thread another process holds up leaves one for the others */
    const int n_parts = 2 * pool_threads(s->env.pool);
    int lo[3], hi[3], nr = select_mask_ranges(m, n, lo, hi);
    float *best = select_query_realloc(s, NULL, (size_t)(n_parts + 1) * k * sizeof(float));
    int32_t *slots = select_query_realloc(s, NULL, (size_t)n_parts * k * sizeof(int32_t));
    int *got = select_query_realloc(s, NULL, (size_t)n_parts * sizeof(int));
    uint64_t *thr0 = select_query_realloc(s, NULL, (size_t)n_parts * sizeof(uint64_t));
    int64_t *scored = select_query_realloc(s, NULL, (size_t)n_parts * sizeof(int64_t));
    int n_out = -1;
    int64_t total = 0;
    if (best && slots && got && thr0 && scored) {
        scan_job j = {.s = s, .rows = rows, .m = m, .n = n, .k = k, .n_parts = n_parts,
                      .span = mask_span(lo, hi, nr, 0, n), .best = best, .slots = slots, .got = got, .thr0 = thr0,
                      .scored = scored};
        pool_run(s->env.pool, n_parts, scan_part_chunk, &j);
        float *merged = best + (size_t)n_parts * k;
        int failed = 0;
        for (int t = 0; t < n_parts; t++) failed |= got[t] < 0, total += scored[t];
        if (!failed) n_out = merge_parts(s, k, n_parts, best, slots, k, got, 1, sorted, out, merged);
        const int again = n_out < 0 ? 0
                                    : rescan_parts(s, rows, n, m, k, n_parts, thr0, 1, n_out, merged, out, best,
                                                   slots, k, got, 1, sc, &total);
        if (again) n_out = again < 0 ? -1 : merge_parts(s, k, n_parts, best, slots, k, got, 1, sorted, out, NULL);
    }
    count_rows(s, rows, total);
    free(best);
    free(slots);
    free(got);
    free(thr0);
    free(scored);
    return n_out;
}

/* ---- g queries under one mask ----------------------------------------------
 * A KV head's query search heads rank the same keys: scanned one by one, each
 * reads every row again. Here a run of rows is read once and scored for all
 * g (the kernel holds two queries in registers at a time), and each query
 * offers the scores that reach its own worst kept to its own buffer. */

/* r for query i of the group alone */
static select_rows query_of(const select_rows *r, int i) {
    select_rows ri = *r;
    if (r->q) ri.q = r->q + (size_t)i * r->d;
    if (r->q_far) ri.q_far = r->q_far + (size_t)i * r->d;
    if (r->cq) ri.cq = r->cq + i;
    if (r->cq_far) ri.cq_far = r->cq_far + i;
    return ri;
}

/* Scores of the n consecutive rows from slot j0 for the g queries into
 * dots (query i's at dots + i * SELECT_BLOCK): rows below r->far_hi with
 * the queries r->q_far, as select_score_run scores one query's. Codes go
 * query by query, the run still in cache after the first. */
static void score_run_group(const select_rows *r, int g, int j0, int n, float *dots) {
    if (r->code_scores) {
        for (int i = 0; i < g; i++) {
            const select_rows ri = query_of(r, i);
            select_score_run(&ri, j0, n, dots + (size_t)i * SELECT_BLOCK);
        }
        return;
    }
    const char *base = (const char *)r->base;
    const int nf = r->far_hi > j0 ? (r->far_hi - j0 < n ? r->far_hi - j0 : n) : 0;
    if (nf > 0) r->scores(r->q_far, g, base + (size_t)j0 * r->row_bytes, nf, r->d, 1.0f, dots, SELECT_BLOCK);
    if (n > nf)
        r->scores(r->q, g, base + (size_t)(j0 + nf) * r->row_bytes, n - nf, r->d, 1.0f, dots + nf, SELECT_BLOCK);
}

/* The eligible slots of [from, to) for the g queries r->q (r->d apart; or
 * coded, r->cq[i]) into t[i] from their thresholds. dots: g x SELECT_BLOCK; idx: SELECT_BLOCK.
 * Returns the rows read. */
static int64_t scan_range_group(const select_rows *r, int n, int from, int to, const select_mask *m, int g,
                                float *dots, int32_t *idx, topk_buf *t) {
    int lo[3], hi[3], nr = select_mask_ranges(m, n, lo, hi);
    int64_t rows = 0;
    for (int q = 0; q < nr; q++) {
        const int a = lo[q] > from ? lo[q] : from, e = hi[q] < to ? hi[q] : to;
        for (int j0 = a; j0 < e; j0 += SELECT_BLOCK) {
            const int nb = e - j0 < SELECT_BLOCK ? e - j0 : SELECT_BLOCK;
            score_run_group(r, g, j0, nb, dots);
            for (int i = 0; i < g; i++) offer_scores(dots + (size_t)i * SELECT_BLOCK, j0, nb, m, idx, &t[i]);
            rows += nb;
        }
    }
    return rows;
}

/* scan_part for g <= SELECT_GROUP_MAX queries, each from its own sampled
 * threshold aimed at `admit` admissions. A whole scan (thr_out NULL) scans
 * again alone from none a query that kept fewer than k; a split scan's part
 * leaves that to its caller and gives the thresholds in thr_out[i]. Query
 * i's slots to out + i * k (scores likewise when not NULL), its count to
 * got[i]; the rows read (once for the g) to *rows_read, the scores
 * computed to *n_scored. Returns 0, or -1 when out of memory. */
static int scan_part_group(const selector *s, const select_rows *r, int n, int from, int to, const select_mask *m,
                           int k, int g, int64_t admit, int sorted, select_scratch *sc, int32_t *out, float *scores,
                           int *got, uint64_t *thr_out, int64_t *rows_read, int64_t *n_scored) {
    topk_buf t[SELECT_GROUP_MAX];
    uint64_t thr0[SELECT_GROUP_MAX];
    if (!select_scratch_u(s, sc, (size_t)g * 2 * k) || !select_scratch_f(s, sc, (size_t)g * SELECT_BLOCK) ||
        !select_scratch_i(s, sc, SELECT_BLOCK))
        return -1;
    int64_t sampled = 0;
    for (int i = 0; i < g; i++) {
        const select_rows ri = query_of(r, i);
        thr0[i] = sample_threshold(&ri, n, from, to, m, admit, &sampled);
        if (thr_out) thr_out[i] = thr0[i];
        t[i] = (topk_buf){.key = sc->u + (size_t)i * 2 * k, .k = k, .thr = thr0[i]};
    }
    const int64_t rows = scan_range_group(r, n, from, to, m, g, sc->f, sc->i, t);
    *rows_read += rows + sampled;
    *n_scored += rows * g + sampled;
    for (int i = 0; i < g; i++)
        got[i] = select_topk_take(&t[i], sorted, out + (size_t)i * k, scores ? scores + (size_t)i * k : NULL);
    if (thr_out) return 0; /* a part: its caller checks the thresholds against the merged k-th best */
    /* (every buffer taken: scan_range may reuse the scratch) */
    for (int i = 0; i < g; i++) {
        if (!thr0[i] || got[i] >= k) continue;
        const select_rows ri = query_of(r, i);
        int64_t again = 0;
        got[i] = scan_range(s, &ri, n, from, to, m, k, 0, sorted, sc, out + (size_t)i * k,
                            scores ? scores + (size_t)i * k : NULL, &again);
        if (got[i] < 0) return -1;
        *rows_read += again, *n_scored += again;
    }
    return 0;
}

/* One part of a parallel group scan: a contiguous range of the slots, its
 * thresholds aimed at its share, as select_scan_topk_parallel's parts. */
typedef struct group_scan_job {
    const selector *s;
    const select_rows *rows;
    const select_mask *m;
    int n, k, g, n_parts;
    int64_t span;    /* the whole scan's eligible slots */
    float *best;     /* [n_parts][g][k] */
    int32_t *slots;  /* [n_parts][g][k] */
    int *got;        /* [n_parts][g] */
    uint64_t *thr0;  /* [n_parts][g] */
    int64_t *counts; /* [n_parts][2]: rows read, scores computed */
    int *rc;         /* [n_parts] */
} group_scan_job;

static void scan_group_chunk(void *ctx, int t, int thread) {
    (void)thread;
    group_scan_job *j = ctx;
    select_scratch sc = {0};
    int from, to;
    part_range(j->n, j->n_parts, t, &from, &to);
    const size_t o = (size_t)t * j->g * j->k;
    j->counts[2 * t] = j->counts[2 * t + 1] = 0;
    j->rc[t] = scan_part_group(j->s, j->rows, j->n, from, to, j->m, j->k, j->g,
                               part_share(j->m, j->n, from, to, j->span, j->k), 0, &sc, j->slots + o, j->best + o,
                               j->got + (size_t)t * j->g, j->thr0 + (size_t)t * j->g, &j->counts[2 * t],
                               &j->counts[2 * t + 1]);
    select_scratch_free(&sc);
}

int select_scan_topk_group(selector *s, const select_rows *rows, int n, const select_mask *m, int k, int g, int sorted,
                           int32_t *out, int *got) {
    for (int i = 0; i < g; i++) got[i] = 0;
    if (k <= 0 || g <= 0) return 0;
    if (g > SELECT_GROUP_MAX) return -1;
    /* split as select_scan_topk_parallel splits one query's scan */
    const int n_parts = select_scan_split(s, rows, n) ? 2 * pool_threads(s->env.pool) : 1;
    int64_t read = 0, scored = 0;
    if (n_parts == 1) {
        select_scratch sc = {0};
        int rc = scan_part_group(s, rows, n, 0, n, m, k, g, 4 * (int64_t)k, sorted, &sc, out, NULL, got, NULL, &read,
                                 &scored);
        select_scratch_free(&sc);
        s->stats.n_visited += scored;
        s->stats.bytes_read += (uint64_t)read * rows->row_bytes;
        return rc;
    }
    const size_t per = (size_t)n_parts * g * k;
    float *best = select_query_realloc(s, NULL, per * sizeof(float));
    int32_t *slots = select_query_realloc(s, NULL, per * sizeof(int32_t));
    int *pgot = select_query_realloc(s, NULL, (size_t)n_parts * g * sizeof(int));
    int64_t *counts = select_query_realloc(s, NULL, (size_t)n_parts * 2 * sizeof(int64_t));
    int *rcs = select_query_realloc(s, NULL, (size_t)n_parts * sizeof(int));
    uint64_t *thr0 = select_query_realloc(s, NULL, (size_t)n_parts * g * sizeof(uint64_t));
    float *merged = select_query_realloc(s, NULL, (size_t)k * sizeof(float));
    int rc = best && slots && pgot && counts && rcs && thr0 && merged ? 0 : -1;
    if (!rc) {
        int lo[3], hi[3], nr = select_mask_ranges(m, n, lo, hi);
        group_scan_job j = {.s = s, .rows = rows, .m = m, .n = n, .k = k, .g = g, .n_parts = n_parts,
                            .span = mask_span(lo, hi, nr, 0, n), .best = best, .slots = slots, .got = pgot,
                            .thr0 = thr0, .counts = counts, .rc = rcs};
        pool_run(s->env.pool, n_parts, scan_group_chunk, &j);
        for (int t = 0; t < n_parts; t++) {
            if (rcs[t]) rc = -1;
            read += counts[2 * t], scored += counts[2 * t + 1];
        }
    }
    /* each query's parts: query i's at (t * g + i) * k, checked against its merged k-th best */
    select_scratch sc = {0};
    for (int i = 0; !rc && i < g; i++) {
        const size_t o = (size_t)i * k, step = (size_t)g * k;
        const select_rows ri = query_of(rows, i);
        int64_t again_rows = 0;
        got[i] = merge_parts(s, k, n_parts, best + o, slots + o, step, pgot + i, g, sorted, out + o, merged);
        const int again = got[i] < 0 ? -1
                                     : rescan_parts(s, &ri, n, m, k, n_parts, thr0 + i, g, got[i], merged, out + o,
                                                    best + o, slots + o, step, pgot + i, g, &sc, &again_rows);
        if (again > 0)
            got[i] = merge_parts(s, k, n_parts, best + o, slots + o, step, pgot + i, g, sorted, out + o, NULL);
        if (again < 0 || got[i] < 0) rc = -1;
        read += again_rows, scored += again_rows;
    }
    select_scratch_free(&sc);
    s->stats.n_visited += scored;
    s->stats.bytes_read += (uint64_t)read * rows->row_bytes;
    free(best);
    free(slots);
    free(pgot);
    free(counts);
    free(rcs);
    free(thr0);
    free(merged);
    return rc;
}

/* Keys per sgemm block of the batched scan: n x 1024 scores. */
#define BATCH_KEYS 1024

int select_scan_topk_batch(selector *s, int n, const float *qn, const void *base, size_t stride, int d, int f16,
                           int count, const select_mask *m, int k, int sorted, int32_t *out, int *got, int n_threads) {
    int top = 0, far = 0; /* keys any query may see; whether any has far keys */
    for (int i = 0; i < n; i++) {
        int v = m[i].n_slots < count ? m[i].n_slots : count;
        top = v > top ? v : top;
        far |= m[i].far_hi > 0;
    }
    const int far_rot = far ? s->params.far_rot : 0;
    float *R = far_rot ? select_query_realloc(s, NULL, (size_t)n * BATCH_KEYS * sizeof(float)) : NULL;
    int *far_hi = far_rot ? select_query_realloc(s, NULL, (size_t)n * sizeof(int)) : NULL;
    for (int i = 0; far_hi && i < n; i++) far_hi[i] = m[i].far_hi;
    float *S = select_query_realloc(s, NULL, (size_t)n * BATCH_KEYS * sizeof(float));
    float *kf = f16 ? select_query_realloc(s, NULL, (size_t)BATCH_KEYS * d * sizeof(float)) : NULL;
    uint64_t *keys = select_query_realloc(s, NULL, (size_t)n * 2 * (k > 0 ? k : 1) * sizeof(uint64_t));
    topk_buf *t = select_query_realloc(s, NULL, (size_t)n * sizeof(topk_buf));
    int32_t *idx = select_query_realloc(s, NULL, (size_t)n * BATCH_KEYS * sizeof(int32_t));
    int rc = !S || (f16 && !kf) || !keys || !t || !idx || (far_rot && (!R || !far_hi)) ? -1 : 0;
    int64_t scored = 0;
    const int run = 4 * k > 64 ? 4 * k : 64;
    for (int i = 0; !rc && i < n; i++) t[i] = (topk_buf){.key = keys + (size_t)i * 2 * k, .k = k};
    for (int j0 = 0; !rc && k > 0 && j0 < top; j0 += BATCH_KEYS) {
        const int j1 = j0 + BATCH_KEYS < top ? j0 + BATCH_KEYS : top, nb = j1 - j0;
        const float *K = (const float *)base + (size_t)j0 * stride;
        if (f16) { /* f16 rows are packed (stride == d) */
            dequant_row(GGML_TYPE_F16, (const uint16_t *)base + (size_t)j0 * stride, kf, (int64_t)nb * d);
            K = kf;
        }
        blas_sgemm(n_threads, 0, 1, n, nb, d, 1.0f, qn, d, K, f16 ? d : (int)stride, 0.0f, S, nb);
        /* far keys without the rotated dims */
        if (far_rot) select_far_correct(n, qn, d, far_rot, K, f16 ? d : (int)stride, j0, nb, far_hi, S, nb, R, n_threads);
#pragma omp parallel for num_threads(n_threads) schedule(static) reduction(+ : scored) if (n * nb >= 1 << 16)
        for (int i = 0; i < n; i++) {
            int lo[3], hi[3], nr = select_mask_ranges(&m[i], count, lo, hi);
            const float *row = S + (size_t)i * nb - j0;
            int32_t *at = idx + (size_t)i * BATCH_KEYS;
            for (int r = 0; r < nr; r++) {
                const int a = lo[r] > j0 ? lo[r] : j0, b = hi[r] < j1 ? hi[r] : j1;
                if (b <= a) continue;
                /* only scores that reach the worst kept at the last cut may
                 * enter: runs of 4k, so that the threshold rises from the
                 * first run of a query's first block on */
                for (int x = a; x < b; x += run) offer_scores(row + x, x, b - x < run ? b - x : run, &m[i], at, &t[i]);
                if (!m[i].seg) {
                    scored += b - a;
                } else {
                    for (int j = a; j < b; j++) scored += m[i].seg[j] == m[i].query_seg;
                }
            }
        }
    }
#pragma omp parallel for num_threads(n_threads) schedule(static) if (!rc && (int64_t)n * k >= 1 << 14)
    for (int i = 0; i < n; i++)
        if (!rc) got[i] = k > 0 ? select_topk_take(&t[i], sorted, out + (size_t)i * k, NULL) : 0;
    s->stats.n_visited += scored;
    s->stats.bytes_read += (uint64_t)top * (uint64_t)d * (f16 ? 2 : 4); /* each key row read once per batch */
    free(R);
    free(far_hi);
    free(S);
    free(kf);
    free(keys);
    free(t);
    free(idx);
    return rc;
}

/* ---- graph indexes (hnsw, faiss) -------------------------------------------- */

