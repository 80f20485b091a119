/* InfoNCE + KL distillation losses and their gradients (see search_loss.h).
 *
 * Per layer and sequence:
 *   1. q_s, k_s for all rows and their smooth norms.
 *   2. For each chunk of query rows, pass 1 (parallel over queries t):
 *      teacher row, student dots d_tj = q_s(t).k_s(j), the two losses, and
 *        D_tj = ga dL/dc_tj / (|q_t||k_j|) + gb dK/dd_tj     (coefficient on d_tj)
 *        E_tj = ga dL/dc_tj c_tj                              (norm correction)
 *      with ga = alpha*grad_scale, gb = beta*grad_scale, c = cosine. Since
 *        dc/dq = k/(|q||k|) - c q/|q|^2  and  dd/dq = k,
 *        dq_s(t) = sum_j D_tj k_s(j) - (sum_j E_tj) q_s(t)/|q_t|^2.
 *      Pass 2 (parallel over keys j) sums the symmetric key side,
 *        dk_s(j) += sum_t D_tj q_s(t) - (sum_t E_tj) k_s(j)/|k_j|^2,
 *      so no two threads ever add into the same element.
 *   3. dW_Qs += dQ_s^T H, dW_Ks += dK_s^T H. */
#include "train/search/search_loss.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "kernels/kernels.h"
#include "train/search/topk.h"

#define NORM_EPS 1e-12f

int64_t search_count_queries(const int32_t *seg, int T, int n_sink, int n_tail) {
    int64_t n = 0;
    int doc0 = 0;
    for (int t = 0; t < T; t++) {
        if (t > 0 && seg[t] != seg[t - 1]) doc0 = t;
        /* E_t = [doc0 + n_sink, t - n_tail] holds t - doc0 - n_sink - n_tail + 1 keys; need >= 2 */
        if (t - doc0 >= n_sink + n_tail + 1) n++;
    }
    return n;
}

void search_project(float *Y, const float *X, const float *W, int T, int d, int ds, int n_threads) {
    const kernels *K = kernels_get();
#pragma omp parallel for num_threads(n_threads) schedule(static)
    for (int t = 0; t < T; t++) {
        const float *x = X + (size_t)t * d;
        for (int a = 0; a < ds; a++) {
            const float *w = W + (size_t)a * d;
            Y[(size_t)t * ds + a] = K->dot_f32(w, x, d);
        }
    }
}

/* Over the entries x_i = v[idx ? idx[i] : i], i < n: writes prob[i] =
 * exp(x_i - LSE(x)) (the softmax) and returns LSE(x) = log sum_i exp(x_i). */
static float softmax_lse(const float *v, const int *idx, int n, float *prob) {
    float mx = -INFINITY;
    for (int i = 0; i < n; i++) {
        float x = v[idx ? idx[i] : i];
        if (x > mx) mx = x;
    }
    float sum = 0.0f;
    for (int i = 0; i < n; i++) {
        prob[i] = expf(v[idx ? idx[i] : i] - mx);
        sum += prob[i];
    }
    float inv = 1.0f / sum;
    for (int i = 0; i < n; i++) prob[i] *= inv;
    return mx + logf(sum);
}

/* per-thread scratch of pass 1 */
typedef struct row_scratch {
    float *p, *z, *y, *sz, *r, *spos, *tmp;
    int *pos;
} row_scratch;

