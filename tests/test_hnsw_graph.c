/* A saved HNSW graph (select/hnsw_graph.h, selector_get_index /
 * selector_put_index) against the index that inserting the keys builds,
 * for hnsw over f32 and f16 keys, cosine and dot, and under a far scheme
 * (the content graph, its leading elements and its window of latest keys):
 *   the graph of N keys, put back with the stored keys    every query's slots
 *                                                         those of the original;
 *                                                         saves the same bytes
 *   the graph of the first M keys and the N - M after     the bytes put_keys of
 *                                                         all N saves (inserts)
 *   either index against brute force (cosine)             recall >= 0.85
 *   bad graphs: truncated, a damaged word, an id past     refused (the error
 *   the end, a link to an element below its level, a      kind named), the
 *   list longer than M, another M / seed / dims, more     selector left empty:
 *   elements than keys, other keys, levels another seed   put_keys then answers
 *   drew (header and checksum made right)                 as the original */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/crc32c.h"
#include "base/rng.h"
#include "select/hnsw_graph.h"
#include "select/selector.h"
#include "test_util.h"

enum { D = 32, ROT = 8, N = 3000, M_FIRST = 1800, K = 16, NQ = 40 };

/* header offsets (hnsw_graph.h) */
enum { H_M = 12, H_SEED = 32, H_COUNT = 40, H_CRC_GRAPH = 60 };

static selector *new_hnsw(int f16, subq_score score, int far_rot, uint64_t seed) {
    selector_params p;
    selector_params_default(&p, SUBQ_SELECT_HNSW, D);
    p.plan.search_f16 = f16, p.plan.score = score, p.plan.seed = seed, p.plan.hnsw_m = 8;
    p.far_rot = far_rot, p.far_from = 64;
    selector *s = NULL;
    subq_error err = {0};
    CHECK(selector_new(&p, NULL, &s, &err) == SUBQ_OK, "selector_new: %s", err.msg);
    return s;
}

static void fix_crc(unsigned char *b, size_t n) {
    const uint32_t crc = crc32c(0, b + HNSW_GRAPH_HEADER, n - HNSW_GRAPH_HEADER);
    memcpy(b + H_CRC_GRAPH, &crc, sizeof crc);
}

static uint32_t word(const unsigned char *b, size_t i) {
    uint32_t w;
    memcpy(&w, b + HNSW_GRAPH_HEADER + 4 * i, sizeof w);
    return w;
}

static void set_word(unsigned char *b, size_t i, uint32_t w) { memcpy(b + HNSW_GRAPH_HEADER + 4 * i, &w, sizeof w); }

static int same_answers(selector *a, selector *b, const float *q, const select_mask *m) {
    int32_t x[K], y[K];
    for (int i = 0; i < NQ; i++) {
        const int gx = selector_query(a, q + (size_t)i * D, NULL, K, &m[i], x);
        const int gy = selector_query(b, q + (size_t)i * D, NULL, K, &m[i], y);
        if (gx != gy || gx < 0 || memcmp(x, y, (size_t)gx * sizeof x[0])) return 0;
    }
    return 1;
}

/* recall@K against the brute-force top K by cosine (no mask, no far scheme) */
static double recall(selector *s, const float *keys, const float *q) {
    double hit = 0;
    for (int i = 0; i < NQ; i++) {
        double sim[N];
        const float *qi = q + (size_t)i * D;
        for (int j = 0; j < N; j++) {
            double dot = 0, nq = 0, nk = 0;
            for (int c = 0; c < D; c++)
                dot += (double)qi[c] * keys[(size_t)j * D + c], nq += (double)qi[c] * qi[c],
                    nk += (double)keys[(size_t)j * D + c] * keys[(size_t)j * D + c];
            sim[j] = dot / sqrt(nq * nk);
        }
        int32_t got[K];
        const select_mask all = {.n_slots = N};
        const int n = selector_query(s, qi, NULL, K, &all, got);
        for (int t = 0; t < n; t++) { /* in the top K: fewer than K keys score above it */
            int above = 0;
            for (int j = 0; j < N; j++) above += sim[j] > sim[got[t]];
            hit += above < K;
        }
    }
    return hit / (NQ * K);
}

/* Bytes b (n) refused by put_index with `want`, the selector left empty,
 * then rebuilt by put_keys: made as `ref` was (seed 7, ref_f16), it
 * answers as ref. */
