/* Loading, tokenising, splitting and packing training text (corpus.h). */
#define _POSIX_C_SOURCE 200809L
#include "data/corpus.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/fingerprint.h"
#include "base/rng.h"
#include "data/walk_files.h"
#include "model/model.h"
#include "tokenize/vocab_gguf.h"
#include "data/corpus_file.h"
#include "data/jsonl.h"

#define SPLIT_SEED 0x5EEDC0DEull /* fixed: the held-out set does not move with --seed */

subq_status corpus_new(const subq_model *m, const subq_corpus_params *p, subq_corpus **out, subq_error *err) {
    *out = NULL;
    if (p->seq < 2) return subq_fail(err, SUBQ_ERR_ARG, "sequence length %d is too short (need >= 2)", p->seq);
    if (!(p->eval_frac >= 0.0f && p->eval_frac < 1.0f))
        return subq_fail(err, SUBQ_ERR_ARG, "eval fraction %g must be in [0, 1)", (double)p->eval_frac);
    subq_corpus *c = calloc(1, sizeof *c);
    if (!c) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    c->p = *p;
    c->bos = tokenizer_add_bos(m->tok) ? tokenizer_bos(m->tok) : -1;
    c->n_vocab = m->hp.n_vocab;
    c->vocab_fp = vocab_fingerprint(m->file);
    c->tok_hash = FNV_OFFSET;
    *out = c;
    return SUBQ_OK;
}

static void split_free(corpus_split *s) {
    free(s->first);
    free(s->order);
}

void corpus_free(subq_corpus *c) {
    if (!c) return;
    free(c->tok);
    corpus_file_close(c->file);
    free(c->doc_len);
    free(c->doc_eval);
    free(c->piece_off);
    free(c->piece_len);
    free(c->piece_eval);
    split_free(&c->train);
    split_free(&c->eval);
    free(c);
}

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 1;
    size_t nc = *cap ? *cap : 1024;
    while (nc < need) nc *= 2;
    void *np = realloc(*p, nc * elem);
    if (!np) return 0;
    *p = np;
    *cap = nc;
    return 1;
}

/* Record one document of n tokens (its tokens are stored by the caller). */
subq_status corpus_add_doc(subq_corpus *c, int64_t n, int is_eval, subq_error *err) {
    if (n < 1 || n > INT32_MAX) return subq_fail(err, SUBQ_ERR_ARG, "a document of %lld tokens", (long long)n);
    const int n_all = c->n_docs + c->n_eval_docs;
    if (n_all == c->cap_docs) { /* the two per-document arrays share one capacity */
        if (n_all >= INT32_MAX / 4) return subq_fail(err, SUBQ_ERR_ARG, "more than %d documents", n_all);
        int nc = c->cap_docs ? 2 * c->cap_docs : 1024;
        int32_t *dl = realloc(c->doc_len, (size_t)nc * sizeof(int32_t));
        if (dl) c->doc_len = dl;
        unsigned char *de = realloc(c->doc_eval, (size_t)nc);
        if (de) c->doc_eval = de;
        if (!dl || !de) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory for %d documents", nc);
        c->cap_docs = nc;
    }
    c->doc_len[n_all] = (int32_t)n;
    c->doc_eval[n_all] = (unsigned char)(is_eval != 0);
    is_eval ? c->n_eval_docs++ : c->n_docs++;
    return SUBQ_OK;
}

subq_status corpus_add_text(subq_corpus *c, const subq_model *m, const char *text, size_t len, int is_eval,
                            const char *where, subq_error *err) {
    if (c->file) return subq_fail(err, SUBQ_ERR_ARG, "%s: a pre-tokenised corpus must be the only training data", where);
    int32_t *toks = NULL;
    size_t n = 0;
    subq_error e2 = {0};
    subq_status s = tokenizer_encode_alloc(m->tok, text, len, false, false, &toks, &n, &e2);
    if (s) return subq_fail(err, s, "%s: %s", where, e2.msg);
    if (n > 0) {
        if (n > INT32_MAX) s = subq_fail(err, SUBQ_ERR_ARG, "%s: more than %d tokens in one document", where, INT32_MAX);
        else if (!grow((void **)&c->tok, &c->cap_tok, c->n_tok + n, sizeof(int32_t)))
            s = subq_fail(err, SUBQ_ERR_NOMEM, "out of memory holding %zu training tokens", c->n_tok);
        if (!s) s = corpus_add_doc(c, (int64_t)n, is_eval, err);
        if (!s) {
            memcpy(c->tok + c->n_tok, toks, n * sizeof(int32_t));
            c->n_tok += n;
            c->tok_hash = fnv1a(c->tok_hash, toks, n * sizeof(int32_t));
        }
    }
    free(toks);
    return s;
}

