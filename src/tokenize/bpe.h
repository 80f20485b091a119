/* Byte-level BPE over a GGUF "gpt2" vocabulary (GPT-2, Qwen2/3, Llama 3,
 * SmolLM, Phi-4-mini): tokens are stored in GPT-2's bytes_to_unicode
 * alphabet, merges "A B" are ranked by their index in tokenizer.ggml.merges,
 * and text is first cut into words by the regex of tokenizer.ggml.pre
 * (PCRE2, UTF + UCP).
 *
 * Encode: special tokens (CONTROL and USER_DEFINED) are cut out of the raw
 * text first (leftmost, then longest); each other span is pre-split; each
 * word's bytes become one symbol per byte; the adjacent pair with the lowest
 * merge rank (leftmost on ties) is merged until none is left.
 *
 * Used through tokenizer.h; this header is for tokenizer.c, synth and tests. */
#ifndef SUBQ_TOKENIZE_BPE_H
#define SUBQ_TOKENIZE_BPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "subq.h"

typedef struct bpe_vocab bpe_vocab;

/* Build from the tokenizer.ggml.* metadata (tokenizer.ggml.model must be
 * "gpt2"; strings are copied). Missing/inconsistent metadata (no merges, a
 * merge without a space or naming an unknown token, ids out of range) gives
 * SUBQ_ERR_FORMAT; an unknown tokenizer.ggml.pre SUBQ_ERR_UNSUPPORTED. */
subq_status bpe_from_gguf(const gguf_file *f, bpe_vocab **out, subq_error *err);
void bpe_free(bpe_vocab *b);

int bpe_n_vocab(const bpe_vocab *b);
int bpe_bos(const bpe_vocab *b); /* -1 if none */
int bpe_eos(const bpe_vocab *b); /* -1 if none */
bool bpe_add_bos(const bpe_vocab *b);
/* Canonical pre-tokenizer name: "gpt2", "qwen2", "llama3", "smollm" or "gpt-4o". */
const char *bpe_pre_name(const bpe_vocab *b);

/* Append the ids of text[0..len) (valid UTF-8: the caller checks) to out:
 * ids are stored while *count < cap and *count always advances, so a count
 * larger than cap tells the caller how much room it needs. At most one id
 * per byte of text. */
subq_status bpe_encode(const bpe_vocab *b, const char *text, size_t len, int32_t *out, size_t cap,
                       size_t *count, subq_error *err);

/* Decoded bytes of token tok (0 <= tok < n_vocab): NORMAL tokens map back
 * through the byte alphabet, USER_DEFINED and CONTROL tokens are their text,
 * except BOS and EOS; UNKNOWN and UNUSED tokens give nothing. */
const char *bpe_piece(const bpe_vocab *b, int32_t tok, size_t *n);

/* GPT-2's bytes_to_unicode: the code point standing for byte b, and the
 * inverse (-1 for code points that stand for no byte). */
uint32_t bpe_byte_to_cp(uint8_t b);
int bpe_cp_to_byte(uint32_t cp);

#endif
