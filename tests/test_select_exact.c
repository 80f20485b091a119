/* exact selector == brute force (double-precision cosine or dot product,
 * full sort) on random keys, chunked appends and random masks (segments,
 * exclusions, n_slots beyond the appended keys), with f32 and f16 key
 * storage; the compressed int8 / int4 scans (and auto past 2 MiB of keys,
 * the full scan's answers below) with recall@K >= 0.99 against
 * the same brute force, and unchanged by a get_keys + put_keys round trip;
 * keys whose scores peak at evenly spaced slots (where a long scan samples
 * its starting threshold, so that it starts too high and must scan again)
 * against brute force; plus the mask-range helper against
 * select_mask_allows. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "select/select_internal.h"
#include "select/selector.h"
#include "test_util.h"

static int cmp_desc(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* the ranking score in double precision: cosine, or the raw dot product */
static double score_of(const float *a, const float *b, int d, subq_score score) {
    double ab = 0, aa = 0, bb = 0;
    for (int c = 0; c < d; c++) {
        ab += (double)a[c] * b[c];
        aa += (double)a[c] * a[c];
        bb += (double)b[c] * b[c];
    }
    if (score == SUBQ_SCORE_DOT) return ab;
    return aa > 0 && bb > 0 ? ab / sqrt(aa * bb) : 0.0;
}

/* A random mask over up to n + 4 slots: sinks and tail ranges anywhere
 * (possibly empty, overlapping or reversed), segments as contiguous runs or
 * scattered ids, or none. */
static void random_mask(uint64_t *rng, int n, int32_t *seg, select_mask *m) {
    memset(m, 0, sizeof *m);
    m->n_slots = (int)(rng_next_u64(rng) % (uint64_t)(n + 5));
    int mode = (int)(rng_next_u64(rng) % 3);
    if (mode == 0) {
        m->seg = NULL;
    } else if (mode == 1) {
        int s = 0;
        for (int j = 0; j < n + 4; j++) {
            if (rng_uniform(rng) < 0.01f) s++;
            seg[j] = s;
        }
        m->seg = seg;
    } else {
        for (int j = 0; j < n + 4; j++) seg[j] = (int32_t)(rng_next_u64(rng) % 3);
        m->seg = seg;
    }
    m->query_seg = m->seg ? m->seg[m->n_slots > 0 ? m->n_slots - 1 : 0] : 0;
    int r = n + 8;
    m->ex0_lo = (int)(rng_next_u64(rng) % (uint64_t)r) - 4;
    m->ex0_hi = m->ex0_lo + (int)(rng_next_u64(rng) % 40) - 5;
    m->ex1_lo = (int)(rng_next_u64(rng) % (uint64_t)r) - 4;
    m->ex1_hi = m->ex1_lo + (int)(rng_next_u64(rng) % 200);
}

static void test_ranges(void) {
    uint64_t rng = rng_seed(7);
    int32_t seg[300];
    int bad = 0;
    for (int it = 0; it < 5000; it++) {
        int n = (int)(rng_next_u64(&rng) % 200);
        select_mask m;
        random_mask(&rng, n, seg, &m);
        int lo[3], hi[3], nr = select_mask_ranges(&m, n, lo, hi);
        /* every slot below n: inside a range (and segment ok) iff allowed */
        int count = 0;
        for (int j = -3; j < n + 4; j++) {
            int in = 0;
            for (int r = 0; r < nr; r++) in |= j >= lo[r] && j < hi[r];
            int want = j < n && select_mask_allows(&m, j);
            int have = in && (!m.seg || m.seg[j] == m.query_seg);
            bad += want != have;
            count += want;
        }
        for (int r = 0; r < nr; r++) bad += !(lo[r] < hi[r]) || (r && lo[r] < hi[r - 1]);
        bad += select_mask_count(&m, n) != count;
    }
    CHECK(bad == 0, "mask ranges disagree with select_mask_allows in %d places", bad);
}

static double cosine(const float *a, const float *b, int d) { return score_of(a, b, d, SUBQ_SCORE_COSINE); }

typedef struct bad_counts {
    int count, score, elig, order;
} bad_counts;

/* One query's answer (got slots in out) against brute force: every eligible
 * slot's cosine, full sort. want, have: scratch of n doubles. */
