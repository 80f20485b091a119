/* The vector kernels of src/kernels (the stored-format ones are in
 * test_quant.c), the selected set (AVX2 on this machine) and the portable C
 * set, against plain double precision loops: f32 / f16 dot and axpy at
 * lengths around the 8- and 32-element blocks; gathered row dots over f32
 * and f16 rows at widths that are and are not multiples of 8 and counts
 * around the 4-row block; decode group scores and value accumulation over
 * contiguous rows for head widths that are and are not multiples of 8, group
 * sizes 1-7 and row counts around the 4-key and 32-key blocks; the vector
 * exp against exp() over [-87, 0], with -inf giving exactly 0; SiLU, GELU
 * and the soft cap (c tanh(x / c), -inf kept) against double; the int8 /
 * int4 code dots of the compressed selector scans (exactly), the
 * f16 x f16 dot, and f32 -> f16 rows bit for bit against fp32_to_fp16
 * (itself checked against F16C in test_quant.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "kernels/kernels.h"
#include "test_util.h"

/* |got - want| / (sum of |terms| + tiny): float rounding relative to the magnitude of the sum */
static double rel_err(double got, double want, double mag) { return fabs(got - want) / (mag + 1e-30); }

/* dot, axpy and gathered row dots: f32 rows, and f16 rows holding the same values */
static void check_vectors(const char *name, const kernels *K) {
    uint64_t rng = rng_seed(5);
    enum { NMAX = 1000, ROWS = 23 };
    static float a[NMAX], b[NMAX], y[NMAX], rows[ROWS * NMAX], out[ROWS];
    static uint16_t b16[NMAX], rows16[ROWS * NMAX];
    const int ns[] = {1, 7, 8, 9, 31, 32, 33, 100, 1000};
    double worst_dot = 0, worst_axpy = 0, worst_gather = 0;
    for (int c = 0; c < 9; c++) {
        const int n = ns[c];
        for (int i = 0; i < n; i++) {
            a[i] = rng_normal(&rng);
            b16[i] = fp32_to_fp16(rng_normal(&rng));
            b[i] = fp16_to_fp32(b16[i]);
        }
        double want = 0, mag = 0;
        for (int i = 0; i < n; i++) want += (double)a[i] * b[i], mag += fabs((double)a[i] * b[i]);
        double e = fmax(rel_err(K->dot_f32(a, b, n), want, mag), rel_err(K->dot_f16(a, b16, n), want, mag));
        worst_dot = e > worst_dot ? e : worst_dot;
        for (int f16 = 0; f16 < 2; f16++) { /* y = a + w b */
            for (int i = 0; i < n; i++) y[i] = a[i];
            if (f16) K->axpy_f16(y, 0.375f, b16, n);
            else K->axpy_f32(y, 0.375f, b, n);
            for (int i = 0; i < n; i++) {
                e = rel_err(y[i], a[i] + 0.375 * b[i], fabs(a[i]) + fabs(0.375 * b[i]));
                worst_axpy = e > worst_axpy ? e : worst_axpy;
            }
        }
    }
    const int ds[] = {8, 12, 64, 130}, counts[] = {1, 3, 4, 5, 9, 23};
    int32_t idx[ROWS];
    for (int c = 0; c < 4; c++) {
        const int d = ds[c], stride = d + 5; /* rows need not be contiguous */
        for (int i = 0; i < ROWS * stride; i++) {
            rows16[i] = fp32_to_fp16(rng_normal(&rng));
            rows[i] = fp16_to_fp32(rows16[i]);
        }
        for (int i = 0; i < d; i++) a[i] = rng_normal(&rng);
        for (int k = 0; k < 6; k++) {
            const int n = counts[k];
            for (int i = 0; i < n; i++) idx[i] = (int32_t)(rng_next_u64(&rng) % ROWS);
            for (int f16 = 0; f16 < 2; f16++) {
                if (f16) K->gather_dot_f16(a, rows16, (size_t)stride, d, idx, n, out);
                else K->gather_dot_f32(a, rows, (size_t)stride, d, idx, n, out);
                for (int i = 0; i < n; i++) {
                    double want = 0, mag = 0;
                    for (int j = 0; j < d; j++) {
                        double t = (double)a[j] * rows[(size_t)idx[i] * stride + j];
                        want += t, mag += fabs(t);
                    }
                    double e = rel_err(out[i], want, mag);
                    worst_gather = e > worst_gather ? e : worst_gather;
                }
            }
        }
    }
    CHECK(worst_dot < 1e-6, "%s dot: worst error relative to sum |a b| %.2e", name, worst_dot);
    CHECK(worst_axpy < 2e-7, "%s axpy: worst error relative to |y| + |w x| %.2e", name, worst_axpy);
    CHECK(worst_gather < 1e-6, "%s gathered dots: worst error relative to sum |q r| %.2e", name, worst_gather);
    printf("%s: dot %.2e, axpy %.2e, gathered dots %.2e\n", name, worst_dot, worst_axpy, worst_gather);
}

