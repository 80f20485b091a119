/* libFuzzer target for the layer-list parser (layers_parse: "all",
 * "none", "1,3,5-7", "2--1") behind --layers, --reserve and
 * --sparse-layers, and the per-layer top-K lists built on it
 * (attn_topk_layers_parse: "0:2048,-2--1:512", behind --topk-layers): the
 * first byte picks the model depth (1..256), the rest is the list. Success
 * sets only entries in [0, n_layer) (top-K -1 or in [0, 2^24]); failure is
 * one line. Seeds: tests/fuzz/corpus/fuzz_layers. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sparse/attn_plan.h"
#include "base/layers.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const int n_layer = 1 + data[0];
    char *s = malloc(size);
    if (!s) abort();
    memcpy(s, data + 1, size - 1);
    s[size - 1] = '\0';
    unsigned char mask[258];
    memset(mask, 0xAB, sizeof mask);
    subq_error err = {0};
    subq_status st = layers_parse(s, n_layer, mask + 1, &err);
    if (mask[0] != 0xAB || mask[n_layer + 1] != 0xAB) abort(); /* nothing outside [0, n_layer) */
    if (st == SUBQ_OK) {
        for (int l = 0; l < n_layer; l++)
            if (mask[1 + l] > 1) abort();
    } else if (err.msg[0] == '\0' || strchr(err.msg, '\n')) {
        abort();
    }
    int topk[258];
    for (int l = 0; l < 258; l++) topk[l] = -7;
    st = attn_topk_layers_parse(s, n_layer, topk + 1, &err);
    if (topk[0] != -7 || topk[n_layer + 1] != -7) abort();
    for (int l = 0; st == SUBQ_OK && l < n_layer; l++)
        if (topk[1 + l] < -1 || topk[1 + l] > (1 << 24)) abort();
    if (st != SUBQ_OK && (err.msg[0] == '\0' || strchr(err.msg, '\n'))) abort();
    free(s);
    return 0;
}
