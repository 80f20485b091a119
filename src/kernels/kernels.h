/* SIMD kernels: every inner loop the library runs per weight row, per key or
 * per candidate, one constant set per instruction set (AVX2+FMA+F16C, and
 * portable C), chosen once per process (cpu_has_avx2 caches the cpuid test,
 * which traps to the hypervisor in a VM):
 *   - stored weight rows (the quant formats): dequantisation and fused
 *     row . x dot products;
 *   - f32 / f16 vectors: dot, axpy;
 *   - KV cache rows in each KV type (f32, f16, q8_0, q4_0): dot, axpy,
 *     conversion, gathered dots, and decode attention over contiguous rows
 *     (scores, value accumulation), with the vector exp of the softmax;
 *   - gathered row dots: the selectors' re-ranks and scans of listed slots,
 *     over f32 / f16 rows.
 * Callers that run many rows fetch the set once (kernels_get) and call
 * through it. Hot paths with AVX-512 forms outside the sets, chosen per
 * call where the CPU has them: the integer GEMM / GEMV on quantised
 * weights (kernels_gemm_q8, kernels_gemv_q8) and decode attention over KV
 * rows (kernels_kv_decode_get). Every set gives the same dequantised bits;
 * dot products agree up to float rounding. */
#ifndef SUBQ_KERNELS_H
#define SUBQ_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "quant/quant.h"
#include "subq.h"

typedef float (*quant_dot_fn)(const void *row, const float *x, int64_t n);
/* dot with xs[j] = sum of x[32j .. 32j + 32) precomputed (quant_xsums),
 * for formats whose sub-block offsets make sum(x) a per-row cost otherwise */
typedef float (*quant_dot_xs_fn)(const void *row, const float *x, const float *xs, int64_t n);
/* out[i] = q . row(idx[i]) for rows of d elements `stride` elements apart
 * from base (f32 or f16 storage) */
typedef void (*kernels_gather_dot_fn)(const float *q, const void *base, size_t stride, int d, const int32_t *idx,
                                      int n, float *out);
/* Listed rows lie anywhere in memory (a selector's re-rank): gathers ask
 * for each row this many rows ahead of its use (64 measured no faster in
 * decode; attention's own gathers ask further ahead, attn_full.c). */
#define KERNELS_GATHER_AHEAD 16
/* Prefill on quantised weights runs on integer dot products, as llama.cpp's
 * does: each activation row of n values (n a multiple of 32) is quantised to
 * q8 blocks of 32, d_b = max|x| / 127 over block b and q = x / d_b rounded
 * to nearest (ties to even; computed as x * (1 / d_b)), so |q| <= 127:
 *   quantize_q8: q[0..n), d[0..n/32) of one row;
 *   gemm_q8:     y[t * ldy + r] = sum_b dw(r, b) d(t, b) sum_{j<32} qw(r, 32b + j) q(t, 32b + j)
 *                for r < n_rows, t < T, with the stored rows of w row_bytes
 *                apart (the type's blocks: w = dw * qw) and activation row t
 *                at xq + t * n, xd + t * (n / 32). Each product of blocks is
 *                an exact integer sum; only the scaling rounds. (K-quant
 *                weights, AVX-512 VNNI only: the same with their 32-value
 *                sub-blocks' scales and mins, n a multiple of 256.) */
typedef void (*quantize_q8_fn)(const float *x, int64_t n, int8_t *q, float *d);
typedef void (*gemm_q8_fn)(const void *w, size_t row_bytes, int64_t n_rows, const int8_t *xq, const float *xd, int T,
                           int64_t n, float *y, int64_t ldy);
/* Decode takes the same maths for one activation row (GEMV), as a kernel
 * that streams each weight row once:
 *   gemv_q8: y[r] = sum_b dw(r, b) d(b) sum_{j<32} qw(r, 32b + j) q(32b + j)   for r < n_rows
 * (Q4_K and Q6_K, AVX2 and AVX-512 VNNI: the same with their sub-blocks'
 * scales and Q4_K's mins, n a multiple of 256). */
typedef void (*gemv_q8_fn)(const void *w, size_t row_bytes, int64_t n_rows, const int8_t *xq, const float *xd,
                           int64_t n, float *y);

/* Rows of a KV cache: hd values of one (layer, KV head, slot), in one of the
 * KV types (subq_kv_type). f32 and f16 are plain arrays. q8_0 and q4_0 are
 * ggml's blocks (fp16 scale d, then 32 signed bytes / 16 bytes of nibbles,
 * value = d q or d (q - 8)) when hd is a multiple of 32; narrower heads
 * (hd = 2, 4, 8 or 16) take one block of hd values per row, laid out the
 * same way (q4_0: byte j holds value j in its low nibble and value j + hd/2
 * in its high one). KV_QBLOCK(hd) values per block. */
