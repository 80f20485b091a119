/* Retrieve-then-attend on the real stories260K model:
 *  - with K >= every eligible key, each selector's logits equal full attention;
 *  - decode mode (one token at a time through the KV cache) equals prefill
 *    mode (teacher forcing) when the candidate sets are the same, also for
 *    graph indexes searched approximately (each key inserted in slot order
 *    after its own query: by the step's late inserts in decode, right
 *    after the query in teacher forcing), and prefill in batches that
 *    insert their keys after every layer, across the threads, gives the
 *    same graphs as inserts one by one;
 *  - candidates never include a future key, another document's key, a sink
 *    or a tail slot (block-causal packing with restarting positions);
 *  - with no sinks and no tail, a query attends exactly the K retrieved keys
 *    (its own among the candidates), and with K >= n equals full attention;
 *  - per-layer top-K (topk_layers) layers are exact selections of their K
 *    whatever the plan's selector and layer list say;
 *  - batched sparse prefill (SUBQ_PREFILL_SPARSE, batches of BATCH tokens):
 *    with K >= every eligible key it equals full attention (sinks, window and
 *    retrieved slots cover every key exactly once); with K = 8 its
 *    candidates lie before their batch, in the query's document, outside the
 *    sinks and the query's window, and the logits differ from full (Quest
 *    with head-mean pages: per-head selectors prefill token by token);
 *  - a search space whose last dims rotate by position (search_rope.h): the
 *    exact selector's candidates are the brute-force top-K of
 *    cos(R(p_t) W_Qs h_t, R(p_j) W_Ks h_j), computed here in double from the
 *    captured h at the packed positions, in prefill, decode and batched
 *    sparse prefill (among the slots before each batch); the int8 and int4
 *    scans (codes of the rotated keys, re-ranked) and HNSW choose the same
 *    sets on these 160 keys. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "select/selector.h"
#include "sparse/attn_plan.h"
#include "model/context.h"
#include "test_util.h"

#define N_TOK 160
#define BATCH 32

static subq_model *model;
static int32_t toks[N_TOK], pos[N_TOK], seg[N_TOK];
static float *layer2_h; /* when set, run() keeps layer 2's normed hidden states here: [N_TOK][n_embd] */

static void keep_layer2_h(void *user, int layer, int n, int slot0, const float *h_norm, const float *q, const float *k,
                          const float *v) {
    (void)user, (void)q, (void)k, (void)v;
    const int d = model->hp.n_embd;
    if (layer == 2) memcpy(layer2_h + (size_t)slot0 * d, h_norm, (size_t)n * d * sizeof(float));
}

static double max_rel(const float *a, const float *b, size_t n) {
    double mx = 0, ref = 0;
    for (size_t i = 0; i < n; i++) {
        mx = fmax(mx, fabs((double)a[i] - b[i]));
        ref = fmax(ref, fabs((double)b[i]));
    }
    return mx / ref;
}

/* All logits of the sequence (packed into two documents when `packed`). */
/* step: tokens per forward call (1: decode mode; N_TOK: one batch). */
static subq_status run(const attn_plan *plan, const search_proj *proj, int packed, int step, float *logits,
                       int32_t *cand_out, subq_error *err) {
    subq_context_params cp = subq_context_default_params();
    cp.n_ctx = N_TOK;
    cp.n_threads = 2;
    subq_context *c;
    subq_status s = subq_context_new(model, &cp, &c, err);
    if (s) return s;
    if (plan) s = context_set_plan(c, plan, proj, err);
    if (layer2_h) {
        c->capture = keep_layer2_h;
        c->capture_last = -1;
    }
    int V = model->hp.n_vocab;
    for (int t = 0; !s && t < N_TOK; t += step) {
        int n = t + step < N_TOK ? step : N_TOK - t;
        s = context_forward(c, toks + t, n, packed ? pos + t : NULL, packed ? seg + t : NULL, logits + (size_t)t * V, 1,
                            err);
        if (!s && cand_out && plan) { /* record layer 2's candidates */
            const sparse_record *r = attn_sparse_record(c->stages[2]);
            memcpy(cand_out + (size_t)t * plan->plan.top_k, r->cand, (size_t)n * plan->plan.top_k * sizeof(int32_t));
        }
    }
    subq_context_free(c);
    return s;
}

