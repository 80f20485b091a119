/* HNSW graphs saved without their vectors (layout in hnsw_graph.h). */
#include "select/hnsw_graph.h"

#include <stdlib.h>
#include <string.h>

#include "base/crc32c.h"
#include "base/error.h"

static const char MAGIC[8] = {'s', 'u', 'b', 'q', 'H', 'N', 'S', 'W'};

/* header offsets */
enum { H_VERSION = 8, H_M = 12, H_EFC = 16, H_DIM = 20, H_GDIM = 24, H_ELEM = 28, H_SEED = 32, H_COUNT = 40,
       H_UPPER = 48, H_CRC_VECTORS = 56, H_CRC_GRAPH = 60 };

static uint32_t get32(const unsigned char *h, int at) {
    uint32_t v;
    memcpy(&v, h + at, sizeof v);
    return v;
}

static uint64_t get64(const unsigned char *h, int at) {
    uint64_t v;
    memcpy(&v, h + at, sizeof v);
    return v;
}

static void put32(unsigned char *h, int at, uint32_t v) { memcpy(h + at, &v, sizeof v); }
static void put64(unsigned char *h, int at, uint64_t v) { memcpy(h + at, &v, sizeof v); }

/* CRC-32C of the count stored vectors of ix, in insertion order */
static uint32_t vectors_crc(const hnsw_shim *ix, size_t count, size_t vector_bytes, size_t elem_bytes) {
    size_t stride = 0;
    const char *base = hnsw_shim_vectors(ix, &stride);
    uint32_t crc = 0;
    for (size_t i = 0; i < count; i++) crc = crc32c(crc, base + i * stride * elem_bytes, vector_bytes);
    return crc;
}

subq_status hnsw_graph_save(const hnsw_shim *ix, const hnsw_graph_params *p, void **out, size_t *bytes,
                            subq_error *err) {
    *out = NULL;
    *bytes = 0;
    const size_t count = hnsw_shim_count(ix), upper = hnsw_shim_upper_words(ix), words0 = 1 + 2 * (size_t)p->m;
    const size_t n = HNSW_GRAPH_HEADER + (count + count * words0 + upper) * sizeof(uint32_t);
    unsigned char *b = malloc(n);
    if (!b) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory for an HNSW graph of %zu elements", count);
    uint32_t *levels = (uint32_t *)(b + HNSW_GRAPH_HEADER), *level0 = levels + count;
    hnsw_shim_save_graph(ix, levels, level0, level0 + count * words0);
    memcpy(b, MAGIC, sizeof MAGIC);
    put32(b, H_VERSION, HNSW_GRAPH_VERSION);
    put32(b, H_M, p->m);
    put32(b, H_EFC, p->ef_construction);
    put32(b, H_DIM, p->dim);
    put32(b, H_GDIM, p->graph_dim);
    put32(b, H_ELEM, p->elem_bytes);
    put64(b, H_SEED, p->seed);
    put64(b, H_COUNT, count);
    put64(b, H_UPPER, upper);
    put32(b, H_CRC_VECTORS, vectors_crc(ix, count, (size_t)p->dim * p->elem_bytes, p->elem_bytes));
    put32(b, H_CRC_GRAPH, crc32c(0, b + HNSW_GRAPH_HEADER, n - HNSW_GRAPH_HEADER));
    *out = b;
    *bytes = n;
    return SUBQ_OK;
}

/* The n ids of a link list below count and, in an upper list of `level`,
 * of elements that reach it: hnswlib reads their lists of that level. */
static int links_ok(const uint32_t *ids, uint32_t n, size_t count, const uint32_t *levels, uint32_t level) {
    for (uint32_t j = 0; j < n; j++)
        if (ids[j] >= count || levels[ids[j]] < level) return 0;
    return 1;
}