static void refused(const char *what, unsigned char *b, size_t n, subq_status want, int f16, subq_score score,
                    int far_rot, uint64_t seed, const float *stored, int n_keys, selector *ref, int ref_f16,
                    const float *q, const select_mask *m) {
    selector *s = new_hnsw(f16, score, far_rot, seed);
    subq_error err = {0};
    const subq_status got = selector_put_index(s, stored, n_keys, b, n, &err);
    CHECK(got == want, "%s: status %d (want %d): %s", what, (int)got, (int)want, err.msg);
    void *again;
    size_t bytes;
    CHECK(selector_get_index(s, &again, &bytes, &err) == SUBQ_OK && !again, "%s: the selector is not empty", what);
    CHECK(selector_put_keys(s, stored, N, 0, &err) == SUBQ_OK, "%s: put_keys after: %s", what, err.msg);
    CHECK(seed != 7 || f16 != ref_f16 || same_answers(s, ref, q, m), "%s: the rebuilt selector answers otherwise",
          what);
    selector_free(s);
}

static void run(int f16, subq_score score, int far_rot, const float *keys, const float *q, const select_mask *m) {
    const char *name = far_rot ? "far scheme" : f16 ? "f16" : score == SUBQ_SCORE_DOT ? "dot" : "f32";
    subq_error err = {0};
    selector *orig = new_hnsw(f16, score, far_rot, 7);
    for (int j = 0; j < N; j += 500) /* prompt batches, then the graph of them all */
        CHECK(selector_append(orig, keys + (size_t)j * D, 500, j, &err) == SUBQ_OK, "%s append: %s", name, err.msg);
    float *stored = malloc((size_t)N * D * sizeof(float));
    CHECK(selector_get_keys(orig, N, stored, &err) == SUBQ_OK, "%s get_keys: %s", name, err.msg);
    void *graph;
    size_t bytes;
    CHECK(selector_get_index(orig, &graph, &bytes, &err) == SUBQ_OK && graph, "%s get_index: %s", name, err.msg);

    /* put back whole: the same answers and the same bytes */
    selector *back = new_hnsw(f16, score, far_rot, 7);
    CHECK(selector_put_index(back, stored, N, graph, bytes, &err) == SUBQ_OK, "%s put_index: %s", name, err.msg);
    CHECK(same_answers(orig, back, q, m), "%s: the loaded graph answers otherwise", name);
    void *again;
    size_t again_bytes;
    CHECK(selector_get_index(back, &again, &again_bytes, &err) == SUBQ_OK && again_bytes == bytes &&
              !memcmp(again, graph, bytes), "%s: the loaded graph saves other bytes", name);
    free(again);
    if (!far_rot && score == SUBQ_SCORE_COSINE) {
        const double r = recall(back, keys, q);
        CHECK(r >= 0.85, "%s: recall %.3f of the brute top %d", name, r, K);
    }

    /* the first M_FIRST keys' graph, then the rest inserted: as inserting all */
    selector *first = new_hnsw(f16, score, far_rot, 7), *grown = new_hnsw(f16, score, far_rot, 7);
    CHECK(selector_put_keys(first, stored, M_FIRST, 0, &err) == SUBQ_OK, "%s put_keys: %s", name, err.msg);
    void *part;
    size_t part_bytes;
    CHECK(selector_get_index(first, &part, &part_bytes, &err) == SUBQ_OK, "%s get_index: %s", name, err.msg);
    CHECK(selector_put_index(grown, stored, N, part, part_bytes, &err) == SUBQ_OK, "%s put_index of %d: %s", name,
          M_FIRST, err.msg);
    CHECK(selector_get_index(grown, &again, &again_bytes, &err) == SUBQ_OK && again_bytes == bytes &&
              !memcmp(again, graph, bytes), "%s: %d keys linked and %d inserted save other bytes than %d inserted",
          name, M_FIRST, N - M_FIRST, N);
    CHECK(same_answers(orig, grown, q, m), "%s: the grown graph answers otherwise", name);
    free(again);

    /* bad graphs */
    unsigned char *b = malloc(bytes);
    const size_t levels = 0, level0 = N, words0 = 1 + 2 * 8;
    const size_t upper = level0 + (size_t)N * words0;
#define BAD(what, want, seed, n_keys, mend)                                                                            \
    do {                                                                                                               \
        memcpy(b, graph, bytes);                                                                                       \
        mend;                                                                                                          \
        refused(what, b, bytes, want, f16, score, far_rot, seed, stored, n_keys, orig, f16, q, m);                     \
    } while (0)
    refused("truncated", graph, bytes - 4, SUBQ_ERR_FORMAT, f16, score, far_rot, 7, stored, N, orig, f16, q, m);
    refused("header only", graph, HNSW_GRAPH_HEADER, SUBQ_ERR_FORMAT, f16, score, far_rot, 7, stored, N, orig, f16, q,
            m);
    BAD("a damaged word", SUBQ_ERR_FORMAT, 7, N, set_word(b, level0 + 5, word(b, level0 + 5) ^ 1));
    BAD("an id past the end", SUBQ_ERR_FORMAT, 7, N, (set_word(b, level0 + 1, N), fix_crc(b, bytes)));
    BAD("a list longer than M", SUBQ_ERR_FORMAT, 7, N, (set_word(b, level0 + words0, 2 * 8 + 1), fix_crc(b, bytes)));
    /* an upper list naming an element of level 0 */
    size_t low = 0, at = upper, list = 0;
    while (word(graph, levels + low) != 0) low++;
    for (size_t i = 0; i < N && !list; i++)
        if (word(graph, levels + i) > 0) {
            if (word(graph, at) > 0) list = at;
            at += (size_t)word(graph, levels + i) * (1 + 8);
        }
    CHECK(list > 0, "%s: no upper list with links", name);
    BAD("a link below its level", SUBQ_ERR_FORMAT, 7, N, (set_word(b, list + 1, (uint32_t)low), fix_crc(b, bytes)));
    uint32_t m16 = 16;
    BAD("another M", SUBQ_ERR_MISMATCH, 7, N, memcpy(b + H_M, &m16, 4));
    BAD("another seed", SUBQ_ERR_MISMATCH, 8, N, (void)0);
    refused("another element size", graph, bytes, SUBQ_ERR_MISMATCH, !f16, score, far_rot, 7, stored, N, orig, f16, q,
            m);
    BAD("more elements than keys", SUBQ_ERR_RANGE, 7, N - 1, (void)0);
    uint64_t seed8 = 8;
    BAD("levels another seed drew", SUBQ_ERR_MISMATCH, 8, N, memcpy(b + H_SEED, &seed8, 8));
    float *other = malloc((size_t)N * D * sizeof(float));
    memcpy(other, stored, (size_t)N * D * sizeof(float));
    other[(size_t)(N / 2) * D] *= -1.0f;
    selector *s = new_hnsw(f16, score, far_rot, 7);
    CHECK(selector_put_index(s, other, N, graph, bytes, &err) == SUBQ_ERR_MISMATCH, "%s: a graph over other keys "
          "was taken", name);
    selector_free(s);
    uint64_t count;
    memcpy(&count, (unsigned char *)graph + H_COUNT, 8);
    CHECK(count == N, "%s: the header counts %llu elements", name, (unsigned long long)count);
#undef BAD
    free(other);
    free(b);
    free(part);
    free(graph);
    free(stored);
    selector_free(orig);
    selector_free(back);
    selector_free(first);
    selector_free(grown);
    printf("%s: a saved graph (%zu bytes for %d keys) loads back as inserted\n", name, bytes, N);
}