/* R(p) x for the last n_rot dims of a search vector of width ds, in double */
static void rotate_ref(const search_rope *r, int ds, int p, double *x) {
    for (int i = 0; i < r->n_rot / 2; i++) {
        const int a = ds - r->n_rot + 2 * i;
        const double th = p * r->scale * pow(r->base, -2.0 * i / r->n_rot), x0 = x[a], x1 = x[a + 1];
        x[a] = x0 * cos(th) - x1 * sin(th);
        x[a + 1] = x0 * sin(th) + x1 * cos(th);
    }
}

/* Layer 2's rotated search vector of slot t (q: W_Qs, else W_Ks), unit length */
static void search_vec_ref(const search_proj *p, int t, int q, double *out) {
    const int d = p->n_embd, ds = p->d_search;
    const float *w = q ? p->wq[2] : p->wk[2], *h = layer2_h + (size_t)t * d;
    double nrm = 0;
    for (int a = 0; a < ds; a++) {
        out[a] = 0;
        for (int i = 0; i < d; i++) out[a] += (double)w[(size_t)a * d + i] * h[i];
    }
    rotate_ref(&p->rope, ds, pos[t], out);
    for (int a = 0; a < ds; a++) nrm += out[a] * out[a];
    for (int a = 0; a < ds; a++) out[a] /= sqrt(nrm);
}

/* Graph indexes fed by batches of 40 that no query of the batch searches
 * (plan->plan.sparse_prefill: dense or sparse prefill) get the batch's keys
 * after its layers, all layers across 3 threads. Layer 2's stored keys
 * must be its search keys (search_vec_ref of the captured hidden states,
 * within 1e-4), and each layer's index must answer 32 random queries (K =
 * 8, every slot eligible) as one rebuilt from its stored keys inserted one
 * by one in slot order does (the same keys and seed make the same graph).
 * Returns the count of wrong keys and differing answers, or -1 on failure. */
static int batched_graph_misses(const attn_plan *plan, const search_proj *proj, subq_error *err) {
    subq_context_params cp = subq_context_default_params();
    cp.n_ctx = N_TOK;
    cp.n_threads = 3;
    subq_context *c;
    if (subq_context_new(model, &cp, &c, err)) return -1;
    const int ds = proj->d_search;
    float *keys = malloc((size_t)N_TOK * ds * sizeof(float)), *q = malloc((size_t)ds * sizeof(float));
    double *ref = malloc((size_t)ds * sizeof(double));
    layer2_h = malloc((size_t)N_TOK * model->hp.n_embd * sizeof(float));
    c->capture = keep_layer2_h;
    c->capture_last = -1;
    subq_status s = !keys || !q || !ref || !layer2_h ? SUBQ_ERR_NOMEM : context_set_plan(c, plan, proj, err);
    for (int t = 0; !s && t < N_TOK; t += 40) s = context_forward(c, toks + t, 40, pos + t, seg + t, NULL, 0, err);
    int misses = s ? -1 : 0, n_graphs = 0;
    for (int l = 0; misses >= 0 && l < model->hp.n_layer; l++) {
        selector *a = attn_sparse_selector(c->stages[l]), *b = NULL;
        if (!a) continue;
        n_graphs++;
        if (selector_get_keys(a, N_TOK, keys, err) || selector_new(&a->params, NULL, &b, err) ||
            selector_put_keys(b, keys, N_TOK, 0, err)) {
            misses = -1;
        }
        for (int t = 0; misses >= 0 && l == 2 && t < N_TOK; t++) {
            search_vec_ref(proj, t, 0, ref);
            int bad = 0;
            for (int d = 0; d < ds; d++) bad |= fabs(keys[(size_t)t * ds + d] - ref[d]) > 1e-4;
            misses += bad;
        }
        uint64_t rng = rng_seed(11 + (uint64_t)l);
        for (int i = 0; misses >= 0 && i < 32; i++) {
            for (int d = 0; d < ds; d++) q[d] = rng_normal(&rng);
            const select_mask m = {.n_slots = N_TOK};
            int32_t oa[8], ob[8];
            const int na = selector_query(a, q, NULL, 8, &m, oa), nb = selector_query(b, q, NULL, 8, &m, ob);
            misses += na != nb || na < 0 || memcmp(oa, ob, (size_t)na * sizeof(int32_t)) != 0;
        }
        selector_free(b);
    }
    if (misses >= 0 && n_graphs != 4) {
        snprintf(err->msg, sizeof err->msg, "%d graph indexes, expected 4", n_graphs);
        misses = -1;
    }
    free(keys);
    free(q);
    free(ref);
    free(layer2_h);
    layer2_h = NULL;
    subq_context_free(c);
    return misses;
}

