/* The completion's fixed-size summary of the mid region, and the hybrid
 * (exact + completion) attention output of one query head.
 *
 * Cache of one layer and KV head over the mid-region tokens i added so far,
 * in the numerically stable form (per feature f):
 *   m[f]    = max_i log phi_k(k_i)[f]
 *   u[f]    = sum_i exp(log phi_k(k_i)[f] - m[f])
 *   T[f,:]  = sum_i exp(log phi_k(k_i)[f] - m[f]) v_i
 * (so S = sum_i phi_k(k_i) v_i^T = exp(m) T and sum_i phi_k(k_i) = exp(m) u).
 * Tokens are added one at a time with online rescaling of m, so the cache
 * can grow as tokens leave the tail window (teacher-forced evaluation at
 * every position, decode); the result equals the batch definition.
 * Accumulators are double: one-way subtraction of retrieved tokens cancels,
 * and double keeps the remainder meaningful far below float's 1e-7.
 *
 * Per query (head h of KV head g), with E = anchors + retrieved R (R from the
 * cache's tokens) and scores s_j = scale q.k_j (the layer's scale):
 *   u_R[f]   = u[f] - sum_{i in R} exp(lk_i[f] - m[f])       (same shift m)
 *   T_R[f,:] = T[f,:] - sum_{i in R} exp(lk_i[f] - m[f]) v_i
 *   clamp: a feature whose remainder u_R[f] <= eps * u[f] (all of its mass was
 *          retrieved, up to rounding) is dropped: it adds no mass, so the
 *          completion never has negative mass;
 *   a_f      = log phi_q(q)[f] + m[f] + log u_R[f]
 *   Z_hat    = exp(LSE_f a_f),  y_hat = sum_f softmax(a)_f T_R[f]/u_R[f],  N_hat = Z_hat y_hat
 *   out      = (N_E + N_hat) / (Z_E + Z_hat)
 * evaluated with one common shift M = max(max_j s_j, max_f a_f), so logits
 * of +-80 (and far beyond) stay finite. */
#ifndef SUBQ_PHI_CACHE_H
#define SUBQ_PHI_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "subq.h"

typedef struct phi_cache {
    int d_phi, head_dim;
    int64_t n;                   /* tokens added */
    double *m, *u;               /* [d_phi] */
    double *T;                   /* [d_phi][head_dim] */
} phi_cache;

subq_status phi_cache_init(phi_cache *c, int d_phi, int head_dim, subq_error *err);
void phi_cache_free(phi_cache *c);
/* Empty the cache (new sequence). */
void phi_cache_reset(phi_cache *c);
/* Add one mid-region token: its log phi_k(k) [d_phi] and value v [head_dim].
 * Online form: where lk[f] > m[f] the running sums are rescaled by
 * exp(m_old - lk) first; -INFINITY entries (phi = 0) add nothing. */
void phi_cache_add(phi_cache *c, const float *logphi_k, const float *v);
/* Bytes held by the summary (m, u, T). */
size_t phi_cache_bytes(const phi_cache *c);

/* The cache minus the retrieved tokens of one query (per KV head; shared by
 * the query heads of a group): per feature the log of the remaining mass,
 * logmass[f] = m[f] + log u_R[f] (-INFINITY where dropped), and the mean
 * value of the remainder, mean[f,:] = T_R[f,:] / u_R[f]. */
typedef struct phi_residual {
    int d_phi, head_dim;
    double *logmass;             /* [d_phi] */
    double *mean;                /* [d_phi][head_dim] */
    int n_dropped;               /* features clamped away */
    int empty;                   /* nothing left: no completion */
} phi_residual;

subq_status phi_residual_init(phi_residual *r, int d_phi, int head_dim, subq_error *err);
void phi_residual_free(phi_residual *r);

/* One-way subtraction of the n_retr retrieved tokens (their log phi_k rows
 * [n_retr][d_phi] and values v_retr[i] -> [head_dim]) from the cache. The
 * retrieved tokens must be tokens of the cache. eps: clamp threshold
 * relative to u[f] (PHI_EPS_DEFAULT). n_retr >= c->n means everything was
 * retrieved: the residual is empty. */
#define PHI_EPS_DEFAULT 1e-9
void phi_residual_compute(phi_residual *r, const phi_cache *c, const float *logphi_k_retr, const float *const *v_retr,
                          int n_retr, double eps);

typedef struct phi_hybrid_info {
    double z_share;              /* Z_hat / (Z_E + Z_hat) */
    double log_z_exact;          /* log Z_E */
    double log_z_hat;            /* log Z_hat (-INFINITY when no completion) */
} phi_hybrid_info;

/* out [head_dim] = (N_E + N_hat) / (Z_E + Z_hat) for one query head: exact
 * set of n_exact entries with scaled scores s[j] and values v[j]
 * ([head_dim] each), completion from the residual of its KV head and the
 * query's log phi_q [d_phi]. r == NULL: selection only (exact softmax over
 * E). info may be NULL. An empty E and residual gives zeros. */
void phi_complete_head(const phi_residual *r, int head_dim, const float *logphi_q, const float *s,
                       const float *const *v, int n_exact, float *out, phi_hybrid_info *info);

/* Both steps for one query head: the retrieved tokens are entries retr[i]
 * of the exact set (their values v[retr[i]]), with log phi_k rows
 * logphi_k_retr [n_retr][d_phi]; `scratch` is a residual of the cache's
 * sizes (overwritten). */
void phi_hybrid_head(const phi_cache *c, const float *logphi_q, const float *s, const float *const *v, int n_exact,
                     const int *retr, const float *logphi_k_retr, int n_retr, double eps, phi_residual *scratch,
                     float *out, phi_hybrid_info *info);

/* Token-equivalent KV reads of one layer and KV head per decode step:
 * exact n_sink + n_tail + k, plus the cache's one-time fetch of
 * d_phi/2 + d_phi/head_dim tokens amortised over n_gen generated tokens
 * (T is d_phi x head_dim values = d_phi/2 tokens of key+value; m and u are
 * 2 d_phi values = d_phi/head_dim tokens). */
double phi_budget_tokens(int n_sink, int n_tail, int k, int d_phi, int head_dim, double n_gen);

#endif
