/* libFuzzer target: encode arbitrary bytes with
 *   - the stories260K SentencePiece vocabulary, and
 *   - a synthetic byte-level BPE vocabulary (bpe_synth_make, 4096 tokens)
 *     under each pre-tokenizer: qwen2, llama-bpe, gpt2, smollm, gpt-4o,
 * with and without BOS. Whenever encoding succeeds, decoding must give the
 * input back byte for byte; invalid UTF-8 must fail cleanly, and nothing
 * else may fail.
 * The model comes from $SUBQ_SHARED (default ../shared, else /work/shared);
 * the BPE vocabularies are written to $SUBQ_TMP (default /tmp) and removed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "lab/bpe_synth.h"
#include "tokenize/bpe.h"
#include "tokenize/tokenizer.h"
#include "fuzz_shared.h"

#define N_BPE 5
static const char *const bpe_pres[N_BPE] = {"qwen2", "llama-bpe", "gpt2", "smollm", "gpt-4o"};

/* Loaded once and kept for the life of the fuzzing process. */
static gguf_file *g_file[1 + N_BPE];
static tokenizer *g_tok[1 + N_BPE];

static void die(const char *what, const char *msg) {
    fprintf(stderr, "fuzz_tokenizer: %s: %s\n", what, msg);
    abort();
}

static void load(void) {
    char path[1024];
    fuzz_stories_path(path, sizeof path);
    subq_error err = {0};
    if (gguf_open(path, &g_file[0], &err) != SUBQ_OK ||
        tokenizer_from_gguf(g_file[0], &g_tok[0], &err) != SUBQ_OK)
        die(path, err.msg);

    bpe_synth sv;
    if (bpe_synth_make(4096, "qwen2", &sv, &err) != SUBQ_OK) die("bpe_synth_make", err.msg);
    const char *tmp = getenv("SUBQ_TMP");
    if (!tmp || !*tmp) tmp = "/tmp";
    for (int k = 0; k < N_BPE; k++) {
        gguf_writer *w = gguf_writer_new();
        if (!w || bpe_synth_write(&sv, w, &err) != SUBQ_OK) die("bpe_synth_write", err.msg);
        gguf_writer_set_str(w, "tokenizer.ggml.pre", bpe_pres[k]);
        snprintf(path, sizeof path, "%s/fuzz_tokenizer_%d_%d.gguf", tmp, (int)getpid(), k);
        subq_status st = gguf_writer_write(w, path, &err);
        gguf_writer_free(w);
        if (st != SUBQ_OK || gguf_open(path, &g_file[1 + k], &err) != SUBQ_OK) die(path, err.msg);
        unlink(path); /* the mapping stays valid */
        if (tokenizer_from_gguf(g_file[1 + k], &g_tok[1 + k], &err) != SUBQ_OK) die(bpe_pres[k], err.msg);
    }
    bpe_synth_free(&sv);
}

/* U+2581 in the input is indistinguishable from an escaped space (the
 * SentencePiece convention), so it decodes as ' ': not a round-trip bug. */
static int has(const uint8_t *d, size_t n, const char *needle) {
    size_t m = strlen(needle);
    for (size_t i = 0; i + m <= n; i++)
        if (memcmp(d + i, needle, m) == 0) return 1;
    return 0;
}

static void run(const tokenizer *t, int is_bpe, const uint8_t *data, size_t size) {
    const char *text = (const char *)data;
    /* Text that decodes differently by design: U+2581 (spm) and the BOS/EOS
     * text, which is matched as that control token and decodes to nothing (bpe). */
    int skip_rt = is_bpe ? has(data, size, "<|endoftext|>") : has(data, size, "\xE2\x96\x81");
    for (int bos = 0; bos < 2; bos++) {
        subq_error err = {0};
        size_t n = 0;
        int32_t *ids = NULL;
        subq_status st = tokenizer_encode_alloc(t, text, size, bos, false, &ids, &n, &err);
        if (st != SUBQ_OK) {
            /* The only acceptable failure for any input is invalid UTF-8. */
            if (st != SUBQ_ERR_TOKENIZE || strncmp(err.msg, "invalid UTF-8 at byte ", 22) != 0 ||
                strchr(err.msg, '\n') || ids)
                abort();
            continue;
        }
        if (is_bpe && n > size + 1) abort(); /* byte-level BPE: at most one id per byte */
        for (size_t i = 0; i < n; i++)
            if (ids[i] < 0 || ids[i] >= tokenizer_n_vocab(t)) abort();
        /* A buffer one short must give SUBQ_ERR_RANGE and the same count,
         * without touching more than it holds (exact heap size). */
        if (n > 0) {
            int32_t *few = malloc((n - 1 ? n - 1 : 1) * sizeof *few);
            size_t n2 = 0;
            if (!few || tokenizer_encode(t, text, size, bos, n - 1 ? few : NULL, n - 1, &n2, &err) != SUBQ_ERR_RANGE ||
                n2 != n)
                abort();
            free(few);
        }
        char *dec = NULL;
        size_t dlen = 0;
        if (tokenizer_decode(t, ids, n, &dec, &dlen, &err) != SUBQ_OK) abort();
        if (!skip_rt && (dlen != size || memcmp(dec, text, size) != 0)) abort();
        free(dec);
        free(ids);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_tok[0]) load();
    for (int k = 0; k < 1 + N_BPE; k++) run(g_tok[k], k > 0, data, size);
    return 0;
}
