#include "train/search/teacher.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "base/blas.h"
#include "base/error.h"
#include "kernels/kernels.h"

const char *teacher_agg_name(subq_teacher_agg a) { return a == SUBQ_TEACHER_AGG_MEAN ? "mean" : "max"; }

int teacher_agg_parse(const char *s) {
    if (!strcmp(s, "max")) return SUBQ_TEACHER_AGG_MAX;
    if (!strcmp(s, "mean")) return SUBQ_TEACHER_AGG_MEAN;
    return -1;
}

subq_status segment_starts(const int32_t *seg, int T, int *start, subq_error *err) {
    for (int t = 0; t < T; t++) {
        if (t > 0 && seg[t] < seg[t - 1])
            return subq_fail(err, SUBQ_ERR_ARG, "segment ids must be non-decreasing (seg[%d] = %d after %d)", t,
                             (int)seg[t], (int)seg[t - 1]);
        start[t] = (t > 0 && seg[t] == seg[t - 1]) ? start[t - 1] : t;
    }
    return SUBQ_OK;
}

void teacher_keys_transpose(const float *k, int T, const attn_shape *sh, float *kt) {
    const int dk = sh->n_head_kv * sh->head_dim;
    for (int j = 0; j < T; j++)
        for (int r = 0; r < dk; r++) kt[(size_t)r * T + j] = k[(size_t)j * dk + r];
}

/* out[i] = sh->scale * q_h(t) . k_{h/g}(s+i) for i < n (no soft cap): head
 * h's attention logits over the keys s..s+n-1; returns their maximum. */
static float head_logits(const float *q_t, const float *kt, int T, const attn_shape *sh, int h, int s, int n,
                        float *out) {
    const int hd = sh->head_dim, group = sh->n_head / sh->n_head_kv;
    const float scale = sh->scale;
    const float *qh = q_t + (size_t)h * hd;
    const float *kg = kt + (size_t)(h / group) * hd * T + s;
    for (int i = 0; i < n; i++) out[i] = 0.0f;
    for (int c = 0; c < hd; c++) {
        const float qc = qh[c] * scale, *row = kg + (size_t)c * T;
        for (int i = 0; i < n; i++) out[i] += qc * row[i];
    }
    float mx = -INFINITY;
    for (int i = 0; i < n; i++)
        if (out[i] > mx) mx = out[i];
    return mx;
}

/* Rare path of teacher_row_mid: every aggregated probability of the mid keys
 * underflowed in fp32. Works with log-probabilities
 *   lp_h(j) = logit_h(j) - LSE_{s..t}(logit_h)
 * shifted by their maximum G over heads and mid keys, so the largest term is
 * exp(0) = 1 and the renormalised row is exact up to rounding. Two passes
 * over the heads (G first), recomputing the logits: no extra scratch. */
static void teacher_row_mid_logdomain(const float *q_t, const float *kt, int T, const attn_shape *sh, int s, int t,
                                      int lo, int hi, subq_teacher_agg agg, float *scratch, float *p) {
    const int n = t - s + 1, m = hi - lo + 1, off = lo - s;
    float G = -INFINITY;
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1)
            for (int i = 0; i < m; i++) p[i] = 0.0f;
        for (int h = 0; h < sh->n_head; h++) {
            const float mx = head_logits(q_t, kt, T, sh, h, s, n, scratch);
            float sum = 0.0f;
            for (int i = 0; i < n; i++) sum += expf(scratch[i] - mx);
            const float lse = mx + logf(sum);
            for (int i = 0; i < m; i++) {
                float lp = scratch[off + i] - lse;
                if (pass == 0) {
                    if (lp > G) G = lp;
                } else if (agg == SUBQ_TEACHER_AGG_MEAN) {
                    p[i] += expf(lp - G); /* the 1/n_head factor cancels in the renormalisation */
                } else {
                    float v = expf(lp - G);
                    if (v > p[i]) p[i] = v;
                }
            }
        }
    }
    float sum = 0.0f;
    for (int i = 0; i < m; i++) sum += p[i];
    const float inv = 1.0f / sum; /* sum >= 1: the key and head attaining G contribute exp(0) */
    for (int i = 0; i < m; i++) p[i] *= inv;
}

void teacher_row_mid(const float *q_t, const float *kt, int T, const attn_shape *sh, int s, int t, int lo, int hi,
                     subq_teacher_agg agg, float *scratch, float *p) {
    const int n = t - s + 1, m = hi - lo + 1, off = lo - s;
    const int restricted = lo > s || hi < t;
    for (int i = 0; i < m; i++) p[i] = 0.0f;
    for (int h = 0; h < sh->n_head; h++) {
        /* scratch[i] = sum_c (scale q_h[c]) k_g(s+i)[c], then softmax over all of s..t:
         * the model's own attention, including the keys outside lo..hi */
        const float mx = head_logits(q_t, kt, T, sh, h, s, n, scratch);
        float sum = 0.0f;
        for (int i = 0; i < n; i++) {
            scratch[i] = expf(scratch[i] - mx);
            sum += scratch[i];
        }
        float inv = 1.0f / sum;
        if (agg == SUBQ_TEACHER_AGG_MEAN) {
            float w = inv / (float)sh->n_head;
            for (int i = 0; i < m; i++) p[i] += scratch[off + i] * w;
        } else {
            for (int i = 0; i < m; i++) {
                float v = scratch[off + i] * inv;
                if (v > p[i]) p[i] = v;
            }
        }
    }
    /* max: renormalise the per-key maxima to a distribution; restricted: renormalise over lo..hi.
     * (mean over the whole range already sums to 1 and is left as is, as it always was.) */
    if (agg == SUBQ_TEACHER_AGG_MAX || restricted) {
        float sum = 0.0f;
        for (int i = 0; i < m; i++) sum += p[i];
        if (!(sum >= FLT_MIN)) { /* all (or all but denormal) mass underflowed: redo in the log domain */
            teacher_row_mid_logdomain(q_t, kt, T, sh, s, t, lo, hi, agg, scratch, p);
            return;
        }
        float inv = 1.0f / sum;
        for (int i = 0; i < m; i++) p[i] *= inv;
    }
}