int main(void) {
    uint64_t rng = rng_seed(11);
    enum { CL = 30 };
    float *cent = malloc((size_t)CL * D * sizeof(float)), *keys = malloc((size_t)N * D * sizeof(float));
    float *q = malloc((size_t)NQ * D * sizeof(float));
    for (int i = 0; i < CL * D; i++) cent[i] = rng_normal(&rng);
    for (int j = 0; j < N; j++) {
        const float *c = cent + (size_t)(rng_next_u64(&rng) % CL) * D;
        for (int x = 0; x < D; x++) keys[(size_t)j * D + x] = (c[x] + 0.5f * rng_normal(&rng)) * (1.0f + j % 3);
    }
    select_mask m[NQ];
    for (int i = 0; i < NQ; i++) {
        const float *c = cent + (size_t)(rng_next_u64(&rng) % CL) * D;
        for (int x = 0; x < D; x++) q[(size_t)i * D + x] = c[x] + 0.4f * rng_normal(&rng);
        memset(&m[i], 0, sizeof m[i]);
        m[i].n_slots = i % 2 ? N : N / 2 + i * 20;
    }
    run(0, SUBQ_SCORE_COSINE, 0, keys, q, m);
    run(1, SUBQ_SCORE_COSINE, 0, keys, q, m);
    run(0, SUBQ_SCORE_DOT, 0, keys, q, m);
    /* far scheme: sinks and a tail excluded, near keys past far_hi */
    for (int i = 0; i < NQ; i++) {
        m[i].ex0_hi = 4, m[i].ex1_lo = m[i].n_slots - 16, m[i].ex1_hi = m[i].n_slots;
        m[i].far_hi = m[i].n_slots - 16 - 40 * (i % 5);
    }
    run(1, SUBQ_SCORE_COSINE, ROT, keys, q, m);
    free(cent);
    free(keys);
    free(q);
    return test_summary();
}
