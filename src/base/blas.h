/* Row-major sgemm through OpenBLAS with a thread count per call.
 * OpenBLAS's OpenMP build runs each call on omp_get_max_threads() threads of
 * the calling thread; blas_sgemm sets that for the call and restores it, so
 * two contexts with different thread counts in one process (or the
 * embedding program's own OpenMP code) never change each other's. */
#ifndef SUBQ_BASE_BLAS_H
#define SUBQ_BASE_BLAS_H

/* C[m][n] = alpha op(A) op(B) + beta C, op = transpose when trans_* != 0. */
void blas_sgemm(int n_threads, int trans_a, int trans_b, int m, int n, int k, float alpha, const float *A, int lda,
                const float *B, int ldb, float beta, float *C, int ldc);

#endif
