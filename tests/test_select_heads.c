/* Per-head selection and the oracle variants against brute force, on a real
 * KV cache (f32 and f16) with sinks, tails and documents masked out:
 * - quest per head: each head's set is the one Quest's rule gives from its
 *   own page bounds (pages by bound sum_c max(q_h M, q_h m), the last page's
 *   slots by q_h . k), recomputed here in double from the stored keys;
 * - oracle per-head: each head's set is the exact top-K of q_h . k;
 * - oracle per-kv-head: each head's set is the exact top-K of its group's
 *   mean logit (1/G) sum_{h in g} q_h . k_g;
 * - per-head search (exact, hnsw over search heads): query head h's set is
 *   the exact top-K by cosine of its search head's query against its key
 *   head's search keys (exact), or mostly so (hnsw);
 * - oracle headmean-cosine: the exact top-K of cos(mean_h q_h, mean_g k_g);
 * - the sparse stage with a per-head selector (oracle, quest) attends each
 *   head over sinks + its own candidates + tail (brute-force softmax), and
 *   its metrics give the per-head mass and recall computed here from the
 *   full softmax; with the completion, each head's hybrid over its own set. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sparse/attn_sparse.h"
#include "complete/completion.h"
#include "base/rng.h"
#include "kv/kv_cache.h"
#include "quant/quant.h"
#include "select/selector.h"
#include "test_util.h"

enum { N_LAYER = 1, LAYER = 0, N_HEAD = 6, N_HEAD_KV = 2, GRP = N_HEAD / N_HEAD_KV, HD = 16, N_CTX = 700 };

static double key_at(const kv_cache *kv, int g, int j, int c) {
    const void *p = kv_cache_key(kv, LAYER, g, j);
    return kv->type == SUBQ_KV_F16 ? fp16_to_fp32(((const uint16_t *)p)[c]) : ((const float *)p)[c];
}

static double val_at(const kv_cache *kv, int g, int j, int c) {
    const void *p = kv_cache_value(kv, LAYER, g, j);
    return kv->type == SUBQ_KV_F16 ? fp16_to_fp32(((const uint16_t *)p)[c]) : ((const float *)p)[c];
}

static double dot_head(const kv_cache *kv, const float *q, int h, int j) {
    double s = 0;
    for (int c = 0; c < HD; c++) s += q[h * HD + c] * key_at(kv, h / GRP, j, c);
    return s;
}

/* cos(mean_h q_h, mean_g k_{j,g}) (0 for a zero mean key) */
static double cosine(const kv_cache *kv, const float *q, int j) {
    double qm[HD] = {0}, km[HD] = {0}, d = 0, nq = 0, nk = 0;
    for (int c = 0; c < HD; c++) {
        for (int h = 0; h < N_HEAD; h++) qm[c] += q[h * HD + c] / N_HEAD;
        for (int g = 0; g < N_HEAD_KV; g++) km[c] += key_at(kv, g, j, c) / N_HEAD_KV;
        d += qm[c] * km[c], nq += qm[c] * qm[c], nk += km[c] * km[c];
    }
    return nk > 0 ? d / sqrt(nq * nk) : 0;
}

static void fill_cache(kv_cache *kv, int n, uint64_t *rng) {
    float *k = malloc((size_t)n * N_HEAD_KV * HD * sizeof(float)), *v = malloc((size_t)n * N_HEAD_KV * HD * sizeof(float));
    for (int j = 0; j < n; j++)
        for (int i = 0; i < N_HEAD_KV * HD; i++) {
            k[(size_t)j * N_HEAD_KV * HD + i] = rng_normal(rng) * (0.5f + (i % 5) * 0.4f) + 1.5f * sinf(0.02f * j * (1 + i % 3));
            v[(size_t)j * N_HEAD_KV * HD + i] = rng_normal(rng);
        }
    kv_cache_store(kv, LAYER, 0, n, k, v, NULL);
    free(k);
    free(v);
}

