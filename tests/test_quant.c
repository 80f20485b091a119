/* Element formats against independent references: the CPU's F16C
 * conversion instructions for half precision, exact arithmetic for bf16,
 * the Q8_0 definition (d = amax/127, q = round(x/d)); every kernel set's dot
 * products against a double-precision dot of the dequantised row, and the
 * SIMD dequantisers against the scalar ones bit for bit. (The block layouts
 * themselves are checked against numpy in tests/ref/check_kquants.py.) */
#include <cpuid.h>
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "kernels/kernels.h"
#include "test_util.h"

__attribute__((target("f16c"))) static float hw_h2f(uint16_t h) { return _cvtsh_ss(h); }
__attribute__((target("f16c"))) static uint16_t hw_f2h(float f) { return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT); }

/* F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports has no "f16c" */
static int cpu_has_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static void test_fp16(uint64_t *rng) {
    if (!cpu_has_f16c()) {
        CHECK(0, "this CPU lacks F16C, the reference for half-precision tests");
        return;
    }
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float ours = fp16_to_fp32((uint16_t)h), ref = hw_h2f((uint16_t)h);
        if (isnan(ref) ? !isnan(ours) : bits(ours) != bits(ref)) bad++;
    }
    CHECK(bad == 0, "fp16_to_fp32 differs from F16C on %d of 65536 values", bad);
    /* f32 -> f16 rounding on random bit patterns and on every half-way point */
    bad = 0;
    for (int i = 0; i < 2000000; i++) {
        uint32_t u = (uint32_t)rng_next_u64(rng);
        float f;
        memcpy(&f, &u, 4);
        uint16_t a = fp32_to_fp16(f), b = hw_f2h(f);
        if (isnan(f) ? (a & 0x7C00) != 0x7C00 || !(a & 0x3FF) : a != b) bad++;
    }
    for (uint32_t h = 0; h < 0x7C00; h++) { /* midpoints between adjacent halves */
        float lo = hw_h2f((uint16_t)h), hi = hw_h2f((uint16_t)(h + 1));
        float mid = (float)(((double)lo + (double)hi) / 2);
        if (fp32_to_fp16(mid) != hw_f2h(mid) || fp32_to_fp16(-mid) != hw_f2h(-mid)) bad++;
    }
    CHECK(bad == 0, "fp32_to_fp16 differs from F16C on %d inputs", bad);
}

static void test_bf16(uint64_t *rng) {
    int bad = 0;
    for (int i = 0; i < 1000000; i++) {
        uint32_t u = (uint32_t)rng_next_u64(rng);
        float f;
        memcpy(&f, &u, 4);
        if (isnan(f)) continue;
        /* reference: nearest representable bf16 by exact double arithmetic, ties to even */
        uint32_t lo = u & 0xFFFF0000u, hi = lo + 0x10000u;
        float flo, fhi;
        memcpy(&flo, &lo, 4);
        memcpy(&fhi, &hi, 4);
        double dl = fabs((double)f - flo), dh = isinf(fhi) ? INFINITY : fabs((double)fhi - f);
        if (isinf(fhi) && (lo & 0x7F800000u) == 0x7F000000u) dh = fabs(ldexp(1.0, 128) * (f < 0 ? -1 : 1) - f);
        uint16_t want = (uint16_t)((dl < dh || (dl == dh && !((lo >> 16) & 1))) ? lo >> 16 : hi >> 16);
        if (fp32_to_bf16(f) != want) bad++;
        if (bits(bf16_to_fp32(fp32_to_bf16(f))) != (uint32_t)fp32_to_bf16(f) << 16) bad++;
    }
    CHECK(bad == 0, "bf16 rounding wrong on %d inputs", bad);
}

static void test_q8_0(uint64_t *rng) {
    enum { N = 32 * 64 };
    static float x[N], y[N], w[N];
    static block_q8_0 q[N / 32];
    for (int i = 0; i < N; i++) x[i] = rng_normal(rng) * (i < 32 ? 0.0f : 3.0f); /* first block all zero */
    CHECK(quantize_row(GGML_TYPE_Q8_0, x, q, N) == sizeof q, "q8_0 size");
    dequant_row(GGML_TYPE_Q8_0, q, y, N);
    double max_err = 0;
    int bad_def = 0;
    for (int b = 0; b < N / 32; b++) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[b * 32 + j]));
        /* definition: d = fp16(amax/127); q = round(x*127/amax) */
        if (fp32_to_fp16(amax / 127.0f) != quant_rd16(q[b].d)) bad_def++;
        for (int j = 0; j < 32; j++) {
            long want = amax > 0 ? lroundf(x[b * 32 + j] * (127.0f / amax)) : 0;
            if (labs(want - q[b].qs[j]) > 0) bad_def++;
            double e = fabs((double)y[b * 32 + j] - x[b * 32 + j]);
            if (e > max_err) max_err = e;
        }
    }
    CHECK(bad_def == 0, "q8_0 blocks differ from the definition in %d places", bad_def);
    CHECK(max_err <= 3.0 * 4.5 / 127.0, "q8_0 round-trip error %g too large", max_err);
    /* dot_row equals the dot product of the dequantised row, for every type */
    for (int i = 0; i < N; i++) w[i] = rng_normal(rng);
    uint32_t types[] = {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q8_0};
    static uint8_t buf[N * 4];
    for (int t = 0; t < 4; t++) {
        quantize_row(types[t], w, buf, N);
        dequant_row(types[t], buf, y, N);
        double ref = 0;
        for (int i = 0; i < N; i++) ref += (double)y[i] * x[i];
        double got = dot_row(types[t], buf, x, N);
        CHECK(fabs(got - ref) <= 1e-4 * (1 + fabs(ref)), "dot_row type %u: %g vs %g", types[t], got, ref);
    }
}

