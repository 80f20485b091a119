#include "model/matmul.h"

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

/* Work of one product split into pool chunks (pool.h): chunk i takes rows
 * [r0, r1) of the n matrices taken end to end (r0 and r1 multiples of 4,
 * the integer kernels' tile height, but for the last). */
typedef struct mm_job {
    float *const *Y;
    const matrix *const *W;
    int n, T, n_chunks;
    int64_t total;            /* rows of all the matrices */
    const float *X;
    const matmul_scratch *s;
    gemv_q8_fn gemv;
    gemm_q8_fn gemm;
} mm_job;

static void chunk_rows(const mm_job *j, int i, int64_t *r0, int64_t *r1) {
    *r0 = j->total * i / j->n_chunks / 4 * 4;
    *r1 = i + 1 == j->n_chunks ? j->total : j->total * (i + 1) / j->n_chunks / 4 * 4;
}

/* Integer GEMM: each chunk is a slice of W's rows for all T tokens (the
 * activations were quantised before). */
static void gemm_chunk(void *ctx, int i, int thread) {
    const mm_job *j = ctx;
    const matrix *W = j->W[0];
    int64_t o0, o1;
    chunk_rows(j, i, &o0, &o1);
    if (o1 > o0)
        j->gemm((const char *)W->data + (size_t)o0 * W->row_bytes, W->row_bytes, o1 - o0, j->s->xq, j->s->xd, j->T,
                W->cols, j->Y[0] + o0, W->rows);
}

/* Integer GEMV for T < GEMM_MIN_ROWS tokens over the n matrices: each chunk
 * streams one contiguous slice of their rows taken end to end (a single
 * sequential stream the hardware prefetcher keeps busy, and one call for
 * q, k and v or gate and up instead of one each); with T > 1 in pieces that
 * stay in L2 while every token passes them, so W is read from memory once. */
static void gemv_chunk(void *ctx, int ci, int thread) {
    enum { CHUNK_BYTES = 1 << 18 };
    const mm_job *j = ctx;
    const int64_t cols = j->W[0]->cols, nb = cols / 32;
    int64_t g0, g1, at = 0; /* at: first row of W[i] in the count */
    chunk_rows(j, ci, &g0, &g1);
    for (int i = 0; i < j->n; at += j->W[i]->rows, i++) {
        const matrix *W = j->W[i];
        const int64_t rows = W->rows, o0 = g0 > at ? g0 - at : 0, o1 = g1 - at < rows ? g1 - at : rows;
        int64_t piece = j->T == 1 ? o1 - o0 : (int64_t)(CHUNK_BYTES / W->row_bytes);
        if (piece < 1) piece = 1;
        for (int64_t c = o0; c < o1; c += piece) {
            const int64_t r = o1 - c < piece ? o1 - c : piece;
            for (int t = 0; t < j->T; t++)
                j->gemv((const char *)W->data + (size_t)c * W->row_bytes, W->row_bytes, r, j->s->xq + (size_t)t * cols,
                        j->s->xd + (size_t)t * nb, cols, j->Y[i] + (size_t)t * rows + c);
        }
    }
}

/* Float rows for T < GEMM_MIN_ROWS tokens: y[t][o] = w_o . x_t over a slice of rows. */
static void dot_chunk(void *ctx, int i, int thread) {
    const mm_job *j = ctx;
    const matrix *W = j->W[0];
    const int64_t cols = W->cols;
    int64_t o0, o1;
    chunk_rows(j, i, &o0, &o1);
    if (j->T == 1) { /* one contiguous run of rows */
        dot_rows(W->type, (const char *)W->data + (size_t)o0 * W->row_bytes, W->row_bytes, o1 - o0, j->X, cols,
                 j->Y[0] + o0);
        return;
    }
    for (int64_t o = o0; o < o1; o++) {
        const void *wrow = (const char *)W->data + (size_t)o * W->row_bytes;
        for (int t = 0; t < j->T; t++) j->Y[0][(size_t)t * W->rows + o] = dot_row(W->type, wrow, j->X + (size_t)t * cols, cols);
    }
}

/* Float rows: Y[:, r0:r1) = X W[r0:r1)^T by one-thread sgemm, W's rows
 * dequantised first (into the chunk's own piece of the tile) unless f32. */
