/* The exact selector's block scan (selector_query_prefill past probe_from
 * keys) against a brute-force reference of the same algorithm in double
 * precision: block means of the stored keys, each query's nprobe best
 * blocks among those wholly below its n_slots that hold a slot of its
 * ranges (past group_from keys: among the blocks of its group_probe best
 * groups of blocks, by their means, and of its partial last group), then
 * the exact top K of the eligible slots of those blocks and of the partial
 * last block (over int8 / int4 codes: recall of that top K). Also: keys at
 * or past a query's n_slots never change its answer; truncation,
 * re-appends and get_keys + put_keys keep the block (and group) summaries
 * right; below probe_from (or with nprobe 0) the answer is the full
 * batched scan's; the recall check counts what brute force counts; failed
 * allocations are errors; parameters out of range are refused. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/pool.h"
#include "base/rng.h"
#include "quant/quant.h"
#include "select/select_internal.h"
#include "select/selector.h"
#include "test_util.h"

static int cmp_desc(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

static int cmp_slot(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

/* 1 when two batches of answers hold the same counts and, per query, the
 * same slots (a prefill answers in any order: selector.h) */
static int same_sets(int nq, int k, int32_t *a, const int *ga, int32_t *b, const int *gb) {
    int same = 1;
    for (int i = 0; i < nq; i++) {
        same &= ga[i] == gb[i];
        qsort(a + (size_t)i * k, (size_t)ga[i], sizeof(int32_t), cmp_slot);
        qsort(b + (size_t)i * k, (size_t)gb[i], sizeof(int32_t), cmp_slot);
    }
    return same && !memcmp(a, b, (size_t)nq * k * sizeof(int32_t));
}

static double cosine(const float *a, const float *b, int d) {
    double ab = 0, aa = 0, bb = 0;
    for (int c = 0; c < d; c++) ab += (double)a[c] * b[c], aa += (double)a[c] * a[c], bb += (double)b[c] * b[c];
    return aa > 0 && bb > 0 ? ab / sqrt(aa * bb) : 0.0;
}

/* Keys that drift along the sequence (neighbours alike, as in a search
 * space rotated by position) plus noise; stored is what the selector keeps
 * (unit rows, f16-rounded when f16). */
static void make_keys(uint64_t *rng, int n, int d, int f16, float *keys, float *stored) {
    float *base = malloc((size_t)d * sizeof(float));
    for (int c = 0; c < d; c++) base[c] = rng_normal(rng);
    for (int j = 0; j < n; j++) {
        for (int c = 0; c < d; c++) {
            base[c] = 0.995f * base[c] + 0.1f * rng_normal(rng);
            keys[(size_t)j * d + c] = base[c] + 0.7f * rng_normal(rng);
        }
        select_normalize(stored + (size_t)j * d, keys + (size_t)j * d, d);
        for (int c = 0; f16 && c < d; c++) stored[(size_t)j * d + c] = fp16_to_fp32(fp32_to_fp16(stored[(size_t)j * d + c]));
    }
    free(base);
}

/* 1 if slot j lies in m's ranges below vis (the segment test aside) */
static int in_ranges(const select_mask *m, int vis, int j) {
    return j < vis && !(j >= m->ex0_lo && j < m->ex0_hi) && !(j >= m->ex1_lo && j < m->ex1_hi);
}

/* Sort the first `keep` of n (score, id) pairs best first (selection
 * sort: few in tests; ties: the lower id first). */
static void best_first(double *score, int32_t *id, int n, int keep) {
    for (int a = 0; a < n && a < keep; a++)
        for (int b = a + 1; b < n; b++)
            if (score[b] > score[a] || (score[b] == score[a] && id[b] < id[a])) {
                double t = score[a]; score[a] = score[b]; score[b] = t;
                int32_t u = id[a]; id[a] = id[b]; id[b] = u;
            }
}

/* q . (mean of the stored keys of slots [a, e)) / |q| */
static double mean_score(const float *q, double qn, const float *stored, int d, int a, int e) {
    double s = 0;
    for (int j = a; j < e; j++)
        for (int c = 0; c < d; c++) s += (double)q[c] / qn * stored[(size_t)j * d + c];
    return s / (e - a);
}