static int ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

static subq_status add_jsonl(subq_corpus *c, const subq_model *m, const char *path, const char *buf, size_t len,
                             int is_eval, subq_error *err) {
    size_t line_no = 0;
    for (size_t i = 0; i < len;) {
        size_t j = i;
        while (j < len && buf[j] != '\n') j++;
        line_no++;
        size_t k = i;
        while (k < j && (buf[k] == ' ' || buf[k] == '\t' || buf[k] == '\r')) k++;
        if (k < j) { /* not blank */
            char *text;
            size_t tlen;
            int found;
            subq_error e2 = {0};
            if (jsonl_text(buf + i, j - i, &text, &tlen, &found, &e2))
                return subq_fail(err, e2.code, "%s:%zu: %s", path, line_no, e2.msg);
            if (!found) return subq_fail(err, SUBQ_ERR_FORMAT, "%s:%zu: record has no \"text\" member", path, line_no);
            char where[600];
            snprintf(where, sizeof where, "%s:%zu", path, line_no);
            subq_status s = corpus_add_text(c, m, text, tlen, is_eval, where, err);
            free(text);
            if (s) return s;
        }
        i = j + 1;
    }
    return SUBQ_OK;
}

typedef struct path_ctx {
    subq_corpus *c;
    const subq_model *m;
    int is_eval;
} path_ctx;

/* One file of a corpus path: JSON lines by their "text" members, anything
 * else as one text. */
static subq_status add_file(void *user, const char *path, subq_error *err) {
    const path_ctx *pc = user;
    char *buf;
    size_t len;
    subq_status s = subq_read_file(path, 0, &buf, &len, err);
    if (s) return s;
    if (len >= 4 && !memcmp(buf, "GGUF", 4))
        s = subq_fail(err, SUBQ_ERR_ARG, "%s is a GGUF file, not text: a corpus pre-tokenised by `subq tokenize -o` "
                      "must be the only --data path", path);
    else if (ends_with(path, ".jsonl")) s = add_jsonl(pc->c, pc->m, path, buf, len, pc->is_eval, err);
    else s = corpus_add_text(pc->c, pc->m, buf, len, pc->is_eval, path, err);
    free(buf);
    return s;
}

subq_status corpus_add_path(subq_corpus *c, const subq_model *m, const char *path, int is_eval, subq_error *err) {
    if (corpus_file_is_tokens(path)) {
        if (c->file || c->n_docs + c->n_eval_docs > 0)
            return subq_fail(err, SUBQ_ERR_ARG, "%s is a pre-tokenised corpus: pass it as the only --data path "
                             "(its held-out documents come with it)", path);
        return corpus_file_open(c, path, is_eval, err);
    }
    if (c->file) return subq_fail(err, SUBQ_ERR_ARG, "%s: a pre-tokenised corpus must be the only training data", path);
    path_ctx pc = {c, m, is_eval};
    return walk_files(path, add_file, &pc, err);
}

/* Fisher-Yates shuffle of v[0..n) */
static void shuffle(int *v, int n, uint64_t *rng) {
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(rng_next_u64(rng) % (uint64_t)(i + 1));
        int t = v[i];
        v[i] = v[j];
        v[j] = t;
    }
}

/* Sequences over pieces ids[0..n): greedy packing in order, or one each. */
static subq_status build_split(subq_corpus *c, corpus_split *sp, const int *ids, int n, subq_error *err) {
    sp->order = malloc((size_t)(n > 0 ? n : 1) * sizeof(int));
    sp->first = malloc((size_t)(n + 1) * sizeof(int));
    if (!sp->order || !sp->first) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    memcpy(sp->order, ids, (size_t)n * sizeof(int));
    sp->n_seq = 0;
    sp->n_tokens = 0;
    sp->max_len = 0;
    int fill = 0;
    for (int i = 0; i < n; i++) {
        int len = c->piece_len[ids[i]];
        if (i == 0 || !c->p.pack || fill + len > c->p.seq) {
            if (i > 0 && fill > sp->max_len) sp->max_len = fill;
            sp->first[sp->n_seq++] = i;
            fill = 0;
        }
        fill += len;
        sp->n_tokens += len;
    }
    if (fill > sp->max_len) sp->max_len = fill;
    sp->first[sp->n_seq] = n;
    return SUBQ_OK;
}

