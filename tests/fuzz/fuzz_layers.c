/* libFuzzer target for the layer-list parser (search_parse_layers: "all",
 * "none", "1,3,5-7", "2--1") behind --layers, --reserve and
 * --sparse-layers: the first byte picks the model depth (1..256), the rest
 * is the list. Success sets only mask entries in [0, n_layer); failure is
 * one line. Seeds: tests/fuzz/corpus/fuzz_layers. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "search/search_proj.h"

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
    subq_status st = search_parse_layers(s, n_layer, mask + 1, &err);
    if (mask[0] != 0xAB || mask[n_layer + 1] != 0xAB) abort(); /* nothing outside [0, n_layer) */
    if (st == SUBQ_OK) {
        for (int l = 0; l < n_layer; l++)
            if (mask[1 + l] > 1) abort();
    } else if (err.msg[0] == '\0' || strchr(err.msg, '\n')) {
        abort();
    }
    free(s);
    return 0;
}