/* The R rows of rows[0..n) (indices into stored) farthest from the mean
 * of the stored rows of slots [a, e), into pick; 1 when the R-th and the
 * next lie within rounding (either may be taken). */
static int farthest(const float *stored, int d, int a, int e, const int32_t *rows, int n, int R, int32_t *pick) {
    double *mean = calloc((size_t)d, sizeof(double)), *dist = malloc((size_t)n * sizeof(double));
    for (int j = a; j < e; j++)
        for (int c = 0; c < d; c++) mean[c] += stored[(size_t)j * d + c] / (double)(e - a);
    for (int x = 0; x < n; x++) {
        dist[x] = 0;
        for (int c = 0; c < d; c++) {
            const double v = stored[(size_t)rows[x] * d + c] - mean[c];
            dist[x] += v * v;
        }
    }
    int tied = 0;
    for (int r = 0; r < R; r++) {
        int arg = -1;
        for (int x = 0; x < n; x++) arg = dist[x] >= 0 && (arg < 0 || dist[x] > dist[arg]) ? x : arg;
        pick[r] = rows[arg];
        const double dr = dist[arg];
        dist[arg] = -1;
        if (r == R - 1)
            for (int x = 0; x < n; x++) tied |= dist[x] >= 0 && dr - dist[x] <= 1e-5 * dr;
    }
    free(mean), free(dist);
    return tied;
}

/* The score of the unit of slots [a, e) (a block, or a group of G blocks of
 * B): q . its mean / |q|, or with R representatives the best of that and
 * q . k / |q| over its R keys farthest from the mean (a group's: among
 * its blocks' own); *tied as farthest() says. */
static double unit_score(const float *q, double qn, const float *stored, int d, int a, int e, int B, int R,
                         int *tied) {
    double s = mean_score(q, qn, stored, d, a, e);
    if (!R) return s;
    const int nb = (e - a) / B;
    int32_t *rows = malloc((size_t)(B > nb * R ? B : nb * R) * sizeof(int32_t)), *cand = malloc((size_t)nb * R * sizeof(int32_t));
    for (int b = 0; b < nb; b++) { /* each block's representatives */
        for (int j = 0; j < B; j++) rows[j] = a + b * B + j;
        *tied |= farthest(stored, d, a + b * B, a + (b + 1) * B, rows, B, R, cand + (size_t)b * R);
    }
    int32_t pick[64];
    if (nb > 1) *tied |= farthest(stored, d, a, e, cand, nb * R, R, pick);
    else memcpy(pick, cand, (size_t)R * sizeof(int32_t));
    for (int r = 0; r < R; r++) s = fmax(s, cosine(q, stored + (size_t)pick[r] * d, d));
    free(rows), free(cand);
    return s;
}

/* 1 when the keep-th and the (keep+1)-th best of score[0..n) (the first
 * keep sorted best first by best_first) lie within eps: blocks (or groups)
 * tied within rounding there, which the library may rank either way. */
static int tied_at(const double *score, int n, int keep, double eps) {
    if (keep <= 0 || n <= keep) return 0;
    double next = -INFINITY;
    for (int a = keep; a < n; a++) next = fmax(next, score[a]);
    return score[keep - 1] - next <= eps;
}

/* The reference answer's scores, best first, into want; returns the
 * count. G > 0: blocks ranked within groups of G (the batch groups).
 * *tied: 1 when a group or block at the edge of the probed ones ties with
 * the next best within rounding (1e-4 of the largest |block score|). */