/* The value of element c of a KV row, read from the bytes as the layout
 * comment in kernels.h describes them (blocks of B = min(hd, 32) values). */
static double kv_ref_value(subq_kv_type t, const void *row, int hd, int c) {
    const int B = hd < 32 ? hd : 32;
    if (t == SUBQ_KV_F32) return ((const float *)row)[c];
    if (t == SUBQ_KV_F16) return fp16_to_fp32(((const uint16_t *)row)[c]);
    const size_t bsz = 2 + (size_t)(t == SUBQ_KV_Q8_0 ? B : B / 2);
    const uint8_t *b = (const uint8_t *)row + (size_t)(c / B) * bsz;
    const double d = fp16_to_fp32((uint16_t)(b[0] | b[1] << 8));
    const int j = c % B;
    if (t == SUBQ_KV_Q8_0) return d * (int8_t)b[2 + j];
    return d * (j < B / 2 ? (b[2 + j] & 0xF) - 8 : (b[2 + j - B / 2] >> 4) - 8);
}

static double maxd(double a, double b) { return a > b ? a : b; }

/* KV rows of every type: quantisation (bounded error; ggml's bytes for
 * 32-value blocks), conversion, dot, axpy and gathered dots of single rows,
 * and the decode scores / accumulation over contiguous rows for g query
 * heads, all against double loops over the values the bytes hold. */
