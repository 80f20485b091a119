/* libFuzzer target for the JSON-lines reader of training data
 * (jsonl_text): any line gives either the "text" member as valid,
 * NUL-terminated UTF-8 of the stated length, "no text", or one-line
 * SUBQ_ERR_FORMAT. Seeds: tests/fuzz/corpus/fuzz_jsonl. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tokenize/utf8.h"
#include "data/jsonl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* an exact-size copy: the parser is given a length, not a NUL */
    char *line = malloc(size ? size : 1);
    if (!line) abort();
    memcpy(line, data, size);
    char *out = NULL;
    size_t n = 0;
    int found = -1;
    subq_error err = {0};
    subq_status st = jsonl_text(line, size, &out, &n, &found, &err);
    if (st == SUBQ_OK) {
        if (found == 1) {
            if (!out || out[n] != '\0' || utf8_validate(out, n) != n) abort();
        } else if (found != 0 || out) {
            abort();
        }
    } else if (st != SUBQ_ERR_FORMAT || out || err.msg[0] == '\0' || strchr(err.msg, '\n')) {
        abort();
    }
    free(out);
    free(line);
    return 0;
}
