/* The portable C kernel set: fused dot products of the stored formats (each
 * the dot of x with the reference dequantisation, quant/dequant.c, in one
 * pass), the f32 / f16 vector kernels, decode attention and the gathered row
 * dots, in straight loops. */
#include <math.h>
#include <string.h>

#include "kernels/dot.h"
#include "kernels/kernels.h"

/* ggml's order of float operations, as in the reference dequantisers: GCC
 * keeps contraction off in ISO C mode (the project's -std=c11); clang needs
 * telling. */
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

/* ---- f32 / f16 / bf16 ---------------------------------------------------- */

static float dot_f16(const float *x, const uint16_t *w, int64_t n) {
    float s0 = 0, s1 = 0;
    int64_t i = 0;
    for (; i + 2 <= n; i += 2) {
        s0 += fp16_to_fp32(w[i]) * x[i];
        s1 += fp16_to_fp32(w[i + 1]) * x[i + 1];
    }
    for (; i < n; i++) s0 += fp16_to_fp32(w[i]) * x[i];
    return s0 + s1;
}

static float dot_f16f16(const uint16_t *a, const uint16_t *b, int64_t n) {
    float s0 = 0, s1 = 0;
    int64_t i = 0;
    for (; i + 2 <= n; i += 2) {
        s0 += fp16_to_fp32(a[i]) * fp16_to_fp32(b[i]);
        s1 += fp16_to_fp32(a[i + 1]) * fp16_to_fp32(b[i + 1]);
    }
    for (; i < n; i++) s0 += fp16_to_fp32(a[i]) * fp16_to_fp32(b[i]);
    return s0 + s1;
}

static float dot_bf16(const float *x, const uint16_t *w, int64_t n) {
    float s0 = 0, s1 = 0;
    int64_t i = 0;
    for (; i + 2 <= n; i += 2) {
        s0 += bf16_to_fp32(w[i]) * x[i];
        s1 += bf16_to_fp32(w[i + 1]) * x[i + 1];
    }
    for (; i < n; i++) s0 += bf16_to_fp32(w[i]) * x[i];
    return s0 + s1;
}

/* the same as row . x for the table */
static float row_dot_f32(const void *row, const float *x, int64_t n) { return kernels_dot_f32_scalar(x, row, n); }
static float row_dot_f16(const void *row, const float *x, int64_t n) { return dot_f16(x, row, n); }
static float row_dot_bf16(const void *row, const float *x, int64_t n) { return dot_bf16(x, row, n); }

/* ---- Q8_0 ---------------------------------------------------------------- */

/* per block: d * sum_j q_j x_j */
static float dot_q8_0(const void *row, const float *x, int64_t n) {
    const block_q8_0 *b = row;
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / QK8_0; ib++) {
        const float *xb = x + ib * QK8_0;
        float s = 0.0f;
        for (int j = 0; j < QK8_0; j++) s += (float)b[ib].qs[j] * xb[j];
        sum += fp16_to_fp32(quant_rd16(b[ib].d)) * s;
    }
    return sum;
}

/* ---- Q4_0 ---------------------------------------------------------------- */

/* per block: d * sum_j (q_j - 8) x_j */
static float dot_q4_0(const void *row, const float *x, int64_t n) {
    const block_q4_0 *b = row;
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / QK4_0; ib++) {
        const float *xb = x + ib * QK4_0;
        float s = 0.0f;
        for (int j = 0; j < QK4_0 / 2; j++)
            s += (float)((b[ib].qs[j] & 0xF) - 8) * xb[j] + (float)((b[ib].qs[j] >> 4) - 8) * xb[j + 16];
        sum += fp16_to_fp32(quant_rd16(b[ib].d)) * s;
    }
    return sum;
}

/* ---- Q4_K / Q5_K ------------------------------------------------------------ */

/* One Q4_K / Q5_K super-block added to sum (q as in quant/dequant.c; qh
 * NULL for Q4_K), per sub-block: (d sc) * sum q x - (dmin m) * sum x */