static void check_kv_rows(const char *name, const kernels *K) {
    uint64_t rng = rng_seed(11);
    /* widths around the 8 / 16 / 32-value vectors, the 128-column value
     * pass and odd block counts (96, 160) */
    const int hds[] = {2, 8, 12, 16, 32, 48, 64, 96, 128, 160}, gs[] = {1, 2, 3, 5},
              ns[] = {1, 3, 4, 5, 31, 32, 33, 100};
    enum { N_HD = sizeof hds / sizeof hds[0] };
    static const char *tn[] = {"f32", "f16", "q8_0", "q4_0"};
    for (int t = 0; t < SUBQ_KV_TYPE_COUNT; t++) {
        const subq_kv_type type = (subq_kv_type)t;
        const kernels_kv *ops = &K->kv[t];
        double worst_q = 0, worst_conv = 0, worst_dot = 0, worst_axpy = 0, worst_gather = 0, worst_s = 0, worst_a = 0;
        double worst_qq = 0; /* quantised keys: score change by the query's quantisation / its bound */
        int bytes_ok = 1, n_hd = 0;
        const int quant = t >= SUBQ_KV_Q8_0;
        for (int a = 0; a < N_HD; a++) {
            const int hd = hds[a];
            const size_t rb = kernels_kv_row_bytes(type, hd);
            if (quant && (hd == 12 || hd == 48)) {
                CHECK(rb == 0, "%s rows of %d values must be refused", tn[t], hd);
                continue;
            }
            CHECK(rb > 0, "%s rows of %d values", tn[t], hd);
            n_hd++;
            enum { NMAX = 100, GMAX = 5 };
            float *x = malloc((size_t)NMAX * hd * sizeof(float)), *deq = malloc((size_t)NMAX * hd * sizeof(float));
            float *conv = malloc((size_t)NMAX * hd * sizeof(float)), *q = malloc((size_t)GMAX * hd * sizeof(float));
            float *s = malloc((size_t)GMAX * (NMAX + 3) * sizeof(float)), *out = malloc((size_t)GMAX * hd * sizeof(float));
            unsigned char *rows = malloc((size_t)NMAX * rb), *ggml = malloc((size_t)NMAX * rb + 64);
            /* rows of varied scale; one row of zeros (d = 0); every tenth
             * row of exact ties for q8_0 (d = 127 / 127 = 1, values n + 1/2) */
            for (int j = 0; j < NMAX; j++) {
                const float sc = j == 7 ? 0.0f : 0.1f + (float)(j % 5);
                for (int c = 0; c < hd; c++)
                    x[(size_t)j * hd + c] = j % 10 != 3    ? sc * rng_normal(&rng)
                                            : c % 32 == 0 ? 127.0f
                                                          : (float)((c * 37 + j) % 253 - 126) + 0.5f;
                ops->from_f32(x + (size_t)j * hd, rows + (size_t)j * rb, hd);
                for (int c = 0; c < hd; c++) deq[(size_t)j * hd + c] = (float)kv_ref_value(type, rows + (size_t)j * rb, hd, c);
            }
            /* quantisation error: half a step (f16: 2^-11 relative; q4_0's
             * clamped top code: one step), plus the fp16 rounding of the
             * scale times the largest code (127, 8) */
            for (int j = 0; j < NMAX; j++) {
                const int B = hd < 32 ? hd : 32;
                for (int c0 = 0; c0 < hd; c0 += B) {
                    const int c1 = c0 + B < hd ? c0 + B : hd; /* f32 / f16 rows of 48 */
                    double amax = 0;
                    for (int c = c0; c < c1; c++) amax = maxd(amax, fabs(x[(size_t)j * hd + c]));
                    for (int c = c0; c < c1; c++) {
                        const double xv = x[(size_t)j * hd + c], e = fabs(deq[(size_t)j * hd + c] - xv);
                        double lim = t == SUBQ_KV_F32   ? 0
                                     : t == SUBQ_KV_F16 ? fabs(xv) * 4.9e-4 + 1e-7
                                     : t == SUBQ_KV_Q8_0 ? amax / 127 * (0.5 + 127 / 2048.0) + 1e-7
                                                         : amax / 8 * (1 + 8 / 2048.0) + 1e-7;
                        worst_q = maxd(worst_q, e - lim);
                    }
                }
            }
            /* ggml's quantiser gives the same bytes for 32-value blocks */
            if (t >= SUBQ_KV_F16 && hd % 32 == 0) {
                const uint32_t gt = t == SUBQ_KV_F16 ? GGML_TYPE_F16 : t == SUBQ_KV_Q8_0 ? GGML_TYPE_Q8_0 : GGML_TYPE_Q4_0;
                size_t nb = quantize_row(gt, x, ggml, (int64_t)NMAX * hd);
                bytes_ok &= nb == (size_t)NMAX * rb && memcmp(ggml, rows, nb) == 0;
            }
            ops->to_f32(rows, NMAX, hd, conv);
            for (int i = 0; i < NMAX * hd; i++) worst_conv = maxd(worst_conv, fabs(conv[i] - deq[i]));
            /* single rows: dot, axpy; gathered dots over every third row */
            for (int i = 0; i < hd; i++) q[i] = rng_normal(&rng);
            int32_t idx[NMAX / 3];
            float got[NMAX / 3];
            for (int i = 0; i < NMAX / 3; i++) idx[i] = (int32_t)(rng_next_u64(&rng) % (NMAX / 3));
            ops->gather_dot(q, rows, (size_t)3 * hd, hd, idx, NMAX / 3, got);
            for (int j = 0; j < NMAX; j++) {
                double want = 0, mag = 0;
                for (int c = 0; c < hd; c++) {
                    want += (double)q[c] * deq[(size_t)j * hd + c];
                    mag += fabs((double)q[c] * deq[(size_t)j * hd + c]);
                }
                worst_dot = maxd(worst_dot, rel_err(ops->dot(q, rows + (size_t)j * rb, hd), want, mag));
                for (int i = 0; i < NMAX / 3; i++)
                    if (3 * idx[i] == j) worst_gather = maxd(worst_gather, rel_err(got[i], want, mag));
                for (int c = 0; c < hd; c++) out[c] = q[c];
                ops->axpy(out, -0.625f, rows + (size_t)j * rb, hd);
                for (int c = 0; c < hd; c++) {
                    const double w = q[c] - 0.625 * deq[(size_t)j * hd + c];
                    worst_axpy = maxd(worst_axpy, rel_err(out[c], w, fabs(q[c]) + 0.625 * fabs(deq[(size_t)j * hd + c])));
                }
            }
            /* decode scores (quantised keys: against the quantised query,
             * and within the bound of its rounding of the exact score) and
             * accumulation */
            double *qv = malloc((size_t)hd * sizeof(double)), *qe = malloc((size_t)hd * sizeof(double));
            for (int b = 0; b < 4; b++)
                for (int c = 0; c < 8; c++) {
                    const int g = gs[b], n = ns[c], ld = n + 3;
                    for (int i = 0; i < g * hd; i++) q[i] = rng_normal(&rng);
                    if (c == 0) memset(q, 0, (size_t)KV_QBLOCK(hd) * sizeof(float)); /* a zero block: d = 0 */
                    ops->scores(q, g, rows, n, hd, 0.25f, s, ld);
                    for (int i = 0; i < g; i++) {
                        for (int d = 0; d < hd; d++) qv[d] = q[i * hd + d], qe[d] = 0;
                        if (quant) test_quantised_query(q + i * hd, hd, KV_QBLOCK(hd), qv, qe);
                        for (int j = 0; j < n; j++) {
                            double want = 0, mag = 0, exact = 0, bound = 0;
                            for (int d = 0; d < hd; d++) {
                                const double k = deq[(size_t)j * hd + d];
                                want += qv[d] * k, mag += fabs(qv[d] * k);
                                exact += (double)q[i * hd + d] * k, bound += qe[d] * fabs(k);
                            }
                            worst_s = maxd(worst_s, fabs(s[i * ld + j] - 0.25 * want) / (0.25 * mag + 1e-30));
                            if (quant)
                                worst_qq = maxd(worst_qq, fabs(s[i * ld + j] - 0.25 * exact) /
                                                              (0.25 * (bound + 1e-5 * mag) + 1e-30));
                        }
                    }
                    /* weights p = s (any values), out_i = q_i + sum_j p_ij v_j */
                    for (int i = 0; i < g * hd; i++) out[i] = q[i];
                    ops->accum(s, g, ld, rows, n, hd, out);
                    for (int i = 0; i < g; i++)
                        for (int d = 0; d < hd; d++) {
                            double want = q[i * hd + d], mag = fabs(want);
                            for (int j = 0; j < n; j++) {
                                want += (double)s[i * ld + j] * deq[(size_t)j * hd + d];
                                mag += fabs((double)s[i * ld + j] * deq[(size_t)j * hd + d]);
                            }
                            worst_a = maxd(worst_a, fabs(out[i * hd + d] - want) / (mag + 1e-6));
                        }
                }
            free(x), free(deq), free(conv), free(q), free(s), free(out), free(rows), free(ggml), free(qv), free(qe);
        }
        CHECK(n_hd == (quant ? N_HD - 2 : N_HD), "%s: row widths tested", tn[t]);
        CHECK(worst_qq <= 1, "%s %s scores: the query's quantisation moved a score %.2f x its bound", name, tn[t],
              worst_qq);
        CHECK(worst_q <= 0, "%s %s: quantisation error exceeds half a step by %.2e", name, tn[t], worst_q);
        CHECK(bytes_ok, "%s %s: rows of 32-value blocks differ from quantize_row's bytes", name, tn[t]);
        CHECK(worst_conv == 0, "%s %s: conversion differs from the stored values by %.2e", name, tn[t], worst_conv);
        CHECK(worst_dot < 1e-6, "%s %s dot: worst error relative to sum |q k| %.2e", name, tn[t], worst_dot);
        CHECK(worst_gather < 1e-6, "%s %s gathered dots: worst error %.2e", name, tn[t], worst_gather);
        CHECK(worst_axpy < 2e-7, "%s %s axpy: worst error relative to |y| + |w x| %.2e", name, tn[t], worst_axpy);
        CHECK(worst_s < 1e-5, "%s %s scores: worst error relative to sum |q k| %.2e", name, tn[t], worst_s);
        CHECK(worst_a < 1e-5, "%s %s accum: worst error relative to sum |p v| %.2e", name, tn[t], worst_a);
        printf("%s %s rows: dot %.2e, gather %.2e, axpy %.2e, scores %.2e (query rounding %.2f of its bound), "
               "accum %.2e\n",
               name, tn[t], worst_dot, worst_gather, worst_axpy, worst_s, worst_qq, worst_a);
    }
}

