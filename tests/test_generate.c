/* subq_generate through the public API, on stories260K:
 *   - greedy tokens equal a loop written from subq_decode and argmax, and
 *     each piece equals subq_token_to_piece of it;
 *   - the cache: the same prompt again reuses all of it (no decode), a
 *     longer one its prefix; the text stays the same;
 *   - stops: an end token (not passed on), a callback (after its token),
 *     n_predict 0, a full context (every slot used, no error);
 *   - refusals: an empty prompt is SUBQ_ERR_ARG, one longer than the
 *     context SUBQ_ERR_RANGE, and the context is left empty. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "subq.h"
#include "test_util.h"

enum { N_PROMPT = 9, N_GEN = 24, N_CTX = 64 };

static subq_model *model;
static subq_model_info info;

typedef struct seen {
    int32_t tok[N_CTX];
    int n, stop_after, pieces_ok;
    int n_reused;
} seen;

static int on_prompt(void *user, int n_reused) {
    ((seen *)user)->n_reused = n_reused;
    return 0;
}

static int on_token(void *user, int32_t tok, const char *piece, size_t len) {
    seen *s = user;
    char want[256];
    size_t n = 0;
    subq_error err;
    int32_t prev = s->n ? s->tok[s->n - 1] : -2;
    if (prev != -2 && (subq_token_to_piece(model, prev, tok, want, sizeof want, &n, &err) || n != len ||
                       memcmp(want, piece, len)))
        s->pieces_ok = 0;
    if (s->n < N_CTX) s->tok[s->n++] = tok;
    return s->stop_after && s->n == s->stop_after;
}

static subq_context *new_ctx(void) {
    subq_context_params p = subq_context_default_params();
    p.n_ctx = N_CTX;
    p.n_threads = 1;
    subq_context *c = NULL;
    subq_error err;
    if (subq_context_new(model, &p, &c, &err)) {
        fprintf(stderr, "FAIL context: %s\n", err.msg);
        exit(1);
    }
    return c;
}

static subq_status run(subq_context *c, const int32_t *prompt, int n_prompt, int n_predict, int32_t end, int stop_after,
                       seen *s, subq_generate_result *res, subq_error *err) {
    subq_generate_params p = subq_generate_default_params();
    p.n_predict = n_predict;
    p.sampler.temp = 0;
    p.end_tokens[0] = end;
    p.on_prompt = on_prompt;
    p.on_token = on_token;
    memset(s, 0, sizeof *s);
    s->stop_after = stop_after;
    s->pieces_ok = 1;
    s->n_reused = -1;
    p.user = s;
    return subq_generate(c, prompt, n_prompt, &p, res, err);
}

static int32_t argmax(const float *x, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

int main(void) {
    char path[1024];
    subq_error err;
    if (subq_model_load(test_shared_path("models/stories260K.gguf", path, sizeof path), &model, &err)) {
        fprintf(stderr, "FAIL load: %s\n", err.msg);
        return 1;
    }
    subq_model_get_info(model, &info);
    int32_t prompt[N_PROMPT + 4];
    for (int i = 0; i < N_PROMPT + 4; i++) prompt[i] = i ? (int32_t)(1 + (i * 7919 + 13) % (info.n_vocab - 1)) : 1;

    /* reference: decode the prompt, then argmax and decode one at a time */
    int32_t want[N_GEN];
    float *logits = malloc((size_t)info.n_vocab * sizeof(float));
    subq_context *ref = new_ctx();
    CHECK(!subq_decode(ref, prompt, N_PROMPT, logits, 0, &err), "reference prompt: %s", err.msg);
    for (int i = 0; i < N_GEN; i++) {
        want[i] = argmax(logits, info.n_vocab);
        if (i + 1 < N_GEN) CHECK(!subq_decode(ref, &want[i], 1, logits, 0, &err), "reference decode: %s", err.msg);
    }

    subq_context *c = new_ctx();
    seen s;
    subq_generate_result res;
    CHECK(!run(c, prompt, N_PROMPT, N_GEN, -1, 0, &s, &res, &err), "generate: %s", err.msg);
    CHECK(res.finish == SUBQ_FINISH_LENGTH && res.n_generated == N_GEN && s.n == N_GEN, "finish %d after %d",
          res.finish, res.n_generated);
    CHECK(!memcmp(s.tok, want, sizeof want), "greedy tokens differ from the decode+argmax loop");
    CHECK(s.pieces_ok, "a piece differs from subq_token_to_piece");
    CHECK(res.n_reused == 0 && s.n_reused == 0, "a fresh context reused %d", res.n_reused);
    CHECK(subq_context_n_past(c) == N_PROMPT + N_GEN - 1, "cache holds %d tokens", subq_context_n_past(c));

    /* the cache holds the prompt and more: all of it but the last token is
     * kept (its logits are not the ones cached), and the text is the same */
    CHECK(!run(c, prompt, N_PROMPT, N_GEN, -1, 0, &s, &res, &err), "again: %s", err.msg);
    CHECK(res.n_reused == N_PROMPT - 1 && !memcmp(s.tok, want, sizeof want), "again: reused %d", res.n_reused);
    /* exactly the prompt with its logits: nothing decoded */
    subq_context_reset(c);
    CHECK(!subq_decode(c, prompt, N_PROMPT, logits, 0, &err), "prefill: %s", err.msg);
    CHECK(!run(c, prompt, N_PROMPT, 1, -1, 0, &s, &res, &err) && res.n_reused == N_PROMPT && s.tok[0] == want[0],
          "exact prompt: reused %d", res.n_reused);
    /* a longer prompt keeps the shared prefix */
    CHECK(!run(c, prompt, N_PROMPT + 4, 3, -1, 0, &s, &res, &err) && res.n_reused == N_PROMPT, "longer: reused %d",
          res.n_reused);

    /* stops */
    subq_context_reset(c);
    CHECK(!run(c, prompt, N_PROMPT, N_GEN, want[5], 0, &s, &res, &err), "end token: %s", err.msg);
    int first = 0;
    while (want[first] != want[5]) first++;
    CHECK(res.finish == SUBQ_FINISH_END_TOKEN && res.n_generated == first && s.n == first,
          "end token: finish %d after %d (want %d)", res.finish, res.n_generated, first);
    CHECK(!run(c, prompt, N_PROMPT, N_GEN, -1, 3, &s, &res, &err), "callback stop: %s", err.msg);
    CHECK(res.finish == SUBQ_FINISH_CALLER && res.n_generated == 3, "callback stop: finish %d after %d", res.finish,
          res.n_generated);
    CHECK(!run(c, prompt, N_PROMPT, 0, -1, 0, &s, &res, &err) && res.finish == SUBQ_FINISH_LENGTH && s.n == 0,
          "n_predict 0: %d tokens", s.n);
    CHECK(!run(c, prompt, N_PROMPT, 1000, -1, 0, &s, &res, &err), "full: %s", err.msg);
    CHECK(res.finish == SUBQ_FINISH_CONTEXT_FULL && subq_context_n_past(c) == N_CTX &&
              res.n_generated == N_CTX - N_PROMPT + 1,
          "full: finish %d, %d generated, %d cached", res.finish, res.n_generated, subq_context_n_past(c));

    /* refusals */
    CHECK(run(c, prompt, 0, 4, -1, 0, &s, &res, &err) == SUBQ_ERR_ARG, "an empty prompt is accepted");
    int32_t *huge = calloc(N_CTX + 1, sizeof *huge);
    CHECK(run(c, huge, N_CTX + 1, 4, -1, 0, &s, &res, &err) == SUBQ_ERR_RANGE && strstr(err.msg, "context"),
          "a prompt beyond the context: %s", err.msg);
    free(huge);
    subq_generate_params bad = subq_generate_default_params();
    bad.sampler.top_p = 2;
    CHECK(subq_generate(c, prompt, N_PROMPT, &bad, &res, &err) == SUBQ_ERR_ARG && subq_context_n_past(c) == 0,
          "a bad sampler: %d cached", subq_context_n_past(c));

    free(logits);
    subq_context_free(ref);
    subq_context_free(c);
    subq_model_free(model);
    return test_summary();
}
