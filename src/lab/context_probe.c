/* Public context queries for benchmarks: sizes, where time went, and a
 * synthetic fill that stands in for a long prefill. */
#include <stdlib.h>
#include <string.h>

#include "attn/attn.h"
#include "base/error.h"
#include "base/rng.h"
#include "base/timer.h"
#include "model/context.h"
#include "subq_lab.h"

uint64_t subq_context_decode_kv_bytes(const subq_context *c, int n_keys) {
    const kv_cache *kv = &c->kv;
    uint64_t rows = 0;
    for (int l = 0; l < c->model->hp.n_layer; l++) {
        const int window = c->model->hp.layer[l].window; /* a sliding layer reads its window */
        rows += (uint64_t)attn_stage_rows_attended(c->stages[l], window > 0 && window < n_keys ? window : n_keys);
    }
    return rows * 2 * (uint64_t)kv->n_head_kv * kv->row_bytes;
}

/* sum of the n 64-bit words at p: eight independent sums keep it bound by
 * the loads */
static uint64_t sum_words(const uint64_t *p, size_t n) {
    uint64_t a[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int u = 0; u < 8; u++) a[u] += p[i + u];
    for (; i < n; i++) a[0] += p[i];
    return a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
}

/* 64-bit words of one KV head's used rows of layer l */
static size_t layer_words(const kv_cache *kv, int l) {
    const int rows = kv->n_used < kv->layers[l].ring ? kv->n_used : kv->layers[l].ring;
    return (size_t)rows * kv->row_bytes / sizeof(uint64_t);
}

double subq_context_kv_read_gbs(const subq_context *c, int reps) {
    const kv_cache *kv = &c->kv;
    const int n_items = kv->n_layer * 2 * kv->n_head_kv; /* (layer, keys or values, KV head) */
    /* (a file cache is not timed here) */
    if (kv->n_used == 0 || kv->row_bytes % sizeof(uint64_t) || kv->file) return 0.0;
    double all_words = 0.0; /* a sliding layer's ring holds fewer rows */
    for (int l = 0; l < kv->n_layer; l++)
        all_words += 2.0 * kv->n_head_kv * layer_words(kv, l);
    if (all_words * sizeof(uint64_t) < 64.0 * 1048576) return 0.0; /* times caches, not memory */
    double best = 0.0;
    for (int r = 0; r < reps; r++) {
        uint64_t total = 0;
        const double t0 = time_now_s();
#pragma omp parallel for num_threads(c->n_threads) schedule(static) reduction(+ : total)
        for (int it = 0; it < n_items; it++) {
            const int l = it / (2 * kv->n_head_kv), h = it % kv->n_head_kv, values = it / kv->n_head_kv % 2;
            /* head-major: the head's run of rows; slot-major: as many words of the layer's one run */
            const size_t words = layer_words(kv, l), piece = (size_t)(values * kv->n_head_kv + h);
            const uint64_t *from = (const uint64_t *)kv_cache_key(kv, l, 0, 0) + piece * words;
            if (kv_cache_rows_adjacent(kv, l)) from = kv_cache_row(kv, l, h, values, 0);
            total += sum_words(from, words);
        }
        const double el = time_now_s() - t0, gbs = all_words * sizeof(uint64_t) / el / 1e9;
        volatile uint64_t sink = total; /* the sums are used: they cannot be dropped */
        (void)sink;
        best = gbs > best ? gbs : best;
    }
    return best;
}

/* Random keys and values in [-0.5, 0.5) for slots 0 .. n_past-1 of every
 * layer, positions 0 .. n_past-1, one document: FILL_BLOCK random slots per
 * layer, repeated by copying their stored rows (converting 15 GB of random
 * floats one row at a time took two minutes at 128K; speed does not depend
 * on the values). A file is written as a prefill writes it: with pwrite
 * (kv_cache_store, kv_file_write), not through the mapping. */
