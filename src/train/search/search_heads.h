/* Per-head search training: one layer's problem as one problem per query
 * search head (subq_search_granularity). Search head a of n_qhead serves
 * the G = n_head / n_qhead query heads [a*G, (a+1)*G) and ranks key search
 * head b = a / (n_qhead / n_khead), whose keys are KV head b's: the view
 * holds those heads' q columns, KV head b's k and v, and the shape
 * {G heads, 1 KV head}. Its teacher (teacher.h) is then the attention of
 * those G heads aggregated (G = 1: the head's own), and its raw-QK oracle
 * their mean logit, with no code of the losses changed. */
#ifndef SUBQ_TRAIN_SEARCH_HEADS_H
#define SUBQ_TRAIN_SEARCH_HEADS_H

#include "train/search/search_eval.h"
#include "train/search/search_loss.h"

typedef struct search_head_view {
    search_layer_data x;    /* the view (x.attn_out: out below, or NULL) */
    float *q, *k, *v, *out; /* its own copies: [T][G*hd], [T][hd], [T][hd], [T][G*hd] */
    int h0, g;              /* the query heads it covers: [h0, h0 + g) */
} search_head_view;

/* The view of search head a of layer data x (with x->attn_out, a buffer
 * for its heads' attention output too). */
subq_status search_head_view_make(const search_layer_data *x, int n_qhead, int n_khead, int a, search_head_view *v,
                                  subq_error *err);
/* The view's attention output into its heads' columns of x->attn_out. */
void search_head_view_scatter(const search_head_view *v, const search_layer_data *x);
void search_head_view_free(search_head_view *v);

/* The losses of one layer with n_qhead / n_khead search heads (wq
 * [n_qhead * d_search][d_model], wk [n_khead * d_search][d_model]): one
 * search_loss_layer per query search head over its view, sums added up
 * (n_queries counts a query once per search head), gradients (when dwq,
 * dwk are not NULL) into each head's rows; x->attn_out gets every head's
 * output. One head each (a layer's shared set): search_loss_layer itself. */
subq_status search_loss_heads(const search_layer_data *x, const float *wq, const float *wk, int d_search, int n_qhead,
                              int n_khead, const search_rope *rope, const subq_search_loss_params *lp, float *dwq,
                              float *dwk, search_loss_sums *sums, pool *p, subq_error *err);
/* The retrieval metrics of one layer, summed over its search heads, each
 * against its view's teacher and raw-QK oracle. */
subq_status search_eval_heads(const search_layer_data *x, const float *wq, const float *wk, int d_search, int n_qhead,
                              int n_khead, const search_rope *rope, const subq_search_loss_params *lp,
                              subq_retrieval_eval *acc, pool *p, subq_error *err);

#endif
