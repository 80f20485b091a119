/* Full (dense) causal attention: the reference every sparse stage is
 * measured against. Small batches (decode) stream each KV head's keys once
 * for all the query heads that share it (GQA); large batches (prefill) use
 * sgemm for Q K^T and P V per KV head and block of queries, each block
 * scoring only the keys up to its last query (attn_batch). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn/attn.h"
#include "base/blas.h"
#include "base/error.h"
#include "kernels/kernels.h"

/* Batches at least this large go through sgemm. */
#define GEMM_MIN_TOKENS 16
/* Queries per block of the sgemm path (x the heads of a KV head: rows)... */
#define QUERY_BLOCK 64
/* ... fewer when a block's scores would pass this many floats (16 MiB). */
#define SCORE_BLOCK_FLOATS (4 << 20)

static float dot_key(const kernels *K, const kv_cache *kv, const void *key, const float *q) {
    return kv->type == SUBQ_KV_F16 ? K->dot_f16(q, key, kv->head_dim) : K->dot_f32(q, key, kv->head_dim);
}

static void axpy_value(const kernels *K, const kv_cache *kv, const void *val, float w, float *out) {
    if (kv->type == SUBQ_KV_F16) K->axpy_f16(out, w, val, kv->head_dim);
    else K->axpy_f32(out, w, val, kv->head_dim);
}

/* p_j = exp(s_j - max) / sum exp(s - max) in place; -INFINITY entries get 0;
 * a row with nothing eligible becomes all zeros. */
static void softmax_inplace(float *s, int n) {
    float mx = -INFINITY;
    for (int j = 0; j < n; j++) mx = s[j] > mx ? s[j] : mx;
    if (mx == -INFINITY) {
        memset(s, 0, (size_t)n * sizeof(float));
        return;
    }
    float inv = 1.0f / kernels_get()->exp_shift_sum(s, n, mx);
    for (int j = 0; j < n; j++) s[j] *= inv;
}

void attn_head_over_slots(const kv_cache *kv, int layer, int kv_head, const float *q, float scale,
                          const int *slots, int n, float *scores, float *out) {
    const kernels *K = kernels_get();
    for (int j = 0; j < n; j++) scores[j] = scale * dot_key(K, kv, kv_cache_key(kv, layer, kv_head, slots[j]), q);
    softmax_inplace(scores, n);
    memset(out, 0, (size_t)kv->head_dim * sizeof(float));
    for (int j = 0; j < n; j++)
        if (scores[j] != 0.0f) axpy_value(K, kv, kv_cache_value(kv, layer, kv_head, slots[j]), scores[j], out);
}

/* All g query heads of one KV head for one query over slots 0..n-1 (the KV
 * head's rows are contiguous): each key and value row is loaded once for the
 * g heads (q and out hold g adjacent heads, scores is [g][n] + g scratch).
 *   s_ij = scale q_i.k_j (-inf outside the query's document)
 *   e_ij = exp(s_ij - max_j s_ij),  out_i = sum_j e_ij v_j / sum_j e_ij */
static void attn_group_causal(const kernels *K, const kv_cache *kv, int layer, int kv_head, int g, const float *q,
                              float scale, int n, int seg, float *scores, float *out) {
    const int hd = kv->head_dim, f16 = kv->type == SUBQ_KV_F16;
    const void *keys = kv_cache_key(kv, layer, kv_head, 0), *vals = kv_cache_value(kv, layer, kv_head, 0);
    if (f16) K->scores_f16(q, g, keys, n, hd, scale, scores, n);
    else K->scores_f32(q, g, keys, n, hd, scale, scores, n);
    for (int j = 0; j < n; j++)
        if (kv->seg[j] != seg)
            for (int i = 0; i < g; i++) scores[(size_t)i * n + j] = -INFINITY;
    float *inv = scores + (size_t)g * n;
    for (int i = 0; i < g; i++) {
        float *row = scores + (size_t)i * n, mx = -INFINITY;
        for (int j = 0; j < n; j++) mx = row[j] > mx ? row[j] : mx;
        if (mx == -INFINITY) { /* nothing eligible: zeros */
            memset(row, 0, (size_t)n * sizeof(float));
            inv[i] = 0.0f;
        } else {
            inv[i] = 1.0f / K->exp_shift_sum(row, n, mx);
        }
    }
    memset(out, 0, (size_t)g * hd * sizeof(float));
    if (f16) K->accum_f16(scores, g, n, vals, n, hd, out);
    else K->accum_f32(scores, g, n, vals, n, hd, out);
    for (int i = 0; i < g; i++)
        for (int c = 0; c < hd; c++) out[(size_t)i * hd + c] *= inv[i];
}

