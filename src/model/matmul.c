#include "model/matmul.h"

#include <omp.h>
#include <stdlib.h>

#include "base/blas.h"
#include "kernels/kernels.h"

/* Below this many rows a batch is cheaper as repeated GEMV than as a GEMM. */
#define GEMM_MIN_ROWS 4
/* Waking threads costs microseconds: small products run on the calling thread. */
#define PARALLEL_MIN_ELEMS (1 << 16)
/* Dequantised weight tile: 4 MiB of floats keeps it in L2/L3 while sgemm reads it. */
#define TILE_FLOATS (1 << 20)

int matmul_scratch_init(matmul_scratch *s, int n_batch, int64_t cols) {
    s->tile_floats = TILE_FLOATS > cols ? TILE_FLOATS : cols;
    s->tile = malloc((size_t)s->tile_floats * sizeof(float));
    s->xq = malloc((size_t)n_batch * (size_t)cols);
    s->xd = malloc(((size_t)n_batch * (size_t)(cols / 32) + 1) * sizeof(float));
    return s->tile && s->xq && s->xd;
}

void matmul_scratch_free(matmul_scratch *s) {
    free(s->tile);
    free(s->xq);
    free(s->xd);
    s->tile = NULL;
    s->xq = NULL;
    s->xd = NULL;
}

/* Integer GEMM: quantise the T activation rows, then each thread takes a
 * contiguous slice of W's rows (a multiple of 4 rows: the kernels' tile
 * height) for all T tokens. */
static void matmul_q8(float *Y, const float *X, const matrix *W, int T, matmul_scratch *s, int n_threads,
                      gemm_q8_fn gemm) {
    const int64_t rows = W->rows, cols = W->cols, nb = cols / 32;
    const quantize_q8_fn quantize = kernels_get()->quantize_q8;
#pragma omp parallel num_threads(n_threads)
    {
#pragma omp for schedule(static)
        for (int t = 0; t < T; t++) quantize(X + (size_t)t * cols, cols, s->xq + (size_t)t * cols, s->xd + (size_t)t * nb);
        const int64_t ith = omp_get_thread_num(), nth = omp_get_num_threads();
        const int64_t o0 = rows * ith / nth / 4 * 4, o1 = ith + 1 == nth ? rows : rows * (ith + 1) / nth / 4 * 4;
        if (o1 > o0)
            gemm((const char *)W->data + (size_t)o0 * W->row_bytes, W->row_bytes, o1 - o0, s->xq, s->xd, T, cols,
                 Y + o0, rows);
    }
}

/* Integer GEMV for T < GEMM_MIN_ROWS tokens over n matrices that share
 * their input (same type and width): quantise the tokens once, then each
 * thread streams one contiguous slice of the matrices' rows taken end to end
 * (a single sequential stream the hardware prefetcher keeps busy, and one
 * parallel region for q, k and v or gate and up instead of one each); with
 * T > 1 in chunks that stay in L2 while every token passes them, so W is
 * read from memory once. */
static void matmul_gemv_q8(float *const *Y, const matrix *const *W, int n, const float *X, int T, matmul_scratch *s,
                           int n_threads, gemv_q8_fn gemv) {
    enum { CHUNK_BYTES = 1 << 18 };
    const int64_t cols = W[0]->cols, nb = cols / 32;
    const quantize_q8_fn quantize = kernels_get()->quantize_q8;
    int64_t total = 0;
    for (int i = 0; i < n; i++) total += W[i]->rows;
    for (int t = 0; t < T; t++) quantize(X + (size_t)t * cols, cols, s->xq + (size_t)t * cols, s->xd + (size_t)t * nb);
#pragma omp parallel num_threads(n_threads)
    {
        const int64_t ith = omp_get_thread_num(), nth = omp_get_num_threads();
        const int64_t g0 = total * ith / nth, g1 = total * (ith + 1) / nth; /* rows of all the matrices */
        int64_t at = 0;                                                    /* first row of W[i] in that count */
        for (int i = 0; i < n; at += W[i]->rows, i++) {
            const int64_t rows = W[i]->rows, o0 = g0 > at ? g0 - at : 0, o1 = g1 - at < rows ? g1 - at : rows;
            int64_t chunk = T == 1 ? o1 - o0 : (int64_t)(CHUNK_BYTES / W[i]->row_bytes);
            if (chunk < 1) chunk = 1;
            for (int64_t c = o0; c < o1; c += chunk) {
                const int64_t r = o1 - c < chunk ? o1 - c : chunk;
                for (int t = 0; t < T; t++)
                    gemv((const char *)W[i]->data + (size_t)c * W[i]->row_bytes, W[i]->row_bytes, r,
                         s->xq + (size_t)t * cols, s->xd + (size_t)t * nb, cols, Y[i] + (size_t)t * rows + c);
            }
        }
    }
}

