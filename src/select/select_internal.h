/* Shared pieces of the selectors: constructors of each kind, eligible-slot
 * ranges, a bounded top-k heap, L2 normalisation and the row-dot scan
 * kernels used by exact (and by the ANN selectors' small-set fallback).
 * Internal to src/select. */
#ifndef SUBQ_SELECT_INTERNAL_H
#define SUBQ_SELECT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "select/selector.h"

/* One constructor per kind; each allocates a struct whose first member is
 * the `selector` base and fills ops. params and env are already validated. */
subq_status select_exact_new(const selector_params *p, const selector_env *env, selector **out, subq_error *err);
subq_status select_hnsw_new(const selector_params *p, const selector_env *env, selector **out, subq_error *err);
subq_status select_faiss_new(const selector_params *p, const selector_env *env, selector **out, subq_error *err);
subq_status select_quest_new(const selector_params *p, const selector_env *env, selector **out, subq_error *err);
subq_status select_oracle_new(const selector_params *p, const selector_env *env, selector **out, subq_error *err);
subq_status select_window_new(const selector_params *p, const selector_env *env, selector **out, subq_error *err);

/* Every selector takes keys strictly in slot order: slot0 must equal the
 * number of slots appended since the last reset (so internal ids, ANN labels
 * and cache slots coincide). */
subq_status select_check_append(const selector *s, int count, int n, int slot0, subq_error *err);
/* A truncation keeps at most the `count` slots the selector holds. */
subq_status select_check_truncate(const selector *s, int count, int n_keep, subq_error *err);
/* Truncation by rebuilding (index kinds without deletion): the kept
 * stored keys through ops->get_keys, ops->reset, ops->put_keys. */
subq_status select_truncate_rebuild(selector *s, int count, int n_keep, subq_error *err);
/* Copy n stored search keys (unit rows of d floats `stride` apart) into
 * dst [n][d], after checking n against the `count` held. */
subq_status select_copy_keys(const selector *s, int count, const float *base, size_t stride, int d, int n,
                             float *dst, subq_error *err);

/* [0, min(n, m->n_slots)) minus the two excluded ranges of m, as at most 3
 * sorted, disjoint, non-empty ranges [lo[i], hi[i]). Returns the count.
 * Slots inside them are eligible iff the segment test also passes. */
int select_mask_ranges(const select_mask *m, int n, int lo[3], int hi[3]);

/* Number of eligible slots below n (the segment test costs one int compare
 * per slot of the ranges; without segments it is O(1)). */
int select_mask_count(const select_mask *m, int n);

/* Bounded heap of the k best (score, slot) pairs seen so far. The root is
 * the worst kept pair, so a new pair costs one compare unless it enters.
 * Order: higher score first, equal scores -> lower slot first. */
typedef struct select_heap {
    float *score;
    int32_t *slot;
    int n, k;
} select_heap;

void select_heap_push(select_heap *h, float score, int32_t slot);
/* Heap-sort the kept pairs best-first into out (and scores, if not NULL);
 * returns the count. The heap is empty afterwards. */
int select_heap_take(select_heap *h, int32_t *out, float *scores);

/* Growable scratch owned by a selector (queries cannot report errors: on
 * allocation failure a query returns no candidates). */
typedef struct select_scratch {
    float *f;
    int32_t *i;
    size_t cap_f, cap_i;
} select_scratch;

int select_scratch_f(select_scratch *s, size_t n);   /* 0 on failure */
int select_scratch_i(select_scratch *s, size_t n);
void select_scratch_free(select_scratch *s);

/* dst = src / ||src|| (zero vectors stay zero). */
void select_normalize(float *dst, const float *src, int d);

/* out[i] = q . row(idx[i]) for rows of d elements `stride` elements apart
 * (f32 or f16 storage). AVX2+FMA+F16C or scalar; selectors pick the kernel
 * once when created (cpuid is slow under a hypervisor). */
typedef void (*select_dot_rows_fn)(const float *q, const void *base, size_t stride, int d, const int32_t *idx,
                                   int n, float *out);
select_dot_rows_fn select_dot_rows_f32(void);
select_dot_rows_fn select_dot_rows_f16(void);

/* Exact top-k over the eligible slots below n of a row store (the exact
 * selector, and the ANN selectors when few slots are eligible). Writes up
 * to k slots best-first; adds the rows scored to *n_scored. Uses scratch
 * (needs k floats, k + SELECT_BLOCK int32 and SELECT_BLOCK floats). */
#define SELECT_BLOCK 256
int select_scan_topk(const float *q, const void *base, size_t stride, int d, select_dot_rows_fn dot, int n,
                     const select_mask *m, int k, select_scratch *sc, int32_t *out, int64_t *n_scored);

/* select_scan_topk over n_threads contiguous parts of the slots, each with
 * its own heap, merged at the end (same result as one scan up to ties). */
int select_scan_topk_parallel(const float *q, const void *base, size_t stride, int d, select_dot_rows_fn dot, int n,
                              const select_mask *m, int k, int n_threads, int32_t *out, int64_t *n_scored);

/* Beam width of a filtered ANN search: ef when every indexed slot is
 * eligible, widened by n / n_elig (at most 8x) otherwise. Accepted nodes are
 * met at that rate along the walk, and with the stock width the search stops
 * before it reaches the eligible neighbours that lie in the next cluster
 * (measured: recall@64 0.92 -> 0.99 on a one-third document mask). */
static inline int select_filtered_ef(int ef, int n, int n_elig) {
    double w = n_elig > 0 ? (double)ef * n / n_elig : ef;
    return w > 8.0 * ef ? 8 * ef : (int)w;
}

/* Quest's upper bound of the head-mean q.k over the keys of `page`, from its
 * stored bounds (tests check it against every key of the page). s must be a
 * quest selector. */
float select_quest_page_score(selector *s, const float *q_native, int page);

#endif
