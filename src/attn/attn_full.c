/* Full (dense) causal attention: the reference every sparse stage is
 * measured against. Small batches (decode) stream each KV head's keys and
 * values once for all the query heads that share it (GQA), in chunks of
 * positions that every thread takes its share of, whatever the number of
 * heads and tokens (flash-decoding: a softmax partial per chunk, merged at
 * the end); large batches (prefill) use sgemm for Q K^T and P V per KV head. */
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
/* Keys per decode work item: the g x CHUNK scores stay in L1 between the
 * score, exp and accumulation passes, and a long context makes enough
 * items for every thread to stream from its own part of the cache. */
#define DECODE_CHUNK 1024

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
    const kernels_kv *ops = kv_cache_ops(kv);
    for (int j = 0; j < n; j++) scores[j] = scale * ops->dot(q, kv_cache_key(kv, layer, kv_head, slots[j]), kv->head_dim);
    softmax_inplace(scores, n);
    memset(out, 0, (size_t)kv->head_dim * sizeof(float));
    for (int j = 0; j < n; j++)
        if (scores[j] != 0.0f) ops->axpy(out, scores[j], kv_cache_value(kv, layer, kv_head, slots[j]), kv->head_dim);
}

/* One decode work item: keys [j0, j1) of one KV head for the g query heads
 * that share it (q and the partial hold g adjacent heads; scores is g x
 * (j1 - j0) scratch). Each key and value row is loaded once for the g heads:
 *   s_ij = scale q_i.k_j (-inf outside the query's document)
 *   m_i = max_j s_ij,  l_i = sum_j e^(s_ij - m_i),  o_i = sum_j e^(s_ij - m_i) v_j
 * part = [o (g x hd) | m (g) | l (g)]. */
static void chunk_partial(const kernels *K, const kv_cache *kv, int layer, int kh, int g, const float *q, float scale,
                          int j0, int j1, int seg, float *scores, float *part) {
    const int hd = kv->head_dim, n = j1 - j0;
    const kernels_kv *ops = &K->kv[kv->type];
    float *o = part, *m = part + (size_t)g * hd, *l = m + g;
    ops->scores(q, g, kv_cache_key(kv, layer, kh, j0), n, hd, scale, scores, n);
    for (int j = 0; j < n; j++)
        if (kv->seg[j0 + j] != seg)
            for (int i = 0; i < g; i++) scores[(size_t)i * n + j] = -INFINITY;
    for (int i = 0; i < g; i++) {
        float *row = scores + (size_t)i * n, mx = -INFINITY;
        for (int j = 0; j < n; j++) mx = row[j] > mx ? row[j] : mx;
        m[i] = mx;
        if (mx == -INFINITY) { /* nothing eligible: no weight */
            memset(row, 0, (size_t)n * sizeof(float));
            l[i] = 0.0f;
        } else {
            l[i] = K->exp_shift_sum(row, n, mx);
        }
    }
    memset(o, 0, (size_t)g * hd * sizeof(float));
    ops->accum(scores, g, n, kv_cache_value(kv, layer, kh, j0), n, hd, o);
}

/* out_i = sum_c e^(m_ci - M_i) o_ci / sum_c e^(m_ci - M_i) l_ci over the
 * nc partials of one (query, KV head), M_i = max_c m_ci (zeros when no key
 * was eligible). */
static void merge_partials(const float *parts, int nc, int g, int hd, float *out) {
    const size_t stride = (size_t)g * (hd + 2);
    for (int i = 0; i < g; i++) {
        float M = -INFINITY, L = 0.0f, *oi = out + (size_t)i * hd;
        for (int c = 0; c < nc; c++) {
            const float mc = parts[c * stride + (size_t)g * hd + i];
            M = mc > M ? mc : M;
        }
        memset(oi, 0, (size_t)hd * sizeof(float));
        if (M == -INFINITY) continue;
        for (int c = 0; c < nc; c++) {
            const float *p = parts + c * stride, mc = p[(size_t)g * hd + i];
            if (mc == -INFINITY) continue;
            const float w = expf(mc - M);
            L += w * p[(size_t)g * hd + g + i];
            for (int d = 0; d < hd; d++) oi[d] += w * p[(size_t)i * hd + d];
        }
        const float inv = 1.0f / L;
        for (int d = 0; d < hd; d++) oi[d] *= inv;
    }
}

/* Work items (token t, KV head, chunk c) in that order; token t has
 * nc[t] = ceil((slot0 + t + 1) / DECODE_CHUNK) chunks per KV head and its
 * first item at first[t]. */
static subq_status full_forward_rows(const attn_step *st, const kv_cache *kv, subq_error *err) {
    enum { MAX_T = GEMM_MIN_TOKENS };
    const int g = st->n_head / st->n_head_kv, hd = st->head_dim, T = st->n_tokens, H = st->n_head_kv;
    const kernels *K = kernels_get();
    int nc[MAX_T], first[MAX_T + 1];
    first[0] = 0;
    for (int t = 0; t < T; t++) {
        nc[t] = (st->slot0 + t + DECODE_CHUNK) / DECODE_CHUNK;
        first[t + 1] = first[t] + H * nc[t];
    }
    const int n_items = first[T];
    const size_t part_floats = (size_t)g * (hd + 2);
    float *parts = malloc((size_t)n_items * part_floats * sizeof(float));
    if (!parts) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory for attention partials (%d items)", n_items);
    int failed = 0;
    /* threads only pay off once there is real work (items x keys x dims) */
    int64_t work = (int64_t)H * T * g * (st->slot0 + T) * hd;
#pragma omp parallel num_threads(st->n_threads) if (work >= (1 << 16))
    {
        float *scores = malloc((size_t)g * DECODE_CHUNK * sizeof(float));
        if (!scores) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic, 1)
        for (int it = 0; it < n_items; it++) {
            if (!scores) continue;
            int t = 0;
            while (it >= first[t + 1]) t++;
            const int kh = (it - first[t]) / nc[t], c = (it - first[t]) % nc[t], slot = st->slot0 + t;
            const int j0 = c * DECODE_CHUNK, j1 = j0 + DECODE_CHUNK < slot + 1 ? j0 + DECODE_CHUNK : slot + 1;
            const float *q = st->q + (size_t)t * st->n_head * hd + (size_t)kh * g * hd;
            chunk_partial(K, kv, st->layer, kh, g, q, st->scale, j0, j1, kv->seg[slot], scores,
                          parts + (size_t)it * part_floats);
        }
        free(scores);
#pragma omp for schedule(static)
        for (int th = 0; th < T * H; th++) {
            const int t = th / H, kh = th % H;
            merge_partials(parts + ((size_t)first[t] + (size_t)kh * nc[t]) * part_floats, nc[t], g, hd,
                           st->out + (size_t)t * st->n_head * hd + (size_t)kh * g * hd);
        }
    }
    free(parts);
    return failed ? subq_fail(err, SUBQ_ERR_NOMEM, "attention scratch allocation failed") : SUBQ_OK;
}

/* Keys (or values) 0..n-1 of one KV head as f32 rows: the cache itself when
 * it is f32, else converted into `scratch`. */
static const float *head_rows_f32(const kv_cache *kv, const void *base, int n, float *scratch) {
    if (kv->type == SUBQ_KV_F32) return base;
    kv_cache_ops(kv)->to_f32(base, n, kv->head_dim, scratch);
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
