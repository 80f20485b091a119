/* Thin C interface over hnswlib's HierarchicalNSW<float> (header-only C++,
 * Debian libhnswlib-dev), used by the hnsw selector. Vectors are expected to
 * be L2-normalised: the space is inner product, distance = 1 - a.b.
 * Labels are the caller's cache slots, which equal the insertion order.
 * No C++ exception crosses this interface: every call catches everything
 * and returns a status (0 ok, 1 out of memory, 2 other failure) with a
 * message in msg. */
#ifndef SUBQ_HNSW_SHIM_H
#define SUBQ_HNSW_SHIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hnsw_shim hnsw_shim;

/* Filter for searches: nonzero if `label` may be returned. */
typedef int (*select_filter_fn)(void *ctx, int64_t label);

int hnsw_shim_new(int dim, int m, int ef_construction, uint64_t seed, size_t capacity, int use_avx2,
                  hnsw_shim **out, char *msg, size_t msg_cap);
void hnsw_shim_free(hnsw_shim *h);
/* Insert rows x[0..n) with labels label0 .. label0+n-1 (grows the capacity
 * geometrically; the graph is never rebuilt). */
int hnsw_shim_add(hnsw_shim *h, const float *x, int n, int64_t label0, char *msg, size_t msg_cap);
size_t hnsw_shim_count(const hnsw_shim *h);
/* Up to k labels (best first) with similarity a.b, among those the filter
 * accepts (all if filter is NULL), by a beam search of width max(ef, k) on
 * the bottom layer in which rejected nodes are traversed but never returned
 * (hnswlib >= 0.7's filter semantics). Adds the distance computations to
 * *n_dist. Returns the count, or -1 on failure. */
int hnsw_shim_search(const hnsw_shim *h, const float *q, int k, int ef, select_filter_fn filter, void *ctx,
                     int64_t *labels, float *sims, int64_t *n_dist);
/* The stored vector of insertion index 0 and the distance in floats between
 * consecutive ones (valid until the next add). */
const float *hnsw_shim_vectors(const hnsw_shim *h, size_t *stride);
/* Memory held by the index (vectors, graph, label map, visited lists). */
size_t hnsw_shim_bytes(const hnsw_shim *h);

#ifdef __cplusplus
}
#endif

#endif
