/* libFuzzer target: the KV file's header reader (kv_file_check_header).
 * Arbitrary bytes are checked as a header slot as they are, then again with
 * a valid checksum written in (so that the fuzzer explores the shape, layout
 * and search-table checks behind it), against a small fixed geometry with
 * the context size left to the file. Either may fail; nothing may crash. */
#include <stdint.h>
#include <string.h>

#include "kv/kv_file.h"

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
    return 0;
}