static void sgemm_chunk(void *ctx, int i, int thread) {
    const mm_job *j = ctx;
    const matrix *W = j->W[0];
    const int64_t cols = W->cols;
    int64_t o0, o1;
    chunk_rows(j, i, &o0, &o1);
    for (int64_t r0 = o0; r0 < o1;) {
        const float *w = (const float *)((const char *)W->data + (size_t)r0 * W->row_bytes);
        int64_t r = o1 - r0;
        if (W->type != GGML_TYPE_F32) { /* a piece of this chunk's share of the tile */
            const int64_t room = j->s->tile_floats / j->n_chunks / cols;
            if (r > room) r = room > 0 ? room : 1;
            float *tile = j->s->tile + (size_t)i * (j->s->tile_floats / j->n_chunks);
            for (int64_t k = 0; k < r; k++) dequant_row(W->type, (const char *)W->data + (size_t)(r0 + k) * W->row_bytes, tile + k * cols, cols);
            w = tile;
        }
        blas_sgemm(1, 0, 1, j->T, (int)r, (int)cols, 1.0f, j->X, (int)cols, w, (int)cols, 0.0f, j->Y[0] + r0, (int)W->rows);
        r0 += r;
    }
}

/* Chunks for rows x cols x T multiply-adds: none below PARALLEL_MIN_ELEMS. */
static int mm_chunks(pool *p, int64_t total_rows, int64_t cols, int T) {
    const int64_t row_work = cols * T > 0 ? cols * T : 1;
    int n = pool_chunks(p, total_rows * row_work, PARALLEL_MIN_ELEMS);
    return n > total_rows / 4 ? (int)(total_rows / 4 > 0 ? total_rows / 4 : 1) : n;
}

/* q8 activations of the T rows of X into the scratch (xq, xd), rows split across the pool */
typedef struct quant_job {
    const float *X;
    int T, n_chunks;
    int64_t cols;
    const matmul_scratch *s;
} quant_job;

static void quant_chunk(void *ctx, int i, int thread) {
    const quant_job *q = ctx;
    const quantize_q8_fn quantize = kernels_get()->quantize_q8;
    const int t0 = q->T * i / q->n_chunks, t1 = q->T * (i + 1) / q->n_chunks;
    for (int t = t0; t < t1; t++)
        quantize(q->X + (size_t)t * q->cols, q->cols, q->s->xq + (size_t)t * q->cols,
                 q->s->xd + (size_t)t * (q->cols / 32));
}

static void quantize_rows(const float *X, int T, int64_t cols, const matmul_scratch *s, pool *p) {
    quant_job q = {.X = X, .T = T, .cols = cols, .s = s, .n_chunks = pool_chunks(p, (int64_t)T * cols, 1 << 15)};
    if (q.n_chunks > T) q.n_chunks = T;
    pool_run(p, q.n_chunks, quant_chunk, &q);
}

void matmul(float *Y, const float *X, const matrix *W, int T, matmul_scratch *s, pool *p) {
    const int64_t rows = W->rows, cols = W->cols;
    mm_job j = {.Y = &Y, .W = &W, .n = 1, .T = T, .total = rows, .X = X, .s = s};
    j.gemv = T < GEMM_MIN_ROWS ? kernels_gemv_q8(W->type) : NULL;
    if (j.gemv || T < GEMM_MIN_ROWS) {
        if (j.gemv) quantize_rows(X, T, cols, s, p);
        j.n_chunks = mm_chunks(p, rows, cols, T);
        pool_run(p, j.n_chunks, j.gemv ? gemv_chunk : dot_chunk, &j);
        return;
    }
    if ((j.gemm = kernels_gemm_q8(W->type))) {
        quantize_rows(X, T, cols, s, p);
        j.n_chunks = mm_chunks(p, rows, cols, T);
        pool_run(p, j.n_chunks, gemm_chunk, &j);
        return;
    }
    /* float rows (f32, or other types dequantised a block at a time) through
     * one-thread sgemm per chunk of W's rows: the pool's threads, not
     * OpenBLAS's OpenMP team, whose barrier stalls when another process
     * holds a core */
    j.n_chunks = mm_chunks(p, rows, cols, T);
    if (W->type != GGML_TYPE_F32 && j.n_chunks > s->tile_floats / cols) /* each chunk's tile holds a row */
        j.n_chunks = (int)(s->tile_floats / cols);
    pool_run(p, j.n_chunks, sgemm_chunk, &j);
}

void matmul_shared_input(float *const *Y, const matrix *const *W, int n, const float *X, int T, matmul_scratch *s,
                         pool *p) {
    gemv_q8_fn gemv = T < GEMM_MIN_ROWS ? kernels_gemv_q8(W[0]->type) : NULL;
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        if (W[i]->type != W[0]->type || W[i]->cols != W[0]->cols) gemv = NULL;
        total += W[i]->rows;
    }
    if (!gemv) {
        for (int i = 0; i < n; i++) matmul(Y[i], X, W[i], T, s, p);
        return;
    }
    quantize_rows(X, T, W[0]->cols, s, p);
    mm_job j = {.Y = Y, .W = W, .n = n, .T = T, .total = total, .X = X, .s = s, .gemv = gemv};
    j.n_chunks = mm_chunks(p, total, W[0]->cols, T);
    pool_run(p, j.n_chunks, gemv_chunk, &j);
}
