#include "eval/bootstrap.h"

#include <math.h>
#include <stdlib.h>

#include "base/error.h"
#include "base/rng.h"

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

subq_status bootstrap_block_mean(const double *sum, const int64_t *cnt, int n, int n_resamples, uint64_t seed,
                                 double *mean, double *lo, double *hi, subq_error *err) {
    *mean = *lo = *hi = NAN;
    if (n_resamples < 2) return subq_fail(err, SUBQ_ERR_ARG, "bootstrap needs at least 2 resamples, got %d", n_resamples);
    int *used = malloc((size_t)(n > 0 ? n : 1) * sizeof(int));
    double *means = malloc((size_t)n_resamples * sizeof(double));
    if (!used || !means) {
        free(used);
        free(means);
        return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory for %d bootstrap resamples", n_resamples);
    }
    int n_used = 0;
    double s = 0.0, c = 0.0;
    for (int i = 0; i < n; i++)
        if (cnt[i] > 0) {
            used[n_used++] = i;
            s += sum[i];
            c += (double)cnt[i];
        }
    if (n_used > 0) {
        *mean = s / c;
        uint64_t rng = rng_seed(seed);
        /* mean of a resample = Σ sum / Σ cnt over n_used blocks drawn with replacement */
        for (int r = 0; r < n_resamples; r++) {
            double rs = 0.0, rc = 0.0;
            for (int i = 0; i < n_used; i++) {
                int b = used[rng_next_u64(&rng) % (uint64_t)n_used];
                rs += sum[b];
                rc += (double)cnt[b];
            }
            means[r] = rs / rc;
        }
        qsort(means, (size_t)n_resamples, sizeof(double), cmp_double);
        *lo = means[(size_t)(0.025 * (n_resamples - 1))];
        *hi = means[(size_t)(0.975 * (n_resamples - 1))];
    }
    free(used);
    free(means);
    return SUBQ_OK;
}