static void check_answer(const float *q, const float *keys, int d, int n, const select_mask *m, int k,
                         const int32_t *out, int got, double tol, double *want, double *have, bad_counts *bad) {
    int ne = 0;
    for (int j = 0; j < n; j++)
        if (select_mask_allows(m, j)) want[ne++] = cosine(q, keys + (size_t)j * d, d);
    qsort(want, (size_t)ne, sizeof(double), cmp_desc);
    bad->count += got != (k < ne ? k : ne);
    for (int i = 0; i < got; i++) {
        bad->elig += !select_mask_allows(m, out[i]) || out[i] >= n;
        if (out[i] >= 0 && out[i] < n) have[i] = cosine(q, keys + (size_t)out[i] * d, d);
    }
    for (int i = 1; i < got; i++) bad->order += have[i] > have[i - 1] + tol;
    /* the score multisets agree: sorted returned scores == top of the brute sort */
    qsort(have, (size_t)got, sizeof(double), cmp_desc);
    for (int i = 0; i < got && i < ne; i++) bad->score += fabs(have[i] - want[i]) > tol;
}

static void report(const char *what, int f16, int d, const bad_counts *bad) {
    const char *t = f16 ? "f16" : "f32";
    CHECK(bad->count == 0, "%s %s d=%d: %d queries returned the wrong count", what, t, d, bad->count);
    CHECK(bad->elig == 0, "%s %s d=%d: %d ineligible slots returned", what, t, d, bad->elig);
    CHECK(bad->score == 0, "%s %s d=%d: %d scores differ from brute force", what, t, d, bad->score);
    CHECK(bad->order == 0, "%s %s d=%d: %d results out of order", what, t, d, bad->order);
}

/* selector_query_batch (a prefill batch: one scan as a GEMM for every
 * query) against brute force, queries with masks of their own. */
#define N_BATCH 45
static void test_batch(selector *s, const float *keys, int d, int n, int f16, int threads, uint64_t *rng) {
    int k = 1 + (int)(rng_next_u64(rng) % 200);
    float *q = malloc((size_t)N_BATCH * d * sizeof(float));
    int32_t *seg = malloc((size_t)N_BATCH * (n + 4) * sizeof(int32_t)), *out = malloc((size_t)N_BATCH * k * sizeof(int32_t));
    double *want = malloc((size_t)n * sizeof(double)), *have = malloc((size_t)k * sizeof(double));
    select_mask m[N_BATCH];
    int got[N_BATCH];
    for (int i = 0; i < N_BATCH; i++) {
        random_mask(rng, n, seg + (size_t)i * (n + 4), &m[i]);
        for (int c = 0; c < d; c++) q[(size_t)i * d + c] = rng_normal(rng) + 0.3f;
    }
    bad_counts bad = {0};
    CHECK(selector_query_batch(s, N_BATCH, q, q, (size_t)d, k, m, out, got, threads) == 0, "query_batch failed");
    for (int i = 0; i < N_BATCH; i++)
        check_answer(q + (size_t)i * d, keys, d, n, &m[i], k, out + (size_t)i * k, got[i], f16 ? 2e-3 : 1e-5, want,
                     have, &bad);
    report("exact batch", f16, d, &bad);
    free(q);
    free(seg);
    free(out);
    free(want);
    free(have);
}

/* selector_query_group (a KV head's query search heads: g queries under one
 * mask, the keys read once for all) against brute force, g up to 11 (past
 * SELECT_GROUP_MAX): full scans give each query its own top K; compressed
 * scans give each query what its own query gives (the same codes and
 * re-rank), best first, with recall@K >= 0.99 of the brute top K. */
#define G_MAX 11
static void test_group(selector *s, const float *keys, int d, int n, int f16, int full, uint64_t *rng) {
    const int k = 1 + (int)(rng_next_u64(rng) % 200);
    const double tol = f16 ? 2e-3 : 1e-5;
    float *q = malloc((size_t)G_MAX * d * sizeof(float));
    int32_t *seg = malloc((size_t)(n + 4) * sizeof(int32_t)), *out = malloc((size_t)G_MAX * k * sizeof(int32_t));
    int32_t *one = malloc((size_t)k * sizeof(int32_t));
    double *want = malloc((size_t)n * sizeof(double)), *have = malloc((size_t)k * sizeof(double));
    bad_counts bad = {0};
    int differ = 0;
    double hits = 0, wanted = 0;
    for (int rep = 0; rep < 4; rep++) {
        const int g = rep == 0 ? G_MAX : 1 + (int)(rng_next_u64(rng) % G_MAX);
        select_mask m;
        random_mask(rng, n, seg, &m);
        for (int i = 0; i < g * d; i++) q[i] = rng_normal(rng) + 0.3f;
        int got[G_MAX];
        CHECK(selector_query_group(s, g, q, NULL, k, &m, out, got) == 0, "query_group failed");
        for (int i = 0; i < g; i++) {
            const float *qi = q + (size_t)i * d;
            const int32_t *oi = out + (size_t)i * k;
            if (full) {
                check_answer(qi, keys, d, n, &m, k, oi, got[i], tol, want, have, &bad);
                continue;
            }
            const int got1 = selector_query(s, qi, NULL, k, &m, one);
            differ += got1 != got[i] || (got1 > 0 && memcmp(one, oi, (size_t)got1 * sizeof(int32_t)));
            int ne = 0;
            for (int j = 0; j < n; j++)
                if (select_mask_allows(&m, j)) want[ne++] = cosine(qi, keys + (size_t)j * d, d);
            qsort(want, (size_t)ne, sizeof(double), cmp_desc);
            const int kk = k < ne ? k : ne;
            bad.count += got[i] != kk;
            for (int x = 0; x < got[i]; x++) {
                bad.elig += !select_mask_allows(&m, oi[x]) || oi[x] >= n;
                have[x] = oi[x] >= 0 && oi[x] < n ? cosine(qi, keys + (size_t)oi[x] * d, d) : -2.0;
                bad.order += x > 0 && have[x] > have[x - 1] + tol;
                hits += kk > 0 && have[x] >= want[kk - 1] - tol;
            }
            wanted += kk;
        }
    }
    report(full ? "exact group" : "exact group, codes", f16, d, &bad);
    CHECK(differ == 0, "exact group, codes, d=%d: %d queries answered otherwise than alone", d, differ);
    CHECK(full || wanted == 0 || hits >= 0.99 * wanted, "exact group, codes, d=%d: recall@K %.4f", d,
          wanted > 0 ? hits / wanted : 1.0);
    free(q);
    free(seg);
    free(out);
    free(one);
    free(want);
    free(have);
}

