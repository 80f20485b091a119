/* Completion cache, one-way subtraction and the hybrid head (phi_cache.h). */
#include "complete/phi_cache.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "complete/phi_maps.h"

/* Both widths in [1, PHI_MAX_DIM]; else SUBQ_ERR_ARG naming `what`. */
static subq_status check_dims(const char *what, int d_phi, int head_dim, subq_error *err) {
    if (d_phi < 1 || d_phi > PHI_MAX_DIM || head_dim < 1 || head_dim > PHI_MAX_DIM)
        return subq_fail(err, SUBQ_ERR_ARG, "%s: d_phi %d / head_dim %d out of range [1, %d]", what, d_phi, head_dim,
                         PHI_MAX_DIM);
    return SUBQ_OK;
}

subq_status phi_cache_init(phi_cache *c, int d_phi, int head_dim, subq_error *err) {
    memset(c, 0, sizeof *c);
    if (check_dims("completion cache", d_phi, head_dim, err)) return SUBQ_ERR_ARG;
    c->d_phi = d_phi;
    c->head_dim = head_dim;
    c->m = malloc((size_t)d_phi * sizeof(double));
    c->u = malloc((size_t)d_phi * sizeof(double));
    c->T = malloc((size_t)d_phi * head_dim * sizeof(double));
    if (!c->m || !c->u || !c->T) {
        phi_cache_free(c);
        return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory for a completion cache");
    }
    phi_cache_reset(c);
    return SUBQ_OK;
}

void phi_cache_free(phi_cache *c) {
    free(c->m);
    free(c->u);
    free(c->T);
    memset(c, 0, sizeof *c);
}

void phi_cache_reset(phi_cache *c) {
    c->n = 0;
    for (int f = 0; f < c->d_phi; f++) {
        c->m[f] = -INFINITY;
        c->u[f] = 0.0;
    }
    memset(c->T, 0, (size_t)c->d_phi * c->head_dim * sizeof(double));
}

void phi_cache_add(phi_cache *c, const float *logphi_k, const float *v) {
    const int D = c->head_dim;
    for (int f = 0; f < c->d_phi; f++) {
        const double lk = logphi_k[f];
        double *T = c->T + (size_t)f * D;
        if (!(lk > -INFINITY)) continue; /* phi = 0 (or NaN): no mass */
        if (lk > c->m[f]) {
            /* new max: u <- u exp(m - lk) + 1, T <- T exp(m - lk) + v, m <- lk
             * (exp(-inf) = 0 for the first token) */
            const double r = exp(c->m[f] - lk);
            c->u[f] = c->u[f] * r + 1.0;
            for (int d = 0; d < D; d++) T[d] = T[d] * r + v[d];
            c->m[f] = lk;
        } else {
            /* w = exp(lk - m) <= 1: u += w, T += w v */
            const double w = exp(lk - c->m[f]);
            c->u[f] += w;
            for (int d = 0; d < D; d++) T[d] += w * v[d];
        }
    }
    c->n++;
}

size_t phi_cache_bytes(const phi_cache *c) { return (size_t)c->d_phi * (2 + (size_t)c->head_dim) * sizeof(double); }

subq_status phi_residual_init(phi_residual *r, int d_phi, int head_dim, subq_error *err) {
    memset(r, 0, sizeof *r);
    if (check_dims("completion residual", d_phi, head_dim, err)) return SUBQ_ERR_ARG;
    r->d_phi = d_phi;
    r->head_dim = head_dim;
    r->logmass = malloc((size_t)d_phi * sizeof(double));
    r->mean = malloc((size_t)d_phi * head_dim * sizeof(double));
    if (!r->logmass || !r->mean) {
        phi_residual_free(r);
        return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory for a completion residual");
    }
    r->empty = 1;
    return SUBQ_OK;
}

void phi_residual_free(phi_residual *r) {
    free(r->logmass);
    free(r->mean);
    memset(r, 0, sizeof *r);
}

