/* Thin C interface over hnswlib's HierarchicalNSW<float> (header-only C++,
 * Debian libhnswlib-dev), used by the hnsw selector. The space is inner
 * product, distance = 1 - a.b (L2-normalised vectors make it cosine; a.b
 * over the first graph_dim elements, see hnsw_shim_new), over
 * vectors stored as f32 or f16, with the caller's kernels: `dist` between
 * two stored vectors (graph construction), `gather` from an f32 query to
 * stored vectors (searches). Labels are the caller's cache slots, which
 * equal the insertion order.
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
/* a.b of two stored vectors of dim elements */
typedef float (*hnsw_dot_fn)(const void *a, const void *b, int dim);
/* out[i] = q . row(idx[i]) for stored rows `stride` elements apart from
 * base (kernels_gather_dot_fn of src/kernels) */
typedef void (*hnsw_gather_fn)(const float *q, const void *base, size_t stride, int d, const int32_t *idx, int n,
                               float *out);

/* Vectors of dim elements, elem_bytes 4 (f32) or 2 (f16) each; the graph's
 * distances and searches use their first graph_dim (<= dim) elements only:
 * the rest are stored beside them for the caller (hnsw_shim_vectors). */
int hnsw_shim_new(int dim, int graph_dim, int elem_bytes, hnsw_dot_fn dot, hnsw_gather_fn gather, int m,
                  int ef_construction, uint64_t seed, size_t capacity, hnsw_shim **out, char *msg, size_t msg_cap);
void hnsw_shim_free(hnsw_shim *h);
/* Insert rows x[0..n) (stored form: dim elements of elem_bytes each) with
 * labels label0 .. label0+n-1 (grows the capacity geometrically; the graph
 * is never rebuilt). */
int hnsw_shim_add(hnsw_shim *h, const void *x, int n, int64_t label0, char *msg, size_t msg_cap);
size_t hnsw_shim_count(const hnsw_shim *h);
/* The read-only part of inserting row x with `label` next: its level is
 * drawn and, for a level-0 element, its insert-time search done now; the
 * next hnsw_shim_add of that label and row only links it. It may run beside
 * hnsw_shim_search on another thread (both read the graph only), never
 * beside an add. The graph is the same as without it. 0, or 1 / 2 when the
 * search could not run (the add then does it). */
int hnsw_shim_prepare(hnsw_shim *h, const void *x, int64_t label);
/* Inserts so far that used a search from hnsw_shim_prepare. */
size_t hnsw_shim_linked_ahead(const hnsw_shim *h);
/* Up to k labels (best first) with similarity a.b, among those the filter
 * accepts (all if filter is NULL), by a beam search of width max(ef, k) on
 * the bottom layer in which rejected nodes are traversed but never returned
 * (hnswlib >= 0.7's filter semantics). Adds the distance computations to
 * *n_dist and the bytes of vectors and link lists read to *n_bytes.
 * Returns the count, or -1 on failure. */
int hnsw_shim_search(const hnsw_shim *h, const float *q, int k, int ef, select_filter_fn filter, void *ctx,
                     int64_t *labels, float *sims, int64_t *n_dist, uint64_t *n_bytes);
/* The stored vector of insertion index 0 and the distance in elements
 * between consecutive ones (valid until the next add). */
const void *hnsw_shim_vectors(const hnsw_shim *h, size_t *stride);
/* The graph's size for hnsw_shim_save_graph: its elements and the words
 * of their upper layers' link lists (each list 1 + M words). */
size_t hnsw_shim_upper_words(const hnsw_shim *h);
/* The graph without its vectors, element by element: levels[count]; the
 * level-0 link lists, 1 + 2M words each (a count, then that many element
 * ids); the upper lists, for each element of level L > 0 its lists of
 * levels 1 .. L, 1 + M words each (hnsw_shim_upper_words in all). */
void hnsw_shim_save_graph(const hnsw_shim *h, uint32_t *levels, uint32_t *level0, uint32_t *upper);
/* Into an empty index: the graph hnsw_shim_save_graph gave, over the
 * stored vectors vector(ctx, 0 .. count-1) (each valid until the next
 * call). The caller has checked it (select_hnsw_graph.c: every count
 * within its list, every id below count, an upper list's ids of elements
 * that reach its level); here the levels must be the ones this index's
 * seed draws for count inserts, which also leaves its generator where
 * those inserts would (else 2, "not built with this seed"). Failing, the
 * index must be freed. 0, 1 out of memory, 2 otherwise (msg). */
int hnsw_shim_load_graph(hnsw_shim *h, size_t count, const uint32_t *levels, const uint32_t *level0,
                         const uint32_t *upper, const void *(*vector)(void *ctx, size_t i), void *ctx, char *msg,
                         size_t msg_cap);
/* Memory held by the index (vectors, graph, label map, visited lists). */
size_t hnsw_shim_bytes(const hnsw_shim *h);

#ifdef __cplusplus
}
#endif

#endif