static float dot_k4(float sum, const uint8_t dh[2], const uint8_t dminh[2], const uint8_t *scales, const uint8_t *ql,
                    const uint8_t *qh, const float *xb) {
    const float d = fp16_to_fp32(quant_rd16(dh)), dmin = fp16_to_fp32(quant_rd16(dminh));
    for (int c = 0; c < 4; c++) {
        uint8_t sc1, m1, sc2, m2;
        k4_scale_min(2 * c, scales, &sc1, &m1);
        k4_scale_min(2 * c + 1, scales, &sc2, &m2);
        float qx1 = 0, sx1 = 0, qx2 = 0, sx2 = 0;
        for (int l = 0; l < 32; l++) {
            const float x1 = xb[64 * c + l], x2 = xb[64 * c + 32 + l];
            const int h1 = qh ? (qh[l] >> (2 * c)) & 1 : 0, h2 = qh ? (qh[l] >> (2 * c + 1)) & 1 : 0;
            qx1 += (float)((ql[32 * c + l] & 0xF) | (h1 << 4)) * x1;
            qx2 += (float)((ql[32 * c + l] >> 4) | (h2 << 4)) * x2;
            sx1 += x1;
            sx2 += x2;
        }
        sum += (d * sc1) * qx1 - (dmin * m1) * sx1 + (d * sc2) * qx2 - (dmin * m2) * sx2;
    }
    return sum;
}

static float dot_q4_K(const void *row, const float *x, int64_t n) {
    const block_q4_K *b = row;
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / QK_K; ib++)
        sum = dot_k4(sum, b[ib].d, b[ib].dmin, b[ib].scales, b[ib].qs, NULL, x + ib * QK_K);
    return sum;
}

static float dot_q5_K(const void *row, const float *x, int64_t n) {
    const block_q5_K *b = row;
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / QK_K; ib++)
        sum = dot_k4(sum, b[ib].d, b[ib].dmin, b[ib].scales, b[ib].qs, b[ib].qh, x + ib * QK_K);
    return sum;
}

/* ---- Q6_K ---------------------------------------------------------------- */

/* per sub-block s of 16: (d sc_s) * sum (q - 32) x */
static float dot_q6_K(const void *row, const float *x, int64_t n) {
    const block_q6_K *b = row;
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / QK_K; ib++) {
        const float d = fp16_to_fp32(quant_rd16(b[ib].d));
        const float *xb = x + ib * QK_K;
        for (int h = 0; h < 2; h++)
            for (int k = 0; k < 4; k++)
                for (int half = 0; half < 2; half++) {
                    float s = 0.0f;
                    for (int l = 16 * half; l < 16 * half + 16; l++)
                        s += (float)q6_K_get(&b[ib], h, k, l) * xb[128 * h + 32 * k + l];
                    sum += (d * b[ib].scales[8 * h + 2 * k + half]) * s;
                }
    }
    return sum;
}

/* ---- integer GEMM on q8 activations (prefill) ---------------------------- */

/* blocks of B values (the KV scores quantise queries in blocks of narrow heads too) */
static void quantize_q8_blocks(const float *x, int64_t n, int B, int8_t *q, float *d) {
    for (int64_t b = 0; b < n / B; b++) {
        const float *xb = x + B * b;
        float amax = 0.0f;
        for (int j = 0; j < B; j++) amax = fmaxf(amax, fabsf(xb[j]));
        const float db = amax / 127.0f, id = db != 0.0f ? 1.0f / db : 0.0f;
        d[b] = db;
        for (int j = 0; j < B; j++) q[B * b + j] = (int8_t)nearbyintf(xb[j] * id);
    }
}

static void quantize_q8(const float *x, int64_t n, int8_t *q, float *d) { quantize_q8_blocks(x, n, 32, q, d); }

/* value j of a block as a signed integer (w = d * value) */
static int q8_0_val(const block_q8_0 *b, int j) { return b->qs[j]; }
static int q4_0_val(const block_q4_0 *b, int j) { return (j < 16 ? b->qs[j] & 0xF : b->qs[j - 16] >> 4) - 8; }

/* per (token, row): sum over blocks of dw dx (exact integer block sum); the
 * GEMV is the one-token case */