subq_status search_loss_layer(const search_layer_data *x, const float *wq, const float *wk, int ds,
                              const search_loss_params *lp, float grad_scale, float *dwq, float *dwk,
                              search_loss_sums *out, int chunk_rows, int n_threads, subq_error *err) {
    const int T = x->T, d = x->d_model;
    const int want_grad = dwq || dwk;
    const kernels *K = kernels_get();
    out->nce = out->kl = 0.0;
    out->n_queries = 0;
    if (T <= 0) return SUBQ_OK;
    if (n_threads < 1) n_threads = 1;
    if (lp->k_pos < 1 || lp->tau <= 0 || lp->tau_kl <= 0 || lp->n_sink < 0 || lp->n_tail < 0)
        return subq_fail(err, SUBQ_ERR_ARG, "search loss: k_pos must be >= 1, temperatures > 0, n_sink and n_tail >= 0");
    const int n_sink = lp->n_sink, n_tail = lp->n_tail;
    int R = chunk_rows > 0 ? chunk_rows : (int)((1 << 20) / T);
    if (R < 16) R = 16;
    if (R > T) R = T;

    const float kl_scale = 1.0f / (sqrtf((float)ds) * lp->tau_kl);
    const float inv_tau = 1.0f / lp->tau;
    const float ga = lp->alpha * grad_scale, gb = lp->beta * grad_scale;

    int *start = malloc((size_t)T * sizeof(int));
    float *Qs = malloc((size_t)T * ds * sizeof(float));
    float *Ks = malloc((size_t)T * ds * sizeof(float));
    float *nq = malloc((size_t)T * sizeof(float)), *nk = malloc((size_t)T * sizeof(float));
    float *kt = malloc((size_t)T * x->shape.n_head_kv * x->shape.head_dim * sizeof(float));
    double *row_nce = calloc((size_t)T, sizeof(double)), *row_kl = calloc((size_t)T, sizeof(double));
    unsigned char *row_ok = calloc((size_t)T, 1);
    float *dQ = NULL, *dK = NULL, *D = NULL, *E = NULL;
    if (want_grad) {
        dQ = calloc((size_t)T * ds, sizeof(float));
        dK = calloc((size_t)T * ds, sizeof(float));
        D = malloc((size_t)R * T * sizeof(float));
        E = malloc((size_t)R * T * sizeof(float));
    }
    subq_status st = SUBQ_OK;
    if (!start || !Qs || !Ks || !nq || !nk || !kt || !row_nce || !row_kl || !row_ok ||
        (want_grad && (!dQ || !dK || !D || !E))) {
        st = subq_fail(err, SUBQ_ERR_NOMEM, "out of memory for search losses (T = %d)", T);
        goto done;
    }
    if ((st = segment_starts(x->seg, T, start, err))) goto done;
    teacher_keys_transpose(x->k, T, &x->shape, kt);

    search_project(Qs, x->h, wq, T, d, ds, n_threads);
    search_project(Ks, x->h, wk, T, d, ds, n_threads);
    /* smooth norms |x| = sqrt(x.x + eps) */
    for (int t = 0; t < T; t++) {
        float a = 0.0f, b = 0.0f;
        for (int c = 0; c < ds; c++) {
            a += Qs[(size_t)t * ds + c] * Qs[(size_t)t * ds + c];
            b += Ks[(size_t)t * ds + c] * Ks[(size_t)t * ds + c];
        }
        nq[t] = sqrtf(a + NORM_EPS);
        nk[t] = sqrtf(b + NORM_EPS);
    }

    int oom = 0;
    for (int t0 = 0; t0 < T; t0 += R) {
        const int t1 = t0 + R < T ? t0 + R : T;
        /* ---- pass 1: one query row per iteration ---- */
#pragma omp parallel num_threads(n_threads)
        {
            row_scratch s;
            s.p = malloc((size_t)T * sizeof(float));
            s.z = malloc((size_t)T * sizeof(float));
            s.y = malloc((size_t)T * sizeof(float));
            s.sz = malloc((size_t)T * sizeof(float));
            s.r = malloc((size_t)T * sizeof(float));
            s.tmp = malloc((size_t)T * sizeof(float));
            s.spos = malloc((size_t)lp->k_pos * sizeof(float));
            s.pos = malloc((size_t)lp->k_pos * sizeof(int));
            int ok = s.p && s.z && s.y && s.sz && s.r && s.tmp && s.spos && s.pos;
            if (!ok) {
#pragma omp atomic write
                oom = 1;
            }
#pragma omp for schedule(static, 1) /* row cost grows with t: deal rows round-robin */
            for (int t = t0; t < t1; t++) {
                /* E_t = [s0, s0 + n - 1] = [start + n_sink, t - n_tail]: the retrieval-eligible keys */
                const int s0 = start[t] + n_sink, n = t - n_tail - s0 + 1;
                if (!ok || n < 2) continue;
                row_ok[t] = 1;
                const float *qt = Qs + (size_t)t * ds;
                teacher_row_mid(x->q + (size_t)t * x->shape.n_head * x->shape.head_dim, kt, T, &x->shape, start[t], t,
                                s0, s0 + n - 1, lp->agg, s.tmp, s.p);
                /* d_j = q_s(t).k_s(j);  z_j = d_j / (|q||k_j|) / tau;  y_j = d_j / sqrt(ds) / tau_kl */
                for (int i = 0; i < n; i++) {
                    float dot = K->dot_f32(qt, Ks + (size_t)(s0 + i) * ds, ds);
                    s.z[i] = dot / (nq[t] * nk[s0 + i]) * inv_tau;
                    s.y[i] = dot * kl_scale;
                }
                /* InfoNCE = LSE_E(z) - LSE_P(z); zero when every key is a positive */
                int npos = topk_indices(s.p, n, lp->k_pos, s.pos);
                float lse_e = softmax_lse(s.z, NULL, n, s.sz);
                float lse_p = npos < n ? softmax_lse(s.z, s.pos, npos, s.spos) : lse_e;
                row_nce[t] = npos < n ? (double)lse_e - (double)lse_p : 0.0;
                /* KL(p || r) = sum_j p_j (log p_j - log r_j), log r_j = y_j - LSE(y) */
                float lse_y = softmax_lse(s.y, NULL, n, s.r);
                double kl = 0.0;
                for (int i = 0; i < n; i++)
                    if (s.p[i] > 0.0f) kl += (double)s.p[i] * ((double)logf(s.p[i]) - ((double)s.y[i] - lse_y));
                row_kl[t] = kl;
                if (!want_grad) continue;

                /* dL/dc_j = (softmax_E(z)_j - [j in P] softmax_P(z)_j) / tau;  dK/dd_j = (r_j - p_j) kl_scale */
                if (npos == n) /* every key positive: the InfoNCE term is identically 0 */
                    for (int i = 0; i < n; i++) s.sz[i] = 0.0f;
                else
                    for (int i = 0; i < npos; i++) s.sz[s.pos[i]] -= s.spos[i];
                float *Drow = D + (size_t)(t - t0) * T, *Erow = E + (size_t)(t - t0) * T;
                float esum = 0.0f;
                for (int i = 0; i < n; i++) {
                    float g1 = s.sz[i] * inv_tau;
                    float g2 = (s.r[i] - s.p[i]) * kl_scale;
                    float c = s.z[i] * lp->tau; /* the cosine */
                    Drow[s0 + i] = ga * g1 / (nq[t] * nk[s0 + i]) + gb * g2;
                    Erow[s0 + i] = ga * g1 * c;
                    esum += Erow[s0 + i];
                }
                /* dq_s(t) = sum_j D_tj k_s(j) - (sum_j E_tj) q_s(t) / |q_t|^2 */
                float *dq = dQ + (size_t)t * ds;
                for (int i = 0; i < n; i++) {
                    const float *kj = Ks + (size_t)(s0 + i) * ds;
                    for (int c = 0; c < ds; c++) dq[c] += Drow[s0 + i] * kj[c];
                }
                float corr = esum / (nq[t] * nq[t]);
                for (int c = 0; c < ds; c++) dq[c] -= corr * qt[c];
            }
            free(s.p);
            free(s.z);
            free(s.y);
            free(s.sz);
            free(s.r);
            free(s.tmp);
            free(s.spos);
            free(s.pos);
        }
        if (oom) {
            st = subq_fail(err, SUBQ_ERR_NOMEM, "out of memory for search loss scratch (T = %d)", T);
            goto done;
        }
        if (!want_grad) continue;
        /* ---- pass 2: one key per iteration, over this chunk's rows ---- */
        const int j0 = start[t0];
#pragma omp parallel for num_threads(n_threads) schedule(static, 1)
        for (int j = j0; j < t1; j++) {
            float *dk = dK + (size_t)j * ds;
            float esum = 0.0f;
            /* key j is in E_t iff start[t] + n_sink <= j <= t - n_tail (so t >= j + n_tail) */
            for (int t = j + n_tail > t0 ? j + n_tail : t0; t < t1; t++) {
                if (!row_ok[t] || start[t] + n_sink > j) continue;
                float w = D[(size_t)(t - t0) * T + j];
                const float *qt = Qs + (size_t)t * ds;
                /* dk_s(j) += D_tj q_s(t) */
                for (int c = 0; c < ds; c++) dk[c] += w * qt[c];
                esum += E[(size_t)(t - t0) * T + j];
            }
            /* dk_s(j) -= (sum_t E_tj) k_s(j) / |k_j|^2 */
            float corr = esum / (nk[j] * nk[j]);
            const float *kj = Ks + (size_t)j * ds;
            for (int c = 0; c < ds; c++) dk[c] -= corr * kj[c];
        }
    }

    /* loss sums in a fixed order */
    for (int t = 0; t < T; t++) {
        if (!row_ok[t]) continue;
        out->nce += row_nce[t];
        out->kl += row_kl[t];
        out->n_queries++;
    }

    if (want_grad) {
        /* dW[a][i] += sum_t dY[t][a] H[t][i]  for W_Qs (dY = dQ) and W_Ks (dY = dK) */
#pragma omp parallel for num_threads(n_threads) schedule(static)
        for (int a = 0; a < 2 * ds; a++) {
            const int is_k = a >= ds, r = is_k ? a - ds : a;
            float *dw = is_k ? dwk : dwq;
            if (!dw) continue;
            const float *dY = is_k ? dK : dQ;
            float *row = dw + (size_t)r * d;
            for (int t = 0; t < T; t++) {
                float g = dY[(size_t)t * ds + r];
                if (g == 0.0f) continue;
                const float *ht = x->h + (size_t)t * d;
                for (int i = 0; i < d; i++) row[i] += g * ht[i];
            }
        }
    }
done:
    free(start);
    free(Qs);
    free(Ks);
    free(nq);
    free(nk);
    free(kt);
    free(row_nce);
    free(row_kl);
    free(row_ok);
    free(dQ);
    free(dK);
    free(D);
    free(E);
    return st;
}
