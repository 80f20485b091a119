/* The integer GEMM of prefill (kernels.h: quantize_q8, gemm_q8) in every
 * variant this machine runs (portable C, AVX2, AVX-512 VNNI when present):
 *   - quantize_q8 against a double-precision model of its definition: each
 *     block's scale is max|x| / 127, every |q| <= 127 and |x - d q| <= d / 2,
 *     and all variants give the same bytes and scales;
 *   - gemm_q8 for Q8_0 and Q4_0 weights against a double loop over the
 *     dequantised weights and the dequantised q8 activations (the GEMM is
 *     that dot product exactly, up to the float rounding of the scaling), for
 *     shapes around the tile edges (rows and tokens not multiples of 4, an
 *     odd number of blocks, a weight -128) and a y row stride > rows;
 *   - gemm_q8 for Q4_K and Q6_K weights (AVX-512 VNNI only) against the
 *     same loop;
 *   - matmul() on a batch (the path prefill takes) against the same double
 *     loop, and within 2% of the f32 product on unquantised activations
 *     (what 8-bit activations cost). */
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

/* worst |got - want| / (sum |terms| + tiny) over a T x rows product */
static double worst_err(const float *got, int64_t ldy, const double *want, const double *mag, int T, int64_t rows) {
    double worst = 0;
    for (int t = 0; t < T; t++)
        for (int64_t r = 0; r < rows; r++) {
            double e = fabs(got[(size_t)t * ldy + r] - want[(size_t)t * rows + r]) / (mag[(size_t)t * rows + r] + 1e-30);
            worst = e > worst ? e : worst;
        }
    return worst;
}

/* want[t][r] = sum_i wf[r][i] d(t, i / 32) q[t][i] in double, and mag the
 * same sum of magnitudes */
static void reference(const float *wf, const int8_t *q, const float *d, int rows, int cols, int T, double *want,
                      double *mag) {
    for (int t = 0; t < T; t++)
        for (int r = 0; r < rows; r++) {
            double s = 0, m = 0;
            for (int i = 0; i < cols; i++) {
                double xv = (double)d[(t * cols + i) / 32] * q[t * cols + i];
                s += wf[(size_t)r * cols + i] * xv;
                m += fabs(wf[(size_t)r * cols + i] * xv);
            }
            want[t * rows + r] = s;
            mag[t * rows + r] = m;
        }
}

/* One variant's gemm_q8 of `type` on rows x cols weights w and T activation
 * rows (q, d) against want (relative to mag), with a y row stride > rows
 * whose gap must stay untouched (y: room for T x (rows + 3) floats). */
static void check_gemm(const q8_variant *v, uint32_t type, const char *w, size_t rb, int rows, int cols, int T,
                       const int8_t *q, const float *d, const double *want, const double *mag, float *y) {
    const int64_t ldy = rows + 3;
    for (int64_t k = 0; k < T * ldy; k++) y[k] = NAN;
    v->gemm[type](w, rb, rows, q, d, T, cols, y, ldy);
    double e = worst_err(y, ldy, want, mag, T, rows);
    CHECK(e < 1e-6, "gemm_q8 %s %s %dx%dx%d: worst error relative to sum |w x| %.2e", v->name,
          ggml_type_get(type)->name, rows, cols, T, e);
    int untouched = 1; /* the row stride's gap stays as it was */
    for (int t = 0; t < T; t++)
        for (int64_t r = rows; r < ldy && t + 1 < T; r++) untouched &= isnan(y[t * ldy + r]);
    CHECK(untouched, "gemm_q8 %s %s wrote outside its rows", v->name, ggml_type_get(type)->name);
}

