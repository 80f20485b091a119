/* AdamW (decoupled weight decay), the learning-rate schedule (linear warm-up,
 * then cosine decay to zero) and global gradient-norm clipping. */
#ifndef SUBQ_TRAIN_ADAMW_H
#define SUBQ_TRAIN_ADAMW_H

#include <stddef.h>
#include <stdint.h>

typedef struct adamw_params {
    float beta1, beta2, eps, weight_decay;
} adamw_params;

/* One update of n parameters at step t (1-based, for bias correction):
 *   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
 *   w -= lr * ( (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps) + wd * w ) */
void adamw_update(float *w, const float *g, float *m, float *v, size_t n, const adamw_params *p, float lr,
                  int64_t t);

/* Learning rate before step `step` (0-based) of `total`:
 *   step < warmup:  lr * (step + 1) / warmup
 *   after:          lr * 0.5 * (1 + cos(pi * (step - warmup) / (total - warmup))) */
float lr_schedule(int64_t step, int64_t total, int64_t warmup, float lr);

#endif
