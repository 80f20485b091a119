/* Allocation failures during evaluation surface as errors, never as figures
 * computed from part of the data: this executable is linked with
 * -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc (CMakeLists.txt), so the
 * library's N-th allocation can be made to fail. For every N:
 *   - a sparse forward pass with retrieval metrics on (stories260K, oracle,
 *     layers 1-4) either returns SUBQ_ERR_NOMEM or measures every query
 *     exactly as without the failure (a dropped query used to skew mass and
 *     recall silently);
 *   - eval_run on one small window (KL, per-layer runs, static index, the
 *     bootstrap intervals) either fails with a message or returns exactly the
 *     figures of the run without the failure. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sparse/attn_plan.h"
#include "eval/eval_run.h"
#include "model/context.h"
#include "test_util.h"

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);

static long countdown = -1; /* allocations left before the one that fails; -1: none fails */
static long n_allocs;
static int fired;           /* the armed failure happened */

/* 1 if this allocation is the one to fail */
static int fail_now(void) {
    n_allocs++;
    if (countdown < 0) return 0;
    if (countdown-- > 0) return 0;
    fired = 1;
    return 1; /* countdown is now -1: one failure per arming */
}

void *__wrap_malloc(size_t n) { return fail_now() ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t n, size_t size) { return fail_now() ? NULL : __real_calloc(n, size); }
void *__wrap_realloc(void *p, size_t n) { return fail_now() ? NULL : __real_realloc(p, n); }

static subq_model *model;

#define N_TOK 96
#define N_LAYER_MAX 16

static subq_status sparse_forward_metrics(subq_context *c, const int32_t *tok, long fail_at, sparse_metrics *out,
                                          subq_error *err) {
    attn_plan plan;
    attn_plan_default(&plan);
    plan.plan.selector = SUBQ_SELECT_ORACLE;
    plan.plan.layers = "1-4";
    plan.plan.top_k = 8;
    plan.plan.sparse_prefill = SUBQ_PREFILL_TOKENWISE;
    subq_context_reset(c);
    context_clear_plan(c);
    subq_status s = context_set_plan(c, &plan, NULL, err);
    for (int l = 0; !s && l < model->hp.n_layer; l++) s = attn_stage_enable_metrics(c->stages[l], err);
    if (s) return s;
    countdown = fail_at;
    fired = 0;
    s = context_forward(c, tok, N_TOK, NULL, NULL, NULL, 0, err);
    countdown = -1;
    for (int l = 0; l < model->hp.n_layer; l++) {
        const sparse_metrics *m = attn_stage_metrics(c->stages[l]);
        memset(&out[l], 0, sizeof out[l]);
        if (m) out[l] = *m;
    }
    return s;
}

static void test_forward(subq_context *c) {
    int32_t tok[N_TOK];
    for (int t = 0; t < N_TOK; t++) tok[t] = t == 0 ? 1 : 3 + (t * 37) % 500;
    sparse_metrics ref[N_LAYER_MAX], got[N_LAYER_MAX];
    subq_error err = {0};
    CHECK(!sparse_forward_metrics(c, tok, -1, ref, &err), "reference forward: %s", err.msg);
    int n_fail = 0;
    for (long at = 0;; at++) {
        subq_status s = sparse_forward_metrics(c, tok, at, got, &err);
        if (s) {
            CHECK(s == SUBQ_ERR_NOMEM, "allocation %ld failed: status %d (%s), want out of memory", at, s, err.msg);
            n_fail++;
            continue;
        }
        /* succeeded: the failure either did not happen or was recovered from;
         * either way every query is measured exactly once */
        int same = 1;
        for (int l = 0; l < model->hp.n_layer; l++)
            same &= got[l].n_queries == ref[l].n_queries && got[l].n_seed == ref[l].n_seed &&
                    got[l].mass_sum == ref[l].mass_sum && got[l].recall_sum == ref[l].recall_sum;
        CHECK(same, "allocation %ld failed and the forward succeeded with other metrics (%lld queries on layer 1, "
              "want %lld)", at, (long long)got[1].n_queries, (long long)ref[1].n_queries);
        if (!fired) break; /* past the last allocation of the forward */
    }
    printf("sparse forward: %d injected failures reported, then success\n", n_fail);
    CHECK(n_fail > 0, "no allocation happened inside the forward pass");
}