static subq_status full_forward_rows(const attn_step *st, const kv_cache *kv, subq_error *err) {
    const int g = st->n_head / st->n_head_kv, hd = st->head_dim;
    const int n_max = st->slot0 + st->n_tokens;
    const int n_items = st->n_tokens * st->n_head_kv;
    const kernels *K = kernels_get();
    int failed = 0;
    /* threads only pay off once there is real work (items x keys x dims) */
    int64_t work = (int64_t)n_items * g * n_max * hd;
#pragma omp parallel num_threads(st->n_threads) if (work >= (1 << 16))
    {
        float *scores = malloc(((size_t)g * n_max + g) * sizeof(float));
        if (!scores) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic, 1)
        for (int it = 0; it < n_items; it++) {
            if (!scores) continue;
            int t = it / st->n_head_kv, kh = it % st->n_head_kv, slot = st->slot0 + t;
            size_t off = (size_t)t * st->n_head * hd + (size_t)kh * g * hd;
            attn_group_causal(K, kv, st->layer, kh, g, st->q + off, st->scale, slot + 1, kv->seg[slot], scores,
                              st->out + off);
        }
        free(scores);
    }
    return failed ? subq_fail(err, SUBQ_ERR_NOMEM, "attention scratch allocation failed") : SUBQ_OK;
}

/* Keys (or values) 0..n-1 of one KV head as f32 rows: the cache itself when
 * it is f32, else converted into `scratch` (in parallel). */
static const float *head_rows_f32(const kv_cache *kv, const void *base, int n, float *scratch, int n_threads) {
    if (kv->type == SUBQ_KV_F32) return base;
    const size_t row = (size_t)kv->head_dim * kv->elem_size;
#pragma omp parallel for num_threads(n_threads) schedule(static) if (n >= 1024)
    for (int j0 = 0; j0 < n; j0 += 256) {
        int j1 = j0 + 256 < n ? j0 + 256 : n;
        dequant_row(GGML_TYPE_F16, (const char *)base + (size_t)j0 * row, scratch + (size_t)j0 * kv->head_dim,
                    (int64_t)(j1 - j0) * kv->head_dim);
    }
    return scratch;
}

/* First slot of the document of each query of the batch (segments are
 * contiguous runs of slots). */
static void doc_starts(const kv_cache *kv, int slot0, int n, int32_t *first) {
    int d = slot0;
    while (d > 0 && kv->seg[d - 1] == kv->seg[slot0]) d--;
    for (int t = 0; t < n; t++) {
        int slot = slot0 + t;
        if (t > 0 && kv->seg[slot] != kv->seg[slot - 1]) d = slot;
        first[t] = d;
    }
}

/* One block of queries: tokens [t0, t1) of one KV head, rows r = (t - t0) g
 * + i for its g query heads, keys [k_lo, slot0 + t1) (K, V: f32 rows from
 * k_lo). S = scale Q K^T by sgemm, each row masked to its own slots, the
 * extra slots scored beside it (E), one softmax over both, O = S V + E V_extra,
 * scaled by 1 / sum at the end. */
typedef struct batch_scratch {
    float *q, *s, *o, *e, *inv;
} batch_scratch;

static void attn_block(const attn_step *st, const kv_cache *kv, int kh, int t0, int t1, int k_lo, const float *K,
                       const float *V, const int32_t *first, const int32_t *extra, int n_extra, batch_scratch *w) {
    const kernels *KS = kernels_get();
    const int g = st->n_head / st->n_head_kv, hd = st->head_dim, rows = (t1 - t0) * g;
    const int n_keys = st->slot0 + t1 - k_lo;
    for (int t = t0; t < t1; t++)
        memcpy(w->q + (size_t)(t - t0) * g * hd, st->q + (size_t)t * st->n_head * hd + (size_t)kh * g * hd,
               (size_t)g * hd * sizeof(float));
    blas_sgemm(1, 0, 1, rows, n_keys, hd, st->scale, w->q, hd, K, hd, 0.0f, w->s, n_keys);
    for (int r = 0; r < rows; r++) {
        const int t = t0 + r / g, a = first[t] - k_lo, b = st->slot0 + t - k_lo; /* valid: [a, b] */
        float *row = w->s + (size_t)r * n_keys, *e = w->e + (size_t)r * n_extra, mx = -INFINITY;
        const float *qr = w->q + (size_t)r * hd;
        for (int x = 0; x < n_extra; x++) {
            int32_t j = extra[(size_t)t * n_extra + x];
            e[x] = j >= 0 ? st->scale * dot_key(KS, kv, kv_cache_key(kv, st->layer, kh, j), qr) : -INFINITY;
            mx = e[x] > mx ? e[x] : mx;
        }
        for (int j = a; j <= b; j++) mx = row[j] > mx ? row[j] : mx;
        memset(row, 0, (size_t)a * sizeof(float));
        memset(row + b + 1, 0, (size_t)(n_keys - b - 1) * sizeof(float));
        float sum = KS->exp_shift_sum(row + a, b - a + 1, mx);
        if (n_extra) sum += KS->exp_shift_sum(e, n_extra, mx);
        w->inv[r] = 1.0f / sum; /* sum >= 1: the query sees itself */
    }
    blas_sgemm(1, 0, 0, rows, hd, n_keys, 1.0f, w->s, n_keys, V, hd, 0.0f, w->o, hd);
    for (int r = 0; r < rows; r++) {
        const int t = t0 + r / g;
        float *o = w->o + (size_t)r * hd, *out = st->out + (size_t)t * st->n_head * hd + (size_t)(kh * g + r % g) * hd;
        for (int x = 0; x < n_extra; x++) {
            int32_t j = extra[(size_t)t * n_extra + x];
            if (j >= 0 && w->e[(size_t)r * n_extra + x] != 0.0f)
                axpy_value(KS, kv, kv_cache_value(kv, st->layer, kh, j), w->e[(size_t)r * n_extra + x], o);
        }
        for (int c = 0; c < hd; c++) out[c] = o[c] * w->inv[r];
    }
}

