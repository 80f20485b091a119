/* Token sampling: greedy, temperature, top-k, top-p (nucleus). A sampler
 * owns its random stream and its scratch, so sampling a token allocates
 * nothing and two samplers with the same seed pick the same tokens. */
#include <math.h>
#include <stdlib.h>

#include "base/error.h"
#include "base/rng.h"
#include "subq.h"

typedef struct cand {
    float logit;
    int32_t id;
} cand;

struct subq_sampler {
    subq_sampler_params p;
    uint64_t rng;
    cand *c;       /* scratch: candidates, grown to n_vocab */
    double *prob;
    int cap;
};

subq_sampler_params subq_sampler_default_params(void) {
    subq_sampler_params p = {.temp = 0.8f, .top_k = 40, .top_p = 0.95f, .seed = 42};
    return p;
}

subq_status subq_sampler_new(const subq_sampler_params *p, subq_sampler **out, subq_error *err) {
    *out = NULL;
    if (!(p->temp >= 0.0f) || isinf(p->temp))
        return subq_fail(err, SUBQ_ERR_ARG, "temperature must be a finite number >= 0 (got %g)", (double)p->temp);
    if (p->top_k < 0) return subq_fail(err, SUBQ_ERR_ARG, "top-k must be >= 0 (got %d)", p->top_k);
    if (!(p->top_p >= 0.0f && p->top_p <= 1.0f))
        return subq_fail(err, SUBQ_ERR_ARG, "top-p must be in [0, 1] (got %g)", (double)p->top_p);
    subq_sampler *s = calloc(1, sizeof *s);
    if (!s) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    s->p = *p;
    s->rng = rng_seed(p->seed);
    *out = s;
    return SUBQ_OK;
}

void subq_sampler_free(subq_sampler *s) {
    if (!s) return;
    free(s->c);
    free(s->prob);
    free(s);
}

static int32_t argmax(const float *logits, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

/* Candidate order: higher logit first, equal logits by lower id (a total
 * order, so a partial selection keeps the same prefix as a full sort). */
static int cand_before(const cand *x, const cand *y) {
    return x->logit != y->logit ? x->logit > y->logit : x->id < y->id;
}

static int cand_cmp(const void *a, const void *b) {
    return cand_before(a, b) ? -1 : cand_before(b, a) ? 1 : 0;
}

/* The k best candidates, best first, into c[0..k): a min-heap of the k best
 * seen (root = worst kept), then sorted. O(n log k) instead of a full sort. */
static void top_candidates(const float *logits, int n, int k, cand *c) {
    int h = 0;
    for (int i = 0; i < n; i++) {
        cand x = {logits[i], i};
        if (h < k) { /* sift up */
            int j = h++;
            while (j > 0 && cand_before(&c[(j - 1) / 2], &x)) {
                c[j] = c[(j - 1) / 2];
                j = (j - 1) / 2;
            }
            c[j] = x;
        } else if (cand_before(&x, &c[0])) { /* replace the root, sift down */
            int j = 0;
            for (;;) {
                int l = 2 * j + 1, r = l + 1, w = j;
                const cand *wc = &x;
                if (l < k && cand_before(wc, &c[l])) w = l, wc = &c[l];
                if (r < k && cand_before(wc, &c[r])) w = r;
                if (w == j) break;
                c[j] = c[w];
                j = w;
            }
            c[j] = x;
        }
    }
    qsort(c, (size_t)k, sizeof *c, cand_cmp);
}

static int grow(subq_sampler *s, int n) {
    if (n <= s->cap) return 1;
    cand *c = realloc(s->c, (size_t)n * sizeof *c);
    if (c) s->c = c;
    double *p = realloc(s->prob, (size_t)n * sizeof *p);
    if (p) s->prob = p;
    if (!c || !p) return 0;
    s->cap = n;
    return 1;
}

int32_t subq_sampler_sample(subq_sampler *s, float *logits, int n_vocab) {
    const subq_sampler_params *p = &s->p;
    if (p->temp <= 0.0f) return argmax(logits, n_vocab);
    int use_sort = (p->top_k > 0 && p->top_k < n_vocab) || p->top_p < 1.0f;
    if (!use_sort) {
        /* p_i = softmax(logits / temp)_i, sampled by inverse CDF */
        float mx = logits[argmax(logits, n_vocab)];
        double sum = 0.0;
        for (int i = 0; i < n_vocab; i++) sum += exp((double)(logits[i] - mx) / p->temp);
        double r = rng_uniform(&s->rng) * sum, acc = 0.0;
        for (int i = 0; i < n_vocab; i++) {
            acc += exp((double)(logits[i] - mx) / p->temp);
            if (acc > r) return i;
        }
        return argmax(logits, n_vocab);
    }
    if (!grow(s, n_vocab)) return argmax(logits, n_vocab); /* degrade to greedy rather than fail mid-generation */
    int n = p->top_k > 0 && p->top_k < n_vocab ? p->top_k : n_vocab;
    cand *c = s->c;
    top_candidates(logits, n_vocab, n, c);
    /* softmax over the kept candidates at temperature temp */
    double *prob = s->prob, sum = 0.0;
    for (int i = 0; i < n; i++) sum += prob[i] = exp((double)(c[i].logit - c[0].logit) / p->temp);
    /* nucleus: smallest prefix whose probability reaches top_p */
    if (p->top_p < 1.0f) {
        double acc = 0.0;
        int keep = n;
        for (int i = 0; i < n; i++) {
            acc += prob[i] / sum;
            if (acc >= p->top_p) {
                keep = i + 1;
                break;
            }
        }
        n = keep;
        sum = 0.0;
        for (int i = 0; i < n; i++) sum += prob[i];
    }
    double r = rng_uniform(&s->rng) * sum, acc = 0.0;
    for (int i = 0; i < n; i++) {
        acc += prob[i];
        if (acc > r) return c[i].id;
    }
    return c[n - 1].id;
}
