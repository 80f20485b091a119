/* An HNSW graph saved without its vectors: the hnsw selector's index in a
 * session file or beside a KV file (model/context_indexes.c), so that a
 * resume links its keys again instead of inserting
 * them one by one (5 s of the 4K fixture's resume at 32K, 23 s at 128K).
 * The vectors are not saved: the loader has the search keys and makes them
 * again.
 *
 * Layout (little-endian; 4-byte words after a 64-byte header):
 *   "subqHNSW", u32 version, u32 M, u32 efConstruction, u32 dim (elements
 *   of a stored vector), u32 graph_dim, u32 elem_bytes, u64 seed, u64 count,
 *   u64 upper words, u32 CRC-32C of the count stored vectors, u32 CRC-32C of
 *   everything after the header;
 *   levels[count]; level-0 lists, 1 + 2M words each (a count, then ids);
 *   the upper lists, element by element, levels 1 .. L, 1 + M words each.
 *
 * hnswlib follows links without checking them, so a graph is checked whole
 * before hnswlib sees it (hnsw_graph_check); the checker is C, where the
 * fuzz build instruments it (tests/fuzz/fuzz_hnsw_graph.c). */
#ifndef SUBQ_SELECT_HNSW_GRAPH_H
#define SUBQ_SELECT_HNSW_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#include "select/hnsw_shim.h"
#include "subq.h"

#define HNSW_GRAPH_HEADER 64
#define HNSW_GRAPH_VERSION 1
/* Levels above this are refused: an element reaches level L with
 * probability M^-L, and hnswlib's draw, -ln(u) / ln M with u a double in
 * (0, 1], stays below 38 for any M >= 2. */
#define HNSW_GRAPH_MAX_LEVEL 64

/* What built a graph: a graph is taken only by an index made the same way. */
typedef struct {
    uint32_t m, ef_construction, dim, graph_dim, elem_bytes;
    uint64_t seed;
} hnsw_graph_params;

/* A checked graph inside its bytes. */
typedef struct {
    size_t count;
    uint32_t crc_vectors;
    const uint32_t *levels, *level0, *upper;
} hnsw_graph_view;

/* The graph of ix (count elements) in the layout above, malloc'd into *out. */
subq_status hnsw_graph_save(const hnsw_shim *ix, const hnsw_graph_params *p, void **out, size_t *bytes,
                            subq_error *err);

/* Check bytes (4-byte aligned) as a graph of at most max_count elements made
 * as p says: its size, checksum, levels and every link list. A graph of
 * other parameters is SUBQ_ERR_MISMATCH, of more elements SUBQ_ERR_RANGE,
 * anything else wrong SUBQ_ERR_FORMAT. */
subq_status hnsw_graph_check(const void *bytes, size_t n_bytes, const hnsw_graph_params *p, size_t max_count,
                             hnsw_graph_view *out, subq_error *err);

/* A checked graph into the empty index ix over vector(ctx, i), i < count
 * (stored form, p's dim and elem_bytes), which must be the vectors it was
 * saved with (their CRC).
 * Failing, ix must be freed. */
subq_status hnsw_graph_load(hnsw_shim *ix, const hnsw_graph_view *v, const hnsw_graph_params *p,
                            const void *(*vector)(void *ctx, size_t i), void *ctx, subq_error *err);

#endif