static int reference(const float *q, const float *stored, int d, int count, int B, int nprobe, int G, int gprobe,
                     int R, const select_mask *m, int k, double *want, double *bscore, int32_t *bid, int *tied) {
    *tied = 0;
    const int vis = m->n_slots < count ? m->n_slots : count, nbf = vis / B;
    double qn = 0;
    for (int c = 0; c < d; c++) qn += (double)q[c] * q[c];
    qn = sqrt(qn);
    char *elig = calloc((size_t)nbf + 1, 1), *cand = calloc((size_t)nbf + 1, 1);
    for (int b = 0; b < nbf; b++)
        for (int j = b * B; j < (b + 1) * B && !elig[b]; j++) elig[b] = (char)in_ranges(m, vis, j);
    if (G > 0) {
        /* the gprobe best full groups that hold an eligible block, then
         * their blocks and those of the partial group */
        const int ngf = nbf / G;
        int ng = 0;
        for (int g = 0; g < ngf; g++) {
            int any = 0;
            for (int b = g * G; b < (g + 1) * G; b++) any |= elig[b];
            if (any) bscore[ng] = unit_score(q, qn, stored, d, g * G * B, (g + 1) * G * B, B, R, tied), bid[ng++] = g;
        }
        double top = 0;
        for (int a = 0; a < ng; a++) top = fmax(top, fabs(bscore[a]));
        best_first(bscore, bid, ng, gprobe);
        *tied |= tied_at(bscore, ng, gprobe, 1e-4 * top);
        for (int a = 0; a < ng && a < gprobe; a++)
            for (int b = bid[a] * G; b < (bid[a] + 1) * G; b++) cand[b] = elig[b];
        for (int b = ngf * G; b < nbf; b++) cand[b] = elig[b];
    } else {
        memcpy(cand, elig, (size_t)nbf);
    }
    int nb = 0;
    for (int b = 0; b < nbf; b++)
        if (cand[b]) bscore[nb] = unit_score(q, qn, stored, d, b * B, (b + 1) * B, B, R, tied), bid[nb++] = b;
    double top = 0;
    for (int a = 0; a < nb; a++) top = fmax(top, fabs(bscore[a]));
    best_first(bscore, bid, nb, nprobe);
    *tied |= tied_at(bscore, nb, nprobe, 1e-4 * top);
    int ne = 0;
    for (int a = 0; a < nb && a < nprobe; a++)
        for (int j = bid[a] * B; j < (bid[a] + 1) * B; j++)
            if (select_mask_allows(m, j)) want[ne++] = cosine(q, stored + (size_t)j * d, d);
    for (int j = nbf * B; j < vis; j++)
        if (select_mask_allows(m, j)) want[ne++] = cosine(q, stored + (size_t)j * d, d);
    qsort(want, (size_t)ne, sizeof(double), cmp_desc);
    free(elig), free(cand);
    return ne < k ? ne : k;
}

/* A prefill batch's masks: n_slots anywhere in the upper half (often not
 * on a block edge), sinks, a tail, and segments for one query in 8. */
static void batch_masks(uint64_t *rng, int n, int nq, int32_t *seg, select_mask *m) {
    for (int j = 0; j < n; j++) seg[j] = j / 1000 % 2;
    for (int i = 0; i < nq; i++) {
        const int ns = n / 2 + (int)(rng_next_u64(rng) % (uint64_t)(n / 2 + 8));
        const int tail = (int)(rng_next_u64(rng) % 300);
        m[i] = (select_mask){.n_slots = ns, .ex0_lo = 0, .ex0_hi = (int)(rng_next_u64(rng) % 70), .ex1_lo = ns - tail,
                             .ex1_hi = ns + 1};
        if (i % 8 == 3) m[i].seg = seg, m[i].query_seg = seg[(ns < n ? ns : n) - 1];
    }
}

/* A block scan from the first key (G > 0: in groups of G blocks from the
 * first key too; scan: what the keys' pass reads). */
static selector *new_scan(int d, int f16, subq_scan scan, int B, int nprobe, int G, int gprobe, int check, int R) {
    selector_params p;
    selector_params_default(&p, SUBQ_SELECT_EXACT, d);
    p.plan.search_f16 = f16;
    p.plan.scan = scan;
    p.plan.block_keys = B;
    p.plan.nprobe = nprobe;
    p.plan.probe_from = 0;
    p.plan.group_blocks = G, p.plan.group_probe = gprobe, p.plan.group_from = 0;
    p.plan.probe_check = check;
    p.plan.block_reps = R;
    selector *s;
    subq_error err = {0};
    CHECK(selector_new(&p, NULL, &s, &err) == SUBQ_OK, "selector_new: %s", err.msg);
    return s;
}