#define FILL_BLOCK 4096
static subq_status fill_kv(kv_cache *kv, int n_past, uint64_t seed, subq_error *err) {
    int row = kv->n_head_kv * kv->head_dim, n_rand = n_past < FILL_BLOCK ? n_past : FILL_BLOCK;
    float *k = malloc((size_t)FILL_BLOCK * row * sizeof(float)), *v = malloc((size_t)FILL_BLOCK * row * sizeof(float));
    subq_status s = k && v ? SUBQ_OK : subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    uint64_t rng = rng_seed(seed);
    for (int l = 0; l < kv->n_layer && !s; l++) {
        for (size_t i = 0; i < (size_t)n_rand * row; i++) {
            k[i] = rng_uniform(&rng) - 0.5f;
            v[i] = rng_uniform(&rng) - 0.5f;
        }
        if (kv_cache_is_ring(kv, l)) { /* a sliding layer keeps its last ring slots: store those */
            const kv_layer_rows *L = &kv->layers[l];
            const int piece = n_rand < L->ring - L->window + 1 ? n_rand : L->ring - L->window + 1;
            for (int t0 = n_past > L->ring ? n_past - L->ring : 0; t0 < n_past && !s; t0 += piece)
                s = kv_cache_store(kv, l, t0, n_past - t0 < piece ? n_past - t0 : piece, k, v, err);
            continue;
        }
        s = kv_cache_store(kv, l, 0, n_rand, k, v, err);
        for (int t0 = n_rand; t0 < n_past && !s; t0 += n_rand) {
            const int n = n_past - t0 < n_rand ? n_past - t0 : n_rand;
            if (!kv_cache_rows_adjacent(kv, l)) { /* slot-major: keys and values of n slots are one run */
                void *to = (void *)kv_cache_key(kv, l, 0, t0);
                const size_t bytes = (size_t)n * kv->layers[l].slot_stride;
                if (kv->file) s = kv_file_write(kv->file, to, kv_cache_key(kv, l, 0, 0), bytes, err);
                else memcpy(to, kv_cache_key(kv, l, 0, 0), bytes);
                continue;
            }
            for (int r = 0; r < 2 * kv->n_head_kv && !s; r++) { /* head-major: a run a head and kind */
                const int h = r % kv->n_head_kv, values = r / kv->n_head_kv;
                void *to = (void *)kv_cache_row(kv, l, h, values, t0);
                const void *from = kv_cache_row(kv, l, h, values, 0);
                if (kv->file) s = kv_file_write(kv->file, to, from, (size_t)n * kv->row_bytes, err);
                else memcpy(to, from, (size_t)n * kv->row_bytes);
            }
        }
    }
    for (int t = 0; t < n_past && !s; t++) {
        kv->pos[t] = t;
        kv->seg[t] = 0;
    }
    if (!s) kv->n_used = n_past;
    free(k);
    free(v);
    return s;
}

/* Synthetic search keys shaped more like trained ones: N_CENTRES Gaussian
 * centres per layer, each key a random centre plus N(0, 1) noise (as
 * bench_select's "clustered"). A graph index's search cost depends on the
 * keys' shape where a scan's does not: decoding at 32K on the 4K fixture
 * with its trained projections (d_search 128, K 64), an HNSW search read
 * 106 KB over the keys of a real prompt, 236 KB over these and 590 KB over
 * i.i.d. Gaussian ones (bench/notes/2026-12-04-hnsw-ahead.md). Its recall
 * is higher over these than over that prompt's keys (0.98 against 0.52;
 * bench/notes/2026-12-05-hnsw-real-256k.md). */
enum { N_CENTRES = 256 };

static void clustered_keys(float *ks, int n, int d, const float *centres, uint64_t *rng) {
    for (int t = 0; t < n; t++) {
        const float *c = centres + (size_t)(rng_next_u64(rng) % N_CENTRES) * d;
        for (int j = 0; j < d; j++) ks[(size_t)t * d + j] = c[j] + rng_normal(rng);
    }
}