subq_status attn_batch(const attn_step *st, const kv_cache *kv, const int32_t *lo, const int32_t *extra, int n_extra,
                       subq_error *err) {
    const int g = st->n_head / st->n_head_kv, hd = st->head_dim, T = st->n_tokens, nt = st->n_threads;
    int32_t *first = malloc((size_t)T * sizeof(int32_t));
    if (!first) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory for prefill attention");
    if (lo) memcpy(first, lo, (size_t)T * sizeof(int32_t));
    else doc_starts(kv, st->slot0, T, first);
    int k_lo = st->slot0;
    for (int t = 0; t < T; t++) k_lo = first[t] < k_lo ? first[t] : k_lo;
    const int n_keys = st->slot0 + T - k_lo;
    /* query blocks: enough of them for every thread, score blocks bounded */
    int tb = QUERY_BLOCK, per_thread = (T + nt - 1) / nt;
    if (tb > per_thread) tb = per_thread;
    while (tb > 1 && (int64_t)g * tb * n_keys > SCORE_BLOCK_FLOATS) tb /= 2;
    const int n_blocks = (T + tb - 1) / tb, need_conv = kv->type != SUBQ_KV_F32;
    float *Kf = need_conv ? malloc((size_t)n_keys * hd * sizeof(float)) : NULL;
    float *Vf = need_conv ? malloc((size_t)n_keys * hd * sizeof(float)) : NULL;
    int failed = need_conv && (!Kf || !Vf);
    for (int kh = 0; kh < st->n_head_kv && !failed; kh++) {
        const float *K = head_rows_f32(kv, kv_cache_key(kv, st->layer, kh, k_lo), n_keys, Kf, nt);
        const float *V = head_rows_f32(kv, kv_cache_value(kv, st->layer, kh, k_lo), n_keys, Vf, nt);
#pragma omp parallel num_threads(nt)
        {
            const size_t rows = (size_t)g * tb;
            batch_scratch w = {
                .q = malloc(rows * hd * sizeof(float)), .s = malloc(rows * n_keys * sizeof(float)),
                .o = malloc(rows * hd * sizeof(float)), .e = malloc((rows * n_extra + 1) * sizeof(float)),
                .inv = malloc(rows * sizeof(float)),
            };
            if (!w.q || !w.s || !w.o || !w.e || !w.inv) {
#pragma omp atomic write
                failed = 1;
            }
#pragma omp for schedule(dynamic, 1)
            for (int b = 0; b < n_blocks; b++) {
                int t0 = b * tb, t1 = t0 + tb < T ? t0 + tb : T;
                if (w.q && w.s && w.o && w.e && w.inv) attn_block(st, kv, kh, t0, t1, k_lo, K, V, first, extra, n_extra, &w);
            }
            free(w.q);
            free(w.s);
            free(w.o);
            free(w.e);
            free(w.inv);
        }
    }
    free(first);
    free(Kf);
    free(Vf);
    return failed ? subq_fail(err, SUBQ_ERR_NOMEM, "out of memory for prefill attention (%d x %d scores)", g * tb, n_keys)
                  : SUBQ_OK;
}

static subq_status full_forward(attn_stage *self, const attn_step *st, const kv_cache *kv, subq_error *err) {
    (void)self;
    if (st->n_tokens >= GEMM_MIN_TOKENS) return attn_batch(st, kv, NULL, NULL, 0, err);
    return full_forward_rows(st, kv, err);
}

static attn_stage full_stage = {"full", full_forward, NULL, NULL, NULL};

attn_stage *attn_full_stage(void) { return &full_stage; }
