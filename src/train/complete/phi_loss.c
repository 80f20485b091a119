/* Distillation losses of the completion maps and their gradients
 * (phi_loss.h). The pairwise part of a query head is two small GEMMs:
 * with eq[t][f] = exp(lq_t[f] - mq_t) (mq_t = max_f lq_t[f]) and ek likewise,
 *   z_tj = exp(mq_t + mk_j) Z_tj,  Z = eq ek^T,  sh_tj = mq_t + mk_j + log Z_tj
 * and, with g_tj = dL/dsh_tj and G_tj = g_tj / Z_tj,
 *   dL/dlq_t[f] = eq_t[f] (G ek)_t[f],  dL/dlk_j[f] = ek_j[f] (G^T eq)_j[f]
 * (d sh_tj / d lq_t[f] = eq_t[f] ek_j[f] / Z_tj, a softmax over f). */
#include "train/complete/phi_loss.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "kernels/kernels.h"
#include "complete/phi_net.h"

/* Below this Z_tj the shifted features of a pair barely overlap; the pair
 * is then done directly over f, so G = g / Z never becomes huge. */
#define Z_DIRECT 1e-200
/* Score rows per chunk: chunk x T doubles per matrix stay around 1 MiB. */
#define CHUNK_ELEMS (1 << 17)

subq_phi_loss_params phi_loss_default_params(void) {
    subq_phi_loss_params p = {.n_sink = 4, .n_tail = 16, .tau = 1.0, .l_kl = 0.99, .l_top = 1.0, .l_fp = 2.0, .l_z = 4.0,
                         .band = 8.0, .huber = 1.0};
    return p;
}

void phi_mid_ranges(const int32_t *seg, int T, int n_sink, int n_tail, int *lo, int *hi) {
    int d0 = 0;
    for (int t = 0; t < T; t++) {
        if (t > 0 && seg && seg[t] != seg[t - 1]) d0 = t;
        lo[t] = d0 + n_sink;
        hi[t] = t - n_tail;
    }
}

int64_t phi_count_queries(const int32_t *seg, int T, int n_sink, int n_tail) {
    int64_t n = 0;
    int d0 = 0;
    for (int t = 0; t < T; t++) {
        if (t > 0 && seg && seg[t] != seg[t - 1]) d0 = t;
        n += t - n_tail >= d0 + n_sink;
    }
    return n;
}

double phi_teacher_level(const phi_dims *d, double scale, const float *q, const float *k, const int32_t *seg, int T,
                         int n_sink, int n_tail) {
    const int D = d->head_dim, nh = d->n_head, nkv = d->n_head_kv, grp = nh / nkv;
    double sum = 0.0, *s = malloc((size_t)(T > 0 ? T : 1) * sizeof(double));
    int64_t n = 0;
    if (!s) return 0.0;
    int d0 = 0;
    for (int t = 0; t < T; t++) {
        if (t > 0 && seg && seg[t] != seg[t - 1]) d0 = t;
        const int lo = d0 + n_sink, hi = t - n_tail;
        if (hi < lo) continue;
        for (int h = 0; h < nh; h++) {
            const float *qh = q + ((size_t)t * nh + h) * D;
            /* LSE_j s_j - log |M|, s_j = q.k_j / sqrt(D) */
            double mx = -INFINITY, z = 0.0;
            for (int j = lo; j <= hi; j++) {
                const float *kj = k + ((size_t)j * nkv + h / grp) * D;
                double dot = 0.0;
                for (int c = 0; c < D; c++) dot += (double)qh[c] * kj[c];
                s[j - lo] = dot * scale;
                mx = s[j - lo] > mx ? s[j - lo] : mx;
            }
            for (int j = 0; j <= hi - lo; j++) s[j] -= mx;
            kernels_get()->exp_f64(s, hi - lo + 1);
            for (int j = 0; j <= hi - lo; j++) z += s[j];
            sum += mx + log(z) - log((double)(hi - lo + 1));
            n++;
        }
    }
    free(s);
    return n ? sum / (double)n : 0.0;
}

/* Huber(x) = x^2/2 for |x| <= delta, else delta (|x| - delta/2) */
static double huber(double x, double delta) {
    double a = fabs(x);
    return a <= delta ? 0.5 * x * x : delta * (a - 0.5 * delta);
}
/* Huber'(x) = x for |x| <= delta, else delta sign(x) */
static double huber_grad(double x, double delta) {
    return fabs(x) <= delta ? x : (x > 0 ? delta : -delta);
}

