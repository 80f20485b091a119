/* HNSW (and FAISS, if built) recall@K against the exact selector on
 * clustered synthetic search vectors at default settings (M 32,
 * efConstruction 40, efSearch 64), the index grown by chunked appends as in
 * prefill + decode; by cosine and by raw dot product, HNSW over f32 and f16
 * keys. Also: masked queries (sinks, tail, documents) stay eligible and keep
 * their recall, small eligible sets are exact, bytes_read covers the
 * vectors scored, a truncated HNSW index answers as one built from the kept
 * keys, a batch of queries (selector_query_batch: in parallel for hnsw,
 * one by one for faiss) answers as one query each, and decode's inserts
 * searched ahead beside queries (selector_query_ahead) build the same graph.
 * Prints insert and query times (informational; the machine is shared). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/pool.h"
#include "base/rng.h"
#include "base/timer.h"
#include "select/selector.h"
#include "test_util.h"

/* ASan/UBSan builds run ~10x slower: a smaller data set keeps them quick. */
#if defined(__SANITIZE_ADDRESS__)
enum { N_KEYS = 6000 };
#else
enum { N_KEYS = 20000 };
#endif
enum { D = 64, N_CENTRES = 50, K = 64, N_QUERIES = 200 };

static void unit(float *x, int d) {
    double s = 0;
    for (int c = 0; c < d; c++) s += (double)x[c] * x[c];
    for (int c = 0; c < d; c++) x[c] = (float)(x[c] / sqrt(s));
}

/* x = centre + sigma * gaussian / sqrt(d), unnormalised (the selectors normalise) */
static void near(float *x, const float *centre, float sigma, uint64_t *rng) {
    for (int c = 0; c < D; c++) x[c] = centre[c] + sigma * rng_normal(rng) / sqrtf((float)D);
}

static double recall(const int32_t *a, int na, const int32_t *b, int nb) {
    int hit = 0;
    for (int i = 0; i < na; i++)
        for (int j = 0; j < nb; j++) hit += a[i] == b[j];
    return nb ? (double)hit / nb : 1.0;
}