/* The exact selector against brute force (double precision, full sort) on
 * random masks and K. Full scans must return the brute-force top K (score
 * multisets equal within the storage's rounding); compressed scans must
 * return eligible slots, the right count, best first, and recall@K >= 0.99
 * of the brute-force top K over all queries (a slot counts if its score
 * reaches the K-th best within the rounding). */
static void test_exact(int f16, int d, int n, uint64_t seed, int threads, subq_score score, subq_scan scan) {
    uint64_t rng = rng_seed(seed);
    float *keys = malloc((size_t)n * d * sizeof(float)), *q = malloc((size_t)d * sizeof(float));
    int32_t *seg = malloc((size_t)(n + 4) * sizeof(int32_t)), *out = malloc(2048 * sizeof(int32_t));
    double *want = malloc((size_t)n * sizeof(double)), *have = malloc(2048 * sizeof(double));
    /* keys with a shared offset so cosines spread over a useful range, and
     * norms that differ so the dot product ranks otherwise */
    for (int j = 0; j < n; j++)
        for (int c = 0; c < d; c++) keys[(size_t)j * d + c] = rng_normal(&rng) * (1.0f + 3.0f * (j % 5)) + 0.3f;

    selector_params p;
    selector_params_default(&p, SUBQ_SELECT_EXACT, d);
    p.plan.search_f16 = f16;
    p.plan.score = score;
    p.plan.scan = scan;
    p.n_threads = threads; /* 2 threads, >= 8192 keys that read >= 2 MiB (codes 4 MiB): the split scan */
    const int full = n < selector_scan_codes_from(&p); /* the keys read, not codes (auto: below 2 MiB of them) */
    char name[96];
    snprintf(name, sizeof name, "exact %s %s %s d=%d n=%d", f16 ? "f16" : "f32", select_score_name(score),
             select_scan_name(scan), d, n);
    selector *s;
    subq_error err = {0};
    /* the split scan's parts run on a pool of that many threads */
    pool *scan_pool = NULL;
    CHECK(pool_new(threads, &scan_pool, &err) == SUBQ_OK, "pool_new: %s", err.msg);
    const selector_env env = {.pool = scan_pool};
    CHECK(selector_new(&p, &env, &s, &err) == SUBQ_OK, "selector_new: %s", err.msg);
    /* chunked appends: 1, then growing chunks */
    for (int at = 0, c = 1; at < n; at += c, c = c * 3 + 1) {
        if (at + c > n) c = n - at;
        CHECK(selector_append(s, keys + (size_t)at * d, c, at, &err) == SUBQ_OK, "append: %s", err.msg);
    }
    CHECK(selector_append(s, keys, 1, 5, &err) == SUBQ_ERR_ARG, "out-of-order append must fail");

    /* rounding of the stored keys, relative to the score's scale */
    const double tol = (f16 ? 2e-3 : 1e-5) * (score == SUBQ_SCORE_DOT ? 13.0 * d : 1.0);
    int bad_count = 0, bad_score = 0, bad_elig = 0, bad_order = 0;
    double hits = 0, wanted = 0;
    for (int it = 0; it < 60; it++) {
        select_mask m;
        random_mask(&rng, n, seg, &m);
        int k = 1 + (int)(rng_next_u64(&rng) % 300);
        if (n >= 12000 && it % 5 == 0) k = 600 + (int)(rng_next_u64(&rng) % 1400); /* a re-rank pool of K + 1536 */
        for (int c = 0; c < d; c++) q[c] = rng_normal(&rng) + 0.3f;
        /* brute force: every eligible slot's score, full sort */
        int ne = 0;
        for (int j = 0; j < n; j++)
            if (select_mask_allows(&m, j)) want[ne++] = score_of(q, keys + (size_t)j * d, d, score);
        qsort(want, (size_t)ne, sizeof(double), cmp_desc);
        int got = selector_query(s, q, NULL, k, &m, out), kk = k < ne ? k : ne;
        bad_count += got != kk;
        for (int i = 0; i < got; i++) {
            bad_elig += !select_mask_allows(&m, out[i]) || out[i] >= n;
            if (out[i] >= 0 && out[i] < n) have[i] = score_of(q, keys + (size_t)out[i] * d, d, score);
        }
        for (int i = 1; i < got; i++) bad_order += have[i] > have[i - 1] + tol;
        for (int i = 0; i < got && kk > 0; i++) hits += have[i] >= want[kk - 1] - tol;
        wanted += kk;
        /* full scans: the score multisets agree: sorted returned scores == top of the brute sort */
        qsort(have, (size_t)got, sizeof(double), cmp_desc);
        for (int i = 0; full && i < got && i < ne; i++) bad_score += fabs(have[i] - want[i]) > tol;
    }
    const double recall = wanted > 0 ? hits / wanted : 1.0;
    CHECK(bad_count == 0, "%s: %d queries returned the wrong count", name, bad_count);
    CHECK(bad_elig == 0, "%s: %d ineligible slots returned", name, bad_elig);
    CHECK(bad_score == 0, "%s: %d scores differ from brute force", name, bad_score);
    CHECK(bad_order == 0, "%s: %d results out of order", name, bad_order);
    CHECK(recall >= (full ? 1.0 : 0.99), "%s: recall@K %.4f vs brute force", name, recall);
    if (!full) printf("%s: recall@K %.4f vs brute force (f64)\n", name, recall);
    CHECK(s->stats.n_queries == 60 && s->stats.n_appended == n, "stats: %lld queries, %lld appended",
          (long long)s->stats.n_queries, (long long)s->stats.n_appended);
    CHECK(s->stats.bytes >= (size_t)n * d * (f16 ? 2 : 4), "stats.bytes %zu too small", s->stats.bytes);
    /* bytes_read: at least every eligible row's codes, at most all rows' stored keys and codes */
    const double row_max = (double)d * (f16 ? 2 : 4) + ((d + 63) / 64 * 64 + 4); /* codes: at most 1 byte per padded element */
    CHECK(s->stats.bytes_read > 0 && (double)s->stats.bytes_read <= 60.0 * n * row_max, "%s: bytes_read %lld",
          name, (long long)s->stats.bytes_read);
    /* long compressed scans read the codes, not the stored keys */
    if (!full && n >= 12000)
        CHECK((double)s->stats.bytes_read < 0.6 * 60.0 * n * d * (f16 ? 2 : 4), "%s: bytes_read %lld: not the codes",
              name, (long long)s->stats.bytes_read);
    /* batches (a prefill's queries) scan the stored keys in full */
    if (score == SUBQ_SCORE_COSINE) test_batch(s, keys, d, n, f16, threads, &rng);
    if (score == SUBQ_SCORE_COSINE) test_group(s, keys, d, n, f16, full, &rng);

    /* reset forgets the keys; a new sequence starts at slot 0 */
    selector_reset(s);
    select_mask all = {.n_slots = n};
    CHECK(selector_query(s, q, NULL, 10, &all, out) == 0, "reset selector must return nothing");
    CHECK(selector_append(s, keys, 3, 0, &err) == SUBQ_OK, "append after reset: %s", err.msg);
    CHECK(selector_query(s, q, NULL, 10, &all, out) == 3, "3 keys after reset");
    selector_free(s);
    pool_free(scan_pool);
    free(keys);
    free(q);
    free(seg);
    free(out);
    free(want);
    free(have);
}