#define GEMM_Q8_SCALAR(T)                                                                                      \
    static void gemm_q8_##T(const void *w, size_t row_bytes, int64_t n_rows, const int8_t *xq, const float *xd, \
                            int n_tok, int64_t n, float *y, int64_t ldy) {                                       \
        const int64_t nb = n / 32;                                                                             \
        for (int t = 0; t < n_tok; t++)                                                                        \
            for (int64_t r = 0; r < n_rows; r++) {                                                             \
                const block_##T *blk = (const block_##T *)((const char *)w + (size_t)r * row_bytes);           \
                float sum = 0.0f;                                                                              \
                for (int64_t b = 0; b < nb; b++) {                                                             \
                    const int8_t *qx = xq + (size_t)t * n + 32 * b;                                            \
                    int32_t isum = 0;                                                                          \
                    for (int j = 0; j < 32; j++) isum += T##_val(blk + b, j) * qx[j];                          \
                    sum += fp16_to_fp32(quant_rd16(blk[b].d)) * xd[(size_t)t * nb + b] * (float)isum;          \
                }                                                                                              \
                y[(size_t)t * ldy + r] = sum;                                                                  \
            }                                                                                                  \
    }                                                                                                          \
    static void gemv_q8_##T(const void *w, size_t row_bytes, int64_t n_rows, const int8_t *xq, const float *xd, \
                            int64_t n, float *y) {                                                             \
        gemm_q8_##T(w, row_bytes, n_rows, xq, xd, 1, n, y, n_rows);                                            \
    }

GEMM_Q8_SCALAR(q8_0)
GEMM_Q8_SCALAR(q4_0)

/* ---- vectors, gathered rows ------------------------------------------------ */

static void f32_to_f16(const float *x, uint16_t *dst, int n) {
    for (int i = 0; i < n; i++) dst[i] = fp32_to_fp16(x[i]);
}

/* branch-free: every index is written, the count moves on the passes */
static int index_at_least(const float *x, int n, float t, int32_t *idx) {
    int c = 0;
    for (int i = 0; i < n; i++) {
        idx[c] = i;
        c += x[i] >= t;
    }
    return c;
}

static void axpy_f32(float *y, float w, const float *x, int n) {
    for (int i = 0; i < n; i++) y[i] += w * x[i];
}

static void axpy_f16(float *y, float w, const uint16_t *x, int n) {
    for (int i = 0; i < n; i++) y[i] += w * fp16_to_fp32(x[i]);
}

static float max_f32(const float *x, int n, float mx) {
    for (int j = 0; j < n; j++) mx = x[j] > mx ? x[j] : mx;
    return mx;
}

static float exp_shift_sum(float *x, int n, float mx) {
    float s = 0.0f;
    for (int j = 0; j < n; j++) s += x[j] = expf(x[j] - mx);
    return s;
}

static double kl_sum(const float *p, const float *y, float shift, int n) {
    double s = 0.0;
    for (int i = 0; i < n; i++)
        if (p[i] > 0.0f) s += (double)p[i] * ((double)logf(p[i]) - (double)y[i] + (double)shift);
    return s;
}

static void exp_f64(double *x, int n) {
    for (int i = 0; i < n; i++) x[i] = exp(x[i]);
}

static void log_f64(double *x, int n) {
    for (int i = 0; i < n; i++) x[i] = log(x[i]);
}

static void silu_mul(float *g, const float *u, size_t n) {
    for (size_t j = 0; j < n; j++) g[j] = g[j] / (1.0f + expf(-g[j])) * u[j];
}

/* 0.5 x (1 + tanh(y)) = x sigmoid(2 y), y = sqrt(2/pi) (x + 0.044715 x^3) */
static void gelu_mul(float *g, const float *u, size_t n) {
    for (size_t j = 0; j < n; j++) {
        const float x = g[j], y2 = 1.5957691216057308f * (x + 0.044715f * x * x * x);
        g[j] = x / (1.0f + expf(-y2)) * u[j];
    }
}

static void softcap(float *x, size_t n, float c) {
    for (size_t j = 0; j < n; j++)
        if (x[j] != -INFINITY) x[j] = c * tanhf(x[j] / c);
}

static void gather_dot_f32(const float *q, const void *base, size_t stride, int d, const int32_t *idx, int n,
                           float *out) {
    for (int i = 0; i < n; i++) out[i] = kernels_dot_f32_scalar(q, (const float *)base + (size_t)idx[i] * stride, d);
}

