/* A selector query that runs out of memory must fail, never pass for "no
 * candidates" (which would quietly turn the query into window attention):
 * with each selector's test hook (every allocation a query makes fails),
 * the query returns a negative count on each allocation path (exact serial
 * and threaded scans, alone and as a group of queries, hnsw / faiss small-set scans and graph searches, quest,
 * oracle) and works again once allocations succeed; and the forward pass of
 * a sparse context returns SUBQ_ERR_NOMEM with a one-line message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sparse/attn_plan.h"
#include "base/rng.h"
#include "kv/kv_cache.h"
#include "model/context.h"
#include "select/selector.h"
#include "test_util.h"

enum { N_MAX = 9000, D = 16, N_HEAD = 4, N_HEAD_KV = 2, HD = 8, K = 16 };

static void check_queries(const kv_cache *kv, const float *ks, const float *q_s, const float *q_n) {
    /* 200 keys: exact's serial scan, the ANN selectors' small-set scan;
     * 9000: exact's threaded scan (>= 8192 keys), the ANN graph searches */
    const int ns[2] = {200, N_MAX};
    for (int kind = 0; kind < SUBQ_SELECT_COUNT; kind++) {
        if (!selector_kind_available(kind)) continue;
        for (int c = 0; c < 2; c++) {
            const int n = ns[c];
            const char *name = selector_kind_name(kind);
            selector_params p;
            selector_params_default(&p, kind, D);
            p.n_threads = 2;
            selector_env env = {.kv = kv, .layer = 0, .n_head = N_HEAD, .n_head_kv = N_HEAD_KV, .head_dim = HD};
            selector *s = NULL;
            subq_error err = {0};
            if (selector_new(&p, &env, &s, &err) || selector_append(s, ks, n, 0, &err)) {
                CHECK(0, "%s: %s", name, err.msg);
                selector_free(s);
                continue;
            }
            select_mask all = {.n_slots = n};
            int32_t out[K];
            s->fail_alloc = 1;
            int got = selector_query(s, q_s, q_n, K, &all, out);
            if (kind == SUBQ_SELECT_WINDOW) /* the one selector whose queries allocate nothing */
                CHECK(got == K, "window with %d keys: %d of %d slots", n, got, K);
            else
                CHECK(got < 0, "%s with %d keys: a query whose allocations fail returned %d slots, not an error",
                      name, n, got);
            s->fail_alloc = 0;
            got = selector_query(s, q_s, q_n, K, &all, out);
            CHECK(got == K, "%s with %d keys: %d of %d slots once allocations succeed", name, n, got, K);
            /* two queries under one mask (a KV head's query search heads):
             * exact's group scan (the other kinds query one by one, above) */
            if (kind != SUBQ_SELECT_EXACT) {
                selector_free(s);
                continue;
            }
            float qg[2 * D];
            int32_t outg[2 * K];
            int gotg[2];
            memcpy(qg, q_s, D * sizeof(float));
            memcpy(qg + D, q_s, D * sizeof(float));
            s->fail_alloc = 1;
            int rc = selector_query_group(s, 2, qg, q_n, K, &all, outg, gotg);
            CHECK(rc < 0, "%s with %d keys: a group query whose allocations fail returned %d", name, n, rc);
            s->fail_alloc = 0;
            rc = selector_query_group(s, 2, qg, q_n, K, &all, outg, gotg);
            CHECK(rc == 0 && gotg[0] == K && gotg[1] == K, "%s with %d keys: a group query once allocations succeed",
                  name, n);
            selector_free(s);
        }
    }
}

/* stories260K with oracle selection on layers 1-4: a failing query of layer 1
 * fails the forward pass */
static void check_forward(void) {
    char path[1024];
    subq_error err = {0};
    subq_model *m;
    if (subq_model_load(test_shared_path("models/stories260K.gguf", path, sizeof path), &m, &err)) {
        CHECK(0, "load: %s", err.msg);
        return;
    }
    subq_context_params cp = subq_context_default_params();
    cp.n_ctx = 64;
    cp.n_threads = 1;
    subq_context *c;
    if (subq_context_new(m, &cp, &c, &err)) {
        CHECK(0, "context: %s", err.msg);
        subq_model_free(m);
        return;
    }
    attn_plan plan;
    attn_plan_default(&plan);
    plan.plan.layers = "1-4";
    plan.plan.top_k = 8;
    plan.plan.sparse_prefill =
        SUBQ_PREFILL_DENSE; /* the prompt runs no queries: the decode step's query is the first */
    plan.plan.selector = SUBQ_SELECT_ORACLE;
    CHECK(!context_set_plan(c, &plan, NULL, &err), "plan: %s", err.msg);
    int32_t tok[40];
    for (int i = 0; i < 40; i++) tok[i] = 1 + (i * 37) % 500;
    float *logits = malloc((size_t)m->hp.n_vocab * sizeof(float));
    CHECK(!context_forward(c, tok, 39, NULL, NULL, NULL, 0, &err), "prefill: %s", err.msg);
    selector *s = attn_sparse_selector(c->stages[1]);
    CHECK(s != NULL, "layer 1 has no selector");
    if (s) s->fail_alloc = 1;
    subq_status rc = context_forward(c, tok + 39, 1, NULL, NULL, logits, 0, &err);
    CHECK(rc == SUBQ_ERR_NOMEM && !strchr(err.msg, '\n') && strstr(err.msg, "oracle"),
          "decode with a failing selector returned %d (%s), want SUBQ_ERR_NOMEM naming the selector", (int)rc,
          rc ? err.msg : "ok");
    if (s) s->fail_alloc = 0;
    subq_context_reset(c);
    CHECK(!context_forward(c, tok, 39, NULL, NULL, NULL, 0, &err) &&
              !context_forward(c, tok + 39, 1, NULL, NULL, logits, 0, &err),
          "decode once allocations succeed: %s", err.msg);
    free(logits);
    subq_context_free(c);
    subq_model_free(m);
}

int main(void) {
    uint64_t rng = rng_seed(77);
    subq_error err = {0};
    kv_cache kv;
    CHECK(kv_cache_init(&kv, 1, N_HEAD_KV, HD, N_MAX, SUBQ_KV_F32, &err) == SUBQ_OK, "kv: %s", err.msg);
    float *kn = malloc((size_t)N_MAX * N_HEAD_KV * HD * sizeof(float));
    float *ks = malloc((size_t)N_MAX * D * sizeof(float));
    float q_s[D], q_n[N_HEAD * HD];
    for (size_t i = 0; i < (size_t)N_MAX * N_HEAD_KV * HD; i++) kn[i] = rng_normal(&rng);
    for (size_t i = 0; i < (size_t)N_MAX * D; i++) ks[i] = rng_normal(&rng);
    for (int i = 0; i < D; i++) q_s[i] = rng_normal(&rng);
    for (int i = 0; i < N_HEAD * HD; i++) q_n[i] = rng_normal(&rng);
    kv_cache_store(&kv, 0, 0, N_MAX, kn, kn, NULL);
    kv.n_used = N_MAX;
    check_queries(&kv, ks, q_s, q_n);
    check_forward();
    free(kn);
    free(ks);
    kv_cache_free(&kv);
    return test_summary();
}