/* Search keys for slots 0 .. n_past-1 appended to every sparse layer's
 * selector, as a real prefill would have appended them. */
static subq_status fill_selectors(subq_context *c, int n_past, uint64_t seed, subq_error *err) {
    enum { CHUNK = 1024 };
    const int n_layer = c->model->hp.n_layer;
    int failed = 0;
    /* layers are independent indexes: fill them in parallel */
#pragma omp parallel for num_threads(c->n_threads) schedule(dynamic, 1)
    for (int l = 0; l < n_layer; l++) {
        if (!c->stages[l]->state || failed) continue; /* a stage that keeps nothing per slot */
        int d = attn_stage_search_width(c->stages[l]);
        float *ks = d > 0 ? malloc((size_t)CHUNK * d * sizeof(float)) : NULL;
        float *centres = d > 0 ? malloc((size_t)N_CENTRES * d * sizeof(float)) : NULL;
        uint64_t rng = rng_seed(seed + (uint64_t)l);
        subq_error lerr;
        int bad = d > 0 && (!ks || !centres);
        for (int i = 0; !bad && i < N_CENTRES * d; i++) centres[i] = rng_normal(&rng);
        for (int t0 = 0; t0 < n_past && !bad; t0 += CHUNK) {
            int n = n_past - t0 < CHUNK ? n_past - t0 : CHUNK;
            if (d > 0) clustered_keys(ks, n, d, centres, &rng);
            bad = attn_stage_append(c->stages[l], &c->kv, ks, n, t0, &lerr) != SUBQ_OK;
        }
        free(ks);
        free(centres);
        if (bad) {
#pragma omp atomic write
            failed = 1;
        }
    }
    return failed ? subq_fail(err, SUBQ_ERR_NOMEM, "filling the selectors with %d synthetic keys failed", n_past)
                  : SUBQ_OK;
}

subq_status subq_context_fill_synthetic(subq_context *c, int n_past, uint64_t seed, subq_error *err) {
    if (c->kv.n_used != 0) return subq_fail(err, SUBQ_ERR_ARG, "a synthetic fill needs an empty context");
    if (n_past < 0 || n_past > c->kv.n_ctx)
        return subq_fail(err, SUBQ_ERR_RANGE, "cannot fill %d tokens into a context of %d", n_past, c->kv.n_ctx);
    for (int l = 0; l < c->model->hp.n_layer; l++)
        if (attn_stage_has_completion(c->stages[l]))
            return subq_fail(err, SUBQ_ERR_UNSUPPORTED, "a synthetic fill cannot build the completion's summary; "
                             "fill a context without completion maps");
    if (c->kv.file && !c->file_writable)
        return subq_fail(err, SUBQ_ERR_MISMATCH, "the KV file holds tokens of another attention plan: reset the "
                         "context first");
    subq_status s = c->kv.file ? kv_file_will_write(c->kv.file, 0, 0, err) : SUBQ_OK;
    if (s) return s;
    for (int t = 0; t < n_past; t++) c->tok[t] = -1; /* no token ids: a session file refuses them */
    const double t0 = time_now_s();
    kv_cache_clear(&c->kv);
    s = fill_kv(&c->kv, n_past, seed, err);
    c->t_fill_kv_s += time_now_s() - t0;
    if (!s) s = fill_selectors(c, n_past, seed + 2, err);
    c->file_dirty = c->kv.file != NULL;
    return s;
}

subq_status subq_context_kv_evict(subq_context *c, subq_error *err) {
    if (!c->kv.file) return SUBQ_OK;
    subq_status s = context_commit(c, 1, err);
    c->prefetch_left = KV_PREFETCH_STEPS; /* the next steps read from the disk: prefetch their rows */
    return s ? s : kv_file_evict(c->kv.file, err);
}
