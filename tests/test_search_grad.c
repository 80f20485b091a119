/* Analytic gradients of the search-projection losses (InfoNCE and KL,
 * src/train/search/search_loss.c) against central finite differences of an
 * independent double-precision implementation of the same objective, on
 * random small problems with block-causal segments, GQA and both head
 * aggregations, over all causal keys and over the retrieval-eligible keys
 * only (--sink / --tail: the first n_sink keys of each document and the
 * n_tail most recent keys left out, teacher renormalised over the rest),
 * and with the search vectors' last dims rotated by position (search_rope.h:
 * part or all of them, positions near 0 and near 10^6); per-head search
 * (search_heads.h) against the same objective summed over problems that
 * hold one search head's query heads and KV head, sliced here.
 * Also: the loss values agree, results do not depend on the thread count or
 * the query-row chunking, top-k / teacher basics, and the restricted teacher
 * when fp32 underflows on every retrieval-eligible key. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/pool.h"
#include "base/rng.h"
#include "train/search/search_heads.h"
#include "train/search/search_loss.h"
#include "train/search/teacher.h"
#include "train/search/topk.h"
#include "test_util.h"

static pool *pools[4]; /* pools[n]: n threads (the losses run on a pool) */

typedef struct problem {
    int T, d, ds, nh, nkv, hd;
    int32_t seg[64], pos[64];
    search_rope rope;
    float *h, *q, *k, *wq, *wk;
} problem;

static float *randn(int n, float std, uint64_t *rng) {
    float *v = malloc((size_t)n * sizeof(float));
    for (int i = 0; i < n; i++) v[i] = std * rng_normal(rng);
    return v;
}

static void problem_free(problem *P) {
    free(P->h);
    free(P->q);
    free(P->k);
    free(P->wq);
    free(P->wk);
}

/* ---- the objective in double, written from the definitions --------------- */

/* teacher p[j - lo] for j in [lo, hi] (double): each head's softmax over all
 * of the causal block [s, t], aggregated, then restricted to [lo, hi] and
 * renormalised there (lo = s, hi = t: the plain teacher) */
static void ref_teacher(const problem *P, int t, int s, int lo, int hi, subq_teacher_agg agg, double *out) {
    int n = t - s + 1, g = P->nh / P->nkv;
    double sc[64], p[64];
    for (int j = 0; j < n; j++) p[j] = 0;
    for (int h = 0; h < P->nh; h++) {
        double mx = -1e300, sum = 0;
        for (int j = 0; j < n; j++) {
            double dsum = 0;
            for (int c = 0; c < P->hd; c++)
                dsum += (double)P->q[(size_t)t * P->nh * P->hd + h * P->hd + c] *
                        P->k[(size_t)(s + j) * P->nkv * P->hd + (h / g) * P->hd + c];
            sc[j] = dsum / sqrt((double)P->hd);
            if (sc[j] > mx) mx = sc[j];
        }
        for (int j = 0; j < n; j++) sum += (sc[j] = exp(sc[j] - mx));
        for (int j = 0; j < n; j++) {
            double v = sc[j] / sum;
            if (agg == SUBQ_TEACHER_AGG_MEAN) p[j] += v / P->nh;
            else if (v > p[j]) p[j] = v;
        }
    }
    double sum = 0;
    for (int j = lo; j <= hi; j++) sum += p[j - s];
    for (int j = lo; j <= hi; j++) out[j - lo] = p[j - s] / sum;
}

