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

void teacher_row(const float *q_t, const float *k, const attn_shape *sh, int s, int t, teacher_agg agg,
                 float *scratch, float *p) {
    const int n = t - s + 1, hd = sh->head_dim, group = sh->n_head / sh->n_head_kv;
    const size_t kstride = (size_t)sh->n_head_kv * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    for (int i = 0; i < n; i++) p[i] = 0.0f;
    for (int h = 0; h < sh->n_head; h++) {
        const float *qh = q_t + (size_t)h * hd;
        const float *kg = k + (size_t)(h / group) * hd;
        /* scratch[i] = q_h . k_g(s+i) / sqrt(hd), then softmax over i */
        float mx = -INFINITY;
        for (int i = 0; i < n; i++) {
            const float *kj = kg + (size_t)(s + i) * kstride;
            float d = 0.0f;
            for (int c = 0; c < hd; c++) d += qh[c] * kj[c];
            scratch[i] = d * scale;
            if (scratch[i] > mx) mx = scratch[i];
        }
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

void oracle_scores(const float *q_t, const float *k, const attn_shape *sh, int s, int t, float *qsum, float *o) {
    const int hd = sh->head_dim, group = sh->n_head / sh->n_head_kv, dk = sh->n_head_kv * hd;
    /* sum_h q_h . k_g = sum_g (sum_{h in group g} q_h) . k_g: fold the query heads first */
    for (int i = 0; i < dk; i++) qsum[i] = 0.0f;
    for (int h = 0; h < sh->n_head; h++)
        for (int c = 0; c < hd; c++) qsum[(h / group) * hd + c] += q_t[(size_t)h * hd + c];
    const float inv = 1.0f / (float)sh->n_head;
    for (int j = s; j <= t; j++) {
        const float *kj = k + (size_t)j * dk;
        float d = 0.0f;
        for (int i = 0; i < dk; i++) d += qsum[i] * kj[i];
        o[j - s] = d * inv;
    }
}
