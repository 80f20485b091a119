/* The integer GEMV of decode (kernels.h: gemv_q8) in every variant this
 * machine runs (portable C, AVX2, AVX-512 VNNI when present), for Q8_0 and
 * Q4_0 weights:
 *   - against a reference written here from the definition: x quantised
 *     block by block (d = max|x| / 127, q = x * (1 / d) rounded to nearest
 *     even), exact integer sums per block, then the scales, in double; the
 *     kernels may differ only by the float rounding of the scaling. Shapes:
 *     row counts around the kernels' groups of 4 (1, 3, 4, 5, 7, 13, 33), n
 *     from one block to 8288 (odd block counts, rows longer than 4096 as
 *     phi4-mini's FFN down projection's) and 33056 (the AVX-512 q4_0
 *     kernel takes rows longer than 16384 in runs of columns), a weight -128,
 *     an all-zero activation block; weights and activations in buffers of
 *     their exact size, so the sanitizer build sees any read past the end;
 *   - matmul() for 1, 2 and 3 tokens (the decode path, threads splitting
 *     the rows, rows in chunks for 2 and 3 tokens) against the same
 *     reference, against the batched path (gemm_q8, 4 tokens) token by token,
 *     and against the f32 product on unquantised activations within the
 *     bound 8-bit activations imply: |sum_j w_j (x_j - d q_j)| <=
 *     sum_j |w_j| d / 2;
 *   - the Q4_K and Q6_K GEMVs of the AVX2 and AVX-512 VNNI sets against a
 *     double loop over the dequantised weights (see below). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "kernels/kernels.h"
#include "base/pool.h"
#include "model/matmul.h"
#include "quant/quant.h"
#include "q8_variants.h"
#include "test_util.h"

/* value j of block b of a stored row, as the integer q (w = d q), and d */
static int wq(uint32_t type, const void *row, int64_t b, int j) {
    if (type == GGML_TYPE_Q8_0) return ((const block_q8_0 *)row)[b].qs[j];
    const block_q4_0 *k = (const block_q4_0 *)row + b;
    return (j < 16 ? k->qs[j] & 0xF : k->qs[j - 16] >> 4) - 8;
}
static double wd(uint32_t type, const void *row, int64_t b) {
    const uint8_t *d = type == GGML_TYPE_Q8_0 ? ((const block_q8_0 *)row)[b].d : ((const block_q4_0 *)row)[b].d;
    return fp16_to_fp32(quant_rd16(d));
}

/* x's q8 blocks by the definition */
static void ref_quantize(const float *x, int64_t n, int8_t *q, float *d) {
    for (int64_t b = 0; b < n / 32; b++) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[32 * b + j]));
        d[b] = amax / 127.0f;
        const float id = d[b] != 0.0f ? 1.0f / d[b] : 0.0f;
        for (int j = 0; j < 32; j++) q[32 * b + j] = (int8_t)nearbyintf(x[32 * b + j] * id);
    }
}

/* want[r] = sum_b dw dx (exact integer block sum), mag[r] = sum_b |dw dx| sum_j |qw qx| */
static void ref_gemv(uint32_t type, const char *w, size_t rb, int64_t rows, const int8_t *q, const float *d,
                     int64_t n, double *want, double *mag) {
    for (int64_t r = 0; r < rows; r++) {
        const char *row = w + (size_t)r * rb;
        double s = 0, m = 0;
        for (int64_t b = 0; b < n / 32; b++) {
            long isum = 0, iabs = 0;
            for (int j = 0; j < 32; j++) {
                const long p = (long)wq(type, row, b, j) * q[32 * b + j];
                isum += p;
                iabs += labs(p);
            }
            const double scale = wd(type, row, b) * d[b];
            s += scale * (double)isum;
            m += fabs(scale) * (double)iabs;
        }
        want[r] = s;
        mag[r] = m;
    }
}

