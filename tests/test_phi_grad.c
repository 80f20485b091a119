/* Analytic gradients of the completion-map distillation (src/train/complete/phi_loss.c,
 * src/phi/phi_net.c) against central finite differences, in double:
 *   - every loss term alone (KL, L_top, L_fp, L_Z) and the default mix,
 *   - w.r.t. every parameter group (Ws, bs, W1, b1, W2, b2, alpha, Wo, bo)
 *     of phi_q and phi_k, at alpha = 0 and alpha != 0,
 *   - on a small GQA problem with two documents (block-causal mid regions),
 *     teacher logits spread well past the band, and a configuration whose
 *     features barely overlap (the direct per-pair path, Z < 1e-200);
 * plus the per-query loss against finite differences in the student logits,
 * the float forward (phi_log_features) against the double one, and the
 * layer gradient being bitwise independent of the thread count. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "train/complete/phi_loss.h"
#include "complete/phi_maps.h"
#include "complete/phi_net.h"
#include "test_util.h"

#define T_LEN 14

static double worst_rel; /* largest parameter-gradient relative error seen */

typedef struct problem {
    phi_dims d;
    int T;
    int32_t seg[T_LEN];
    float *q, *k;
    double *L;
    size_t n_params;
} problem;

static void problem_init(problem *P, double q_std, uint64_t seed) {
    P->d = (phi_dims){.head_dim = 4, .d_emb = 5, .d_hidden = 6, .d_phi = 3, .n_head = 4, .n_head_kv = 2};
    P->T = T_LEN;
    for (int t = 0; t < P->T; t++) P->seg[t] = t < 8 ? 0 : 1;
    uint64_t rng = rng_seed(seed);
    const int D = P->d.head_dim;
    P->q = malloc((size_t)P->T * P->d.n_head * D * sizeof(float));
    P->k = malloc((size_t)P->T * P->d.n_head_kv * D * sizeof(float));
    for (int i = 0; i < P->T * P->d.n_head * D; i++) P->q[i] = (float)(q_std * rng_normal(&rng));
    for (int i = 0; i < P->T * P->d.n_head_kv * D; i++) P->k[i] = (float)(q_std * rng_normal(&rng));
    P->n_params = phi_layer_size(&P->d);
    P->L = malloc(P->n_params * sizeof(double));
    for (size_t i = 0; i < P->n_params; i++) P->L[i] = 0.6 * rng_normal(&rng);
}

static void problem_free(problem *P) {
    free(P->q);
    free(P->k);
    free(P->L);
}

/* set alpha of every map */
static void set_alpha(problem *P, double a) {
    for (int w = 0; w < 2; w++)
        for (int h = 0; h < phi_n_maps(&P->d, w); h++) P->L[phi_param_offset(&P->d, w, PHI_ALPHA, h)] = a;
}

static double objective(problem *P, const subq_phi_loss_params *lp, double *grad, phi_loss_sums *sums_out, int threads) {
    phi_loss_sums sums = {0};
    subq_error err = {0};
    subq_status s = phi_loss_layer(&P->d, 1.0 / sqrt((double)P->d.head_dim), P->L, P->q, P->k, P->seg, P->T, lp, grad, &sums, threads, &err);
    if (s) {
        fprintf(stderr, "phi_loss_layer: %s\n", err.msg);
        return NAN;
    }
    if (sums_out) *sums_out = sums;
    return sums.loss;
}

/* Relative error ||analytic - numeric|| / ||numeric|| over the entries of
 * every (group, tensor), all heads; reports the worst. */
