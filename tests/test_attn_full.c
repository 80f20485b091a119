/* Dense attention (attn_full_stage) against a double-loop softmax over the
 * values the KV cache holds, in every KV type:
 *   - decode batches (1 and 3 tokens: the per-chunk partials merged across
 *     threads) and a prefill batch (the sgemm path);
 *   - contexts longer than one decode chunk, two documents (the second
 *     starting inside a chunk), so partials with no eligible key occur;
 *   - GQA groups of 1, 2 and 3 query heads, 1 and 2 threads;
 *   - attention over an explicit set of slots (attn_group_over_slots, the
 *     sparse path): sets of a few rows and of more rows than one copied
 *     block or one prefetch window, in scattered order;
 *   - a sparse prefill batch (attn_batch with a range per query and extra
 *     slots): scattered extra slots, fillers (-1) among them, more of them
 *     than one copied block, under one softmax with the range;
 *   - a sliding window (wider than a decode chunk) with soft-capped scores
 *     (gemma2's c tanh(x / c)), in decode and prefill;
 *   - a sliding layer whose cache keeps only window + batch rows (a ring),
 *     filled batch by batch as the forward does, past several wraps, each
 *     step's keys compared as stored before later ones overwrote them.
 * Reference: for query t at slot s and head h (KV head h / g),
 *   out = sum_j e^(x_j - max x) v_j / sum_j e^(x_j - max x),
 *   x_j = scale q.k_j over slots j <= s of s's document (and j > s - window
 *   when the step slides; x_j <- c tanh(x_j / c) when capped), in double, with q
 *   quantised per key block as kernels.h specifies where the kernels do so
 *   (decode batches on q8_0 / q4_0 keys). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn/attn.h"
#include "attn/attn_far.h"
#include "kv/kv_file.h"
#include "kernels/kernels.h"
#include "base/rng.h"
#include "test_util.h"

static void reference(const kv_cache *kv, int layer, const attn_step *st, const float *kf, const float *vf,
                      int quant_q, double *want) {
    const int hd = st->head_dim, g = st->n_head / st->n_head_kv, n_ctx = kv->n_ctx;
    double *x = malloc((size_t)n_ctx * sizeof(double)), *q = malloc((size_t)hd * sizeof(double));
    double *qerr = malloc((size_t)hd * sizeof(double));
    for (int t = 0; t < st->n_tokens; t++) {
        const int slot = st->slot0 + t;
        for (int h = 0; h < st->n_head; h++) {
            const int kh = h / g;
            const float *qf = st->q + ((size_t)t * st->n_head + h) * hd;
            for (int c = 0; c < hd; c++) q[c] = qf[c];
            if (quant_q) test_quantised_query(qf, hd, KV_QBLOCK(hd), q, qerr);
            double mx = -INFINITY, z = 0;
            for (int j = 0; j <= slot; j++) {
                x[j] = -INFINITY;
                if (kv->seg[j] != kv->seg[slot] || (st->window > 0 && slot - j >= st->window)) continue;
                double d = 0;
                for (int c = 0; c < hd; c++) d += q[c] * kf[(((size_t)layer * st->n_head_kv + kh) * n_ctx + j) * hd + c];
                x[j] = st->scale * d;
                if (st->softcap > 0) x[j] = st->softcap * tanh(x[j] / st->softcap);
                mx = x[j] > mx ? x[j] : mx;
            }
            double *o = want + ((size_t)t * st->n_head + h) * hd;
            memset(o, 0, (size_t)hd * sizeof(double));
            for (int j = 0; j <= slot; j++) {
                if (x[j] == -INFINITY) continue;
                const double e = exp(x[j] - mx);
                z += e;
                for (int c = 0; c < hd; c++) o[c] += e * vf[(((size_t)layer * st->n_head_kv + kh) * n_ctx + j) * hd + c];
            }
            for (int c = 0; c < hd; c++) o[c] /= z;
        }
    }
    free(x), free(q), free(qerr);
}

/* attn_group_over_slots over n scattered slots of KV head kh against the
 * same double-loop softmax restricted to those slots; the worst error
 * relative to max |out|. */