static selector *new_blocks(int d, int f16, int B, int nprobe, int check) {
    return new_scan(d, f16, SUBQ_SCAN_FULL, B, nprobe, 0, 1, check, 0);
}

static void test_reference_of(int f16, subq_scan scan, int d, int n, int B, int nprobe, int G, int gprobe, int R,
                              int threads, uint64_t seed) {
    enum { NQ = 60 };
    const int k = 50;
    uint64_t rng = rng_seed(seed);
    float *keys = malloc((size_t)n * d * sizeof(float)), *stored = malloc((size_t)n * d * sizeof(float));
    float *q = malloc((size_t)NQ * d * sizeof(float));
    int32_t *seg = malloc((size_t)n * sizeof(int32_t)), *out = malloc((size_t)NQ * k * sizeof(int32_t));
    int32_t *bid = malloc((size_t)n * sizeof(int32_t));
    double *want = malloc((size_t)n * sizeof(double)), *have = malloc((size_t)k * sizeof(double));
    double *bscore = malloc((size_t)n * sizeof(double));
    select_mask m[NQ];
    int got[NQ];
    make_keys(&rng, n, d, f16, keys, stored);
    for (int i = 0; i < NQ * d; i++) q[i] = rng_normal(&rng);
    /* queries near keys of their visible part, as a prompt's are */
    batch_masks(&rng, n, NQ, seg, m);
    for (int i = 0; i < NQ; i++) {
        const int j = (int)(rng_next_u64(&rng) % (uint64_t)(m[i].n_slots < n ? m[i].n_slots : n));
        for (int c = 0; c < d; c++) q[(size_t)i * d + c] = 0.5f * q[(size_t)i * d + c] + keys[(size_t)j * d + c];
    }
    selector *s = new_scan(d, f16, scan, B, nprobe, G, gprobe, 0, R);
    subq_error err = {0};
    /* the batch ranks groups when it holds more full groups than it probes */
    int top = 0;
    for (int i = 0; i < NQ; i++) {
        const int v = m[i].n_slots < n ? m[i].n_slots : n;
        top = v > top ? v : top;
    }
    const int grouped = G > 0 && top / B / G > gprobe;
    for (int at = 0, c = 7; at < n; at += c, c = c * 2 + 1) /* appends that end mid-block */
        CHECK(selector_append(s, keys + (size_t)at * d, at + c < n ? c : n - at, at, &err) == SUBQ_OK, "append: %s",
              err.msg);
    CHECK(selector_query_prefill(s, NQ, q, q, (size_t)d, k, m, out, got, threads) == 0, "query_prefill failed");
    const double tol = f16 ? 2e-3 : 1e-5;
    int bad_count = 0, bad_elig = 0, differ = 0, n_tied = 0, n_want = 0, found = 0;
    for (int i = 0; i < NQ; i++) {
        int tied;
        const int kk = reference(q + (size_t)i * d, stored, d, n, B, nprobe, grouped ? G : 0, gprobe, R, &m[i], k,
                                 want, bscore, bid, &tied);
        n_tied += tied;
        bad_count += got[i] != kk;
        int mismatch = 0;
        for (int a = 0; a < got[i]; a++) {
            const int j = out[(size_t)i * k + a];
            bad_elig += j < 0 || j >= n || !select_mask_allows(&m[i], j);
            have[a] = j >= 0 && j < n ? cosine(q + (size_t)i * d, stored + (size_t)j * d, d) : -2;
        }
        qsort(have, (size_t)got[i], sizeof(double), cmp_desc);
        for (int a = 0; a < got[i] && a < kk; a++) mismatch |= fabs(have[a] - want[a]) > tol;
        differ += mismatch && !tied;
        /* recall: the reference's scores found among the answer's (both best first) */
        for (int a = 0, b = 0; a < kk; a++) {
            while (b < got[i] && have[b] > want[a] + tol) b++;
            if (b < got[i] && fabs(have[b] - want[a]) <= tol) found++, b++;
        }
        n_want += kk;
    }
    const char *name = scan == SUBQ_SCAN_INT4 ? "int4" : scan == SUBQ_SCAN_INT8 ? "int8" : f16 ? "f16" : "f32";
    /* a query whose probed blocks (or groups) end at one that ties the next
     * within rounding may take either: only such queries may differ */
    CHECK(bad_count == 0 && bad_elig == 0, "blocks %s d=%d B=%d G=%d R=%d: %d wrong counts, %d ineligible", name, d,
          B, G, R, bad_count, bad_elig);
    CHECK(G == 0 || grouped, "blocks d=%d B=%d G=%d: the test must reach the groups", d, B, G);
    if (scan == SUBQ_SCAN_FULL) {
        CHECK(differ == 0, "blocks %s d=%d B=%d nprobe=%d G=%d R=%d: %d of %d queries differ from the reference (%d "
              "tied at the edge of the probed blocks or representatives, excused)", name, d, B, nprobe, G, R, differ,
              NQ, n_tied);
    } else {
        /* codes rank a pool that the stored keys re-rank (decode's scan
         * keeps recall@K >= 0.99 the same way) */
        CHECK(found >= 0.98 * n_want, "blocks over %s codes d=%d B=%d: recall %d of %d against the reference",
              name, d, B, found, n_want);
    }
    selector_free(s);
    free(keys), free(stored), free(q), free(seg), free(out), free(bid), free(want), free(have), free(bscore);
}