static void check_grads(problem *P, const subq_phi_loss_params *lp, const char *what) {
    double *g = calloc(P->n_params, sizeof(double));
    phi_loss_sums sums;
    objective(P, lp, g, &sums, 2);
    static const char *tn[PHI_N_TENSORS] = {"Ws", "bs", "W1", "b1", "W2", "b2", "alpha", "Wo", "bo"};
    for (int w = 0; w < 2; w++)
        for (int t = 0; t < PHI_N_TENSORS; t++) {
            double num2 = 0, diff2 = 0, ana2 = 0;
            for (int h = 0; h < phi_n_maps(&P->d, w); h++) {
                size_t off = phi_param_offset(&P->d, w, t, h), n = phi_tensor_size(&P->d, t);
                for (size_t e = 0; e < n; e++) {
                    double *x = &P->L[off + e], x0 = *x, step = 1e-6 * (fabs(x0) > 1 ? fabs(x0) : 1);
                    *x = x0 + step;
                    double fp = objective(P, lp, NULL, NULL, 1);
                    *x = x0 - step;
                    double fm = objective(P, lp, NULL, NULL, 1);
                    *x = x0;
                    double num = (fp - fm) / (2 * step), ana = g[off + e];
                    num2 += num * num;
                    ana2 += ana * ana;
                    diff2 += (num - ana) * (num - ana);
                }
            }
            double rel = sqrt(diff2) / (sqrt(num2) > 1e-12 ? sqrt(num2) : 1e-12);
            /* an identically zero gradient (e.g. the block at alpha = 0) must be zero both ways */
            int ok = sqrt(num2) < 1e-9 && sqrt(ana2) < 1e-9 ? 1 : rel < 1e-3;
            if (!(sqrt(num2) < 1e-9 && sqrt(ana2) < 1e-9) && rel > worst_rel) worst_rel = rel;
            CHECK(ok, "%s: phi_%c %s gradient rel err %.3g (|num| %.3g |ana| %.3g)", what, w == PHI_Q ? 'q' : 'k',
                  tn[t], rel, sqrt(num2), sqrt(ana2));
        }
    free(g);
}

/* d L_t / d sh against finite differences, for each term alone */
static void check_query_loss(void) {
    uint64_t rng = rng_seed(7);
    enum { N = 23 };
    double s[N], sh[N], g[N], part[SUBQ_PHI_N_PARTS];
    for (int j = 0; j < N; j++) {
        s[j] = 6.0 * rng_normal(&rng);
        sh[j] = s[j] + 2.5 * rng_normal(&rng) + 1.0; /* overestimates: L_Z active */
    }
    for (int term = 0; term < 5; term++) {
        subq_phi_loss_params p = phi_loss_default_params();
        if (term < 4) {
            p.l_kl = term == 0 ? 1.0 : 0.0;
            p.l_top = term == 1;
            p.l_fp = term == 2;
            p.l_z = term == 3;
        }
        p.tau = term == 0 ? 1.7 : 1.0; /* a temperature != 1 for the KL */
        phi_query_loss(s, sh, N, &p, g, part);
        CHECK(term == 4 || (term == 0 ? part[SUBQ_PHI_PART_KL] : part[term]) > 0, "query loss term %d inactive", term);
        double num2 = 0, diff2 = 0;
        for (int j = 0; j < N; j++) {
            double x0 = sh[j], h = 1e-6;
            sh[j] = x0 + h;
            double fp = phi_query_loss(s, sh, N, &p, NULL, NULL);
            sh[j] = x0 - h;
            double fm = phi_query_loss(s, sh, N, &p, NULL, NULL);
            sh[j] = x0;
            double num = (fp - fm) / (2 * h);
            num2 += num * num;
            diff2 += (num - g[j]) * (num - g[j]);
        }
        double rel = sqrt(diff2 / (num2 > 0 ? num2 : 1e-300));
        CHECK(rel < 1e-6, "query loss term %d: d/dsh rel err %.3g", term, rel);
    }
}

/* the float forward agrees with the double batched forward */
static void check_float_forward(void) {
    problem P;
    problem_init(&P, 1.0, 11);
    set_alpha(&P, 0.8);
    phi_maps *m;
    subq_error err = {0};
    int layers[1] = {2};
    if (phi_maps_new(&P.d, 3, layers, 1, 0, &m, &err)) {
        CHECK(0, "phi_maps_new: %s", err.msg);
        problem_free(&P);
        return;
    }
    for (size_t i = 0; i < P.n_params; i++) m->data[i] = (float)P.L[i];
    for (size_t i = 0; i < P.n_params; i++) P.L[i] = m->data[i];
    const phi_dims *d = &P.d;
    double X[4], acts[64], out[3];
    float xf[4], lf[3];
    double worst = 0;
    uint64_t rng = rng_seed(3);
    for (int w = 0; w < 2; w++)
        for (int h = 0; h < phi_n_maps(d, w); h++)
            for (int rep = 0; rep < 5; rep++) {
                for (int c = 0; c < 4; c++) X[c] = xf[c] = 2.0f * rng_normal(&rng);
                phi_map_forward_d(d, P.L, w, h, X, 1, acts, out);
                phi_log_features(m, 2, w, h, xf, lf);
                for (int f = 0; f < 3; f++) {
                    double e = fabs(out[f] - lf[f]) / (1 + fabs(out[f]));
                    if (e > worst) worst = e;
                }
            }
    CHECK(worst < 1e-5, "float forward vs double forward: %.3g", worst);
    phi_log_features(m, 1, PHI_Q, 0, xf, lf);
    CHECK(lf[0] == -INFINITY && lf[2] == -INFINITY, "a layer without maps gives log phi = -inf");
    phi_maps_free(m);
    problem_free(&P);
}

