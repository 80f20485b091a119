/* libFuzzer target: saved HNSW graphs (select/hnsw_graph.h) put back into
 * an hnsw selector (selector_put_index), as a session file or FILE.hnsw
 * beside a KV file hands them over. The header's M (2-16), efConstruction
 * (1-64), seed, dim (1-16, no far scheme), element size and count (up to
 * 512) make the selector; its keys are one-hot rows (stored form as they
 * are, f16 exact) and 3 more than the header counts. Both checksums are made
 * right first, so that inputs reach the link checks and the load: a graph
 * either loads (then a query and an insert run on it) or is refused with
 * one line and leaves the selector empty. Seeds: tests/fuzz/corpus/
 * fuzz_hnsw_graph (make_corpus.py; real graphs, levels as seed 1 draws). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/crc32c.h"
#include "select/hnsw_graph.h"
#include "select/selector.h"

enum { MAX_COUNT = 512, MAX_DIM = 16 };

static uint32_t get32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < HNSW_GRAPH_HEADER || size > (1u << 22)) return 0;
    const uint32_t m = get32(data + 12), efc = get32(data + 16), dim = get32(data + 20), elem = get32(data + 28);
    uint64_t seed, count;
    memcpy(&seed, data + 32, 8);
    memcpy(&count, data + 40, 8);
    if (m < 2 || m > 16 || efc < 1 || efc > 64 || dim < 1 || dim > MAX_DIM || (elem != 2 && elem != 4) ||
        count > MAX_COUNT)
        return 0;
    const int n_keys = (int)count + 3;
    static float keys[(MAX_COUNT + 3) * MAX_DIM];
    memset(keys, 0, sizeof keys);
    for (int j = 0; j < n_keys; j++) keys[(size_t)j * dim + (size_t)j % dim] = 1.0f;
    /* the graph with both checksums right (the vectors': the one-hot rows) */
    uint8_t *b = malloc(size);
    if (!b) return 0;
    memcpy(b, data, size);
    uint32_t crc = 0;
    for (uint64_t j = 0; j < count; j++) {
        uint8_t row[MAX_DIM * 4] = {0};
        const uint16_t one16 = 0x3c00;
        const float one = 1.0f;
        memcpy(row + (j % dim) * elem, elem == 2 ? (const void *)&one16 : (const void *)&one, elem);
        crc = crc32c(crc, row, (size_t)dim * elem);
    }
    memcpy(b + 56, &crc, 4);
    crc = crc32c(0, b + HNSW_GRAPH_HEADER, size - HNSW_GRAPH_HEADER);
    memcpy(b + 60, &crc, 4);

    selector_params p;
    selector_params_default(&p, SUBQ_SELECT_HNSW, (int)dim);
    p.plan.hnsw_m = (int)m, p.plan.hnsw_ef_construction = (int)efc, p.plan.seed = seed;
    p.plan.search_f16 = elem == 2;
    selector *s = NULL;
    subq_error err = {0};
    if (selector_new(&p, NULL, &s, &err)) abort();
    const subq_status st = selector_put_index(s, keys, n_keys, b, size, &err);
    void *again = NULL;
    size_t bytes = 0;
    if (st) {
        if (!err.msg[0] || strchr(err.msg, '\n')) abort();
        if (selector_get_index(s, &again, &bytes, &err) || again) abort(); /* left empty */
    } else {
        int32_t out[8];
        const select_mask all = {.n_slots = n_keys};
        if (selector_query(s, keys, NULL, 8, &all, out) < 0) abort();
        if (selector_append(s, keys, 1, n_keys, &err)) abort();
        if (selector_get_index(s, &again, &bytes, &err) || !again) abort();
    }
    free(again);
    selector_free(s);
    free(b);
    return 0;
}