/* ---- every type, every kernel set ------------------------------------------ */

static const uint32_t all_types[] = {GGML_TYPE_F32,  GGML_TYPE_F16,  GGML_TYPE_BF16, GGML_TYPE_Q8_0,
                                     GGML_TYPE_Q4_0, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K};
#define N_TYPES (int)(sizeof all_types / sizeof all_types[0])
enum { MAXN = 256 * 24 }; /* longest test row, in elements */

/* Offsets of the fp16 scale fields inside a block (-1: none). */
static void f16_fields(uint32_t type, int off[2]) {
    off[0] = off[1] = -1;
    switch (type) {
    case GGML_TYPE_Q8_0:
    case GGML_TYPE_Q4_0: off[0] = 0; break;
    case GGML_TYPE_Q4_K:
    case GGML_TYPE_Q5_K: off[0] = 0, off[1] = 2; break;
    case GGML_TYPE_Q6_K: off[0] = 208; break;
    default: break;
    }
}

/* A finite fp16 of random sign, exponent and mantissa (never inf/NaN). */
static uint16_t rand_finite_f16(uint64_t *rng) {
    uint16_t h;
    do h = (uint16_t)rng_next_u64(rng);
    while ((h & 0x7C00) == 0x7C00);
    return h;
}

/* A row of n elements of `type` from random bytes: every bit pattern of the
 * quants and packed scales occurs; fp16 scales are finite (mode 0) or, in
 * hostile mode 1, a mix of NaN, +-inf, subnormals and huge values. Dense
 * types get random finite values. */
static void random_row(uint32_t type, uint8_t *row, int64_t n, int mode, uint64_t *rng) {
    const ggml_type_traits *t = ggml_type_get(type);
    const size_t bytes = ggml_row_size(type, (uint64_t)n);
    for (size_t i = 0; i < bytes; i++) row[i] = (uint8_t)rng_next_u64(rng);
    if (t->block_size == 1) {
        for (int64_t i = 0; i < n; i++) {
            float v = rng_normal(rng);
            if (type == GGML_TYPE_F32) memcpy(row + 4 * i, &v, 4);
            else {
                uint16_t h = type == GGML_TYPE_F16 ? fp32_to_fp16(v) : fp32_to_bf16(v);
                memcpy(row + 2 * i, &h, 2);
            }
        }
        return;
    }
    static const uint16_t hostile[] = {0x7E00, 0x7C01, 0xFE00, 0x7C00, 0xFC00, 0x0001, 0x8001, 0x7BFF, 0xFBFF, 0x0000};
    int off[2];
    f16_fields(type, off);
    for (size_t b = 0; b < bytes / (size_t)t->type_size; b++)
        for (int k = 0; k < 2; k++) {
            if (off[k] < 0) continue;
            uint16_t h = mode ? hostile[rng_next_u64(rng) % (sizeof hostile / sizeof hostile[0])] : rand_finite_f16(rng);
            quant_wr16(row + b * (size_t)t->type_size + (size_t)off[k], h);
        }
}

static int same_float(float a, float b) {
    return isnan(a) ? isnan(b) : memcmp(&a, &b, sizeof a) == 0;
}

/* Four rows through one kernel set: dequantiser equal to the scalar one bit
 * for bit, dot within float rounding of the double dot of the dequantised
 * row. Returns the worst error / sum|w x|. */
