/* The sampler through the public API: frequencies against the analytic
 * softmax, top-k / top-p support against a brute-force sort, seeding
 * (seed 0 included) and parameter checks. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "subq.h"

static int failures = 0;
#define CHECK(cond, ...)                                                                                    \
    do {                                                                                                    \
        if (!(cond)) {                                                                                      \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                                     \
            printf(__VA_ARGS__);                                                                            \
            printf("\n");                                                                                   \
            failures++;                                                                                     \
        }                                                                                                   \
    } while (0)

static subq_sampler *make(float temp, int top_k, float top_p, uint64_t seed) {
    subq_sampler_params p = {.temp = temp, .top_k = top_k, .top_p = top_p, .seed = seed};
    subq_sampler *s = NULL;
    subq_error err;
    if (subq_sampler_new(&p, &s, &err)) {
        printf("FAIL: sampler_new: %s\n", err.msg);
        exit(1);
    }
    return s;
}

/* Draw n tokens from fixed logits; counts[id]++. */
static void draw(subq_sampler *s, const float *logits, int n_vocab, int n, int *counts) {
    float *work = malloc((size_t)n_vocab * sizeof(float));
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < n_vocab; j++) work[j] = logits[j];
        int32_t t = subq_sampler_sample(s, work, n_vocab);
        if (t >= 0 && t < n_vocab) counts[t]++;
    }
    free(work);
}

/* p = (0.1, 0.2, 0.3, 0.4) as logits; at temp 1 the frequencies must match
 * p, also with seed 0 (a zero generator state would sample greedily). */
static void test_frequencies(void) {
    const float logits[4] = {logf(0.1f), logf(0.2f), logf(0.3f), logf(0.4f)};
    const double p[4] = {0.1, 0.2, 0.3, 0.4};
    const uint64_t seeds[2] = {0, 12345};
    const int n = 20000;
    for (int si = 0; si < 2; si++) {
        int counts[4] = {0};
        subq_sampler *s = make(1.0f, 0, 1.0f, seeds[si]);
        draw(s, logits, 4, n, counts);
        subq_sampler_free(s);
        for (int j = 0; j < 4; j++) /* 5 binomial standard deviations at most */
            CHECK(fabs((double)counts[j] / n - p[j]) < 5 * sqrt(p[j] * (1 - p[j]) / n),
                  "seed %llu: token %d drawn %.4f of the time, want %.2f", (unsigned long long)seeds[si], j,
                  (double)counts[j] / n, p[j]);
    }
    /* top-k 2 keeps tokens 3 and 2, renormalised: 4/7 and 3/7 */
    int counts[4] = {0};
    subq_sampler *s = make(1.0f, 2, 1.0f, 0);
    draw(s, logits, 4, n, counts);
    subq_sampler_free(s);
    CHECK(counts[0] == 0 && counts[1] == 0, "top-k 2 drew tokens outside the top 2 (%d, %d)", counts[0], counts[1]);
    CHECK(fabs((double)counts[3] / n - 4.0 / 7) < 0.02, "top-k 2: token 3 at %.4f, want %.4f", (double)counts[3] / n,
          4.0 / 7);
    /* top-p 0.35: the smallest prefix reaching 0.35 is token 3 alone */
    int c2[4] = {0};
    s = make(1.0f, 0, 0.35f, 7);
    draw(s, logits, 4, 1000, c2);
    subq_sampler_free(s);
    CHECK(c2[3] == 1000, "top-p 0.35 must always give token 3 (got %d of 1000)", c2[3]);
    /* top-p 0.5: tokens 3 and 2 (0.4 < 0.5 <= 0.7) */
    int c3[4] = {0};
    s = make(1.0f, 0, 0.5f, 7);
    draw(s, logits, 4, n, c3);
    subq_sampler_free(s);
    CHECK(c3[0] == 0 && c3[1] == 0 && c3[2] > 0 && c3[3] > 0, "top-p 0.5 support wrong: %d %d %d %d", c3[0], c3[1],
          c3[2], c3[3]);
}

/* The k best by (logit desc, id asc), by brute force. */
static int in_top_k(const float *logits, int n, int k, int id) {
    int better = 0;
    for (int j = 0; j < n; j++)
        if (logits[j] > logits[id] || (logits[j] == logits[id] && j < id)) better++;
    return better < k;
}

