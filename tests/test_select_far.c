/* Far keys scored without the rotated dims (selector_params.far_rot,
 * select_mask.far_hi): every search selector against brute force in double
 * precision, where a slot below the query's far_hi scores
 *   cosine  sum_{c < d - r} q_c k_c / (|q| |k|)      dot  sum_{c < d - r} q_c k_c
 * and any other slot the whole score. The keys are made so that the split
 * matters: far keys carry large rotated parts aligned with the query's, so
 * a scan that scored them whole would return them (checked: the far-split
 * top K and the whole-score top K share few slots).
 *   exact single queries (full, int8, int4 scans; f32 and f16; cosine and
 *   dot; masks with segments and exclusions)    the brute top K (full scans:
 *                                               the score multisets equal;
 *                                               codes: recall >= 0.99)
 *   exact batches (one GEMM)                    the brute top K
 *   exact groups (queries of one mask)          full scans: the brute top K;
 *                                               codes: each query's answer alone
 *   the prefill's block scan, blocks ranked by  recall >= 0.9 of the brute top K
 *   their mean or also their representatives
 *   hnsw, faiss                                 recall >= 0.9
 *   hnsw over keys that turn with position      far slots: recall >= 0.95;
 *   (its graph over the content dims)           near slots: all found
 *   the prefill's content clusters (int8 codes  the brute top K (and again
 *   re-ranked), every list probed, 32 far dims  after a truncation and an
 *   and 40 (codes zero-padded to 64)            append)
 *   ... a few lists probed                      recall >= 0.9
 *   the ANN recall's reference (sparse_probe)   recall 1 of the brute top K
 *   far_hi 0 or far_rot 0                       the whole score (no split) */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/pool.h"
#include "base/rng.h"
#include "select/select_internal.h"
#include "select/selector.h"
#include "sparse/sparse_metrics.h"
#include "test_util.h"

enum { D = 64, ROT = 32, N = 6000 };