static double check_slots(const kv_cache *kv, int layer, int kh, int g, int hd, const float *kf, const float *vf, int n,
                          float cap, uint64_t *rng) {
    int *slots = malloc((size_t)n * sizeof(int));
    float *q = malloc((size_t)g * hd * sizeof(float)), *out = malloc((size_t)g * hd * sizeof(float));
    float *scores = malloc((size_t)g * n * sizeof(float));
    double *qd = malloc((size_t)hd * sizeof(double)), *qerr = malloc((size_t)hd * sizeof(double));
    double *x = malloc((size_t)n * sizeof(double)), *o = malloc((size_t)hd * sizeof(double));
    for (int j = 0; j < n; j++) slots[j] = (int)((uint64_t)j * 7919 % (uint64_t)kv->n_ctx); /* distinct: 7919 is a prime above n_ctx */
    for (int i = 0; i < g * hd; i++) q[i] = (float)rng_normal(rng);
    const float scale = 1.0f / sqrtf((float)hd);
    attn_group_over_slots(kv, layer, kh, g, q, scale, cap, slots, n, NULL, NULL, scores, out);
    double worst = 0;
    for (int i = 0; i < g; i++) {
        for (int c = 0; c < hd; c++) qd[c] = q[(size_t)i * hd + c];
        if (kv->type >= SUBQ_KV_Q8_0) test_quantised_query(q + (size_t)i * hd, hd, KV_QBLOCK(hd), qd, qerr);
        double mx = -INFINITY, z = 0, e = 0, mag = 0;
        for (int j = 0; j < n; j++) {
            const float *k = kf + (((size_t)layer * kv->n_head_kv + kh) * kv->n_ctx + slots[j]) * hd;
            double d = 0;
            for (int c = 0; c < hd; c++) d += qd[c] * k[c];
            x[j] = scale * d;
            if (cap > 0) x[j] = cap * tanh(x[j] / cap);
            mx = x[j] > mx ? x[j] : mx;
        }
        memset(o, 0, (size_t)hd * sizeof(double));
        for (int j = 0; j < n; j++) {
            const float *v = vf + (((size_t)layer * kv->n_head_kv + kh) * kv->n_ctx + slots[j]) * hd;
            const double w = exp(x[j] - mx);
            z += w;
            for (int c = 0; c < hd; c++) o[c] += w * v[c];
        }
        for (int c = 0; c < hd; c++) {
            e = fmax(e, fabs(out[(size_t)i * hd + c] - o[c] / z));
            mag = fmax(mag, fabs(o[c] / z));
        }
        worst = fmax(worst, e / (mag + 1e-6));
    }
    free(slots), free(q), free(out), free(scores), free(qd), free(qerr), free(x), free(o);
    return worst;
}

/* attn_batch as sparse prefill calls it: T queries from slot0 (inside the
 * second document, from doc1), query t over the range [lo_t, slot0 + t]
 * with lo_t = slot0 + t - 9 (or the document start) and n_x extra slots
 * scattered over [doc1, lo_t) in no order, a filler (-1) every 7th entry.
 * Reference: the double-loop softmax over the range and the extra slots
 * together, with q quantised for the extra slots on q8_0 / q4_0 keys (they
 * are scored as a decode step scores its rows; the range by sgemm). The
 * extra slots are one list a token (lists 0), one a KV head for its g query
 * heads (1) or one a query head (2: per-head sets), drawn alike. Returns the
 * worst error relative to max |out|. */
