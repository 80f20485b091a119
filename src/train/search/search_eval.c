/* mass@K / recall@K of the learned space, the raw-QK oracle and the recency window. Each query
 * row is scored independently (parallel over rows) into per-row results that
 * are then summed in row order, so figures do not depend on thread count. */
#include "train/search/search_eval.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "kernels/kernels.h"
#include "train/search/topk.h"

void search_eval_init(search_eval_acc *acc, const int *ks, int n_k) {
    memset(acc, 0, sizeof *acc);
    if (n_k > SUBQ_SEARCH_EVAL_MAX_K) n_k = SUBQ_SEARCH_EVAL_MAX_K;
    acc->n_k = n_k;
    for (int i = 0; i < n_k; i++) acc->k[i] = ks[i];
}

/* per row and K: mass/recall for learned and oracle */
enum { R_ML, R_MO, R_MW, R_RL, R_RO, R_RW, R_N };

subq_status search_eval_layer(const search_layer_data *x, const float *wq, const float *wk, int ds,
                              teacher_agg agg, int n_sink, int n_tail, search_eval_acc *acc, int n_threads,
                              subq_error *err) {
    const int T = x->T, d = x->d_model, nk = acc->n_k;
    const kernels *kern = kernels_get();
    if (n_sink < 0 || n_tail < 0)
        return subq_fail(err, SUBQ_ERR_ARG, "search evaluation: n_sink and n_tail must be >= 0");
    if (T <= 0 || nk == 0) return SUBQ_OK;
    if (n_threads < 1) n_threads = 1;
    int kmax = 0;
    for (int i = 0; i < nk; i++)
        if (acc->k[i] > kmax) kmax = acc->k[i];
    const int dkv = x->shape.n_head_kv * x->shape.head_dim;
    int *start = malloc((size_t)T * sizeof(int));
    float *Qs = malloc((size_t)T * ds * sizeof(float)), *Ks = malloc((size_t)T * ds * sizeof(float));
    float *kt = malloc((size_t)T * dkv * sizeof(float)), *inv_nk = malloc((size_t)T * sizeof(float));
    double *res = calloc((size_t)T * nk * R_N, sizeof(double));
    unsigned char *counted = calloc((size_t)T * nk, 1);
    subq_status st = SUBQ_OK;
    if (!start || !Qs || !Ks || !kt || !inv_nk || !res || !counted) {
        st = subq_fail(err, SUBQ_ERR_NOMEM, "out of memory for search evaluation (T = %d)", T);
        goto done;
    }
    if ((st = segment_starts(x->seg, T, start, err))) goto done;
    teacher_keys_transpose(x->k, T, &x->shape, kt);
    search_project(Qs, x->h, wq, T, d, ds, n_threads);
    search_project(Ks, x->h, wk, T, d, ds, n_threads);
    /* 1 / |k_s(j)| with the training loss's smooth norm */
    for (int j = 0; j < T; j++)
        inv_nk[j] = 1.0f / sqrtf(kern->dot_f32(Ks + (size_t)j * ds, Ks + (size_t)j * ds, ds) + 1e-12f);
    int oom = 0;
#pragma omp parallel num_threads(n_threads)
    {
        float *p = malloc((size_t)T * sizeof(float)), *sc = malloc((size_t)T * sizeof(float));
        float *tmp = malloc((size_t)(T > dkv ? T : dkv) * sizeof(float));
        int *top_t = malloc((size_t)kmax * sizeof(int)), *top_l = malloc((size_t)kmax * sizeof(int));
        int *top_o = malloc((size_t)kmax * sizeof(int));
        unsigned char *mark = calloc((size_t)T, 1);
        int ok = p && sc && tmp && top_t && top_l && top_o && mark;
        if (!ok) {
#pragma omp atomic write
            oom = 1;
        }
#pragma omp for schedule(static, 1) /* row cost grows with t */
        for (int t = 0; t < T; t++) {
            /* eligible keys s0 .. s0 + n - 1 = [start + n_sink, t - n_tail] (all causal keys when both are 0) */
            const int s0 = start[t] + n_sink, n = t - n_tail - s0 + 1;
            if (!ok || n < 2) continue;
            const float *qn = x->q + (size_t)t * x->shape.n_head * x->shape.head_dim;
            teacher_row_mid(qn, kt, T, &x->shape, start[t], t, s0, s0 + n - 1, agg, tmp, p);
            int kk = kmax < n ? kmax : n;
            topk_indices(p, n, kk, top_t);
            /* learned scores cos(q_s(t), k_s(j)) (|q_s(t)| is common to the row) */
            const float *qt = Qs + (size_t)t * ds;
            for (int i = 0; i < n; i++) sc[i] = kern->dot_f32(qt, Ks + (size_t)(s0 + i) * ds, ds) * inv_nk[s0 + i];
            topk_indices(sc, n, kk, top_l);
            oracle_scores(qn, kt, T, &x->shape, s0, s0 + n - 1, tmp, sc);
            topk_indices(sc, n, kk, top_o);
            for (int ki = 0; ki < nk; ki++) {
                const int K = acc->k[ki];
                if (n <= K) continue;
                double *r = res + ((size_t)t * nk + ki) * R_N;
                counted[(size_t)t * nk + ki] = 1;
                for (int i = 0; i < K; i++) mark[top_t[i]] = 1;
                for (int i = 0; i < K; i++) {
                    r[R_ML] += p[top_l[i]];
                    r[R_MO] += p[top_o[i]];
                    r[R_MW] += p[n - 1 - i]; /* the i-th most recent eligible key */
                    r[R_RL] += mark[top_l[i]];
                    r[R_RO] += mark[top_o[i]];
                    r[R_RW] += mark[n - 1 - i];
                }
                r[R_RL] /= K;
                r[R_RO] /= K;
                r[R_RW] /= K;
                for (int i = 0; i < K; i++) mark[top_t[i]] = 0;
            }
        }
        free(p);
        free(sc);
        free(tmp);
        free(top_t);
        free(top_l);
        free(top_o);
        free(mark);
    }
    if (oom) {
        st = subq_fail(err, SUBQ_ERR_NOMEM, "out of memory for search evaluation scratch (T = %d)", T);
        goto done;
    }
    for (int t = 0; t < T; t++)
        for (int ki = 0; ki < nk; ki++) {
            if (!counted[(size_t)t * nk + ki]) continue;
            const double *r = res + ((size_t)t * nk + ki) * R_N;
            acc->mass_learned[ki] += r[R_ML];
            acc->mass_oracle[ki] += r[R_MO];
            acc->recall_learned[ki] += r[R_RL];
            acc->recall_oracle[ki] += r[R_RO];
            acc->mass_window[ki] += r[R_MW];
            acc->recall_window[ki] += r[R_RW];
            acc->n_queries[ki]++;
        }
done:
    free(start);
    free(Qs);
    free(Ks);
    free(kt);
    free(inv_nk);
    free(res);
    free(counted);
    return st;
}
