/* Helpers shared by the selectors: key storage checks and copies, mask
 * ranges, per-query scratch, score preparation. */
#include <math.h>
#include <stdlib.h>

#include "base/error.h"
#include "select/select_internal.h"


subq_status select_check_append(const selector *s, int count, int n, int slot0, subq_error *err) {
    const char *name = selector_kind_name(s->params.plan.selector);
    if (n < 0) return subq_fail(err, SUBQ_ERR_ARG, "selector %s: negative key count %d", name, n);
    if (slot0 != count)
        return subq_fail(err, SUBQ_ERR_ARG,
                         "selector %s (layer %d): keys must be appended in slot order (expected slot %d, got %d; "
                         "reset the selector for a new sequence)",
                         name, s->env.layer, count, slot0);
    return SUBQ_OK;
}

subq_status select_check_truncate(const selector *s, int count, int n_keep, subq_error *err) {
    if (n_keep < 0 || n_keep > count)
        return subq_fail(err, SUBQ_ERR_RANGE, "selector %s (layer %d): cannot keep %d of its %d slots",
                         selector_kind_name(s->params.plan.selector), s->env.layer, n_keep, count);
    return SUBQ_OK;
}

subq_status select_truncate_count(const selector *s, int *count, int n_keep, subq_error *err) {
    subq_status rc = select_check_truncate(s, *count, n_keep, err);
    if (!rc) *count = n_keep;
    return rc;
}

subq_status select_truncate_rebuild(selector *s, int count, int n_keep, subq_error *err) {
    subq_status rc = select_check_truncate(s, count, n_keep, err);
    if (rc || n_keep == count) return rc;
    const int d = s->params.d_search;
    float *keep = n_keep > 0 ? malloc((size_t)n_keep * d * sizeof(float)) : NULL;
    if (n_keep > 0 && !keep)
        return subq_fail(err, SUBQ_ERR_NOMEM, "selector %s: out of memory for %d keys",
                         selector_kind_name(s->params.plan.selector), n_keep);
    rc = s->ops->get_keys(s, n_keep, keep, err);
    if (!rc) {
        s->ops->reset(s);
        rc = s->ops->put_keys(s, keep, n_keep, 0, err);
    }
    free(keep);
    return rc;
}

subq_status select_copy_keys(const selector *s, int count, const void *base, size_t stride, int d, int f16, int n,
                             float *dst, subq_error *err) {
    if (n < 0 || n > count)
        return subq_fail(err, SUBQ_ERR_RANGE, "selector %s (layer %d): asked for %d keys, it holds %d",
                         selector_kind_name(s->params.plan.selector), s->env.layer, n, count);
    for (int t = 0; t < n; t++) {
        float *y = dst + (size_t)t * d;
        if (f16) {
            const uint16_t *x = (const uint16_t *)base + (size_t)t * stride;
            for (int i = 0; i < d; i++) y[i] = fp16_to_fp32(x[i]);
        } else {
            memcpy(y, (const float *)base + (size_t)t * stride, (size_t)d * sizeof(float));
        }
    }
    return SUBQ_OK;
}

int select_mask_ranges(const select_mask *m, int n, int lo[3], int hi[3]) {
    if (m->n_slots < n) n = m->n_slots;
    /* the two excluded ranges, in order of their start (empty ones dropped) */
    int x0[2], x1[2], nx = 0;
    if (m->ex0_hi > m->ex0_lo) { x0[nx] = m->ex0_lo; x1[nx] = m->ex0_hi; nx++; }
    if (m->ex1_hi > m->ex1_lo) { x0[nx] = m->ex1_lo; x1[nx] = m->ex1_hi; nx++; }
    if (nx == 2 && x0[1] < x0[0]) {
        int t0 = x0[0], t1 = x1[0];
        x0[0] = x0[1]; x1[0] = x1[1];
        x0[1] = t0; x1[1] = t1;
    }
    /* walk [0, n): emit the gap before each excluded range, then jump past it */
    int cur = 0, nr = 0;
    for (int i = 0; i < nx; i++) {
        int end = x0[i] < n ? x0[i] : n;
        if (end > cur) { lo[nr] = cur; hi[nr] = end; nr++; }
        if (x1[i] > cur) cur = x1[i];
    }
    if (cur < n) { lo[nr] = cur; hi[nr] = n; nr++; }
    return nr;
}

int select_mask_count(const select_mask *m, int n) {
    int lo[3], hi[3], nr = select_mask_ranges(m, n, lo, hi), c = 0;
    for (int r = 0; r < nr; r++) {
        if (!m->seg) {
            c += hi[r] - lo[r];
            continue;
        }
        for (int j = lo[r]; j < hi[r]; j++) c += m->seg[j] == m->query_seg;
    }
    return c;
}

/* ---- scratch -------------------------------------------------------------- */

void *select_query_realloc(const selector *s, void *p, size_t bytes) {
    return s->fail_alloc ? NULL : realloc(p, bytes);
}

/* Grow *p to at least n elements of `elem` bytes; 0 on failure (*p kept). */
static int scratch_grow(const selector *s, void **p, size_t *cap, size_t n, size_t elem) {
    if (n <= *cap) return 1;
    void *q = select_query_realloc(s, *p, n * elem);
    if (!q) return 0;
    *p = q;
    *cap = n;
    return 1;
}

int select_scratch_f(const selector *s, select_scratch *sc, size_t n) {
    return scratch_grow(s, (void **)&sc->f, &sc->cap_f, n, sizeof(float));
}

int select_scratch_i(const selector *s, select_scratch *sc, size_t n) {
    return scratch_grow(s, (void **)&sc->i, &sc->cap_i, n, sizeof(int32_t));
}

int select_scratch_u(const selector *s, select_scratch *sc, size_t n) {
    return scratch_grow(s, (void **)&sc->u, &sc->cap_u, n, sizeof(uint64_t));
}

void select_scratch_free(select_scratch *sc) {
    free(sc->f);
    free(sc->i);
    free(sc->u);
    *sc = (select_scratch){0};
}

void select_normalize(float *dst, const float *src, int d) {
    /* ||x||^2 in double: search vectors can be large before normalisation */
    double ss = 0.0;
    for (int i = 0; i < d; i++) ss += (double)src[i] * src[i];
    float inv = ss > 0.0 ? (float)(1.0 / sqrt(ss)) : 0.0f;
    for (int i = 0; i < d; i++) dst[i] = src[i] * inv;
}

void select_prepare(float *dst, const float *src, int d, subq_score score) {
    if (score == SUBQ_SCORE_COSINE) select_normalize(dst, src, d);
    else if (dst != src) memcpy(dst, src, (size_t)d * sizeof(float));
}