subq_status hnsw_graph_check(const void *bytes, size_t n_bytes, const hnsw_graph_params *p, size_t max_count,
                             hnsw_graph_view *out, subq_error *err) {
    const unsigned char *h = bytes;
    memset(out, 0, sizeof *out);
    if (n_bytes < HNSW_GRAPH_HEADER || memcmp(h, MAGIC, sizeof MAGIC))
        return subq_fail(err, SUBQ_ERR_FORMAT, "not an HNSW graph of subq");
    if ((uintptr_t)h % sizeof(uint32_t))
        return subq_fail(err, SUBQ_ERR_ARG, "an HNSW graph must be read from 4-byte aligned memory");
    if (get32(h, H_VERSION) != HNSW_GRAPH_VERSION)
        return subq_fail(err, SUBQ_ERR_UNSUPPORTED, "HNSW graph version %u; this build reads version %d",
                         get32(h, H_VERSION), HNSW_GRAPH_VERSION);
    const hnsw_graph_params g = {get32(h, H_M), get32(h, H_EFC), get32(h, H_DIM), get32(h, H_GDIM),
                                 get32(h, H_ELEM), get64(h, H_SEED)};
    if (g.m != p->m || g.ef_construction != p->ef_construction || g.seed != p->seed)
        return subq_fail(err, SUBQ_ERR_MISMATCH, "the HNSW graph was built with M %u, efConstruction %u, seed %llu; "
                         "this index takes M %u, efConstruction %u, seed %llu", g.m, g.ef_construction,
                         (unsigned long long)g.seed, p->m, p->ef_construction, (unsigned long long)p->seed);
    if (g.dim != p->dim || g.graph_dim != p->graph_dim || g.elem_bytes != p->elem_bytes)
        return subq_fail(err, SUBQ_ERR_MISMATCH, "the HNSW graph holds vectors of %u elements of %u bytes (graph "
                         "over %u); this index %u of %u (over %u)", g.dim, g.elem_bytes, g.graph_dim, p->dim,
                         p->elem_bytes, p->graph_dim);
    const uint64_t count = get64(h, H_COUNT), upper = get64(h, H_UPPER), words0 = 1 + 2 * (uint64_t)p->m;
    if (count > max_count)
        return subq_fail(err, SUBQ_ERR_RANGE, "the HNSW graph has %llu elements, more than the %zu keys given",
                         (unsigned long long)count, max_count);
    /* words in the file, then what the header says: each compared before it is multiplied further */
    const uint64_t avail = (n_bytes - HNSW_GRAPH_HEADER) / sizeof(uint32_t);
    if ((n_bytes - HNSW_GRAPH_HEADER) % sizeof(uint32_t) || count > avail / (1 + words0) ||
        upper != avail - count * (1 + words0))
        return subq_fail(err, SUBQ_ERR_FORMAT, "the HNSW graph is %zu bytes, not what its header says (%llu "
                         "elements, %llu words of upper links)", n_bytes, (unsigned long long)count,
                         (unsigned long long)upper);
    if (crc32c(0, h + HNSW_GRAPH_HEADER, n_bytes - HNSW_GRAPH_HEADER) != get32(h, H_CRC_GRAPH))
        return subq_fail(err, SUBQ_ERR_FORMAT, "the HNSW graph is damaged (checksum)");
    const uint32_t *levels = (const uint32_t *)(h + HNSW_GRAPH_HEADER), *level0 = levels + count;
    const uint32_t *up = level0 + count * words0;
    uint64_t need = 0;
    for (uint64_t i = 0; i < count; i++) {
        if (levels[i] > HNSW_GRAPH_MAX_LEVEL)
            return subq_fail(err, SUBQ_ERR_FORMAT, "HNSW graph element %llu has level %u (at most %d)",
                             (unsigned long long)i, levels[i], HNSW_GRAPH_MAX_LEVEL);
        need += (uint64_t)levels[i] * (1 + p->m);
    }
    if (need != upper)
        return subq_fail(err, SUBQ_ERR_FORMAT, "the HNSW graph's levels need %llu words of upper links, it has %llu",
                         (unsigned long long)need, (unsigned long long)upper);
    const uint32_t *list = up;
    for (uint64_t i = 0; i < count; i++) {
        const uint32_t *l0 = level0 + i * words0;
        if (l0[0] > 2 * p->m || !links_ok(l0 + 1, l0[0], count, levels, 0))
            return subq_fail(err, SUBQ_ERR_FORMAT, "HNSW graph element %llu has a bad level-0 link list",
                             (unsigned long long)i);
        for (uint32_t l = 1; l <= levels[i]; l++, list += 1 + p->m)
            if (list[0] > p->m || !links_ok(list + 1, list[0], count, levels, l))
                return subq_fail(err, SUBQ_ERR_FORMAT, "HNSW graph element %llu has a bad link list at level %u",
                                 (unsigned long long)i, l);
    }
    *out = (hnsw_graph_view){.count = count, .crc_vectors = get32(h, H_CRC_VECTORS), .levels = levels,
                             .level0 = level0, .upper = up};
    return SUBQ_OK;
}

subq_status hnsw_graph_load(hnsw_shim *ix, const hnsw_graph_view *v, const hnsw_graph_params *p,
                            const void *(*vector)(void *ctx, size_t i), void *ctx, subq_error *err) {
    char msg[256];
    const int c = hnsw_shim_load_graph(ix, v->count, v->levels, v->level0, v->upper, vector, ctx, msg, sizeof msg);
    if (c) return subq_fail(err, c == 1 ? SUBQ_ERR_NOMEM : SUBQ_ERR_MISMATCH, "%s", msg);
    if (vectors_crc(ix, v->count, (size_t)p->dim * p->elem_bytes, p->elem_bytes) != v->crc_vectors)
        return subq_fail(err, SUBQ_ERR_MISMATCH, "the HNSW graph was built over other search keys");
    return SUBQ_OK;
}