#define KV_QBLOCK(hd) ((hd) < 32 ? (hd) : 32)

/* Bytes of one row of hd values in KV type t; 0 when t cannot hold rows of
 * that width (quantised types: hd neither a multiple of 32 nor 2, 4, 8, 16). */
size_t kernels_kv_row_bytes(subq_kv_type t, int hd);

/* The row of hd values x in KV type t (f16: round to nearest even; q8_0 /
 * q4_0: as ggml's quantize_row_q8_0_ref / quantize_row_q4_0_ref, block by
 * block), through the fastest set's kv[t].from_f32. */
void kernels_kv_from_f32(subq_kv_type t, const float *x, void *row, int hd);

typedef void (*kernels_kv_scores_fn)(const float *q, int g, const void *keys, int n, int hd, float scale, float *s,
                                     int ld);
typedef void (*kernels_kv_accum_fn)(const float *p, int g, int ld, const void *vals, int n, int hd, float *out);

/* Operations on KV rows of one type (row bytes as kernels_kv_row_bytes). */
typedef struct kernels_kv {
    /* q . row */
    float (*dot)(const float *q, const void *row, int hd);
    /* y += w * row */
    void (*axpy)(float *y, float w, const void *row, int hd);
    /* n contiguous rows -> dst[n][hd] */
    void (*to_f32)(const void *rows, int n, int hd, float *dst);
    /* Decode over n contiguous rows (one KV head), for g query heads at once
     * so each row is loaded and converted once:
     *   scores: s[i*ld + j] = scale * q_i . k_j            (i < g, j < n)
     *   accum:  out_i[:] += sum_j p[i*ld + j] v_j          (out is [g][hd])
     * For q8_0 / q4_0 keys the scores run on integer block products, as
     * llama.cpp's flash-attention path does: q_i is quantised per key block
     * of B = KV_QBLOCK(hd) values like quantize_q8 (d_q = max|q_b| / 127,
     * codes rounded to nearest even, d_q kept in f32), and
     *   s_ij = scale sum_b d_k(j, b) d_q(i, b) sum_{c in b} code_k(j, c) code_q(i, c)
     * with each inner sum exact. Every set quantises identically; the query
     * rounding moves a score by at most scale sum_b d_q(i, b) / 2 sum_{c in b} |k_jc|. */
    kernels_kv_scores_fn scores;
    kernels_kv_accum_fn accum;
    /* out[i] = q . row(idx[i]) for rows of d values `stride` values apart
     * from base (stride a multiple of d: row r starts r * stride / d rows
     * of this type in) */
    kernels_gather_dot_fn gather_dot;
    /* the row of hd values x, as kernels_kv_from_f32 makes it: every set
     * writes the same bytes (a KV file written on one CPU is read on another) */
    void (*from_f32)(const float *x, void *row, int hd);
} kernels_kv;

