/* Pre-tokenised corpus files (corpus_file.h). */
#define _POSIX_C_SOURCE 200809L
#include "data/corpus_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/fingerprint.h"
#include "gguf/gguf.h"
#include "quant/types.h"

#define CORPUS_FILE_VERSION 1

struct corpus_token_file {
    int fd;
    uint64_t data_off; /* file offset of token 0 */
    int64_t n_read;    /* tokens read so far */
    char path[512];
};

int corpus_file_is_tokens(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return 0;
    struct stat st;
    char magic[4];
    int yes = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && pread(fd, magic, 4, 0) == 4 && !memcmp(magic, "GGUF", 4);
    close(fd);
    return yes;
}

void corpus_file_close(corpus_token_file *f) {
    if (!f) return;
    if (f->fd >= 0) close(f->fd);
    free(f);
}

/* A 1-D tensor of the given type, or an error naming what is wrong. */
static subq_status find_vector(const gguf_file *g, const char *path, const char *name, uint32_t type,
                               const gguf_tensor **out, subq_error *err) {
    const gguf_tensor *t = gguf_find_tensor(g, name);
    if (!t) return subq_fail(err, SUBQ_ERR_FORMAT, "%s: corpus file without tensor %s", path, name);
    if (t->type != type || t->n_dims != 1)
        return subq_fail(err, SUBQ_ERR_FORMAT, "%s: tensor %s is not a vector of %s", path, name,
                         ggml_type_get(type)->name);
    *out = t;
    return SUBQ_OK;
}

/* A fingerprint stored as 16 hex digits under key. */
static subq_status get_fingerprint(const gguf_file *g, const char *path, const char *key, uint64_t *fp,
                                   subq_error *err) {
    char hex[32];
    subq_error e2 = {0};
    if (gguf_get_str(g, key, hex, sizeof hex, &e2) || !fingerprint_parse(hex, fp))
        return subq_fail(err, SUBQ_ERR_FORMAT, "%s: %s is missing or not 16 hex digits", path, key);
    return SUBQ_OK;
}

subq_status corpus_file_take(subq_corpus *c, const gguf_file *g, const char *path, int all_eval, uint64_t *data_off,
                             subq_error *err) {
    uint32_t version = 0;
    subq_error e2 = {0};
    if (gguf_get_u32(g, "subq.corpus.version", &version, &e2))
        return subq_fail(err, SUBQ_ERR_FORMAT, "%s is a GGUF file but no pre-tokenised corpus (make one with "
                         "`subq tokenize -m MODEL --data PATH -o FILE`)", path);
    if (version != CORPUS_FILE_VERSION)
        return subq_fail(err, SUBQ_ERR_UNSUPPORTED, "%s: corpus file version %u (this subq reads %d)", path, version,
                         CORPUS_FILE_VERSION);
    uint64_t vocab_fp;
    subq_status s = get_fingerprint(g, path, "subq.corpus.vocab_fingerprint", &vocab_fp, err);
    if (!s) s = get_fingerprint(g, path, "subq.corpus.tokens_fingerprint", &c->tok_hash, err);
    if (s) return s;
    if (vocab_fp != c->vocab_fp) {
        char a[17], b[17];
        fingerprint_hex(vocab_fp, a);
        fingerprint_hex(c->vocab_fp, b);
        return subq_fail(err, SUBQ_ERR_MISMATCH, "%s was tokenised with another vocabulary (tokenizer fingerprint %s, "
                         "this model's %s); tokenise the text again with this model", path, a, b);
    }
    const gguf_tensor *len_t = NULL, *eval_t = NULL, *tok_t = NULL;
    if ((s = find_vector(g, path, "corpus.doc_len", GGML_TYPE_I32, &len_t, err)) ||
        (s = find_vector(g, path, "corpus.doc_eval", GGML_TYPE_I8, &eval_t, err)) ||
        (s = find_vector(g, path, "corpus.tokens", GGML_TYPE_I32, &tok_t, err)))
        return s;
    if (eval_t->ne[0] != len_t->ne[0])
        return subq_fail(err, SUBQ_ERR_FORMAT, "%s: %llu documents but %llu held-out marks", path,
                         (unsigned long long)len_t->ne[0], (unsigned long long)eval_t->ne[0]);
    int64_t total = 0;
    for (uint64_t d = 0; d < len_t->ne[0] && !s; d++) {
        int32_t n;
        int8_t ev;
        memcpy(&n, (const char *)len_t->data + 4 * d, 4);
        memcpy(&ev, (const char *)eval_t->data + d, 1);
        if (n < 1 || (ev != 0 && ev != 1))
            return subq_fail(err, SUBQ_ERR_FORMAT, "%s: document %llu has length %d and held-out mark %d", path,
                             (unsigned long long)d, n, ev);
        total += n;
        s = corpus_add_doc(c, n, all_eval || ev, err);
    }
    if (!s && (uint64_t)total != tok_t->ne[0])
        s = subq_fail(err, SUBQ_ERR_FORMAT, "%s: the documents hold %lld tokens, the token vector %llu", path,
                      (long long)total, (unsigned long long)tok_t->ne[0]);
    c->n_tok = (size_t)total;
    *data_off = (uint64_t)((const uint8_t *)tok_t->data - g->base);
    return s;
}