void phi_residual_compute(phi_residual *r, const phi_cache *c, const float *logphi_k_retr, const float *const *v_retr,
                          int n_retr, double eps) {
    const int F = c->d_phi, D = c->head_dim;
    r->n_dropped = 0;
    r->empty = 1;
    if (c->n == 0 || n_retr >= c->n) { /* nothing cached, or all of it retrieved */
        for (int f = 0; f < F; f++) r->logmass[f] = -INFINITY;
        r->n_dropped = F;
        return;
    }
    for (int f = 0; f < F; f++) {
        double *mean = r->mean + (size_t)f * D;
        const double m = c->m[f], u = c->u[f];
        if (!(u > 0.0)) { /* no token has mass on this feature */
            r->logmass[f] = -INFINITY;
            r->n_dropped++;
            continue;
        }
        /* u_R = u - sum_{i in R} w_i,  T_R = T - sum_{i in R} w_i v_i,  w_i = exp(lk_i[f] - m) */
        double ur = u;
        for (int d = 0; d < D; d++) mean[d] = c->T[(size_t)f * D + d];
        for (int i = 0; i < n_retr; i++) {
            const double w = exp((double)logphi_k_retr[(size_t)i * F + f] - m);
            if (!(w > 0.0)) continue;
            ur -= w;
            for (int d = 0; d < D; d++) mean[d] -= w * v_retr[i][d];
        }
        /* clamp: a remainder at rounding level is no mass at all */
        if (!(ur > eps * u)) {
            r->logmass[f] = -INFINITY;
            r->n_dropped++;
            continue;
        }
        r->logmass[f] = m + log(ur);
        const double inv = 1.0 / ur;
        for (int d = 0; d < D; d++) mean[d] *= inv;
        r->empty = 0;
    }
}

void phi_complete_head(const phi_residual *r, int head_dim, const float *logphi_q, const float *s,
                       const float *const *v, int n_exact, float *out, phi_hybrid_info *info) {
    const int D = head_dim, F = r && !r->empty ? r->d_phi : 0;
    double acc[PHI_MAX_DIM];
    /* common shift M = max(max_j s_j, max_f a_f), a_f = lq_f + logmass_f */
    double M = -INFINITY;
    for (int j = 0; j < n_exact; j++)
        if (s[j] > M) M = s[j];
    for (int f = 0; f < F; f++) {
        const double a = (double)logphi_q[f] + r->logmass[f];
        if (a > M) M = a;
    }
    for (int d = 0; d < D; d++) out[d] = 0.0f;
    if (!isfinite(M)) { /* nothing to attend to (or a non-finite input) */
        if (info) *info = (phi_hybrid_info){0.0, -INFINITY, -INFINITY};
        return;
    }
    for (int d = 0; d < D; d++) acc[d] = 0.0;
    /* exact part: Z_E = sum_j e^{s_j - M},  N_E = sum_j e^{s_j - M} v_j */
    double ze = 0.0;
    for (int j = 0; j < n_exact; j++) {
        const double w = exp((double)s[j] - M);
        ze += w;
        for (int d = 0; d < D; d++) acc[d] += w * v[j][d];
    }
    /* completion: Z_hat = sum_f e^{a_f - M},  N_hat = sum_f e^{a_f - M} mean_f */
    double zh = 0.0;
    for (int f = 0; f < F; f++) {
        const double a = (double)logphi_q[f] + r->logmass[f];
        if (!(a > -INFINITY)) continue;
        const double w = exp(a - M);
        zh += w;
        const double *mean = r->mean + (size_t)f * D;
        for (int d = 0; d < D; d++) acc[d] += w * mean[d];
    }
    /* one normalisation: out = (N_E + N_hat) / (Z_E + Z_hat); the term at M is 1 */
    const double inv = 1.0 / (ze + zh);
    for (int d = 0; d < D; d++) out[d] = (float)(acc[d] * inv);
    if (info) {
        info->z_share = zh * inv;
        info->log_z_exact = ze > 0 ? M + log(ze) : -INFINITY;
        info->log_z_hat = zh > 0 ? M + log(zh) : -INFINITY;
    }
}

void phi_hybrid_head(const phi_cache *c, const float *logphi_q, const float *s, const float *const *v, int n_exact,
                     const int *retr, const float *logphi_k_retr, int n_retr, double eps, phi_residual *scratch,
                     float *out, phi_hybrid_info *info) {
    /* values of the retrieved entries (on the stack for the usual K) */
    enum { STACK = 128 };
    const float *stack_vr[STACK] = {0};
    const float **vr = n_retr <= STACK ? stack_vr : malloc((size_t)n_retr * sizeof(float *));
    if (!vr) { /* cannot subtract: selection only */
        phi_complete_head(NULL, c->head_dim, logphi_q, s, v, n_exact, out, info);
        return;
    }
    for (int i = 0; i < n_retr; i++) vr[i] = v[retr[i]];
    phi_residual_compute(scratch, c, logphi_k_retr, vr, n_retr, eps);
    phi_complete_head(scratch, c->head_dim, logphi_q, s, v, n_exact, out, info);
    if (vr != stack_vr) free(vr);
}

double phi_budget_tokens(int n_sink, int n_tail, int k, int d_phi, int head_dim, double n_gen) {
    const double fetch = d_phi / 2.0 + (double)d_phi / head_dim;
    return (double)(n_sink + n_tail + k) + (n_gen > 0 ? fetch / n_gen : fetch);
}