static void run(subq_selector_kind kind, int f16, subq_score score, const float *keys, const float *queries,
                int32_t *seg) {
    char name[64];
    snprintf(name, sizeof name, "%s %s %s", selector_kind_name(kind), f16 ? "f16" : "f32", select_score_name(score));
    subq_error err = {0};
    selector_params pe, pa;
    selector_params_default(&pe, SUBQ_SELECT_EXACT, D);
    selector_params_default(&pa, kind, D);
    pe.plan.score = pa.plan.score = score;
    pa.plan.search_f16 = f16;
    selector *ex, *ann;
    CHECK(selector_new(&pe, NULL, &ex, &err) == SUBQ_OK, "exact: %s", err.msg);
    CHECK(selector_new(&pa, NULL, &ann, &err) == SUBQ_OK, "%s: %s", name, err.msg);
    /* growing index: prefill-sized chunks, then token-by-token decode */
    int at = 0, bad_append = 0;
    const int chunks[] = {1, 2, 500, 1500, 3000};
    for (int i = 0; i < 5 && at < N_KEYS - 1000; i++) {
        bad_append += selector_append(ex, keys + (size_t)at * D, chunks[i], at, &err) != SUBQ_OK;
        bad_append += selector_append(ann, keys + (size_t)at * D, chunks[i], at, &err) != SUBQ_OK;
        at += chunks[i];
    }
    for (; at < N_KEYS; at++) {
        bad_append += selector_append(ex, keys + (size_t)at * D, 1, at, &err) != SUBQ_OK;
        bad_append += selector_append(ann, keys + (size_t)at * D, 1, at, &err) != SUBQ_OK;
    }
    CHECK(bad_append == 0, "%s: %d appends failed (last: %s)", name, bad_append, err.msg);

    int32_t a[K], b[K];
    /* unmasked: the plain recall@K */
    select_mask all = {.n_slots = N_KEYS};
    double r = 0, t_ann = 0, t_ex = 0;
    int short_results = 0;
    int64_t vis0 = ann->stats.n_visited;
    for (int i = 0; i < N_QUERIES; i++) {
        double t1 = time_now_s();
        int nb = selector_query(ex, queries + (size_t)i * D, NULL, K, &all, b);
        double t2 = time_now_s();
        int na = selector_query(ann, queries + (size_t)i * D, NULL, K, &all, a);
        double t3 = time_now_s();
        t_ex += t2 - t1;
        t_ann += t3 - t2;
        short_results += na != K || nb != K;
        r += recall(a, na, b, nb);
    }
    r /= N_QUERIES;
    CHECK(short_results == 0, "%s: %d queries returned fewer than K", name, short_results);
    printf("%s: n=%d d=%d K=%d recall@K %.4f | insert %.1f us/key | query %.1f us (exact %.1f us) | "
           "%.0f distances/query | %.1f MiB\n",
           name, N_KEYS, D, K, r, 1e6 * ann->stats.t_append_s / N_KEYS, 1e6 * t_ann / N_QUERIES,
           1e6 * t_ex / N_QUERIES, (double)(ann->stats.n_visited - vis0) / N_QUERIES,
           ann->stats.bytes / 1048576.0);
    CHECK(r >= 0.95, "%s recall@%d %.4f < 0.95", name, K, r);

    /* masked as in attention: document = last third, sinks + tail excluded */
    int doc0 = 2 * N_KEYS / 3;
    select_mask m = {.n_slots = N_KEYS, .seg = seg, .query_seg = 1,
                     .ex0_lo = doc0, .ex0_hi = doc0 + 4, .ex1_lo = N_KEYS - 256, .ex1_hi = N_KEYS};
    double rm = 0;
    int bad = 0;
    vis0 = ann->stats.n_visited;
    for (int i = 0; i < N_QUERIES; i++) {
        int nb = selector_query(ex, queries + (size_t)i * D, NULL, K, &m, b);
        int na = selector_query(ann, queries + (size_t)i * D, NULL, K, &m, a);
        for (int j = 0; j < na; j++) bad += !select_mask_allows(&m, a[j]);
        rm += recall(a, na, b, nb);
    }
    rm /= N_QUERIES;
    printf("%s: masked (one document of %d, sinks + tail excluded) recall@K %.4f | %.0f distances/query\n", name,
           N_KEYS - doc0, rm, (double)(ann->stats.n_visited - vis0) / N_QUERIES);
    CHECK(bad == 0, "%s: %d ineligible slots returned", name, bad);
    /* graphs under the raw inner product are poorly navigable within a
     * masked part (hnswlib: measured 0.84 here at any efSearch up to 512,
     * 1.0 at 2000; FAISS 0.99, and 0.95 with the sanitizer build's 6000
     * keys): a known limit of graph indexes with --score dot */
    const double floor = score == SUBQ_SCORE_DOT ? (kind == SUBQ_SELECT_HNSW ? 0.8 : 0.9) : 0.95;
    CHECK(rm >= floor, "%s masked recall@%d %.4f < %.2f", name, K, rm, floor);

    /* a batch of the masked queries (prefill: in parallel) answers as one query each */
    select_mask mb[N_QUERIES];
    int got[N_QUERIES], same = 1;
    int32_t *ab = malloc((size_t)N_QUERIES * K * sizeof(int32_t));
    for (int i = 0; i < N_QUERIES; i++) mb[i] = m;
    pool *batch_pool;
    CHECK(pool_new(2, &batch_pool, &err) == SUBQ_OK, "pool: %s", err.msg);
    ann->env.pool = batch_pool; /* the context's threads, as a prompt's batch has them */
    CHECK(ab && selector_query_batch(ann, N_QUERIES, queries, queries, D, K, mb, ab, got, 2) == 0, "%s: query_batch",
          name);
    for (int i = 0; ab && i < N_QUERIES; i++) {
        int na = selector_query(ann, queries + (size_t)i * D, NULL, K, &m, a);
        same &= na == got[i] && recall(ab + (size_t)i * K, got[i], a, na) == 1.0;
    }
    CHECK(same, "%s: batched queries differ from one query each", name);
    if (kind == SUBQ_SELECT_HNSW) { /* (FAISS's batch allocates inside the library) */
        ann->fail_alloc = 1;
        CHECK(!ab || selector_query_batch(ann, N_QUERIES, queries, queries, D, K, mb, ab, got, 2) < 0,
              "%s: a batch whose scratch cannot be had must fail", name);
        ann->fail_alloc = 0;
    }
    ann->env.pool = NULL;
    pool_free(batch_pool);
    free(ab);

    /* a small eligible set (short document): scored directly, so exact */
    select_mask small = {.n_slots = 200, .seg = NULL, .ex0_lo = 0, .ex0_hi = 4, .ex1_lo = 150, .ex1_hi = 200};
    int exact_small = 1;
    for (int i = 0; i < 20; i++) {
        int nb = selector_query(ex, queries + (size_t)i * D, NULL, K, &small, b);
        int na = selector_query(ann, queries + (size_t)i * D, NULL, K, &small, a);
        exact_small &= na == nb && recall(a, na, b, nb) == 1.0;
    }
    CHECK(exact_small, "%s: small eligible sets must be exact", name);

    /* bytes_read: every vector scored at least */
    CHECK(ann->stats.bytes_read >= (uint64_t)ann->stats.n_visited * D * (f16 ? 2 : 4), "%s: bytes_read %lld for %lld "
          "distances", name, (long long)ann->stats.bytes_read, (long long)ann->stats.n_visited);

    /* truncation rebuilds from the stored keys: the same answers as an index
     * given only the kept keys */
    if (kind == SUBQ_SELECT_HNSW) {
        const int keep = N_KEYS / 2;
        selector *fresh;
        CHECK(selector_new(&pa, NULL, &fresh, &err) == SUBQ_OK, "%s: %s", name, err.msg);
        CHECK(selector_append(fresh, keys, keep, 0, &err) == SUBQ_OK, "%s: %s", name, err.msg);
        CHECK(selector_truncate(ann, keep, &err) == SUBQ_OK, "%s truncate: %s", name, err.msg);
        select_mask half = {.n_slots = keep};
        int differ = 0;
        for (int i = 0; i < 20; i++) {
            int na = selector_query(ann, queries + (size_t)i * D, NULL, K, &half, a);
            int nb = selector_query(fresh, queries + (size_t)i * D, NULL, K, &half, b);
            differ += na != nb || memcmp(a, b, (size_t)na * sizeof(int32_t));
        }
        CHECK(differ == 0, "%s: %d queries differ between the truncated and the fresh index", name, differ);
        selector_free(fresh);
    }

    /* decode's inserts searched ahead beside the query (selector_query_ahead,
     * on a second thread): the same answers at every step and the same graph
     * as plain appends; a wrong key or no preparation falls back to the
     * append's own search */
    if (kind == SUBQ_SELECT_HNSW) {
        enum { BULK = 3000 };
        selector *plain, *ahead;
        pool *p2;
        CHECK(pool_new(2, &p2, &err) == SUBQ_OK, "pool: %s", err.msg);
        CHECK(selector_new(&pa, NULL, &plain, &err) == SUBQ_OK, "%s: %s", name, err.msg);
        CHECK(selector_new(&pa, NULL, &ahead, &err) == SUBQ_OK, "%s: %s", name, err.msg);
        CHECK(selector_append(plain, keys, BULK, 0, &err) == SUBQ_OK, "%s: %s", name, err.msg);
        CHECK(selector_append(ahead, keys, BULK, 0, &err) == SUBQ_OK, "%s: %s", name, err.msg);
        int step_differ = 0, failed = 0, n_right = 0;
        for (int j = BULK; j < N_KEYS; j++) {
            const float *q = queries + (size_t)(j % N_QUERIES) * D, *k = keys + (size_t)j * D;
            const float *k_next = j % 11 == 0 ? NULL : j % 7 == 0 ? k - D : k; /* none, a wrong key, the key */
            n_right += k_next == k;
            select_mask mj = {.n_slots = j, .ex0_hi = 4, .ex1_lo = j - 16, .ex1_hi = j};
            int na = selector_query(plain, q, NULL, K, &mj, a);
            int nb = selector_query_ahead(ahead, q, NULL, K, &mj, b, k_next, j, p2);
            step_differ += na != nb || memcmp(a, b, (size_t)(na > 0 ? na : 0) * sizeof(int32_t));
            failed += selector_append(plain, k, 1, j, &err) != SUBQ_OK;
            failed += selector_append(ahead, k, 1, j, &err) != SUBQ_OK;
        }
        CHECK(failed == 0, "%s: appends after preparation failed: %s", name, err.msg);
        CHECK(step_differ == 0, "%s: %d queries beside a preparation differ from plain ones", name, step_differ);
        /* every right key but the about 1/M drawn above level 0 (addPoint's own search) */
        CHECK(plain->stats.n_linked_ahead == 0 && ahead->stats.n_linked_ahead > n_right * 9 / 10 &&
                  ahead->stats.n_linked_ahead <= n_right,
              "%s: %lld of %d inserts linked from the search ahead", name, (long long)ahead->stats.n_linked_ahead,
              n_right);
        select_mask whole = {.n_slots = N_KEYS};
        int differ = 0;
        for (int i = 0; i < N_QUERIES; i++) {
            int na = selector_query(plain, queries + (size_t)i * D, NULL, K, &whole, a);
            int nb = selector_query(ahead, queries + (size_t)i * D, NULL, K, &whole, b);
            differ += na != nb || memcmp(a, b, (size_t)na * sizeof(int32_t));
        }
        CHECK(differ == 0, "%s: %d queries differ between graphs built with and without preparation", name, differ);
        selector_free(plain);
        selector_free(ahead);
        pool_free(p2);
    }

    /* reset: a new sequence, new index */
    selector_reset(ann);
    CHECK(selector_query(ann, queries, NULL, K, &all, a) == 0, "%s: reset index must be empty", name);
    CHECK(selector_append(ann, keys, 10, 0, &err) == SUBQ_OK, "%s after reset: %s", name, err.msg);
    select_mask ten = {.n_slots = 10};
    CHECK(selector_query(ann, queries, NULL, K, &ten, a) == 10, "%s: 10 keys after reset", name);
    selector_free(ex);
    selector_free(ann);
}

