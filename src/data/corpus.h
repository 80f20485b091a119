/* Training data for distillation: documents from plain-text files,
 * directories of them and JSON-lines files ({"text": ...} per line),
 * tokenised with the model's tokenizer and cut into sequences.
 *
 *   document  one text file, or one JSONL record
 *   piece     a document, or a --seq sized part of a longer one: BOS (when the
 *             vocabulary adds one) + up to seq-1 tokens; positions restart at
 *             0 in every piece, which the model never sees across
 *   sequence  packed: consecutive pieces filling up to seq tokens, one segment
 *             id per piece (block-causal attention); unpacked: one piece
 *
 * Held-out split: a deterministic fraction of the pieces (a fixed seed, not
 * the training seed, so every run of a corpus evaluates on the same text),
 * or the pieces of explicitly given evaluation files. Splitting by piece
 * rather than by whole file keeps the split fair when a corpus is a handful
 * of book-sized files. */
#ifndef SUBQ_DATA_CORPUS_H
#define SUBQ_DATA_CORPUS_H

#include <stddef.h>
#include <stdint.h>

#include "subq_lab.h"

/* A list of sequences, each a run of pieces. */
typedef struct corpus_split {
    int n_seq;
    int *first;         /* [n_seq + 1]: sequence i is pieces order[first[i] .. first[i+1]) */
    int *order;         /* piece ids */
    int64_t n_tokens;
    int max_len;        /* longest sequence */
} corpus_split;

typedef struct corpus_token_file corpus_token_file; /* corpus_file.c */

struct subq_corpus {
    subq_corpus_params p;
    int bos;            /* BOS id prepended to every piece, -1 for none */
    int n_vocab;
    uint64_t vocab_fp;  /* the tokenizer's fingerprint (vocab_fingerprint) */
    /* every document's tokens back to back, no BOS: in memory (tok), or in a
     * pre-tokenised corpus file read where a sequence needs them (file) */
    int32_t *tok;
    size_t n_tok, cap_tok;
    corpus_token_file *file;
    uint64_t tok_hash;  /* FNV-1a of those tokens in order */
    int32_t *doc_len;   /* [n_docs + n_eval_docs] in the order added */
    unsigned char *doc_eval;
    int n_docs, n_eval_docs, cap_docs;
    /* pieces, cut from the documents by corpus_finish */
    int64_t *piece_off; /* [n_pieces]: first token of the piece's body in the token stream */
    int32_t *piece_len; /* with the BOS */
    unsigned char *piece_eval;
    int n_pieces;
    corpus_split train, eval;
    uint64_t fingerprint; /* of tokens, split and packing: resume checks it */
};

subq_status corpus_new(const subq_model *m, const subq_corpus_params *p, subq_corpus **out, subq_error *err);
void corpus_free(subq_corpus *c);

/* Add a file (".jsonl": one document per non-blank line, else the whole file
 * is one document) or a directory (every regular file under it, recursively,
 * in name order, hidden names skipped). is_eval: the documents go to the
 * held-out split. A pre-tokenised corpus (corpus_file.h) must be the only
 * path: its documents and their held-out marks come from the file. */
subq_status corpus_add_path(subq_corpus *c, const subq_model *m, const char *path, int is_eval, subq_error *err);
/* Add one document from memory. `where` names it in error messages. */
subq_status corpus_add_text(subq_corpus *c, const subq_model *m, const char *text, size_t len, int is_eval,
                            const char *where, subq_error *err);

/* Record one more document of n tokens (1 <= n <= INT32_MAX) whose tokens
 * the caller has put at the end of the token stream. */
subq_status corpus_add_doc(subq_corpus *c, int64_t n, int is_eval, subq_error *err);

/* Split and pack; call once after adding everything. SUBQ_ERR_ARG when there
 * is nothing to train on. */
subq_status corpus_finish(subq_corpus *c, subq_error *err);

/* All of the above: corpus_new, corpus_add_path for every training path
 * then every held-out path, corpus_finish. On failure *out is NULL. */
subq_status corpus_load(const subq_model *m, const subq_corpus_params *p, const char *const *paths, int n_paths,
                        const char *const *eval_paths, int n_eval, subq_corpus **out, subq_error *err);

/* Materialise sequence i of a split: tokens, positions (restarting at 0 per
 * piece) and segment ids (0, 1, ... per piece) into buffers of p.seq
 * entries; *len its length. Fails only for a corpus file (a read error, or
 * a token outside the vocabulary). */
subq_status corpus_get(const subq_corpus *c, const corpus_split *sp, int i, int32_t *tok, int32_t *pos, int32_t *seg,
                       int *len, subq_error *err);

/* Index into c->train of the sequence at data cursor `cursor` (sequences
 * consumed so far): epoch e = cursor / n_seq visits the sequences in a
 * permutation drawn from (seed, e). `perm` caches the permutation of epoch
 * *perm_epoch (n_seq ints; set *perm_epoch = UINT64_MAX initially). */
int corpus_train_index(const subq_corpus *c, uint64_t cursor, uint64_t seed, int *perm, uint64_t *perm_epoch);

#endif
