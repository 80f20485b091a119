/* Shared by the tests of the integer products on q8 activations
 * (test_gemm_q8.c, test_gemv_q8.c): every variant this machine runs
 * (portable C, AVX2, AVX-512 VNNI when present), and random weight rows. */
#ifndef SUBQ_TEST_Q8_VARIANTS_H
#define SUBQ_TEST_Q8_VARIANTS_H

#include <stdio.h>
#include <string.h>

#include "base/rng.h"
#include "kernels/kernels.h"
#include "quant/quant.h"

typedef struct q8_variant {
    const char *name;
    quantize_q8_fn quantize;
    gemm_q8_fn gemm[GGML_TYPE_COUNT];
    gemv_q8_fn gemv[GGML_TYPE_COUNT];
} q8_variant;

/* Fills vs[0..3) and prints their names; returns how many. */
static inline int q8_variants(q8_variant vs[3]) {
    int nv = 0;
    const kernels *sets[2] = {kernels_scalar(), kernels_avx2()};
    for (int i = 0; i < 2; i++) {
        if (!sets[i]) continue;
        vs[nv].name = sets[i]->name;
        vs[nv].quantize = sets[i]->quantize_q8;
        memcpy(vs[nv].gemm, sets[i]->gemm_q8, sizeof vs[nv].gemm);
        memcpy(vs[nv].gemv, sets[i]->gemv_q8, sizeof vs[nv].gemv);
        nv++;
    }
    const gemm_q8_fn *gemm = kernels_gemm_q8_avx512();
    const gemv_q8_fn *gemv = kernels_gemv_q8_avx512();
    if (gemm && gemv) {
        vs[nv].name = "avx512-vnni";
        vs[nv].quantize = kernels_get()->quantize_q8;
        memcpy(vs[nv].gemm, gemm, sizeof vs[nv].gemm);
        memcpy(vs[nv].gemv, gemv, sizeof vs[nv].gemv);
        nv++;
    }
    printf("variants:");
    for (int i = 0; i < nv; i++) printf(" %s", vs[i].name);
    printf("\n");
    return nv;
}

/* A random scale of magnitude lo .. 3 lo and either sign: ggml's Q4_0
 * quantiser makes negative ones, and f16 bits with the top bit set are where
 * a shift of a promoted int overflows (UBSan). */
static inline float q8_random_scale(uint64_t *rng, float lo) {
    const float m = lo + 2.0f * lo * rng_uniform(rng);
    return rng_next_u64(rng) & 1 ? -m : m;
}

/* A random row of n weights of `type` (Q8_0 or Q4_0, scales around +-0.02). */
static inline void q8_random_row(uint64_t *rng, uint32_t type, int64_t n, void *row) {
    if (type == GGML_TYPE_Q8_0) {
        block_q8_0 *b = row;
        for (int64_t i = 0; i < n / 32; i++) {
            quant_wr16(b[i].d, fp32_to_fp16(q8_random_scale(rng, 0.01f)));
            for (int j = 0; j < 32; j++) b[i].qs[j] = (int8_t)(rng_next_u64(rng) % 255 - 127);
        }
        /* not made by ggml's quantiser, but valid bytes: must still be exact */
        b[0].qs[3] = -128;
        b[n / 32 - 1].qs[31] = -128;
    } else {
        block_q4_0 *b = row;
        for (int64_t i = 0; i < n / 32; i++) {
            quant_wr16(b[i].d, fp32_to_fp16(q8_random_scale(rng, 0.01f)));
            for (int j = 0; j < 16; j++) b[i].qs[j] = (uint8_t)rng_next_u64(rng);
        }
    }
}

/* rows random rows of n Q4_K or Q6_K weights, rb bytes apart: random bytes
 * (every pattern of values and packed scales), then each super-block's f16
 * scales (Q4_K: d and dmin around +-0.001; Q6_K: d around +-0.0001). */
static inline void q8_random_kquant_rows(uint64_t *rng, uint32_t type, int64_t rows, int64_t n, size_t rb, char *w) {
    for (size_t k = 0; k < (size_t)rows * rb; k++) w[k] = (char)rng_next_u64(rng);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t sb = 0; sb < n / 256; sb++) {
            if (type == GGML_TYPE_Q4_K) {
                block_q4_K *blk = (block_q4_K *)(w + (size_t)r * rb) + sb;
                quant_wr16(blk->d, fp32_to_fp16(q8_random_scale(rng, 0.001f)));
                quant_wr16(blk->dmin, fp32_to_fp16(q8_random_scale(rng, 0.001f)));
            } else {
                block_q6_K *blk = (block_q6_K *)(w + (size_t)r * rb) + sb;
                quant_wr16(blk->d, fp32_to_fp16(q8_random_scale(rng, 0.0001f)));
            }
        }
}

#endif
