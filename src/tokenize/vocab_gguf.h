/* What both vocabularies (SentencePiece: tokenizer.c, byte-level BPE:
 * bpe.c) read from a GGUF file the same way, and the hash of their
 * piece -> id maps. */
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

#endif