/* A compressed scan over keys exported (get_keys) and put back (put_keys)
 * into a fresh selector answers as the original: the codes are a function
 * of the stored keys. */
static void test_put_keys(subq_scan scan, int f16) {
    enum { N = 5000, D = 48, K = 20 };
    uint64_t rng = rng_seed(21);
    float *keys = malloc((size_t)N * D * sizeof(float)), *back = malloc((size_t)N * D * sizeof(float)), q[D];
    for (int i = 0; i < N * D; i++) keys[i] = rng_normal(&rng);
    selector_params p;
    selector_params_default(&p, SUBQ_SELECT_EXACT, D);
    p.plan.scan = scan;
    p.plan.search_f16 = f16;
    selector *a, *b;
    subq_error err = {0};
    CHECK(selector_new(&p, NULL, &a, &err) == SUBQ_OK && selector_new(&p, NULL, &b, &err) == SUBQ_OK, "new: %s",
          err.msg);
    CHECK(selector_append(a, keys, N, 0, &err) == SUBQ_OK, "append: %s", err.msg);
    CHECK(selector_get_keys(a, N, back, &err) == SUBQ_OK, "get_keys: %s", err.msg);
    CHECK(selector_put_keys(b, back, N, 0, &err) == SUBQ_OK, "put_keys: %s", err.msg);
    select_mask all = {.n_slots = N};
    int32_t oa[K], ob[K];
    int differ = 0;
    for (int it = 0; it < 20; it++) {
        for (int c = 0; c < D; c++) q[c] = rng_normal(&rng);
        int na = selector_query(a, q, NULL, K, &all, oa), nb = selector_query(b, q, NULL, K, &all, ob);
        differ += na != nb || memcmp(oa, ob, sizeof oa);
    }
    CHECK(differ == 0, "scan %s f16 %d: %d queries differ after get_keys + put_keys", select_scan_name(scan), f16,
          differ);
    selector_free(a);
    selector_free(b);
    free(keys);
    free(back);
}

