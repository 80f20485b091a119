/* libFuzzer target: pre-tokenised corpus files (data/corpus_file.c's
 * checks). Arbitrary bytes are opened as GGUF in memory, their documents
 * taken into a stories260K corpus and cut, split and packed (corpus_finish);
 * either may fail, nothing may crash. The vocabulary fingerprint the file
 * states is accepted, so that the fuzzer reaches the tables behind it.
 * Seeds: tests/fuzz/make_corpus.py. The model comes from $SUBQ_SHARED
 * (default ../shared, else /work/shared). */

#include "base/fingerprint.h"
#include "gguf/gguf.h"
#include "data/corpus.h"
#include "data/corpus_file.h"
#include "fuzz_shared.h"

static subq_model *g_model;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_model) g_model = fuzz_stories_model("fuzz_corpus_file");
    gguf_file *f;
    subq_error err;
    if (gguf_open_memory(data, size, &f, &err)) return 0;
    const subq_corpus_params p = {.seq = 16, .pack = (int)(size & 1), .eval_frac = 0.25f, .seed = 3};
    subq_corpus *c;
    if (!corpus_new(g_model, &p, &c, &err)) {
        char hex[32];
        if (!gguf_get_str(f, "subq.corpus.vocab_fingerprint", hex, sizeof hex, &err)) fingerprint_parse(hex, &c->vocab_fp);
        uint64_t off;
        if (!corpus_file_take(c, f, "fuzz", (int)(size & 2), &off, &err)) corpus_finish(c, &err);
        corpus_free(c);
    }
    gguf_close(f);
    return 0;
}