static void gather_dot_f16(const float *q, const void *base, size_t stride, int d, const int32_t *idx, int n,
                           float *out) {
    for (int i = 0; i < n; i++) out[i] = dot_f16(q, (const uint16_t *)base + (size_t)idx[i] * stride, d);
}

/* ---- KV cache rows --------------------------------------------------------- */

/* Quantised rows (q8_0, q4_0) in blocks of B = KV_QBLOCK(hd) values: fp16 d,
 * then B signed bytes (q8_0) or B/2 bytes of nibbles (q4_0, byte j: value j
 * low, value j + B/2 high). */
static size_t qblock_bytes(subq_kv_type t, int B) { return 2 + (size_t)(t == SUBQ_KV_Q8_0 ? B : B / 2); }

/* The B codes of a q8_0 / q4_0 block at b (value = d * code: q, or q - 8). */
static void kv_block_codes(subq_kv_type t, const uint8_t *b, int B, int *v) {
    if (t == SUBQ_KV_Q8_0)
        for (int j = 0; j < B; j++) v[j] = (int8_t)b[2 + j];
    else
        for (int j = 0; j < B / 2; j++) {
            v[j] = (b[2 + j] & 0xF) - 8;
            v[j + B / 2] = (b[2 + j] >> 4) - 8;
        }
}

/* Values [c0, c0 + nv) of a row as floats: c0 a multiple of KV_QBLOCK(hd),
 * nv = min(KV_QBLOCK(hd), hd - c0) (the quantised types' dequantisation as
 * ggml's: d * q, d * (q - 8)). */
static void kv_block_f32(subq_kv_type t, const void *row, int hd, int c0, int nv, float *dst) {
    const int B = KV_QBLOCK(hd);
    const uint8_t *b = (const uint8_t *)row + (size_t)(c0 / B) * qblock_bytes(t, B);
    if (t == SUBQ_KV_F32) memcpy(dst, (const float *)row + c0, (size_t)nv * sizeof(float));
    else if (t == SUBQ_KV_F16)
        for (int j = 0; j < nv; j++) dst[j] = fp16_to_fp32(((const uint16_t *)row)[c0 + j]);
    else {
        int v[32];
        kv_block_codes(t, b, B, v);
        const float d = fp16_to_fp32(quant_rd16(b));
        for (int j = 0; j < B; j++) dst[j] = (float)v[j] * d;
    }
}

/* Quantise x[0..hd) into a q8_0 / q4_0 row, block by block, as ggml's
 * quantize_row_q8_0_ref (d = max|x| / 127, q = round(x / d)) and
 * quantize_row_q4_0_ref (d = the value of largest magnitude / -8,
 * q = min(15, trunc(x / d + 8.5))). */
static void kv_quantize(subq_kv_type t, const float *x, void *row, int hd) {
    const int B = KV_QBLOCK(hd);
    uint8_t *b = row;
    for (int c0 = 0; c0 < hd; c0 += B, b += qblock_bytes(t, B)) {
        const float *xb = x + c0;
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < B; j++)
            if (amax < fabsf(xb[j])) {
                amax = fabsf(xb[j]);
                max = xb[j];
            }
        if (t == SUBQ_KV_Q8_0) {
            const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
            quant_wr16(b, fp32_to_fp16(d));
            for (int j = 0; j < B; j++) b[2 + j] = (uint8_t)(int8_t)roundf(xb[j] * id);
        } else {
            const float d = max / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
            quant_wr16(b, fp32_to_fp16(d));
            for (int j = 0; j < B / 2; j++) {
                const int lo = (int8_t)(xb[j] * id + 8.5f), hi = (int8_t)(xb[j + B / 2] * id + 8.5f);
                b[2 + j] = (uint8_t)((lo < 15 ? lo : 15) | (hi < 15 ? hi : 15) << 4);
            }
        }
    }
}

static float kv_dot(subq_kv_type t, const float *q, const void *row, int hd) {
    if (t == SUBQ_KV_F32) return kernels_dot_f32_scalar(q, row, hd);
    if (t == SUBQ_KV_F16) return dot_f16(q, row, hd);
    const int B = KV_QBLOCK(hd);
    float v[32], sum = 0.0f;
    for (int c0 = 0; c0 < hd; c0 += B) {
        kv_block_f32(t, row, hd, c0, B, v);
        sum += kernels_dot_f32_scalar(q + c0, v, B);
    }
    return sum;
}