static void check_threads(void) {
    problem P;
    problem_init(&P, 3.0, 5);
    set_alpha(&P, 0.5);
    subq_phi_loss_params lp = phi_loss_default_params();
    lp.n_sink = 1;
    lp.n_tail = 2;
    double *g1 = calloc(P.n_params, sizeof(double)), *g2 = calloc(P.n_params, sizeof(double));
    double a = objective(&P, &lp, g1, NULL, 1), b = objective(&P, &lp, g2, NULL, 2);
    CHECK(a == b && memcmp(g1, g2, P.n_params * sizeof(double)) == 0, "loss and gradient depend on the thread count");
    int64_t nq = phi_count_queries(P.seg, P.T, lp.n_sink, lp.n_tail);
    phi_loss_sums s;
    objective(&P, &lp, NULL, &s, 1);
    /* doc 0: t in [3, 7] has mid [1, t-2]: 5 queries; doc 1: t in [11, 13]: 3 queries */
    CHECK(nq == 8 && s.n_queries == nq * P.d.n_head, "query count %lld (%lld pairs)", (long long)nq,
          (long long)s.n_queries);
    free(g1);
    free(g2);
    problem_free(&P);
}

int main(void) {
    check_query_loss();
    check_float_forward();
    check_threads();
    const char *names[5] = {"KL", "L_top", "L_fp", "L_Z", "default mix"};
    for (int alpha_case = 0; alpha_case < 2; alpha_case++)
        for (int term = 0; term < 5; term++) {
            problem P;
            problem_init(&P, 3.0, 100 + term);
            set_alpha(&P, alpha_case ? 0.7 : 0.0);
            subq_phi_loss_params lp = phi_loss_default_params();
            lp.n_sink = 1;
            lp.n_tail = 2;
            if (term < 4) {
                lp.l_kl = term == 0 ? 1.0 : 0.0;
                lp.l_top = term == 1;
                lp.l_fp = term == 2;
                lp.l_z = term == 3;
            }
            if (term == 0) lp.tau = 1.5;
            if (term == 2) lp.band = 3.0; /* more far keys */
            if (term == 3) /* student overestimates: raise every bo of phi_q */
                for (int h = 0; h < P.d.n_head; h++)
                    for (int f = 0; f < P.d.d_phi; f++) P.L[phi_param_offset(&P.d, PHI_Q, PHI_BO, h) + f] += 3.0;
            phi_loss_sums s;
            objective(&P, &lp, NULL, &s, 1);
            const int idx[4] = {SUBQ_PHI_PART_KL, SUBQ_PHI_PART_TOP, SUBQ_PHI_PART_FP, SUBQ_PHI_PART_Z};
            CHECK(term == 4 || s.part[idx[term]] > 1e-3, "%s term inactive (%.3g)", names[term],
                  term < 4 ? s.part[idx[term]] : 0);
            char what[64];
            snprintf(what, sizeof what, "%s, alpha %s", names[term], alpha_case ? "0.7" : "0");
            check_grads(&P, &lp, what);
            problem_free(&P);
        }
    /* features that barely overlap: Z_tj < 1e-200 takes the direct path */
    {
        problem P;
        problem_init(&P, 3.0, 77);
        set_alpha(&P, 0.4);
        const double boq[3] = {0, -600, -300}, bok[3] = {-600, 0, -300};
        for (int w = 0; w < 2; w++)
            for (int h = 0; h < phi_n_maps(&P.d, w); h++) {
                size_t o = phi_param_offset(&P.d, w, PHI_BO, h);
                for (int f = 0; f < 3; f++) P.L[o + f] = w == PHI_Q ? boq[f] : bok[f];
            }
        subq_phi_loss_params lp = phi_loss_default_params();
        lp.n_sink = 1;
        lp.n_tail = 2;
        phi_loss_sums s;
        double L = objective(&P, &lp, NULL, &s, 1);
        CHECK(isfinite(L) && s.part[SUBQ_PHI_PART_LSE] / s.n_queries > 100, "direct path: loss %g, mean |dLSE| %g", L,
              s.part[SUBQ_PHI_PART_LSE] / s.n_queries);
        check_grads(&P, &lp, "direct pairs");
        problem_free(&P);
    }
    printf("largest relative error of a parameter gradient: %.3g\n", worst_rel);
    return test_summary();
}