static double check_row(const kernels *k, uint32_t type, const uint8_t *rows, size_t row_bytes, int64_t n,
                        const float *x, int hostile) {
    static float y[MAXN], ys[MAXN];
    double worst = 0;
    for (int r = 0; r < 4; r++) {
        const uint8_t *row = rows + (size_t)r * row_bytes;
        for (int64_t i = 0; i < n; i++) y[i] = ys[i] = -12345.0f; /* catch unwritten outputs */
        k->dequant[type](row, y, n);
        quant_dequant_ref[type](row, ys, n);
        int bad = 0;
        for (int64_t i = 0; i < n; i++) bad += !same_float(y[i], ys[i]);
        CHECK(bad == 0, "%s dequant %s n=%lld differs from scalar in %d elements", k->name, ggml_type_get(type)->name,
              (long long)n, bad);
        static float xs[MAXN / 32];
        quant_xsums(x, n, xs);
        float got = k->dot[type](row, x, n);
        float got_xs = k->dot_xs[type] ? k->dot_xs[type](row, x, xs, n) : got;
        if (hostile) continue; /* only "does not crash" for NaN / inf scales */
        double ref = 0, mag = 0;
        for (int64_t i = 0; i < n; i++) {
            ref += (double)ys[i] * x[i];
            mag += fabs((double)ys[i] * x[i]);
        }
        double err = fabs((double)got - ref) / (mag > 0 ? mag : 1);
        double err_xs = fabs((double)got_xs - ref) / (mag > 0 ? mag : 1);
        if (err > worst) worst = err;
        if (err_xs > worst) worst = err_xs;
    }
    return worst;
}

static void test_kernels(uint64_t *rng) {
    const kernels *sets[2] = {kernels_scalar(), kernels_avx2()};
    /* SUBQ_ISA=scalar withholds the AVX2 set from a CPU that has it */
    const char *isa = getenv("SUBQ_ISA");
    int capped = isa && !strcmp(isa, "scalar");
    int cpu_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
    CHECK((sets[1] != NULL) == (cpu_avx2 && !capped), "AVX2 kernels %s on a CPU that %s AVX2+FMA+F16C%s",
          sets[1] ? "offered" : "missing", cpu_avx2 ? "has" : "lacks", capped ? " under SUBQ_ISA=scalar" : "");
    CHECK(kernels_get() == (sets[1] ? sets[1] : sets[0]), "kernels_get does not pick the best set");
    if (!sets[1]) printf("note: no AVX2 set here (CPU or SUBQ_ISA); only the scalar kernels are tested\n");
    static uint8_t rows[4 * MAXN * 4];
    static float x[MAXN];
    for (int i = 0; i < MAXN; i++) x[i] = rng_normal(rng);
    for (int t = 0; t < N_TYPES; t++) {
        const uint32_t type = all_types[t];
        const ggml_type_traits *tr = ggml_type_get(type);
        CHECK(tr->can_dequant, "%s should be dequantisable", tr->name);
        for (int s = 0; s < 2; s++)
            CHECK(!sets[s] || (sets[s]->dequant[type] && sets[s]->dot[type]), "%s lacks %s kernels",
                  sets[s] ? sets[s]->name : "?", tr->name);
        /* block counts: one, a few (odd, to hit unrolled-loop tails), many */
        const int64_t nblocks[] = {1, 2, 3, 5, 7, 24};
        double worst[2] = {0, 0};
        for (int ni = 0; ni < 6; ni++) {
            int64_t n = nblocks[ni] * tr->block_size;
            if (tr->block_size == 1) n = (int64_t[]){1, 7, 9, 33, 1000, 3077}[ni]; /* dense: SIMD tails */
            const size_t rb = ggml_row_size(type, (uint64_t)n);
            for (int mode = 0; mode < 2; mode++) {
                if (mode && tr->block_size == 1) continue;
                for (int r = 0; r < 4; r++) random_row(type, rows + r * rb, n, mode, rng);
                for (int s = 0; s < 2; s++) {
                    if (!sets[s]) continue;
                    double e = check_row(sets[s], type, rows, rb, n, x, mode);
                    if (e > worst[s]) worst[s] = e;
                }
            }
            /* rows that quantize_row produced from normal data */
            static float w[MAXN];
            for (int r = 0; r < 4; r++) {
                for (int64_t i = 0; i < n; i++) w[i] = rng_normal(rng);
                CHECK(quantize_row(type, w, rows + r * rb, n) == rb, "%s quantize_row size", tr->name);
            }
            for (int s = 0; s < 2; s++) {
                if (!sets[s]) continue;
                double e = check_row(sets[s], type, rows, rb, n, x, 0);
                if (e > worst[s]) worst[s] = e;
            }
        }
        /* float32 accumulation over <= 6144 terms in several partial sums */
        for (int s = 0; s < 2; s++)
            if (sets[s])
                CHECK(worst[s] <= 2e-6, "%s dot %s: error %.3g of sum|w x| vs the double dot of the dequantised row",
                      sets[s]->name, tr->name, worst[s]);
        printf("  %-5s dot error / sum|wx|: scalar %.2g, simd %.2g\n", tr->name, worst[0], worst[1]);
    }
}

/* dot_rows (which uses dot_xs where there is one) and dot_row, each against
 * the double dot of the dequantised row */
