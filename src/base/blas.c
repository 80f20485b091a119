#include "base/blas.h"

#include <cblas.h>
#include <omp.h>

void blas_sgemm(int n_threads, int trans_a, int trans_b, int m, int n, int k, float alpha, const float *A, int lda,
                const float *B, int ldb, float beta, float *C, int ldc) {
    int prev = omp_get_max_threads();
    if (n_threads > 0) omp_set_num_threads(n_threads);
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n, k,
                alpha, A, lda, B, ldb, beta, C, ldc);
    omp_set_num_threads(prev);
}