static double check_extras(kv_cache *kv, int layer, int n_head_kv, int g, int hd, const float *kf, const float *vf,
                           int doc1, int T, int n_x, int n_threads, int lists, uint64_t *rng) {
    const int n_head = n_head_kv * g, slot0 = kv->n_ctx - T, eh = lists == 2 ? n_head : lists == 1 ? n_head_kv : 1;
    int32_t *lo = malloc((size_t)T * sizeof(int32_t)), *extra = malloc((size_t)T * eh * n_x * sizeof(int32_t));
    char *used = malloc((size_t)kv->n_ctx);
    float *q = malloc((size_t)T * n_head * hd * sizeof(float)), *out = malloc((size_t)T * n_head * hd * sizeof(float));
    double *x = malloc((size_t)kv->n_ctx * sizeof(double)), *qd = malloc((size_t)hd * sizeof(double));
    double *qx = malloc((size_t)hd * sizeof(double)), *qerr = malloc((size_t)hd * sizeof(double));
    double *o = malloc((size_t)hd * sizeof(double)), worst = 0;
    for (int i = 0; i < T * n_head * hd; i++) q[i] = (float)rng_normal(rng);
    for (int t = 0; t < T; t++) {
        lo[t] = slot0 + t - 9 > doc1 ? slot0 + t - 9 : doc1;
        for (int l = 0; l < eh; l++) {
            memset(used, 0, (size_t)kv->n_ctx);
            for (int e = 0; e < n_x; e++) {
                int32_t j = -1;
                if (e % 7 != 3 && lo[t] > doc1)
                    do j = doc1 + (int32_t)(rng_next_u64(rng) % (uint64_t)(lo[t] - doc1)); while (used[j] && lo[t] - doc1 > e);
                if (j >= 0 && used[j]) j = -1;
                if (j >= 0) used[j] = 1;
                extra[((size_t)t * eh + l) * n_x + e] = j;
            }
        }
    }
    attn_step st = {.layer = layer, .n_tokens = T, .slot0 = slot0, .n_head = n_head, .n_head_kv = n_head_kv,
                    .head_dim = hd, .scale = 1.0f / sqrtf((float)hd), .q = q, .out = out, .n_threads = n_threads};
    subq_error err = {0};
    CHECK(attn_batch(&st, kv, lo, extra, n_x, eh, &err) == SUBQ_OK, "attn_batch with extra slots: %s", err.msg);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < n_head; h++) {
            const int kh = h / g, slot = slot0 + t;
            const float *qf = q + ((size_t)t * n_head + h) * hd;
            for (int c = 0; c < hd; c++) qd[c] = qx[c] = qf[c];
            if (kv->type >= SUBQ_KV_Q8_0) test_quantised_query(qf, hd, KV_QBLOCK(hd), qx, qerr);
            memset(used, 0, (size_t)kv->n_ctx);
            for (int j = lo[t]; j <= slot; j++) used[j] = 1;
            const int32_t *ex = extra + ((size_t)t * eh + (lists == 2 ? h : lists == 1 ? kh : 0)) * n_x;
            for (int e = 0; e < n_x; e++)
                if (ex[e] >= 0) used[ex[e]] = 2;
            double mx = -INFINITY, z = 0, err_max = 0, mag = 0;
            for (int j = 0; j <= slot; j++) {
                if (!used[j]) continue;
                const float *k = kf + (((size_t)layer * n_head_kv + kh) * kv->n_ctx + j) * hd;
                const double *qq = used[j] == 2 ? qx : qd;
                double d = 0;
                for (int c = 0; c < hd; c++) d += qq[c] * k[c];
                x[j] = st.scale * d;
                mx = x[j] > mx ? x[j] : mx;
            }
            memset(o, 0, (size_t)hd * sizeof(double));
            for (int j = 0; j <= slot; j++) {
                if (!used[j]) continue;
                const float *v = vf + (((size_t)layer * n_head_kv + kh) * kv->n_ctx + j) * hd;
                const double w = exp(x[j] - mx);
                z += w;
                for (int c = 0; c < hd; c++) o[c] += w * v[c];
            }
            for (int c = 0; c < hd; c++) {
                err_max = fmax(err_max, fabs(out[((size_t)t * n_head + h) * hd + c] - o[c] / z));
                mag = fmax(mag, fabs(o[c] / z));
            }
            worst = fmax(worst, err_max / (mag + 1e-6));
        }
    free(lo), free(extra), free(used), free(q), free(out), free(x), free(qd), free(qx), free(qerr), free(o);
    return worst;
}

