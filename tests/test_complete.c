/* Completion in the sparse stage (src/complete/completion.c) on stories260K
 * with random completion maps on layers 1-4 and the oracle selector:
 *   - with completion switched off on every head (head-selective flags all
 *     0) the logits equal the selection-only sparse stage;
 *   - feeding the tokens one at a time (decode: the completion cache grows as
 *     tokens leave the tail) gives the logits of one teacher-forced batch,
 *     also across two packed documents (the cache restarts per document);
 *   - with K covering every slot, hybrid equals full attention (nothing is
 *     left to complete) and the completion mass share is 0, while with a
 *     small K the share is positive;
 *   - the map file round-trips, is refused for another model, and
 *     per-head entropies added by phi_maps_annotate_entropy come back while
 *     the rest of the file is kept. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sparse/attn_plan.h"
#include "base/rng.h"
#include "complete/phi_maps.h"
#include "model/context.h"
#include "lab/synth.h"
#include "quant/types.h"
#include "test_util.h"

#define N_TOK 300

static double max_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        m = d > m ? d : m;
    }
    return m;
}

static int run(subq_context *c, const int32_t *tok, const int32_t *pos, const int32_t *seg, int n, int one_by_one,
               float *logits) {
    subq_error err = {0};
    subq_context_reset(c);
    const int V = c->model->hp.n_vocab;
    if (!one_by_one) {
        if (context_forward(c, tok, n, pos, seg, logits, 1, &err)) {
            fprintf(stderr, "forward: %s\n", err.msg);
            return 0;
        }
        return 1;
    }
    for (int t = 0; t < n; t++)
        if (context_forward(c, tok + t, 1, pos + t, seg + t, logits + (size_t)t * V, 1, &err)) {
            fprintf(stderr, "forward: %s\n", err.msg);
            return 0;
        }
    return 1;
}

/* oracle top-k on layers 1-4, every position sparse; completion from maps (or none) */
static int set_plan(subq_context *c, int k, const phi_maps *maps, const unsigned char *heads) {
    subq_error err = {0};
    attn_plan plan;
    attn_plan_default(&plan);
    plan.plan.layers = "1-4";
    plan.plan.top_k = k;
    plan.plan.sparse_prefill = SUBQ_PREFILL_TOKENWISE;
    plan.complete = maps;
    plan.complete_heads = heads;
    plan.plan.selector = SUBQ_SELECT_ORACLE;
    subq_context_reset(c);
    context_clear_plan(c);
    if (context_set_plan(c, &plan, NULL, &err)) {
        fprintf(stderr, "plan: %s\n", err.msg);
        return 0;
    }
    return 1;
}

/* completion share summed over layers 1-4 */
static double share_of(subq_context *c, int64_t *n) {
    double s = 0;
    *n = 0;
    for (int l = 1; l <= 4; l++) {
        const sparse_metrics *m = attn_stage_metrics(c->stages[l]);
        s += m->share_sum;
        *n += m->n_share;
    }
    return s;
}

