/* Thin C interface over FAISS's IndexHNSWFlat (Debian libfaiss-dev, 1.7.3),
 * used by the faiss selector; compiled only when SUBQ_HAVE_FAISS is defined.
 * Inner-product metric (on L2-normalised vectors for cosine); ids are insertion indices,
 * which equal the caller's cache slots. No C++ exception crosses this
 * interface: calls return 0 ok, 1 out of memory, 2 other failure (message in
 * msg). */
#ifndef SUBQ_FAISS_SHIM_H
#define SUBQ_FAISS_SHIM_H

#include <stddef.h>
#include <stdint.h>

#include "select/hnsw_shim.h" /* select_filter_fn */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct faiss_shim faiss_shim;

int faiss_shim_new(int dim, int m, int ef_construction, uint64_t seed, int use_avx2, faiss_shim **out, char *msg,
                   size_t msg_cap);
void faiss_shim_free(faiss_shim *f);
int faiss_shim_add(faiss_shim *f, const float *x, int n, char *msg, size_t msg_cap);
size_t faiss_shim_count(const faiss_shim *f);
/* Forget every vector (a new sequence); the graph restarts empty. */
int faiss_shim_reset(faiss_shim *f, uint64_t seed);
/* Up to k ids (best first) with similarity a.b among those the filter accepts
 * (an IDSelector inside FAISS's HNSW search), beam width max(ef, k). Adds the
 * distance computations to *n_dist and the bytes they read to *n_bytes (each
 * vector and the link entry that led to it; FAISS does not count the rest
 * of the link lists). Returns the count, or -1 on failure.
 * Not const: the search uses the index's visited table (one search at a time). */
int faiss_shim_search(faiss_shim *f, const float *q, int k, int ef, select_filter_fn filter, void *ctx,
                      int64_t *labels, float *sims, int64_t *n_dist, uint64_t *n_bytes);
/* The stored vector of id 0 and the distance in floats between consecutive
 * ones (dim: the rows are contiguous; valid until the next add). */
const float *faiss_shim_vectors(const faiss_shim *f, size_t *stride);
size_t faiss_shim_bytes(const faiss_shim *f);

#ifdef __cplusplus
}
#endif

#endif
