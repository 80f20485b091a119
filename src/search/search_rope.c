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

/* search_rope_rotate over blocks of rows (a pool chunk each) */
#define ROTATE_ROWS 64

typedef struct rotate_job {
    const search_rope *r;
    const int32_t *pos;
    float *a, *b;
    int n, d_search, heads_a, heads_b, inverse;
} rotate_job;

static void rotate_block(void *ctx, int blk, int thread) {
    (void)thread;
    const rotate_job *j = ctx;
    const int t0 = blk * ROTATE_ROWS, n = j->n - t0 < ROTATE_ROWS ? j->n - t0 : ROTATE_ROWS;
    const size_t oa = (size_t)t0 * j->heads_a * j->d_search, ob = (size_t)t0 * j->heads_b * j->d_search;
    search_rope_rotate_heads(j->r, j->d_search, j->pos + t0, n, j->a ? j->a + oa : NULL, j->heads_a,
                             j->b ? j->b + ob : NULL, j->heads_b, j->inverse);
}

void search_rope_rotate_rows_heads(const search_rope *r, int d_search, const int32_t *pos, int n, float *a,
                                   int heads_a, float *b, int heads_b, int inverse, pool *p) {
    if (r->n_rot <= 0 || n <= 0) return;
    const int blocks = (n + ROTATE_ROWS - 1) / ROTATE_ROWS;
    rotate_job j = {.r = r, .pos = pos, .a = a, .b = b, .n = n, .d_search = d_search, .heads_a = heads_a,
                    .heads_b = heads_b, .inverse = inverse};
    pool_run(blocks > 1 ? p : NULL, blocks, rotate_block, &j);
}

void search_rope_rotate_rows(const search_rope *r, int d_search, const int32_t *pos, int n, float *a, float *b,
                             int inverse, pool *p) {
    search_rope_rotate_rows_heads(r, d_search, pos, n, a, 1, b, 1, inverse, p);
}

int search_rope_same(const search_rope *x, const search_rope *y) {
    if (x->n_rot != y->n_rot) return 0;
    return x->n_rot == 0 || (x->base == y->base && x->scale == y->scale);
}

void search_rope_rotate(const search_rope *r, int d_search, const int32_t *pos, int n, float *a, float *b,
                        int inverse) {
    search_rope_rotate_heads(r, d_search, pos, n, a, 1, b, 1, inverse);
}

void search_rope_rotate_heads(const search_rope *r, int d_search, const int32_t *pos, int n, float *a, int heads_a,
                              float *b, int heads_b, int inverse) {
    const int half = r->n_rot / 2, o = d_search - r->n_rot;
    if (half <= 0) return;
    /* freq_i = base^(-2i / n_rot) = step^i, once per call: one pow, not one
     * per pair (a decode step rotates one row; the products' relative error,
     * under 1e-13, turns the angle at position 10^6 by under 1e-7) */
    double freq[SEARCH_ROPE_MAX_DIMS / 2];
    const double step = pow(r->base, -2.0 / r->n_rot);
    freq[0] = 1.0;
    for (int i = 1; i < half; i++) freq[i] = freq[i - 1] * step;
    const double sign = inverse ? -1.0 : 1.0;
    const size_t row_a = (size_t)heads_a * d_search, row_b = (size_t)heads_b * d_search;
    for (int t = 0; t < n; t++) {
        const double p = (double)pos[t] * r->scale;
        for (int i = 0; i < half; i++) {
            double c, s;
            sincos(p * freq[i], &s, &c);
            s *= sign;
            /* the same turn for every head's rows of token t, in a and in b */
            for (int w = 0; w < heads_a + heads_b; w++) {
                float *x = w < heads_a ? (a ? a + t * row_a + (size_t)w * d_search + o : NULL)
                                       : (b ? b + t * row_b + (size_t)(w - heads_a) * d_search + o : NULL);
                if (!x) continue;
                const double x0 = x[2 * i], x1 = x[2 * i + 1];
                x[2 * i] = (float)(x0 * c - x1 * s);
                x[2 * i + 1] = (float)(x0 * s + x1 * c);
            }
        }
    }
}