static int cmp_asc(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The taken key (a positive) with the least p: the k_pos-th best. */
static int best_last(const double *p, const int *taken, int n) {
    int last = -1;
    for (int j = 0; j < n; j++)
        if (taken[j] && (last < 0 || p[j] < p[last])) last = j;
    return last;
}

/* alpha * sum_t InfoNCE_t + beta * sum_t KL_t with W given in double.
 * nce_range (may be NULL): the least and most InfoNCE sum over the sets of
 * positives that teacher values tied within rounding (1e-6) at the k_pos-th
 * place allow (the library's float teacher may take either): lse over the
 * positives grows with each z, so the extremes take the tied keys of
 * largest and smallest z. */
static double ref_objective(const problem *P, const double *wq, const double *wk, const subq_search_loss_params *lp,
                            double *nce_out, double *kl_out, double *nce_range) {
    int T = P->T, d = P->d, ds = P->ds;
    double qs[64][16], ks[64][16];
    for (int t = 0; t < T; t++)
        for (int a = 0; a < ds; a++) {
            double x = 0, y = 0;
            for (int i = 0; i < d; i++) {
                x += wq[a * d + i] * P->h[t * d + i];
                y += wk[a * d + i] * P->h[t * d + i];
            }
            qs[t][a] = x;
            ks[t][a] = y;
        }
    /* the rotary part: pair i of the last n_rot dims turns by pos * scale * base^(-2i/n_rot) */
    const search_rope *rp = &P->rope;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < rp->n_rot / 2; i++) {
            const int a0 = ds - rp->n_rot + 2 * i;
            const double th = P->pos[t] * rp->scale * pow(rp->base, -2.0 * i / rp->n_rot);
            const double q0 = qs[t][a0], q1 = qs[t][a0 + 1], k0 = ks[t][a0], k1 = ks[t][a0 + 1];
            qs[t][a0] = q0 * cos(th) - q1 * sin(th), qs[t][a0 + 1] = q0 * sin(th) + q1 * cos(th);
            ks[t][a0] = k0 * cos(th) - k1 * sin(th), ks[t][a0 + 1] = k0 * sin(th) + k1 * cos(th);
        }
    double nce = 0, kl = 0;
    if (nce_range) nce_range[0] = nce_range[1] = 0;
    for (int t = 0; t < T; t++) {
        int d0 = t;
        while (d0 > 0 && P->seg[d0 - 1] == P->seg[t]) d0--;
        /* eligible keys: s .. t - n_tail, s = document start + n_sink */
        int s = d0 + lp->n_sink, n = t - lp->n_tail - s + 1;
        if (n < 2) continue;
        double p[64], z[64], y[64];
        ref_teacher(P, t, d0, s, s + n - 1, lp->agg, p);
        double nqt = 0;
        for (int a = 0; a < ds; a++) nqt += qs[t][a] * qs[t][a];
        nqt = sqrt(nqt + 1e-12);
        for (int j = 0; j < n; j++) {
            double dot = 0, nkj = 0;
            for (int a = 0; a < ds; a++) {
                dot += qs[t][a] * ks[s + j][a];
                nkj += ks[s + j][a] * ks[s + j][a];
            }
            nkj = sqrt(nkj + 1e-12);
            z[j] = dot / (nqt * nkj) / lp->tau;
            y[j] = dot / sqrt((double)ds) / lp->tau_kl;
        }
        /* positives: the k_pos largest p (ties: lower index), by selection */
        int npos = lp->k_pos < n ? lp->k_pos : n;
        int taken[64] = {0};
        double num = 0, den = 0;
        for (int r = 0; r < npos; r++) {
            int best = -1;
            for (int j = 0; j < n; j++)
                if (!taken[j] && (best < 0 || p[j] > p[best])) best = j;
            taken[best] = 1;
            num += exp(z[best]);
        }
        for (int j = 0; j < n; j++) den += exp(z[j]);
        nce += -log(num / den);
        if (nce_range) {
            const double kth = p[best_last(p, taken, n)], eps = 1e-6;
            double sure = 0, ez[64];
            int n_maybe = 0, n_sure = 0;
            for (int j = 0; j < n; j++) {
                if (p[j] > kth + eps) sure += exp(z[j]), n_sure++;
                else if (fabs(p[j] - kth) <= eps) ez[n_maybe++] = exp(z[j]);
            }
            qsort(ez, (size_t)n_maybe, sizeof(double), cmp_asc);
            double small = sure, large = sure;
            for (int a = 0; a < npos - n_sure; a++) small += ez[a], large += ez[n_maybe - 1 - a];
            nce_range[0] += -log(large / den);
            nce_range[1] += -log(small / den);
        }
        double ysum = 0, ymax = -1e300;
        for (int j = 0; j < n; j++)
            if (y[j] > ymax) ymax = y[j];
        for (int j = 0; j < n; j++) ysum += exp(y[j] - ymax);
        for (int j = 0; j < n; j++) {
            double logr = y[j] - ymax - log(ysum);
            if (p[j] > 0) kl += p[j] * (log(p[j]) - logr);
        }
    }
    *nce_out = nce;
    *kl_out = kl;
    return lp->alpha * nce + lp->beta * kl;
}