static void kv_axpy(subq_kv_type t, float *y, float w, const void *row, int hd) {
    const int B = KV_QBLOCK(hd);
    float v[32];
    for (int c0 = 0; c0 < hd; c0 += B) {
        const int nv = hd - c0 < B ? hd - c0 : B;
        kv_block_f32(t, row, hd, c0, nv, v);
        for (int j = 0; j < nv; j++) y[c0 + j] += w * v[j];
    }
}

static void kv_to_f32(subq_kv_type t, const void *rows, int n, int hd, float *dst) {
    const size_t rb = kernels_kv_row_bytes(t, hd);
    const int B = KV_QBLOCK(hd);
    for (int r = 0; r < n; r++)
        for (int c0 = 0; c0 < hd; c0 += B)
            kv_block_f32(t, (const char *)rows + r * rb, hd, c0, hd - c0 < B ? hd - c0 : B, dst + (size_t)r * hd + c0);
}

static void kv_from_f32(subq_kv_type t, const float *x, void *row, int hd) {
    if (t == SUBQ_KV_F32) memcpy(row, x, (size_t)hd * sizeof(float));
    else if (t == SUBQ_KV_F16) f32_to_f16(x, row, hd);
    else kv_quantize(t, x, row, hd);
}

/* Quantised keys (kernels.h): each block of B values of the query as q8
 * codes (quantize_q8's rounding), each block product an exact integer sum. */
static void kv_scores_quant(subq_kv_type t, const float *q, int g, const uint8_t *keys, int n, int hd, float scale,
                            float *s, int ld) {
    const int B = KV_QBLOCK(hd);
    const size_t rb = kernels_kv_row_bytes(t, hd), bb = qblock_bytes(t, B);
    for (int i = 0; i < g; i++) {
        float *si = s + (size_t)i * ld;
        for (int j = 0; j < n; j++) si[j] = 0.0f;
        for (int c0 = 0; c0 < hd; c0 += B) {
            int8_t qq[32];
            int v[32];
            float dq;
            quantize_q8_blocks(q + (size_t)i * hd + c0, B, B, qq, &dq);
            for (int j = 0; j < n; j++) {
                const uint8_t *b = keys + (size_t)j * rb + (size_t)(c0 / B) * bb;
                kv_block_codes(t, b, B, v);
                int dot = 0;
                for (int c = 0; c < B; c++) dot += v[c] * qq[c];
                si[j] += (fp16_to_fp32(quant_rd16(b)) * dq) * (float)dot;
            }
        }
        for (int j = 0; j < n; j++) si[j] *= scale;
    }
}

static void kv_scores(subq_kv_type t, const float *q, int g, const void *keys, int n, int hd, float scale, float *s,
                      int ld) {
    if (t == SUBQ_KV_Q8_0 || t == SUBQ_KV_Q4_0) {
        kv_scores_quant(t, q, g, keys, n, hd, scale, s, ld);
        return;
    }
    const size_t rb = kernels_kv_row_bytes(t, hd);
    for (int i = 0; i < g; i++)
        for (int j = 0; j < n; j++)
            s[(size_t)i * ld + j] = scale * kv_dot(t, q + (size_t)i * hd, (const char *)keys + j * rb, hd);
}

static void kv_accum(subq_kv_type t, const float *p, int g, int ld, const void *vals, int n, int hd, float *out) {
    const size_t rb = kernels_kv_row_bytes(t, hd);
    for (int i = 0; i < g; i++)
        for (int j = 0; j < n; j++) kv_axpy(t, out + (size_t)i * hd, p[(size_t)i * ld + j], (const char *)vals + j * rb, hd);
}

static void kv_gather_dot(subq_kv_type t, const float *q, const void *base, size_t stride, int d, const int32_t *idx,
                          int n, float *out) {
    const size_t rb = kernels_kv_row_bytes(t, d) * (stride / (size_t)d);
    for (int i = 0; i < n; i++) out[i] = kv_dot(t, q, (const char *)base + (size_t)idx[i] * rb, d);
}

