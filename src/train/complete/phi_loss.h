/* Distillation of the completion maps from the frozen model's attention
 * logits over the mid region, with hand-written gradients.
 *
 * Query t (in a document starting at slot d0) sees the mid-region keys
 *   M_t = [d0 + n_sink, t - n_tail]      (prefix minus sinks and the tail of
 *                                         n_tail tokens that ends at t)
 * and is skipped when M_t is empty. For one query head h (KV head g):
 *   teacher  s_j  = scale q_t . k_j   (the layer's scale, layer_attn: 1/sqrt(head_dim) but
 *                                      for Gemma's 27B models)
 *   student  sh_j = log z(q_t, k_j) = LSE_f (lq_t[f] + lk_j[f]),
 *            lq = log phi_q^h(q), lk = log phi_k^g(k)
 * both shifted by the teacher max: r = s - max s, rh = sh - max s. Then
 *   KL   = tau^2 KL(softmax(r/tau) || softmax(rh/tau))
 *   top  = mean_{j: r_j >= -band} Huber(rh_j - r_j)             (the top band)
 *   fp   = mean_{j: r_j <  -band} Huber(max(0, rh_j + band))    (far keys pushed
 *                                                                into the band; 0 if none)
 *   Z    = Huber(max(0, LSE(rh) - LSE(r)))                      (log-partition
 *                                                                overestimation)
 *   L_t  = l_kl KL + (1 - l_kl) (l_top top + l_fp fp + l_z Z)
 * with Huber(x) = x^2/2 for |x| <= delta, else delta (|x| - delta/2).
 * Defaults: tau 1, l_kl 0.99, l_top 1, l_fp 2, l_z 4, band (Delta) 8, delta 1.
 * A layer's objective is the sum of L_t over query heads and queries; the
 * trainer divides by the count. */
#ifndef SUBQ_TRAIN_PHI_LOSS_H
#define SUBQ_TRAIN_PHI_LOSS_H

#include <stdint.h>

#include "complete/phi_maps.h"
#include "subq_lab.h"

subq_phi_loss_params phi_loss_default_params(void);

/* Parts of one query's loss (unweighted) and the absolute log-partition
 * error |LSE(rh) - LSE(r)|. */

typedef struct phi_loss_sums {
    double loss;                 /* sum of L_t */
    double part[SUBQ_PHI_N_PARTS];    /* sums of the parts */
    int64_t n_queries;           /* (head, query) pairs */
} phi_loss_sums;

/* Mid range of every query: M_t = [lo[t], hi[t]], empty when hi < lo. */
void phi_mid_ranges(const int32_t *seg, int T, int n_sink, int n_tail, int *lo, int *hi);
/* Queries with a non-empty mid region (per head). */
int64_t phi_count_queries(const int32_t *seg, int T, int n_sink, int n_tail);

/* Mean over query heads and queries with a non-empty mid region of
 * LSE_{j in M_t}(s_j) - log |M_t| (the teacher's mean log-kernel level over
 * the mid region; 0 when there are no such queries). The trainer starts
 * the maps' output biases at this level so z ~ exp(s) on average from step 0. */
double phi_teacher_level(const phi_dims *d, double scale, const float *q, const float *k, const int32_t *seg, int T,
                         int n_sink, int n_tail);

/* L_t of one query over n >= 1 mid keys from teacher logits s[n] and student
 * logits sh[n]; writes dL_t/dsh into grad (when not NULL) and the parts into
 * part[SUBQ_PHI_N_PARTS] (when not NULL). */
double phi_query_loss(const double *s, const double *sh, int n, const subq_phi_loss_params *p, double *grad, double *part);

/* One layer of one sequence at its attention scale: q [T][n_head*head_dim] and
 * k [T][n_head_kv*head_dim] post-RoPE (as captured), segment ids seg [T], layer parameters L (double,
 * phi_maps layout). Adds the loss sums into *sums and, when grad is not NULL,
 * d(sum_{h,t} L_t)/dL into grad. Deterministic and independent of n_threads. */
subq_status phi_loss_layer(const phi_dims *d, double scale, const double *L, const float *q, const float *k,
                           const int32_t *seg, int T, const subq_phi_loss_params *p, double *grad, phi_loss_sums *sums, int n_threads, subq_error *err);

#endif
