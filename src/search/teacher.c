#include "search/teacher.h"

#include <math.h>
#include <string.h>

#include "base/error.h"

const char *teacher_agg_name(teacher_agg a) { return a == TEACHER_AGG_MEAN ? "mean" : "max"; }

int teacher_agg_parse(const char *s) {
    if (!strcmp(s, "max")) return TEACHER_AGG_MAX;
    if (!strcmp(s, "mean")) return TEACHER_AGG_MEAN;
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

void teacher_row(const float *q_t, const float *kt, int T, const attn_shape *sh, int s, int t, teacher_agg agg,
                 float *scratch, float *p) {
    const int n = t - s + 1, hd = sh->head_dim, group = sh->n_head / sh->n_head_kv;
    const float scale = 1.0f / sqrtf((float)hd);
    for (int i = 0; i < n; i++) p[i] = 0.0f;
    for (int h = 0; h < sh->n_head; h++) {
        const float *qh = q_t + (size_t)h * hd;
        const float *kg = kt + (size_t)(h / group) * hd * T + s;
        /* scratch[i] = sum_c (q_h[c] / sqrt(hd)) k_g(s+i)[c], then softmax over i */
        for (int i = 0; i < n; i++) scratch[i] = 0.0f;
        for (int c = 0; c < hd; c++) {
            const float qc = qh[c] * scale, *row = kg + (size_t)c * T;
            for (int i = 0; i < n; i++) scratch[i] += qc * row[i];
        }
        float mx = -INFINITY;
        for (int i = 0; i < n; i++)
            if (scratch[i] > mx) mx = scratch[i];
        float sum = 0.0f;
        for (int i = 0; i < n; i++) {
            scratch[i] = expf(scratch[i] - mx);
            sum += scratch[i];
        }
        float inv = 1.0f / sum;
        if (agg == TEACHER_AGG_MEAN) {
            float w = inv / (float)sh->n_head;
            for (int i = 0; i < n; i++) p[i] += scratch[i] * w;
        } else {
            for (int i = 0; i < n; i++) {
                float v = scratch[i] * inv;
                if (v > p[i]) p[i] = v;
            }
        }
    }
    if (agg == TEACHER_AGG_MAX) { /* renormalise the per-key maxima to a distribution */
        float sum = 0.0f;
        for (int i = 0; i < n; i++) sum += p[i];
        float inv = 1.0f / sum;
        for (int i = 0; i < n; i++) p[i] *= inv;
    }
}

void oracle_scores(const float *q_t, const float *kt, int T, const attn_shape *sh, int s, int t, float *qsum,
                   float *o) {
    const int hd = sh->head_dim, group = sh->n_head / sh->n_head_kv, dk = sh->n_head_kv * hd, n = t - s + 1;
    /* sum_h q_h . k_g = sum_g (sum_{h in group g} q_h) . k_g: fold the query heads first */
    for (int i = 0; i < dk; i++) qsum[i] = 0.0f;
    for (int h = 0; h < sh->n_head; h++)
        for (int c = 0; c < hd; c++) qsum[(h / group) * hd + c] += q_t[(size_t)h * hd + c];
    const float inv = 1.0f / (float)sh->n_head;
    for (int i = 0; i < n; i++) o[i] = 0.0f;
    for (int r = 0; r < dk; r++) {
        const float w = qsum[r] * inv, *row = kt + (size_t)r * T + s;
        for (int i = 0; i < n; i++) o[i] += w * row[i];
    }
}
