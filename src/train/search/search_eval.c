/* mass@K / recall@K of the learned space, the raw-QK oracle and the recency window. Blocks of
 * query rows (parallel over blocks) get their teacher rows, learned scores and oracle scores
 * as sgemm products; each row's results are summed in row order at the end, so figures do
 * not depend on thread count. */
#include "train/search/search_eval.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/blas.h"
#include "base/error.h"
#include "kernels/kernels.h"
#include "train/search/topk.h"

void search_eval_init(subq_retrieval_eval *acc, const int *ks, int n_k) {
    memset(acc, 0, sizeof *acc);
    if (n_k > SUBQ_SEARCH_EVAL_MAX_K) n_k = SUBQ_SEARCH_EVAL_MAX_K;
    acc->n_k = n_k;
    for (int i = 0; i < n_k; i++) acc->k[i] = ks[i];
}

/* per row and K: mass/recall for learned and oracle */
enum { R_ML, R_MO, R_MW, R_RL, R_RO, R_RW, R_N };

/* query rows per block */
#define EVAL_ROWS 32

/* A thread's scratch: the floats one allocation at teacher, the ints one at top_t. */
typedef struct eval_scratch {
    float *teacher, *P, *L, *O, *qsum, *sel;
    int *top_t, *top_l, *top_o;
    unsigned char *mark;
} eval_scratch;

/* Rows [b0, b1) into res / counted: teacher P, learned scores L = cos(q_s(t), k_s(j)) up to
 * the row's common |q_s(t)|, oracle O = (1/n_head) sum_h q_h(t) . k(j) (the query heads folded
 * per KV head first), each [row][j - kb]. */
static void eval_rows(const search_layer_data *x, const float *Qs, const float *Ks, const float *inv_nk,
                      const float *kt, const int *start, int ds, subq_teacher_agg agg, int n_sink, int n_tail,
                      const subq_retrieval_eval *acc, int kmax, int b0, int b1, eval_scratch *w, double *res,
                      unsigned char *counted) {
    const attn_shape *sh = &x->shape;
    const int T = x->T, kb = start[b0], nkb = b1 - kb, B = b1 - b0, nk = acc->n_k;
    const int hd = sh->head_dim, g = sh->n_head / sh->n_head_kv, dk = sh->n_head_kv * hd, dq = sh->n_head * hd;
    teacher_block(x->q, x->k, kt, T, sh, start, b0, b1, n_sink, n_tail, agg, w->teacher, w->P, nkb, NULL, NULL);
    blas_sgemm(1, 0, 1, B, nkb, ds, 1.0f, Qs + (size_t)b0 * ds, ds, Ks + (size_t)kb * ds, ds, 0.0f, w->L, nkb);
    /* sum_h q_h . k_g = sum_g (sum_{h in group g} q_h) . k_g */
    memset(w->qsum, 0, (size_t)B * dk * sizeof(float));
    for (int t = b0; t < b1; t++)
        for (int h = 0; h < sh->n_head; h++)
            for (int c = 0; c < hd; c++)
                w->qsum[(size_t)(t - b0) * dk + (h / g) * hd + c] += x->q[(size_t)t * dq + (size_t)h * hd + c];
    blas_sgemm(1, 0, 1, B, nkb, dk, 1.0f / (float)sh->n_head, w->qsum, dk, x->k + (size_t)kb * dk, dk, 0.0f, w->O,
               nkb);
    for (int t = b0; t < b1; t++) {
        /* eligible keys s0 .. s0 + n - 1 = [start + n_sink, t - n_tail] (all causal keys when both are 0) */
        const int s0 = start[t] + n_sink, n = t - n_tail - s0 + 1;
        if (n < 2) continue;
        const size_t off = (size_t)(t - b0) * nkb + (s0 - kb);
        const float *p = w->P + off, *o = w->O + off;
        float *l = w->L + off;
        for (int i = 0; i < n; i++) l[i] *= inv_nk[s0 + i];
        int kk = kmax < n ? kmax : n;
        topk_indices(p, n, kk, w->top_t, w->sel);
        topk_indices(l, n, kk, w->top_l, w->sel);
        topk_indices(o, n, kk, w->top_o, w->sel);
        for (int ki = 0; ki < nk; ki++) {
            const int K = acc->k[ki];
            if (n <= K) continue;
            double *r = res + ((size_t)t * nk + ki) * R_N;
            counted[(size_t)t * nk + ki] = 1;
            for (int i = 0; i < K; i++) w->mark[w->top_t[i]] = 1;
            for (int i = 0; i < K; i++) {
                r[R_ML] += p[w->top_l[i]];
                r[R_MO] += p[w->top_o[i]];
                r[R_MW] += p[n - 1 - i]; /* the i-th most recent eligible key */
                r[R_RL] += w->mark[w->top_l[i]];
                r[R_RO] += w->mark[w->top_o[i]];
                r[R_RW] += w->mark[n - 1 - i];
            }
            r[R_RL] /= K;
            r[R_RO] /= K;
            r[R_RW] /= K;
            for (int i = 0; i < K; i++) w->mark[w->top_t[i]] = 0;
        }
    }
}

