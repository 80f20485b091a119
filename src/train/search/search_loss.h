/* Distillation losses for search projections, with hand-written gradients
 * through the linear maps q_s = W_Qs h, k_s = W_Ks h.
 *
 * For each query t with eligible keys E_t = [start_t + n_sink, t - n_tail]
 * (the keys the sparse runtime retrieves among: it always attends the first
 * n_sink keys of the document and the n_tail most recent ones itself, so
 * the search space need not rank them; n_sink = n_tail = 0 is all of the
 * causal block [start_t, t]), |E_t| >= 2 (with one key or none there is
 * nothing to rank and the query is skipped; e.g. a document's first token
 * when n_sink = n_tail = 0), teacher p_t over E_t (teacher_row_mid: the
 * model's attention renormalised over E_t), and P_t = the teacher's
 * top-k_pos keys (ties: earlier key):
 *   InfoNCE  L_t = -log( sum_{j in P_t} e^{z_tj} / sum_{j in E_t} e^{z_tj} ),
 *            z_tj = cos(q_s(t), k_s(j)) / tau
 *   KL       K_t = sum_{j in E_t} p_tj (log p_tj - log r_tj),
 *            r_t = softmax_{E_t}( q_s(t) . k_s(j) / sqrt(d_search) / tau_kl )
 * The objective of one layer is (alpha sum_t L_t + beta sum_t K_t) / N over
 * the N non-skipped queries; the trainer averages it over layers. Cosines
 * use smooth norms |x| = sqrt(x.x + 1e-12) so the loss is differentiable
 * everywhere.
 *
 * With a rotary part (search_rope.h), q_s and k_s above are the rotated
 * vectors R(pos_t) W h_t, at each token's position in its document; a
 * rotation's backward is its transpose, so dW = (R^T dq_s)^T h.
 *
 * Memory is bounded for long sequences: queries are processed in chunks of
 * rows, so only chunk x T score matrices exist at a time. */
#ifndef SUBQ_TRAIN_SEARCH_LOSS_H
#define SUBQ_TRAIN_SEARCH_LOSS_H

#include <stdint.h>

#include "base/pool.h"
#include "search/search_rope.h"
#include "train/search/teacher.h"
#include "subq.h"

/* One layer of one sequence, as captured at the attention seam. */
typedef struct search_layer_data {
    int T;
    const int32_t *pos;      /* [T] positions (in the document); needed with a rotary part */
    const int32_t *seg;      /* [T] segment ids (non-decreasing) */
    int d_model;
    const float *h;          /* [T][d_model] normed hidden state */
    const float *q, *k;      /* [T][n_head*head_dim], [T][n_head_kv*head_dim], post-RoPE */
    const float *v;          /* [T][n_head_kv*head_dim] */
    float *attn_out;         /* NULL, or [T][n_head*head_dim]: the loss writes the layer's attention output */
    attn_shape shape;
} search_layer_data;

typedef struct search_loss_sums {
    double nce, kl;          /* sums over queries (not averaged) */
    int64_t n_queries;       /* non-skipped queries */
    double flops;            /* floating-point operations of this call, counted (not timed):
                                projections, the teacher's logits and softmax over each query's
                                causal keys, the student's scores, losses and (with gradients)
                                dq, dk and dW, as 2 per multiply-add and ~1 per other step */
} search_loss_sums;

/* Y[t][a] = sum_i W[a][i] X[t][i] for T rows of X (T x d) and W (ds x d):
 * the projection q_s = W_Qs h used by training and evaluation alike. */
void search_project(float *Y, const float *X, const float *W, int T, int d, int ds, pool *p);

/* What the loss and the evaluation of a layer start from: each query's
 * segment start [T], the keys transposed (teacher_keys_transpose) and the
 * projected queries and keys Qs = H W_Qs^T, Ks = H W_Ks^T [T][ds], rotated
 * at x->pos by `rope` (NULL or n_rot 0: not rotated). */
subq_status search_prepare(const search_layer_data *x, const float *wq, const float *wk, int ds,
                           const search_rope *rope, pool *p, int *start, float *kt, float *Qs, float *Ks,
                           subq_error *err);

/* Number of non-skipped queries (those with >= 2 eligible keys, i.e. at
 * position >= n_sink + n_tail + 1 within their document). */
int64_t search_count_queries(const int32_t *seg, int T, int n_sink, int n_tail);

/* Loss sums of one layer for projections wq, wk ([d_search][d_model]).
 * With x->attn_out, the teacher's logits also give the layer's attention
 * output there (the forward's own, up to rounding). When dwq / dwk are not
 * NULL, adds
 *   grad_scale * d( alpha sum_t L_t + beta sum_t K_t ) / dW
 * into them. `chunk_rows` <= 0 picks a default (about 2^20 / T rows).
 * Deterministic, and independent of the pool's threads: every gradient element is
 * summed by one thread in a fixed order. */
subq_status search_loss_layer(const search_layer_data *x, const float *wq, const float *wk, int d_search,
                              const search_rope *rope, const subq_search_loss_params *p, float grad_scale, float *dwq, float *dwk,
                              search_loss_sums *out, int chunk_rows, pool *threads, subq_error *err);

#endif
