/* InfoNCE + KL distillation losses and their gradients (see search_loss.h).
 *
 * Per layer and sequence:
 *   1. q_s, k_s for all rows (sgemm) and their smooth norms.
 *   2. For each chunk of query rows, pass 1 (parallel over blocks of rows):
 *      the block's teacher rows (teacher_block: per KV head one sgemm of
 *      its query heads against the block's keys), the student dots
 *      d_tj = q_s(t).k_s(j) (one sgemm), per row the two losses and
 *        D_tj = ga dL/dc_tj / (|q_t||k_j|) + gb dK/dd_tj     (coefficient on d_tj)
 *        E_tj = ga dL/dc_tj c_tj                              (norm correction)
 *      with ga = alpha*grad_scale, gb = beta*grad_scale, c = cosine. Since
 *        dc/dq = k/(|q||k|) - c q/|q|^2  and  dd/dq = k,
 *        dq_s(t) = sum_j D_tj k_s(j) - (sum_j E_tj) q_s(t)/|q_t|^2
 *      (the block's rows of D times K_s: one sgemm).
 *      Pass 2 (parallel over blocks of keys) sums the symmetric key side,
 *        dk_s(j) += sum_t D_tj q_s(t) - (sum_t E_tj) k_s(j)/|k_j|^2,
 *      (D^T Q_s over the chunk: one sgemm per key block), so no two threads
 *      ever add into the same element.
 *   3. dW_Qs += dQ_s^T H, dW_Ks += dK_s^T H (sgemm per block of columns).
 * Blocks have fixed sizes and every sgemm runs on one thread, so results do
 * not depend on the thread count. */
#include "train/search/search_loss.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/blas.h"
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

/* Query rows per block of pass 1, keys per block of pass 2, columns of W
 * per block of the weight gradient; rows per block of the projections. */
#define LOSS_ROWS 32
#define LOSS_KEYS 256
#define GRAD_COLS 64
#define PROJ_ROWS 64

/* Y[t0..t1) = X[t0..t1) W^T for one block of rows */
typedef struct project_job {
    float *Y;
    const float *X, *W;
    int T, d, ds;
} project_job;

static void project_block(void *ctx, int b, int thread) {
    const project_job *j = ctx;
    const int t0 = b * PROJ_ROWS, n = j->T - t0 < PROJ_ROWS ? j->T - t0 : PROJ_ROWS;
    blas_sgemm(1, 0, 1, n, j->ds, j->d, 1.0f, j->X + (size_t)t0 * j->d, j->d, j->W, j->d, 0.0f,
               j->Y + (size_t)t0 * j->ds, j->ds);
}

void search_project(float *Y, const float *X, const float *W, int T, int d, int ds, pool *p) {
    project_job j = {.Y = Y, .X = X, .W = W, .T = T, .d = d, .ds = ds};
    pool_run(p, (T + PROJ_ROWS - 1) / PROJ_ROWS, project_block, &j);
}

subq_status search_prepare(const search_layer_data *x, const float *wq, const float *wk, int ds,
                           const search_rope *rope, pool *p, int *start, float *kt, float *Qs, float *Ks,
                           subq_error *err) {
    const int rotate = rope && rope->n_rot > 0;
    if (rotate && !x->pos) return subq_fail(err, SUBQ_ERR_ARG, "a rotated search space needs the tokens' positions");
    subq_status s = segment_starts(x->seg, x->T, start, err);
    if (s) return s;
    teacher_keys_transpose(x->k, x->T, &x->shape, kt);
    search_project(Qs, x->h, wq, x->T, x->d_model, ds, p);
    search_project(Ks, x->h, wk, x->T, x->d_model, ds, p);
    if (rotate) search_rope_rotate_rows(rope, ds, x->pos, x->T, Qs, Ks, 0, p);
    return SUBQ_OK;
}

/* Over the entries x_i = v[idx ? idx[i] : i], i < n: writes prob[i] =
 * exp(x_i - LSE(x)) (the softmax) and returns LSE(x) = log sum_i exp(x_i). */
