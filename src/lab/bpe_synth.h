#ifndef SUBQ_LAB_BPE_SYNTH_H
#define SUBQ_LAB_BPE_SYNTH_H

#include <stdbool.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "subq.h"

/* Synthetic vocabularies for subq synth's random-weight models: a deterministic byte-level vocabulary of exactly n_vocab tokens: the 256
 * byte symbols, merges that build frequent English pairs, words, digits,
 * whitespace runs and a few CJK characters, further merges of existing
 * tokens until the count is reached, then the special tokens of the family
 * (CONTROL) at the end. */
typedef struct bpe_synth {
    int n_vocab;
    int n_merges;
    char **tokens;   /* n_vocab NUL-terminated strings */
    int32_t *types;  /* n_vocab TOKEN_TYPE_* */
    char **merges;   /* n_merges "A B" */
    const char *pre; /* tokenizer.ggml.pre */
    int bos, eos;
    bool add_bos;
} bpe_synth;

/* pre: "qwen2", "llama-bpe", "smollm", "gpt2", "gpt-4o" (selects the special
 * tokens and the BOS convention of that family). n_vocab must leave room for
 * the 256 byte symbols and the specials. */
subq_status bpe_synth_make(int n_vocab, const char *pre, bpe_synth *out, subq_error *err);
/* Set tokenizer.ggml.{model,pre,tokens,token_type,merges,bos_token_id,
 * eos_token_id,add_bos_token} on w. */
subq_status bpe_synth_write(const bpe_synth *v, gguf_writer *w, subq_error *err);
void bpe_synth_free(bpe_synth *v);

#endif