int main(void) {
    char path[1024];
    subq_error err = {0};
    subq_model *m;
    if (subq_model_load(test_shared_path("models/stories260K.gguf", path, sizeof path), &m, &err)) {
        CHECK(0, "load: %s", err.msg);
        return test_summary();
    }
    subq_context_params cp = subq_context_default_params();
    cp.n_ctx = 512;
    cp.n_threads = 1;
    subq_context *c;
    if (subq_context_new(m, &cp, &c, &err)) {
        CHECK(0, "context: %s", err.msg);
        subq_model_free(m);
        return test_summary();
    }
    const model_hparams *hp = &m->hp;
    const int V = hp->n_vocab;
    /* two packed documents: positions restart, segments differ */
    int32_t tok[N_TOK], pos[N_TOK], seg[N_TOK];
    uint64_t rng = rng_seed(3);
    for (int t = 0; t < N_TOK; t++) {
        const int second = t >= 180;
        pos[t] = second ? t - 180 : t;
        seg[t] = second;
        tok[t] = pos[t] == 0 ? 1 : 3 + (int)(rng_uniform(&rng) * (V - 3));
    }
    phi_dims d = {.head_dim = hp->head_dim, .d_emb = 16, .d_hidden = 16, .d_phi = 16, .n_head = hp->n_head,
                  .n_head_kv = hp->n_head_kv};
    int layers[4] = {1, 2, 3, 4};
    phi_maps *maps;
    if (phi_maps_new(&d, hp->n_layer, layers, 4, model_fingerprint(m), &maps, &err)) {
        CHECK(0, "maps: %s", err.msg);
        return test_summary();
    }
    phi_maps_init(maps, 0.5f, &rng);
    float *ref = malloc((size_t)N_TOK * V * sizeof(float)), *got = malloc((size_t)N_TOK * V * sizeof(float));

    /* completion off on every head == selection only */
    unsigned char *none = calloc((size_t)hp->n_layer * hp->n_head, 1);
    int ok = set_plan(c, 16, NULL, NULL) && run(c, tok, pos, seg, N_TOK, 0, ref) &&
             set_plan(c, 16, maps, none) && run(c, tok, pos, seg, N_TOK, 0, got);
    CHECK(ok, "runs");
    double dsel = max_diff(ref, got, (size_t)N_TOK * V);
    CHECK(dsel < 1e-4, "completion on no head vs selection only: max logit diff %.3g", dsel);
    free(none);

    /* hybrid: one-by-one decode == one batch */
    float *sel = malloc((size_t)N_TOK * V * sizeof(float));
    memcpy(sel, ref, (size_t)N_TOK * V * sizeof(float));
    ok = set_plan(c, 16, maps, NULL) && run(c, tok, pos, seg, N_TOK, 0, ref) && run(c, tok, pos, seg, N_TOK, 1, got);
    CHECK(ok, "hybrid runs");
    double ddec = max_diff(ref, got, (size_t)N_TOK * V);
    CHECK(ddec < 1e-3, "hybrid decode one token at a time vs one batch: max logit diff %.3g", ddec);
    int64_t nh;
    double share = share_of(c, &nh);
    CHECK(nh > 0 && share / nh > 0, "completion mass share with K = 16: %g over %lld heads", nh ? share / nh : 0,
          (long long)nh);
    CHECK(max_diff(ref, sel, (size_t)N_TOK * V) > 1e-3, "the completion changes the logits");

    /* K covering everything: hybrid == full attention, share 0 */
    context_clear_plan(c);
    ok = run(c, tok, pos, seg, N_TOK, 0, ref) && set_plan(c, 512, maps, NULL) && run(c, tok, pos, seg, N_TOK, 0, got);
    double dfull = max_diff(ref, got, (size_t)N_TOK * V);
    CHECK(ok && dfull < 1e-3, "hybrid with K >= context vs full attention: max logit diff %.3g", dfull);
    share = share_of(c, &nh);
    CHECK(share == 0.0, "nothing to complete when everything is retrieved (share sum %g)", share);
    printf("max logit diffs: no heads vs selection %.3g, decode vs batch %.3g, K=all vs full %.3g\n", dsel, ddec, dfull);

    /* file: save, load, refuse another model, annotate */
    const char *tmp = getenv("SUBQ_TMP");
    char file[1024], other_path[1024];
    snprintf(file, sizeof file, "%s/complete_maps.gguf", tmp ? tmp : ".");
    snprintf(other_path, sizeof other_path, "%s/complete_other.gguf", tmp ? tmp : ".");
    phi_maps *back = NULL;
    ok = !phi_maps_save(maps, file, &err) && !phi_maps_load(file, m, &back, &err);
    CHECK(ok && back->n_sel == 4 && !memcmp(back->data, maps->data, 4 * maps->layer_size * sizeof(float)) &&
              back->h_mid == NULL,
          "maps round trip: %s", err.msg);
    subq_model *other = NULL;
    ok = !synth_write_model(synth_find_shape("stories260k"), GGML_TYPE_F32, 99, other_path, &err) &&
         !subq_model_load(other_path, &other, &err);
    CHECK(ok, "other model: %s", err.msg);
    phi_maps *bad = NULL;
    subq_status st = ok ? phi_maps_load(file, other, &bad, &err) : SUBQ_OK;
    CHECK(st == SUBQ_ERR_MISMATCH && !bad && strstr(err.msg, "another model"), "maps for another model refused: %s",
          err.msg);
    float h_mid[4 * 8];
    for (int i = 0; i < 4 * hp->n_head; i++) h_mid[i] = (float)i / 100;
    phi_maps_free(back);
    back = NULL;
    ok = hp->n_head <= 8 && !phi_maps_annotate_entropy(file, h_mid, &err) && !phi_maps_load(file, m, &back, &err);
    CHECK(ok && back->h_mid && !memcmp(back->h_mid, h_mid, 4 * hp->n_head * sizeof(float)) &&
              !memcmp(back->data, maps->data, 4 * maps->layer_size * sizeof(float)) && back->n_tail == maps->n_tail,
          "annotated maps keep their weights and return the entropies: %s", err.msg);
    phi_maps_free(back);
    subq_model_free(other);

    free(ref);
    free(got);
    free(sel);
    phi_maps_free(maps);
    subq_context_free(c);
    subq_model_free(m);
    return test_summary();
}