int main(void) {
    pool *mm_pool = NULL; /* two threads: matmul splits rows into chunks across them */
    subq_error pool_err;
    if (pool_new(2, &mm_pool, &pool_err)) {
        fprintf(stderr, "FAIL: %s\n", pool_err.msg);
        return 1;
    }
    q8_variant vs[3];
    const int nv = q8_variants(vs);

    uint64_t rng = rng_seed(11);
    enum { NMAX = 352, TMAX = 13, RMAX = 23 };
    static float x[TMAX * NMAX], d_ref[TMAX * NMAX / 32], d_got[TMAX * NMAX / 32], wf[RMAX * NMAX], y[TMAX * 40];
    static int8_t q_ref[TMAX * NMAX], q_got[TMAX * NMAX];
    static double want[TMAX * RMAX], mag[TMAX * RMAX];
    static char w[RMAX * NMAX * 2];

    /* ---- quantisation: definition, bounds, agreement between variants */
    const int64_t n = NMAX; /* 11 blocks: odd */
    for (int i = 0; i < TMAX * NMAX; i++) x[i] = rng_normal(&rng) * (i % 97 == 0 ? 20.0f : 1.0f);
    for (int i = 0; i < 32; i++) x[i] = 0.0f; /* an all-zero block: d = 0, q = 0 */
    vs[0].quantize(x, TMAX * n, q_ref, d_ref);
    int bad_def = 0, bad_bound = 0;
    for (int64_t b = 0; b < TMAX * n / 32; b++) {
        double amax = 0;
        for (int j = 0; j < 32; j++) amax = fmax(amax, fabs(x[32 * b + j]));
        bad_def += fabs(d_ref[b] - amax / 127.0) > 1e-6 * amax;
        for (int j = 0; j < 32; j++) {
            int q = q_ref[32 * b + j];
            bad_bound += q < -127 || q > 127 || fabs(x[32 * b + j] - (double)d_ref[b] * q) > 0.5001 * d_ref[b];
        }
    }
    CHECK(bad_def == 0, "quantize_q8: %d block scales are not max|x| / 127", bad_def);
    CHECK(bad_bound == 0, "quantize_q8: %d values out of [-127, 127] or off by more than d / 2", bad_bound);
    for (int i = 1; i < nv; i++) {
        vs[i].quantize(x, TMAX * n, q_got, d_got);
        CHECK(!memcmp(q_got, q_ref, sizeof q_ref) && !memcmp(d_got, d_ref, sizeof d_ref),
              "quantize_q8 %s differs from %s", vs[i].name, vs[0].name);
    }

    /* ---- gemm_q8 against the double loop over the dequantised operands */
    const uint32_t types[2] = {GGML_TYPE_Q8_0, GGML_TYPE_Q4_0};
    const int shapes[][3] = {{23, 352, 13}, {4, 64, 4}, {8, 32, 1}, {5, 96, 7}, {1, 352, 3}, {17, 160, 9}};
    for (int ti = 0; ti < 2; ti++) {
        const uint32_t type = types[ti];
        for (int si = 0; si < 6; si++) {
            const int rows = shapes[si][0], cols = shapes[si][1], T = shapes[si][2];
            const size_t rb = (size_t)ggml_row_size(type, cols);
            for (int r = 0; r < rows; r++) q8_random_row(&rng, type, cols, w + (size_t)r * rb);
            for (int r = 0; r < rows; r++) quant_dequant_ref[type](w + (size_t)r * rb, wf + (size_t)r * cols, cols);
            vs[0].quantize(x, (int64_t)T * cols, q_ref, d_ref); /* T rows of `cols` values */
            reference(wf, q_ref, d_ref, rows, cols, T, want, mag);
            for (int i = 0; i < nv; i++) {
                if (!vs[i].gemm[type]) {
                    CHECK(0, "%s has no gemm_q8 for %s", vs[i].name, ggml_type_get(type)->name);
                    continue;
                }
                check_gemm(&vs[i], type, w, rb, rows, cols, T, q_ref, d_ref, want, mag, y);
            }
        }
    }

    /* ---- gemm_q8 of Q4_K and Q6_K weights (the AVX-512 VNNI set has them;
     * the others take dequantised rows through sgemm): against the same
     * double loop, random bytes for scales and values, rows and tokens
     * around the tile edges, up to two super-blocks a row */
    const uint32_t ktypes[2] = {GGML_TYPE_Q4_K, GGML_TYPE_Q6_K};
    int n_kgemm = 0;
    for (int ki = 0; ki < 2; ki++)
    for (int i = 0; i < nv; i++) {
        const uint32_t kt = ktypes[ki];
        if (!vs[i].gemm[kt]) continue;
        n_kgemm++;
        const int kshapes[][3] = {{23, 512, 13}, {16, 256, 8}, {5, 256, 1}};
        static char wk[RMAX * 512 * 2];
        static float wkf[RMAX * 512], xk[TMAX * 512], dk[TMAX * 512 / 32];
        static int8_t qk[TMAX * 512];
        static double wantk[TMAX * RMAX], magk[TMAX * RMAX];
        for (int si = 0; si < 3; si++) {
            const int rows = kshapes[si][0], cols = kshapes[si][1], T = kshapes[si][2];
            const size_t rb = (size_t)ggml_row_size(kt, cols);
            q8_random_kquant_rows(&rng, kt, rows, cols, rb, wk);
            for (int r = 0; r < rows; r++) quant_dequant_ref[kt](wk + (size_t)r * rb, wkf + (size_t)r * cols, cols);
            for (int k = 0; k < T * cols; k++) xk[k] = rng_normal(&rng);
            vs[0].quantize(xk, (int64_t)T * cols, qk, dk);
            reference(wkf, qk, dk, rows, cols, T, wantk, magk);
            check_gemm(&vs[i], kt, wk, rb, rows, cols, T, qk, dk, wantk, magk, y);
        }
    }
    CHECK(n_kgemm == (kernels_gemm_q8_avx512() ? 2 : 0), "Q4_K and Q6_K GEMMs exactly where AVX-512 VNNI runs (%d)",
          n_kgemm);

    /* ---- matmul on a batch: the integer path, and its distance from f32 */
    {
        const int rows = 23, cols = 352, T = 13;
        const size_t rb = (size_t)ggml_row_size(GGML_TYPE_Q8_0, cols);
        for (int r = 0; r < rows; r++) q8_random_row(&rng, GGML_TYPE_Q8_0, cols, w + (size_t)r * rb);
        for (int r = 0; r < rows; r++) quant_dequant_ref[GGML_TYPE_Q8_0](w + (size_t)r * rb, wf + (size_t)r * cols, cols);
        matrix W = {.type = GGML_TYPE_Q8_0, .rows = rows, .cols = cols, .row_bytes = rb, .data = w};
        matmul_scratch sc;
        CHECK(matmul_scratch_init(&sc, T, cols), "matmul scratch");
        matmul(y, x, &W, T, &sc, mm_pool);
        kernels_get()->quantize_q8(x, (int64_t)T * cols, q_ref, d_ref);
        double worst_q = 0, worst_f = 0;
        for (int t = 0; t < T; t++)
            for (int r = 0; r < rows; r++) {
                double sq = 0, sf = 0, m = 0;
                for (int i = 0; i < cols; i++) {
                    double wv = wf[(size_t)r * cols + i];
                    sq += wv * d_ref[(t * cols + i) / 32] * q_ref[t * cols + i];
                    sf += wv * x[t * cols + i];
                    m += fabs(wv * x[t * cols + i]);
                }
                worst_q = fmax(worst_q, fabs(y[t * rows + r] - sq) / m);
                worst_f = fmax(worst_f, fabs(y[t * rows + r] - sf) / m);
            }
        CHECK(worst_q < 1e-6, "matmul q8_0 batch vs the q8 double loop: %.2e", worst_q);
        CHECK(worst_f < 0.02, "matmul q8_0 batch vs f32 activations: %.2e", worst_f);
        printf("matmul q8_0 13 tokens: %.2e from the q8 double loop, %.2e from f32 activations\n", worst_q, worst_f);
        matmul_scratch_free(&sc);
    }
    pool_free(mm_pool);
    return test_summary();
}
