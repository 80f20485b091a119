/* Block bootstrap confidence interval of a per-token mean. */
#ifndef SUBQ_BOOTSTRAP_H
#define SUBQ_BOOTSTRAP_H

#include <stdint.h>

#include "subq.h"

/* Blocks i < n (evaluation windows) carry sum[i], the sum of a per-token
 * quantity (an NLL difference, a KL) over cnt[i] tokens. *mean = Σ sum / Σ cnt;
 * [*lo, *hi] is the 95% interval: the 2.5th and 97.5th percentiles of that
 * ratio over n_resamples resamples of the blocks with replacement (seeded).
 * Tokens of one window are correlated (they share a context), so windows,
 * not tokens, are the units resampled. Blocks without tokens are left out;
 * with no tokens at all the three values are NAN. SUBQ_ERR_ARG for fewer than
 * 2 resamples, SUBQ_ERR_NOMEM when the resample buffer cannot be allocated. */
subq_status bootstrap_block_mean(const double *sum, const int64_t *cnt, int n, int n_resamples, uint64_t seed,
                                 double *mean, double *lo, double *hi, subq_error *err);

#endif