/* Scores that peak at 32 evenly spaced slots and fall with the distance to
 * the nearest peak (key j: a unit vector at an angle to the query growing
 * with that distance), so that the rows a long scan samples are about the
 * best there are and its first threshold comes out above the K-th score:
 * the answer must still be the brute force's, alone and in a group. */
static void test_peaks(subq_scan scan) {
    enum { N = 40000, D = 32, K = 64, PEAKS = 32 };
    float *keys = malloc((size_t)N * D * sizeof(float)), q[D] = {1.0f};
    double *want = malloc(N * sizeof(double)), *have = malloc(N * sizeof(double));
    const double step = (double)N / PEAKS;
    for (int j = 0; j < N; j++) {
        double t = fmod(j, step) - 0.5 * step; /* signed distance to the peak of its period */
        const double a = 1.5 * fabs(t) / step + 1e-6 * j; /* distinct scores */
        float *x = keys + (size_t)j * D;
        memset(x, 0, D * sizeof(float));
        x[0] = (float)cos(a);
        x[1 + j % (D - 1)] = (float)sin(a);
    }
    selector_params p;
    selector_params_default(&p, SUBQ_SELECT_EXACT, D);
    p.plan.scan = scan;
    p.n_threads = 2;
    selector *s;
    subq_error err = {0};
    CHECK(selector_new(&p, NULL, &s, &err) == SUBQ_OK, "new: %s", err.msg);
    CHECK(selector_append(s, keys, N, 0, &err) == SUBQ_OK, "append: %s", err.msg);
    select_mask all = {.n_slots = N};
    int32_t out[K];
    int got = selector_query(s, q, NULL, K, &all, out);
    bad_counts bad = {0};
    check_answer(q, keys, D, N, &all, K, out, got, scan == SUBQ_SCAN_FULL ? 1e-6 : 1e-4, want, have, &bad);
    report(select_scan_name(scan), 0, D, &bad);
    if (scan == SUBQ_SCAN_FULL) { /* the peaked query beside two others, as a group */
        float qg[3 * D];
        int32_t outg[3 * K];
        int gotg[3];
        uint64_t rng = rng_seed(22);
        memcpy(qg, q, sizeof q);
        for (int i = D; i < 3 * D; i++) qg[i] = rng_normal(&rng);
        CHECK(selector_query_group(s, 3, qg, NULL, K, &all, outg, gotg) == 0, "query_group failed");
        for (int i = 0; i < 3; i++)
            check_answer(qg + i * D, keys, D, N, &all, K, outg + i * K, gotg[i], 1e-6, want, have, &bad);
        report("group, peaks", 0, D, &bad);
    }
    selector_free(s);
    free(keys);
    free(want);
    free(have);
}

/* The top-k buffer against a full sort: distinct keys pushed from a random
 * threshold or none, cut as they come and taken sorted or not. Sizes reach
 * past the 2048 keys its partitions copy through, where they run in place. */
