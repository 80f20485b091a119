/* Per-head search training: a layer's heads as problems of their own (search_heads.h). */
#include "train/search/search_heads.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"

/* dst[t] = src[t][c0 .. c0 + n) for T rows of `width` floats */
static void columns(float *dst, const float *src, int T, int width, int c0, int n) {
    for (int t = 0; t < T; t++)
        memcpy(dst + (size_t)t * n, src + (size_t)t * width + c0, (size_t)n * sizeof(float));
}

subq_status search_head_view_make(const search_layer_data *x, int n_qhead, int n_khead, int a, search_head_view *v,
                                  subq_error *err) {
    memset(v, 0, sizeof *v);
    const attn_shape *sh = &x->shape;
    const int T = x->T, hd = sh->head_dim;
    if (n_qhead < 1 || n_khead < 1 || sh->n_head % n_qhead || n_qhead % n_khead || n_khead != sh->n_head_kv ||
        a < 0 || a >= n_qhead)
        return subq_fail(err, SUBQ_ERR_SHAPE, "search head %d of %d / %d does not fit %d query / %d KV heads", a,
                         n_qhead, n_khead, sh->n_head, sh->n_head_kv);
    const int g = sh->n_head / n_qhead, b = a / (n_qhead / n_khead);
    v->h0 = a * g, v->g = g;
    v->q = malloc((size_t)T * g * hd * sizeof(float));
    v->k = malloc((size_t)T * hd * sizeof(float));
    v->v = x->v ? malloc((size_t)T * hd * sizeof(float)) : NULL;
    v->out = x->attn_out ? malloc((size_t)T * g * hd * sizeof(float)) : NULL;
    if (!v->q || !v->k || (x->v && !v->v) || (x->attn_out && !v->out)) {
        search_head_view_free(v);
        return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory for a search head's view (%d tokens)", T);
    }
    columns(v->q, x->q, T, sh->n_head * hd, v->h0 * hd, g * hd);
    columns(v->k, x->k, T, sh->n_head_kv * hd, b * hd, hd);
    if (x->v) columns(v->v, x->v, T, sh->n_head_kv * hd, b * hd, hd);
    v->x = *x;
    v->x.q = v->q, v->x.k = v->k, v->x.v = v->v, v->x.attn_out = v->out;
    v->x.shape = (attn_shape){.n_head = g, .n_head_kv = 1, .head_dim = hd, .scale = sh->scale};
    return SUBQ_OK;
}

void search_head_view_scatter(const search_head_view *v, const search_layer_data *x) {
    if (!v->out || !x->attn_out) return;
    const int hd = x->shape.head_dim, width = x->shape.n_head * hd;
    for (int t = 0; t < x->T; t++)
        memcpy(x->attn_out + (size_t)t * width + (size_t)v->h0 * hd, v->out + (size_t)t * v->g * hd,
               (size_t)v->g * hd * sizeof(float));
}

void search_head_view_free(search_head_view *v) {
    free(v->q);
    free(v->k);
    free(v->v);
    free(v->out);
    memset(v, 0, sizeof *v);
}

subq_status search_loss_heads(const search_layer_data *x, const float *wq, const float *wk, int d_search, int n_qhead,
                              int n_khead, const search_rope *rope, const subq_search_loss_params *lp, float *dwq,
                              float *dwk, search_loss_sums *sums, pool *p, subq_error *err) {
    if (n_qhead == 1 && n_khead == 1)
        return search_loss_layer(x, wq, wk, d_search, rope, lp, 1.0f, dwq, dwk, sums, 0, p, err);
    memset(sums, 0, sizeof *sums);
    const size_t head = (size_t)d_search * x->d_model;
    subq_status s = SUBQ_OK;
    for (int a = 0; a < n_qhead && !s; a++) {
        const size_t b = (size_t)(a / (n_qhead / n_khead));
        search_head_view v;
        search_loss_sums hs;
        if ((s = search_head_view_make(x, n_qhead, n_khead, a, &v, err))) break;
        s = search_loss_layer(&v.x, wq + a * head, wk + b * head, d_search, rope, lp, 1.0f, dwq ? dwq + a * head : NULL,
                              dwk ? dwk + b * head : NULL, &hs, 0, p, err);
        if (!s) {
            search_head_view_scatter(&v, x);
            sums->nce += hs.nce, sums->kl += hs.kl, sums->n_queries += hs.n_queries, sums->flops += hs.flops;
        }
        search_head_view_free(&v);
    }
    return s;
}

subq_status search_eval_heads(const search_layer_data *x, const float *wq, const float *wk, int d_search, int n_qhead,
                              int n_khead, const search_rope *rope, const subq_search_loss_params *lp,
                              subq_retrieval_eval *acc, pool *p, subq_error *err) {
    if (n_qhead == 1 && n_khead == 1)
        return search_eval_layer(x, wq, wk, d_search, rope, lp->agg, lp->n_sink, lp->n_tail, acc, p, err);
    const size_t head = (size_t)d_search * x->d_model;
    subq_status s = SUBQ_OK;
    for (int a = 0; a < n_qhead && !s; a++) {
        search_head_view v;
        if ((s = search_head_view_make(x, n_qhead, n_khead, a, &v, err))) break;
        s = search_eval_layer(&v.x, wq + a * head, wk + (size_t)(a / (n_qhead / n_khead)) * head, d_search, rope,
                              lp->agg, lp->n_sink, lp->n_tail, acc, p, err);
        search_head_view_free(&v);
    }
    return s;
}