static void make_problem(problem *P, int T, int nseg_break1, int nseg_break2, uint64_t seed) {
    uint64_t rng = rng_seed(seed);
    P->T = T;
    P->d = 10;
    P->ds = 4;
    P->nh = 4;
    P->nkv = 2;
    P->hd = 3;
    for (int t = 0; t < T; t++) P->seg[t] = (t >= nseg_break1) + (t >= nseg_break2);
    for (int t = 0; t < T; t++) P->pos[t] = t == 0 || P->seg[t] != P->seg[t - 1] ? 0 : P->pos[t - 1] + 1;
    P->rope = (search_rope){.n_rot = 0, .base = 10000.0, .scale = 1.0};
    P->h = randn(T * P->d, 1.0f, &rng);
    P->q = randn(T * P->nh * P->hd, 1.0f, &rng);
    P->k = randn(T * P->nkv * P->hd, 1.0f, &rng);
    P->wq = randn(P->ds * P->d, 0.3f, &rng);
    P->wk = randn(P->ds * P->d, 0.3f, &rng);
}

static search_layer_data layer_of(const problem *P) {
    search_layer_data x = {.T = P->T, .pos = P->pos, .seg = P->seg, .d_model = P->d, .h = P->h, .q = P->q, .k = P->k,
                           .shape = {P->nh, P->nkv, P->hd, 1.0f / sqrtf((float)P->hd)}};
    return x;
}

/* ---- per-head search -------------------------------------------------------- */

/* The objective of nq / nk search heads: search head a is taught by query
 * heads [a*G, (a+1)*G), G = nh / nq, and ranks KV head b = a / (nq / nk)'s
 * keys: the layer objective of a problem holding only those heads. */
static double ref_heads(const problem *P, int nq, int nk, const double *wq, const double *wk,
                        const subq_search_loss_params *lp, double *nce, double *kl, double *range) {
    const int G = P->nh / nq, hd = P->hd, per = P->ds * P->d;
    double total = 0;
    *nce = *kl = 0;
    if (range) range[0] = range[1] = 0;
    for (int a = 0; a < nq; a++) {
        const int b = a / (nq / nk);
        problem S = *P;
        S.nh = G, S.nkv = 1;
        S.q = malloc((size_t)P->T * G * hd * sizeof(float));
        S.k = malloc((size_t)P->T * hd * sizeof(float));
        for (int t = 0; t < P->T; t++) {
            for (int c = 0; c < G * hd; c++) S.q[t * G * hd + c] = P->q[t * P->nh * hd + a * G * hd + c];
            for (int c = 0; c < hd; c++) S.k[t * hd + c] = P->k[t * P->nkv * hd + b * hd + c];
        }
        double n1, k1, r[2];
        total += ref_objective(&S, wq + a * per, wk + b * per, lp, &n1, &k1, range ? r : NULL);
        *nce += n1, *kl += k1;
        if (range) range[0] += r[0], range[1] += r[1];
        free(S.q);
        free(S.k);
    }
    return total;
}