static int cmp_u64_desc(const void *a, const void *b) {
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

static void test_topk_buffer(void) {
    enum { NMAX = 12000 };
    uint64_t rng = rng_seed(31);
    uint64_t *all = malloc(NMAX * sizeof(uint64_t)), *buf = malloc(2 * NMAX * sizeof(uint64_t));
    int32_t *out = malloc(NMAX * sizeof(int32_t));
    float *scores = malloc(NMAX * sizeof(float));
    int bad = 0;
    for (int rep = 0; rep < 40; rep++) {
        const int n = 1 + (int)(rng_next_u64(&rng) % NMAX), k = 1 + (int)(rng_next_u64(&rng) % (rep % 2 ? 64 : 6000));
        const int sorted = rep % 3 != 0;
        topk_buf t = {.key = buf, .k = k};
        for (int j = 0; j < n; j++) {
            all[j] = select_pair_key((float)rng_normal(&rng), j);
            select_topk_push(&t, select_key_score(all[j]), j);
        }
        const int got = select_topk_take(&t, sorted, out, scores);
        qsort(all, (size_t)n, sizeof(uint64_t), cmp_u64_desc);
        const int want = k < n ? k : n;
        bad += got != want;
        /* unsorted: the same set, so sort the answer's keys first */
        uint64_t *have = buf;
        for (int i = 0; i < got; i++) have[i] = select_pair_key(scores[i], out[i]);
        if (!sorted) qsort(have, (size_t)got, sizeof(uint64_t), cmp_u64_desc);
        for (int i = 0; i < got && i < want; i++) bad += have[i] != all[i];
    }
    CHECK(bad == 0, "top-k buffer: %d answers differ from a full sort", bad);
    free(all);
    free(buf);
    free(out);
    free(scores);
}

/* A split scan whose best keys all lie in its first part: each part's
 * threshold aims at its share of the admissions, so the part holding them
 * turns some away and must be scanned again. Every answer, alone and in
 * groups of 3, equals the same scan's on one thread (unsplit), and brute
 * force's for the full scan; some single query reads that part twice (rows
 * visited past one pass and the samples). */
static void test_split_one_part(subq_scan scan) {
    enum { N = 64000, D = 32, K = 64, STRONG = 3000, QUERIES = 12 };
    uint64_t rng = rng_seed(23);
    float *keys = malloc((size_t)N * D * sizeof(float)), q[D];
    double *want = malloc(N * sizeof(double)), *have = malloc(N * sizeof(double));
    for (int j = 0; j < N; j++)
        for (int c = 0; c < D; c++) keys[(size_t)j * D + c] = rng_normal(&rng) + (j < STRONG && c == 0 ? 4.0f : 0.0f);
    selector_params p;
    selector_params_default(&p, SUBQ_SELECT_EXACT, D);
    p.plan.scan = scan;
    p.n_threads = 2; /* 8 MB of f32 keys, 2.3 MB of int8 or int4 codes: split */
    pool *scan_pool = NULL;
    selector *s, *one;
    subq_error err = {0};
    CHECK(pool_new(2, &scan_pool, &err) == SUBQ_OK, "pool_new: %s", err.msg);
    const selector_env env = {.pool = scan_pool};
    CHECK(selector_new(&p, &env, &s, &err) == SUBQ_OK, "new: %s", err.msg);
    p.n_threads = 1;
    CHECK(selector_new(&p, NULL, &one, &err) == SUBQ_OK, "new: %s", err.msg);
    CHECK(selector_append(s, keys, N, 0, &err) == SUBQ_OK && selector_append(one, keys, N, 0, &err) == SUBQ_OK,
          "append: %s", err.msg);
    select_mask all = {.n_slots = N};
    int32_t out[K], out1[K];
    bad_counts bad = {0};
    int again = 0, differ = 0;
    for (int i = 0; i < QUERIES; i++) {
        q[0] = 1.0f;
        for (int c = 1; c < D; c++) q[c] = 0.3f * rng_normal(&rng);
        const int64_t v0 = s->stats.n_visited;
        const int got = selector_query(s, q, NULL, K, &all, out), got1 = selector_query(one, q, NULL, K, &all, out1);
        again += s->stats.n_visited - v0 > N + N / 5;
        differ += got != got1 || memcmp(out, out1, (size_t)(got < 0 ? 0 : got) * sizeof(int32_t)) != 0;
        if (scan == SUBQ_SCAN_FULL) check_answer(q, keys, D, N, &all, K, out, got, 1e-6, want, have, &bad);
    }
    /* the same as groups of 3 queries under one mask (a KV head's search heads; rescans counted, not required) */
    int again_group = 0;
    for (int i = 0; i < QUERIES / 3; i++) {
        float qg[3 * D];
        int32_t outg[3 * K], outg1[3 * K];
        int gotg[3], gotg1[3];
        for (int x = 0; x < 3; x++) {
            qg[x * D] = 1.0f;
            for (int c = 1; c < D; c++) qg[x * D + c] = 0.3f * rng_normal(&rng);
        }
        const int64_t v0 = s->stats.n_visited;
        CHECK(selector_query_group(s, 3, qg, NULL, K, &all, outg, gotg) == 0 &&
                  selector_query_group(one, 3, qg, NULL, K, &all, outg1, gotg1) == 0,
              "query_group failed");
        again_group += s->stats.n_visited - v0 > 3 * (N + N / 5);
        for (int x = 0; x < 3; x++) {
            const size_t bytes = (size_t)(gotg[x] > 0 ? gotg[x] : 0) * sizeof(int32_t);
            differ += gotg[x] != gotg1[x] || memcmp(outg + x * K, outg1 + x * K, bytes) != 0;
            if (scan == SUBQ_SCAN_FULL)
                check_answer(qg + x * D, keys, D, N, &all, K, outg + x * K, gotg[x], 1e-6, want, have, &bad);
        }
    }
    char what[64];
    snprintf(what, sizeof what, "%s, best keys in one part", select_scan_name(scan));
    report(what, 0, D, &bad);
    CHECK(differ == 0, "%s: %d answers differ from one thread's", what, differ);
    CHECK(again > 0, "%s: no query scanned a part again", what);
    printf("%s: %d of %d queries scanned a part again; groups of 3: %d of %d\n", what, again, QUERIES, again_group,
           QUERIES / 3);
    selector_free(s);
    selector_free(one);
    pool_free(scan_pool);
    free(keys);
    free(want);
    free(have);
}

/* SUBQ_SCAN_AUTO reads the stored keys while a scan's keys come to less
 * than 2 MiB and int4 codes from there: at 8191 f32 keys of 64 values its
 * answers and bytes read equal the full scan's, from 8192 it reads the
 * codes (about a seventh of the bytes); f16 keys switch at 16384, search
 * vectors wider than SCAN_CODES_MAX_D never do. */
static void test_auto(void) {
    enum { D = 64, N = 8192, K = 64, Q = 20 };
    selector_params p;
    selector_params_default(&p, SUBQ_SELECT_EXACT, D);
    CHECK(p.plan.scan == SUBQ_SCAN_AUTO && selector_scan_codes_from(&p) == N, "auto, f32: codes from %lld keys",
          (long long)selector_scan_codes_from(&p));
    CHECK(!selector_params_approximate(&p, N - 1) && selector_params_approximate(&p, N),
          "auto, f32: approximate from %d keys", N);
    p.plan.search_f16 = 1;
    CHECK(selector_scan_codes_from(&p) == 2 * N, "auto, f16: codes from %lld", (long long)selector_scan_codes_from(&p));
    p.plan.scan = SUBQ_SCAN_INT4;
    CHECK(selector_scan_codes_from(&p) == 0, "int4: codes from the start");
    p.plan.scan = SUBQ_SCAN_FULL, p.plan.search_f16 = 0;
    CHECK(selector_scan_codes_from(&p) == INT64_MAX && !selector_params_approximate(&p, INT64_MAX),
          "full: never codes, not approximate");
    selector_params_default(&p, SUBQ_SELECT_EXACT, SCAN_CODES_MAX_D + 1);
    CHECK(selector_scan_codes_from(&p) == INT64_MAX, "auto wider than %d values: the keys", SCAN_CODES_MAX_D);
    selector *wide = NULL;
    subq_error err = {0};
    CHECK(selector_new(&p, NULL, &wide, &err) == SUBQ_OK, "auto of any width: %s", err.msg);
    selector_free(wide);

    uint64_t rng = rng_seed(77);
    float *keys = malloc((size_t)(N + 1) * D * sizeof(float)), q[D];
    for (size_t i = 0; i < (size_t)(N + 1) * D; i++) keys[i] = rng_normal(&rng) + 0.3f;
    selector *s[2] = {0}; /* auto, full */
    for (int v = 0; v < 2; v++) {
        selector_params_default(&p, SUBQ_SELECT_EXACT, D);
        p.plan.scan = v ? SUBQ_SCAN_FULL : SUBQ_SCAN_AUTO;
        CHECK(selector_new(&p, NULL, &s[v], &err) == SUBQ_OK, "selector_new: %s", err.msg);
        CHECK(selector_append(s[v], keys, N - 1, 0, &err) == SUBQ_OK, "append: %s", err.msg);
    }
    int32_t out[2][K];
    int differ = 0;
    uint64_t read[2];
    select_mask all = {.n_slots = N + 1};
    for (int it = 0; it < Q; it++) {
        for (int c = 0; c < D; c++) q[c] = rng_normal(&rng) + 0.3f;
        for (int v = 0; v < 2; v++) CHECK(selector_query(s[v], q, NULL, K, &all, out[v]) == K, "query below");
        differ += memcmp(out[0], out[1], sizeof out[0]) != 0;
    }
    CHECK(differ == 0, "auto below 2 MiB: %d of %d answers differ from the full scan's", differ, Q);
    CHECK(s[0]->stats.bytes_read == s[1]->stats.bytes_read, "auto below 2 MiB reads %llu bytes, full %llu",
          (unsigned long long)s[0]->stats.bytes_read, (unsigned long long)s[1]->stats.bytes_read);
    double hits = 0;
    for (int v = 0; v < 2; v++) {
        CHECK(selector_append(s[v], keys + (size_t)(N - 1) * D, 2, N - 1, &err) == SUBQ_OK, "append: %s", err.msg);
        read[v] = s[v]->stats.bytes_read;
    }
    for (int it = 0; it < Q; it++) {
        for (int c = 0; c < D; c++) q[c] = rng_normal(&rng) + 0.3f;
        for (int v = 0; v < 2; v++) CHECK(selector_query(s[v], q, NULL, K, &all, out[v]) == K, "query from");
        for (int i = 0; i < K; i++)
            for (int j = 0; j < K; j++) hits += out[0][i] == out[1][j];
    }
    const double full_read = (double)(s[1]->stats.bytes_read - read[1]);
    const double auto_read = (double)(s[0]->stats.bytes_read - read[0]);
    CHECK(auto_read < 0.25 * full_read, "auto from 2 MiB reads %.0f bytes, full %.0f: not the codes", auto_read,
          full_read);
    CHECK(hits >= 0.99 * Q * K, "auto from 2 MiB: recall@K %.4f of the full scan's", hits / (Q * K));
    for (int v = 0; v < 2; v++) selector_free(s[v]);
    free(keys);
}

static void test_names(void) {
    for (int k = 0; k < SUBQ_SELECT_COUNT; k++)
        CHECK(selector_kind_parse(selector_kind_name((subq_selector_kind)k)) == k, "kind %d name round trip", k);
    CHECK(selector_kind_parse("nope") == -1, "unknown kind");
    selector_params p;
    selector_params_default(&p, SUBQ_SELECT_HNSW, 64);
    CHECK(p.plan.hnsw_m == 32 && p.plan.hnsw_ef_construction == 40 && p.plan.hnsw_ef_search == 64 &&
              p.plan.quest_page == 16,
          "defaults");
    selector *s = NULL;
    subq_error err = {0};
    p.d_search = 0;
    CHECK(selector_new(&p, NULL, &s, &err) == SUBQ_ERR_ARG && !s, "hnsw without d_search must fail");
    selector_params_default(&p, SUBQ_SELECT_EXACT, SCAN_CODES_MAX_D + 1);
    p.plan.scan = SUBQ_SCAN_INT8;
    CHECK(selector_new(&p, NULL, &s, &err) == SUBQ_ERR_ARG && !s && strstr(err.msg, "at most"),
          "int8 codes of more than %d values must fail: %s", SCAN_CODES_MAX_D, err.msg);
    p.plan.scan = SUBQ_SCAN_FULL;
    CHECK(selector_new(&p, NULL, &s, &err) == SUBQ_OK, "a full scan of any width: %s", err.msg);
    selector_free(s);
    s = NULL;
    selector_params_default(&p, SUBQ_SELECT_QUEST, 0);
    CHECK(selector_new(&p, NULL, &s, &err) == SUBQ_ERR_ARG && !s, "quest without a KV cache must fail");
    selector_params_default(&p, SUBQ_SELECT_FAISS, 16);
    subq_status rc = selector_new(&p, NULL, &s, &err);
    if (selector_kind_available(SUBQ_SELECT_FAISS)) {
        CHECK(rc == SUBQ_OK, "faiss: %s", err.msg);
    } else {
        CHECK(rc == SUBQ_ERR_UNSUPPORTED && strstr(err.msg, "libfaiss-dev"), "faiss unsupported: %s", err.msg);
    }
    selector_free(s);
}

int main(void) {
    test_ranges();
    test_names();
    test_auto();
    test_topk_buffer();
    const subq_score cos = SUBQ_SCORE_COSINE, dot = SUBQ_SCORE_DOT;
    for (subq_scan scan = SUBQ_SCAN_FULL; scan < SUBQ_SCAN_COUNT; scan++) {
        test_exact(0, 64, 3000, 1, 1, cos, scan);
        test_exact(1, 64, 3000, 2, 1, cos, scan);
        test_exact(0, 37, 1000, 3, 1, cos, scan);
        test_exact(1, 37, 1000, 4, 1, dot, scan);
        test_exact(0, 5, 500, 5, 1, cos, scan);
        test_exact(0, 64, 20000, 6, 2, cos, scan);
        test_exact(1, 32, 12000, 7, 2, cos, scan);
        test_exact(0, 128, 20000, 8, 2, dot, scan);
        if (scan == SUBQ_SCAN_INT4) test_exact(0, 256, 32000, 9, 2, cos, scan); /* codes of 4 MiB: split */
        test_put_keys(scan, scan == SUBQ_SCAN_INT4);
        test_peaks(scan);
        test_split_one_part(scan);
    }
    return test_summary();
}