static int cmp_desc(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* the score of key j for query q, split at far_hi (far_rot dims dropped below it) */
static double score(const float *q, const float *k, int j, int far_hi, int far_rot, subq_score sc) {
    double ab = 0, aa = 0, bb = 0;
    const int cut = j < far_hi ? D - far_rot : D;
    for (int c = 0; c < D; c++) {
        if (c < cut) ab += (double)q[c] * k[c];
        aa += (double)q[c] * q[c];
        bb += (double)k[c] * k[c];
    }
    return sc == SUBQ_SCORE_DOT ? ab : ab / sqrt(aa * bb);
}

/* keys: unrotated parts alike within runs of 32 slots (neighbouring keys
 * are, which the block scan relies on), every key's rotated part a large
 * copy of `lure` (what the queries' rotated parts align with) plus noise */
static void make_keys(uint64_t *rng, float *keys, const float *lure) {
    float base[D];
    for (int j = 0; j < N; j++) {
        if (j % 32 == 0)
            for (int c = 0; c < D; c++) base[c] = rng_normal(rng) + 0.2f;
        for (int c = 0; c < D; c++)
            keys[(size_t)j * D + c] = c < D - ROT ? base[c] + 0.3f * rng_normal(rng)
                                                  : 3.0f * lure[c] * rng_uniform(rng) + 0.3f * rng_normal(rng);
    }
}

static void make_query(uint64_t *rng, float *q, const float *lure) {
    for (int c = 0; c < D; c++) q[c] = c < D - ROT ? rng_normal(rng) + 0.2f : lure[c];
}

static void random_mask(uint64_t *rng, int32_t *seg, select_mask *m) {
    memset(m, 0, sizeof *m);
    m->n_slots = N / 2 + (int)(rng_next_u64(rng) % (N / 2 + 1));
    if (rng_next_u64(rng) % 2) {
        for (int j = 0; j < N; j++) seg[j] = j < 200 ? 0 : 1;
        m->seg = seg;
        m->query_seg = 1;
    }
    m->ex0_lo = 0, m->ex0_hi = (int)(rng_next_u64(rng) % 8);
    m->ex1_lo = m->n_slots - 16, m->ex1_hi = m->n_slots;
    m->far_hi = (int)(rng_next_u64(rng) % (uint64_t)m->n_slots);
}

/* The brute top-k scores (want, descending) of the eligible slots; their
 * count. `slots` (NULL: not wanted) gets the top-k slots. */
static int brute(const float *q, const float *keys, const select_mask *m, int far_rot, subq_score sc, int k,
                 double *want, int32_t *slots) {
    int ne = 0;
    double *all = malloc((size_t)N * sizeof(double));
    int32_t *idx = malloc((size_t)N * sizeof(int32_t));
    for (int j = 0; j < N; j++)
        if (select_mask_allows(m, j)) all[ne] = score(q, keys + (size_t)j * D, j, m->far_hi, far_rot, sc), idx[ne++] = j;
    /* selection of the top k by repeated max (n small) into want / slots */
    const int kk = k < ne ? k : ne;
    for (int i = 0; i < kk; i++) {
        int b = i;
        for (int x = i + 1; x < ne; x++)
            if (all[x] > all[b]) b = x;
        const double t = all[i];
        const int32_t ti = idx[i];
        all[i] = all[b], idx[i] = idx[b];
        all[b] = t, idx[b] = ti;
        want[i] = all[i];
        if (slots) slots[i] = idx[i];
    }
    free(all);
    free(idx);
    return kk;
}

/* got slots against the brute top k: eligibility, count, and how many reach
 * the k-th brute score within tol (hits); full: score multisets equal */
static void judge(const float *q, const float *keys, const select_mask *m, int far_rot, subq_score sc, int k,
                  const int32_t *out, int got, double tol, int full, int *bad, double *hits, double *wanted) {
    double *want = malloc((size_t)k * sizeof(double)), *have = malloc((size_t)(got > 0 ? got : 1) * sizeof(double));
    const int kk = brute(q, keys, m, far_rot, sc, k, want, NULL);
    *bad += got != kk;
    for (int i = 0; i < got; i++) {
        *bad += !select_mask_allows(m, out[i]);
        have[i] = score(q, keys + (size_t)out[i] * D, out[i], m->far_hi, far_rot, sc);
        *hits += kk > 0 && have[i] >= want[kk - 1] - tol;
    }
    *wanted += kk;
    qsort(have, (size_t)got, sizeof(double), cmp_desc);
    for (int i = 0; full && i < got && i < kk; i++) *bad += fabs(have[i] - want[i]) > tol;
    free(want);
    free(have);
}

static selector *new_selector(subq_selector_kind kind, subq_score sc, subq_scan scan, int f16, int far_rot, int reps,
                              const float *keys) {
    selector_params p;
    selector_params_default(&p, kind, D);
    p.plan.score = sc, p.plan.scan = scan, p.plan.search_f16 = f16, p.far_rot = far_rot, p.plan.block_reps = reps;
    p.plan.nprobe = 24, p.plan.block_keys = 32, p.plan.probe_from = 1024,
    p.plan.group_blocks = 0; /* the block scan from 1024 keys */
    selector *s = NULL;
    subq_error err = {0};
    CHECK(selector_new(&p, NULL, &s, &err) == SUBQ_OK, "selector_new: %s", err.msg);
    CHECK(s && selector_append(s, keys, N, 0, &err) == SUBQ_OK, "append: %s", err.msg);
    return s;
}

/* single queries and a batch of the exact selector */
static void test_exact(subq_score sc, subq_scan scan, int f16, uint64_t seed) {
    uint64_t rng = rng_seed(seed);
    float *keys = malloc((size_t)N * D * sizeof(float)), lure[D], *q = malloc(40 * (size_t)D * sizeof(float));
    int32_t *seg = malloc(40 * (size_t)N * sizeof(int32_t)), *out = malloc(40 * 256 * sizeof(int32_t));
    for (int c = 0; c < D; c++) lure[c] = rng_normal(&rng);
    make_keys(&rng, keys, lure);
    selector *s = new_selector(SUBQ_SELECT_EXACT, sc, scan, f16, ROT, 0, keys);
    const double tol = (f16 ? 2e-3 : 1e-5) * (sc == SUBQ_SCORE_DOT ? 40.0 : 1.0);
    const int full = scan == SUBQ_SCAN_FULL;
    int bad = 0, bad_b = 0;
    double hits = 0, wanted = 0, hits_b = 0, wanted_b = 0;
    select_mask m[40];
    for (int it = 0; it < 40; it++) {
        random_mask(&rng, seg + (size_t)it * N, &m[it]);
        make_query(&rng, q + (size_t)it * D, lure);
        const int k = 1 + (int)(rng_next_u64(&rng) % 200);
        const int got = selector_query(s, q + (size_t)it * D, NULL, k, &m[it], out);
        judge(q + (size_t)it * D, keys, &m[it], ROT, sc, k, out, got, tol, full, &bad, &hits, &wanted);
    }
    /* a batch: one GEMM over the stored keys whatever the scan */
    const int k = 64;
    int got[40];
    CHECK(selector_query_batch(s, 40, q, q, D, k, m, out, got, 1) == 0, "query_batch failed");
    for (int i = 0; i < 40; i++)
        judge(q + (size_t)i * D, keys, &m[i], ROT, sc, k, out + (size_t)i * k, got[i], tol, 1, &bad_b, &hits_b,
              &wanted_b);
    /* groups of queries under one mask (a KV head's query search heads):
     * the keys or codes read once, far rows with each query's far form; full
     * scans the brute top K, compressed ones what each query gets alone */
    int bad_g = 0, differ = 0;
    double hits_g = 0, wanted_g = 0;
    int32_t one[64];
    for (int it = 0; it < 40; it += 5) {
        CHECK(selector_query_group(s, 5, q + (size_t)it * D, NULL, k, &m[it], out, got) == 0, "query_group failed");
        for (int i = 0; i < 5; i++) {
            if (full) {
                judge(q + (size_t)(it + i) * D, keys, &m[it], ROT, sc, k, out + (size_t)i * k, got[i], tol, 1, &bad_g,
                      &hits_g, &wanted_g);
                continue;
            }
            const int got1 = selector_query(s, q + (size_t)(it + i) * D, NULL, k, &m[it], one);
            differ += got1 != got[i] || (got1 > 0 && memcmp(one, out + (size_t)i * k, (size_t)got1 * sizeof(int32_t)));
        }
    }
    char name[80];
    snprintf(name, sizeof name, "exact %s %s %s", select_score_name(sc), select_scan_name(scan), f16 ? "f16" : "f32");
    CHECK(bad_g == 0 && hits_g == wanted_g && differ == 0, "%s group: %d wrong, recall %.4f, %d unlike alone", name,
          bad_g, wanted_g > 0 ? hits_g / wanted_g : 1.0, differ);
    CHECK(bad == 0, "%s: %d wrong counts, ineligible slots or scores against brute force", name, bad);
    CHECK(hits >= (full ? 1.0 : 0.99) * wanted, "%s: recall %.4f", name, hits / wanted);
    CHECK(bad_b == 0 && hits_b == wanted_b, "%s batch: %d wrong, recall %.4f", name, bad_b, hits_b / wanted_b);
    selector_free(s);
    free(keys);
    free(q);
    free(seg);
    free(out);
}

/* the prefill's block scan and the graph indexes: recall of the far-split
 * top K, and that the split matters (the whole-score top K is another set) */
static void test_recall(subq_selector_kind kind, subq_scan scan, int reps, uint64_t seed) {
    if (!selector_kind_available(kind)) {
        CHECK(kind == SUBQ_SELECT_FAISS, "%s is not built in", selector_kind_name(kind));
        return;
    }
    uint64_t rng = rng_seed(seed);
    enum { NQ = 24, K = 32 };
    float *keys = malloc((size_t)N * D * sizeof(float)), lure[D], *q = malloc((size_t)NQ * D * sizeof(float));
    int32_t *seg = malloc((size_t)NQ * N * sizeof(int32_t)), out[NQ * K], top[K], whole[K];
    for (int c = 0; c < D; c++) lure[c] = rng_normal(&rng);
    make_keys(&rng, keys, lure);
    selector *s = new_selector(kind, SUBQ_SCORE_COSINE, scan, 0, ROT, reps, keys);
    select_mask m[NQ];
    int got[NQ];
    for (int i = 0; i < NQ; i++) {
        random_mask(&rng, seg + (size_t)i * N, &m[i]);
        m[i].seg = NULL;
        m[i].far_hi = m[i].n_slots / 2 + (int)(rng_next_u64(&rng) % (uint64_t)(m[i].n_slots / 2 - 16));
        make_query(&rng, q + (size_t)i * D, lure);
    }
    int rc = kind == SUBQ_SELECT_EXACT ? selector_query_prefill(s, NQ, q, q, D, K, m, out, got, 1)
                                  : selector_query_batch(s, NQ, q, q, D, K, m, out, got, 1);
    CHECK(rc == 0, "%s: query failed", selector_kind_name(kind));
    double found = 0, shared = 0, want[K];
    for (int i = 0; i < NQ && !rc; i++) {
        const int kk = brute(q + (size_t)i * D, keys, &m[i], ROT, SUBQ_SCORE_COSINE, K, want, top);
        select_mask whole_m = m[i];
        whole_m.far_hi = 0;
        brute(q + (size_t)i * D, keys, &whole_m, ROT, SUBQ_SCORE_COSINE, K, want, whole);
        for (int a = 0; a < kk; a++)
            for (int b = 0; b < got[i]; b++) found += out[(size_t)i * K + b] == top[a];
        for (int a = 0; a < kk; a++)
            for (int b = 0; b < kk; b++) shared += whole[b] == top[a];
    }
    const char *name = kind == SUBQ_SELECT_EXACT ? (reps ? "block scan with representatives" : "block scan")
                                            : selector_kind_name(kind);
    CHECK(found >= 0.9 * NQ * K, "%s %s: recall@%d %.3f of the far-split top K", name, select_scan_name(scan), K,
          found / (NQ * K));
    CHECK(shared <= 0.5 * NQ * K, "%s: the keys do not tell the split (%.3f shared with the whole-score top K)", name,
          shared / (NQ * K));
    printf("%s %s: recall@%d %.3f of the far-split top K (%.3f shared with the whole-score top K)\n", name,
           select_scan_name(scan), K, found / (NQ * K), shared / (NQ * K));
    selector_free(s);
    free(keys);
    free(q);
    free(seg);
}

/* The far keys' content clusters (select_clusters.c) in a prompt's batch:
 * with every list probed, the brute top K under random masks (segments,
 * exclusions, far_hi 0 to n_slots), also once the lists have dropped the
 * truncated slots and taken them again; with a few lists, recall. */
static void test_clusters(int f16, int rot, uint64_t seed) {
    enum { NQ = 24, K = 32, LISTS = 48 };
    uint64_t rng = rng_seed(seed);
    float *keys = malloc((size_t)N * D * sizeof(float)), lure[D], *q = malloc((size_t)NQ * D * sizeof(float));
    int32_t *seg = malloc((size_t)NQ * N * sizeof(int32_t)), out[NQ * K];
    for (int c = 0; c < D; c++) lure[c] = rng_normal(&rng);
    make_keys(&rng, keys, lure);
    const double tol = f16 ? 2e-3 : 1e-5;
    for (int probe = LISTS; probe > 0; probe = probe == LISTS ? 6 : 0) {
        selector_params p;
        selector_params_default(&p, SUBQ_SELECT_EXACT, D);
        p.plan.search_f16 = f16, p.far_rot = rot, p.plan.nprobe = 0;
        p.plan.clusters = LISTS, p.plan.cluster_probe = probe, p.plan.cluster_from = 1024;
        selector *s = NULL;
        subq_error err = {0};
        pool *pl = NULL;
        const int threads = probe == LISTS ? 2 : 1;
        CHECK(pool_new(threads, &pl, &err) == SUBQ_OK, "pool: %s", err.msg);
        const selector_env env = {.pool = pl};
        CHECK(selector_new(&p, &env, &s, &err) == SUBQ_OK, "selector_new: %s", err.msg);
        CHECK(s && selector_append(s, keys, N, 0, &err) == SUBQ_OK, "append: %s", err.msg);
        for (int round = 0; s && round < (probe == LISTS ? 2 : 1); round++) {
            if (round) { /* the lists forget the last quarter and take it again */
                CHECK(selector_truncate(s, 3 * N / 4, &err) == SUBQ_OK, "truncate: %s", err.msg);
                CHECK(selector_append(s, keys + (size_t)3 * N / 4 * D, N / 4, 3 * N / 4, &err) == SUBQ_OK,
                      "append: %s", err.msg);
            }
            select_mask m[NQ];
            int got[NQ], bad = 0;
            double hits = 0, wanted = 0;
            for (int i = 0; i < NQ; i++) {
                random_mask(&rng, seg + (size_t)i * N, &m[i]);
                make_query(&rng, q + (size_t)i * D, lure);
            }
            m[0].far_hi = m[0].n_slots; /* every key far */
            /* with every list probed on the pool's two threads (the lists
             * trained and the batch queried in pieces), with a few on one */
            CHECK(selector_query_prefill(s, NQ, q, q, D, K, m, out, got, threads) == 0, "clusters: query failed");
            for (int i = 0; i < NQ; i++)
                judge(q + (size_t)i * D, keys, &m[i], rot, SUBQ_SCORE_COSINE, K, out + (size_t)i * K, got[i], tol,
                      probe == LISTS, &bad, &hits, &wanted);
            if (probe == LISTS)
                CHECK(bad == 0 && hits == wanted, "clusters %s, %d far dims, every list, round %d: %d wrong, recall %.4f",
                      f16 ? "f16" : "f32", D - rot, round, bad, hits / wanted);
            else
                CHECK(hits >= 0.9 * wanted, "clusters %s, %d of %d lists: recall@%d %.3f", f16 ? "f16" : "f32", probe,
                      LISTS, K, hits / wanted);
            printf("clusters %s, %d of %d lists, round %d: recall@%d %.3f\n", f16 ? "f16" : "f32", probe, LISTS, round,
                   K, hits / wanted);
            /* failing allocations are an error, never an empty answer */
            s->fail_alloc = 1;
            CHECK(selector_query_prefill(s, NQ, q, q, D, K, m, out, got, threads) < 0,
                  "clusters: a failing query must fail");
            s->fail_alloc = 0;
        }
        selector_free(s);
        pool_free(pl);
    }
    /* settings out of range are refused, naming the clusters */
    const int bad[4][3] = {{-1, 96, 0}, {SELECT_MAX_CLUSTERS + 1, 96, 0}, {2048, 0, 0}, {2048, 96, -1}};
    for (int b = 0; b < 4; b++) {
        selector_params p;
        selector_params_default(&p, SUBQ_SELECT_EXACT, D);
        p.plan.clusters = bad[b][0], p.plan.cluster_probe = bad[b][1], p.plan.cluster_from = bad[b][2];
        selector *s = NULL;
        subq_error err = {0};
        CHECK(selector_new(&p, NULL, &s, &err) == SUBQ_ERR_ARG && strstr(err.msg, "clusters"),
              "clusters %d, probe %d, from %d must be refused (%s)", bad[b][0], bad[b][1], bad[b][2], err.msg);
        selector_free(s);
    }
    free(keys);
    free(q);
    free(seg);
}

/* hnsw under a far scheme over keys whose rotated part turns with position
 * as RoPE turns it (pair i by pos * 10000^(-2i / ROT)) and outweighs their
 * content, content drawn from 40 clusters in no order of position: keys
 * near in position are alike whole, and a graph over whole keys links them
 * so. Its graph is over the content dims only (select_ann.c): single
 * queries and a batch with the tail and some near slots eligible, against
 * the brute far-split top K: recall >= 0.95 over the far slots, and every
 * near slot of the brute top K found (they are scanned; but for one tied
 * with the K-th within rounding); the keys read back,
 * and a truncated graph against one built from the kept keys. */
/* Two answers of n slots to query q under m: the same, but for slots tied
 * with the brute K-th score (kth) within tol, which may go either way (the
 * AVX-512 scan's last bits depend on where a row falls in its group of
 * eight, so a scan split in parts may round a row differently). */
static int same_but_ties(const float *q, const float *keys, const select_mask *m, subq_score sc, const int32_t *a,
                         const int32_t *b, int n, double kth, double tol) {
    for (int x = 0; x < 2 * n; x++) {
        const int32_t j = x < n ? a[x] : b[x - n], *other = x < n ? b : a;
        int found = 0;
        for (int y = 0; y < n; y++) found |= other[y] == j;
        if (!found && fabs(score(q, keys + (size_t)j * D, j, m->far_hi, ROT, sc) - kth) > tol) return 0;
    }
    return 1;
}

/* a preparation run beside a query (selector_ops.query_beside): counts its calls */
static void count_call(void *ctx) { ++*(int *)ctx; }

static void test_hnsw_rotating(subq_score sc, int f16, uint64_t seed) {
    enum { NQ = 24, K = 32, CL = 40 };
    uint64_t rng = rng_seed(seed);
    float *keys = malloc((size_t)N * D * sizeof(float)), *cent = malloc((size_t)CL * D * sizeof(float));
    float *q = malloc((size_t)NQ * D * sizeof(float));
    int32_t out[NQ * K], top[K], got[NQ];
    double want[K];
    for (int i = 0; i < CL * D; i++) cent[i] = rng_normal(&rng);
    for (int j = 0; j < N; j++) {
        const float *c = cent + (size_t)(rng_next_u64(&rng) % CL) * D;
        float *k = keys + (size_t)j * D;
        for (int x = 0; x < D - ROT; x++) k[x] = c[x] + 0.4f * rng_normal(&rng);
        for (int i = 0; i < ROT / 2; i++) {
            const double th = j * pow(10000.0, -2.0 * i / ROT);
            k[D - ROT + 2 * i] = (float)(4.0 * cos(th)), k[D - ROT + 2 * i + 1] = (float)(4.0 * sin(th));
        }
    }
    selector *s = new_selector(SUBQ_SELECT_HNSW, sc, SUBQ_SCAN_FULL, f16, ROT, 0, keys);
    select_mask m[NQ];
    for (int i = 0; i < NQ; i++) {
        memset(&m[i], 0, sizeof m[i]);
        /* queries 2 and 3 see every key: their near keys among the latest
         * ones hnsw keeps apart (far_from 0: at least 1025 of them), or not */
        m[i].n_slots = i == 2 || i == 3 ? N : N / 2 + (int)(rng_next_u64(&rng) % (N / 2 + 1));
        m[i].ex0_hi = 4, m[i].ex1_lo = m[i].n_slots - 16, m[i].ex1_hi = m[i].n_slots;
        /* 0-299 near slots outside the tail, or for every third query
         * 2000-2299 (a decode step's near scan in parts on a pool), or none */
        m[i].far_hi = m[i].n_slots - 16 - (i % 3 ? 0 : 2000) - (int)(rng_next_u64(&rng) % 300);
        if (i == 1) m[i].far_hi = m[i].ex1_lo; /* no eligible key near: the graph alone */
        if (i == 2) m[i].far_hi = m[i].ex1_lo - 1000;
        if (i == 3) m[i].far_hi = m[i].ex1_lo - 2500;
        const float *c = cent + (size_t)(rng_next_u64(&rng) % CL) * D;
        for (int x = 0; x < D; x++)
            q[(size_t)i * D + x] = x < D - ROT ? c[x] + 0.4f * rng_normal(&rng) : rng_normal(&rng);
    }
    /* failing allocations are an error, never an empty answer */
    s->fail_alloc = 1;
    CHECK(selector_query(s, q, NULL, K, &m[0], out) < 0, "hnsw rotating: a failing query must fail");
    pool *p2 = NULL;
    subq_error perr = {0};
    CHECK(pool_new(2, &p2, &perr) == SUBQ_OK, "pool: %s", perr.msg);
    int fail_calls = 0;
    double t_fail = 0;
    CHECK(s->ops->query_beside(s, q, NULL, K, &m[0], out, count_call, &fail_calls, p2, &t_fail) < 0 && fail_calls == 1,
          "hnsw rotating: a failing query beside a preparation must fail, the preparation run once (%d)", fail_calls);
    s->fail_alloc = 0;
    /* one query at a time, a batch, and beside a decode step's preparation
     * on a pool of two (the graph search and the near scan on one thread
     * each) and on the caller alone: the same answers as one at a time (but
     * for ties with the K-th), the preparation run once each */
    static const char *mode_name[4] = {"single", "batch", "beside, 2 threads", "beside, 1 thread"};
    int32_t single[NQ * K];
    int single_got[NQ];
    const double tie_tol = (f16 ? 2e-3 : 1e-5) * (sc == SUBQ_SCORE_DOT ? 40.0 : 1.0); /* stored f16, float sums */
    for (int mode = 0; mode < 4; mode++) {
        if (mode == 1) {
            CHECK(selector_query_batch(s, NQ, q, q, D, K, m, out, got, 2) == 0, "hnsw rotating: batch failed");
        } else if (mode == 0) {
            for (int i = 0; i < NQ; i++) got[i] = selector_query(s, q + (size_t)i * D, NULL, K, &m[i], out + i * K);
            memcpy(single, out, sizeof single);
            memcpy(single_got, got, sizeof single_got);
        } else {
            int calls = 0, same = 1;
            double t_query = 0, kth[NQ];
            for (int i = 0; i < NQ; i++) {
                const int kk = brute(q + (size_t)i * D, keys, &m[i], ROT, sc, K, want, NULL);
                kth[i] = kk > 0 ? want[kk - 1] : 0.0;
                got[i] = s->ops->query_beside(s, q + (size_t)i * D, NULL, K, &m[i], out + i * K, count_call, &calls,
                                              mode == 2 ? p2 : NULL, &t_query);
                same &= got[i] == single_got[i] && t_query > 0 &&
                        same_but_ties(q + (size_t)i * D, keys, &m[i], sc, out + i * K, single + i * K, got[i], kth[i],
                                      tie_tol);
            }
            CHECK(calls == NQ && same, "hnsw rotating %s: %d preparations for %d queries, answers %s",
                  mode_name[mode], calls, NQ, same ? "the same" : "differ from one at a time");
            CHECK(selector_query_ahead(s, q, NULL, K, &m[0], out, keys, N, p2) == single_got[0] &&
                      same_but_ties(q, keys, &m[0], sc, out, single, single_got[0], kth[0], tie_tol),
                  "hnsw rotating: selector_query_ahead answers differ");
        }
        double far_found = 0, far_want = 0;
        const double tol = tie_tol;
        int near_missed = 0, bad = 0;
        for (int i = 0; i < NQ; i++) {
            const int kk = brute(q + (size_t)i * D, keys, &m[i], ROT, sc, K, want, top);
            bad += got[i] != kk;
            for (int b = 0; b < got[i]; b++) bad += !select_mask_allows(&m[i], out[i * K + b]);
            for (int a = 0; a < kk; a++) {
                int hit = 0;
                for (int b = 0; b < got[i]; b++) hit |= out[i * K + b] == top[a];
                if (top[a] < m[i].far_hi) far_found += hit, far_want++;
                else near_missed += !hit && want[a] > want[kk - 1] + tol; /* a tie at the K-th may go either way */
            }
        }
        CHECK(bad == 0, "hnsw rotating %s: %d wrong counts or ineligible slots", mode_name[mode], bad);
        CHECK(near_missed == 0, "hnsw rotating %s: %d near slots of the top K missed", mode_name[mode], near_missed);
        CHECK(far_found >= 0.95 * far_want, "hnsw rotating %s %s %s: recall %.3f of the far slots of the top K",
              mode_name[mode], select_score_name(sc), f16 ? "f16" : "f32", far_found / far_want);
        printf("hnsw, rotating keys, %s %s %s: recall %.3f of the far slots of the far-split top K\n",
               mode_name[mode], select_score_name(sc), f16 ? "f16" : "f32", far_found / far_want);
    }
    pool_free(p2);
    /* the stored keys come back as given (unit rows for cosine) after the
     * lead, and a truncated graph answers as one built from the kept keys */
    float *back = malloc((size_t)N * D * sizeof(float));
    subq_error err = {0};
    CHECK(selector_get_keys(s, N, back, &err) == SUBQ_OK, "hnsw rotating: get_keys: %s", err.msg);
    double worst = 0;
    for (int j = 0; j < N; j++) {
        double nn = 0;
        for (int x = 0; x < D; x++) nn += (double)keys[(size_t)j * D + x] * keys[(size_t)j * D + x];
        const double scale = sc == SUBQ_SCORE_COSINE ? 1.0 / sqrt(nn) : 1.0;
        for (int x = 0; x < D; x++) {
            const double want_x = keys[(size_t)j * D + x] * scale, e = fabs(back[(size_t)j * D + x] - want_x);
            worst = e / (fabs(want_x) + 1e-2) > worst ? e / (fabs(want_x) + 1e-2) : worst;
        }
    }
    CHECK(worst < (f16 ? 1e-2 : 1e-5), "hnsw rotating: stored keys differ from the keys by %.3g", worst);
    enum { KEEP = N / 2 };
    selector *fresh = new_selector(SUBQ_SELECT_HNSW, sc, SUBQ_SCAN_FULL, f16, ROT, 0, keys);
    CHECK(selector_truncate(fresh, 0, &err) == SUBQ_OK && selector_append(fresh, keys, KEEP, 0, &err) == SUBQ_OK,
          "hnsw rotating: fresh: %s", err.msg);
    CHECK(selector_truncate(s, KEEP, &err) == SUBQ_OK, "hnsw rotating: truncate: %s", err.msg);
    int differ = 0;
    int32_t a[K], b[K];
    for (int i = 0; i < NQ; i++) {
        select_mask mk = m[i];
        mk.n_slots = KEEP, mk.ex1_lo = KEEP - 16, mk.ex1_hi = KEEP;
        mk.far_hi = KEEP - 16 - (m[i].n_slots - m[i].far_hi);
        const int ga = selector_query(s, q + (size_t)i * D, NULL, K, &mk, a);
        const int gb = selector_query(fresh, q + (size_t)i * D, NULL, K, &mk, b);
        differ += ga != gb || (ga > 0 && memcmp(a, b, (size_t)ga * sizeof(int32_t)));
    }
    CHECK(differ == 0, "hnsw rotating: %d queries differ between the truncated and the fresh graph", differ);
    selector_free(fresh);
    free(back);
    selector_free(s);
    free(keys);
    free(cent);
    free(q);
}

/* The ANN recall's reference (sparse_probe's shadow exact selector) ranks
 * far keys as the selector does, without the rotated dims: handed the brute
 * far-split top K, the probe counts recall 1 (a shadow scoring whole keys
 * shares few of them, test_recall). */
static void test_probe_shadow(void) {
    enum { K = 32 };
    uint64_t rng = rng_seed(51);
    float *keys = malloc((size_t)N * D * sizeof(float)), lure[D], q[D];
    int32_t seg[N], top[K];
    double want[K];
    for (int c = 0; c < D; c++) lure[c] = rng_normal(&rng);
    make_keys(&rng, keys, lure);
    selector_params p;
    selector_params_default(&p, SUBQ_SELECT_HNSW, D);
    p.far_rot = ROT;
    sparse_probe probe = {0};
    subq_error err = {0};
    CHECK(sparse_probe_enable(&probe, &p, NULL, D, &err) == SUBQ_OK && probe.shadow, "probe: %s", err.msg);
    CHECK(sparse_probe_reserve(&probe, 1, 1, K, 0, &err) == SUBQ_OK, "probe reserve: %s", err.msg);
    CHECK(selector_append(probe.shadow, keys, N, 0, &err) == SUBQ_OK, "shadow append: %s", err.msg);
    for (int it = 0; it < 10; it++) {
        select_mask m;
        random_mask(&rng, seg, &m);
        m.far_hi = m.n_slots / 2;
        make_query(&rng, q, lure);
        const int kk = brute(q, keys, &m, ROT, SUBQ_SCORE_COSINE, K, want, top);
        CHECK(sparse_probe_count(&probe, q, NULL, &m, K, top, kk, 1, &err) == SUBQ_OK, "probe count: %s", err.msg);
    }
    CHECK(probe.totals.n_ann == 10 && fabs(probe.totals.ann_recall_sum - 10) < 1e-9,
          "probe: ANN recall %.4f of the brute far-split top K over %lld queries, want 1",
          probe.totals.ann_recall_sum / 10, (long long)probe.totals.n_ann);
    sparse_probe_free(&probe);
    free(keys);
}

/* far_hi 0, or a selector without far_rot: the whole score everywhere */
static void test_no_split(void) {
    uint64_t rng = rng_seed(9);
    float *keys = malloc((size_t)N * D * sizeof(float)), lure[D], q[D];
    int32_t seg[N], out[64];
    double want[64];
    for (int c = 0; c < D; c++) lure[c] = rng_normal(&rng);
    make_keys(&rng, keys, lure);
    selector *s = new_selector(SUBQ_SELECT_EXACT, SUBQ_SCORE_COSINE, SUBQ_SCAN_FULL, 0, 0, 0, keys);
    int bad = 0;
    for (int it = 0; it < 10; it++) {
        select_mask m;
        random_mask(&rng, seg, &m);
        make_query(&rng, q, lure);
        const int got = selector_query(s, q, NULL, 64, &m, out);
        select_mask whole = m;
        whole.far_hi = 0;
        const int kk = brute(q, keys, &whole, ROT, SUBQ_SCORE_COSINE, 64, want, NULL);
        bad += got != kk;
        for (int i = 0; i < got; i++)
            bad += fabs(score(q, keys + (size_t)out[i] * D, out[i], 0, ROT, SUBQ_SCORE_COSINE) - want[i]) > 1e-5;
    }
    CHECK(bad == 0, "far_rot 0: %d answers differ from the whole-score top K", bad);
    selector_free(s);
    free(keys);
}

int main(void) {
    for (subq_scan scan = SUBQ_SCAN_FULL; scan < SUBQ_SCAN_COUNT; scan++) {
        test_exact(SUBQ_SCORE_COSINE, scan, 0, 1 + scan);
        test_exact(SUBQ_SCORE_DOT, scan, 1, 11 + scan);
        test_recall(SUBQ_SELECT_EXACT, scan, 0, 21 + scan);
        test_recall(SUBQ_SELECT_EXACT, scan, 4, 24 + scan);
    }
    test_recall(SUBQ_SELECT_HNSW, SUBQ_SCAN_FULL, 0, 31);
    test_hnsw_rotating(SUBQ_SCORE_COSINE, 1, 34);
    test_hnsw_rotating(SUBQ_SCORE_DOT, 0, 35);
    test_recall(SUBQ_SELECT_FAISS, SUBQ_SCAN_FULL, 0, 32);
    test_clusters(0, ROT, 41);
    test_clusters(1, ROT, 42);
    test_clusters(0, 24, 43); /* 40 far dims: codes padded to 64 */
    test_probe_shadow();
    test_no_split();
    return test_summary();
}
