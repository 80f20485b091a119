/* subq_generate: prompt -> prefill (reusing the cached prefix) -> sample ->
 * stream. The one generation loop under `subq generate` and `subq serve`. */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "subq.h"

subq_generate_params subq_generate_default_params(void) {
    subq_generate_params p = {0};
    p.n_predict = 128;
    p.sampler = subq_sampler_default_params();
    p.end_tokens[0] = p.end_tokens[1] = -1;
    return p;
}

/* Put the prompt in the cache: keep the prefix the cache shares with it and
 * decode the rest, batch by batch as subq_decode would cut it, so that
 * on_batch may stop between batches (*stopped). The last prompt token is
 * decoded again for its logits unless the cache is exactly the prompt and
 * knows them. */
static subq_status prefill(subq_context *c, const int32_t *prompt, int n_prompt, float *logits, int n_vocab,
                           const subq_generate_params *p, int *n_reused, int *stopped, subq_error *err) {
    const int32_t *cached = subq_context_tokens(c);
    const int n_past = subq_context_n_past(c);
    int keep = 0;
    while (keep < n_past && keep < n_prompt && cached[keep] == prompt[keep]) keep++;
    const float *known = subq_context_last_logits(c);
    if (keep == n_prompt && n_past == n_prompt && known) {
        memcpy(logits, known, (size_t)n_vocab * sizeof(float));
        *n_reused = n_prompt;
        return SUBQ_OK;
    }
    if (keep == n_prompt) keep = n_prompt - 1;
    if (keep < subq_context_min_keep(c)) keep = 0; /* the sliding layers' rings have moved past it */
    *n_reused = keep;
    subq_status s = subq_context_truncate(c, keep, err);
    const int batch = subq_context_n_batch(c);
    for (int at = keep; !s && at < n_prompt; at += batch) {
        if (p->on_batch && p->on_batch(p->user, keep, at - keep, n_prompt)) {
            *stopped = 1;
            break;
        }
        const int m = n_prompt - at < batch ? n_prompt - at : batch;
        s = subq_decode(c, prompt + at, m, at + m == n_prompt ? logits : NULL, 0, err);
    }
    return s;
}

/* Pass one token's bytes on; pieces longer than any real one (hostile
 * vocabularies) go through the heap. Returns the callback's verdict. */
static subq_status pass_on(const subq_generate_params *p, const subq_model *m, int32_t prev, int32_t tok,
                           int *stop, subq_error *err) {
    char small[256], *heap = NULL;
    size_t n = 0;
    const char *piece = small;
    subq_status s = subq_token_to_piece(m, prev, tok, small, sizeof small, &n, err);
    if (s == SUBQ_ERR_RANGE) {
        if (!(heap = malloc(n))) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory for a piece of %zu bytes", n);
        s = subq_token_to_piece(m, prev, tok, heap, n, &n, err);
        piece = heap;
    }
    if (!s) *stop = p->on_token(p->user, tok, piece, n);
    free(heap);
    return s;
}

subq_status subq_generate(subq_context *c, const int32_t *prompt, int n_prompt, const subq_generate_params *p,
                          subq_generate_result *res, subq_error *err) {
    if (!c || !prompt || !p || !res) return subq_fail(err, SUBQ_ERR_ARG, "subq_generate: NULL argument");
    memset(res, 0, sizeof *res);
    const subq_model *m = subq_context_model(c);
    subq_model_info info;
    subq_model_get_info(m, &info);
    subq_sampler *smp = NULL;
    float *logits = NULL;
    subq_status s = SUBQ_OK;
    if (n_prompt <= 0) s = subq_fail(err, SUBQ_ERR_ARG, "subq_generate: the prompt is empty");
    else if (p->n_predict < 0) s = subq_fail(err, SUBQ_ERR_ARG, "subq_generate: n_predict %d < 0", p->n_predict);
    else if (n_prompt > subq_context_n_ctx(c))
        s = subq_fail(err, SUBQ_ERR_RANGE, "the prompt is %d tokens, more than the context of %d", n_prompt,
                      subq_context_n_ctx(c));
    else if (!(logits = malloc((size_t)info.n_vocab * sizeof(float))))
        s = subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    else s = subq_sampler_new(&p->sampler, &smp, err);
    int stopped = 0;
    if (!s) s = prefill(c, prompt, n_prompt, logits, info.n_vocab, p, &res->n_reused, &stopped, err);
    res->finish = stopped ? SUBQ_FINISH_CALLER : SUBQ_FINISH_LENGTH;
    if (!s && !stopped && p->on_prompt && p->on_prompt(p->user, res->n_reused)) res->finish = SUBQ_FINISH_CALLER;
    /* sample, stop at an end token, pass on, decode */
    int32_t prev = s ? -1 : prompt[n_prompt - 1];
    while (!s && res->finish == SUBQ_FINISH_LENGTH && res->n_generated < p->n_predict) {
        int32_t tok = subq_sampler_sample(smp, logits, info.n_vocab);
        if (tok == p->end_tokens[0] || tok == p->end_tokens[1]) {
            res->finish = SUBQ_FINISH_END_TOKEN;
            break;
        }
        int stop = 0;
        if (p->on_token && (s = pass_on(p, m, prev, tok, &stop, err))) break;
        prev = tok;
        res->n_generated++;
        if (stop) res->finish = SUBQ_FINISH_CALLER;
        if (stop || res->n_generated == p->n_predict) break; /* the last token needs no decode */
        if (subq_context_n_past(c) == subq_context_n_ctx(c)) {
            res->finish = SUBQ_FINISH_CONTEXT_FULL;
            break;
        }
        s = subq_decode(c, &tok, 1, logits, 0, err);
    }
    if (s) subq_context_reset(c);
    subq_sampler_free(smp);
    free(logits);
    return s;
}
