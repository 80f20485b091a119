/* The vector kernels of src/kernels (the stored-format ones are in
 * test_quant.c), the selected set (AVX2 on this machine) and the portable C
 * set, against plain double precision loops: f32 / f16 dot and axpy at
 * lengths around the 8- and 32-element blocks; gathered row dots over f32
 * and f16 rows at widths that are and are not multiples of 8 and counts
 * around the 4-row block; decode group scores and value accumulation over
 * contiguous rows for head widths that are and are not multiples of 8, group
 * sizes 1-7 and row counts around the 4-key and 32-key blocks; the vector
 * exp against exp() over [-87, 0], with -inf giving exactly 0; the int8 /
 * int4 code dots of the compressed selector scans (exactly) and the
 * f16 x f16 dot. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

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

static void check_attention(const char *name, const kernels *K) {
    uint64_t rng = rng_seed(11);
    const int hds[] = {8, 12, 64, 128}, gs[] = {1, 2, 3, 5, 7}, ns[] = {1, 3, 4, 31, 32, 33, 100};
    double worst_s = 0, worst_a = 0;
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 5; b++)
            for (int c = 0; c < 7; c++)
                for (int f16 = 0; f16 < 2; f16++) {
                    const int hd = hds[a], g = gs[b], n = ns[c], ld = n + 3;
                    float *q = malloc((size_t)g * hd * sizeof(float)), *rows = malloc((size_t)n * hd * sizeof(float));
                    uint16_t *rows16 = malloc((size_t)n * hd * sizeof(uint16_t));
                    float *s = malloc((size_t)g * ld * sizeof(float)), *out = calloc((size_t)g * hd, sizeof(float));
                    for (int i = 0; i < g * hd; i++) q[i] = rng_normal(&rng);
                    for (int i = 0; i < n * hd; i++) {
                        rows16[i] = fp32_to_fp16(rng_normal(&rng));
                        rows[i] = f16 ? fp16_to_fp32(rows16[i]) : rng_normal(&rng);
                    }
                    if (f16) K->scores_f16(q, g, rows16, n, hd, 0.25f, s, ld);
                    else K->scores_f32(q, g, rows, n, hd, 0.25f, s, ld);
                    for (int i = 0; i < g; i++)
                        for (int j = 0; j < n; j++) {
                            double want = 0, mag = 0;
                            for (int d = 0; d < hd; d++) {
                                want += (double)q[i * hd + d] * rows[j * hd + d];
                                mag += fabs((double)q[i * hd + d] * rows[j * hd + d]);
                            }
                            double e = fabs(s[i * ld + j] - 0.25 * want) / (0.25 * mag + 1e-30);
                            worst_s = e > worst_s ? e : worst_s;
                        }
                    /* weights p = s (any values), out_i = sum_j p_ij v_j */
                    if (f16) K->accum_f16(s, g, ld, rows16, n, hd, out);
                    else K->accum_f32(s, g, ld, rows, n, hd, out);
                    for (int i = 0; i < g; i++)
                        for (int d = 0; d < hd; d++) {
                            double want = 0, mag = 0;
                            for (int j = 0; j < n; j++) {
                                want += (double)s[i * ld + j] * rows[j * hd + d];
                                mag += fabs((double)s[i * ld + j] * rows[j * hd + d]);
                            }
                            double e = fabs(out[i * hd + d] - want) / (mag + 1e-6);
                            worst_a = e > worst_a ? e : worst_a;
                        }
                    free(q);
                    free(rows);
                    free(rows16);
                    free(s);
                    free(out);
                }
    CHECK(worst_s < 1e-5, "%s scores: worst error relative to sum |q k| %.2e", name, worst_s);
    CHECK(worst_a < 1e-5, "%s accum: worst error relative to sum |p v| %.2e", name, worst_a);
    /* exp(x - mx) over [-87, 0] plus -inf */
    enum { N = 1003 };
    float x[N];
    double want_sum = 0, worst_e = 0;
    for (int j = 0; j < N; j++) {
        x[j] = j == 500 ? -INFINITY : 3.0f - 90.0f * (float)j / N;
        want_sum += j == 500 || x[j] - 3.0f < -87.0f ? 0.0 : exp((double)x[j] - 3.0);
    }
    float y[N];
    for (int j = 0; j < N; j++) y[j] = x[j];
    double sum = K->exp_shift_sum(y, N, 3.0f);
    int zero_ok = y[500] == 0.0f;
    for (int j = 0; j < N; j++) {
        if (j == 500 || x[j] - 3.0f < -87.0f) {
            zero_ok &= y[j] < 1e-37f;
            continue;
        }
        double e = fabs(y[j] - exp((double)x[j] - 3.0)) / exp((double)x[j] - 3.0);
        worst_e = e > worst_e ? e : worst_e;
    }
    CHECK(worst_e < 5e-7, "%s exp: worst relative error %.2e", name, worst_e);
    CHECK(zero_ok, "%s exp: -inf (and below -87) must give 0", name);
    CHECK(fabs(sum - want_sum) / want_sum < 1e-6, "%s exp: sum %.9g, want %.9g", name, sum, want_sum);
    printf("%s: scores %.2e, accum %.2e, exp %.2e\n", name, worst_s, worst_a, worst_e);
}