static float softmax_lse(const float *v, const int *idx, int n, float *prob) {
    const kernels *K = kernels_get();
    if (idx)
        for (int i = 0; i < n; i++) prob[i] = v[idx[i]];
    else
        memcpy(prob, v, (size_t)n * sizeof(float));
    const float mx = K->max_f32(prob, n, -INFINITY);
    const float sum = K->exp_shift_sum(prob, n, mx);
    float inv = 1.0f / sum;
    for (int i = 0; i < n; i++) prob[i] *= inv;
    return mx + logf(sum);
}

/* per-thread scratch of pass 1: the block's teacher and student rows, one
 * row's softmaxes (the floats one allocation at teacher) */
typedef struct row_scratch {
    float *teacher, *P, *dots, *z, *y, *sz, *r, *spos;
    int *pos;
} row_scratch;

/* What pass 1 reads and writes; D and E are [R][T] rows of the chunk
 * starting at row c0 (NULL without gradients). */
typedef struct loss_pass {
    const search_layer_data *x;
    const subq_search_loss_params *lp;
    int ds, c0;
    const int *start;
    const float *Qs, *Ks, *nq, *nk, *inv_nk, *kt;
    float kl_scale, inv_tau, ga, gb;
    double *row_nce, *row_kl;
    unsigned char *row_ok;
    float *D, *E, *dQ, *dK;
    row_scratch *scratch;       /* [threads] */
    int rows_block, c1, kc;     /* the current chunk's blocks */
} loss_pass;

/* Pass 1 over query rows [b0, b1). */
static void loss_rows(const loss_pass *lp_, int b0, int b1, row_scratch *s) {
    const search_layer_data *x = lp_->x;
    const subq_search_loss_params *lp = lp_->lp;
    const int T = x->T, ds = lp_->ds, *start = lp_->start, n_sink = lp->n_sink, n_tail = lp->n_tail;
    const int kb = start[b0], nkb = b1 - kb, want_grad = lp_->D != NULL;
    const float *Qs = lp_->Qs, *Ks = lp_->Ks, *nq = lp_->nq, *inv_nk = lp_->inv_nk;
    teacher_block(x->q, x->k, lp_->kt, T, &x->shape, start, b0, b1, n_sink, n_tail, lp->agg, s->teacher, s->P, nkb,
                  x->attn_out ? x->v : NULL, x->attn_out);
    /* dots[t - b0][j - kb] = q_s(t) . k_s(j) */
    blas_sgemm(1, 0, 1, b1 - b0, nkb, ds, 1.0f, Qs + (size_t)b0 * ds, ds, Ks + (size_t)kb * ds, ds, 0.0f, s->dots, nkb);
    for (int t = b0; t < b1; t++) {
        /* E_t = [s0, s0 + n - 1] = [start + n_sink, t - n_tail]: the retrieval-eligible keys */
        const int s0 = start[t] + n_sink, n = t - n_tail - s0 + 1;
        if (n < 2) continue;
        lp_->row_ok[t] = 1;
        const float *p = s->P + (size_t)(t - b0) * nkb + (s0 - kb), *dot = s->dots + (size_t)(t - b0) * nkb + (s0 - kb);
        /* z_j = d_j / (|q||k_j|) / tau;  y_j = d_j / sqrt(ds) / tau_kl */
        const float zq = lp_->inv_tau / nq[t];
        for (int i = 0; i < n; i++) {
            s->z[i] = dot[i] * zq * inv_nk[s0 + i];
            s->y[i] = dot[i] * lp_->kl_scale;
        }
        /* InfoNCE = LSE_E(z) - LSE_P(z); zero when every key is a positive */
        int npos = topk_indices(p, n, lp->k_pos, s->pos, s->sz); /* sz: scratch until its softmax */
        float lse_e = softmax_lse(s->z, NULL, n, s->sz);
        float lse_p = npos < n ? softmax_lse(s->z, s->pos, npos, s->spos) : lse_e;
        lp_->row_nce[t] = npos < n ? (double)lse_e - (double)lse_p : 0.0;
        /* KL(p || r) = sum_j p_j (log p_j - log r_j), log r_j = y_j - LSE(y) */
        float lse_y = softmax_lse(s->y, NULL, n, s->r);
        lp_->row_kl[t] = kernels_get()->kl_sum(p, s->y, lse_y, n);
        if (!want_grad) continue;

        /* dL/dc_j = (softmax_E(z)_j - [j in P] softmax_P(z)_j) / tau;  dK/dd_j = (r_j - p_j) kl_scale */
        if (npos == n) /* every key positive: the InfoNCE term is identically 0 */
            for (int i = 0; i < n; i++) s->sz[i] = 0.0f;
        else
            for (int i = 0; i < npos; i++) s->sz[s->pos[i]] -= s->spos[i];
        float *Drow = lp_->D + (size_t)(t - lp_->c0) * T, *Erow = lp_->E + (size_t)(t - lp_->c0) * T;
        const float ga_nq = lp_->ga / nq[t];
        for (int i = 0; i < n; i++) {
            const float g1 = s->sz[i] * lp_->inv_tau, g2 = (s->r[i] - p[i]) * lp_->kl_scale;
            const float c = s->z[i] * lp->tau; /* the cosine */
            Drow[s0 + i] = ga_nq * g1 * inv_nk[s0 + i] + lp_->gb * g2;
            Erow[s0 + i] = lp_->ga * g1 * c;
        }
        float esum = 0.0f;
        for (int i = 0; i < n; i++) esum += Erow[s0 + i];
        /* the norm part of dq_s(t) = sum_j D_tj k_s(j) - (sum_j E_tj) q_s(t) / |q_t|^2 */
        float corr = esum / (nq[t] * nq[t]), *dq = lp_->dQ + (size_t)t * ds;
        const float *qt = Qs + (size_t)t * ds;
        for (int c = 0; c < ds; c++) dq[c] = -corr * qt[c];
    }
    /* the block's sum_j D_tj k_s(j), added to dq (D is zero outside each E_t) */
    if (want_grad)
        blas_sgemm(1, 0, 0, b1 - b0, ds, nkb, 1.0f, lp_->D + (size_t)(b0 - lp_->c0) * T + kb, T, Ks + (size_t)kb * ds,
                   ds, 1.0f, lp_->dQ + (size_t)b0 * ds, ds);
}