typedef struct kernels {
    const char *name; /* "scalar", "avx2" */
    /* stored rows, per type id (NULL where the type is not supported) */
    const quant_dequant_fn *dequant;         /* [GGML_TYPE_COUNT] */
    quant_dot_fn dot[GGML_TYPE_COUNT];       /* row . x */
    quant_dot_xs_fn dot_xs[GGML_TYPE_COUNT]; /* NULL: dot is as fast */
    /* integer GEMM on q8 activations, per weight type (NULL: the type
     * prefills through sgemm on dequantised rows) */
    quantize_q8_fn quantize_q8;
    gemm_q8_fn gemm_q8[GGML_TYPE_COUNT];
    gemv_q8_fn gemv_q8[GGML_TYPE_COUNT]; /* the same types, and Q4_K, Q6_K in the AVX2 set */
    /* sum_i a[i] * b[i] */
    float (*dot_f32)(const float *a, const float *b, int64_t n);
    float (*dot_f16)(const float *a, const uint16_t *b, int64_t n);
    float (*dot_f16f16)(const uint16_t *a, const uint16_t *b, int64_t n);
    /* dst[i] = x[i] in f16, rounded to nearest even (fp32_to_fp16) */
    void (*f32_to_f16)(const float *x, uint16_t *dst, int n);
    /* y[i] += w * x[i] */
    void (*axpy_f32)(float *y, float w, const float *x, int n);
    void (*axpy_f16)(float *y, float w, const uint16_t *x, int n);
    /* idx[0..c) = the i < n with x[i] >= t, in order; returns c (a scan's
     * candidates: most scores lose, so whole vectors are passed over) */
    int (*index_at_least)(const float *x, int n, float t, int32_t *idx);
    /* x[j] = exp(x[j] - mx) (exp(-inf) = 0), returns the sum */
    float (*exp_shift_sum)(float *x, int n, float mx);
    /* sum over i with p[i] > 0 of p[i] (log p[i] - y[i] + shift), summed in
     * double: KL(p || softmax(y)) with shift = LSE(y) (p below FLT_MIN,
     * whose terms are below 1e-36, may count as 0) */
    double (*kl_sum)(const float *p, const float *y, float shift, int n);
    /* x[i] = exp(x[i]), x[i] = log(x[i]) in double, in place (AVX2: glibc's
     * vector math, within 4 ulp) */
    void (*exp_f64)(double *x, int n);
    void (*log_f64)(double *x, int n);
    /* g[i] = silu(g[i]) u[i] = g[i] / (1 + exp(-g[i])) u[i]: SwiGLU */
    void (*silu_mul)(float *g, const float *u, size_t n);
    /* g = gelu(g) * u, GELU's tanh form: gelu(x) = x / (1 + exp(-2 sqrt(2/pi) (x + 0.044715 x^3))) */
    void (*gelu_mul)(float *g, const float *u, size_t n);
    /* x[i] = c tanh(x[i] / c) (Gemma 2's soft cap of scores and logits),
     * -inf kept (a masked key); AVX2 as 1 - 2 / (1 + exp(2 x / c)), within
     * 1e-6 c of tanhf's */
    void (*softcap)(float *x, size_t n, float c);
    /* max(init, x[0..n)), NaN elements passed over: a softmax row's shift */
    float (*max_f32)(const float *x, int n, float init);
    kernels_gather_dot_fn gather_dot_f32, gather_dot_f16;
    /* KV cache rows, per subq_kv_type */
    kernels_kv kv[SUBQ_KV_TYPE_COUNT];
} kernels;

/* The fastest set this CPU supports (a load and a compare: call it freely). */
const kernels *kernels_get(void);
/* The portable C set, always available. */
const kernels *kernels_scalar(void);
/* The AVX2+FMA+F16C set, or NULL when the CPU (or the build) lacks it. */
const kernels *kernels_avx2(void);

/* The sets themselves (the AVX2 one only where KERNELS_HAVE_AVX2). */
extern const kernels kernels_scalar_set, kernels_avx2_set;

/* The fastest integer GEMM (gemm_q8) for weight type `type` on this CPU:
 * AVX-512 VNNI tiles where the CPU has them, else the set's; NULL when the
 * type has none (it prefills through sgemm). */
gemm_q8_fn kernels_gemm_q8(uint32_t type);
/* The AVX-512 VNNI integer GEMMs per weight type, or NULL when the CPU (or
 * the build) lacks them. */
const gemm_q8_fn *kernels_gemm_q8_avx512(void);
/* The same for the decode GEMV (gemv_q8). */
gemv_q8_fn kernels_gemv_q8(uint32_t type);
const gemv_q8_fn *kernels_gemv_q8_avx512(void);

/* The decode kernels of one KV type (kernels_kv's scores and accum). */
typedef struct kernels_kv_decode {
    kernels_kv_scores_fn scores;
    kernels_kv_accum_fn accum;
} kernels_kv_decode;
/* The fastest decode kernels for KV type t on this CPU: the AVX-512 forms
 * where the CPU has AVX-512 F/BW/VL/DQ + VNNI, else the set's. */
kernels_kv_decode kernels_kv_decode_get(subq_kv_type t);
/* The AVX-512 decode kernels per KV type, or NULL when the CPU (or the
 * build) lacks them. They give the set's results up to float rounding
 * (quantised keys: the same quantised query). */
const kernels_kv_decode *kernels_kv_decode_avx512(void);

/* dst[0..n) = dequantised src row. n must be a multiple of the block size
 * and the type must have can_dequant (callers check at load time). */
void dequant_row(uint32_t type, const void *src, float *dst, int64_t n);

/* sum_i w[i] * x[i] over one stored row of n elements. */
float dot_row(uint32_t type, const void *row, const float *x, int64_t n);

/* xs[j] = sum of x[32j .. 32j + 32) for j < n / 32 (the input of dot_xs). */
void quant_xsums(const float *x, int64_t n, float *xs);

/* out[r] = row r . x for n_rows rows of n elements, row r at
 * rows + r * row_bytes (GEMV over a slice of a matrix). Faster than dot_row
 * per row for Q4_K/Q5_K (x's sub-block sums are computed once). */
void dot_rows(uint32_t type, const void *rows, size_t row_bytes, int64_t n_rows, const float *x, int64_t n,
              float *out);

#endif
