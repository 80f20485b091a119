/* Exact top-k selection over a score vector (ties: the lower index wins),
 * used for the InfoNCE positive set, retrieval metrics and the raw-QK oracle. */
#ifndef SUBQ_TRAIN_TOPK_H
#define SUBQ_TRAIN_TOPK_H

/* Write the indices of the min(k, n) largest v[i] into idx, best first
 * (equal values: lower index first). Returns the number written. v holds
 * no NaN; scratch holds n floats. O(n + k log k): a quickselect over the
 * blocks that can hold them; no allocation. */
int topk_indices(const float *v, int n, int k, int *idx, float *scratch);

#endif
