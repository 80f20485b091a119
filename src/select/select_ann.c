/* What the ANN selectors (hnsw, faiss) share: small candidate sets scored
 * directly, masks as filters, batches of queries. */
#include <stdlib.h>

#include "select/select_internal.h"

/* Score the eligible slots directly when there are at most this many times
 * the beam width: a graph search computes about 4-12 distances per beam
 * slot (measured at M = 32), each dearer than a sequential scan's. */
#define ANN_BRUTE_FACTOR 4

int select_ann_init(select_ann *a, const selector_params *p) {
    a->d = p->d_search;
    a->score = p->score;
    a->f16 = p->f16_keys != 0;
    return (a->qn = malloc((size_t)a->d * sizeof(float))) != NULL;
}

void select_ann_free(select_ann *a) {
    free(a->qn);
    free(a->labels);
    free(a->sims);
    select_scratch_free(&a->sc);
}

static int mask_filter(void *ctx, int64_t label) { return select_mask_allows(ctx, (int)label); }

int select_ann_query(selector *s, select_ann *a, const float *q_search, int k, const select_mask *m, int32_t *out) {
    if (!q_search || !a->ix || a->count == 0) return 0;
    int n_elig = select_mask_count(m, a->count);
    if (n_elig == 0) return 0;
    select_prepare(a->qn, q_search, a->d, a->score);
    const int efw = select_filtered_ef(s->params.hnsw_ef_search, a->count, n_elig), width = efw > k ? efw : k;
    if (n_elig <= ANN_BRUTE_FACTOR * width) {
        const kernels *K = kernels_get();
        select_rows rows = {.d = a->d, .q = a->qn, .dot = a->f16 ? K->gather_dot_f16 : K->gather_dot_f32,
                            .row_bytes = (size_t)a->d * (a->f16 ? sizeof(uint16_t) : sizeof(float))};
        rows.base = a->vectors(a->ix, &rows.stride);
        return select_scan_topk(s, &rows, a->count, m, k, 1, &a->sc, out);
    }
    if (k > a->res_cap) {
        int64_t *l = select_query_realloc(s, a->labels, (size_t)k * sizeof(int64_t));
        if (l) a->labels = l;
        float *f = select_query_realloc(s, a->sims, (size_t)k * sizeof(float));
        if (f) a->sims = f;
        if (!l || !f) return -1;
        a->res_cap = k;
    }
    int got = a->search(a->ix, a->qn, k, efw, mask_filter, (void *)m, a->labels, a->sims, &s->stats.n_visited,
                        &s->stats.bytes_read);
    /* a poorly connected eligible region can still starve the beam: one wider retry */
    if (got >= 0 && got < k && got < n_elig)
        got = a->search(a->ix, a->qn, k, 4 * width, mask_filter, (void *)m, a->labels, a->sims, &s->stats.n_visited,
                        &s->stats.bytes_read);
    if (got < 0) return -1; /* the index ran out of memory */
    int n = 0;
    for (int i = 0; i < got; i++)
        if (select_mask_allows(m, (int)a->labels[i])) out[n++] = (int32_t)a->labels[i];
    return n;
}

int select_ann_query_batch(selector *s, select_ann *a, int n, const float *q_search, int k, const select_mask *m,
                           int32_t *out, int *got, int n_threads) {
    int failed = 0;
    int64_t visited = 0;
    uint64_t bytes = 0;
#pragma omp parallel num_threads(n_threads) reduction(+ : visited, bytes)
    {
        selector view = *s; /* the base only: its parameters, test hook and counters of its own */
        memset(&view.stats, 0, sizeof view.stats);
        select_ann mine = *a; /* the same index; scratch of its own */
        mine.labels = NULL;
        mine.sims = NULL;
        mine.res_cap = 0;
        memset(&mine.sc, 0, sizeof mine.sc);
        mine.qn = select_query_realloc(s, NULL, (size_t)a->d * sizeof(float));
#pragma omp for schedule(dynamic, 8)
        for (int i = 0; i < n; i++) {
            got[i] = mine.qn && q_search ? select_ann_query(&view, &mine, q_search + (size_t)i * a->d, k, &m[i],
                                                            out + (size_t)i * k)
                                         : (q_search ? -1 : 0);
            if (got[i] < 0) {
#pragma omp atomic write
                failed = 1;
            }
        }
        visited += view.stats.n_visited;
        bytes += view.stats.bytes_read;
        free(mine.qn);
        free(mine.labels);
        free(mine.sims);
        select_scratch_free(&mine.sc);
    }
    s->stats.n_visited += visited;
    s->stats.bytes_read += bytes;
    return failed ? -1 : 0;
}
