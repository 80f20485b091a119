/* libFuzzer target: encode arbitrary bytes with the stories260K vocabulary
 * (with and without BOS); whenever encoding succeeds, decoding must give the
 * input back byte for byte. Invalid UTF-8 must fail cleanly.
 * The model comes from $SUBQ_SHARED (default ../shared, else /work/shared). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "tokenize/tokenizer.h"

/* Loaded once and kept for the life of the fuzzing process. */
static gguf_file *g_file;
static tokenizer *g_tok;

static void load(void) {
    const char *dir = getenv("SUBQ_SHARED");
    if (!dir || !*dir) dir = access("../shared/models", R_OK) == 0 ? "../shared" : "/work/shared";
    char path[1024];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", dir);
    subq_error err = {0};
    if (gguf_open(path, &g_file, &err) != SUBQ_OK ||
        tokenizer_from_gguf(g_file, &g_tok, &err) != SUBQ_OK) {
        fprintf(stderr, "fuzz_tokenizer: cannot load %s: %s\n", path, err.msg);
        abort();
    }
}

/* U+2581 in the input is indistinguishable from an escaped space (the
 * SentencePiece convention), so it decodes as ' ': not a round-trip bug. */
static int has_u2581(const uint8_t *d, size_t n) {
    for (size_t i = 0; i + 2 < n; i++)
        if (d[i] == 0xE2 && d[i + 1] == 0x96 && d[i + 2] == 0x81) return 1;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_tok) load();
    const char *text = (const char *)data;
    size_t cap = size + 8; /* at most one token per byte, plus prefix and BOS */
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids) abort();
    for (int bos = 0; bos < 2; bos++) {
        subq_error err = {0};
        size_t n = 0;
        subq_status st = tokenizer_encode(g_tok, text, size, bos, ids, cap, &n, &err);
        if (st != SUBQ_OK) {
            /* The only acceptable failure for any input is invalid UTF-8. */
            if (st != SUBQ_ERR_TOKENIZE || strncmp(err.msg, "invalid UTF-8 at byte ", 22) != 0 ||
                strchr(err.msg, '\n'))
                abort();
            continue;
        }
        if (n > cap) abort();
        for (size_t i = 0; i < n; i++)
            if (ids[i] < 0 || ids[i] >= tokenizer_n_vocab(g_tok)) abort();
        /* A cap smaller than the count must report the same count. */
        size_t n2 = 0;
        if (tokenizer_encode(g_tok, text, size, bos, ids, n / 2, &n2, &err) != SUBQ_OK || n2 != n)
            abort();
        tokenizer_encode(g_tok, text, size, bos, ids, cap, &n, &err);
        char *dec = NULL;
        size_t dlen = 0;
        if (tokenizer_decode(g_tok, ids, n, &dec, &dlen, &err) != SUBQ_OK) abort();
        if (!has_u2581(data, size) && (dlen != size || memcmp(dec, text, size) != 0)) abort();
        free(dec);
    }
    free(ids);
    return 0;
}
