/* Quest and oracle on native keys in a real KV cache (f32 and f16):
 * - Quest's page scores are true upper bounds of the head-mean q.k of every
 *   key in the page (and equal an independent recomputation of the bound);
 * - Quest takes pages best bound first;
 * - oracle == brute-force top-K of the head-mean q.k. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "kv/kv_cache.h"
#include "quant/quant.h"
#include "select/select_internal.h"
#include "select/selector.h"
#include "test_util.h"

enum { N_LAYER = 2, LAYER = 1, N_HEAD = 4, N_HEAD_KV = 2, HD = 24, N_CTX = 1200 };

static int cmp_desc(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* key of (kv head g, slot j) as the cache stores it, in double */
static double key_at(const kv_cache *kv, int g, int j, int c) {
    const void *p = kv_cache_key(kv, LAYER, g, j);
    return kv->type == SUBQ_KV_F16 ? fp16_to_fp32(((const uint16_t *)p)[c]) : ((const float *)p)[c];
}

/* head-mean q.k_j, GQA: head h reads KV head h / (N_HEAD / N_HEAD_KV) */
static double head_mean(const kv_cache *kv, const float *q, int j) {
    double s = 0;
    for (int h = 0; h < N_HEAD; h++)
        for (int c = 0; c < HD; c++) s += q[h * HD + c] * key_at(kv, h / (N_HEAD / N_HEAD_KV), j, c);
    return s / N_HEAD;
}

/* the bound straight from its definition: page min/max per channel */
static double bound_ref(const kv_cache *kv, const float *q, int page, int P, int n) {
    double s = 0;
    for (int h = 0; h < N_HEAD; h++) {
        int g = h / (N_HEAD / N_HEAD_KV);
        for (int c = 0; c < HD; c++) {
            double mn = INFINITY, mx = -INFINITY;
            for (int j = page * P; j < page * P + P && j < n; j++) {
                double k = key_at(kv, g, j, c);
                mn = k < mn ? k : mn;
                mx = k > mx ? k : mx;
            }
            double a = q[h * HD + c] * mn, b = q[h * HD + c] * mx;
            s += a > b ? a : b;
        }
    }
    return s / N_HEAD;
}

static void fill_cache(kv_cache *kv, int n, uint64_t *rng) {
    float *k = malloc((size_t)n * N_HEAD_KV * HD * sizeof(float));
    float *v = calloc((size_t)n * N_HEAD_KV * HD, sizeof(float));
    /* per-channel offsets and scales, with slow drift along the sequence, so
     * pages differ the way RoPE'd keys do */
    for (int j = 0; j < n; j++)
        for (int i = 0; i < N_HEAD_KV * HD; i++)
            k[(size_t)j * N_HEAD_KV * HD + i] =
                rng_normal(rng) * (0.5f + (i % 7) * 0.3f) + (float)((i % 5) - 2) + 2.0f * sinf(0.01f * j * (1 + i % 3));
    kv_cache_store(kv, LAYER, 0, n, k, v, NULL);
    free(k);
    free(v);
}

static void test_quest(subq_kv_type type, int P, uint64_t seed) {
    uint64_t rng = rng_seed(seed);
    const int n = 1000;
    kv_cache kv;
    subq_error err = {0};
    CHECK(kv_cache_init(&kv, N_LAYER, N_HEAD_KV, HD, N_CTX, type, &err) == SUBQ_OK, "kv init: %s", err.msg);
    fill_cache(&kv, n, &rng);
    selector_params p;
    selector_params_default(&p, SUBQ_SELECT_QUEST, 0);
    p.plan.quest_page = P;
    selector_env env = {.kv = &kv, .layer = LAYER, .n_head = N_HEAD, .n_head_kv = N_HEAD_KV, .head_dim = HD};
    selector *s;
    CHECK(selector_new(&p, &env, &s, &err) == SUBQ_OK, "quest: %s", err.msg);
    for (int at = 0, c = 1; at < n; at += c, c = c * 2 + 3) {
        if (at + c > n) c = n - at;
        CHECK(selector_append(s, NULL, c, at, &err) == SUBQ_OK, "append: %s", err.msg);
    }
    const int n_pages = (n + P - 1) / P;
    float q[N_HEAD * HD];
    int bad_bound = 0, bad_ref = 0, bad_order = 0, bad_full = 0;
    double worst = 0;
    int32_t *out = malloc((size_t)n * sizeof(int32_t));
    double *ps = malloc((size_t)n_pages * sizeof(double));
    for (int it = 0; it < 40; it++) {
        for (int i = 0; i < N_HEAD * HD; i++) q[i] = rng_normal(&rng) * (it % 2 ? 1.0f : 3.0f);
        for (int pg = 0; pg < n_pages; pg++) {
            double b = select_quest_page_score(s, q, pg), r = bound_ref(&kv, q, pg, P, n);
            ps[pg] = b;
            /* bound >= every key's head-mean score, up to f32 summation error */
            for (int j = pg * P; j < pg * P + P && j < n; j++) {
                double sc = head_mean(&kv, q, j), tol = 1e-5 * (fabs(b) + fabs(sc) + 1.0);
                bad_bound += sc > b + tol;
                if (sc - b > worst) worst = sc - b;
            }
            bad_ref += fabs(b - r) > 1e-4 * (fabs(r) + 1.0);
        }
        /* k = a few pages, no mask: the first page returned has the highest bound */
        select_mask m = {.n_slots = n};
        int k = 3 * P;
        int got = selector_query(s, NULL, q, k, &m, out);
        double best = -INFINITY;
        for (int pg = 0; pg < n_pages; pg++) best = ps[pg] > best ? ps[pg] : best;
        bad_order += got != k || ps[out[0] / P] != best;
        /* pages come out in non-increasing bound order */
        for (int i = 1; i < got; i++) bad_order += ps[out[i] / P] > ps[out[i - 1] / P];
        /* k >= n: everything */
        got = selector_query(s, NULL, q, n + 10, &m, out);
        bad_full += got != n;
    }
    const char *t = type == SUBQ_KV_F16 ? "f16" : "f32";
    CHECK(bad_bound == 0, "quest %s P=%d: %d keys above their page bound (worst by %g)", t, P, bad_bound, worst);
    CHECK(bad_ref == 0, "quest %s P=%d: %d page bounds differ from the definition", t, P, bad_ref);
    CHECK(bad_order == 0, "quest %s P=%d: %d page-order violations", t, P, bad_order);
    CHECK(bad_full == 0, "quest %s P=%d: %d queries with k >= n did not return everything", t, P, bad_full);
    selector_free(s);
    kv_cache_free(&kv);
    free(out);
    free(ps);
}