static int cmp_desc(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Sorted scores of a returned list equal the best `want` reference scores. */
static int same_scores(double *have, int n_have, double *ref, int n_ref) {
    qsort(have, (size_t)n_have, sizeof(double), cmp_desc);
    qsort(ref, (size_t)n_ref, sizeof(double), cmp_desc);
    int bad = 0;
    for (int i = 0; i < n_have && i < n_ref; i++) bad += fabs(have[i] - ref[i]) > 1e-4 * (1 + fabs(ref[i]));
    return bad;
}

/* Head h's bound of page p: sum_c max(q_h[c] min_j k_j[c], q_h[c] max_j k_j[c]). */
static double page_bound(const kv_cache *kv, const float *q, int h, int p, int P, int n) {
    double b = 0;
    for (int c = 0; c < HD; c++) {
        double mn = INFINITY, mx = -INFINITY;
        for (int j = p * P; j < p * P + P && j < n; j++) {
            double x = key_at(kv, h / GRP, j, c);
            mn = x < mn ? x : mn, mx = x > mx ? x : mx;
        }
        b += fmax(q[h * HD + c] * mn, q[h * HD + c] * mx);
    }
    return b;
}

/* Quest's rule for head h, in double: (bound of the slot's page, q_h . k) of
 * every slot it picks, as 2*count doubles; returns the count. *tied: 1 when
 * the last page taken has a bound within rounding (1e-5 of the largest
 * |bound|) of the page before or after it in the order: the library may
 * order them either way and so take other slots. */
static int quest_ref(const kv_cache *kv, const float *q, int h, int n, int P, const select_mask *m, int k,
                     double *out, int *tied) {
    const int n_pages = (n + P - 1) / P;
    double *bound = malloc((size_t)n_pages * sizeof(double));
    int *order = malloc((size_t)n_pages * sizeof(int)), got = 0;
    for (int p = 0; p < n_pages; p++) bound[p] = page_bound(kv, q, h, p, P, n), order[p] = p;
    for (int a = 0; a < n_pages; a++) /* pages by bound, best first */
        for (int b = a + 1; b < n_pages; b++)
            if (bound[order[b]] > bound[order[a]]) {
                int t = order[a];
                order[a] = order[b], order[b] = t;
            }
    double top = 0;
    for (int p = 0; p < n_pages; p++) top = fmax(top, fabs(bound[p]));
    *tied = 0;
    int i = 0;
    for (; i < n_pages && got < k; i++) {
        int p = order[i], el[64], ne = 0;
        for (int j = p * P; j < p * P + P && j < n; j++)
            if (select_mask_allows(m, j)) el[ne++] = j;
        double sc[64];
        for (int e = 0; e < ne; e++) sc[e] = dot_head(kv, q, h, el[e]);
        if (ne > k - got) qsort(sc, (size_t)ne, sizeof(double), cmp_desc); /* the last page: its best slots */
        for (int e = 0; e < ne && got < k; e++, got++) out[2 * got] = bound[p], out[2 * got + 1] = sc[e];
    }
    /* pages taken whole stay taken in either order; the last page taken
     * (i - 1) changes with a tie on either side of it */
    for (int a = i - 1; a <= i; a++)
        if (a >= 1 && a < n_pages) *tied |= bound[order[a - 1]] - bound[order[a]] <= 1e-5 * top;
    free(bound);
    free(order);
    return got;
}

static int cmp_pair(const void *a, const void *b) {
    const double *x = a, *y = b;
    if (x[0] != y[0]) return x[0] < y[0] ? 1 : -1;
    return x[1] < y[1] ? 1 : x[1] > y[1] ? -1 : 0;
}

static void test_quest_heads(subq_kv_type type, int P, uint64_t seed) {
    uint64_t rng = rng_seed(seed);
    const int n = 600;
    kv_cache kv;
    subq_error err = {0};
    CHECK(kv_cache_init(&kv, N_LAYER, N_HEAD_KV, HD, N_CTX, type, &err) == SUBQ_OK, "kv init: %s", err.msg);
    fill_cache(&kv, n, &rng);
    selector_params p;
    selector_params_default(&p, SUBQ_SELECT_QUEST, 0);
    p.plan.quest_page = P;
    selector_env env = {.kv = &kv, .layer = LAYER, .n_head = N_HEAD, .n_head_kv = N_HEAD_KV, .head_dim = HD};
    selector *s;
    CHECK(selector_new(&p, &env, &s, &err) == SUBQ_OK, "quest: %s", err.msg);
    CHECK(selector_per_head(s), "quest picks per head by default");
    CHECK(selector_append(s, NULL, n, 0, &err) == SUBQ_OK, "append: %s", err.msg);
    int32_t seg[N_CTX], out[N_HEAD * 128];
    int n_out[N_HEAD], bad = 0, bad_count = 0, bad_mask = 0, n_tied = 0;
    double have[2 * 128], want[2 * 128];
    float q[N_HEAD * HD];
    for (int j = 0; j < n; j++) seg[j] = j < 250 ? 0 : 1;
    for (int it = 0; it < 24; it++) {
        for (int i = 0; i < N_HEAD * HD; i++) q[i] = rng_normal(&rng) * (it % 2 ? 1.0f : 2.5f);
        int qs = 300 + (int)(rng_next_u64(&rng) % 300); /* query slot in document 1 */
        select_mask m = {.n_slots = qs + 1, .seg = it % 3 ? seg : NULL, .query_seg = 1,
                         .ex0_lo = 250, .ex0_hi = 254, .ex1_lo = qs - 7, .ex1_hi = qs + 1};
        int k = 1 + (int)(rng_next_u64(&rng) % 120);
        CHECK(selector_query_heads(s, NULL, q, k, &m, out, n_out) == 0, "query_heads failed");
        for (int h = 0; h < N_HEAD; h++) {
            int tied, nw = quest_ref(&kv, q, h, n, P, &m, k, want, &tied), differ = 0;
            n_tied += tied;
            bad_count += n_out[h] != nw;
            for (int i = 0; i < n_out[h]; i++) {
                int j = out[h * k + i];
                bad_mask += !select_mask_allows(&m, j);
                have[2 * i] = page_bound(&kv, q, h, j / P, P, n);
                have[2 * i + 1] = dot_head(&kv, q, h, j);
            }
            /* the same (page bound, score) pairs, compared sorted */
            int nc = n_out[h] < nw ? n_out[h] : nw;
            qsort(have, (size_t)n_out[h], 2 * sizeof(double), cmp_pair);
            qsort(want, (size_t)nw, 2 * sizeof(double), cmp_pair);
            for (int i = 0; i < 2 * nc; i++) differ += fabs(have[i] - want[i]) > 1e-4 * (1 + fabs(want[i]));
            bad += tied ? 0 : differ; /* pages tied within rounding: either order */
        }
    }
    const char *t = type == SUBQ_KV_F16 ? "f16" : "f32";
    CHECK(bad_count == 0, "quest per head %s P=%d: %d wrong counts", t, P, bad_count);
    CHECK(bad_mask == 0, "quest per head %s P=%d: %d ineligible slots returned", t, P, bad_mask);
    CHECK(bad == 0, "quest per head %s P=%d: %d differences from Quest's rule (%d heads' queries with pages tied "
          "within rounding, excused)", t, P, bad, n_tied);
    selector_free(s);
    kv_cache_free(&kv);
}

static void test_oracles(subq_kv_type type, uint64_t seed) {
    uint64_t rng = rng_seed(seed);
    const int n = 650;
    kv_cache kv;
    subq_error err = {0};
    CHECK(kv_cache_init(&kv, N_LAYER, N_HEAD_KV, HD, N_CTX, type, &err) == SUBQ_OK, "kv init: %s", err.msg);
    fill_cache(&kv, n, &rng);
    selector_env env = {.kv = &kv, .layer = LAYER, .n_head = N_HEAD, .n_head_kv = N_HEAD_KV, .head_dim = HD};
    selector *ph, *cs;
    selector_params p;
    selector_params_default(&p, SUBQ_SELECT_ORACLE, 0);
    p.plan.oracle = SUBQ_ORACLE_PER_HEAD;
    CHECK(selector_new(&p, &env, &ph, &err) == SUBQ_OK, "oracle per-head: %s", err.msg);
    p.plan.oracle = SUBQ_ORACLE_HEADMEAN_COSINE;
    CHECK(selector_new(&p, &env, &cs, &err) == SUBQ_OK, "oracle cosine: %s", err.msg);
    CHECK(selector_per_head(ph) && !selector_per_head(cs), "per-head only for the per-head oracle");
    CHECK(selector_append(ph, NULL, n, 0, &err) == SUBQ_OK && selector_append(cs, NULL, n, 0, &err) == SUBQ_OK,
          "append: %s", err.msg);
    int32_t seg[N_CTX], out[N_HEAD * 200];
    int n_out[N_HEAD], bad_ph = 0, bad_cs = 0, bad_count = 0;
    double have[200], *want = malloc(N_CTX * sizeof(double));
    float q[N_HEAD * HD];
    for (int j = 0; j < n; j++) seg[j] = j / 200;
    for (int it = 0; it < 20; it++) {
        for (int i = 0; i < N_HEAD * HD; i++) q[i] = rng_normal(&rng);
        select_mask m = {.n_slots = n - (int)(rng_next_u64(&rng) % 50), .seg = it % 2 ? seg : NULL, .query_seg = 2,
                         .ex0_lo = 400, .ex0_hi = 404, .ex1_lo = n - 100, .ex1_hi = n};
        int k = 1 + (int)(rng_next_u64(&rng) % 200);
        CHECK(selector_query_heads(ph, NULL, q, k, &m, out, n_out) == 0, "query_heads failed");
        for (int h = 0; h < N_HEAD; h++) {
            int ne = 0;
            for (int j = 0; j < n; j++)
                if (select_mask_allows(&m, j)) want[ne++] = dot_head(&kv, q, h, j);
            bad_count += n_out[h] != (k < ne ? k : ne);
            for (int i = 0; i < n_out[h]; i++) {
                bad_ph += !select_mask_allows(&m, out[h * k + i]);
                have[i] = dot_head(&kv, q, h, out[h * k + i]);
            }
            bad_ph += same_scores(have, n_out[h], want, ne);
        }
        int got = selector_query(cs, NULL, q, k, &m, out), ne = 0;
        for (int j = 0; j < n; j++)
            if (select_mask_allows(&m, j)) want[ne++] = cosine(&kv, q, j);
        bad_count += got != (k < ne ? k : ne);
        for (int i = 0; i < got; i++) {
            bad_cs += !select_mask_allows(&m, out[i]);
            have[i] = cosine(&kv, q, out[i]);
        }
        bad_cs += same_scores(have, got, want, ne);
    }
    const char *t = type == SUBQ_KV_F16 ? "f16" : "f32";
    CHECK(bad_count == 0, "oracles %s: %d wrong counts", t, bad_count);
    CHECK(bad_ph == 0, "oracle per-head %s: %d differences from brute force", t, bad_ph);
    /* per-kv-head: the group's mean logit, one set shared by the group */
    selector *pk;
    p.plan.oracle = SUBQ_ORACLE_PER_KV_HEAD;
    CHECK(selector_new(&p, &env, &pk, &err) == SUBQ_OK && selector_per_head(pk), "oracle per-kv-head: %s", err.msg);
    CHECK(selector_append(pk, NULL, n, 0, &err) == SUBQ_OK, "append: %s", err.msg);
    int bad_pk = 0;
    for (int it = 0; it < 10; it++) {
        for (int i = 0; i < N_HEAD * HD; i++) q[i] = rng_normal(&rng);
        select_mask m = {.n_slots = n, .ex0_lo = 0, .ex0_hi = 4, .ex1_lo = n - 16, .ex1_hi = n};
        const int k = 1 + (int)(rng_next_u64(&rng) % 100);
        CHECK(selector_query_heads(pk, NULL, q, k, &m, out, n_out) == 0, "query_heads failed");
        for (int h = 0; h < N_HEAD; h++) {
            const int g = h / GRP;
            int ne = 0;
            for (int j = 0; j < n; j++) {
                if (!select_mask_allows(&m, j)) continue;
                double v = 0;
                for (int x = g * GRP; x < (g + 1) * GRP; x++) v += dot_head(&kv, q, x, j) / GRP;
                want[ne++] = v;
            }
            bad_pk += n_out[h] != (k < ne ? k : ne);
            for (int i = 0; i < n_out[h]; i++) {
                double v = 0;
                for (int x = g * GRP; x < (g + 1) * GRP; x++) v += dot_head(&kv, q, x, out[h * k + i]) / GRP;
                have[i] = v;
                bad_pk += !select_mask_allows(&m, out[h * k + i]) || out[h * k + i] != out[g * GRP * k + i];
            }
            bad_pk += same_scores(have, n_out[h], want, ne);
        }
    }
    CHECK(bad_pk == 0, "oracle per-kv-head %s: %d differences from brute force", t, bad_pk);
    selector_free(pk);
    CHECK(bad_cs == 0, "oracle headmean-cosine %s: %d differences from brute force", t, bad_cs);
    selector_free(ph);
    selector_free(cs);
    kv_cache_free(&kv);
    free(want);
}

/* The sparse stage with a per-head selector, teacher forcing over two
 * documents: each head's output is the softmax over sinks + its candidates +
 * tail, and the metrics are the per-head mass and recall, against brute
 * force. The candidates: the exact per-head top-K (oracle), or for Quest the
 * sets an independent selector given the same keys in the same order picks
 * (Quest's rule itself is checked above). */
static void test_stage(subq_kv_type type, int quest) {
    enum { N = 160, SINK = 2, TAIL = 3, K = 5 };
    uint64_t rng = rng_seed(77);
    kv_cache kv;
    subq_error err = {0};
    CHECK(kv_cache_init(&kv, N_LAYER, N_HEAD_KV, HD, N, type, &err) == SUBQ_OK, "kv init: %s", err.msg);
    fill_cache(&kv, N, &rng);
    for (int j = 0; j < N; j++) kv.seg[j] = j < 70 ? 0 : 1, kv.pos[j] = j < 70 ? j : j - 70;
    kv.n_used = N;
    sparse_params sp = {0};
    selector_params_default(&sp.select, quest ? SUBQ_SELECT_QUEST : SUBQ_SELECT_ORACLE, 0);
    sp.select.plan.top_k = K, sp.select.plan.n_sink = SINK, sp.select.plan.n_tail = TAIL;
    sp.select.plan.sparse_prefill = SUBQ_PREFILL_TOKENWISE;
    sp.select.plan.oracle = SUBQ_ORACLE_PER_HEAD;
    sp.select.plan.quest_page = 4;
    selector_env env = {.kv = &kv, .layer = LAYER, .n_head = N_HEAD, .n_head_kv = N_HEAD_KV, .head_dim = HD};
    attn_stage *st;
    selector *twin = NULL;
    CHECK(attn_sparse_new(&sp, NULL, NULL, NULL, 8, &env, &st, &err) == SUBQ_OK, "stage: %s", err.msg);
    CHECK(attn_stage_enable_metrics(st, &err) == SUBQ_OK, "metrics: %s", err.msg);
    CHECK(!quest || selector_new(&sp.select, &env, &twin, &err) == SUBQ_OK, "twin: %s", err.msg);
    float *q = malloc((size_t)N * N_HEAD * HD * sizeof(float)), *out = malloc((size_t)N * N_HEAD * HD * sizeof(float));
    float h_norm[N * 8] = {0};
    for (int i = 0; i < N * N_HEAD * HD; i++) q[i] = rng_normal(&rng) * 0.7f;
    const float scale = 1.0f / sqrtf((float)HD);
    attn_step step = {.layer = LAYER, .n_tokens = N, .slot0 = 0, .n_head = N_HEAD, .n_head_kv = N_HEAD_KV,
                      .head_dim = HD, .scale = scale, .q = q, .h_norm = h_norm, .n_embd = 8, .out = out, .n_threads = 1};
    CHECK(st->forward(st, &step, &kv, &err) == SUBQ_OK, "forward: %s", err.msg);
    double worst = 0, mass = 0, recall = 0, mass_seed = 0, recall_seed = 0, recall_hi = 0, recall_seed_hi = 0;
    int n_seed = 0, twin_cand[N_HEAD * K], twin_got[N_HEAD];
    double sc[N], p[N];
    int att[N], el[N];
    for (int t = 0; t < N; t++) {
        const float *qt = q + (size_t)t * N_HEAD * HD;
        int doc0 = t < 70 ? 0 : 70, n = t + 1 - doc0, sink_hi = doc0 + SINK, tail_lo = t + 1 - TAIL;
        if (sink_hi > t + 1) sink_hi = t + 1;
        if (tail_lo < sink_hi) tail_lo = sink_hi;
        if (twin) {
            select_mask m = {.n_slots = t + 1, .seg = kv.seg, .query_seg = kv.seg[t], .ex0_lo = doc0,
                             .ex0_hi = sink_hi, .ex1_lo = tail_lo, .ex1_hi = t + 1};
            selector_append(twin, NULL, 1, t, &err);
            selector_query_heads(twin, NULL, qt, K, &m, twin_cand, twin_got);
        }
        double mq = 0, rq = 0, rq_hi = 0, msq = 0;
        int ne = 0;
        for (int h = 0; h < N_HEAD; h++) {
            /* the eligible keys; sinks and tail always attended */
            ne = 0;
            for (int j = doc0; j <= t; j++) {
                sc[j - doc0] = dot_head(&kv, qt, h, j);
                att[j - doc0] = j < sink_hi || j >= tail_lo;
                if (!att[j - doc0]) el[ne++] = j - doc0;
            }
            int kk = ne < K ? ne : K;
            /* the top K of q_h . k by brute force, ranked in el[0 .. kk) */
            for (int a = 0; a < kk; a++)
                for (int b = a + 1; b < ne; b++)
                    if (sc[el[b]] > sc[el[a]]) {
                        int x = el[a];
                        el[a] = el[b], el[b] = x;
                    }
            int cand[K], nc = kk;
            for (int a = 0; a < kk; a++) cand[a] = el[a];
            if (twin) {
                nc = twin_got[h];
                for (int a = 0; a < nc; a++) cand[a] = twin_cand[h * K + a] - doc0;
            }
            /* full softmax p_h over the document, for the metrics */
            double mx = -INFINITY, z = 0;
            for (int j = 0; j < n; j++) mx = fmax(mx, scale * sc[j]);
            for (int j = 0; j < n; j++) z += p[j] = exp(scale * sc[j] - mx);
            double fixed = 0, on = 0;
            for (int j = 0; j < n; j++) fixed += att[j] ? p[j] / z : 0;
            for (int a = 0; a < nc; a++) on += p[cand[a]] / z, att[cand[a]] = 1;
            /* recall against the top kk of p_h (= of q_h . k) among the
             * eligible; the library ranks float scores: keys tied within
             * 1e-5 of the largest |score| count as either choice, so a
             * candidate counts in the least when fewer than kk others score
             * that close to it or above, in the most when fewer than kk score
             * above it by more (at most kk) */
            double top = 0;
            for (int a = 0; a < ne; a++) top = fmax(top, fabs(sc[el[a]]));
            const double eps = 1e-5 * top;
            int sure = 0, may = 0;
            for (int a = 0; a < nc; a++) {
                int close = 0, above = 0;
                for (int b = 0; b < ne; b++) {
                    close += el[b] != cand[a] && sc[el[b]] >= sc[cand[a]] - eps;
                    above += sc[el[b]] > sc[cand[a]] + eps;
                }
                sure += close < kk, may += above < kk;
            }
            rq += kk > 0 ? (double)sure / kk : 1.0, rq_hi += kk > 0 ? (double)(may < kk ? may : kk) / kk : 1.0;
            mq += fixed + on, msq += on;
            /* attention over the attended slots */
            double zz = 0, o[HD] = {0};
            for (int j = 0; j < n; j++)
                if (att[j]) {
                    double w = exp(scale * sc[j] - mx);
                    zz += w;
                    for (int c = 0; c < HD; c++) o[c] += w * val_at(&kv, h / GRP, doc0 + j, c);
                }
            for (int c = 0; c < HD; c++)
                worst = fmax(worst, fabs(o[c] / zz - out[(size_t)t * N_HEAD * HD + h * HD + c]));
        }
        mass += mq / N_HEAD, recall += rq / N_HEAD, recall_hi += rq_hi / N_HEAD;
        if (ne >= K) mass_seed += msq / N_HEAD, recall_seed += rq / N_HEAD, recall_seed_hi += rq_hi / N_HEAD, n_seed++;
    }
    const sparse_metrics *mt = attn_stage_metrics(st);
    const char *ty = type == SUBQ_KV_F16 ? "f16" : "f32", *kind = quest ? "quest" : "oracle";
    CHECK(worst < 1e-4, "per-head %s stage %s: output differs from brute force by %g", kind, ty, worst);
    CHECK(mt->n_queries == N && mt->n_seed == n_seed, "per-head %s stage %s: %lld queries, %lld seed (want %d, %d)",
          kind, ty, (long long)mt->n_queries, (long long)mt->n_seed, N, n_seed);
    CHECK(fabs(mt->mass_sum - mass) < 1e-3 && mt->recall_sum > recall - 1e-6 && mt->recall_sum < recall_hi + 1e-6,
          "per-head %s stage %s: mass %g recall %g, brute force %g [%g, %g]", kind, ty, mt->mass_sum, mt->recall_sum,
          mass, recall, recall_hi);
    CHECK(fabs(mt->mass_seed_sum - mass_seed) < 1e-3 && mt->recall_seed_sum > recall_seed - 1e-6 &&
              mt->recall_seed_sum < recall_seed_hi + 1e-6,
          "per-head %s stage %s: seed mass %g recall %g, brute force %g [%g, %g]", kind, ty, mt->mass_seed_sum,
          mt->recall_seed_sum, mass_seed, recall_seed, recall_seed_hi);
    CHECK(!quest || recall < N - 1, "per-head quest stage %s: recall %g is not below 1 anywhere (weak test)", ty, recall);
    selector_free(twin);
    st->free(st);
    kv_cache_free(&kv);
    free(q);
    free(out);
}

/* The per-head stage with the completion: head h's output is the hybrid of
 * completion_attend (the shared-set path, tested against numpy elsewhere)
 * over h's own exact set (sinks + its exact top-K + tail). */
static void test_stage_complete(subq_kv_type type) {
    enum { N = 120, SINK = 2, TAIL = 3, K = 4 };
    uint64_t rng = rng_seed(78);
    kv_cache kv;
    subq_error err = {0};
    CHECK(kv_cache_init(&kv, N_LAYER, N_HEAD_KV, HD, N, type, &err) == SUBQ_OK, "kv init: %s", err.msg);
    fill_cache(&kv, N, &rng);
    for (int j = 0; j < N; j++) kv.seg[j] = j < 50 ? 0 : 1, kv.pos[j] = j < 50 ? j : j - 50;
    kv.n_used = N;
    phi_dims d = {.head_dim = HD, .d_emb = 8, .d_hidden = 8, .d_phi = 8, .n_head = N_HEAD, .n_head_kv = N_HEAD_KV};
    int layers[1] = {LAYER};
    phi_maps *maps = NULL;
    CHECK(!phi_maps_new(&d, N_LAYER, layers, 1, 0, &maps, &err), "maps: %s", err.msg);
    phi_maps_init(maps, 0.5f, &rng);
    sparse_params sp = {.complete = maps};
    selector_params_default(&sp.select, SUBQ_SELECT_ORACLE, 0);
    sp.select.plan.top_k = K, sp.select.plan.n_sink = SINK, sp.select.plan.n_tail = TAIL;
    sp.select.plan.sparse_prefill = SUBQ_PREFILL_TOKENWISE;
    sp.select.plan.oracle = SUBQ_ORACLE_PER_HEAD;
    selector_env env = {.kv = &kv, .layer = LAYER, .n_head = N_HEAD, .n_head_kv = N_HEAD_KV, .head_dim = HD};
    attn_stage *st = NULL;
    attn_completion *ref = NULL;
    CHECK(attn_sparse_new(&sp, NULL, NULL, NULL, 8, &env, &st, &err) == SUBQ_OK && attn_stage_has_completion(st),
          "stage: %s", err.msg);
    CHECK(!completion_new(maps, LAYER, SINK, TAIL, K, NULL, &ref, &err), "completion: %s", err.msg);
    float *q = malloc((size_t)N * N_HEAD * HD * sizeof(float)), *out = malloc((size_t)N * N_HEAD * HD * sizeof(float));
    float h_norm[N * 8] = {0}, all[N_HEAD * HD];
    for (int i = 0; i < N * N_HEAD * HD; i++) q[i] = rng_normal(&rng) * 0.7f;
    attn_step step = {.layer = LAYER, .n_tokens = N, .slot0 = 0, .n_head = N_HEAD, .n_head_kv = N_HEAD_KV,
                      .head_dim = HD, .scale = 1.0f / sqrtf((float)HD), .q = q, .h_norm = h_norm, .n_embd = 8,
                      .out = out, .n_threads = 1};
    CHECK(st && st->forward(st, &step, &kv, &err) == SUBQ_OK, "forward: %s", err.msg);
    double worst = 0, share = 0;
    int64_t n_share = 0;
    for (int t = 0; ref && t < N; t++) {
        const float *qt = q + (size_t)t * N_HEAD * HD;
        CHECK(!completion_advance(ref, &kv, t, &err), "advance: %s", err.msg);
        int doc0 = t < 50 ? 0 : 50, sink_hi = doc0 + SINK, tail_lo = t + 1 - TAIL;
        if (sink_hi > t + 1) sink_hi = t + 1;
        if (tail_lo < sink_hi) tail_lo = sink_hi;
        for (int h = 0; h < N_HEAD; h++) {
            int slots[SINK + K + TAIL], el[N], ne = 0, n = 0;
            double sc[N];
            for (int j = sink_hi; j < tail_lo; j++) el[ne++] = j, sc[j] = dot_head(&kv, qt, h, j);
            int kk = ne < K ? ne : K;
            for (int a = 0; a < kk; a++)
                for (int b = a + 1; b < ne; b++)
                    if (sc[el[b]] > sc[el[a]]) {
                        int x = el[a];
                        el[a] = el[b], el[b] = x;
                    }
            for (int j = doc0; j < sink_hi; j++) slots[n++] = j;
            for (int a = 0; a < kk; a++) slots[n++] = el[a];
            for (int j = tail_lo; j <= t; j++) slots[n++] = j;
            completion_attend(ref, &kv, t, qt, step.scale, slots, n, sink_hi - doc0, kk, all, &share, &n_share);
            for (int c = 0; c < HD; c++)
                worst = fmax(worst, fabs(all[h * HD + c] - out[(size_t)t * N_HEAD * HD + h * HD + c]));
        }
    }
    CHECK(worst < 1e-4, "per-head stage with completion %s: differs from the shared-set completion by %g",
          type == SUBQ_KV_F16 ? "f16" : "f32", worst);
    completion_free(ref);
    if (st) st->free(st);
    phi_maps_free(maps);
    kv_cache_free(&kv);
    free(q);
    free(out);
}

/* cos(a, b) over ds values */
static double cos_ds(const float *a, const float *b, int ds) {
    double d = 0, na = 0, nb = 0;
    for (int c = 0; c < ds; c++) d += (double)a[c] * b[c], na += (double)a[c] * a[c], nb += (double)b[c] * b[c];
    return na > 0 && nb > 0 ? d / sqrt(na * nb) : 0;
}

/* Per-head search: n_qhead query search heads over N_HEAD_KV key search
 * heads of DS dims. Query head h's set is the exact top-K by cosine of
 * search head a = h / (N_HEAD / n_qhead) against key head a / (n_qhead /
 * N_HEAD_KV), brute force here (hnsw: recall >= 0.9 of it); get_keys /
 * put_keys round-trip. */
static void test_search_heads(subq_selector_kind kind, int n_qhead) {
    enum { DS = 8, N = 500 };
    uint64_t rng = rng_seed(40 + n_qhead + kind);
    selector_env env = {.layer = LAYER, .n_head = N_HEAD, .n_head_kv = N_HEAD_KV, .head_dim = HD};
    selector_params p;
    selector_params_default(&p, kind, DS);
    p.search_heads = N_HEAD_KV, p.search_qheads = n_qhead;
    selector *s, *twin;
    subq_error err = {0};
    CHECK(selector_new(&p, &env, &s, &err) == SUBQ_OK && selector_per_head(s), "per-head %s: %s",
          selector_kind_name(kind), err.msg);
    CHECK(selector_new(&p, &env, &twin, &err) == SUBQ_OK, "per-head twin: %s", err.msg);
    float *keys = malloc((size_t)N * N_HEAD_KV * DS * sizeof(float)), qs[N_HEAD * DS];
    for (int i = 0; i < N * N_HEAD_KV * DS; i++) keys[i] = rng_normal(&rng);
    CHECK(selector_append(s, keys, N, 0, &err) == SUBQ_OK, "append: %s", err.msg);
    /* the stored form back out, into a twin that must answer the same */
    float *stored = malloc((size_t)N * N_HEAD_KV * DS * sizeof(float));
    CHECK(selector_get_keys(s, N, stored, &err) == SUBQ_OK && selector_put_keys(twin, stored, N, 0, &err) == SUBQ_OK,
          "get/put keys: %s", err.msg);
    int32_t out[N_HEAD * 64], out2[N_HEAD * 64];
    int n_out[N_HEAD], n_out2[N_HEAD], bad = 0, differ = 0;
    double have[64], want[N], hit = 0, total = 0;
    for (int it = 0; it < 20; it++) {
        for (int i = 0; i < n_qhead * DS; i++) qs[i] = rng_normal(&rng);
        select_mask m = {.n_slots = N, .ex0_lo = 0, .ex0_hi = 4, .ex1_lo = N - 16, .ex1_hi = N};
        const int k = 1 + (int)(rng_next_u64(&rng) % 64);
        CHECK(selector_query_heads(s, qs, NULL, k, &m, out, n_out) == 0, "query_heads failed");
        CHECK(selector_query_heads(twin, qs, NULL, k, &m, out2, n_out2) == 0, "query_heads failed");
        for (int h = 0; h < N_HEAD; h++) {
            const int a = h / (N_HEAD / n_qhead), b = a / (n_qhead / N_HEAD_KV);
            int ne = 0;
            for (int j = 0; j < N; j++)
                if (select_mask_allows(&m, j)) want[ne++] = cos_ds(qs + a * DS, keys + ((size_t)j * N_HEAD_KV + b) * DS, DS);
            bad += n_out[h] != (k < ne ? k : ne);
            for (int i = 0; i < n_out[h]; i++) {
                bad += !select_mask_allows(&m, out[h * k + i]);
                have[i] = cos_ds(qs + a * DS, keys + ((size_t)out[h * k + i] * N_HEAD_KV + b) * DS, DS);
            }
            differ += n_out[h] != n_out2[h] || memcmp(out + h * k, out2 + h * k, (size_t)n_out[h] * sizeof(int32_t));
            if (kind == SUBQ_SELECT_EXACT) {
                bad += same_scores(have, n_out[h], want, ne);
                continue;
            }
            /* hnsw: the share of the exact top-k scores it returns */
            qsort(want, (size_t)ne, sizeof(double), cmp_desc);
            for (int i = 0; i < n_out[h]; i++) hit += have[i] >= want[k - 1] - 1e-6;
            total += k;
        }
    }
    const char *name = selector_kind_name(kind);
    CHECK(bad == 0, "per-head %s (%d query heads): %d differences from brute force", name, n_qhead, bad);
    CHECK(kind == SUBQ_SELECT_EXACT || hit / total >= 0.9, "per-head %s: recall %.3f < 0.9", name, hit / total);
    CHECK(differ == 0, "per-head %s: the index rebuilt from get_keys answers otherwise (%d sets)", name, differ);
    selector_free(s);
    selector_free(twin);
    free(keys);
    free(stored);
}

int main(void) {
    test_search_heads(SUBQ_SELECT_EXACT, N_HEAD);
    test_search_heads(SUBQ_SELECT_EXACT, N_HEAD_KV);
    test_search_heads(SUBQ_SELECT_HNSW, N_HEAD);
    test_quest_heads(SUBQ_KV_F32, 16, 5);
    test_quest_heads(SUBQ_KV_F16, 16, 6);
    test_quest_heads(SUBQ_KV_F32, 7, 7); /* partial last page */
    test_oracles(SUBQ_KV_F32, 8);
    test_oracles(SUBQ_KV_F16, 9);
    test_stage(SUBQ_KV_F32, 0);
    test_stage(SUBQ_KV_F16, 0);
    test_stage(SUBQ_KV_F32, 1);
    test_stage(SUBQ_KV_F16, 1);
    test_stage_complete(SUBQ_KV_F32);
    test_stage_complete(SUBQ_KV_F16);
    return test_summary();
}