/* One cache of n_ctx slots, two layers (the second is the one attended, so
 * layer offsets are exercised), documents [0, doc1) and [doc1, n_ctx). */
/* file: the cache in a KV file, slot-major (a slot's rows of every head
 * side by side), whose decode reads each block of slots for every head;
 * slot_major: the cache in memory, its attended layer laid out so
 * (kv_cache_set_layout, as for a sparse layer), the other head-major */
static void check(subq_kv_type type, int n_head_kv, int g, int hd, int n_ctx, int doc1, const char *file,
                  int slot_major) {
    static const char *tn[] = {"f32", "f16", "q8_0", "q4_0"};
    const int L = 2, layer = 1, n_head = n_head_kv * g, row = n_head_kv * hd;
    subq_error err = {0};
    kv_cache kv;
    kv_file *f = NULL;
    const kv_file_geometry geom = {.model_fingerprint = 1, .kv_type = (uint32_t)type, .n_layer = L,
                                   .n_head_kv = (uint32_t)n_head_kv, .head_dim = (uint32_t)hd, .n_ctx = (uint32_t)n_ctx,
                                   .n_vocab = 1, .row_bytes = kernels_kv_row_bytes(type, hd)};
    if (file) remove(file);
    if (file ? kv_file_open(file, &geom, 0, &f, &err) || kv_cache_init_file(&kv, f, &err)
             : kv_cache_init(&kv, L, n_head_kv, hd, n_ctx, type, &err)) {
        CHECK(0, "kv_cache_init %s hd %d%s: %s", tn[type], hd, file ? " (file)" : "", err.msg);
        return;
    }
    if (slot_major) {
        kv_cache_set_layout(&kv, (const unsigned char[]){1, 0});
        CHECK(kv_cache_rows_adjacent(&kv, 0) && !kv_cache_rows_adjacent(&kv, layer), "layout: layer 1 slot-major");
    }
    uint64_t rng = rng_seed(5 + (uint64_t)type * 131 + (uint64_t)hd);
    float *k = malloc((size_t)n_ctx * row * sizeof(float)), *v = malloc((size_t)n_ctx * row * sizeof(float));
    for (int l = 0; l < L; l++) {
        /* keys of varied scale so some scores dominate */
        for (size_t i = 0; i < (size_t)n_ctx * row; i++) {
            k[i] = (float)(rng_normal(&rng) * (1.0 + (double)(i / hd % 7)));
            v[i] = (float)rng_normal(&rng);
        }
        kv_cache_store(&kv, l, 0, n_ctx, k, v, NULL);
    }
    for (int j = 0; j < n_ctx; j++) {
        kv.seg[j] = j < doc1 ? 0 : 1;
        kv.pos[j] = j < doc1 ? j : j - doc1;
    }
    kv.n_used = n_ctx;
    /* the values the cache holds, as floats: [layer][kv head][slot][hd] */
    float *kf = malloc((size_t)L * n_head_kv * n_ctx * hd * sizeof(float));
    float *vf = malloc((size_t)L * n_head_kv * n_ctx * hd * sizeof(float));
    for (int l = 0; l < L; l++)
        for (int h = 0; h < n_head_kv; h++)
            for (int j = 0; j < n_ctx; j++) {
                kv_cache_row_f32(&kv, kv_cache_key(&kv, l, h, j), kf + (((size_t)l * n_head_kv + h) * n_ctx + j) * hd);
                kv_cache_row_f32(&kv, kv_cache_value(&kv, l, h, j), vf + (((size_t)l * n_head_kv + h) * n_ctx + j) * hd);
            }
    /* batches: decode of 1 and 3 tokens at the end, 1 token right after the
     * second document starts, a prefill batch of 20, and one of 300 across
     * the documents (its later query blocks score the second one only) */
    const int batches[][2] = {{1, n_ctx - 1}, {3, n_ctx - 3}, {1, doc1}, {20, n_ctx - 20}, {300, doc1 - 100}};
    /* plain, and a sliding window of 1100 keys (past one decode chunk) with scores capped at 2 */
    const int windows[] = {0, 1100};
    const float caps[] = {0.0f, 2.0f};
    double worst = 0;
    for (int b = 0; b < 10; b++)
        for (int nt = 1; nt <= 2; nt++) {
            const int T = batches[b % 5][0], var = b / 5;
            float *q = malloc((size_t)T * n_head * hd * sizeof(float)), *out = malloc((size_t)T * n_head * hd * sizeof(float));
            double *want = malloc((size_t)T * n_head * hd * sizeof(double));
            for (int i = 0; i < T * n_head * hd; i++) q[i] = (float)rng_normal(&rng);
            attn_step st = {.layer = layer, .n_tokens = T, .slot0 = batches[b % 5][1], .n_head = n_head,
                            .n_head_kv = n_head_kv, .head_dim = hd, .scale = 1.0f / sqrtf((float)hd),
                            .softcap = caps[var], .window = windows[var], .q = q, .out = out, .n_threads = nt};
            attn_stage *full = attn_full_stage();
            subq_status s = full->forward(full, &st, &kv, &err);
            CHECK(!s, "%s forward: %s", tn[type], err.msg);
            /* decode batches on quantised keys score a quantised query (kernels.h); the prefill path does not */
            reference(&kv, layer, &st, kf, vf, type >= SUBQ_KV_Q8_0 && T < 16, want);
            for (int i = 0; i < T * n_head; i++) {
                double e = 0, mag = 0;
                for (int c = 0; c < hd; c++) {
                    e = fmax(e, fabs(out[(size_t)i * hd + c] - want[(size_t)i * hd + c]));
                    mag = fmax(mag, fabs(want[(size_t)i * hd + c]));
                }
                worst = fmax(worst, e / (mag + 1e-6));
            }
            free(q), free(out), free(want);
        }
    CHECK(worst < 2e-5, "%s H_kv %d g %d hd %d ctx %d: worst error relative to max |out| %.2e", tn[type], n_head_kv, g,
          hd, n_ctx, worst);
    printf("%s H_kv %d g %d hd %d ctx %d (doc at %d)%s: %.2e\n", tn[type], n_head_kv, g, hd, n_ctx, doc1,
           file ? " in a file" : slot_major ? " slot-major" : "", worst);
    /* slot sets of 5 rows and of 700 (more than a 32 KiB block of f32 rows of 64 and the 256-row window) */
    double worst_set = 0;
    for (int n = 5; n <= 700; n += 695)
        for (int kh = 0; kh < n_head_kv; kh++)
            for (int var = 0; var < 2; var++)
                worst_set = fmax(worst_set, check_slots(&kv, layer, kh, g, hd, kf, vf, n < n_ctx ? n : n_ctx, caps[var], &rng));
    CHECK(worst_set < 2e-5, "%s H_kv %d g %d hd %d: slot sets, worst error relative to max |out| %.2e", tn[type],
          n_head_kv, g, hd, worst_set);
    printf("%s H_kv %d g %d hd %d: slot sets %.2e\n", tn[type], n_head_kv, g, hd, worst_set);
    /* a sparse prefill batch: 40 queries with 9 and with 300 extra slots
     * (more than one 32 KiB block of f32 rows of 64), on 1 and 2 threads,
     * one list a token, one a KV head and one a query head */
    double worst_x = 0;
    for (int n_x = 9; n_x <= 300; n_x += 291)
        for (int nt = 1; nt <= 2; nt++)
            for (int ph = 0; ph < 3; ph++)
                worst_x = fmax(worst_x, check_extras(&kv, layer, n_head_kv, g, hd, kf, vf, doc1, 40, n_x, nt, ph, &rng));
    CHECK(worst_x < 2e-5, "%s H_kv %d g %d hd %d: prefill with extra slots, worst error relative to max |out| %.2e",
          tn[type], n_head_kv, g, hd, worst_x);
    printf("%s H_kv %d g %d hd %d: prefill with extra slots %.2e\n", tn[type], n_head_kv, g, hd, worst_x);
    free(k), free(v), free(kf), free(vf);
    kv_cache_free(&kv);
}

