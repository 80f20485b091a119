/* Paired bootstrap confidence interval of a mean difference. */
#ifndef SUBQ_BOOTSTRAP_H
#define SUBQ_BOOTSTRAP_H

#include <stddef.h>
#include <stdint.h>

/* d[i] = a[i] - b[i] over n paired samples; mean of d and the 95% interval
 * (2.5th and 97.5th percentiles of the means of n_resamples resamples with
 * replacement, seeded). Returns 0 on allocation failure. */
int bootstrap_mean_diff(const float *a, const float *b, size_t n, int n_resamples, uint64_t seed, double *mean,
                        double *lo, double *hi);

#endif
