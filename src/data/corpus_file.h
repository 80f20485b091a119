/* A pre-tokenised corpus: the documents of a training corpus, tokenised
 * once (`subq tokenize --data ... -o FILE`) into a GGUF file, so that a run
 * tokenises nothing and reads only the tokens of the sequences it trains on:
 * each data-parallel rank its own share (pread where a sequence needs them).
 * Pieces, the held-out split and the packing are cut from the document
 * lengths exactly as for text (corpus.c), so a run on the file follows the
 * run on the text it was made from.
 *
 *   subq.corpus.version             u32  1
 *   subq.corpus.vocab_fingerprint   str  16 hex digits (vocab_fingerprint)
 *   subq.corpus.tokens_fingerprint  str  FNV-1a of the tokens in order
 *   corpus.doc_len    I32 [n_docs]   tokens of each document (no BOS), >= 1
 *   corpus.doc_eval   I8  [n_docs]   1: held out (--eval-data), else 0
 *   corpus.tokens     I32 [sum of doc_len]
 *
 * The token ids are checked against the vocabulary as they are read; the
 * tokens' fingerprint is trusted (checking it would read every token). */
#ifndef SUBQ_DATA_CORPUS_FILE_H
#define SUBQ_DATA_CORPUS_FILE_H

#include <stdint.h>

#include "gguf/gguf.h"
#include "data/corpus.h"

/* 1 when path is a regular file that starts with the GGUF magic. */
int corpus_file_is_tokens(const char *path);

/* Take the documents of a corpus file into an empty corpus c (the caller's
 * corpus_finish cuts them), all of them held out when all_eval (a file given
 * as evaluation data); the file stays open for corpus_file_read. A GGUF
 * that is no corpus, one made for another vocabulary, or a malformed one: a
 * clear error naming the file. */
subq_status corpus_file_open(subq_corpus *c, const char *path, int all_eval, subq_error *err);

/* corpus_file_open's checks of an opened file g: its documents into c, and
 * the offset of its tokens in the file (fuzz_corpus_file calls it alone). */
subq_status corpus_file_take(subq_corpus *c, const gguf_file *g, const char *path, int all_eval, uint64_t *data_off,
                             subq_error *err);

/* Tokens [off, off + n) of the token stream into dst. */
subq_status corpus_file_read(const subq_corpus *c, int64_t off, int n, int32_t *dst, subq_error *err);

void corpus_file_close(corpus_token_file *f);

/* Write the documents of a corpus held in memory to path (atomic). */
subq_status corpus_file_save(const subq_corpus *c, const char *path, subq_error *err);

/* Tokens read from the file so far by this process (0 for a corpus in
 * memory). */
int64_t corpus_file_tokens_read(const subq_corpus *c);

#endif