/* Cut every document into pieces of at most seq tokens, each with the BOS
 * (when the vocabulary adds one). A piece of fewer than 2 tokens has no
 * query with an earlier key, nothing to learn, and is left out. */
static subq_status cut_pieces(subq_corpus *c, subq_error *err) {
    const int body = c->p.seq - (c->bos >= 0);
    const int n_docs = c->n_docs + c->n_eval_docs;
    int64_t n = 0;
    for (int d = 0; d < n_docs; d++) n += ((int64_t)c->doc_len[d] + body - 1) / body;
    if (n > INT32_MAX / 4) return subq_fail(err, SUBQ_ERR_ARG, "%lld pieces of %d tokens: too many", (long long)n, c->p.seq);
    c->piece_off = malloc((size_t)(n > 0 ? n : 1) * sizeof(int64_t));
    c->piece_len = malloc((size_t)(n > 0 ? n : 1) * sizeof(int32_t));
    c->piece_eval = malloc((size_t)(n > 0 ? n : 1));
    if (!c->piece_off || !c->piece_len || !c->piece_eval) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory for %lld pieces", (long long)n);
    int64_t off = 0;
    for (int d = 0; d < n_docs; d++) {
        for (int64_t at = 0; at < c->doc_len[d]; at += body) {
            const int k = c->doc_len[d] - at < body ? (int)(c->doc_len[d] - at) : body;
            if (k + (c->bos >= 0) < 2) continue;
            c->piece_off[c->n_pieces] = off + at;
            c->piece_len[c->n_pieces] = k + (c->bos >= 0);
            c->piece_eval[c->n_pieces] = c->doc_eval[d];
            c->n_pieces++;
        }
        off += c->doc_len[d];
    }
    return SUBQ_OK;
}

subq_status corpus_finish(subq_corpus *c, subq_error *err) {
    subq_status cs = cut_pieces(c, err);
    if (cs) return cs;
    if (c->n_pieces == 0)
        return subq_fail(err, SUBQ_ERR_ARG, "the training data hold no text (every document is empty)");
    int *tr = malloc((size_t)c->n_pieces * sizeof(int)), *ev = malloc((size_t)c->n_pieces * sizeof(int));
    if (!tr || !ev) {
        free(tr);
        free(ev);
        return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    }
    int ntr = 0, nev = 0;
    if (c->n_eval_docs > 0) {
        for (int i = 0; i < c->n_pieces; i++) {
            if (c->piece_eval[i]) ev[nev++] = i;
            else tr[ntr++] = i;
        }
    } else {
        /* a fixed-seed permutation of the pieces: its first round(frac * n)
         * are held out (at least one when frac > 0, never all) */
        int *perm = malloc((size_t)c->n_pieces * sizeof(int));
        if (!perm) {
            free(tr);
            free(ev);
            return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
        }
        for (int i = 0; i < c->n_pieces; i++) perm[i] = i;
        uint64_t rng = rng_seed(SPLIT_SEED);
        shuffle(perm, c->n_pieces, &rng);
        int n_eval = (int)((double)c->p.eval_frac * c->n_pieces + 0.5);
        if (c->p.eval_frac > 0 && n_eval == 0) n_eval = 1;
        if (n_eval >= c->n_pieces) n_eval = c->n_pieces - 1;
        unsigned char *is_ev = calloc((size_t)c->n_pieces, 1);
        if (!is_ev) {
            free(perm);
            free(tr);
            free(ev);
            return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
        }
        for (int i = 0; i < n_eval; i++) is_ev[perm[i]] = 1;
        /* both splits keep corpus order (eval) / get the training shuffle below */
        for (int i = 0; i < c->n_pieces; i++) {
            if (is_ev[i]) ev[nev++] = i;
            else tr[ntr++] = i;
        }
        free(is_ev);
        free(perm);
    }
    subq_status s = SUBQ_OK;
    if (ntr == 0 && !c->p.eval_only) s = subq_fail(err, SUBQ_ERR_ARG, "no training text left after the held-out split (%d pieces)", c->n_pieces);
    if (!s) {
        uint64_t rng = rng_seed(c->p.seed);
        shuffle(tr, ntr, &rng); /* mix documents before packing */
        s = build_split(c, &c->train, tr, ntr, err);
    }
    if (!s) s = build_split(c, &c->eval, ev, nev, err);
    free(tr);
    free(ev);
    if (s) return s;
    /* fingerprint: the documents (their tokens, lengths and held-out marks),
     * the piece cut and the packing of both splits; it needs no token read
     * (a corpus file carries its tokens' hash) */
    uint64_t h = fnv1a(FNV_OFFSET, &c->tok_hash, sizeof c->tok_hash);
    const int n_docs = c->n_docs + c->n_eval_docs;
    h = fnv1a(h, c->doc_len, (size_t)n_docs * sizeof(int32_t));
    h = fnv1a(h, c->doc_eval, (size_t)n_docs);
    h = fnv1a(h, &c->bos, sizeof c->bos);
    h = fnv1a(h, c->piece_off, (size_t)c->n_pieces * sizeof(int64_t));
    h = fnv1a(h, c->piece_len, (size_t)c->n_pieces * sizeof(int32_t));
    const corpus_split *sps[2] = {&c->train, &c->eval};
    for (int k = 0; k < 2; k++) {
        const corpus_split *sp = sps[k];
        h = fnv1a(h, &sp->n_seq, sizeof sp->n_seq);
        h = fnv1a(h, sp->first, (size_t)(sp->n_seq + 1) * sizeof(int));
        h = fnv1a(h, sp->order, (size_t)sp->first[sp->n_seq] * sizeof(int));
    }
    c->fingerprint = h;
    return SUBQ_OK;
}