static void check_exp(const char *name, const kernels *K) {
    /* exp(x - mx) over [-87, 0] plus -inf; long rows take 16-lane code where
     * the CPU has it, short ones 8 lanes */
    enum { N = 1003 };
    const int lens[] = {N, 63};
    for (int li = 0; li < 2; li++) {
        const int n = lens[li], ninf = n / 2;
        float x[N], y[N];
        double want_sum = 0, worst_e = 0;
        for (int j = 0; j < n; j++) {
            x[j] = j == ninf ? -INFINITY : 3.0f - 90.0f * (float)j / n;
            want_sum += j == ninf || x[j] - 3.0f < -87.0f ? 0.0 : exp((double)x[j] - 3.0);
            y[j] = x[j];
        }
        double sum = K->exp_shift_sum(y, n, 3.0f);
        int zero_ok = y[ninf] == 0.0f;
        for (int j = 0; j < n; j++) {
            if (j == ninf || x[j] - 3.0f < -87.0f) {
                zero_ok &= y[j] < 1e-37f;
                continue;
            }
            double e = fabs(y[j] - exp((double)x[j] - 3.0)) / exp((double)x[j] - 3.0);
            worst_e = e > worst_e ? e : worst_e;
        }
        CHECK(worst_e < 5e-7, "%s exp (n %d): worst relative error %.2e", name, n, worst_e);
        CHECK(zero_ok, "%s exp (n %d): -inf (and below -87) must give 0", name, n);
        CHECK(fabs(sum - want_sum) / want_sum < 1e-6, "%s exp (n %d): sum %.9g, want %.9g", name, n, sum, want_sum);
        printf("%s: exp (n %d) %.2e\n", name, n, worst_e);
    }
    /* silu(g) u = g / (1 + e^-g) u over g in [-100, 100] (both clamps), every
     * tail length, against double */
    {
        enum { NS = 1001 };
        static float g[NS], g0[NS], u[NS];
        double worst_s = 0;
        for (int j = 0; j < NS; j++) {
            g[j] = g0[j] = -100.0f + 200.0f * (float)j / (NS - 1);
            u[j] = 0.5f + (float)(j % 7);
        }
        K->silu_mul(g, u, NS);
        for (int j = 0; j < NS; j++) {
            const double gj = g0[j], want = gj / (1.0 + exp(-gj)) * u[j];
            const double e = fabs(g[j] - want) / (fabs(want) + 1e-20); /* below: zero */
            worst_s = e > worst_s ? e : worst_s;
        }
        CHECK(worst_s < 2e-6, "%s silu_mul: worst relative error %.2e", name, worst_s);
        printf("%s: silu_mul %.2e\n", name, worst_s);
        /* gelu(g) u, GELU's tanh form 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))), same range;
         * error relative to max(|want|, |u|): near g = 0 the product passes through 0 */
        double worst_g = 0;
        for (int j = 0; j < NS; j++) g[j] = g0[j];
        K->gelu_mul(g, u, NS);
        for (int j = 0; j < NS; j++) {
            const double gj = g0[j], want = 0.5 * gj * (1.0 + tanh(0.7978845608028654 * (gj + 0.044715 * gj * gj * gj))) * u[j];
            const double e = fabs(g[j] - want) / fmax(fabs(want), fabs(u[j]));
            worst_g = e > worst_g ? e : worst_g;
        }
        CHECK(worst_g < 2e-6, "%s gelu_mul: worst error relative to max(|gelu u|, |u|) %.2e", name, worst_g);
        printf("%s: gelu_mul %.2e\n", name, worst_g);
        /* soft cap c tanh(x / c) at Gemma 2's caps over x in [-100 c, 100 c]
         * (both clamps, tiny |x| where 1 - 2 / (1 + e) cancels), every tail
         * length, -inf kept; error relative to c */
        static const float caps[] = {50.0f, 30.0f, 4.0f};
        double worst_c = 0;
        int inf_ok = 1;
        for (int ci = 0; ci < 3; ci++)
            for (int n = NS - 8; n <= NS; n++) {
                const float c = caps[ci];
                for (int j = 0; j < n; j++) g[j] = j % 97 == 3 ? -INFINITY : g0[j] * c * (j % 5 ? 1.0f : 1e-4f);
                K->softcap(g, (size_t)n, c);
                for (int j = 0; j < n; j++) {
                    if (j % 97 == 3) {
                        inf_ok &= g[j] == -INFINITY;
                        continue;
                    }
                    const double x = (double)g0[j] * c * (j % 5 ? 1.0 : 1e-4), want = c * tanh(x / c);
                    worst_c = fmax(worst_c, fabs(g[j] - want) / c);
                }
            }
        CHECK(worst_c < 1e-6, "%s softcap: worst error relative to the cap %.2e", name, worst_c);
        CHECK(inf_ok, "%s softcap: -inf must stay -inf", name);
        printf("%s: softcap %.2e\n", name, worst_c);
    }
    /* kl_sum: p over twenty orders of magnitude with zeros and a denormal,
     * every tail length up to 1003, against double (error relative to the
     * sum of |terms|) */
    {
        static float p[N], yv[N];
        uint64_t rng = rng_seed(5);
        for (int j = 0; j < N; j++) {
            p[j] = j % 17 == 3 ? 0.0f : j == 40 ? 1e-40f : powf(10.0f, -20.0f * rng_uniform(&rng));
            yv[j] = (float)rng_normal(&rng) * 3.0f;
        }
        double worst_k = 0;
        for (int n = 0; n <= N; n += n < 40 ? 1 : 97) {
            double want = 0, mag = 1e-30;
            for (int j = 0; j < n; j++)
                if (p[j] > 0.0f) {
                    const double t = (double)p[j] * (log((double)p[j]) - yv[j] + 1.25);
                    want += t, mag += fabs(t);
                }
            const double e = fabs(K->kl_sum(p, yv, 1.25f, n) - want) / mag;
            worst_k = e > worst_k ? e : worst_k;
        }
        CHECK(worst_k < 1e-6, "%s kl_sum: worst error relative to the sum of |terms| %.2e", name, worst_k);
        printf("%s: kl_sum %.2e\n", name, worst_k);
    }
    /* exp_f64, log_f64 against libm over [-700, 700] and (0, 1e300], every
     * tail length */
    {
        enum { ND = 203 };
        double e[ND], l[ND], worst_d = 0;
        for (int n = 0; n <= ND; n += n < 12 ? 1 : 64) {
            for (int j = 0; j < n; j++) {
                e[j] = -700.0 + 1400.0 * j / ND;
                l[j] = pow(10.0, -300.0 + 600.0 * j / ND);
            }
            K->exp_f64(e, n);
            K->log_f64(l, n);
            for (int j = 0; j < n; j++) {
                const double we = exp(-700.0 + 1400.0 * j / ND), wl = log(pow(10.0, -300.0 + 600.0 * j / ND));
                worst_d = fmax(worst_d, fabs(e[j] - we) / we);
                worst_d = fmax(worst_d, fabs(l[j] - wl) / fmax(fabs(wl), 1e-300));
            }
        }
        CHECK(worst_d < 1e-14, "%s exp_f64/log_f64: worst relative error %.2e", name, worst_d);
        printf("%s: exp_f64/log_f64 %.2e\n", name, worst_d);
    }
    /* max: every length up to 70 and a long row, the maximum at each place,
     * -inf and NaN elements passed over, the initial value kept when larger */
    for (int n = 0; n <= 70; n++) {
        for (int at = 0; at < n; at++) {
            float v[70];
            for (int j = 0; j < n; j++) v[j] = j % 3 == 1 ? -INFINITY : j % 5 == 2 ? NAN : -(float)j;
            v[at] = 7.5f;
            CHECK(K->max_f32(v, n, -INFINITY) == 7.5f && K->max_f32(v, n, 9.0f) == 9.0f, "%s max: n %d at %d", name,
                  n, at);
        }
        const float none = 1.0f;
        CHECK(K->max_f32(&none, 0, -INFINITY) == -INFINITY, "%s max of nothing", name);
    }
    float row[N];
    for (int j = 0; j < N; j++) row[j] = 3.0f - 90.0f * (float)j / N;
    CHECK(K->max_f32(row, N, -INFINITY) == 3.0f && K->max_f32(row + 1, N - 1, -INFINITY) == row[1], "%s max of a row",
          name);
}