/* L_t with scratch er, eh [n] (see phi_query_loss). */
static double query_loss(const double *s, const double *sh, int n, const subq_phi_loss_params *p, double *grad, double *part,
                         double *er, double *eh) {
    const double tau = p->tau, itau = 1.0 / p->tau, band = p->band, dl = p->huber, w = 1.0 - p->l_kl;
    double smax = -INFINITY, rhmax = -INFINITY;
    for (int j = 0; j < n; j++) smax = s[j] > smax ? s[j] : smax;
    for (int j = 0; j < n; j++) rhmax = sh[j] > rhmax ? sh[j] : rhmax;
    rhmax -= smax;
    /* r_j = s_j - smax (max 0), rh_j = sh_j - smax (max rhmax);
     * er_j = e^{r_j/tau}, eh_j = e^{(rh_j - rhmax)/tau}: p = er/zr, ph = eh/zh */
    const kernels *K = kernels_get();
    double zr = 0.0, zh = 0.0;
    for (int j = 0; j < n; j++) {
        er[j] = (s[j] - smax) * itau;
        eh[j] = (sh[j] - smax - rhmax) * itau;
    }
    K->exp_f64(er, n);
    K->exp_f64(eh, n);
    for (int j = 0; j < n; j++) {
        zr += er[j];
        zh += eh[j];
    }
    const double log_zr = log(zr), log_zh = log(zh), izr = 1.0 / zr, izh = 1.0 / zh;
    /* KL = sum_j p_j (log p_j - log ph_j), scaled by tau^2;
     * d(tau^2 KL)/drh_j = tau (ph_j - p_j) */
    double kl = 0.0;
    for (int j = 0; j < n; j++) {
        const double lp = (s[j] - smax) * itau - log_zr, lph = (sh[j] - smax - rhmax) * itau - log_zh;
        kl += er[j] * izr * (lp - lph);
        if (grad) grad[j] = p->l_kl * tau * (eh[j] * izh - er[j] * izr);
    }
    kl *= tau * tau;
    /* top band (r >= -band) and far keys */
    int nb = 0;
    for (int j = 0; j < n; j++) nb += s[j] - smax >= -band;
    const int nf = n - nb;
    const double inb = 1.0 / nb, inf_ = nf > 0 ? 1.0 / nf : 0.0;
    double top = 0.0, fp = 0.0;
    for (int j = 0; j < n; j++) {
        const double r = s[j] - smax, rh = sh[j] - smax;
        if (r >= -band) {
            /* top = mean_band Huber(rh - r) */
            top += huber(rh - r, dl) * inb;
            if (grad) grad[j] += w * p->l_top * huber_grad(rh - r, dl) * inb;
        } else if (rh + band > 0) {
            /* fp = mean_far Huber(max(0, rh + band)), one-sided */
            fp += huber(rh + band, dl) * inf_;
            if (grad) grad[j] += w * p->l_fp * huber_grad(rh + band, dl) * inf_;
        }
    }
    /* Z = Huber(max(0, LSE(rh) - LSE(r))) at temperature 1: with tau = 1
     * the sums above are the ones needed, else they are recomputed */
    double lse_r = log_zr, lse_rh = rhmax + log_zh, zh1 = zh;
    if (tau != 1.0) {
        double zr1 = 0.0;
        zh1 = 0.0;
        for (int j = 0; j < n; j++) {
            er[j] = s[j] - smax;
            eh[j] = sh[j] - smax - rhmax;
        }
        K->exp_f64(er, n);
        K->exp_f64(eh, n);
        for (int j = 0; j < n; j++) {
            zr1 += er[j];
            zh1 += eh[j];
        }
        lse_r = log(zr1);
        lse_rh = rhmax + log(zh1);
    }
    const double x = lse_rh - lse_r;
    double zterm = 0.0;
    if (x > 0) {
        zterm = huber(x, dl);
        /* dLSE(rh)/drh_j = softmax(rh)_j */
        if (grad) {
            const double gz = w * p->l_z * huber_grad(x, dl) / zh1;
            for (int j = 0; j < n; j++) grad[j] += gz * eh[j];
        }
    }
    if (part) {
        part[SUBQ_PHI_PART_KL] = kl;
        part[SUBQ_PHI_PART_TOP] = top;
        part[SUBQ_PHI_PART_FP] = fp;
        part[SUBQ_PHI_PART_Z] = zterm;
        part[SUBQ_PHI_PART_LSE] = fabs(x);
    }
    return p->l_kl * kl + w * (p->l_top * top + p->l_fp * fp + p->l_z * zterm);
}