/* Queries whose K = 8 candidates (sinks 4, tail 16, packed documents) are
 * not a top-8 by cosine in the rotated space among the slots [doc0 + 4,
 * min(t - 16, lim(t))] (lim: the last slot before the query's batch of
 * `batch` tokens; every earlier slot when 0): each candidate must score at
 * least the 8th best score less 1e-4 (ties), none twice, and a query with 8
 * or fewer such slots gets all of them. */
static int rotated_topk_misses(const search_proj *p, const int32_t *cand, int batch) {
    const int ds = p->d_search;
    double *qv = malloc((size_t)ds * sizeof(double)), *kv = malloc((size_t)N_TOK * ds * sizeof(double));
    double sc[N_TOK];
    int misses = 0;
    for (int j = 0; j < N_TOK; j++) search_vec_ref(p, j, 0, kv + (size_t)j * ds);
    for (int t = 0; t < N_TOK; t++) {
        const int doc0 = t < 70 ? 0 : 70, lo = doc0 + 4;
        int hi = t - 16;
        if (batch > 0 && hi > t / batch * batch - 1) hi = t / batch * batch - 1;
        search_vec_ref(p, t, 1, qv);
        int n = 0;
        for (int j = lo; j <= hi; j++) {
            double c = 0;
            for (int a = 0; a < ds; a++) c += qv[a] * kv[(size_t)j * ds + a];
            sc[n++] = c;
        }
        double kth = -2; /* the 8th best score */
        if (n > 8) {
            double tmp[N_TOK];
            memcpy(tmp, sc, (size_t)n * sizeof(double));
            for (int r = 0; r < 8; r++) { /* selection: the r-th best to tmp[r] */
                int b = r;
                for (int i = r + 1; i < n; i++)
                    if (tmp[i] > tmp[b]) b = i;
                double x = tmp[r];
                tmp[r] = tmp[b], tmp[b] = x;
            }
            kth = tmp[7];
        }
        int got = 0, bad = 0;
        for (int i = 0; i < 8; i++) {
            const int j = cand[t * 8 + i];
            if (j < 0) continue;
            got++;
            for (int i2 = 0; i2 < i; i2++) bad |= cand[t * 8 + i2] == j;
            bad |= j < lo || j > hi || sc[j - lo] < kth - 1e-4;
        }
        misses += bad || got != (n < 8 ? (n > 0 ? n : 0) : 8);
    }
    free(qv);
    free(kv);
    return misses;
}

