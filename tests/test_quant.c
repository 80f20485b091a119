/* Element formats against independent references: the CPU's F16C
 * conversion instructions for half precision, exact arithmetic for bf16,
 * and the Q8_0 definition (d = amax/127, q = round(x/d)). */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "base/rng.h"
#include "quant/quant.h"
#include "test_util.h"

__attribute__((target("f16c"))) static float hw_h2f(uint16_t h) { return _cvtsh_ss(h); }
__attribute__((target("f16c"))) static uint16_t hw_f2h(float f) { return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT); }

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static void test_fp16(uint64_t *rng) {
    if (!__builtin_cpu_supports("f16c")) {
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
        if (fp32_to_fp16(amax / 127.0f) != q[b].d) bad_def++;
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

int main(void) {
    uint64_t rng = rng_seed(1234);
    test_fp16(&rng);
    test_bf16(&rng);
    test_q8_0(&rng);
    return test_summary();
}