double phi_query_loss(const double *s, const double *sh, int n, const subq_phi_loss_params *p, double *grad, double *part) {
    double *work = malloc(2 * (size_t)(n > 0 ? n : 1) * sizeof(double));
    if (!work) return NAN;
    double L = query_loss(s, sh, n, p, grad, part, work, work + n);
    free(work);
    return L;
}

/* Everything one layer call holds. */
typedef struct layer_buf {
    double *X;                   /* [n_maps][T][D] inputs (q heads, then k heads) */
    double *acts;                /* [n_maps][acts] */
    double *lf;                  /* [n_maps][T][F] log features */
    double *ef;                  /* [n_maps][T][F] exp(lf - max_f lf) */
    double *mf;                  /* [n_maps][T] max_f lf */
    double *dlf;                 /* [n_maps][T][F] dL/dlf */
    double *dlk_h;               /* [n_head][T][F] each query head's part of dL/dlk */
    int *lo, *hi;
} layer_buf;

static void layer_buf_free(layer_buf *b) {
    free(b->X);
    free(b->acts);
    free(b->lf);
    free(b->ef);
    free(b->mf);
    free(b->dlf);
    free(b->dlk_h);
    free(b->lo);
    free(b->hi);
}

/* Loss sums of query head h over all its queries and, when dlq / dlk are
 * not NULL, dL/dlq [T][F] (set) and its dL/dlk [T][F] (set). 0 when out of
 * memory. */