/* pass 1, one block of query rows (pool chunk) */
static void loss_block(void *ctx, int b, int thread) {
    loss_pass *lp = ctx;
    const int b0 = lp->c0 + b * lp->rows_block, b1 = b0 + lp->rows_block < lp->c1 ? b0 + lp->rows_block : lp->c1;
    loss_rows(lp, b0, b1, &lp->scratch[thread]);
}

/* pass 2, one block of keys j in [kc, c1) (pool chunk) */
static void key_block(void *ctx, int b, int thread) {
    const loss_pass *lp = ctx;
    const int T = lp->x->T, ds = lp->ds, c0 = lp->c0, c1 = lp->c1;
    const int j0 = lp->kc + b * LOSS_KEYS, nj = c1 - j0 < LOSS_KEYS ? c1 - j0 : LOSS_KEYS;
    /* dk_s(j) += sum_t D_tj q_s(t) */
    blas_sgemm(1, 1, 0, nj, ds, c1 - c0, 1.0f, lp->D + j0, T, lp->Qs + (size_t)c0 * ds, ds, 1.0f,
               lp->dK + (size_t)j0 * ds, ds);
    /* dk_s(j) -= (sum_t E_tj) k_s(j) / |k_j|^2 */
    float esum[LOSS_KEYS] = {0};
    for (int r = 0; r < c1 - c0; r++) {
        const float *e = lp->E + (size_t)r * T + j0;
        for (int i = 0; i < nj; i++) esum[i] += e[i];
    }
    for (int i = 0; i < nj; i++) {
        const int j = j0 + i;
        const float corr = esum[i] / (lp->nk[j] * lp->nk[j]), *kj = lp->Ks + (size_t)j * ds;
        float *dk = lp->dK + (size_t)j * ds;
        for (int c = 0; c < ds; c++) dk[c] -= corr * kj[c];
    }
}

/* dW[a][i] += sum_t dY[t][a] H[t][i] for W_Qs (dY = dQ) and W_Ks (dY = dK), one block of columns i */
typedef struct grad_job {
    const search_layer_data *x;
    const float *dQ, *dK;
    float *dwq, *dwk;
    int ds, n_cblocks;
} grad_job;

