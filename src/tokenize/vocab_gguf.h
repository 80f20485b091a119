/* What both vocabularies (SentencePiece: tokenizer.c, byte-level BPE:
 * bpe.c) read from a GGUF file the same way: the token texts and types,
 * their text -> id map and its hash, the special token ids. */
#ifndef SUBQ_TOKENIZE_VOCAB_GGUF_H
#define SUBQ_TOKENIZE_VOCAB_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"

/* FNV-1a, then a final mix so that the low bits (the map's slot) spread. */
uint64_t vocab_hash(const char *s, size_t n);

/* A special token id: absent, 0xFFFFFFFF or -1 mean none (*out = -1); any
 * other value outside the vocabulary is a format error. */
subq_status vocab_special_id(const gguf_file *f, const char *key, int n_vocab, int *out, subq_error *err);

/* Hash of every tokenizer.* key of a model file and its value: two files
 * with the same fingerprint tokenise alike (pre-tokenised corpora carry
 * it). */
uint64_t vocab_fingerprint(const gguf_file *f);

/* Any GGUF integer type (the token type array may use any). */
bool vocab_is_int_type(gguf_type ty);

/* tokenizer.ggml.tokens: a non-empty string array of at most max_vocab
 * entries; *n gets its length. */
subq_status vocab_tokens_arr(const gguf_file *f, int max_vocab, const gguf_value **toks, int *n, subq_error *err);
/* tokenizer.ggml.token_type when present (*types = NULL when not): an
 * integer array of n entries. */
subq_status vocab_types_arr(const gguf_file *f, int n, const gguf_value **types, subq_error *err);

/* The token texts back to back, their types, a text -> id map and room
 * for the decoded pieces. */
typedef struct vocab_texts {
    char *text;        /* all token texts back to back, '\0' after the last */
    size_t *off;       /* n + 1 offsets into text */
    int32_t *type;     /* TOKEN_TYPE_*; unknown kinds read as NORMAL */
    char *piece;       /* decoded pieces back to back (the caller fills them; room for all
                        * texts): the second half of the text's block */
    size_t *piece_off; /* n + 1 offsets into piece: the second half of off's block */
    int32_t *map;    /* open addressing: token id or -1 */
    size_t map_mask; /* capacity - 1 (capacity is a power of two) */
} vocab_texts;

/* Fill v from the arrays above (types may be NULL: all NORMAL); a token
 * longer than max_len bytes is a format error. Where the texts repeat,
 * the map holds the last id, as llama.cpp's token_to_id does. On failure
 * v holds what was allocated (vocab_texts_free frees it). */
subq_status vocab_texts_load(const gguf_value *toks, const gguf_value *types, int n, int max_len, vocab_texts *v,
                             subq_error *err);
void vocab_texts_free(vocab_texts *v);

/* The id whose text is s[0..n), or -1. */
int32_t vocab_lookup(const vocab_texts *v, const char *s, size_t n);

static inline size_t vocab_len(const vocab_texts *v, int32_t id) { return v->off[id + 1] - v->off[id]; }
static inline const char *vocab_text(const vocab_texts *v, int32_t id) { return v->text + v->off[id]; }

#endif