/* search_loss_heads against ref_heads: loss sums and central differences */
static void heads_check(const char *name, const problem *P, int nq, int nk, const subq_search_loss_params *lp) {
    const int per = P->ds * P->d, nwq = nq * per, nwk = nk * per;
    uint64_t rng = rng_seed(77);
    float *fq = randn(nwq, 0.3f, &rng), *fk = randn(nwk, 0.3f, &rng);
    float *gq = calloc((size_t)nwq, sizeof(float)), *gk = calloc((size_t)nwk, sizeof(float));
    search_layer_data x = layer_of(P);
    search_loss_sums sums;
    subq_error err = {0};
    CHECK(!search_loss_heads(&x, fq, fk, P->ds, nq, nk, &P->rope, lp, gq, gk, &sums, pools[2], &err),
          "%s: search_loss_heads failed: %s", name, err.msg);
    double *wq = malloc((size_t)nwq * sizeof(double)), *wk = malloc((size_t)nwk * sizeof(double));
    for (int i = 0; i < nwq; i++) wq[i] = fq[i];
    for (int i = 0; i < nwk; i++) wk[i] = fk[i];
    double nce, kl, range[2];
    ref_heads(P, nq, nk, wq, wk, lp, &nce, &kl, range);
    const double tol = 1e-4 * fmax(1.0, fabs(nce));
    CHECK(sums.nce >= range[0] - tol && sums.nce <= range[1] + tol, "%s: nce %.8g vs reference [%.8g, %.8g]", name,
          sums.nce, range[0], range[1]);
    CHECK(fabs(sums.kl - kl) <= 1e-4 * fmax(1.0, fabs(kl)), "%s: kl %.8g vs reference %.8g", name, sums.kl, kl);
    double max_rel = 0, gmax = 0, *fd = malloc((size_t)(nwq + nwk) * sizeof(double));
    for (int i = 0; i < nwq + nwk; i++) {
        double *w = i < nwq ? wq + i : wk + (i - nwq), keep = *w, e = 1e-5, t1, t2;
        *w = keep + e;
        const double a = ref_heads(P, nq, nk, wq, wk, lp, &t1, &t2, NULL);
        *w = keep - e;
        const double b = ref_heads(P, nq, nk, wq, wk, lp, &t1, &t2, NULL);
        *w = keep;
        fd[i] = (a - b) / (2 * e);
        gmax = fmax(gmax, fabs(fd[i]));
    }
    for (int i = 0; i < nwq + nwk; i++) {
        const double an = i < nwq ? gq[i] : gk[i - nwq];
        max_rel = fmax(max_rel, fabs(an - fd[i]) / fmax(fabs(fd[i]), 1e-2 * gmax));
    }
    printf("%-34s nce %9.5f kl %9.5f  max rel err %.2e\n", name, nce, kl, max_rel);
    CHECK(gmax > 1e-6, "%s: gradient is all zero", name);
    CHECK(max_rel < 1e-3, "%s: max relative gradient error %.3e >= 1e-3", name, max_rel);
    free(fq), free(fk), free(gq), free(gk), free(wq), free(wk), free(fd);
}

