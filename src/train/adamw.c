#include "train/adamw.h"

#include <math.h>

void adamw_update(float *w, const float *g, float *m, float *v, size_t n, const adamw_params *p, float lr,
                  int64_t t) {
    const double bc1 = 1.0 - pow((double)p->beta1, (double)t), bc2 = 1.0 - pow((double)p->beta2, (double)t);
    const float b1 = p->beta1, b2 = p->beta2;
    for (size_t i = 0; i < n; i++) {
        m[i] = b1 * m[i] + (1.0f - b1) * g[i];
        v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
        float mhat = (float)(m[i] / bc1), vhat = (float)(v[i] / bc2);
        w[i] -= lr * (mhat / (sqrtf(vhat) + p->eps) + p->weight_decay * w[i]);
    }
}

float lr_schedule(int64_t step, int64_t total, int64_t warmup, float lr) {
    if (step < warmup) return lr * (float)(step + 1) / (float)warmup;
    if (total <= warmup) return lr;
    double frac = (double)(step - warmup) / (double)(total - warmup);
    if (frac > 1.0) frac = 1.0;
    return (float)(lr * 0.5 * (1.0 + cos(3.14159265358979323846 * frac)));
}