int main(void) {
    char path[1024];
    subq_error err = {0};
    if (subq_model_load(test_shared_path("models/stories260K.gguf", path, sizeof path), &model, &err)) {
        CHECK(0, "load: %s", err.msg);
        return test_summary();
    }
    const char *text = "Once upon a time, there was a little dog named Max. Max liked to run in the park with his "
                       "friend Sue. One day they found a big red ball under a tree and played until the sun went "
                       "down. Then they went home and ate soup with bread.";
    size_t n;
    int32_t buf[1024];
    subq_tokenize(model, text, strlen(text), 1, buf, 1024, &n, &err);
    for (int t = 0; t < N_TOK; t++) toks[t] = buf[t % n];
    /* two documents: 0..69 and 70..159, positions restart */
    for (int t = 0; t < N_TOK; t++) {
        seg[t] = t < 70 ? 0 : 1;
        pos[t] = t < 70 ? t : t - 70;
    }
    const int V = model->hp.n_vocab;
    float *full = malloc((size_t)N_TOK * V * sizeof(float)), *got = malloc((size_t)N_TOK * V * sizeof(float));
    float *full_packed = malloc((size_t)N_TOK * V * sizeof(float));
    int layers[] = {1, 2, 3, 4};
    search_proj *proj;
    if (search_proj_random(model, layers, 4, 16, 7, &proj, &err)) {
        CHECK(0, "random projections: %s", err.msg);
        return test_summary();
    }
    CHECK(!run(NULL, NULL, 0, N_TOK, full, NULL, &err), "full: %s", err.msg);
    CHECK(!run(NULL, NULL, 1, N_TOK, full_packed, NULL, &err), "full packed: %s", err.msg);

    /* 1. K >= eligible keys: every retrieving selector equals full attention */
    for (int kind = 0; kind < SUBQ_SELECT_COUNT; kind++) {
        const char *name = selector_kind_name(kind);
        if (!selector_kind_available(kind)) {
            printf("note: selector %s is not built in; not tested\n", name);
            continue;
        }
        for (int packed = 0; packed < 2; packed++) {
            attn_plan plan;
            attn_plan_default(&plan);
            plan.plan.selector = kind;
            plan.plan.top_k = N_TOK;
            plan.plan.layers = "1-4";
            subq_status s = run(&plan, proj, packed, N_TOK, got, NULL, &err);
            double rel = s ? 1 : max_rel(got, packed ? full_packed : full, (size_t)N_TOK * V);
            CHECK(!s && rel < 1e-5, "%s K>=n %s: rel %.2e %s", name, packed ? "packed" : "", rel, s ? err.msg : "");
        }
    }

    /* 2. decode mode == prefill mode with the same candidates (exact, K=8) */
    attn_plan plan;
    attn_plan_default(&plan);
    plan.plan.selector = SUBQ_SELECT_EXACT;
    plan.plan.top_k = 8;
    plan.plan.layers = "1-4";
    int32_t *cand_a = malloc((size_t)N_TOK * 8 * sizeof(int32_t)), *cand_b = malloc((size_t)N_TOK * 8 * sizeof(int32_t));
    float *dec = malloc((size_t)N_TOK * V * sizeof(float));
    CHECK(!run(&plan, proj, 0, N_TOK, got, cand_a, &err), "prefill mode: %s", err.msg);
    CHECK(!run(&plan, proj, 0, 1, dec, cand_b, &err), "decode mode: %s", err.msg);
    int same = memcmp(cand_a, cand_b, (size_t)N_TOK * 8 * sizeof(int32_t)) == 0;
    CHECK(same, "decode and prefill chose different candidates");
    double rel = max_rel(dec, got, (size_t)N_TOK * V);
    CHECK(rel < 1e-5, "decode vs prefill logits rel %.2e", rel);
    rel = max_rel(got, full, (size_t)N_TOK * V);
    CHECK(rel > 1e-4, "K=8 should differ from full attention (rel %.2e)", rel);
    /* the same for graph indexes: a small graph searched with a narrow beam
     * (approximate, so a key missing or inserted out of order changes the
     * sets) gives the same sets and logits decoded and teacher-forced */
    const subq_selector_kind graphs[] = {SUBQ_SELECT_HNSW, SUBQ_SELECT_FAISS};
    for (int i = 0; i < 2; i++) {
        if (!selector_kind_available(graphs[i])) continue; /* (part 1 notes it) */
        attn_plan ann = plan;
        ann.plan.selector = graphs[i];
        ann.plan.hnsw_m = 3;
        ann.plan.hnsw_ef_construction = 6;
        ann.plan.hnsw_ef_search = 2;
        const char *name = selector_kind_name(graphs[i]);
        CHECK(!run(&ann, proj, 1, N_TOK, got, cand_a, &err), "%s prefill mode: %s", name, err.msg);
        CHECK(!run(&ann, proj, 1, 1, dec, cand_b, &err), "%s decode mode: %s", name, err.msg);
        CHECK(!memcmp(cand_a, cand_b, (size_t)N_TOK * 8 * sizeof(int32_t)),
              "%s: decode and prefill chose different candidates", name);
        rel = max_rel(dec, got, (size_t)N_TOK * V);
        CHECK(rel < 1e-5, "%s: decode vs prefill logits rel %.2e", name, rel);
        for (int mode = SUBQ_PREFILL_DENSE; mode <= SUBQ_PREFILL_SPARSE; mode++) {
            ann.plan.sparse_prefill = mode;
            const int misses = batched_graph_misses(&ann, proj, &err);
            CHECK(misses == 0, "%s, %s prefill in batches: %d wrong keys or answers %s", name,
                  mode == SUBQ_PREFILL_DENSE ? "dense" : "sparse", misses, misses < 0 ? err.msg : "");
        }
    }

    /* 3. eligibility under packing: no future, cross-document, sink or tail slot */
    const char *all_kinds[] = {"exact", "hnsw", "quest", "oracle", "window"};
    for (int k = 0; k < 5; k++) {
        attn_plan_default(&plan);
        plan.plan.selector = selector_kind_parse(all_kinds[k]);
        plan.plan.top_k = 8;
        plan.plan.layers = "1-4";
        CHECK(!run(&plan, proj, 1, N_TOK, got, cand_a, &err), "%s packed: %s", all_kinds[k], err.msg);
        int bad = 0, filler = 0;
        for (int t = 0; t < N_TOK; t++) {
            int doc0 = t < 70 ? 0 : 70;
            for (int i = 0; i < 8; i++) {
                int j = cand_a[t * 8 + i];
                if (j < 0) {
                    filler++;
                    continue;
                }
                if (j > t || seg[j] != seg[t] || j < doc0 + 4 || j > t - 16) bad++;
            }
        }
        CHECK(bad == 0, "%s returned %d ineligible candidates", all_kinds[k], bad);
        CHECK(filler < N_TOK * 8, "%s returned nothing", all_kinds[k]);
    }
    /* 4. --sink 0 --tail 0: exactly the K retrieved keys, the query's own
     * key retrievable like any other. With K >= n every selector equals full
     * attention (so does exact by dot product and over int8 / int4 codes);
     * with K = 8 each query gets min(8, keys of its document so far), all
     * eligible; K = 0 without sinks or tail leaves nothing to attend and is
     * refused. */
    for (int kind = 0; kind < SUBQ_SELECT_COUNT + 3; kind++) {
        attn_plan_default(&plan);
        plan.plan.selector = kind < SUBQ_SELECT_COUNT ? kind : SUBQ_SELECT_EXACT;
        const char *name = kind < SUBQ_SELECT_COUNT ? selector_kind_name(kind) : "exact (dot, int8, int4)";
        if (kind >= SUBQ_SELECT_COUNT) {
            plan.plan.score = SUBQ_SCORE_DOT;
            plan.plan.scan = (subq_scan)(kind - SUBQ_SELECT_COUNT);
        }
        if (!selector_kind_available(plan.plan.selector)) continue;
        plan.plan.n_sink = plan.plan.n_tail = 0;
        plan.plan.layers = "1-4";
        plan.plan.top_k = N_TOK;
        subq_status s = run(&plan, proj, 1, N_TOK, got, NULL, &err);
        rel = s ? 1 : max_rel(got, full_packed, (size_t)N_TOK * V);
        CHECK(!s && rel < 1e-5, "%s sink 0 tail 0 K>=n: rel %.2e %s", name, rel, s ? err.msg : "");
        plan.plan.top_k = 8;
        s = run(&plan, proj, 1, N_TOK, got, cand_a, &err);
        CHECK(!s, "%s sink 0 tail 0 K=8: %s", name, err.msg);
        int bad = 0, short_sets = 0;
        for (int t = 0; !s && t < N_TOK; t++) {
            int doc0 = t < 70 ? 0 : 70, want = t - doc0 + 1 < 8 ? t - doc0 + 1 : 8, have = 0;
            for (int i = 0; i < 8; i++) {
                int j = cand_a[t * 8 + i];
                if (j < 0) continue;
                have++;
                bad += j > t || j < doc0;
            }
            short_sets += have != want;
        }
        CHECK(bad == 0 && short_sets == 0, "%s sink 0 tail 0 K=8: %d ineligible, %d queries without min(K, n) keys",
              name, bad, short_sets);
    }
    attn_plan_default(&plan);
    plan.plan.selector = SUBQ_SELECT_EXACT;
    plan.plan.top_k = plan.plan.n_sink = plan.plan.n_tail = 0;
    plan.plan.layers = "1-4";
    CHECK(run(&plan, proj, 0, N_TOK, got, NULL, &err) == SUBQ_ERR_ARG && strstr(err.msg, "at least one key"),
          "K 0, sink 0, tail 0 must be refused: '%s'", err.msg);

    /* 5. per-layer top-K: "1-4:8" under another selector and no sparse
     * layers is the exact selector at K = 8 on layers 1-4 (same candidates,
     * same logits); a K >= n there is full attention; lists are parsed as
     * written and a layer without projections is refused. */
    attn_plan_default(&plan);
    plan.plan.selector = SUBQ_SELECT_EXACT;
    plan.plan.top_k = 8;
    plan.plan.layers = "1-4";
    CHECK(!run(&plan, proj, 1, N_TOK, dec, cand_b, &err), "exact K=8: %s", err.msg);
    plan.plan.selector = SUBQ_SELECT_WINDOW;
    plan.plan.layers = "none";
    plan.plan.topk_layers = "1-4:8";
    CHECK(!run(&plan, proj, 1, N_TOK, got, cand_a, &err), "topk_layers 1-4:8: %s", err.msg);
    CHECK(!memcmp(cand_a, cand_b, (size_t)N_TOK * 8 * sizeof(int32_t)) && max_rel(got, dec, (size_t)N_TOK * V) == 0,
          "topk_layers 1-4:8 differs from exact K=8 on layers 1-4");
    plan.plan.topk_layers = "1-2:160,3:200,-1:500";
    rel = run(&plan, proj, 1, N_TOK, got, NULL, &err) ? 1 : max_rel(got, full_packed, (size_t)N_TOK * V);
    CHECK(rel < 1e-5, "topk_layers with K >= n: rel %.2e %s", rel, err.msg);
    plan.plan.topk_layers = "0:8";
    CHECK(run(&plan, proj, 1, N_TOK, got, NULL, &err) == SUBQ_ERR_ARG && strstr(err.msg, "per-layer top-K"),
          "a per-layer top-K on a layer without projections must be refused: '%s'", err.msg);
    int topk[5];
    CHECK(!attn_topk_layers_parse("0:2048,2-3:7,-1:1", 5, topk, &err) && topk[0] == 2048 && topk[1] == -1 &&
              topk[2] == 7 && topk[3] == 7 && topk[4] == 1,
          "topk_layers parse: %d %d %d %d %d %s", topk[0], topk[1], topk[2], topk[3], topk[4], err.msg);
    const char *bad_lists[] = {"0", "0:", "0:x", ":8", "0:-1", "0:8,", "9:8", "0:8;1:8", "0:8:9"};
    for (int i = 0; i < (int)(sizeof bad_lists / sizeof bad_lists[0]); i++)
        CHECK(attn_topk_layers_parse(bad_lists[i], 5, topk, &err) == SUBQ_ERR_ARG, "'%s' must be refused",
              bad_lists[i]);


    /* 6. batched sparse prefill */
    for (int kind = 0; kind < SUBQ_SELECT_COUNT; kind++) {
        if (!selector_kind_available(kind)) continue;
        for (int packed = 0; packed < 2; packed++) {
            attn_plan_default(&plan);
            plan.plan.selector = kind;
            plan.plan.top_k = N_TOK;
            plan.plan.sparse_prefill = SUBQ_PREFILL_SPARSE;
            plan.plan.layers = "1-4";
            subq_status s = run(&plan, proj, packed, BATCH, got, NULL, &err);
            rel = s ? 1 : max_rel(got, packed ? full_packed : full, (size_t)N_TOK * V);
            CHECK(!s && rel < 1e-5, "batch prefill %s K>=n %s: rel %.2e %s", selector_kind_name(kind),
                  packed ? "packed" : "", rel, s ? err.msg : "");
        }
    }
    for (int k = 0; k < 5; k++) {
        attn_plan_default(&plan);
        plan.plan.selector = selector_kind_parse(all_kinds[k]);
        plan.plan.top_k = 8;
        plan.plan.sparse_prefill = SUBQ_PREFILL_SPARSE;
        plan.plan.quest_headmean = 1; /* per-head Quest prefills token by token */
        plan.plan.layers = "1-4";
        CHECK(!run(&plan, proj, 1, BATCH, got, cand_a, &err), "batch prefill %s packed: %s", all_kinds[k], err.msg);
        int bad = 0, filler = 0, want = 0;
        for (int t = 0; t < N_TOK; t++) {
            /* the window: the batch's part of the document, at least the tail, never the sinks */
            int doc0 = t < 70 ? 0 : 70, b0 = t / BATCH * BATCH, w = doc0 > b0 ? doc0 : b0;
            if (t + 1 - 16 < w) w = t + 1 - 16;
            if (w < doc0 + 4) w = doc0 + 4;
            want += w - (doc0 + 4) > 0; /* some slot is left to retrieve */
            for (int i = 0; i < 8; i++) {
                int j = cand_a[t * 8 + i];
                if (j < 0) {
                    filler++;
                    continue;
                }
                if (j >= b0 || seg[j] != seg[t] || j < doc0 + 4 || j >= w) bad++;
            }
        }
        CHECK(bad == 0, "batch prefill %s returned %d ineligible candidates", all_kinds[k], bad);
        CHECK(want > 0 && filler < N_TOK * 8, "batch prefill %s returned nothing", all_kinds[k]);
        rel = max_rel(got, full_packed, (size_t)N_TOK * V);
        CHECK(rel > 1e-4, "batch prefill %s K=8 should differ from full attention (rel %.2e)", all_kinds[k], rel);
    }
    /* documents are runs of slots: a segment id lower than the one before
     * (in the batch, or the cache's last slot) is refused, nothing cached */
    {
        subq_context_params cp = subq_context_default_params();
        cp.n_ctx = 8;
        subq_context *c;
        CHECK(!subq_context_new(model, &cp, &c, &err), "context: %s", err.msg);
        const int32_t down[2] = {1, 0}, one = 1, zero = 0;
        CHECK(context_forward(c, toks, 2, NULL, down, NULL, 0, &err) == SUBQ_ERR_ARG && strstr(err.msg, "segment") &&
                  c->kv.n_used == 0,
              "decreasing segment ids in a batch must be refused (%s)", err.msg);
        CHECK(!context_forward(c, toks, 1, NULL, &one, NULL, 0, &err), "segment 1: %s", err.msg);
        CHECK(context_forward(c, toks, 1, NULL, &zero, NULL, 0, &err) == SUBQ_ERR_ARG && c->kv.n_used == 1,
              "a segment id below the cache's last must be refused");
        CHECK(!context_forward(c, toks, 1, NULL, &one, NULL, 0, &err) && c->kv.n_used == 2, "same segment: %s", err.msg);
        subq_context_free(c);
    }
    /* 7. a rotated search space: half of the 16 dims (base 100, so that the
     * 160 positions turn them far), at the packed positions */
    {
        layer2_h = malloc((size_t)N_TOK * model->hp.n_embd * sizeof(float));
        search_proj *rp;
        CHECK(!search_proj_random(model, layers, 4, 16, 7, &rp, &err), "%s", err.msg);
        rp->rope = (search_rope){.n_rot = 8, .base = 100.0, .scale = 1.0};
        attn_plan_default(&plan);
        plan.plan.selector = SUBQ_SELECT_EXACT;
        plan.plan.top_k = 8;
        plan.plan.layers = "1-4";
        CHECK(!run(&plan, rp, 1, N_TOK, got, cand_a, &err), "rotated prefill: %s", err.msg);
        int miss = rotated_topk_misses(rp, cand_a, 0);
        CHECK(miss == 0, "rotated space, prefill: %d queries' candidates are not the rotated top-8", miss);
        CHECK(!run(&plan, rp, 1, 1, dec, cand_b, &err), "rotated decode: %s", err.msg);
        CHECK(!memcmp(cand_a, cand_b, (size_t)N_TOK * 8 * sizeof(int32_t)) &&
                  max_rel(dec, got, (size_t)N_TOK * V) < 1e-5,
              "rotated space: decode chose other candidates or logits than prefill");
        for (int v = 0; v < 3; v++) { /* int8, int4 codes; hnsw */
            attn_plan other = plan;
            if (v < 2) other.plan.scan = v ? SUBQ_SCAN_INT4 : SUBQ_SCAN_INT8;
            else other.plan.selector = SUBQ_SELECT_HNSW;
            CHECK(!run(&other, rp, 1, N_TOK, dec, cand_b, &err), "rotated %d: %s", v, err.msg);
            miss = rotated_topk_misses(rp, cand_b, 0);
            CHECK(miss == 0, "rotated space, %s: %d queries' candidates are not the rotated top-8",
                  v == 0 ? "int8 scan" : v == 1 ? "int4 scan" : "hnsw", miss);
        }
        /* the same projections unrotated choose other sets (the rotation is in effect) */
        search_proj *flat;
        CHECK(!search_proj_random(model, layers, 4, 16, 7, &flat, &err), "%s", err.msg);
        CHECK(!run(&plan, flat, 1, N_TOK, got, cand_b, &err), "unrotated: %s", err.msg);
        CHECK(memcmp(cand_a, cand_b, (size_t)N_TOK * 8 * sizeof(int32_t)) != 0 && rotated_topk_misses(rp, cand_b, 0) > 0,
              "rotating half the search space changed no candidate set");
        search_proj_free(flat);
        plan.plan.sparse_prefill = SUBQ_PREFILL_SPARSE;
        CHECK(!run(&plan, rp, 1, BATCH, got, cand_a, &err), "rotated batch prefill: %s", err.msg);
        miss = rotated_topk_misses(rp, cand_a, BATCH);
        CHECK(miss == 0, "rotated space, batched sparse prefill: %d queries' candidates are not the rotated top-8", miss);
        search_proj_free(rp);
        free(layer2_h);
        layer2_h = NULL;
    }
    free(cand_a);
    free(cand_b);
    free(dec);
    free(full);
    free(full_packed);
    free(got);
    search_proj_free(proj);
    subq_model_free(model);
    return test_summary();
}
