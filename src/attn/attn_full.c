/* Full (dense) causal attention: the reference every sparse stage is
 * measured against. Small batches (decode) stream each KV head's keys once
 * for all the query heads that share it (GQA); large batches (prefill) use
 * sgemm for Q K^T and P V per KV head. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn/attn.h"
#include "base/blas.h"
#include "base/error.h"
#include "kernels/kernels.h"

/* Batches at least this large go through sgemm. */
#define GEMM_MIN_TOKENS 16
/* Cap on the score block of the sgemm path, in floats (64 MiB). */
#define SCORE_BLOCK_FLOATS (16 << 20)

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
 * it is f32, else converted into `scratch`. */
static const float *head_rows_f32(const kv_cache *kv, const void *base, int n, float *scratch) {
    if (kv->type == SUBQ_KV_F32) return base;
    dequant_row(GGML_TYPE_F16, base, scratch, (int64_t)n * kv->head_dim);
    return scratch;
}

/* Prefill: for each KV head, with Q_g the queries of its g heads stacked
 * (row r = i*T + t), S = scale Q_g K^T, mask ineligible keys, row softmax,
 * O = S V. Rows are processed in blocks so S stays bounded. */
static subq_status full_forward_gemm(const attn_step *st, const kv_cache *kv, subq_error *err) {
    const int g = st->n_head / st->n_head_kv, hd = st->head_dim, T = st->n_tokens;
    const int n_keys = st->slot0 + T, rows = g * T;
    int block = SCORE_BLOCK_FLOATS / n_keys;
    if (block < 1) block = 1;
    if (block > rows) block = rows;
    int need_conv = kv->type != SUBQ_KV_F32;
    float *Q = malloc((size_t)rows * hd * sizeof(float));
    float *O = malloc((size_t)rows * hd * sizeof(float));
    float *S = malloc((size_t)block * n_keys * sizeof(float));
    float *Kf = need_conv ? malloc((size_t)n_keys * hd * sizeof(float)) : NULL;
    float *Vf = need_conv ? malloc((size_t)n_keys * hd * sizeof(float)) : NULL;
    subq_status s = SUBQ_OK;
    if (!Q || !O || !S || (need_conv && (!Kf || !Vf))) {
        s = subq_fail(err, SUBQ_ERR_NOMEM, "out of memory for prefill attention (%d x %d scores)", block, n_keys);
        goto done;
    }
    for (int kh = 0; kh < st->n_head_kv; kh++) {
        const float *K = head_rows_f32(kv, kv_cache_key(kv, st->layer, kh, 0), n_keys, Kf);
        const float *V = head_rows_f32(kv, kv_cache_value(kv, st->layer, kh, 0), n_keys, Vf);
        for (int i = 0; i < g; i++)
            for (int t = 0; t < T; t++)
                memcpy(Q + ((size_t)i * T + t) * hd, st->q + (size_t)t * st->n_head * hd + (size_t)(kh * g + i) * hd,
                       (size_t)hd * sizeof(float));
        for (int r0 = 0; r0 < rows; r0 += block) {
            int nr = rows - r0 < block ? rows - r0 : block;
            blas_sgemm(st->n_threads, 0, 1, nr, n_keys, hd, st->scale, Q + (size_t)r0 * hd, hd, K, hd, 0.0f, S,
                       n_keys);
#pragma omp parallel for num_threads(st->n_threads) schedule(static)
            for (int r = 0; r < nr; r++) {
                int t = (r0 + r) % T, slot = st->slot0 + t, seg = kv->seg[slot];
                float *row = S + (size_t)r * n_keys;
                for (int j = 0; j < n_keys; j++)
                    if (j > slot || kv->seg[j] != seg) row[j] = -INFINITY;
                softmax_inplace(row, n_keys);
            }
            blas_sgemm(st->n_threads, 0, 0, nr, hd, n_keys, 1.0f, S, n_keys, V, hd, 0.0f, O + (size_t)r0 * hd, hd);
        }
        for (int i = 0; i < g; i++)
            for (int t = 0; t < T; t++)
                memcpy(st->out + (size_t)t * st->n_head * hd + (size_t)(kh * g + i) * hd, O + ((size_t)i * T + t) * hd,
                       (size_t)hd * sizeof(float));
    }
done:
    free(Q);
    free(O);
    free(S);
    free(Kf);
    free(Vf);
    return s;
}

static subq_status full_forward(attn_stage *self, const attn_step *st, const kv_cache *kv, subq_error *err) {
    (void)self;
    if (st->n_tokens >= GEMM_MIN_TOKENS) return full_forward_gemm(st, kv, err);
    return full_forward_rows(st, kv, err);
}

static attn_stage full_stage = {"full", full_forward, NULL, NULL, NULL};

attn_stage *attn_full_stage(void) { return &full_stage; }