/* one gradient check; returns the worst element error */
static void grad_check(const char *name, const problem *P, const subq_search_loss_params *lp) {
    const int n = P->ds * P->d;
    search_layer_data x = layer_of(P);
    float *gq = calloc((size_t)n, sizeof(float)), *gk = calloc((size_t)n, sizeof(float));
    search_loss_sums sums;
    subq_error err = {0};
    subq_status s = search_loss_layer(&x, P->wq, P->wk, P->ds, &P->rope, lp, 1.0f, gq, gk, &sums, 0, pools[2], &err);
    CHECK(s == SUBQ_OK, "%s: search_loss_layer failed: %s", name, err.msg);

    double *wq = malloc(n * sizeof(double)), *wk = malloc(n * sizeof(double));
    for (int i = 0; i < n; i++) {
        wq[i] = P->wq[i];
        wk[i] = P->wk[i];
    }
    double nce, kl, range[2];
    ref_objective(P, wq, wk, lp, &nce, &kl, range);
    const double tol = 1e-4 * fmax(1.0, fabs(nce));
    CHECK(sums.nce >= range[0] - tol && sums.nce <= range[1] + tol, "%s: nce %.8g vs reference [%.8g, %.8g]", name,
          sums.nce, range[0], range[1]);
    CHECK(fabs(sums.kl - kl) <= 1e-4 * fmax(1.0, fabs(kl)), "%s: kl %.8g vs reference %.8g", name, sums.kl, kl);
    int64_t want_q = 0; /* queries with >= 2 eligible keys, counted here from the definition */
    for (int t = 0; t < P->T; t++) {
        int d0 = t;
        while (d0 > 0 && P->seg[d0 - 1] == P->seg[t]) d0--;
        want_q += (t - lp->n_tail) - (d0 + lp->n_sink) + 1 >= 2;
    }
    CHECK(sums.n_queries == want_q && search_count_queries(P->seg, P->T, lp->n_sink, lp->n_tail) == want_q,
          "%s: query count %lld / %lld, want %lld", name, (long long)sums.n_queries,
          (long long)search_count_queries(P->seg, P->T, lp->n_sink, lp->n_tail), (long long)want_q);

    /* central differences, step 1e-5, in double */
    double max_rel = 0, num2 = 0, den2 = 0, gmax = 0;
    double fd[2][64];
    for (int m = 0; m < 2; m++) {
        double *w = m ? wk : wq;
        for (int i = 0; i < n; i++) {
            double keep = w[i], e = 1e-5, a, b, t1, t2;
            w[i] = keep + e;
            a = ref_objective(P, wq, wk, lp, &t1, &t2, NULL);
            w[i] = keep - e;
            b = ref_objective(P, wq, wk, lp, &t1, &t2, NULL);
            w[i] = keep;
            fd[m][i] = (a - b) / (2 * e);
            if (fabs(fd[m][i]) > gmax) gmax = fabs(fd[m][i]);
        }
    }
    for (int m = 0; m < 2; m++)
        for (int i = 0; i < n; i++) {
            double an = m ? gk[i] : gq[i], f = fd[m][i];
            /* relative error, with a floor of 1% of the largest component for near-zero entries */
            double rel = fabs(an - f) / fmax(fabs(f), 1e-2 * gmax);
            if (rel > max_rel) max_rel = rel;
            num2 += (an - f) * (an - f);
            den2 += f * f;
        }
    double glob = sqrt(num2 / (den2 + 1e-300));
    printf("%-34s nce %9.5f kl %9.5f  |g| %.3e  max rel err %.2e  global rel err %.2e\n", name, nce, kl,
           sqrt(den2), max_rel, glob);
    CHECK(gmax > 1e-6, "%s: gradient is all zero", name);
    CHECK(max_rel < 1e-3, "%s: max relative gradient error %.3e >= 1e-3", name, max_rel);
    CHECK(glob < 1e-3, "%s: global relative gradient error %.3e >= 1e-3", name, glob);
    free(gq);
    free(gk);
    free(wq);
    free(wk);
}

/* same sums and gradients for 1 vs 3 threads (bitwise) and for chunked rows (close) */
static void determinism_check(const problem *P, const subq_search_loss_params *lp) {
    const int n = P->ds * P->d;
    search_layer_data x = layer_of(P);
    float *g[3][2];
    search_loss_sums sums[3];
    subq_error err = {0};
    int cfg[3][2] = {{0, 1}, {0, 3}, {3, 2}}; /* chunk_rows, threads */
    for (int r = 0; r < 3; r++) {
        g[r][0] = calloc((size_t)n, sizeof(float));
        g[r][1] = calloc((size_t)n, sizeof(float));
        CHECK(!search_loss_layer(&x, P->wq, P->wk, P->ds, &P->rope, lp, 0.5f, g[r][0], g[r][1], &sums[r], cfg[r][0], pools[cfg[r][1]],
                                 &err),
              "loss failed: %s", err.msg);
    }
    CHECK(!memcmp(g[0][0], g[1][0], n * sizeof(float)) && !memcmp(g[0][1], g[1][1], n * sizeof(float)) &&
              sums[0].nce == sums[1].nce && sums[0].kl == sums[1].kl,
          "gradients differ between 1 and 3 threads");
    double worst = 0;
    for (int m = 0; m < 2; m++)
        for (int i = 0; i < n; i++) worst = fmax(worst, fabs(g[0][m][i] - g[2][m][i]) / (fabs(g[0][m][i]) + 1e-4));
    CHECK(worst < 1e-4 && fabs(sums[0].nce - sums[2].nce) < 1e-9, "chunked rows change the result (rel %.3e)", worst);
    /* no-gradient path gives the same sums */
    search_loss_sums s2;
    CHECK(!search_loss_layer(&x, P->wq, P->wk, P->ds, &P->rope, lp, 1.0f, NULL, NULL, &s2, 0, pools[2], &err) &&
              s2.nce == sums[0].nce && s2.kl == sums[0].kl,
          "loss without gradients differs");
    for (int r = 0; r < 3; r++) {
        free(g[r][0]);
        free(g[r][1]);
    }
}