subq_status corpus_get(const subq_corpus *c, const corpus_split *sp, int i, int32_t *tok, int32_t *pos, int32_t *seg,
                       int *len, subq_error *err) {
    int n = 0;
    for (int k = sp->first[i]; k < sp->first[i + 1]; k++) {
        const int pc = sp->order[k], has_bos = c->bos >= 0, body = c->piece_len[pc] - has_bos;
        if (has_bos) tok[n] = c->bos;
        if (c->file) {
            subq_status s = corpus_file_read(c, c->piece_off[pc], body, tok + n + has_bos, err);
            if (s) return s;
        } else {
            memcpy(tok + n + has_bos, c->tok + c->piece_off[pc], (size_t)body * sizeof(int32_t));
        }
        for (int j = 0; j < c->piece_len[pc]; j++) {
            if (pos) pos[n + j] = j;
            if (seg) seg[n + j] = k - sp->first[i];
        }
        n += c->piece_len[pc];
    }
    *len = n;
    return SUBQ_OK;
}

int corpus_train_index(const subq_corpus *c, uint64_t cursor, uint64_t seed, int *perm, uint64_t *perm_epoch) {
    const int n = c->train.n_seq;
    uint64_t epoch = cursor / (uint64_t)n;
    if (*perm_epoch != epoch) {
        for (int i = 0; i < n; i++) perm[i] = i;
        uint64_t rng = rng_seed(seed ^ (0x9E3779B97F4A7C15ull * (epoch + 1)));
        shuffle(perm, n, &rng);
        *perm_epoch = epoch;
    }
    return perm[cursor % (uint64_t)n];
}

subq_status corpus_load(const subq_model *m, const subq_corpus_params *p, const char *const *paths, int n_paths,
                        const char *const *eval_paths, int n_eval, subq_corpus **out, subq_error *err) {
    subq_corpus *c;
    subq_status s = corpus_new(m, p, &c, err);
    for (int i = 0; i < n_paths + n_eval && !s; i++)
        s = i < n_paths ? corpus_add_path(c, m, paths[i], 0, err) : corpus_add_path(c, m, eval_paths[i - n_paths], 1, err);
    if (!s) s = corpus_finish(c, err);
    if (s) {
        corpus_free(c);
        c = NULL;
    }
    *out = c;
    return s;
}