static int same_result(const subq_eval_result *a, const subq_eval_result *b) {
    if (a->n_methods != b->n_methods || a->n_scored != b->n_scored || a->full_ppl != b->full_ppl) return 0;
    for (int i = 0; i < a->n_methods; i++) {
        const subq_eval_method *x = &a->methods[i], *y = &b->methods[i];
        if (x->ppl != y->ppl || x->kl != y->kl || x->kl_lo != y->kl_lo || x->kl_hi != y->kl_hi ||
            x->nll_diff_lo != y->nll_diff_lo || x->nll_diff_hi != y->nll_diff_hi || x->top1 != y->top1 ||
            x->mass != y->mass || x->recall != y->recall || x->mass_seed != y->mass_seed)
            return 0;
        for (int l = 0; l < a->n_layer; l++)
            if (!(x->layer_kl[l] == y->layer_kl[l] || (isnan(x->layer_kl[l]) && isnan(y->layer_kl[l])))) return 0;
    }
    return a->stat.method == b->stat.method && a->stat.ppl_static == b->stat.ppl_static;
}

static void test_eval_run(subq_context *c, const char *text_path) {
    eval_config cfg;
    eval_config_default(&cfg);
    const char *files[1] = {text_path};
    const int kinds[1] = {SUBQ_SELECT_ORACLE}, ks[1] = {4};
    cfg.eval_files = files, cfg.n_eval_files = 1, cfg.ctx = 48, cfg.max_windows = 2;
    cfg.selectors = kinds, cfg.n_selectors = 1, cfg.ks = ks, cfg.n_k = 1;
    cfg.plan.n_sink = 2, cfg.plan.n_tail = 4, cfg.plan.layers = "2,3", cfg.per_layer = 1, cfg.n_resamples = 50;
    subq_error err = {0};
    subq_eval_result *ref = NULL, *r = NULL;
    const long a0 = n_allocs;
    if (eval_run(c, &cfg, NULL, NULL, &ref, &err)) {
        CHECK(0, "reference eval: %s", err.msg);
        return;
    }
    const long n = n_allocs - a0;
    CHECK(ref->n_windows == 2 && ref->n_methods == 1, "%d windows, %d methods", ref->n_windows, ref->n_methods);
    int n_fail = 0;
    for (long at = 0; at < n; at++) {
        err.msg[0] = '\0';
        countdown = at;
        subq_status s = eval_run(c, &cfg, NULL, NULL, &r, &err);
        countdown = -1;
        if (s) {
            CHECK(r == NULL && err.msg[0], "allocation %ld: status %d without a message or with a result", at, s);
            n_fail++;
        } else {
            CHECK(same_result(r, ref), "allocation %ld failed and eval succeeded with other figures", at);
            eval_result_free(r);
        }
        r = NULL;
    }
    printf("eval_run: %ld allocations, %d injected failures reported\n", n, n_fail);
    CHECK(n_fail > n / 2, "only %d of %ld failures were reported", n_fail, n);
    eval_result_free(ref);
}

int main(void) {
    char path[1024];
    subq_error err = {0};
    if (subq_model_load(test_shared_path("models/stories260K.gguf", path, sizeof path), &model, &err)) {
        CHECK(0, "load: %s", err.msg);
        return test_summary();
    }
    subq_context_params cp = subq_context_default_params();
    cp.n_ctx = N_TOK;
    cp.n_threads = 1;
    subq_context *c;
    if (subq_context_new(model, &cp, &c, &err)) {
        CHECK(0, "context: %s", err.msg);
        return test_summary();
    }
    test_forward(c);
    const char *tmp = getenv("SUBQ_TMP");
    char text_path[1024];
    snprintf(text_path, sizeof text_path, "%s/test_eval_nomem.txt", tmp ? tmp : "/tmp");
    FILE *f = fopen(text_path, "w");
    CHECK(f && fputs("Once upon a time, there was a little dog named Max. Max liked to run in the park with his "
                     "friend Sue. One day they found a big red ball under a tree and played until the sun went "
                     "down. Then they went home.", f) >= 0 && !fclose(f),
          "cannot write %s", text_path);
    test_eval_run(c, text_path);
    subq_context_free(c);
    subq_model_free(model);
    return test_summary();
}