void matmul(float *Y, const float *X, const matrix *W, int T, matmul_scratch *s, int n_threads) {
    const int64_t rows = W->rows, cols = W->cols;
    const char *wdata = W->data;
    gemv_q8_fn gemv = T < GEMM_MIN_ROWS ? kernels_gemv_q8(W->type) : NULL;
    if (gemv) {
        matmul_gemv_q8(&Y, &W, 1, X, T, s, rows * cols * T >= PARALLEL_MIN_ELEMS ? n_threads : 1, gemv);
        return;
    }
    if (T == 1) {
        /* y[o] = w_o . x: each thread reads one contiguous slice of rows, a
         * single sequential stream the hardware prefetcher keeps busy */
        const int nt = rows * cols >= PARALLEL_MIN_ELEMS ? n_threads : 1;
#pragma omp parallel num_threads(nt)
        {
            const int64_t ith = omp_get_thread_num(), nth = omp_get_num_threads();
            const int64_t o0 = rows * ith / nth, o1 = rows * (ith + 1) / nth;
            dot_rows(W->type, wdata + (size_t)o0 * W->row_bytes, W->row_bytes, o1 - o0, X, cols, Y + o0);
        }
        return;
    }
    if (T < GEMM_MIN_ROWS) {
        /* y[t][o] = w_o . x_t, rows split across threads */
#pragma omp parallel for num_threads(n_threads) schedule(static) if (rows * cols * T >= PARALLEL_MIN_ELEMS)
        for (int64_t o = 0; o < rows; o++) {
            const void *wrow = wdata + (size_t)o * W->row_bytes;
            for (int t = 0; t < T; t++) Y[(size_t)t * rows + o] = dot_row(W->type, wrow, X + (size_t)t * cols, cols);
        }
        return;
    }
    gemm_q8_fn gemm = kernels_gemm_q8(W->type);
    if (gemm) {
        matmul_q8(Y, X, W, T, s, rows * cols * T >= PARALLEL_MIN_ELEMS ? n_threads : 1, gemm);
        return;
    }
    if (W->type == GGML_TYPE_F32) {
        blas_sgemm(n_threads, 0, 1, T, (int)rows, (int)cols, 1.0f, X, (int)cols, (const float *)wdata, (int)cols, 0.0f,
                   Y, (int)rows);
        return;
    }
    /* dequantise a tile of R rows, then Y[:, o0:o0+R] = X tile^T */
    float *tile = s->tile;
    int64_t R = s->tile_floats / cols;
    if (R > rows) R = rows;
    for (int64_t o0 = 0; o0 < rows; o0 += R) {
        int64_t r = rows - o0 < R ? rows - o0 : R;
#pragma omp parallel for num_threads(n_threads) schedule(static) if (r * cols >= PARALLEL_MIN_ELEMS)
        for (int64_t i = 0; i < r; i++) dequant_row(W->type, wdata + (size_t)(o0 + i) * W->row_bytes, tile + i * cols, cols);
        blas_sgemm(n_threads, 0, 1, T, (int)r, (int)cols, 1.0f, X, (int)cols, tile, (int)cols, 0.0f, Y + o0,
                   (int)rows);
    }
}

void matmul_shared_input(float *const *Y, const matrix *const *W, int n, const float *X, int T, matmul_scratch *s,
                         int n_threads) {
    gemv_q8_fn gemv = T < GEMM_MIN_ROWS ? kernels_gemv_q8(W[0]->type) : NULL;
    int64_t elems = 0;
    for (int i = 0; i < n; i++) {
        if (W[i]->type != W[0]->type || W[i]->cols != W[0]->cols) gemv = NULL;
        elems += W[i]->rows * W[i]->cols * T;
    }
    if (!gemv) {
        for (int i = 0; i < n; i++) matmul(Y[i], X, W[i], T, s, n_threads);
        return;
    }
    matmul_gemv_q8(Y, W, n, X, T, s, elems >= PARALLEL_MIN_ELEMS ? n_threads : 1, gemv);
}