/* The table's entries for KV type T (kv_TYPE_dot, ...). */
#define KV_OPS(NAME, T)                                                                                            \
    static float NAME##_dot(const float *q, const void *row, int hd) { return kv_dot(T, q, row, hd); }               \
    static void NAME##_axpy(float *y, float w, const void *row, int hd) { kv_axpy(T, y, w, row, hd); }               \
    static void NAME##_to_f32(const void *rows, int n, int hd, float *dst) { kv_to_f32(T, rows, n, hd, dst); }       \
    static void NAME##_scores(const float *q, int g, const void *keys, int n, int hd, float scale, float *s, int ld) { \
        kv_scores(T, q, g, keys, n, hd, scale, s, ld);                                                               \
    }                                                                                                                \
    static void NAME##_accum(const float *p, int g, int ld, const void *vals, int n, int hd, float *out) {          \
        kv_accum(T, p, g, ld, vals, n, hd, out);                                                                     \
    }                                                                                                                \
    static void NAME##_gather_dot(const float *q, const void *base, size_t stride, int d, const int32_t *idx, int n, \
                                  float *out) {                                                                      \
        kv_gather_dot(T, q, base, stride, d, idx, n, out);                                                           \
    }                                                                                                                \
    static void NAME##_from_f32(const float *x, void *row, int hd) { kv_from_f32(T, x, row, hd); }
#define KV_ENTRY(NAME)                                                                                              \
    { NAME##_dot, NAME##_axpy, NAME##_to_f32, NAME##_scores, NAME##_accum, NAME##_gather_dot, NAME##_from_f32 }

KV_OPS(kv_f32, SUBQ_KV_F32)
KV_OPS(kv_f16, SUBQ_KV_F16)
KV_OPS(kv_q8_0, SUBQ_KV_Q8_0)
KV_OPS(kv_q4_0, SUBQ_KV_Q4_0)

const kernels kernels_scalar_set = {
    .name = "scalar",
    .dequant = quant_dequant_ref,
    .dot =
        {
            [GGML_TYPE_F32] = row_dot_f32,
            [GGML_TYPE_F16] = row_dot_f16,
            [GGML_TYPE_BF16] = row_dot_bf16,
            [GGML_TYPE_Q8_0] = dot_q8_0,
            [GGML_TYPE_Q4_0] = dot_q4_0,
            [GGML_TYPE_Q4_K] = dot_q4_K,
            [GGML_TYPE_Q5_K] = dot_q5_K,
            [GGML_TYPE_Q6_K] = dot_q6_K,
        },
    .quantize_q8 = quantize_q8,
    .gemm_q8 =
        {
            [GGML_TYPE_Q8_0] = gemm_q8_q8_0,
            [GGML_TYPE_Q4_0] = gemm_q8_q4_0,
        },
    .gemv_q8 =
        {
            [GGML_TYPE_Q8_0] = gemv_q8_q8_0,
            [GGML_TYPE_Q4_0] = gemv_q8_q4_0,
        },
    .dot_f32 = kernels_dot_f32_scalar,
    .dot_f16 = dot_f16,
    .dot_f16f16 = dot_f16f16,
    .f32_to_f16 = f32_to_f16,
    .index_at_least = index_at_least,
    .axpy_f32 = axpy_f32,
    .axpy_f16 = axpy_f16,
    .exp_shift_sum = exp_shift_sum,
    .silu_mul = silu_mul,
    .gelu_mul = gelu_mul,
    .softcap = softcap,
    .kl_sum = kl_sum,
    .exp_f64 = exp_f64,
    .log_f64 = log_f64,
    .max_f32 = max_f32,
    .gather_dot_f32 = gather_dot_f32,
    .gather_dot_f16 = gather_dot_f16,
    .kv =
        {
            [SUBQ_KV_F32] = KV_ENTRY(kv_f32),
            [SUBQ_KV_F16] = KV_ENTRY(kv_f16),
            [SUBQ_KV_Q8_0] = KV_ENTRY(kv_q8_0),
            [SUBQ_KV_Q4_0] = KV_ENTRY(kv_q4_0),
        },
};
