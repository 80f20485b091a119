/* libFuzzer target: the KV file's header reader (kv_file_check_header).
 * Arbitrary bytes are checked as a header slot as they are, then again with
 * a valid checksum written in (so that the fuzzer explores the shape, layout
 * and search-table checks behind it), against a small fixed geometry with
 * the context size left to the file. Then the bytes, with both header
 * slots sealed, are a whole file for subq_kv_file_inspect to read and
 * verify without a model (its geometry taken from the file). Any may fail;
 * nothing may crash. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kv/kv_file.h"

/* data as a KV file, both header slots sealed, then inspected with verify */
static void inspect_file(const uint8_t *data, size_t size) {
    static char path[600];
    if (!path[0]) {
        const char *tmp = getenv("SUBQ_TMP");
        snprintf(path, sizeof path, "%s/fuzz_kv_file_%d.kv", tmp && *tmp ? tmp : "/tmp", (int)getpid());
    }
    unsigned char *file = malloc(size);
    if (!file) return;
    memcpy(file, data, size);
    for (size_t at = 0; at + KV_FILE_HEADER_BYTES <= size && at < 2 * KV_FILE_HEADER_BYTES; at += KV_FILE_HEADER_BYTES)
        kv_file_seal_header(file + at);
    FILE *f = fopen(path, "wb");
    if (f) {
        int ok = fwrite(file, 1, size, f) == size;
        ok = fclose(f) == 0 && ok;
        subq_kv_file_info info;
        subq_error err;
        if (ok) subq_kv_file_inspect(path, 1, &info, &err);
        unlink(path);
    }
    free(file);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const kv_file_geometry g = {.model_fingerprint = 0x5EEDF00DCAFEF00Dull, .kv_type = SUBQ_KV_F32, .n_layer = 2,
                                .n_head_kv = 1, .head_dim = 8, .n_ctx = 0, .n_vocab = 16, .row_bytes = 32};
    subq_error err;
    kv_file_check_header(data, size, &g, (uint64_t)size, &err);
    static unsigned char slot[KV_FILE_HEADER_BYTES];
    memset(slot, 0, sizeof slot);
    memcpy(slot, data, size < sizeof slot ? size : sizeof slot);
    kv_file_seal_header(slot);
    kv_file_check_header(slot, sizeof slot, &g, UINT64_MAX, &err);
    if (size >= KV_FILE_HEADER_BYTES) inspect_file(data, size);
    return 0;
}