static void test_reference(int f16, int d, int n, int B, int nprobe, int threads, uint64_t seed) {
    test_reference_of(f16, SUBQ_SCAN_FULL, d, n, B, nprobe, 0, 1, 0, threads, seed);
}

/* Keys at or past a query's n_slots never change its answer; a truncated
 * selector re-fed other keys, and one rebuilt by get_keys + put_keys,
 * answer as a fresh selector fed the same keys. */
static void test_state(int f16, int G) {
    enum { N = 6000, D = 24, K = 32, NQ = 40, B = 32, NPROBE = 6 };
    uint64_t rng = rng_seed(77);
    float *keys = malloc((size_t)2 * N * D * sizeof(float)), *stored = malloc((size_t)2 * N * D * sizeof(float));
    float *back = malloc((size_t)N * D * sizeof(float)), *q = malloc((size_t)NQ * D * sizeof(float));
    int32_t *seg = malloc((size_t)2 * N * sizeof(int32_t));
    int32_t oa[NQ * K], ob[NQ * K];
    int ga[NQ], gb[NQ];
    select_mask m[NQ];
    make_keys(&rng, 2 * N, D, f16, keys, stored);
    for (int i = 0; i < NQ * D; i++) q[i] = rng_normal(&rng);
    batch_masks(&rng, N, NQ, seg, m);
    for (int i = 0; i < NQ; i++) m[i].n_slots = m[i].n_slots < N ? m[i].n_slots : N - 1 - i;
    subq_error err = {0};
    selector *a = new_scan(D, f16, SUBQ_SCAN_FULL, B, NPROBE, G, 2, 0, G ? 2 : 0);
    selector *b = new_scan(D, f16, SUBQ_SCAN_FULL, B, NPROBE, G, 2, 0, G ? 2 : 0);
    /* a: N keys; b: the same N and N more past every query's n_slots */
    CHECK(selector_append(a, keys, N, 0, &err) == SUBQ_OK && selector_append(b, keys, 2 * N, 0, &err) == SUBQ_OK,
          "append: %s", err.msg);
    memset(oa, 0xff, sizeof oa), memset(ob, 0xff, sizeof ob); /* only got[i] slots are written */
    CHECK(selector_query_prefill(a, NQ, q, q, D, K, m, oa, ga, 2) == 0 &&
          selector_query_prefill(b, NQ, q, q, D, K, m, ob, gb, 2) == 0, "query_prefill failed");
    CHECK(!memcmp(ga, gb, sizeof ga) && !memcmp(oa, ob, sizeof oa), "f16 %d G %d: keys past n_slots changed answers", f16, G);
    /* b cut back mid-block and fed a's tail again; c rebuilt from a's stored keys */
    CHECK(selector_truncate(b, N / 2 + B / 2, &err) == SUBQ_OK, "truncate: %s", err.msg);
    CHECK(selector_append(b, keys + (size_t)(N / 2 + B / 2) * D, N - (N / 2 + B / 2), N / 2 + B / 2, &err) == SUBQ_OK,
          "append: %s", err.msg);
    memset(ob, 0xff, sizeof ob);
    CHECK(selector_query_prefill(b, NQ, q, q, D, K, m, ob, gb, 1) == 0, "query_prefill failed");
    CHECK(!memcmp(ga, gb, sizeof ga) && !memcmp(oa, ob, sizeof oa), "f16 %d G %d: truncate + append differ", f16, G);
    selector *c = new_scan(D, f16, SUBQ_SCAN_FULL, B, NPROBE, G, 2, 0, G ? 2 : 0);
    CHECK(selector_get_keys(a, N, back, &err) == SUBQ_OK && selector_put_keys(c, back, N, 0, &err) == SUBQ_OK,
          "get/put keys: %s", err.msg);
    memset(ob, 0xff, sizeof ob);
    CHECK(selector_query_prefill(c, NQ, q, q, D, K, m, ob, gb, 2) == 0, "query_prefill failed");
    CHECK(!memcmp(ga, gb, sizeof ga) && !memcmp(oa, ob, sizeof oa), "f16 %d G %d: get_keys + put_keys differ", f16, G);
    selector_free(a), selector_free(b), selector_free(c);
    free(keys), free(stored), free(back), free(q), free(seg);
}

