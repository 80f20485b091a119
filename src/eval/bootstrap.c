#include "eval/bootstrap.h"

#include <stdlib.h>

#include "base/rng.h"

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

int bootstrap_mean_diff(const float *a, const float *b, size_t n, int n_resamples, uint64_t seed, double *mean,
                        double *lo, double *hi) {
    *mean = *lo = *hi = 0.0;
    if (n == 0 || n_resamples < 2) return 1;
    double *means = malloc((size_t)n_resamples * sizeof(double));
    if (!means) return 0;
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] - b[i];
    *mean = s / (double)n;
    uint64_t rng = rng_seed(seed);
    for (int r = 0; r < n_resamples; r++) {
        double m = 0.0;
        for (size_t i = 0; i < n; i++) {
            size_t j = (size_t)(rng_next_u64(&rng) % n);
            m += (double)a[j] - b[j];
        }
        means[r] = m / (double)n;
    }
    qsort(means, (size_t)n_resamples, sizeof(double), cmp_double);
    *lo = means[(size_t)(0.025 * (n_resamples - 1))];
    *hi = means[(size_t)(0.975 * (n_resamples - 1))];
    free(means);
    return 1;
}