/* A sliding layer (window W) in a ring of W + B rows, streamed in batches
 * of up to B tokens as the forward stores and attends them: every step
 * against the reference over the rows each slot held when stored. */
static void check_ring(subq_kv_type type) {
    static const char *tn[] = {"f32", "f16", "q8_0", "q4_0"};
    enum { L = 2, LAYER = 1, H = 2, G = 2, HD = 32, W = 1100, B = 300, N_CTX = 4000 };
    const int row = H * HD, windows[L] = {0, W};
    subq_error err = {0};
    kv_cache kv;
    if (kv_cache_init_windows(&kv, L, H, HD, N_CTX, type, windows, B, &err)) {
        CHECK(0, "ring cache %s: %s", tn[type], err.msg);
        return;
    }
    CHECK(kv.layers[0].ring == N_CTX && kv.layers[LAYER].ring == W + B, "%s: rings %d, %d", tn[type],
          kv.layers[0].ring, kv.layers[LAYER].ring);
    CHECK(kv_cache_held_bytes(&kv) == kv_cache_bytes(L, H, HD, N_CTX, type, windows, B) &&
              kv_cache_held_bytes(&kv) < kv_cache_bytes(L, H, HD, N_CTX, type, NULL, B),
          "%s: ring bytes", tn[type]);
    uint64_t rng = rng_seed(77 + (uint64_t)type);
    float *kf = calloc((size_t)L * H * N_CTX * HD, sizeof(float)), *vf = calloc((size_t)L * H * N_CTX * HD, sizeof(float));
    float *k = malloc((size_t)B * row * sizeof(float)), *v = malloc((size_t)B * row * sizeof(float));
    float *q = malloc((size_t)B * H * G * HD * sizeof(float)), *out = malloc((size_t)B * H * G * HD * sizeof(float));
    double *want = malloc((size_t)B * H * G * HD * sizeof(double)), worst = 0;
    const int sizes[] = {B, 1, 3, 20, 17, B, 2, 250, 1, B, 64};
    int slot0 = 0;
    for (int step = 0; slot0 < N_CTX - B; step++) {
        const int T = sizes[step % 11];
        for (int i = 0; i < T * row; i++) k[i] = (float)rng_normal(&rng) * (1.0f + (float)(i / HD % 5)), v[i] = (float)rng_normal(&rng);
        CHECK(kv_cache_store(&kv, LAYER, slot0, T, k, v, &err) == SUBQ_OK, "%s: store: %s", tn[type], err.msg);
        for (int t = 0; t < T; t++) {
            kv.pos[slot0 + t] = slot0 + t, kv.seg[slot0 + t] = 0;
            for (int h = 0; h < H; h++) { /* the rows as stored, before a later batch overwrites them */
                const size_t at = (((size_t)LAYER * H + h) * N_CTX + slot0 + t) * HD;
                kv_cache_row_f32(&kv, kv_cache_key(&kv, LAYER, h, slot0 + t), kf + at);
                kv_cache_row_f32(&kv, kv_cache_value(&kv, LAYER, h, slot0 + t), vf + at);
            }
        }
        kv.n_used = slot0 + T;
        for (int i = 0; i < T * H * G * HD; i++) q[i] = (float)rng_normal(&rng);
        attn_step st = {.layer = LAYER, .n_tokens = T, .slot0 = slot0, .n_head = H * G, .n_head_kv = H,
                        .head_dim = HD, .scale = 1.0f / sqrtf((float)HD), .window = W, .q = q, .out = out,
                        .n_threads = 1 + step % 2};
        attn_stage *full = attn_full_stage();
        CHECK(!full->forward(full, &st, &kv, &err), "%s ring forward: %s", tn[type], err.msg);
        reference(&kv, LAYER, &st, kf, vf, type >= SUBQ_KV_Q8_0 && T < 16, want);
        for (int i = 0; i < T * H * G; i++) {
            double e = 0, mag = 0;
            for (int c = 0; c < HD; c++) {
                e = fmax(e, fabs(out[(size_t)i * HD + c] - want[(size_t)i * HD + c]));
                mag = fmax(mag, fabs(want[(size_t)i * HD + c]));
            }
            worst = fmax(worst, e / (mag + 1e-6));
        }
        slot0 += T;
    }
    CHECK(worst < 2e-5, "%s ring: worst error relative to max |out| %.2e", tn[type], worst);
    /* slot n - ring was overwritten: the next query must still see its window */
    CHECK(kv.layers[LAYER].held_lo == slot0 - (W + B) && kv_cache_min_keep(&kv) == slot0 - (W + B) + W - 1,
          "%s ring: held from %d, keep at least %d", tn[type], kv.layers[LAYER].held_lo, kv_cache_min_keep(&kv));
    CHECK(kv_cache_store(&kv, LAYER, slot0, B + 2, k, k, &err) == SUBQ_ERR_ARG, "%s: a batch wider than the ring's slack",
          tn[type]);
    printf("%s ring of %d rows (window %d), %d slots streamed: %.2e\n", tn[type], W + B, W, slot0, worst);
    free(kf), free(vf), free(k), free(v), free(q), free(out), free(want);
    kv_cache_free(&kv);
}