/* top-k over a large vocabulary with many ties: every draw lies in the
 * brute-force top k, and at a huge temperature every one of the k appears. */
static void test_topk_support(void) {
    const int n_vocab = 1000, k = 40;
    float *logits = malloc((size_t)n_vocab * sizeof(float));
    int *counts = calloc((size_t)n_vocab, sizeof(int));
    for (int j = 0; j < n_vocab; j++) logits[j] = (float)((j * 7919) % 13); /* 13 distinct values */
    subq_sampler *s = make(1e6f, k, 1.0f, 3);
    draw(s, logits, n_vocab, 20000, counts);
    subq_sampler_free(s);
    int outside = 0, missing = 0;
    for (int j = 0; j < n_vocab; j++) {
        int top = in_top_k(logits, n_vocab, k, j);
        if (!top && counts[j]) outside++;
        if (top && !counts[j]) missing++;
    }
    CHECK(outside == 0, "%d tokens outside the brute-force top-%d were drawn", outside, k);
    CHECK(missing == 0, "%d tokens of the brute-force top-%d were never drawn", missing, k);
    free(logits);
    free(counts);
}

static void test_seeding(void) {
    const int n_vocab = 50, n = 200;
    float logits[50];
    for (int j = 0; j < n_vocab; j++) logits[j] = (float)sin(j * 1.7);
    int32_t a[200], b[200], c[200];
    subq_sampler *sa = make(1.0f, 20, 0.9f, 99), *sb = make(1.0f, 20, 0.9f, 99), *sc = make(1.0f, 20, 0.9f, 100);
    for (int i = 0; i < n; i++) {
        float w[50];
        for (int j = 0; j < n_vocab; j++) w[j] = logits[j];
        a[i] = subq_sampler_sample(sa, w, n_vocab);
        for (int j = 0; j < n_vocab; j++) w[j] = logits[j];
        b[i] = subq_sampler_sample(sb, w, n_vocab);
        for (int j = 0; j < n_vocab; j++) w[j] = logits[j];
        c[i] = subq_sampler_sample(sc, w, n_vocab);
    }
    int same_ab = 1, same_ac = 1;
    for (int i = 0; i < n; i++) {
        same_ab &= a[i] == b[i];
        same_ac &= a[i] == c[i];
    }
    CHECK(same_ab, "two samplers with the same seed differ");
    CHECK(!same_ac, "samplers with seeds 99 and 100 drew the same %d tokens", n);
    subq_sampler_free(sa);
    subq_sampler_free(sb);
    subq_sampler_free(sc);
    /* greedy ignores the seed */
    subq_sampler *g = make(0.0f, 40, 0.95f, 5);
    float w[50];
    for (int j = 0; j < n_vocab; j++) w[j] = logits[j];
    int best = 0;
    for (int j = 1; j < n_vocab; j++)
        if (logits[j] > logits[best]) best = j;
    CHECK(subq_sampler_sample(g, w, n_vocab) == best, "temperature 0 must pick the argmax");
    subq_sampler_free(g);
}

static void test_bad_params(void) {
    const subq_sampler_params bad[] = {
        {.temp = -1.0f, .top_p = 1.0f}, {.temp = NAN, .top_p = 1.0f}, {.temp = INFINITY, .top_p = 1.0f},
        {.temp = 1.0f, .top_k = -1, .top_p = 1.0f}, {.temp = 1.0f, .top_p = -0.1f}, {.temp = 1.0f, .top_p = 2.0f},
        {.temp = 1.0f, .top_p = NAN},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        subq_sampler *s = (subq_sampler *)1;
        subq_error err = {0};
        subq_status st = subq_sampler_new(&bad[i], &s, &err);
        CHECK(st == SUBQ_ERR_ARG && s == NULL && err.msg[0], "bad parameters %zu accepted (status %d)", i, (int)st);
    }
}

int main(void) {
    test_frequencies();
    test_topk_support();
    test_seeding();
    test_bad_params();
    if (failures) {
        printf("test_sampler: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_sampler: ok\n");
    return 0;
}
