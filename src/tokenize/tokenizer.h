/* Tokenizers built from a GGUF vocabulary.
 *   spm: `tokenizer.ggml.model = llama` (SentencePiece-style BPE over the
 *        vocabulary's scores, U+2581 for spaces, byte fallback <0xXX>).
 *   bpe: `tokenizer.ggml.model = gpt2` (byte-level BPE with ranked merges and
 *        the regex pre-split of tokenizer.ggml.pre; see bpe.h). */
#ifndef SUBQ_TOKENIZER_H
#define SUBQ_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "subq.h"

typedef enum tokenizer_kind { TOKENIZER_SPM = 0, TOKENIZER_BPE = 1 } tokenizer_kind;

/* Token types of the GGUF vocabulary (tokenizer.ggml.token_type). */
enum {
    TOKEN_TYPE_NORMAL = 1,
    TOKEN_TYPE_UNKNOWN = 2,
    TOKEN_TYPE_CONTROL = 3,
    TOKEN_TYPE_USER_DEFINED = 4,
    TOKEN_TYPE_UNUSED = 5,
    TOKEN_TYPE_BYTE = 6,
};

typedef struct tokenizer tokenizer;

/* Build from the tokenizer.ggml.* metadata of an open GGUF file (strings are
 * copied: the file may be closed afterwards). Missing or inconsistent
 * metadata (e.g. scores count != tokens count, bos id out of range) gives
 * SUBQ_ERR_FORMAT; an unknown tokenizer.ggml.model SUBQ_ERR_UNSUPPORTED. */
subq_status tokenizer_from_gguf(const gguf_file *f, tokenizer **out, subq_error *err);
void tokenizer_free(tokenizer *t);

tokenizer_kind tokenizer_get_kind(const tokenizer *t);
int tokenizer_n_vocab(const tokenizer *t);
int tokenizer_bos(const tokenizer *t);  /* -1 if none */
int tokenizer_eos(const tokenizer *t);  /* -1 if none */
bool tokenizer_add_bos(const tokenizer *t); /* tokenizer.ggml.add_bos_token (default true for spm) */

/* Encode UTF-8 text (need not be NUL-terminated). Invalid UTF-8 gives
 * SUBQ_ERR_TOKENIZE with the byte offset. Nothing is ever written past
 * out[cap - 1]. When the ids do not fit, SUBQ_ERR_RANGE with *n_out = the
 * count the text needs (the contents of out are then unspecified: call again
 * with a buffer that large); otherwise *n_out = the count. A count is not
 * bounded by the text length: a vocabulary without U+2581 spends three byte
 * tokens on each space. */
subq_status tokenizer_encode(const tokenizer *t, const char *text, size_t len, bool add_bos,
                             int32_t *out, size_t cap, size_t *n_out, subq_error *err);

/* tokenizer_encode, and the text of the vocabulary's special tokens
 * (CONTROL, USER_DEFINED, UNKNOWN: "<|im_start|>", "[INST]", "<s>") becomes
 * those tokens, leftmost first and the longest there, as llama.cpp's
 * tokenizer does with parse_special (chat templates). The text between
 * them is encoded as by tokenizer_encode, so with the SentencePiece space
 * prefix each piece gets one, as in llama.cpp. Byte-level BPE vocabularies
 * already cut their special tokens out in tokenizer_encode. */
subq_status tokenizer_encode_special(const tokenizer *t, const char *text, size_t len, bool add_bos,
                                     int32_t *out, size_t cap, size_t *n_out, subq_error *err);

/* tokenizer_encode (or with `special`, tokenizer_encode_special) into a
 * malloc'd array of exactly the right size (*out, *n_out; the caller frees
 * *out). Every caller that does not know a bound uses this. */
subq_status tokenizer_encode_alloc(const tokenizer *t, const char *text, size_t len, bool add_bos, bool special,
                                   int32_t **out, size_t *n_out, subq_error *err);

/* Bytes of token `tok` as text, written to buf (at most cap bytes, no NUL).
 * Returns the number of bytes of the full piece (may exceed cap: then the
 * output is truncated), or -1 if tok is out of range. Control tokens (BOS,
 * EOS) give 0 bytes (bpe: other CONTROL and USER_DEFINED tokens give their
 * text). If `prev` is -1 or BOS and the vocabulary adds a space prefix, a
 * leading space is dropped, so that decode(encode(s)) == s. */
int tokenizer_token_to_piece(const tokenizer *t, int32_t prev, int32_t tok, char *buf, size_t cap);

/* Decode a whole sequence into a malloc'd NUL-terminated string (*out);
 * *out_len gets its length. */
subq_status tokenizer_decode(const tokenizer *t, const int32_t *toks, size_t n, char **out,
                             size_t *out_len, subq_error *err);

#endif