/* The f16 x f16 dot against a double loop. */
static void check_f16f16(const char *name, const kernels *K) {
    uint64_t rng = rng_seed(17);
    static uint16_t a16[1000], b16[1000];
    double worst = 0;
    const int ns[] = {1, 7, 8, 15, 16, 17, 100, 1000};
    for (int c = 0; c < 8; c++) {
        double want = 0, mag = 0;
        for (int i = 0; i < ns[c]; i++) {
            a16[i] = fp32_to_fp16(rng_normal(&rng));
            b16[i] = fp32_to_fp16(rng_normal(&rng));
            const double t = (double)fp16_to_fp32(a16[i]) * fp16_to_fp32(b16[i]);
            want += t, mag += fabs(t);
        }
        double e = rel_err(K->dot_f16f16(a16, b16, ns[c]), want, mag);
        worst = e > worst ? e : worst;
    }
    CHECK(worst < 1e-6, "%s f16 x f16 dot: worst error relative to sum |a b| %.2e", name, worst);
    printf("%s: f16 x f16 dot %.2e\n", name, worst);
}

/* f32 -> f16 rows: every non-NaN input as fp32_to_fp16 rounds it, at lengths around the 8-value block */
static void check_f32_to_f16(const char *name, const kernels *K) {
    uint64_t rng = rng_seed(23);
    static float x[1003];
    static uint16_t got[1003];
    int bad = 0;
    for (int rep = 0; rep < 200; rep++) {
        const int n = 1 + rep % 17 + (rep % 3 == 0 ? 986 : 0);
        for (int i = 0; i < n; i++) {
            uint32_t u = (uint32_t)rng_next_u64(&rng);
            memcpy(&x[i], &u, 4);
            if (i % 2) { /* half-way between two adjacent halves: the ties */
                const uint16_t h = (uint16_t)(u % 0x7BFF);
                x[i] = (float)(((double)fp16_to_fp32(h) + fp16_to_fp32((uint16_t)(h + 1))) / 2) * (u >> 31 ? -1 : 1);
            }
            if (isnan(x[i])) x[i] = 0.5f;
        }
        K->f32_to_f16(x, got, n);
        for (int i = 0; i < n; i++) bad += got[i] != fp32_to_fp16(x[i]);
    }
    CHECK(bad == 0, "%s f32 -> f16: %d values differ from fp32_to_fp16", name, bad);
    printf("%s: f32 -> f16 rows, %d mismatches\n", name, bad);
}