/* n drifting f32 keys of d (and their stored rows), nq Gaussian queries
 * and their masks (batch_masks) */
static void batch_inputs(uint64_t seed, int n, int d, int nq, float **keys, float **stored, float **q, int32_t **seg,
                         select_mask *m) {
    uint64_t rng = rng_seed(seed);
    *keys = malloc((size_t)n * d * sizeof(float)), *stored = malloc((size_t)n * d * sizeof(float));
    *q = malloc((size_t)nq * d * sizeof(float)), *seg = malloc((size_t)n * sizeof(int32_t));
    make_keys(&rng, n, d, 0, *keys, *stored);
    for (int i = 0; i < nq * d; i++) (*q)[i] = rng_normal(&rng);
    batch_masks(&rng, n, nq, *seg, m);
}

/* nprobe 0, or fewer keys than probe_from: the full batched scan; and the
 * recall check counts the overlap brute force finds. */
static void test_fallback_and_check(void) {
    enum { N = 5000, D = 16, K = 40, NQ = 24 };
    int32_t oa[NQ * K], ob[NQ * K], full[K];
    int ga[NQ], gb[NQ];
    select_mask m[NQ];
    float *keys, *stored, *q;
    int32_t *seg;
    batch_inputs(5, N, D, NQ, &keys, &stored, &q, &seg, m);
    subq_error err = {0};
    selector *off = new_blocks(D, 0, 64, 0, 0), *late = new_blocks(D, 0, 64, 8, 0), *chk = new_blocks(D, 0, 64, 8, 3);
    late->params.plan.probe_from = N + 1;
    CHECK(selector_append(off, keys, N, 0, &err) == SUBQ_OK && selector_append(late, keys, N, 0, &err) == SUBQ_OK &&
          selector_append(chk, keys, N, 0, &err) == SUBQ_OK, "append: %s", err.msg);
    memset(oa, 0xff, sizeof oa), memset(ob, 0xff, sizeof ob); /* only got[i] slots are written */
    CHECK(selector_query_batch(off, NQ, q, q, D, K, m, oa, ga, 2) == 0, "query_batch failed");
    CHECK(selector_query_prefill(off, NQ, q, q, D, K, m, ob, gb, 2) == 0 && same_sets(NQ, K, oa, ga, ob, gb),
          "nprobe 0: the prefill must scan every key");
    CHECK(selector_query_prefill(late, NQ, q, q, D, K, m, ob, gb, 2) == 0 && same_sets(NQ, K, oa, ga, ob, gb),
          "below probe_from: the prefill must scan every key");
    CHECK(selector_query_prefill(chk, NQ, q, q, D, K, m, ob, gb, 2) == 0, "query_prefill failed");
    int64_t keys_want = 0, found_want = 0;
    for (int i = 0; i < NQ; i++) {
        if ((m[i].ex1_hi - 1) % 3) continue; /* the check's tokens: every third slot */
        /* the full scan's answer is the batched scan's (oa) */
        for (int a = 0; a < ga[i]; a++) {
            full[a] = oa[i * K + a];
            int f = 0;
            for (int b = 0; b < gb[i]; b++) f |= ob[i * K + b] == full[a];
            found_want += f;
        }
        keys_want += ga[i];
    }
    CHECK(chk->stats.n_check_keys == keys_want && chk->stats.n_check_found == found_want,
          "recall check: %lld of %lld counted, brute force %lld of %lld", (long long)chk->stats.n_check_found,
          (long long)chk->stats.n_check_keys, (long long)found_want, (long long)keys_want);
    CHECK(found_want < keys_want, "the check test needs a query the block scan answers otherwise");
    /* a block scan whose allocations fail is an error, never an empty answer */
    chk->fail_alloc = 1;
    CHECK(selector_query_prefill(chk, NQ, q, q, D, K, m, ob, gb, 2) < 0, "a failing block scan must return -1");
    chk->fail_alloc = 0;
    CHECK(selector_query_prefill(chk, NQ, q, q, D, K, m, ob, gb, 2) == 0, "the block scan once allocations succeed");
    selector_free(off), selector_free(late), selector_free(chk);
    free(keys), free(stored), free(q), free(seg);
    /* parameters out of range are refused, naming what is wrong: nprobe,
     * block_keys, probe_from, group_blocks, group_probe, group_from */
    const int bad[7][6] = {{-1, 64, 0, 16, 32, 0}, {8, 0, 0, 16, 32, 0},    {8, 64, -1, 16, 32, 0},
                           {8, 64, 0, -1, 32, 0},  {8, 64, 0, 4097, 32, 0}, {8, 64, 0, 16, 0, 0},
                           {8, 64, 0, 16, 32, -1}};
    for (int b = 0; b < 7; b++) {
        selector_params p;
        selector_params_default(&p, SUBQ_SELECT_EXACT, D);
        p.plan.nprobe = bad[b][0], p.plan.block_keys = bad[b][1], p.plan.probe_from = bad[b][2];
        p.plan.group_blocks = bad[b][3], p.plan.group_probe = bad[b][4], p.plan.group_from = bad[b][5];
        selector *s = NULL;
        CHECK(selector_new(&p, NULL, &s, &err) == SUBQ_ERR_ARG &&
                  strstr(err.msg, b < 3 ? "block scan" : "groups of blocks"),
              "block scan %d %d %d, groups %d %d %d must be refused (%s)", bad[b][0], bad[b][1], bad[b][2], bad[b][3],
              bad[b][4], bad[b][5], err.msg);
        selector_free(s);
    }
}