static void test_oracle(subq_kv_type type, uint64_t seed) {
    uint64_t rng = rng_seed(seed);
    const int n = 900;
    kv_cache kv;
    subq_error err = {0};
    CHECK(kv_cache_init(&kv, N_LAYER, N_HEAD_KV, HD, N_CTX, type, &err) == SUBQ_OK, "kv init: %s", err.msg);
    fill_cache(&kv, n, &rng);
    selector_params p;
    selector_params_default(&p, SUBQ_SELECT_ORACLE, 0);
    selector_env env = {.kv = &kv, .layer = LAYER, .n_head = N_HEAD, .n_head_kv = N_HEAD_KV, .head_dim = HD};
    selector *s;
    CHECK(selector_new(&p, &env, &s, &err) == SUBQ_OK, "oracle: %s", err.msg);
    CHECK(selector_append(s, NULL, n, 0, &err) == SUBQ_OK, "append: %s", err.msg);
    int32_t out[256], seg[N_CTX];
    double want[N_CTX], have[256];
    float q[N_HEAD * HD];
    int bad = 0, bad_count = 0;
    for (int it = 0; it < 30; it++) {
        for (int i = 0; i < N_HEAD * HD; i++) q[i] = rng_normal(&rng);
        for (int j = 0; j < n; j++) seg[j] = j / 300;
        select_mask m = {.n_slots = n - (int)(rng_next_u64(&rng) % 100), .seg = it % 2 ? seg : NULL,
                         .query_seg = 2, .ex0_lo = 600, .ex0_hi = 604, .ex1_lo = n - 150, .ex1_hi = n};
        int k = 1 + (int)(rng_next_u64(&rng) % 256), ne = 0;
        for (int j = 0; j < n; j++)
            if (select_mask_allows(&m, j)) want[ne++] = head_mean(&kv, q, j);
        qsort(want, (size_t)ne, sizeof(double), cmp_desc);
        int got = selector_query(s, NULL, q, k, &m, out);
        bad_count += got != (k < ne ? k : ne);
        for (int i = 0; i < got; i++) {
            bad += !select_mask_allows(&m, out[i]);
            have[i] = head_mean(&kv, q, out[i]);
        }
        for (int i = 1; i < got; i++) bad += have[i] > have[i - 1] + 1e-4;
        qsort(have, (size_t)got, sizeof(double), cmp_desc);
        for (int i = 0; i < got && i < ne; i++) bad += fabs(have[i] - want[i]) > 1e-4 * (1 + fabs(want[i]));
    }
    const char *t = type == SUBQ_KV_F16 ? "f16" : "f32";
    CHECK(bad_count == 0, "oracle %s: %d wrong counts", t, bad_count);
    CHECK(bad == 0, "oracle %s: %d mismatches with brute force", t, bad);
    selector_free(s);
    kv_cache_free(&kv);
}

int main(void) {
    test_quest(SUBQ_KV_F32, 16, 11);
    test_quest(SUBQ_KV_F16, 16, 12);
    test_quest(SUBQ_KV_F32, 7, 13); /* partial last page */
    test_oracle(SUBQ_KV_F32, 21);
    test_oracle(SUBQ_KV_F16, 22);
    return test_summary();
}