/* eval_rows over one block of rows (pool chunk), with the thread's scratch */
typedef struct eval_job {
    const search_layer_data *x;
    const float *Qs, *Ks, *inv_nk, *kt;
    const int *start;
    int ds, n_sink, n_tail, kmax;
    subq_teacher_agg agg;
    const subq_retrieval_eval *acc;
    eval_scratch *w;
    double *res;
    unsigned char *counted;
} eval_job;

static void eval_block(void *ctx, int b, int thread) {
    const eval_job *j = ctx;
    const int b0 = b * EVAL_ROWS, b1 = b0 + EVAL_ROWS < j->x->T ? b0 + EVAL_ROWS : j->x->T;
    eval_rows(j->x, j->Qs, j->Ks, j->inv_nk, j->kt, j->start, j->ds, j->agg, j->n_sink, j->n_tail, j->acc, j->kmax,
              b0, b1, &j->w[thread], j->res, j->counted);
}

subq_status search_eval_layer(const search_layer_data *x, const float *wq, const float *wk, int ds,
                              const search_rope *rope, subq_teacher_agg agg, int n_sink, int n_tail, subq_retrieval_eval *acc, pool *p,
                              subq_error *err) {
    const int T = x->T, nk = acc->n_k;
    const kernels *kern = kernels_get();
    if (n_sink < 0 || n_tail < 0)
        return subq_fail(err, SUBQ_ERR_ARG, "search evaluation: n_sink and n_tail must be >= 0");
    if (T <= 0 || nk == 0) return SUBQ_OK;
    const int n_threads = pool_threads(p);
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
    if ((st = search_prepare(x, wq, wk, ds, rope, p, start, kt, Qs, Ks, err))) goto done;
    /* 1 / |k_s(j)| with the training loss's smooth norm */
    for (int j = 0; j < T; j++)
        inv_nk[j] = 1.0f / sqrtf(kern->dot_f32(Ks + (size_t)j * ds, Ks + (size_t)j * ds, ds) + 1e-12f);
    eval_scratch *w = calloc((size_t)n_threads, sizeof *w);
    int oom = !w;
    for (int i = 0; !oom && i < n_threads; i++) {
        const size_t cells = (size_t)EVAL_ROWS * T, n_teacher = teacher_block_scratch(EVAL_ROWS, T, &x->shape);
        eval_scratch *sc = &w[i];
        /* teacher, P, L, O [EVAL_ROWS][T], qsum [EVAL_ROWS][dkv], sel [T]; top_t, top_l, top_o [kmax] */
        sc->teacher = malloc((n_teacher + 3 * cells + (size_t)EVAL_ROWS * dkv + T) * sizeof(float));
        sc->top_t = malloc(3 * (size_t)kmax * sizeof(int));
        sc->mark = calloc((size_t)T, 1);
        oom = !sc->teacher || !sc->top_t || !sc->mark;
        if (oom) continue;
        sc->P = sc->teacher + n_teacher;
        sc->L = sc->P + cells;
        sc->O = sc->L + cells;
        sc->qsum = sc->O + cells;
        sc->sel = sc->qsum + (size_t)EVAL_ROWS * dkv;
        sc->top_l = sc->top_t + kmax;
        sc->top_o = sc->top_l + kmax;
    }
    eval_job job = {.x = x, .Qs = Qs, .Ks = Ks, .inv_nk = inv_nk, .kt = kt, .start = start, .ds = ds, .agg = agg,
                    .n_sink = n_sink, .n_tail = n_tail, .acc = acc, .kmax = kmax, .w = w, .res = res,
                    .counted = counted};
    if (!oom) pool_run(p, (T + EVAL_ROWS - 1) / EVAL_ROWS, eval_block, &job);
    for (int i = 0; w && i < n_threads; i++) {
        free(w[i].teacher);
        free(w[i].top_t);
        free(w[i].mark);
    }
    free(w);
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