/* candidate lists: every index whose value is >= t, in order, against a
 * plain loop (NaNs never pass; t = -inf passes the rest), and nothing
 * written at or past idx[n) */
static void check_index_at_least(const char *name, const kernels *K) {
    uint64_t rng = rng_seed(29);
    static float x[700];
    static int32_t got[700 + 16];
    int bad = 0;
    for (int rep = 0; rep < 300; rep++) {
        const int n = rep % 23 + (rep % 4 == 0 ? 650 : 0);
        for (int i = 0; i < n + 16; i++) got[i] = -7;
        for (int i = 0; i < n; i++) x[i] = (float)rng_normal(&rng);
        if (n > 3) x[rep % n] = NAN;
        const float t = rep % 5 == 0   ? -INFINITY
                        : rep % 5 == 1 ? x[(7 * rep + 1) % (n ? n : 1)] /* ties */
                                       : (float)(rep % 7) * 0.4f - 1.0f;
        const int c = K->index_at_least(x, n, t, got);
        int want = 0;
        for (int i = 0; i < n; i++)
            if (x[i] >= t) {
                bad += want >= c || got[want] != i;
                want++;
            }
        bad += c != want;
        for (int i = n; i < n + 16; i++) bad += got[i] != -7;
    }
    CHECK(bad == 0, "%s index_at_least: %d wrong entries", name, bad);
    printf("%s: index_at_least, %d wrong entries\n", name, bad);
}