/* attn_rope_rotate through the turn tables (angle addition over four
 * 8-bit digits of the shift) against cos and sin of shift * freq[i] in
 * long double, both pair layouts, shifts of every size and sign */
static void check_turns(void) {
    enum { HALF = 32 };
    double freq[HALF];
    for (int i = 0; i < HALF; i++) freq[i] = pow(10000.0, -2.0 * i / (2 * HALF));
    double *turns = malloc(attn_rope_turns_size(HALF) * sizeof(double));
    attn_rope_turns_fill(freq, HALF, turns);
    uint64_t rng = rng_seed(57);
    double worst = 0;
    const int32_t edge[] = {0, 1, -1, 255, 256, -65536, 1048575, INT32_MAX, INT32_MIN + 1, INT32_MIN};
    for (int rep = 0; rep < 400; rep++) {
        const int neox = rep & 1;
        const attn_rope r = {.n_rot = 2 * HALF, .neox = neox, .freq = freq, .turns = turns};
        const int32_t shift = rep < 10 ? edge[rep] : (int32_t)(rng_next_u64(&rng) >> (32 + rep % 31));
        float x[2 * HALF], y[2 * HALF];
        for (int c = 0; c < 2 * HALF; c++) x[c] = y[c] = (float)rng_uniform(&rng) * 2 - 1;
        attn_rope_rotate(&r, y, shift);
        for (int i = 0; i < HALF; i++) {
            const int i0 = neox ? i : 2 * i, i1 = neox ? i + HALF : 2 * i + 1;
            const long double a = (long double)shift * freq[i], c = cosl(a), sn = sinl(a);
            const double e0 = fabs((double)(x[i0] * c - x[i1] * sn) - y[i0]);
            const double e1 = fabs((double)(x[i0] * sn + x[i1] * c) - y[i1]);
            worst = e0 > worst ? e0 : worst;
            worst = e1 > worst ? e1 : worst;
        }
    }
    /* float rounding of the products (|x| <= 1); a turn off by one digit's
     * angle would be off by O(1) */
    CHECK(worst < 1e-6, "turned by the tables: worst error %.2e", worst);
    printf("turns by tables: worst error %.2e\n", worst);
    free(turns);
}

