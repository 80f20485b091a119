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
 * Past group_from keys the summaries themselves are too many (at 1M keys,
 * 16K per query: the sgemm and the filter of its scores were the part of
 * a prompt's selection that grew faster than N). There, groups of G
 * consecutive blocks are ranked first by the mean of their keys, and only
 * the blocks of each query's gprobe best groups and of its last, partial
 * group are ranked by theirs: d x N / (B G) + d x G x gprobe products,
 * the quadratic term divided by B G.
 *
 * Where the exact selector keeps int8 / int4 codes of its keys, the keys'
 * pass reads those (a third of an f16 row for int4) and its best
 * select_rerank_pool(K) slots are ranked again on the stored keys, as
 * decode's compressed scan does.
 *
 * What it gives up is recall: a block with one strong key among weak ones
 * can rank below a block of middling keys. In a search space part rotated
 * by position, neighbouring keys are alike, which is what makes contiguous
 * blocks a fair grouping; select_check_recall measures the recall against
 * the full scan (bench, subq_context_stats). The answer of a query never
 * depends on keys at or past its n_slots: a block is ranked only when it
 * lies wholly below, and the rest is scanned exactly. */
#include <math.h>
#include <omp.h>
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

/* The parts of [a, e) (a block's slots, or a group's blocks) in the
 * ranges [lo, hi), appended to j0 / len; returns how many. */
static int block_runs(const int *lo, const int *hi, int nr, int a, int e, int *j0, int *len) {
    int n = 0;
    for (int q = 0; q < nr; q++) {
        const int x = lo[q] > a ? lo[q] : a, y = hi[q] < e ? hi[q] : e;
        if (y > x) j0[n] = x, len[n] = y - x, n++;
    }
    return n;
}

/* A threshold that about 2 keep of the `total` scores reach, from a
 * sample of every step-th one: a buffer filled from no threshold admits
 * about 2k + k ln(n / 2k) pairs and is cut once per k of them, which took
 * more time than the int4 scores of the rows (1,000 admissions a query of
 * 4,096 rows into a pool of 256, measured at 64K). -INFINITY when the
 * sample is too small. */
enum { SAMPLE_MAX = 128 };

static float sampled_threshold(const float *dots, int total, int keep) {
    const int step = (total + SAMPLE_MAX - 1) / SAMPLE_MAX, ns = step > 0 ? total / step : 0;
    const int want = (int)(((int64_t)2 * keep * ns + total - 1) / total);
    if (want < 1 || 2 * want > ns) return -INFINITY;
    uint64_t key[SAMPLE_MAX];
    for (int i = 0; i < ns; i++) key[i] = select_pair_key(dots[(size_t)i * step], i);
    topk_buf t = {.key = key, .n = ns, .k = want};
    return select_key_score(select_topk_cut_worst(&t, want));
}

/* Offer the runs' eligible scores (dots, run after run) that reach thr
 * to t; returns how many reached it. at: scratch of the longest run. */
static int offer_runs(const float *dots, const int *j0, const int *len, int n_runs, const select_mask *m, float thr,
                      int32_t *at, topk_buf *t) {
    const kernels *K = kernels_get();
    int reached = 0;
    for (int u = 0; u < n_runs; dots += len[u], u++) {
        const int nat = K->index_at_least(dots, len[u], thr, at);
        for (int c = 0; c < nat; c++) {
            const int j = j0[u] + at[c];
            if (m->seg && m->seg[j] != m->query_seg) continue;
            select_topk_push(t, dots[at[c]], j);
            reached++;
        }
    }
    return reached;
}

/* Step 1 for one level of summaries (blocks, or groups of blocks): each
 * query's `keep` best full units of `unit` slots below its n_slots that
 * hold eligible slots, by q . mean over the unit sums U [nu_max][d], into
 * bt[i]. */
static void rank_units(int n, const float *qn, int d, const float *U, int unit, int nu_max, int count,
                       const select_mask *m, float *S, int chunk, int32_t *idx, int scratch, topk_buf *bt,
                       int far_rot, const int *unit_hi, float *R, const float *reps, int n_reps, float *SR,
                       int *rep_hi, int n_threads) {
    const kernels *K = kernels_get();
    for (int i = 0; reps && far_rot && i < n; i++) rep_hi[i] = unit_hi[i] * n_reps;
    for (int c0 = 0; c0 < nu_max; c0 += chunk) {
        const int c1 = c0 + chunk < nu_max ? c0 + chunk : nu_max, nc = c1 - c0;
        blas_sgemm(n_threads, 0, 1, n, nc, d, 1.0f, qn, d, U + (size_t)c0 * d, d, 0.0f, S, nc);
        /* units wholly among a query's far keys: without the rotated dims */
        if (far_rot) select_far_correct(n, qn, d, far_rot, U + (size_t)c0 * d, d, c0, nc, unit_hi, S, nc, R, n_threads);
        if (reps) { /* a unit's score: the best of its mean and its representative keys */
            const int nrc = nc * n_reps;
            blas_sgemm(n_threads, 0, 1, n, nrc, d, 1.0f, qn, d, reps + (size_t)c0 * n_reps * d, d, 0.0f, SR, nrc);
            if (far_rot)
                select_far_correct(n, qn, d, far_rot, reps + (size_t)c0 * n_reps * d, d, c0 * n_reps, nrc, rep_hi, SR,
                                   nrc, R, n_threads);
            for (int i = 0; i < n; i++)
                for (int u = 0; u < nc; u++) {
                    const float *sr = SR + (size_t)i * nrc + (size_t)u * n_reps;
                    float *s = S + (size_t)i * nc + u;
                    for (int x = 0; x < n_reps; x++) *s = sr[x] > *s ? sr[x] : *s;
                }
        }
#pragma omp parallel for num_threads(n_threads) schedule(static) if (n * nc >= 1 << 16)
        for (int i = 0; i < n; i++) {
            int lo[3], hi[3], ulo[3], uhi[3];
            const int nr = select_mask_ranges(&m[i], count, lo, hi);
            const int nu = (m[i].n_slots < count ? m[i].n_slots : count) / unit;
            const int nur = block_ranges(lo, hi, nr, unit, nu, ulo, uhi);
            const float *row = S + (size_t)i * nc - c0;
            int32_t *at = idx + (size_t)i * scratch;
            const int run = 4 * bt[i].k;
            for (int q = 0; q < nur; q++) {
                const int a0 = ulo[q] > c0 ? ulo[q] : c0, e = uhi[q] < c1 ? uhi[q] : c1;
                /* only scores that reach the worst kept at the last cut may
                 * enter: runs of 4 keep, so that the threshold rises from
                 * the first run on */
                for (int a = a0; a < e; a += run) {
                    const int e1 = e - a < run ? e : a + run;
                    const float worst = bt[i].thr ? select_key_score(bt[i].thr) : -INFINITY;
                    const int nat = K->index_at_least(row + a, e1 - a, worst, at);
                    for (int c = 0; c < nat; c++) select_topk_push(&bt[i], row[a + at[c]], a + at[c]);
                }
            }
        }
    }
}

/* The best `keep` of the eligible runs of rows (j0, len), scored by r
 * into dots, into t (a buffer of 2 keep): the sampled threshold first,
 * and all of them again when fewer than keep reached it. With reps (rows
 * of n_reps representatives per row of r, scored into rdots), a row's
 * score is the best of its own and its representatives'. Returns the rows
 * scored. */
static int keep_best_runs(const select_rows *r, const select_rows *reps, int n_reps, const int *j0, const int *len,
                          int n_runs, const select_mask *m, float *dots, float *rdots, int32_t *at, topk_buf *t) {
    int total = 0;
    for (int u = 0; u < n_runs; total += len[u], u++) {
        select_score_run(r, j0[u], len[u], dots + total);
        if (!reps) continue;
        select_score_run(reps, j0[u] * n_reps, len[u] * n_reps, rdots);
        for (int v = 0; v < len[u]; v++)
            for (int x = 0; x < n_reps; x++) {
                const float sr = rdots[(size_t)v * n_reps + x];
                dots[total + v] = sr > dots[total + v] ? sr : dots[total + v];
            }
    }
    const float thr = sampled_threshold(dots, total, t->k);
    if (offer_runs(dots, j0, len, n_runs, m, thr, at, t) < t->k && thr > -INFINITY) {
        t->n = 0, t->thr = 0;
        offer_runs(dots, j0, len, n_runs, m, -INFINITY, at, t);
    }
    return total;
}

int select_block_topk_batch(selector *s, int n, const float *qn, const float *qf, const select_rows *rows,
                            const select_rows *codes, const select_block_index *ix, int count, const select_mask *m,
                            int k, int32_t *out, int *got, int n_threads) {
    const int d = rows->d, block = ix->block, nprobe = ix->nprobe;
    int top = 0, far = 0; /* keys any query may rank; whether any has far keys */
    for (int i = 0; i < n; i++) {
        const int v = m[i].n_slots < count ? m[i].n_slots : count;
        top = v > top ? v : top;
        far |= m[i].far_hi > 0;
    }
    const int far_rot = far && qf ? s->params.far_rot : 0;
    const int nb_max = top / block;
    /* groups first once a batch sees group_from keys and more groups than
     * it keeps */
    const int G = ix->group, grouped = G > 0 && top >= ix->group_from && nb_max / G > ix->gprobe;
    const int unit = grouped ? block * G : block, nu_max = top / unit, keep1 = grouped ? ix->gprobe : nprobe;
    const int chosen_max = keep1 > nprobe ? keep1 : nprobe;
    /* the keys' pass keeps k slots, or, over codes, a pool of them that
     * the stored keys then rank */
    const int keep = codes ? (int)select_rerank_pool(k) : k;
    const int chunk = nu_max < SUMMARY_CHUNK ? (nu_max > 0 ? nu_max : 1) : SUMMARY_CHUNK;
    int scratch = chunk > block ? chunk : block; /* the longest run index_at_least lists */
    scratch = scratch > G ? scratch : G;
    float *S = select_query_realloc(s, NULL, (size_t)n * chunk * sizeof(float));
    uint64_t *bkeys = select_query_realloc(s, NULL, (size_t)n * 2 * chosen_max * sizeof(uint64_t));
    topk_buf *bt = select_query_realloc(s, NULL, (size_t)n * sizeof(topk_buf));
    int32_t *chosen = select_query_realloc(s, NULL, (size_t)n * chosen_max * sizeof(int32_t));
    int32_t *idx = select_query_realloc(s, NULL, (size_t)n * scratch * sizeof(int32_t));
    /* step 2's scratch, one per thread: each query's runs and their scores,
     * its buffer of keys, and over codes its pool */
    const int per_group = grouped ? (ix->gprobe + 1) * G : 0, per_block = (nprobe + 1) * block;
    const size_t dots_n = per_group > per_block ? per_group : per_block;
    const size_t max_runs = 3 * ((size_t)chosen_max + 1);
    int *runs = select_query_realloc(s, NULL, (size_t)n_threads * 2 * max_runs * sizeof(int));
    float *dots = select_query_realloc(s, NULL, (size_t)n_threads * dots_n * sizeof(float));
    /* ... and the representatives' scores of a run of blocks (at most a group's) */
    float *rdots = grouped && ix->n_reps ? select_query_realloc(s, NULL, (size_t)n_threads * G * ix->n_reps * sizeof(float))
                                         : NULL;
    uint64_t *keys = select_query_realloc(s, NULL, (size_t)n_threads * 2 * keep * sizeof(uint64_t));
    int32_t *ranks = codes ? select_query_realloc(s, NULL, (size_t)n_threads * keep * sizeof(int32_t)) : NULL;
    /* with far keys: each query's far boundary in units, and the rotated part's scores */
    int *unit_hi = far_rot ? select_query_realloc(s, NULL, (size_t)n * 2 * sizeof(int)) : NULL;
    const int n_reps = ix->n_reps;
    float *R = far_rot ? select_query_realloc(s, NULL, (size_t)n * chunk * (n_reps > 1 ? n_reps : 1) * sizeof(float))
                       : NULL;
    float *SR = n_reps ? select_query_realloc(s, NULL, (size_t)n * chunk * n_reps * sizeof(float)) : NULL;
    int rc = !S || !bkeys || !bt || !chosen || !idx || !runs || !dots || !keys || (codes && !ranks) ||
                     (far_rot && (!unit_hi || !R)) || (n_reps && !SR) || (grouped && n_reps && !rdots)
                 ? -1
                 : 0;
    for (int i = 0; !rc && i < n; i++) bt[i] = (topk_buf){.key = bkeys + (size_t)i * 2 * chosen_max, .k = keep1};
    for (int i = 0; !rc && unit_hi && i < n; i++) unit_hi[i] = m[i].far_hi / unit;

    /* 1. each query's best blocks (or groups) by their summaries */
    if (!rc)
        rank_units(n, qn, d, grouped ? ix->gsums : ix->sums, unit, nu_max, count, m, S, chunk, idx, scratch, bt,
                   far_rot, unit_hi, R, n_reps ? (grouped ? ix->greps : ix->reps) : NULL, n_reps, SR,
                   unit_hi ? unit_hi + n : NULL, n_threads);

    /* 2. per query: in groups, the blocks of its best groups and of its
     * last, partial group, ranked by their summaries; then the keys of its
     * best blocks and of its partial block: exactly, or by their codes and
     * then the pool's stored keys exactly. Scores are kept, so that a
     * sample of them sets each buffer's threshold before any is offered. */
    const select_rows sum_rows = {.base = ix->sums, .stride = (size_t)d, .d = d,
                                  .scores = kernels_kv_decode_get(SUBQ_KV_F32).scores,
                                  .row_bytes = (size_t)d * sizeof(float)};
    int64_t scored = 0, ranked = 0, summed = 0;
#pragma omp parallel for num_threads(n_threads) schedule(dynamic, 8) reduction(+ : scored, ranked, summed) if (!rc)
    for (int i = 0; i < n; i++) {
        if (rc) continue;
        const int th = omp_get_thread_num();
        int lo[3], hi[3];
        const int nr = select_mask_ranges(&m[i], count, lo, hi);
        const int vis = m[i].n_slots < count ? m[i].n_slots : count;
        int32_t *at = idx + (size_t)i * scratch, *ch = chosen + (size_t)i * chosen_max;
        int *j0 = runs + (size_t)th * 2 * max_runs, *len = j0 + max_runs;
        float *dt = dots + (size_t)th * dots_n;
        int nch = select_topk_take(&bt[i], 0, ch, NULL), n_runs = 0;
        if (grouped) {
            int blo[3], bhi[3];
            const int nb = vis / block, nbr = block_ranges(lo, hi, nr, block, nb, blo, bhi);
            for (int c = 0; c < nch; c++) n_runs += block_runs(blo, bhi, nbr, ch[c] * G, (ch[c] + 1) * G, j0 + n_runs, len + n_runs);
            n_runs += block_runs(blo, bhi, nbr, nb / G * G, nb, j0 + n_runs, len + n_runs);
            select_rows r = sum_rows;
            r.q = qn + (size_t)i * d;
            if (far_rot) r.q_far = qf + (size_t)i * d, r.far_hi = m[i].far_hi / block;
            select_rows rr = r; /* the blocks' representatives, n_reps rows a block */
            rr.base = ix->reps;
            rr.far_hi = r.far_hi * n_reps;
            const select_mask every = {0}; /* the runs hold eligible blocks only */
            bt[i] = (topk_buf){.key = bt[i].key, .k = nprobe};
            summed += keep_best_runs(&r, n_reps ? &rr : NULL, n_reps, j0, len, n_runs, &every, dt,
                                     n_reps ? rdots + (size_t)th * G * n_reps : NULL, at, &bt[i]) * (1 + n_reps);
            nch = select_topk_take(&bt[i], 0, ch, NULL);
            n_runs = 0;
        }
        for (int c = 0; c < nch; c++) n_runs += block_runs(lo, hi, nr, ch[c] * block, (ch[c] + 1) * block, j0 + n_runs, len + n_runs);
        n_runs += block_runs(lo, hi, nr, vis / block * block, vis, j0 + n_runs, len + n_runs);
        select_rows r = codes ? *codes : *rows;
        if (codes) r.cq = codes->cq + i;
        else r.q = qn + (size_t)i * d;
        if (far_rot && codes) r.cq_far = codes->cq_far + i, r.far_hi = m[i].far_hi;
        else if (far_rot) r.q_far = qf + (size_t)i * d, r.far_hi = m[i].far_hi;
        topk_buf t = {.key = keys + (size_t)th * 2 * keep, .k = keep};
        scored += keep_best_runs(&r, NULL, 0, j0, len, n_runs, &m[i], dt, NULL, at, &t);
        int32_t *dst = out + (size_t)i * k;
        if (!codes) {
            got[i] = select_topk_take(&t, 0, dst, NULL); /* in any order (selector.h) */
            continue;
        }
        int32_t *pl = ranks + (size_t)th * keep;
        const int np = select_topk_take(&t, 0, pl, NULL);
        select_rows rr = *rows;
        rr.q = qn + (size_t)i * d;
        if (far_rot) rr.q_far = qf + (size_t)i * d, rr.far_hi = m[i].far_hi;
        select_score_slots(&rr, pl, np, dt);
        /* the pool's k best: one cut of all of them (t's keys are free again) */
        topk_buf best = {.key = t.key, .n = np, .k = k};
        for (int c = 0; c < np; c++) best.key[c] = select_pair_key(dt[c], pl[c]);
        got[i] = select_topk_take(&best, 0, dst, NULL);
        ranked += np;
    }
    const size_t scan_bytes = codes ? codes->row_bytes : rows->row_bytes;
    s->stats.n_visited += scored + ranked + summed + (int64_t)n * nu_max * (1 + n_reps);
    s->stats.bytes_read += (uint64_t)scored * scan_bytes + (uint64_t)ranked * rows->row_bytes +
                           ((uint64_t)summed + (uint64_t)nu_max * (1 + n_reps)) * d * sizeof(float);

    free(unit_hi);
    free(R);
    free(SR);
    free(rdots);
    free(S);
    free(bkeys);
    free(bt);
    free(chosen);
    free(runs);
    free(dots);
    free(keys);
    free(ranks);
    free(idx);
    return rc;
}

int select_check_recall(selector *s, int n, const float *qn, const float *qf, const select_rows *rows, int count,
                        const select_mask *m, int k, int check, const int32_t *out, const int *got) {
    select_scratch sc = {0};
    int32_t *full = select_query_realloc(s, NULL, (size_t)k * sizeof(int32_t));
    int rc = full ? 0 : -1;
    for (int i = 0; !rc && i < n; i++) {
        if (m[i].ex1_hi < 1 || (m[i].ex1_hi - 1) % check) continue; /* the token's slot ends its tail */
        select_rows r = *rows;
        r.q = qn + (size_t)i * rows->d;
        if (qf) r.q_far = qf + (size_t)i * rows->d, r.far_hi = m[i].far_hi;
        const selector_stats before = s->stats; /* the check is not the coarse scan's work */
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
    return rc;
}