static void test_dot_rows(uint64_t *rng) {
    enum { R = 11, N = 512 };
    static float w[N], x[N], out[R];
    static uint8_t m[R * N * 4];
    for (int i = 0; i < N; i++) x[i] = rng_normal(rng);
    for (int t = 0; t < N_TYPES; t++) {
        const size_t rb = ggml_row_size(all_types[t], N);
        for (int r = 0; r < R; r++) {
            for (int i = 0; i < N; i++) w[i] = rng_normal(rng);
            quantize_row(all_types[t], w, m + r * rb, N);
        }
        dot_rows(all_types[t], m, rb, R, x, N, out);
        int bad = 0;
        for (int r = 0; r < R; r++) {
            dequant_row(all_types[t], m + r * rb, w, N);
            double ref = 0, mag = 0;
            for (int i = 0; i < N; i++) {
                ref += (double)w[i] * x[i];
                mag += fabs((double)w[i] * x[i]);
            }
            float one = dot_row(all_types[t], m + r * rb, x, N);
            if (fabs(out[r] - ref) > 2e-6 * mag || fabs(one - ref) > 2e-6 * mag) bad++;
        }
        CHECK(bad == 0, "dot_rows %s differs from dot_row on %d of %d rows", ggml_type_get(all_types[t])->name, bad, R);
    }
}

/* quantize_row of the block types: sizes, refusals, and round-trip error
 * against the quantisation step (relative rms error on normal data, and exact
 * zeros for all-zero blocks). */
static void test_quantizers(uint64_t *rng) {
    enum { N = 256 * 16 };
    static float x[N], y[N];
    static uint8_t buf[N * 4];
    const struct {
        uint32_t type;
        double max_rel_rms;
    } cases[] = {{GGML_TYPE_Q8_0, 0.01}, {GGML_TYPE_Q4_0, 0.13}, {GGML_TYPE_Q4_K, 0.12},
                 {GGML_TYPE_Q5_K, 0.06}, {GGML_TYPE_Q6_K, 0.03}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const uint32_t type = cases[c].type;
        const ggml_type_traits *tr = ggml_type_get(type);
        CHECK(quantize_row(type, x, buf, tr->block_size + 1) == 0, "%s: length not a multiple of the block accepted",
              tr->name);
        /* normal data; block 0 all zero, block 1 all negative, block 2 constant, block 3 with one outlier */
        for (int i = 0; i < N; i++) x[i] = rng_normal(rng);
        for (int i = 0; i < 256; i++) x[i] = 0.0f;
        for (int i = 256; i < 512; i++) x[i] = -fabsf(x[i]) - 0.5f;
        for (int i = 512; i < 768; i++) x[i] = 0.75f;
        x[800] = 40.0f;
        CHECK(quantize_row(type, x, buf, N) == ggml_row_size(type, N), "%s quantize_row size", tr->name);
        dequant_row(type, buf, y, N);
        double se = 0, sx = 0;
        int zero_bad = 0;
        for (int i = 0; i < N; i++) {
            if (i >= 768 && i < 1024) continue; /* the outlier block is allowed to be coarse */
            se += (double)(y[i] - x[i]) * (y[i] - x[i]);
            sx += (double)x[i] * x[i];
        }
        for (int i = 0; i < 256; i++) zero_bad += y[i] != 0.0f;
        double rel = sqrt(se / sx);
        CHECK(rel <= cases[c].max_rel_rms, "%s round-trip rms error %.4f > %.4f", tr->name, rel, cases[c].max_rel_rms);
        CHECK(zero_bad == 0, "%s: an all-zero block dequantises to %d non-zeros", tr->name, zero_bad);
        CHECK(fabsf(y[800] - 40.0f) <= 40.0f * 0.1f, "%s: outlier 40 came back as %g", tr->name, y[800]);
        printf("  %-5s quantize rms error %.4f\n", tr->name, rel);
        /* hostile input must not crash or leave NaN-derived garbage undefined */
        for (int i = 0; i < 64; i++) x[i] = i % 3 == 0 ? NAN : i % 3 == 1 ? INFINITY : -1e30f;
        CHECK(quantize_row(type, x, buf, N) == ggml_row_size(type, N), "%s quantize_row with NaN/inf", tr->name);
    }
    CHECK(quantize_row(GGML_TYPE_Q2_K, x, buf, 256) == 0, "q2_K cannot be produced and must return 0");
    CHECK(quantize_row(GGML_TYPE_COUNT + 5, x, buf, 256) == 0, "unknown type must return 0");
}

int main(void) {
    uint64_t rng = rng_seed(1234);
    test_fp16(&rng);
    test_bf16(&rng);
    test_q8_0(&rng);
    test_kernels(&rng);
    test_dot_rows(&rng);
    test_quantizers(&rng);
    return test_summary();
}