int main(void) {
    for (int t = 0; t < SUBQ_KV_TYPE_COUNT; t++) check_ring((subq_kv_type)t);
    for (int t = 0; t < SUBQ_KV_TYPE_COUNT; t++) {
        check((subq_kv_type)t, 2, 3, 64, 2600, 1500, NULL, 0); /* 3 decode chunks, the second split by the document */
        check((subq_kv_type)t, 1, 2, 8, 2100, 1024, NULL, 0);  /* one KV head: positions split; doc at a chunk edge */
        check((subq_kv_type)t, 3, 1, 32, 900, 300, NULL, 0);   /* one chunk */
        check((subq_kv_type)t, 2, 3, 64, 2600, 1500, "test_attn_full.kv", 0); /* slot-major, blocks of every head */
        check((subq_kv_type)t, 2, 3, 64, 2600, 1500, NULL, 1);                /* the same in memory */
    }
    remove("test_attn_full.kv");
    check_turns();
    /* quantised rows need 32-value blocks, or one block per row of 2..16 */
    subq_error err = {0};
    kv_cache kv;
    CHECK(kv_cache_init(&kv, 1, 1, 48, 16, SUBQ_KV_Q8_0, &err) == SUBQ_ERR_UNSUPPORTED, "q8_0 with heads of 48");
    CHECK(strstr(err.msg, "multiple of 32") != NULL, "message: %s", err.msg);
    CHECK(kv_cache_init(&kv, 1, 1, 12, 16, SUBQ_KV_Q4_0, &err) == SUBQ_ERR_UNSUPPORTED, "q4_0 with heads of 12");
    CHECK(kv_cache_init(&kv, 1, 1, 64, 16, (subq_kv_type)7, &err) == SUBQ_ERR_ARG, "unknown KV type");
    CHECK(kv_cache_init(&kv, 1, 1, KV_MAX_HEAD_DIM + 32, 16, SUBQ_KV_F16, &err) == SUBQ_ERR_UNSUPPORTED,
          "heads wider than KV_MAX_HEAD_DIM");
    CHECK(strstr(err.msg, "at most") != NULL, "message: %s", err.msg);
    /* a slot's document start by bisection, against walking back over
     * random runs of segment ids (one-slot runs and gaps in the ids too) */
    CHECK(!kv_cache_init(&kv, 1, 1, 8, 3000, SUBQ_KV_F32, &err), "cache: %s", err.msg);
    uint64_t rng = rng_seed(31);
    int wrong = 0;
    for (int rep = 0; rep < 20; rep++) {
        int32_t id = (int32_t)(rng_next_u64(&rng) % 3) - 1;
        for (int j = 0; j < kv.n_ctx; j++) {
            if (rng_next_u64(&rng) % (rep % 4 == 0 ? 2 : 300) == 0) id += 1 + (int32_t)(rng_next_u64(&rng) % 3);
            kv.seg[j] = id;
        }
        for (int j = 0; j < kv.n_ctx; j++) {
            int d = j;
            while (d > 0 && kv.seg[d - 1] == kv.seg[j]) d--;
            wrong += kv_cache_doc_start(&kv, j) != d;
        }
    }
    CHECK(wrong == 0, "kv_cache_doc_start: %d slots wrong", wrong);
    kv_cache_free(&kv);
    return test_summary();
}
