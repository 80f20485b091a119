/* Row-scaled int8 / int4 search-key codes (kernels/scan_codes.h) and their
 * scan in every form this machine runs (portable C, AVX2, AVX-512 VNNI):
 *   - the codes against the format as documented, decoded here byte by
 *     byte: s = max|x| / 127 (int8) or / 7 (int4), |x_c - s k_c| <= s / 2,
 *     the largest value coded at full scale, zeros / nibble 8 past d; the
 *     query the same way, with the sum of its codes;
 *   - each form's scores against out = (float)(sum_c q_c k_c) * (s_row s_q)
 *     computed here in 64-bit integers from those decoded codes: equal to
 *     the bit (the integer sum is exact in every form), for widths from 1
 *     to SCAN_CODES_MAX_D (half pieces, odd int4 groups), row counts around
 *     the 4- and 16-row groups, rows at an odd address in a buffer of their
 *     exact size (the sanitizer build sees any read past the end),
 *     all-zero rows and rows at full scale (the largest sums);
 *   - the scores against the f64 dot product of the float rows, within the
 *     rounding bound of both codings. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "kernels/scan_codes.h"
#include "test_util.h"

/* code c of a row, read from the documented layout */
static int code_at(int bits, const uint8_t *row, int c) {
    if (bits == 8) return (int8_t)row[c];
    const uint8_t b = row[32 * (c / 64) + c % 32];
    return (c % 64 < 32 ? b & 15 : b >> 4) - 8;
}

static void check_codes(int bits, const float *x, int d, const uint8_t *row, float s, const char *what) {
    const int top = bits == 8 ? 127 : 7, dp = scan_codes_width(bits, d);
    float amax = 0.0f;
    for (int c = 0; c < d; c++) amax = fmaxf(amax, fabsf(x[c]));
    CHECK(s == amax / (float)top, "%s bits %d d %d: scale %g, max|x| / %d = %g", what, bits, d, s, top, amax / top);
    int worst = 0, at_top = 0, pad = 1;
    for (int c = 0; c < d; c++) {
        const int k = code_at(bits, row, c);
        at_top |= abs(k) == top;
        if (fabs((double)x[c] - (double)s * k) > s * 0.5 * (1 + 1e-5) + 1e-30 || abs(k) > top) worst = 1;
    }
    for (int c = d; c < dp; c++) pad &= code_at(bits, row, c) == 0;
    CHECK(!worst, "%s bits %d d %d: a code off by more than half a step", what, bits, d);
    CHECK(amax == 0.0f || at_top, "%s bits %d d %d: no value at full scale", what, bits, d);
    CHECK(pad, "%s bits %d d %d: codes past d are not zero", what, bits, d);
}

/* the score from the decoded codes, in 64-bit integers */
static float ref_score(int bits, const scan_query *q, const uint8_t *row, float s_row) {
    int64_t sum = 0;
    for (int c = 0; c < q->dp; c++) sum += (int64_t)q->code[c] * code_at(bits, row, c);
    return (float)sum * (s_row * q->scale);
}