static void grad_block(void *ctx, int b, int thread) {
    const grad_job *g = ctx;
    const int d = g->x->d_model, is_k = b >= g->n_cblocks, i0 = (is_k ? b - g->n_cblocks : b) * GRAD_COLS;
    const int ni = d - i0 < GRAD_COLS ? d - i0 : GRAD_COLS;
    float *dw = is_k ? g->dwk : g->dwq;
    if (dw) blas_sgemm(1, 1, 0, g->ds, ni, g->x->T, 1.0f, is_k ? g->dK : g->dQ, g->ds, g->x->h + i0, d, 1.0f, dw + i0, d);
}

subq_status search_loss_layer(const search_layer_data *x, const float *wq, const float *wk, int ds,
                              const search_rope *rope, const subq_search_loss_params *lp, float grad_scale, float *dwq,
                              float *dwk, search_loss_sums *out, int chunk_rows, pool *p, subq_error *err) {
    const int T = x->T, d = x->d_model;
    const int want_grad = dwq || dwk;
    out->nce = out->kl = 0.0;
    out->n_queries = 0;
    if (T <= 0) return SUBQ_OK;
    const int n_threads = pool_threads(p);
    if (lp->k_pos < 1 || lp->tau <= 0 || lp->tau_kl <= 0 || lp->n_sink < 0 || lp->n_tail < 0)
        return subq_fail(err, SUBQ_ERR_ARG, "search loss: k_pos must be >= 1, temperatures > 0, n_sink and n_tail >= 0");
    int R = chunk_rows > 0 ? chunk_rows : (int)((1 << 20) / T);
    if (R < 16) R = 16;
    if (R > T) R = T;

    int *start = malloc((size_t)T * sizeof(int));
    float *Qs = malloc((size_t)T * ds * sizeof(float));
    float *Ks = malloc((size_t)T * ds * sizeof(float));
    float *nq = malloc((size_t)T * sizeof(float)), *nk = malloc((size_t)T * sizeof(float));
    float *inv_nk = malloc((size_t)T * sizeof(float));
    float *kt = malloc((size_t)T * x->shape.n_head_kv * x->shape.head_dim * sizeof(float));
    double *row_nce = calloc((size_t)T, sizeof(double)), *row_kl = calloc((size_t)T, sizeof(double));
    unsigned char *row_ok = calloc((size_t)T, 1);
    float *dQ = NULL, *dK = NULL, *D = NULL, *E = NULL;
    row_scratch *scr = NULL; /* per thread, pass 1 */
    if (want_grad) {
        dQ = calloc((size_t)T * ds, sizeof(float));
        dK = calloc((size_t)T * ds, sizeof(float));
        D = malloc((size_t)R * T * sizeof(float));
        E = malloc((size_t)R * T * sizeof(float));
    }
    subq_status st = SUBQ_OK;
    if (!start || !Qs || !Ks || !nq || !nk || !inv_nk || !kt || !row_nce || !row_kl || !row_ok ||
        (want_grad && (!dQ || !dK || !D || !E))) {
        st = subq_fail(err, SUBQ_ERR_NOMEM, "out of memory for search losses (T = %d)", T);
        goto done;
    }
    if ((st = search_prepare(x, wq, wk, ds, rope, p, start, kt, Qs, Ks, err))) goto done;
    /* smooth norms |x| = sqrt(x.x + eps) */
    for (int t = 0; t < T; t++) {
        float a = 0.0f, b = 0.0f;
        for (int c = 0; c < ds; c++) {
            a += Qs[(size_t)t * ds + c] * Qs[(size_t)t * ds + c];
            b += Ks[(size_t)t * ds + c] * Ks[(size_t)t * ds + c];
        }
        nq[t] = sqrtf(a + NORM_EPS);
        nk[t] = sqrtf(b + NORM_EPS);
        inv_nk[t] = 1.0f / nk[t];
    }

    loss_pass pass = {
        .x = x, .lp = lp, .ds = ds, .start = start, .Qs = Qs, .Ks = Ks, .nq = nq, .nk = nk, .inv_nk = inv_nk, .kt = kt,
        .kl_scale = 1.0f / (sqrtf((float)ds) * lp->tau_kl), .inv_tau = 1.0f / lp->tau,
        .ga = lp->alpha * grad_scale, .gb = lp->beta * grad_scale,
        .row_nce = row_nce, .row_kl = row_kl, .row_ok = row_ok, .D = D, .E = E, .dQ = dQ, .dK = dK,
    };
    const int rows_block = R < LOSS_ROWS ? R : LOSS_ROWS;
    /* per-thread scratch of pass 1, for the widest chunk of keys */
    scr = calloc((size_t)n_threads, sizeof *scr);
    int oom = !scr;
    for (int i = 0; !oom && i < n_threads; i++) {
        const size_t cells = (size_t)rows_block * T, n_teacher = teacher_block_scratch(rows_block, T, &x->shape);
        /* teacher, P and dots [rows_block][T], z, y, sz, r [T] (from z0 on), spos [k_pos] */
        const size_t z0 = n_teacher + 2 * cells;
        float *f = malloc((z0 + 4 * (size_t)T + (size_t)lp->k_pos) * sizeof(float));
        int *pos = malloc((size_t)lp->k_pos * sizeof(int));
        oom = !f || !pos;
        if (oom) {
            free(f);
            free(pos);
            break;
        }
        scr[i] = (row_scratch){.teacher = f, .P = f + n_teacher, .dots = f + n_teacher + cells, .z = f + z0,
                               .y = f + z0 + T, .sz = f + z0 + 2 * T, .r = f + z0 + 3 * T, .spos = f + z0 + 4 * T,
                               .pos = pos};
    }
    pass.scratch = scr;
    if (oom) {
        st = subq_fail(err, SUBQ_ERR_NOMEM, "out of memory for search loss scratch (T = %d)", T);
        goto done;
    }
    for (int c0 = 0; c0 < T; c0 += R) {
        const int c1 = c0 + R < T ? c0 + R : T, kc = start[c0], n_blocks = (c1 - c0 + rows_block - 1) / rows_block;
        pass.c0 = c0;
        /* D and E are zero outside each row's eligible keys */
        for (int r = 0; want_grad && r < c1 - c0; r++) {
            memset(D + (size_t)r * T + kc, 0, (size_t)(c1 - kc) * sizeof(float));
            memset(E + (size_t)r * T + kc, 0, (size_t)(c1 - kc) * sizeof(float));
        }
        /* ---- pass 1: blocks of query rows ---- */
        pass.rows_block = rows_block, pass.c1 = c1;
        pool_run(p, n_blocks, loss_block, &pass);
        if (!want_grad) continue;
        /* ---- pass 2: blocks of keys j in [kc, c1), over this chunk's rows ---- */
        pass.kc = kc;
        pool_run(p, (c1 - kc + LOSS_KEYS - 1) / LOSS_KEYS, key_block, &pass);
    }

    /* loss sums in a fixed order */
    double causal = 0, eligible = 0;
    for (int t = 0; t < T; t++) {
        causal += t - start[t] + 1;
        if (!row_ok[t]) continue;
        out->nce += row_nce[t];
        out->kl += row_kl[t];
        out->n_queries++;
        eligible += t - lp->n_tail - (start[t] + lp->n_sink) + 1;
    }
    /* per query head and causal key: a dot of head_dim and the softmax (~6);
     * per eligible key: the student's dot of ds, ~20 for z, y, softmaxes, KL,
     * D and E, and with gradients two more dots (dq, dk); projections and
     * dW: 2 T d ds each */
    const attn_shape *sh = &x->shape;
    out->flops = causal * sh->n_head * (2.0 * sh->head_dim + 6) + eligible * (2.0 * ds + 20) +
                 4.0 * T * d * ds + (want_grad ? eligible * 4.0 * ds + 4.0 * T * d * ds : 0);

    if (want_grad) {
        /* back through the rotation: dY = R(pos)^T dY_rotated */
        if (rope) search_rope_rotate_rows(rope, ds, x->pos, T, dQ, dK, 1, p);
        /* dW[a][i] += sum_t dY[t][a] H[t][i]  for W_Qs (dY = dQ) and W_Ks (dY = dK), per block of columns i */
        grad_job g = {.x = x, .dQ = dQ, .dK = dK, .dwq = dwq, .dwk = dwk, .ds = ds,
                      .n_cblocks = (d + GRAD_COLS - 1) / GRAD_COLS};
        pool_run(p, 2 * g.n_cblocks, grad_block, &g);
    }
done:
    for (int i = 0; scr && i < n_threads; i++) {
        free(scr[i].teacher);
        free(scr[i].pos);
    }
    free(scr);
    free(start);
    free(Qs);
    free(Ks);
    free(nq);
    free(nk);
    free(inv_nk);
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