/* With the context's pool a batch is answered in pieces of queries, one
 * thread each: the same slots (query_batch: in the same order) and the
 * same recall check as one piece on OpenMP threads. */
static void test_pool_pieces(void) {
    enum { N = 6000, D = 16, K = 30, NQ = 61 };
    int32_t oa[NQ * K], ob[NQ * K];
    int ga[NQ], gb[NQ];
    select_mask m[NQ];
    float *keys, *stored, *q;
    int32_t *seg;
    batch_inputs(7, N, D, NQ, &keys, &stored, &q, &seg, m);
    subq_error err = {0};
    pool *pl = NULL;
    CHECK(pool_new(2, &pl, &err) == SUBQ_OK, "pool_new: %s", err.msg);
    const selector_env env = {.pool = pl};
    for (int nprobe = 0; nprobe <= 8; nprobe += 8) {
        selector_params p;
        selector_params_default(&p, SUBQ_SELECT_EXACT, D);
        p.plan.block_keys = 64, p.plan.nprobe = nprobe, p.plan.probe_from = 0, p.plan.probe_check = 3;
        selector *one = NULL, *cut = NULL;
        CHECK(selector_new(&p, NULL, &one, &err) == SUBQ_OK && selector_new(&p, &env, &cut, &err) == SUBQ_OK,
              "selector_new: %s", err.msg);
        CHECK(selector_append(one, keys, N, 0, &err) == SUBQ_OK && selector_append(cut, keys, N, 0, &err) == SUBQ_OK,
              "append: %s", err.msg);
        memset(oa, 0xff, sizeof oa), memset(ob, 0xff, sizeof ob);
        CHECK(selector_query_batch(one, NQ, q, q, D, K, m, oa, ga, 2) == 0 &&
                  selector_query_batch(cut, NQ, q, q, D, K, m, ob, gb, 2) == 0 && !memcmp(ga, gb, sizeof ga) &&
                  !memcmp(oa, ob, sizeof oa),
              "nprobe %d: query_batch in pieces must answer as in one, in order", nprobe);
        CHECK(selector_query_prefill(one, NQ, q, q, D, K, m, oa, ga, 2) == 0 &&
                  selector_query_prefill(cut, NQ, q, q, D, K, m, ob, gb, 2) == 0 && same_sets(NQ, K, oa, ga, ob, gb),
              "nprobe %d: query_prefill in pieces must answer as in one", nprobe);
        /* (rows visited and bytes read differ: each piece reads the keys or
         * block summaries its queries may see) */
        CHECK(one->stats.n_check_keys == cut->stats.n_check_keys &&
                  one->stats.n_check_found == cut->stats.n_check_found && (nprobe == 0 || one->stats.n_check_keys > 0),
              "nprobe %d: recall check in pieces: %lld of %lld, in one %lld of %lld", nprobe,
              (long long)cut->stats.n_check_found, (long long)cut->stats.n_check_keys,
              (long long)one->stats.n_check_found, (long long)one->stats.n_check_keys);
        /* a piece whose allocations fail fails the batch */
        cut->fail_alloc = 1;
        CHECK(selector_query_prefill(cut, NQ, q, q, D, K, m, ob, gb, 2) < 0, "a failing piece must fail the batch");
        cut->fail_alloc = 0;
        selector_free(one), selector_free(cut);
    }
    pool_free(pl);
    free(keys), free(stored), free(q), free(seg);
}