static void test_topk(void) {
    float v[] = {0.5f, 2.0f, -1.0f, 2.0f, 0.7f, 3.0f};
    int idx[6];
    float scratch[6];
    int n = topk_indices(v, 6, 4, idx, scratch);
    CHECK(n == 4 && idx[0] == 5 && idx[1] == 1 && idx[2] == 3 && idx[3] == 4, "topk order/ties: %d %d %d %d", idx[0],
          idx[1], idx[2], idx[3]);
    n = topk_indices(v, 3, 10, idx, scratch);
    CHECK(n == 3 && idx[0] == 1 && idx[1] == 0 && idx[2] == 2, "topk with k > n");
    /* against a selection sort on random data with many ties; up to 20,000
     * values, so that the block pass (blocks whose maximum cannot reach the
     * k-th largest skipped) runs, on data rising toward either end */
    uint64_t rng = rng_seed(7);
    enum { TMAX = 20000 };
    static float x[TMAX], sel[TMAX];
    static int got[TMAX], want[TMAX], taken[TMAX];
    for (int trial = 0; trial < 300; trial++) {
        const int big = trial % 3 == 2, levels = trial % 2 ? 7 : 1000;
        int m = 1 + (int)(rng_next_u64(&rng) % (big ? TMAX : 50)), k = 1 + (int)(rng_next_u64(&rng) % (big ? 300 : 20));
        for (int i = 0; i < m; i++) {
            x[i] = (float)(rng_next_u64(&rng) % (uint64_t)levels);
            if (big && trial % 4 == 2) x[i] += (float)i / 8.0f; /* a rising trend */
            if (big && trial % 4 == 0) x[i] -= (float)i / 8.0f;
            taken[i] = 0;
        }
        int ng = topk_indices(x, m, k, got, sel), nw = k < m ? k : m;
        for (int r = 0; r < nw; r++) {
            int b = -1;
            for (int i = 0; i < m; i++)
                if (!taken[i] && (b < 0 || x[i] > x[b])) b = i;
            taken[b] = 1;
            want[r] = b;
        }
        int same = ng == nw;
        for (int r = 0; same && r < nw; r++) same = got[r] == want[r];
        if (!same) {
            CHECK(0, "topk differs from selection sort (trial %d)", trial);
            break;
        }
    }
}

static void test_segments(void) {
    int32_t seg[] = {0, 0, 1, 1, 1, 3, 4, 4};
    int start[8];
    CHECK(!segment_starts(seg, 8, start, NULL), "segment_starts failed");
    int want[] = {0, 0, 2, 2, 2, 5, 6, 6};
    CHECK(!memcmp(start, want, sizeof want), "segment starts");
    CHECK(search_count_queries(seg, 8, 0, 0) == 4, "query count %lld", (long long)search_count_queries(seg, 8, 0, 0));
    /* only t = 4 (third token of the segment starting at 2) keeps 2 keys with one left out */
    CHECK(search_count_queries(seg, 8, 1, 0) == 1 && search_count_queries(seg, 8, 0, 1) == 1 &&
              search_count_queries(seg, 8, 1, 1) == 0,
          "query count with sink/tail");
    int32_t bad[] = {0, 1, 0};
    subq_error err = {0};
    CHECK(segment_starts(bad, 3, start, &err) == SUBQ_ERR_ARG, "decreasing segment ids accepted");
}

/* The restricted teacher (teacher_row_mid) against the double reference,
 * including a row where the model puts essentially all attention on the
 * tail: the retrieval-eligible keys' fp32 probabilities all underflow to 0,
 * and the log-domain path must still return the renormalised distribution. */