subq_status corpus_file_open(subq_corpus *c, const char *path, int all_eval, subq_error *err) {
    corpus_token_file *f = calloc(1, sizeof *f);
    if (!f) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    f->fd = -1;
    snprintf(f->path, sizeof f->path, "%s", path);
    c->file = f;
    gguf_file *g;
    subq_status s = gguf_open(path, &g, err); /* mapped: only the header and the document table are read */
    if (s) return s;
    s = corpus_file_take(c, g, path, all_eval, &f->data_off, err);
    gguf_close(g);
    if (s) return s;
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0) return subq_fail(err, SUBQ_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    (void)posix_fadvise(f->fd, 0, 0, POSIX_FADV_RANDOM); /* a sequence's tokens, not the file ahead of them */
    return SUBQ_OK;
}

subq_status corpus_file_read(const subq_corpus *c, int64_t off, int n, int32_t *dst, subq_error *err) {
    corpus_token_file *f = c->file;
    size_t want = (size_t)n * sizeof(int32_t), got = 0;
    const off_t at = (off_t)(f->data_off + (uint64_t)off * sizeof(int32_t));
    while (got < want) {
        ssize_t r = pread(f->fd, (char *)dst + got, want - got, at + (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0)
            return subq_fail(err, SUBQ_ERR_IO, "%s: cannot read tokens %lld..%lld: %s", f->path, (long long)off,
                             (long long)off + n, r < 0 ? strerror(errno) : "the file is shorter than its header says");
        got += (size_t)r;
    }
    for (int i = 0; i < n; i++)
        if (dst[i] < 0 || dst[i] >= c->n_vocab)
            return subq_fail(err, SUBQ_ERR_FORMAT, "%s: token %lld is %d, outside the vocabulary of %d", f->path,
                             (long long)off + i, dst[i], c->n_vocab);
    f->n_read += n;
    return SUBQ_OK;
}

subq_status corpus_file_save(const subq_corpus *c, const char *path, subq_error *err) {
    if (c->file) return subq_fail(err, SUBQ_ERR_ARG, "the corpus is already a pre-tokenised file");
    const int n_docs = c->n_docs + c->n_eval_docs;
    if (n_docs == 0) return subq_fail(err, SUBQ_ERR_ARG, "the corpus holds no text");
    gguf_writer *w = gguf_writer_new();
    if (!w) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    char vocab_hex[17], tok_hex[17];
    fingerprint_hex(c->vocab_fp, vocab_hex);
    fingerprint_hex(c->tok_hash, tok_hex);
    const uint64_t ne_docs = (uint64_t)n_docs, ne_tok = c->n_tok;
    subq_status s = gguf_writer_set_u32(w, "subq.corpus.version", CORPUS_FILE_VERSION);
    if (!s) s = gguf_writer_set_str(w, "subq.corpus.vocab_fingerprint", vocab_hex);
    if (!s) s = gguf_writer_set_str(w, "subq.corpus.tokens_fingerprint", tok_hex);
    if (s) s = subq_fail(err, s, "out of memory");
    if (!s) s = gguf_writer_add_tensor(w, "corpus.doc_len", GGML_TYPE_I32, 1, &ne_docs, c->doc_len, ne_docs * 4, 0, err);
    if (!s) s = gguf_writer_add_tensor(w, "corpus.doc_eval", GGML_TYPE_I8, 1, &ne_docs, c->doc_eval, ne_docs, 0, err);
    if (!s) s = gguf_writer_add_tensor(w, "corpus.tokens", GGML_TYPE_I32, 1, &ne_tok, c->tok, ne_tok * 4, 0, err);
    if (!s) s = gguf_writer_write(w, path, err);
    gguf_writer_free(w);
    return s;
}

int64_t corpus_file_tokens_read(const subq_corpus *c) { return c->file ? c->file->n_read : 0; }
