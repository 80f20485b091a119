/* Y = X W^T for a stored weight matrix W (rows x cols) of any supported type:
 * one-token rows go through row dot products (GEMV, memory bound), batches
 * through OpenBLAS sgemm, on dequantised tiles of W when W is not f32. */
#ifndef SUBQ_MATMUL_H
#define SUBQ_MATMUL_H

#include "model/model.h"

/* Y[t][o] = sum_i X[t][i] * W[o][i] for t < T. `tile` is scratch of
 * tile_floats floats (>= W->cols) used to dequantise rows of W. */
void matmul(float *Y, const float *X, const matrix *W, int T, float *tile, int64_t tile_floats,
            int n_threads);

#endif
