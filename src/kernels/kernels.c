/* Choosing the kernel set, and the row-level entry points built on it. */
#include "kernels/kernels.h"

#include <string.h>

#include "base/cpu.h"
#include "kernels/dot.h"

const kernels *kernels_scalar(void) { return &kernels_scalar_set; }

const kernels *kernels_avx2(void) {
#ifdef KERNELS_HAVE_AVX2
    if (cpu_has_avx2()) return &kernels_avx2_set;
#endif
    return NULL;
}

/* Named by what runs: the AVX-512 GEMM table exists only where it was built
 * and the CPU (under SUBQ_ISA) has it. */
const char *subq_isa_name(void) {
    if (kernels_gemm_q8_avx512()) return "avx512-vnni";
    return kernels_avx2() ? "avx2" : "scalar";
}

/* An AVX-512 set would be tried first here. */
const kernels *kernels_get(void) {
    const kernels *k = kernels_avx2();
    return k ? k : &kernels_scalar_set;
}

gemm_q8_fn kernels_gemm_q8(uint32_t type) {
    if (type >= GGML_TYPE_COUNT) return NULL;
    const gemm_q8_fn *wide = kernels_gemm_q8_avx512();
    return wide && wide[type] ? wide[type] : kernels_get()->gemm_q8[type];
}

void kernels_kv_from_f32(subq_kv_type t, const float *x, void *row, int hd) {
    kernels_get()->kv[t].from_f32(x, row, hd);
}

kernels_kv_decode kernels_kv_decode_get(subq_kv_type t) {
    const kernels_kv_decode *wide = kernels_kv_decode_avx512();
    if (wide) return wide[t];
    const kernels_kv *k = &kernels_get()->kv[t];
    return (kernels_kv_decode){k->scores, k->accum};
}

gemv_q8_fn kernels_gemv_q8(uint32_t type) {
    if (type >= GGML_TYPE_COUNT) return NULL;
    const gemv_q8_fn *wide = kernels_gemv_q8_avx512();
    return wide && wide[type] ? wide[type] : kernels_get()->gemv_q8[type];
}

size_t kernels_kv_row_bytes(subq_kv_type t, int hd) {
    if (hd <= 0) return 0;
    switch (t) {
    case SUBQ_KV_F32: return (size_t)hd * sizeof(float);
    case SUBQ_KV_F16: return (size_t)hd * sizeof(uint16_t);
    case SUBQ_KV_Q8_0:
    case SUBQ_KV_Q4_0: {
        const int B = KV_QBLOCK(hd);
        if (hd % B != 0 || B % 2 != 0 || 32 % B != 0) return 0; /* blocks of 2, 4, 8, 16 or 32 */
        return (size_t)(hd / B) * (2 + (size_t)(t == SUBQ_KV_Q8_0 ? B : B / 2));
    }
    default: return 0;
    }
}

void dequant_row(uint32_t type, const void *src, float *dst, int64_t n) {
    quant_dequant_fn f = type < GGML_TYPE_COUNT ? kernels_get()->dequant[type] : NULL;
    if (f) f(src, dst, n);
    else memset(dst, 0, (size_t)n * sizeof(float)); /* unreachable: refused at load */
}

float dot_row(uint32_t type, const void *row, const float *x, int64_t n) {
    quant_dot_fn f = type < GGML_TYPE_COUNT ? kernels_get()->dot[type] : NULL;
    return f ? f(row, x, n) : 0.0f;
}

void quant_xsums(const float *x, int64_t n, float *xs) {
    for (int64_t j = 0; j < n / 32; j++) {
        float s = 0.0f;
        for (int l = 0; l < 32; l++) s += x[32 * j + l];
        xs[j] = s;
    }
}

/* Row by row. (4-row kernels sharing the x loads measured slower on weights
 * streamed from DRAM: four short streams per row group defeat the hardware
 * prefetcher that one long sequential stream keeps busy.) */
void dot_rows(uint32_t type, const void *rows, size_t row_bytes, int64_t n_rows, const float *x, int64_t n,
              float *out) {
    enum { XS_MAX = 1024 }; /* sub-block sums on the stack: n <= 32768 */
    const kernels *k = kernels_get();
    const char *r = rows;
    if (type >= GGML_TYPE_COUNT || !k->dot[type]) {
        memset(out, 0, (size_t)n_rows * sizeof(float)); /* unreachable: refused at load */
        return;
    }
    quant_dot_xs_fn fx = k->dot_xs[type];
    if (fx && n / 32 <= XS_MAX && n_rows > 1) {
        float xs[XS_MAX];
        quant_xsums(x, n, xs);
        for (int64_t i = 0; i < n_rows; i++) out[i] = fx(r + (size_t)i * row_bytes, x, xs, n);
        return;
    }
    quant_dot_fn f = k->dot[type];
    for (int64_t i = 0; i < n_rows; i++) out[i] = f(r + (size_t)i * row_bytes, x, n);
}