int main(void) {
    const kernels *sets[2] = {kernels_scalar(), kernels_avx2()};
    if (!sets[1]) printf("note: this CPU lacks AVX2+FMA+F16C; only the scalar kernels are tested\n");
    for (int s = 0; s < 2; s++) {
        if (!sets[s]) continue;
        check_vectors(sets[s]->name, sets[s]);
        check_kv_rows(sets[s]->name, sets[s]);
        check_exp(sets[s]->name, sets[s]);
        check_f16f16(sets[s]->name, sets[s]);
        check_f32_to_f16(sets[s]->name, sets[s]);
        check_index_at_least(sets[s]->name, sets[s]);
    }
    /* the AVX-512 decode kernels, in a copy of the AVX2 set */
    const kernels_kv_decode *wide = kernels_kv_decode_avx512();
    if (wide) {
        kernels k512 = *sets[1];
        for (int t = 0; t < SUBQ_KV_TYPE_COUNT; t++) {
            k512.kv[t].scores = wide[t].scores;
            k512.kv[t].accum = wide[t].accum;
            CHECK(kernels_kv_decode_get((subq_kv_type)t).scores == wide[t].scores, "the AVX-512 decode kernels are chosen");
        }
        check_kv_rows("avx512 decode", &k512);
    } else {
        printf("note: this CPU lacks AVX-512 VNNI; the AVX-512 decode kernels are not tested\n");
    }
    return test_summary();
}