int main(void) {
    const char *forms[] = {"scalar", "avx2", "avx512"};
    scan_codes_fn fn[3];
    for (int f = 0; f < 3; f++) {
        fn[f] = scan_codes_scores_named(forms[f]);
        printf("%s: %s\n", forms[f], fn[f] ? "runs" : "not on this CPU");
    }
    CHECK(fn[0] != NULL && scan_codes_scores() != NULL, "the portable form and a best form exist");
    CHECK(scan_codes_width(8, 0) == 0 && scan_codes_width(4, SCAN_CODES_MAX_D + 1) == 0 && scan_codes_width(5, 32) == 0,
          "widths outside the format are refused");
    CHECK(scan_codes_width(8, 33) == 64 && scan_codes_width(4, 65) == 128 && scan_codes_row_bytes(4, 65) == 64,
          "padding: int8 to 32 values, int4 to 64 (32 bytes per group)");

    uint64_t rng = rng_seed(41);
    const int widths[] = {1, 17, 32, 33, 64, 96, 100, 128, 160, 192, 256, 320, 1000, SCAN_CODES_MAX_D};
    const int counts[] = {0, 1, 3, 4, 5, 15, 16, 17, 33, 70};
    const int bits_of[2] = {8, 4};
    for (int bi = 0; bi < 2; bi++)
        for (size_t wi = 0; wi < sizeof widths / sizeof widths[0]; wi++) {
            const int bits = bits_of[bi], d = widths[wi], n_max = 70;
            const size_t rb = scan_codes_row_bytes(bits, d);
            float *x = malloc((size_t)n_max * d * sizeof(float)), *qx = malloc((size_t)d * sizeof(float));
            float *scale = malloc(n_max * sizeof(float)), *out = malloc(n_max * sizeof(float));
            uint8_t *buf = malloc(rb * n_max + 1), *rows = buf + 1; /* an odd address */
            float *ref = malloc(n_max * sizeof(float));
            for (int j = 0; j < n_max; j++)
                for (int c = 0; c < d; c++) {
                    float v = rng_normal(&rng) * (j % 5 == 0 ? 1e-3f : 3.0f);
                    if (j == 1) v = 0.0f;                          /* an all-zero row */
                    if (j == 2) v = c % 2 ? 50.0f : -50.0f;        /* every code at full scale */
                    x[(size_t)j * d + c] = v;
                }
            for (int j = 0; j < n_max; j++) {
                scale[j] = scan_codes_encode(bits, x + (size_t)j * d, d, rows + (size_t)j * rb);
                check_codes(bits, x + (size_t)j * d, d, rows + (size_t)j * rb, scale[j], "key");
            }
            for (int c = 0; c < d; c++) qx[c] = c % 2 ? 1.0f : -1.0f; /* the first query: full scale too */
            for (int qi = 0; qi < 2; qi++) {
                scan_query q;
                scan_codes_query(bits, qx, d, &q);
                int32_t sum = 0;
                for (int c = 0; c < d; c++) sum += q.code[c];
                CHECK(q.bits == bits && q.dp == scan_codes_width(bits, d) && q.sum == sum, "query header");
                {
                    uint8_t qrow[SCAN_CODES_MAX_D];
                    for (int c = 0; c < q.dp; c++) qrow[c] = (uint8_t)q.code[c];
                    check_codes(8, qx, d, qrow, q.scale, "query");
                }
                for (int j = 0; j < n_max; j++) ref[j] = ref_score(bits, &q, rows + (size_t)j * rb, scale[j]);
                for (int f = 0; f < 3; f++) {
                    if (!fn[f]) continue;
                    for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
                        const int n = counts[ci];
                        /* the last n rows: a call's rows end where the buffer does */
                        const int j0 = n_max - n;
                        for (int j = 0; j < n; j++) out[j] = NAN;
                        fn[f](&q, rows + (size_t)j0 * rb, scale + j0, n, out);
                        int bad = -1;
                        for (int j = 0; j < n && bad < 0; j++)
                            if (memcmp(&out[j], &ref[j0 + j], sizeof(float))) bad = j;
                        CHECK(bad < 0, "%s bits %d d %d n %d: row %d scores %.9g, integer reference %.9g", forms[f],
                              bits, d, n, bad, bad >= 0 ? out[bad] : 0.0, bad >= 0 ? ref[j0 + bad] : 0.0);
                    }
                }
                /* against the float dot: each coding moves a value by at most half its step */
                double worst = 0.0;
                for (int j = 0; j < n_max; j++) {
                    double dot = 0.0, bound = 0.0;
                    const float *xr = x + (size_t)j * d;
                    for (int c = 0; c < d; c++) {
                        dot += (double)qx[c] * xr[c];
                        bound += fabs(qx[c]) * scale[j] * 0.5 + (fabs(xr[c]) + scale[j] * 0.5) * q.scale * 0.5;
                    }
                    const double e = fabs(ref[j] - dot) - bound - 1e-4 * (fabs(dot) + bound);
                    worst = e > worst ? e : worst;
                }
                CHECK(worst <= 0.0, "bits %d d %d: a score farther from the f64 dot than the coding bound (by %g)",
                      bits, d, worst);
                for (int c = 0; c < d; c++) qx[c] = rng_normal(&rng); /* the second query: Gaussian */
            }
            free(x);
            free(qx);
            free(scale);
            free(out);
            free(buf);
            free(ref);
        }
    return test_summary();
}