static void test_teacher_mid(void) {
    problem P;
    make_problem(&P, 20, 99, 99, 77);
    attn_shape sh = {P.nh, P.nkv, P.hd, 1.0f / sqrtf((float)P.hd)};
    float kt[20 * 2 * 3], tmp[20], p[20];
    double want[20];
    const int t = 19, lo = 3, hi = 13; /* sink 3, tail 6 */
    for (int round = 0; round < 2; round++) {
        if (round == 1) {
            /* query = 40 * ones in every head; keys 14..19 (the tail) = ones, the rest = -ones + noise:
             * logit gaps of ~ 40 * 6 / sqrt(3) ~ 140 > the ~ 104 at which fp32 expf reaches 0 */
            for (int i = 0; i < P.nh * P.hd; i++) P.q[t * P.nh * P.hd + i] = 40.0f;
            for (int j = 0; j < 20; j++)
                for (int i = 0; i < P.nkv * P.hd; i++)
                    P.k[j * P.nkv * P.hd + i] = j > hi ? 1.0f : -1.0f + 0.05f * P.k[j * P.nkv * P.hd + i];
        }
        teacher_keys_transpose(P.k, 20, &sh, kt);
        for (int agg = 0; agg < 2; agg++) {
            teacher_row_mid(P.q + t * P.nh * P.hd, kt, 20, &sh, 0, t, lo, hi, (subq_teacher_agg)agg, tmp, p);
            ref_teacher(&P, t, 0, lo, hi, (subq_teacher_agg)agg, want);
            double sum = 0, worst = 0;
            for (int i = 0; i <= hi - lo; i++) {
                sum += p[i];
                worst = fmax(worst, fabs(p[i] - want[i]));
            }
            CHECK(fabs(sum - 1.0) < 1e-5 && worst < 1e-5, "teacher_row_mid %s (%s): sum %.7f, max abs err %.2e",
                  agg ? "mean" : "max", round ? "fp32 underflow" : "random", sum, worst);
        }
    }
    /* lo = s, hi = t is the plain teacher, bit for bit */
    float p2[20];
    for (int agg = 0; agg < 2; agg++) {
        teacher_row(P.q + 7 * P.nh * P.hd, kt, 20, &sh, 2, 7, (subq_teacher_agg)agg, tmp, p);
        teacher_row_mid(P.q + 7 * P.nh * P.hd, kt, 20, &sh, 2, 7, 2, 7, (subq_teacher_agg)agg, tmp, p2);
        CHECK(!memcmp(p, p2, 6 * sizeof(float)), "teacher_row_mid over the whole range differs from teacher_row");
    }
    problem_free(&P);
}

