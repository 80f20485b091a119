/* Token sampling: greedy, temperature, top-k, top-p (nucleus). */
#include <math.h>
#include <stdlib.h>

#include "base/rng.h"
#include "subq.h"

typedef struct cand {
    float logit;
    int32_t id;
} cand;

static int cand_desc(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit < y->logit ? 1 : -1;
    return x->id - y->id;
}

static int32_t argmax(const float *logits, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

int32_t subq_sample(const subq_sampler_params *p, float *logits, int n_vocab, uint64_t *rng_state) {
    if (p->temp <= 0.0f) return argmax(logits, n_vocab);
    int use_sort = (p->top_k > 0 && p->top_k < n_vocab) || p->top_p < 1.0f;
    if (!use_sort) {
        /* p_i = softmax(logits / temp)_i, sampled by inverse CDF */
        float mx = logits[argmax(logits, n_vocab)];
        double sum = 0.0;
        for (int i = 0; i < n_vocab; i++) sum += exp((double)(logits[i] - mx) / p->temp);
        double r = rng_uniform(rng_state) * sum, acc = 0.0;
        for (int i = 0; i < n_vocab; i++) {
            acc += exp((double)(logits[i] - mx) / p->temp);
            if (acc > r) return i;
        }
        return argmax(logits, n_vocab);
    }
    cand *c = malloc((size_t)n_vocab * sizeof *c);
    if (!c) return argmax(logits, n_vocab); /* degrade to greedy rather than fail mid-generation */
    for (int i = 0; i < n_vocab; i++) c[i] = (cand){logits[i], i};
    qsort(c, (size_t)n_vocab, sizeof *c, cand_desc);
    int n = p->top_k > 0 && p->top_k < n_vocab ? p->top_k : n_vocab;
    /* softmax over the kept candidates at temperature temp */
    double *prob = malloc((size_t)n * sizeof *prob);
    if (!prob) {
        int32_t id = c[0].id;
        free(c);
        return id;
    }
    double sum = 0.0;
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
    double r = rng_uniform(rng_state) * sum, acc = 0.0;
    int32_t id = c[n - 1].id;
    for (int i = 0; i < n; i++) {
        acc += prob[i];
        if (acc > r) {
            id = c[i].id;
            break;
        }
    }
    free(prob);
    free(c);
    return id;
}