/* float rounding of a sum of n / 32 scaled block sums (16 lanes each, in
 * several accumulators) relative to the sum of their magnitudes */
static double float_tol(int64_t n) { return (double)(n / 32 + 32) * 1.2e-7; }

int main(void) {
    pool *mm_pool = NULL; /* two threads: matmul splits rows into chunks across them */
    subq_error pool_err;
    if (pool_new(2, &mm_pool, &pool_err)) {
        fprintf(stderr, "FAIL: %s\n", pool_err.msg);
        return 1;
    }
    q8_variant vs[3];
    const int nv = q8_variants(vs);

    uint64_t rng = rng_seed(23);
    const uint32_t types[2] = {GGML_TYPE_Q8_0, GGML_TYPE_Q4_0};

    /* ---- each variant's gemv_q8 against the reference */
    const int row_counts[] = {1, 3, 4, 5, 7, 13, 33};
    const int64_t ns[] = {32, 64, 96, 352, 4096, 4128, 8288, 33056};
    for (int ti = 0; ti < 2; ti++) {
        const uint32_t type = types[ti];
        const char *tn = ggml_type_get(type)->name;
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
            const int64_t n = ns[ni], nb = n / 32;
            float *x = malloc((size_t)n * sizeof(float)), *xd = malloc((size_t)nb * sizeof(float));
            float *xd_got = malloc((size_t)nb * sizeof(float));
            int8_t *xq = malloc((size_t)n), *xq_got = malloc((size_t)n);
            for (int64_t i = 0; i < n; i++) x[i] = rng_normal(&rng) * (i % 97 == 0 ? 20.0f : 1.0f);
            if (nb > 1)
                for (int j = 0; j < 32; j++) x[32 + j] = 0.0f; /* an all-zero block: d = 0, q = 0 */
            ref_quantize(x, n, xq, xd);
            for (int i = 0; i < nv; i++) {
                vs[i].quantize(x, n, xq_got, xd_got);
                CHECK(!memcmp(xq_got, xq, (size_t)n) && !memcmp(xd_got, xd, (size_t)nb * sizeof(float)),
                      "quantize_q8 %s n=%lld differs from the definition", vs[i].name, (long long)n);
            }
            for (size_t ri = 0; ri < sizeof row_counts / sizeof row_counts[0]; ri++) {
                const int64_t rows = row_counts[ri];
                const size_t rb = (size_t)ggml_row_size(type, (uint64_t)n);
                char *w = malloc(rb * (size_t)rows);
                float *y = malloc((size_t)rows * sizeof(float));
                double *want = malloc((size_t)rows * sizeof(double)), *mag = malloc((size_t)rows * sizeof(double));
                for (int64_t r = 0; r < rows; r++) q8_random_row(&rng, type, n, w + (size_t)r * rb);
                ref_gemv(type, w, rb, rows, xq, xd, n, want, mag);
                for (int i = 0; i < nv; i++) {
                    if (!vs[i].gemv[type]) {
                        CHECK(0, "%s has no gemv_q8 for %s", vs[i].name, tn);
                        continue;
                    }
                    for (int64_t r = 0; r < rows; r++) y[r] = NAN;
                    vs[i].gemv[type](w, rb, rows, xq, xd, n, y);
                    double worst = 0;
                    for (int64_t r = 0; r < rows; r++) {
                        const double e = fabs(y[r] - want[r]) / (mag[r] + 1e-30);
                        worst = isnan(e) ? INFINITY : fmax(worst, e);
                    }
                    CHECK(worst <= float_tol(n), "gemv_q8 %s %s %lld x %lld: worst error %.2e of sum |terms| (tol %.2e)",
                          vs[i].name, tn, (long long)rows, (long long)n, worst, float_tol(n));
                }
                free(w), free(y), free(want), free(mag);
            }
            free(x), free(xd), free(xd_got), free(xq), free(xq_got);
        }
    }

    /* ---- matmul() on 1..3 tokens: the decode path end to end */
    for (int ti = 0; ti < 2; ti++) {
        const uint32_t type = types[ti];
        const char *tn = ggml_type_get(type)->name;
        /* 517 x 1024: the rows split across 2 threads, and into several
         * chunks per thread for 2 and 3 tokens */
        const int64_t rows = 517, n = 1024, nb = n / 32;
        const int TB = 4;
        const size_t rb = (size_t)ggml_row_size(type, (uint64_t)n);
        char *w = malloc(rb * (size_t)rows);
        float *wf = malloc((size_t)rows * (size_t)n * sizeof(float)), *x = malloc((size_t)TB * n * sizeof(float));
        float *y = malloc((size_t)TB * rows * sizeof(float)), *yb = malloc((size_t)TB * rows * sizeof(float));
        float *xd = malloc((size_t)nb * sizeof(float));
        int8_t *xq = malloc((size_t)n);
        double *want = malloc((size_t)rows * sizeof(double)), *mag = malloc((size_t)rows * sizeof(double));
        for (int64_t r = 0; r < rows; r++) q8_random_row(&rng, type, n, w + (size_t)r * rb);
        for (int64_t r = 0; r < rows; r++) quant_dequant_ref[type](w + (size_t)r * rb, wf + (size_t)r * n, n);
        for (int64_t i = 0; i < TB * n; i++) x[i] = rng_normal(&rng);
        const matrix W = {.type = type, .rows = rows, .cols = n, .row_bytes = rb, .data = w};
        matmul_scratch sc;
        CHECK(matmul_scratch_init(&sc, TB, n), "matmul scratch");
        matmul(yb, x, &W, TB, &sc, mm_pool); /* the batched (prefill) path */
        for (int T = 1; T < TB; T++) {
            matmul(y, x, &W, T, &sc, mm_pool);
            double worst_q = 0, worst_b = 0, worst_f = 0;
            int over_bound = 0;
            for (int t = 0; t < T; t++) {
                ref_quantize(x + (size_t)t * n, n, xq, xd);
                ref_gemv(type, w, rb, rows, xq, xd, n, want, mag);
                for (int64_t r = 0; r < rows; r++) {
                    const float got = y[(size_t)t * rows + r];
                    worst_q = fmax(worst_q, fabs(got - want[r]) / mag[r]);
                    worst_b = fmax(worst_b, fabs(got - yb[(size_t)t * rows + r]) / mag[r]);
                    /* f32 activations, and the bound on what quantising them moves */
                    double sf = 0, bound = 0;
                    for (int64_t i = 0; i < n; i++) {
                        sf += (double)wf[(size_t)r * n + i] * x[(size_t)t * n + i];
                        bound += fabs(wf[(size_t)r * n + i]) * xd[i / 32] / 2;
                    }
                    worst_f = fmax(worst_f, fabs(got - sf) / bound);
                    over_bound += fabs(got - sf) > bound * 1.001 + mag[r] * float_tol(n);
                }
            }
            CHECK(worst_q <= float_tol(n), "matmul %s %d tokens vs the reference: %.2e", tn, T, worst_q);
            CHECK(worst_b <= 2 * float_tol(n), "matmul %s %d tokens vs the batched path: %.2e", tn, T, worst_b);
            CHECK(over_bound == 0, "matmul %s %d tokens: %d outputs move from f32 by more than sum |w| d / 2", tn, T,
                  over_bound);
            printf("matmul %s %d token(s): %.1e from the reference, %.1e from the batch, f32 distance %.2f of its bound\n",
                   tn, T, worst_q, worst_b, worst_f);
        }
        matmul_scratch_free(&sc);
        free(w), free(wf), free(x), free(y), free(yb), free(xd), free(xq), free(want), free(mag);
    }

    /* ---- gemv_q8 of Q4_K and Q6_K weights (the AVX2 and AVX-512 VNNI sets
     * have them; the portable set decodes on float rows): against a double
     * loop over the dequantised weights and the q8 activations, random bytes
     * for scales, mins and values, rows of up to 513 super-blocks (runs of
     * columns: Q6_K's past 64, Q4_K's past 512), the error relative to
     * sum_j (|w_j| + 2 dmin m_s) |d_b q_j| (the Q4_K kernel adds d sc_s S_s
     * and subtracts dmin m_s X_s; Q6_K's lane sums are exact) */
    const uint32_t ktypes[2] = {GGML_TYPE_Q4_K, GGML_TYPE_Q6_K};
    int n_k = 0;
    for (int ki = 0; ki < 2; ki++)
        for (int i = 0; i < nv; i++) {
            const uint32_t kt = ktypes[ki];
            if (!vs[i].gemv[kt]) continue;
            n_k++;
            const int64_t kn[] = {256, 512, 2816, 65 * 256, 513 * 256};
            const int krows[] = {1, 4, 5, 13};
            for (size_t ni = 0; ni < sizeof kn / sizeof kn[0]; ni++)
                for (size_t ri = 0; ri < sizeof krows / sizeof krows[0]; ri++) {
                    const int64_t n = kn[ni], rows = krows[ri], nb = n / 32;
                    if (n > 4096 && rows > 4) continue;
                    const size_t rb = (size_t)ggml_row_size(kt, (uint64_t)n);
                    char *w = malloc(rb * (size_t)rows);
                    float *wf = malloc((size_t)n * sizeof(float)), *x = malloc((size_t)n * sizeof(float));
                    float *xd = malloc((size_t)nb * sizeof(float)), *y = malloc((size_t)rows * sizeof(float));
                    int8_t *xq = malloc((size_t)n);
                    q8_random_kquant_rows(&rng, kt, rows, n, rb, w);
                    for (int64_t k = 0; k < n; k++) x[k] = rng_normal(&rng);
                    ref_quantize(x, n, xq, xd);
                    vs[i].gemv[kt](w, rb, rows, xq, xd, n, y);
                    double worst = 0;
                    for (int64_t r = 0; r < rows; r++) {
                        const char *row = w + (size_t)r * rb;
                        quant_dequant_ref[kt](row, wf, n);
                        double want = 0, mag = 0;
                        for (int64_t j = 0; j < n; j++) {
                            double dm = 0;
                            if (kt == GGML_TYPE_Q4_K) {
                                const block_q4_K *blk = (const block_q4_K *)row + j / 256;
                                uint8_t sc, m;
                                k4_scale_min((int)(j % 256 / 32), blk->scales, &sc, &m);
                                dm = fabs((double)fp16_to_fp32(quant_rd16(blk->dmin)) * m);
                            }
                            want += (double)wf[j] * xd[j / 32] * xq[j];
                            mag += (fabs(wf[j]) + 2 * dm) * fabs(xd[j / 32] * xq[j]);
                        }
                        const double e = fabs(y[r] - want) / (mag + 1e-30);
                        worst = isnan(e) ? INFINITY : fmax(worst, e);
                    }
                    CHECK(worst <= float_tol(n), "gemv_q8 %s %s %lld x %lld: worst error %.2e of the magnitude "
                          "(tol %.2e)", vs[i].name, ggml_type_get(kt)->name, (long long)rows, (long long)n, worst,
                          float_tol(n));
                    free(w), free(wf), free(x), free(xd), free(y), free(xq);
                }
        }
    CHECK(n_k == 2 * ((kernels_avx2() ? 1 : 0) + (kernels_gemv_q8_avx512() ? 1 : 0)),
          "Q4_K and Q6_K GEMVs in the AVX2 and AVX-512 VNNI sets, where they run (%d)", n_k);
    pool_free(mm_pool);
    return test_summary();
}
