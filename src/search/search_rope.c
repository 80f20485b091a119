/* The rotary part of the search space (search_rope.h). */
#include "search/search_rope.h"

#include <math.h>

#include "base/error.h"

subq_status search_rope_check(const search_rope *r, int d_search, const char *what, subq_error *err) {
    const int cap = d_search < SEARCH_ROPE_MAX_DIMS ? d_search : SEARCH_ROPE_MAX_DIMS;
    if (r->n_rot < 0 || r->n_rot > cap || r->n_rot % 2)
        return subq_fail(err, SUBQ_ERR_ARG, "%s: rotated dims %d must be even and in [0, %d] (d_search %d)", what,
                         r->n_rot, cap, d_search);
    if (r->n_rot && !(isfinite(r->base) && r->base > 1.0))
        return subq_fail(err, SUBQ_ERR_ARG, "%s: rotation base %g must be finite and > 1", what, r->base);
    if (r->n_rot && !(isfinite(r->scale) && r->scale > 0.0))
        return subq_fail(err, SUBQ_ERR_ARG, "%s: position scale %g must be finite and > 0", what, r->scale);
    return SUBQ_OK;
}

int search_rope_same(const search_rope *x, const search_rope *y) {
    if (x->n_rot != y->n_rot) return 0;
    return x->n_rot == 0 || (x->base == y->base && x->scale == y->scale);
}

void search_rope_rotate(const search_rope *r, int d_search, const int32_t *pos, int n, float *a, float *b,
                        int inverse) {
    const int half = r->n_rot / 2, o = d_search - r->n_rot;
    if (half <= 0) return;
    /* freq_i = base^(-2i / n_rot), once per call */
    double freq[SEARCH_ROPE_MAX_DIMS / 2];
    for (int i = 0; i < half; i++) freq[i] = pow(r->base, -2.0 * i / r->n_rot);
    const double sign = inverse ? -1.0 : 1.0;
    for (int t = 0; t < n; t++) {
        const double p = (double)pos[t] * r->scale;
        float *rows[2] = {a ? a + (size_t)t * d_search + o : NULL, b ? b + (size_t)t * d_search + o : NULL};
        for (int i = 0; i < half; i++) {
            const double theta = p * freq[i], c = cos(theta), s = sign * sin(theta);
            for (int w = 0; w < 2; w++) {
                float *x = rows[w];
                if (!x) continue;
                const double x0 = x[2 * i], x1 = x[2 * i + 1];
                x[2 * i] = (float)(x0 * c - x1 * s);
                x[2 * i + 1] = (float)(x0 * s + x1 * c);
            }
        }
    }
}