int main(void) {
    for (int n = 1; n <= 3; n++) {
        subq_error perr;
        if (pool_new(n, &pools[n], &perr)) {
            fprintf(stderr, "FAIL: %s\n", perr.msg);
            return 1;
        }
    }
    test_topk();
    test_teacher_mid();
    test_segments();
    /* per-head search: one search head per query head (4 over 2 KV heads) or per KV head, rotated, sink and tail */
    {
        problem P;
        make_problem(&P, 24, 9, 13, 300);
        P.rope = (search_rope){.n_rot = 2, .base = 100.0, .scale = 1.0};
        subq_search_loss_params lp = {.tau = 0.1f, .tau_kl = 1.0f, .alpha = 1, .beta = 1, .k_pos = 3,
                                      .agg = SUBQ_TEACHER_AGG_MAX, .n_sink = 2, .n_tail = 3};
        heads_check("heads: per query head (4 / 2)", &P, 4, 2, &lp);
        heads_check("heads: per KV head (2 / 2)", &P, 2, 2, &lp);
        lp.agg = SUBQ_TEACHER_AGG_MEAN;
        heads_check("heads: per KV head, mean", &P, 2, 2, &lp);
        problem_free(&P);
    }
    struct {
        const char *name;
        int T, b1, b2;
        float tau, alpha, beta;
        int k_pos;
        subq_teacher_agg agg;
        int n_sink, n_tail;
    } cases[] = {
        {"2 segs, max, nce+kl, tau .07", 12, 5, 99, 0.07f, 1, 1, 3, SUBQ_TEACHER_AGG_MAX, 0, 0},
        {"2 segs, mean, nce+kl, tau .07", 12, 5, 99, 0.07f, 1, 1, 3, SUBQ_TEACHER_AGG_MEAN, 0, 0},
        {"2 segs, max, nce only", 12, 5, 99, 0.5f, 1, 0, 2, SUBQ_TEACHER_AGG_MAX, 0, 0},
        {"2 segs, mean, kl only", 12, 5, 99, 0.5f, 0, 1, 2, SUBQ_TEACHER_AGG_MEAN, 0, 0},
        {"3 segs (1-token seg), max", 12, 6, 7, 0.2f, 1, 1, 4, SUBQ_TEACHER_AGG_MAX, 0, 0},
        {"1 seg causal, mean, alpha .5 beta 2", 12, 99, 99, 0.1f, 0.5f, 2, 5, SUBQ_TEACHER_AGG_MEAN, 0, 0},
        /* retrieval-eligible keys only: segments of 9, 4 (no query keeps 2 keys) and 11 tokens */
        {"sink 2 tail 3, 3 segs, max", 24, 9, 13, 0.07f, 1, 1, 3, SUBQ_TEACHER_AGG_MAX, 2, 3},
        {"sink 2 tail 3, 3 segs, mean", 24, 9, 13, 0.2f, 1, 1, 2, SUBQ_TEACHER_AGG_MEAN, 2, 3},
        {"sink 0 tail 5, 1 seg, max", 24, 99, 99, 0.1f, 1, 1, 4, SUBQ_TEACHER_AGG_MAX, 0, 5},
        {"sink 4 tail 1, 2 segs, mean, nce", 24, 11, 99, 0.1f, 1, 0, 3, SUBQ_TEACHER_AGG_MEAN, 4, 1},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        problem P;
        make_problem(&P, cases[c].T, cases[c].b1, cases[c].b2, 100 + c);
        subq_search_loss_params lp = {.tau = cases[c].tau, .tau_kl = 1.0f, .alpha = cases[c].alpha, .beta = cases[c].beta,
                                 .k_pos = cases[c].k_pos, .agg = cases[c].agg, .n_sink = cases[c].n_sink,
                                 .n_tail = cases[c].n_tail};
        grad_check(cases[c].name, &P, &lp);
        if (c < 2 || c == 6) determinism_check(&P, &lp);
        problem_free(&P);
    }
    /* a rotated search space: the last 2 of 4 dims, or all 4; positions from
     * 0 (training's document positions) or shifted by 10^6 (angles in double) */
    struct {
        const char *name;
        int n_rot, shift;
        double base, scale;
        int n_sink, n_tail;
    } rot[] = {
        {"rope 2 of 4, base 10000", 2, 0, 10000.0, 1.0, 0, 0},
        {"rope 4 of 4, base 4, sink 2 tail 3", 4, 0, 4.0, 1.0, 2, 3},
        {"rope 2 of 4, pos + 1e6, scale .25", 2, 1000000, 100.0, 0.25, 1, 2},
    };
    for (size_t c = 0; c < sizeof rot / sizeof rot[0]; c++) {
        problem P;
        make_problem(&P, 24, 9, 13, 200 + c);
        P.rope = (search_rope){.n_rot = rot[c].n_rot, .base = rot[c].base, .scale = rot[c].scale};
        for (int t = 0; t < P.T; t++) P.pos[t] += rot[c].shift;
        subq_search_loss_params lp = {.tau = 0.1f, .tau_kl = 1.0f, .alpha = 1, .beta = 1, .k_pos = 3,
                                      .agg = SUBQ_TEACHER_AGG_MAX, .n_sink = rot[c].n_sink, .n_tail = rot[c].n_tail};
        grad_check(rot[c].name, &P, &lp);
        if (c == 0) determinism_check(&P, &lp);
        problem_free(&P);
    }
    /* teacher rows are distributions */
    problem P;
    make_problem(&P, 12, 5, 99, 1);
    attn_shape sh = {P.nh, P.nkv, P.hd, 1.0f / sqrtf((float)P.hd)};
    float p[12], tmp[12], kt[12 * 2 * 3];
    teacher_keys_transpose(P.k, 12, &sh, kt);
    for (int agg = 0; agg < 2; agg++) {
        teacher_row(P.q + 11 * P.nh * P.hd, kt, 12, &sh, 5, 11, (subq_teacher_agg)agg, tmp, p);
        float s = 0;
        for (int i = 0; i < 7; i++) s += p[i];
        CHECK(fabsf(s - 1.0f) < 1e-5f, "teacher row sums to %f", s);
    }
    problem_free(&P);
    for (int n = 1; n <= 3; n++) pool_free(pools[n]);
    return test_summary();
}
