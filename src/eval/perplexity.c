/* Perplexity as llama.cpp's perplexity tool computes it, so figures are
 * comparable: BOS + whole-text tokenisation, non-overlapping chunks of n_ctx
 * tokens whose first token is replaced by BOS, second half of each scored.
 * With a window shorter than the chunk, the same tokens are scored through
 * windows of that many tokens, half a window apart, each scoring its second
 * half: what a model of that context gives on them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "subq_lab.h"
#include "base/error.h"
#include "eval/eval.h"
#include "model/context.h"

/* -log softmax(logits)[target] = logsumexp(logits) - logits[target] */
double eval_token_nll(const float *logits, int n_vocab, int target) {
    float mx = logits[0];
    for (int i = 1; i < n_vocab; i++) mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0.0;
    for (int i = 0; i < n_vocab; i++) sum += exp((double)logits[i] - mx);
    return log(sum) + mx - logits[target];
}

static void fill_result(subq_ppl_result *r, double nll_sum, double nll2_sum, int64_t count, int chunks) {
    double mean = nll_sum / (double)count, mean2 = nll2_sum / (double)count;
    r->nll_mean = mean;
    r->ppl = exp(mean);
    /* stderr of mean NLL, propagated through exp (delta method), as llama.cpp */
    double var = count > 1 ? (mean2 - mean * mean) / (double)(count - 1) : 0.0;
    r->ppl_stderr = var > 0 ? r->ppl * sqrt(var) : 0.0;
    r->n_scored = count;
    r->n_chunks = chunks;
}

subq_status subq_perplexity(subq_context *c, const int32_t *tokens, size_t n_tokens, int n_ctx, int window,
                            int max_chunks, subq_ppl_callback cb, void *user, subq_ppl_result *res, float *nll_out,
                            subq_error *err) {
    const subq_model *m = c->model;
    const int n_vocab = m->hp.n_vocab;
    memset(res, 0, sizeof *res);
    if (n_ctx < 4) return subq_fail(err, SUBQ_ERR_ARG, "perplexity context %d is too small (min 4)", n_ctx);
    if (window <= 0) window = n_ctx;
    if (window < 4 || window % 2 || n_ctx % window)
        return subq_fail(err, SUBQ_ERR_ARG, "perplexity window %d: an even number of at least 4 tokens that divides "
                         "the chunk (-c %d)", window, n_ctx);
    if (window > c->kv.n_ctx)
        return subq_fail(err, SUBQ_ERR_ARG, "perplexity context %d exceeds the KV cache (%d)", window, c->kv.n_ctx);
    int n_chunks = (int)(n_tokens / (size_t)n_ctx);
    if (max_chunks > 0 && n_chunks > max_chunks) n_chunks = max_chunks;
    if (n_chunks == 0)
        return subq_fail(err, SUBQ_ERR_ARG, "text has %zu tokens, fewer than one chunk of %d; use a smaller -c",
                         n_tokens, n_ctx);
    int bos = tokenizer_bos(m->tok);
    int32_t *win = malloc((size_t)window * sizeof(int32_t));
    float *logits = malloc((size_t)window * (size_t)n_vocab * sizeof(float));
    if (!win || !logits) {
        free(win);
        free(logits);
        return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory for %d x %d logits", window, n_vocab);
    }
    const int first = n_ctx / 2;
    double nll_sum = 0.0, nll2_sum = 0.0;
    int64_t count = 0;
    subq_status s = SUBQ_OK;
    for (int ch = 0; ch < n_chunks && !s; ch++) {
        const int32_t *chunk = tokens + (size_t)ch * n_ctx;
        /* windows [a, a + window) of the chunk, the first at first - window / 2,
         * each scoring positions [a + window / 2, a + window) (the chunk's
         * [first, n_ctx - 1) in all; one window of the whole chunk without a
         * window) */
        for (int a = first - window / 2; a + window / 2 < n_ctx - 1 && !s; a += window / 2) {
            memcpy(win, chunk + a, (size_t)window * sizeof(int32_t));
            if (bos >= 0 && tokenizer_add_bos(m->tok)) win[0] = bos;
            subq_context_reset(c);
            s = subq_decode(c, win, window, logits, 1, err);
            /* logits at j predict token j+1 of the chunk */
            for (int j = a + window / 2; j < a + window && j < n_ctx - 1 && !s; j++) {
                double nll = eval_token_nll(logits + (size_t)(j - a) * n_vocab, n_vocab, chunk[j + 1]);
                /* NaN or infinite logits (broken or overflowing weights) give no perplexity */
                if (!isfinite(nll))
                    s = subq_fail(err, SUBQ_ERR_RANGE, "perplexity is not finite: the model's logits at position %d "
                                  "of chunk %d are not finite numbers", j, ch + 1);
                if (nll_out) nll_out[count] = (float)nll;
                nll_sum += nll;
                nll2_sum += nll * nll;
                count++;
            }
        }
        if (s) break;
        fill_result(res, nll_sum, nll2_sum, count, ch + 1);
        if (cb && cb(user, ch, n_chunks, res)) {
            s = subq_fail(err, SUBQ_ERR_CANCELLED, "perplexity stopped by the caller after chunk %d of %d", ch + 1,
                          n_chunks);
            break;
        }
    }
    free(win);
    free(logits);
    return s;
}
