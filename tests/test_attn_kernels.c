/* The decode attention kernels (src/attn/attn_kernels.c), the selected set
 * (AVX2 on this machine) and the portable C set, against plain double
 * precision loops: group scores and value accumulation over contiguous f32
 * and f16 rows for head widths that are and are not multiples of 8, group
 * sizes 1-7 and row counts around the 4-key and 32-key blocks; the vector
 * exp against exp() over [-87, 0], with -inf giving exactly 0. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "attn/attn_kernels.h"
#include "base/rng.h"
#include "quant/quant.h"
#include "test_util.h"

static void check_set(const char *name, const attn_kernels *K) {
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

int main(void) {
    check_set("selected", attn_kernels_get());
    check_set("scalar", attn_kernels_scalar());
    return test_summary();
}