size_t teacher_block_scratch(int n_rows, int n_keys, const attn_shape *sh) {
    const size_t g = (size_t)(sh->n_head / sh->n_head_kv);
    /* Qb, the attention output O [rows][hd] and 1/sum [rows]; S [rows][n_keys] */
    return (size_t)n_rows * g * (2 * sh->head_dim + 1) + (size_t)n_rows * g * n_keys;
}

void teacher_block(const float *q, const float *k, const float *kt, int T, const attn_shape *sh, const int *start,
                   int t0, int t1, int n_sink, int n_tail, subq_teacher_agg agg, float *scratch, float *P, int ldp,
                   const float *v, float *out) {
    const kernels *kern = kernels_get();
    const int nh = sh->n_head, g = nh / sh->n_head_kv, hd = sh->head_dim, dq = nh * hd, dk = sh->n_head_kv * hd;
    const int B = t1 - t0, kb = start[t0], nk = t1 - kb, rows = B * g;
    const float scale = sh->scale;
    float *Qb = scratch, *O = Qb + (size_t)rows * hd, *inv_sum = O + (size_t)rows * hd, *S = inv_sum + rows;
    for (int r = 0; r < B; r++) memset(P + (size_t)r * ldp, 0, (size_t)nk * sizeof(float));
    for (int kh = 0; kh < sh->n_head_kv; kh++) {
        for (int r = 0; r < B; r++)
            memcpy(Qb + (size_t)r * g * hd, q + (size_t)(t0 + r) * dq + (size_t)kh * g * hd, (size_t)g * hd * sizeof(float));
        /* S[r][j - kb] = scale q_h(t) . k_kh(j), rows r = (t - t0) g + i for h = kh g + i */
        blas_sgemm(1, 0, 1, rows, nk, hd, scale, Qb, hd, k + (size_t)kb * dk + (size_t)kh * hd, dk, 0.0f, S, nk);
        for (int r = 0; r < rows; r++) {
            const int t = t0 + r / g, s = start[t] - kb, e = t - kb, lo = s + n_sink, hi = e - n_tail;
            if (lo > hi && !out) continue;
            float *row = S + (size_t)r * nk, *p = P + (size_t)(t - t0) * ldp, mx = -INFINITY;
            /* head h's softmax over all of its keys s..e, then its share of the mid keys lo..hi */
            mx = kern->max_f32(row + s, e - s + 1, mx);
            const float inv = 1.0f / kern->exp_shift_sum(row + s, e - s + 1, mx);
            if (out) { /* the attention output's weights: zero outside s..e */
                inv_sum[r] = inv;
                memset(row, 0, (size_t)s * sizeof(float));
                memset(row + e + 1, 0, (size_t)(nk - e - 1) * sizeof(float));
            }
            if (lo > hi) continue;
            if (agg == SUBQ_TEACHER_AGG_MEAN) {
                const float w = inv / (float)nh;
                for (int j = lo; j <= hi; j++) p[j] += row[j] * w;
            } else {
                for (int j = lo; j <= hi; j++) {
                    const float pj = row[j] * inv;
                    p[j] = pj > p[j] ? pj : p[j];
                }
            }
        }
        if (!out) continue;
        /* out_h(t) = sum_j e^(S_rj - m_r) v_kh(j) / sum_r */
        blas_sgemm(1, 0, 0, rows, hd, nk, 1.0f, S, nk, v + (size_t)kb * dk + (size_t)kh * hd, dk, 0.0f, O, hd);
        for (int r = 0; r < rows; r++) {
            float *o = out + (size_t)(t0 + r / g) * dq + (size_t)(kh * g + r % g) * hd;
            for (int c = 0; c < hd; c++) o[c] = O[(size_t)r * hd + c] * inv_sum[r];
        }
    }
    for (int t = t0; t < t1; t++) {
        const int lo = start[t] + n_sink - kb, hi = t - n_tail - kb;
        if (lo > hi || (agg == SUBQ_TEACHER_AGG_MEAN && lo == start[t] - kb && hi == t - kb)) continue;
        float *p = P + (size_t)(t - t0) * ldp, sum = 0.0f;
        for (int j = lo; j <= hi; j++) sum += p[j];
        if (!(sum >= FLT_MIN)) { /* every mid key underflowed: the row again, in the log domain */
            teacher_row_mid(q + (size_t)t * dq, kt, T, sh, start[t], t, lo + kb, hi + kb, agg, S, p + lo);
            continue;
        }
        const float inv = 1.0f / sum;
        for (int j = lo; j <= hi; j++) p[j] *= inv;
    }
}

void teacher_row(const float *q_t, const float *kt, int T, const attn_shape *sh, int s, int t, subq_teacher_agg agg,
                 float *scratch, float *p) {
    teacher_row_mid(q_t, kt, T, sh, s, t, s, t, agg, scratch, p);
}

