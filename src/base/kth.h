/* The k-th largest of a float array, in place. */
#ifndef SUBQ_BASE_KTH_H
#define SUBQ_BASE_KTH_H

/* The k-th largest of a[0..n) (1 <= k <= n, no NaN; a is reordered). */
float kth_largest_f32(float *a, int n, int k);

#endif
