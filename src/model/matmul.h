/* Y = X W^T for a stored weight matrix W (rows x cols) of any supported type:
 * on the quantised types the integer kernels have (Q8_0, Q4_0; Q4_K and Q6_K
 * where AVX-512 VNNI runs), activations
 * are quantised to 8 bits and products run on integer dot products, GEMV
 * for one to three tokens (kernels.h: gemv_q8, memory bound), GEMM for
 * batches (gemm_q8); other types take float row dot products for one-token
 * rows, and OpenBLAS sgemm for batches, on dequantised tiles of W when W is
 * not f32. */
#ifndef SUBQ_MATMUL_H
#define SUBQ_MATMUL_H

#include "base/pool.h"
#include "model/model.h"

/* Work memory of batched products, sized for batches of up to n_batch rows
 * of up to `cols` values (the widest input of any weight matrix). */
typedef struct matmul_scratch {
    float *tile;        /* dequantised rows of W, tile_floats >= cols */
    int64_t tile_floats;
    int8_t *xq;         /* q8 activations [n_batch][cols] */
    float *xd;          /* and their block scales [n_batch][cols / 32] */
} matmul_scratch;

/* 0 when out of memory (then matmul_scratch_free). */
int matmul_scratch_init(matmul_scratch *s, int n_batch, int64_t cols);
void matmul_scratch_free(matmul_scratch *s);

/* Y[t][o] = sum_i X[t][i] * W[o][i] for t < T (T <= the scratch's n_batch),
 * split across the pool's threads (NULL: the calling thread; sgemm runs on
 * as many OpenBLAS threads). f32 W uses no scratch: s may then be NULL. */
void matmul(float *Y, const float *X, const matrix *W, int T, matmul_scratch *s, pool *p);

/* Y[i] = X W[i]^T for n matrices that share their input X (q, k, v; gate,
 * up): as n calls of matmul, in one parallel pass when they take the
 * integer GEMV (same type and width). */
void matmul_shared_input(float *const *Y, const matrix *const *W, int n, const float *X, int T, matmul_scratch *s,
                         pool *p);

#endif