int main(void) {
    test_reference(0, 32, 9000, 64, 8, 1, 1);
    test_reference(1, 32, 9000, 64, 8, 2, 2);
    test_reference(0, 17, 5000, 16, 24, 2, 3);
    test_reference(1, 64, 3000, 100, 3, 1, 4);
    test_reference(0, 8, 2500, 1, 300, 2, 5);
    /* groups of blocks first, then blocks */
    test_reference_of(0, SUBQ_SCAN_FULL, 32, 9000, 64, 8, 4, 5, 0, 1, 11);
    test_reference_of(1, SUBQ_SCAN_FULL, 17, 6000, 16, 24, 8, 3, 0, 2, 12);
    /* the keys' pass over codes, re-ranked on the stored keys */
    test_reference_of(1, SUBQ_SCAN_INT4, 32, 9000, 64, 16, 0, 1, 0, 2, 13);
    test_reference_of(0, SUBQ_SCAN_INT8, 24, 7000, 32, 26, 4, 12, 0, 1, 14);
    /* blocks and groups ranked by their representative keys too */
    test_reference_of(0, SUBQ_SCAN_FULL, 32, 9000, 64, 8, 0, 1, 4, 1, 15);
    test_reference_of(1, SUBQ_SCAN_FULL, 17, 6000, 16, 24, 0, 1, 2, 2, 16);
    test_reference_of(0, SUBQ_SCAN_FULL, 32, 9000, 64, 8, 4, 5, 4, 1, 17);
    test_reference_of(1, SUBQ_SCAN_FULL, 17, 6000, 16, 24, 8, 3, 3, 2, 18);
    test_reference_of(1, SUBQ_SCAN_INT4, 32, 9000, 64, 16, 0, 1, 8, 2, 19);
    test_state(0, 0);
    test_state(1, 0);
    test_state(0, 4);
    test_fallback_and_check();
    test_pool_pieces();
    return test_summary();
}
