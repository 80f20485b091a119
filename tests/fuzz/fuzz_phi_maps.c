/* libFuzzer target for the completion-map reader: GGUF bytes ->
 * gguf_open_memory -> phi_maps_read. A file that reads must have sane
 * dimensions and layers, and the first and last float of every layer block
 * (and of the entropies) are touched so ASan sees a block outside its
 * allocation; a refused one gives one line. Seeds:
 * tests/fuzz/corpus/fuzz_phi_maps (make_corpus.py). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "complete/phi_maps.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gguf_file *f = NULL;
    subq_error err = {0};
    if (gguf_open_memory(data, size, &f, &err) != SUBQ_OK) return 0;
    phi_maps *p = NULL;
    subq_status st = phi_maps_read(f, "<fuzz>", &p, &err);
    gguf_close(f); /* the maps own copies */
    if (st != SUBQ_OK) {
        if (p || err.msg[0] == '\0' || strchr(err.msg, '\n')) abort();
        return 0;
    }
    if (phi_dims_check(&p->dims, &err) != SUBQ_OK || p->n_sel < 1 || p->n_sel > p->n_layer ||
        p->layer_size != phi_layer_size(&p->dims))
        abort();
    volatile float sink = 0;
    int prev = -1;
    for (int i = 0; i < p->n_sel; i++) {
        if (p->layers[i] <= prev || p->layers[i] >= p->n_layer || p->sel_of_layer[p->layers[i]] != i) abort();
        prev = p->layers[i];
        const float *L = p->data + (size_t)i * p->layer_size;
        sink += L[0] + L[p->layer_size - 1];
    }
    if (p->h_mid) sink += p->h_mid[0] + p->h_mid[(size_t)p->n_sel * p->dims.n_head - 1];
    (void)sink;
    phi_maps_free(p);
    return 0;
}