int main(void) {
    uint64_t rng = rng_seed(42);
    float *centres = malloc((size_t)N_CENTRES * D * sizeof(float));
    float *keys = malloc((size_t)N_KEYS * D * sizeof(float));
    float *queries = malloc((size_t)N_QUERIES * D * sizeof(float));
    int32_t *seg = malloc((size_t)N_KEYS * sizeof(int32_t));
    for (int i = 0; i < N_CENTRES * D; i++) centres[i] = rng_normal(&rng);
    for (int i = 0; i < N_CENTRES; i++) unit(centres + (size_t)i * D, D);
    for (int j = 0; j < N_KEYS; j++) {
        int c = (int)(rng_next_u64(&rng) % N_CENTRES);
        near(keys + (size_t)j * D, centres + (size_t)c * D, 0.6f, &rng);
        /* unnormalised, as search projections produce them */
        float sc = 0.5f + 2.0f * rng_uniform(&rng);
        for (int i = 0; i < D; i++) keys[(size_t)j * D + i] *= sc;
        seg[j] = j < 2 * N_KEYS / 3 ? 0 : 1;
    }
    for (int i = 0; i < N_QUERIES; i++)
        near(queries + (size_t)i * D, centres + (size_t)(i % N_CENTRES) * D, 0.3f, &rng);

    run(SUBQ_SELECT_HNSW, 0, SUBQ_SCORE_COSINE, keys, queries, seg);
    run(SUBQ_SELECT_HNSW, 1, SUBQ_SCORE_COSINE, keys, queries, seg);
    run(SUBQ_SELECT_HNSW, 0, SUBQ_SCORE_DOT, keys, queries, seg);
    if (selector_kind_available(SUBQ_SELECT_FAISS)) {
        run(SUBQ_SELECT_FAISS, 0, SUBQ_SCORE_COSINE, keys, queries, seg);
        run(SUBQ_SELECT_FAISS, 0, SUBQ_SCORE_DOT, keys, queries, seg);
    } else {
        printf("faiss: not in this build\n");
    }

    free(centres);
    free(keys);
    free(queries);
    free(seg);
    return test_summary();
}
