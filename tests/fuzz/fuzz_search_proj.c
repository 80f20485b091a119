/* libFuzzer target for the search-projection reader: GGUF bytes ->
 * gguf_open_memory -> search_proj_read (projection files and projections
 * merged into model files). A file that reads must describe
 * itself consistently (layers ascending and in range, matrices where the
 * layers say) and every float of every matrix is touched, so ASan sees a
 * matrix that does not lie inside the allocation; a refused one gives one
 * line. Seeds: tests/fuzz/corpus/fuzz_search_proj (make_corpus.py). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "search/search_proj.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gguf_file *f = NULL;
    subq_error err = {0};
    if (gguf_open_memory(data, size, &f, &err) != SUBQ_OK) return 0;
    search_proj *p = NULL;
    subq_status st = search_proj_read(f, "<fuzz>", &p, &err);
    gguf_close(f); /* the projections own copies */
    if (st != SUBQ_OK) {
        if (p || err.msg[0] == '\0' || strchr(err.msg, '\n')) abort();
        return 0;
    }
    if (p->n_sel < 1 || p->n_sel > p->n_layer || p->d_search < 1 || p->d_search > SEARCH_PROJ_MAX_D || p->n_embd < 1)
        abort();
    volatile float sink = 0;
    int prev = -1, seen = 0;
    for (int i = 0; i < p->n_sel; i++) {
        if (p->layers[i] <= prev || p->layers[i] >= p->n_layer) abort();
        prev = p->layers[i];
    }
    for (int l = 0; l < p->n_layer; l++) {
        if (!p->wq[l] != !p->wk[l]) abort();
        if (!p->wq[l]) continue;
        seen++;
        const size_t n = (size_t)p->d_search * (size_t)p->n_embd;
        sink += p->wq[l][0] + p->wq[l][n - 1] + p->wk[l][0] + p->wk[l][n - 1];
    }
    if (seen != p->n_sel) abort();
    (void)sink;
    search_proj_free(p);
    return 0;
}