static int pair_head(const phi_dims *d, double scale, const subq_phi_loss_params *p, int T, const int *lo, const int *hi, const double *Xq,
                     const double *Xk, const double *lq, const double *lk, const double *eq, const double *mq,
                     const double *ek, const double *mk, double *dlq, double *dlk, phi_loss_sums *sums) {
    const int D = d->head_dim, F = d->d_phi;
    int R = CHUNK_ELEMS / (T > 0 ? T : 1);
    if (R < 1) R = 1;
    if (R > T) R = T;
    const int want_grad = dlq != NULL;
    double *S = malloc((size_t)R * T * sizeof(double)), *Z = malloc((size_t)R * T * sizeof(double));
    double *sh = malloc((size_t)T * sizeof(double)), *g = malloc((size_t)T * sizeof(double));
    double *er = malloc(2 * (size_t)T * sizeof(double));
    double *tmp = want_grad ? malloc((size_t)R * F * sizeof(double)) : NULL;
    double *acck = want_grad ? calloc((size_t)T * F, sizeof(double)) : NULL;
    int ok = S && Z && sh && g && er && (!want_grad || (tmp && acck));
    if (ok && want_grad) {
        memset(dlq, 0, (size_t)T * F * sizeof(double));
        memset(dlk, 0, (size_t)T * F * sizeof(double));
    }
    for (int t0 = 0; ok && t0 < T; t0 += R) {
        const int t1 = t0 + R < T ? t0 + R : T, nr = t1 - t0;
        int jmax = 0;
        for (int t = t0; t < t1; t++)
            if (hi[t] >= lo[t] && hi[t] + 1 > jmax) jmax = hi[t] + 1;
        if (jmax == 0) continue;
        /* S = scale Xq Xk^T (teacher), Z = eq ek^T (student, shifted) over keys 0 .. jmax-1 */
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, jmax, D, scale, Xq + (size_t)t0 * D, D, Xk, D, 0.0, S,
                    jmax);
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, jmax, F, 1.0, eq + (size_t)t0 * F, F, ek, F, 0.0, Z,
                    jmax);
        for (int r = 0; r < nr; r++) {
            const int t = t0 + r, n = hi[t] - lo[t] + 1;
            double *zrow = Z + (size_t)r * jmax;
            if (n < 1) {
                if (want_grad) memset(zrow, 0, (size_t)jmax * sizeof(double));
                continue;
            }
            /* sh_j = mq_t + mk_j + log Z_tj, or LSE_f(lq_t[f] + lk_j[f]) directly */
            memcpy(sh, zrow + lo[t], (size_t)n * sizeof(double));
            kernels_get()->log_f64(sh, n); /* (the direct rows' logs are replaced below) */
            for (int j = lo[t]; j <= hi[t]; j++) {
                if (zrow[j] >= Z_DIRECT) {
                    sh[j - lo[t]] += mq[t] + mk[j];
                } else {
                    double mx = -INFINITY, acc = 0.0;
                    for (int f = 0; f < F; f++) {
                        double a = lq[(size_t)t * F + f] + lk[(size_t)j * F + f];
                        mx = a > mx ? a : mx;
                    }
                    for (int f = 0; f < F; f++) acc += exp(lq[(size_t)t * F + f] + lk[(size_t)j * F + f] - mx);
                    sh[j - lo[t]] = mx + log(acc);
                }
            }
            double part[SUBQ_PHI_N_PARTS];
            sums->loss += query_loss(S + (size_t)r * jmax + lo[t], sh, n, p, want_grad ? g : NULL, part, er, er + T);
            for (int i = 0; i < SUBQ_PHI_N_PARTS; i++) sums->part[i] += part[i];
            sums->n_queries++;
            if (!want_grad) continue;
            /* G_tj = g_j / Z_tj on the mid range, 0 elsewhere; direct pairs
             * add g w_f (w = softmax_f(lq_t + lk_j)) straight into dlq, dlk */
            for (int j = 0; j < jmax; j++) {
                if (j < lo[t] || j > hi[t]) {
                    zrow[j] = 0.0;
                    continue;
                }
                const double gj = g[j - lo[t]];
                if (zrow[j] >= Z_DIRECT) {
                    zrow[j] = gj / zrow[j];
                    continue;
                }
                zrow[j] = 0.0;
                for (int f = 0; f < F; f++) {
                    double wf = exp(lq[(size_t)t * F + f] + lk[(size_t)j * F + f] - sh[j - lo[t]]);
                    dlq[(size_t)t * F + f] += gj * wf;
                    dlk[(size_t)j * F + f] += gj * wf;
                }
            }
        }
        if (!want_grad) continue;
        /* dlq_t += eq_t * (G ek)_t,  acck += G^T eq */
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nr, F, jmax, 1.0, Z, jmax, ek, F, 0.0, tmp, F);
        for (int r = 0; r < nr; r++)
            for (int f = 0; f < F; f++)
                dlq[(size_t)(t0 + r) * F + f] += eq[(size_t)(t0 + r) * F + f] * tmp[(size_t)r * F + f];
        cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, jmax, F, nr, 1.0, Z, jmax, eq + (size_t)t0 * F, F, 1.0, acck,
                    F);
    }
    if (ok && want_grad)
        for (size_t i = 0; i < (size_t)T * F; i++) dlk[i] += ek[i] * acck[i];
    free(S);
    free(Z);
    free(sh);
    free(g);
    free(er);
    free(tmp);
    free(acck);
    return ok;
}