/* Compressed-code row dots (formats in kernels.h) against a double loop over
 * the decoded values: integer arithmetic, so equal exactly. Values span the
 * whole range, the extremes included; widths 32-320, counts around the
 * 4-row block, rows gathered out of order. Also the f16 x f16 dot. */
static void check_codes(const char *name, const kernels *K) {
    uint64_t rng = rng_seed(17);
    enum { ROWS = 23, DMAX = 320 };
    static int8_t q[DMAX], val[ROWS][DMAX];
    static uint8_t codes[ROWS * (DMAX + 16)]; /* rows 16 bytes apart beyond their codes */
    int32_t idx[ROWS], out[ROWS];
    int bad = 0;
    const int ds[] = {32, 96, 64, 128, 320}, counts[] = {1, 3, 4, 5, 9, 23};
    for (int bits = 8; bits >= 4; bits -= 4) {
        const int lim = bits == 8 ? 127 : 7;
        for (int c = bits == 8 ? 0 : 2; c < 5; c++) { /* widths: multiples of 32 (i8), 64 (i4) */
            const int d = ds[c];
            const size_t row_bytes = (size_t)d * bits / 8 + 16; /* rows need not be contiguous */
            for (int i = 0; i < d; i++) q[i] = (int8_t)((int)(rng_next_u64(&rng) % 255) - 127);
            q[0] = 127, q[1] = -127;
            for (int r = 0; r < ROWS; r++) {
                uint8_t *row = codes + r * row_bytes;
                for (int i = 0; i < d; i++) val[r][i] = (int8_t)((int)(rng_next_u64(&rng) % (2 * lim + 1)) - lim);
                val[r][0] = (int8_t)lim, val[r][1] = (int8_t)-lim;
                for (int i = 0; i < d; i++) {
                    if (bits == 8) {
                        row[i] = (uint8_t)val[r][i];
                    } else if (i % 64 < 32) { /* byte 32g + j: low nibble 64g + j, high 64g + 32 + j */
                        const int g = i / 64, j = i % 64;
                        row[32 * g + j] = (uint8_t)((val[r][i] + 8) | ((val[r][i + 32] + 8) << 4));
                    }
                }
            }
            for (int k = 0; k < 6; k++) {
                const int n = counts[k];
                for (int i = 0; i < n; i++) idx[i] = (int32_t)(rng_next_u64(&rng) % ROWS);
                (bits == 8 ? K->gather_dot_i8 : K->gather_dot_i4)(q, codes, row_bytes, d, idx, n, out);
                for (int i = 0; i < n; i++) {
                    double want = 0;
                    for (int j = 0; j < d; j++) want += (double)q[j] * val[idx[i]][j];
                    bad += (double)out[i] != want;
                }
            }
        }
    }
    CHECK(bad == 0, "%s int8/int4 code dots: %d differ from the double loop", name, bad);
    /* f16 x f16 */
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
    printf("%s: code dots exact, f16 x f16 dot %.2e\n", name, worst);
}

int main(void) {
    const kernels *sets[2] = {kernels_scalar(), kernels_avx2()};
    if (!sets[1]) printf("note: this CPU lacks AVX2+FMA+F16C; only the scalar kernels are tested\n");
    for (int s = 0; s < 2; s++) {
        if (!sets[s]) continue;
        check_vectors(sets[s]->name, sets[s]);
        check_attention(sets[s]->name, sets[s]);
        check_codes(sets[s]->name, sets[s]);
    }
    return test_summary();
}