subq_status phi_loss_layer(const phi_dims *d, double scale, const double *L, const float *q, const float *k,
                           const int32_t *seg, int T, const subq_phi_loss_params *p, double *grad, phi_loss_sums *sums, int n_threads, subq_error *err) {
    const int D = d->head_dim, F = d->d_phi, nh = d->n_head, nkv = d->n_head_kv, grp = nh / nkv;
    const int n_maps = nh + nkv;
    if (T < 1) return SUBQ_OK;
    if (phi_count_queries(seg, T, p->n_sink, p->n_tail) == 0) return SUBQ_OK;
    layer_buf b = {0};
    const size_t na = phi_acts_doubles(d, T), TF = (size_t)T * F;
    b.X = malloc((size_t)n_maps * T * D * sizeof(double));
    b.acts = malloc((size_t)n_maps * na * sizeof(double));
    b.lf = malloc((size_t)n_maps * TF * sizeof(double));
    b.ef = malloc((size_t)n_maps * TF * sizeof(double));
    b.mf = malloc((size_t)n_maps * T * sizeof(double));
    b.lo = malloc((size_t)T * sizeof(int));
    b.hi = malloc((size_t)T * sizeof(int));
    if (grad) {
        b.dlf = calloc((size_t)n_maps * TF, sizeof(double));
        b.dlk_h = malloc((size_t)nh * TF * sizeof(double));
    }
    if (!b.X || !b.acts || !b.lf || !b.ef || !b.mf || !b.lo || !b.hi || (grad && (!b.dlf || !b.dlk_h))) {
        layer_buf_free(&b);
        return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory for the completion loss (%d tokens)", T);
    }
    phi_mid_ranges(seg, T, p->n_sink, p->n_tail, b.lo, b.hi);
    int failed = 0;
    /* map inputs (head slices of q and k in double), log features, their
     * row max and shifted exponentials */
#pragma omp parallel for num_threads(n_threads) schedule(static, 1)
    for (int mi = 0; mi < n_maps; mi++) {
        const int which = mi < nh ? PHI_Q : PHI_K, head = mi < nh ? mi : mi - nh;
        const float *src = which == PHI_Q ? q : k;
        const int width = (which == PHI_Q ? nh : nkv) * D;
        double *X = b.X + (size_t)mi * T * D, *lf = b.lf + (size_t)mi * TF, *ef = b.ef + (size_t)mi * TF;
        for (int t = 0; t < T; t++)
            for (int c = 0; c < D; c++) X[(size_t)t * D + c] = src[(size_t)t * width + (size_t)head * D + c];
        phi_map_forward_d(d, L, which, head, X, T, b.acts + (size_t)mi * na, lf);
        for (int t = 0; t < T; t++) {
            double mx = -INFINITY;
            for (int f = 0; f < F; f++) mx = lf[(size_t)t * F + f] > mx ? lf[(size_t)t * F + f] : mx;
            b.mf[(size_t)mi * T + t] = mx;
            for (int f = 0; f < F; f++) ef[(size_t)t * F + f] = exp(lf[(size_t)t * F + f] - mx);
        }
    }
    /* pairwise losses per query head */
    phi_loss_sums *hs = calloc((size_t)nh, sizeof(phi_loss_sums));
    if (!hs) {
        layer_buf_free(&b);
        return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory for the completion loss");
    }
#pragma omp parallel for num_threads(n_threads) schedule(static, 1)
    for (int h = 0; h < nh; h++) {
        const int mk = nh + h / grp;
        if (!pair_head(d, scale, p, T, b.lo, b.hi, b.X + (size_t)h * T * D, b.X + (size_t)mk * T * D, b.lf + (size_t)h * TF,
                       b.lf + (size_t)mk * TF, b.ef + (size_t)h * TF, b.mf + (size_t)h * T, b.ef + (size_t)mk * TF,
                       b.mf + (size_t)mk * T, grad ? b.dlf + (size_t)h * TF : NULL, grad ? b.dlk_h + (size_t)h * TF : NULL,
                       &hs[h])) {
#pragma omp atomic write
            failed = 1;
        }
    }
    for (int h = 0; h < nh; h++) {
        sums->loss += hs[h].loss;
        for (int i = 0; i < SUBQ_PHI_N_PARTS; i++) sums->part[i] += hs[h].part[i];
        sums->n_queries += hs[h].n_queries;
    }
    free(hs);
    if (!failed && grad) {
        /* dL/dlk of KV head g: its query heads' parts, summed in head order */
        for (int h = 0; h < nh; h++) {
            double *dst = b.dlf + (size_t)(nh + h / grp) * TF;
            const double *src = b.dlk_h + (size_t)h * TF;
            for (size_t i = 0; i < TF; i++) dst[i] += src[i];
        }
        /* backward through each map (disjoint gradient slices) */
#pragma omp parallel for num_threads(n_threads) schedule(static, 1)
        for (int mi = 0; mi < n_maps; mi++) {
            const int which = mi < nh ? PHI_Q : PHI_K, head = mi < nh ? mi : mi - nh;
            double *scratch = malloc(phi_backward_doubles(d, T) * sizeof(double));
            if (!scratch) {
#pragma omp atomic write
                failed = 1;
                continue;
            }
            phi_map_backward_d(d, L, which, head, b.X + (size_t)mi * T * D, T, b.acts + (size_t)mi * na,
                               b.dlf + (size_t)mi * TF, grad, scratch);
            free(scratch);
        }
    }
    layer_buf_free(&b);
    if (failed) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory in the completion loss (%d tokens)", T);
    return SUBQ_OK;
}
