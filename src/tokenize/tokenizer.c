/* SentencePiece-style BPE over a GGUF "llama" vocabulary (llama.cpp's "spm"
 * tokenizer).
 *
 * Encode: optional space prefix, ' ' -> U+2581, split into UTF-8 characters,
 * then repeatedly merge the adjacent pair whose concatenation is a vocabulary
 * token with the highest score (leftmost on ties). Candidates live in a
 * max-heap keyed (score desc, left index asc) over a doubly-linked symbol
 * list; entries made stale by an earlier merge are dropped when popped, so the
 * whole thing is O(n log n). The text is first cut wherever no token can
 * span the cut (the byte pair there occurs in no token), which gives the same
 * result with small, cache-resident heaps. Final symbols that are not tokens
 * fall back to one <0xXX> token per byte.
 *
 * Merges may only form NORMAL, USER_DEFINED and UNUSED tokens (as in
 * SentencePiece; llama.cpp would also form CONTROL/UNKNOWN/BYTE tokens whose
 * text happens to appear, e.g. "<s>", which then would not decode back).
 *
 * Why byte fallback of single characters is all llama.cpp's "resegment" step
 * needs here: every merge produces a symbol whose text is a vocabulary token,
 * so a final symbol is either such a token (emitted as is) or an untouched
 * single character. resegment only recurses for symbols that are not tokens
 * but are in the merge history, and the merge history only holds tokens. */
#include "tokenize/tokenizer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "tokenize/bpe.h"
#include "tokenize/merge_heap.h"
#include "tokenize/utf8.h"
#include "tokenize/vocab_gguf.h"

/* Vocabularies beyond this are certainly hostile (real ones are <= 256K);
 * the bound also keeps every id and offset inside int32 / size_t math. */
#define TOK_MAX_VOCAB (1 << 24)
/* Real tokens are a few dozen bytes; the bound keeps piece lengths in int. */
#define TOK_MAX_TOKEN_LEN (1 << 16)
/* Escaped text must fit int32 symbol offsets. */
#define TOK_MAX_TEXT ((size_t)INT32_MAX - 8)

struct tokenizer {
    tokenizer_kind kind;
    int n_vocab;
    int bos, eos, unk;           /* -1 when absent */
    bool add_bos;
    bool add_space_prefix;

    vocab_texts v;               /* token texts (raw, with U+2581), types, text -> id */
    float *score;
    uint8_t *mergeable;          /* 1: encode may produce this token from text */
    size_t max_merge_len;        /* longest mergeable token text, in bytes */

    int32_t byte_tok[256];       /* token for each raw byte, -1 if none */
    uint8_t pair_bits[65536 / 8]; /* byte pairs "ab" that occur inside producible tokens */

    bpe_vocab *bpe;              /* TOKENIZER_BPE: the whole vocabulary lives here (bpe.c) */
};

/* ---- loading ------------------------------------------------------------- */

static int hex_val(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* "<0xXX>" -> XX, else -1. */
static int parse_byte_token(const char *s, size_t n) {
    if (n != 6 || s[0] != '<' || s[1] != '0' || s[2] != 'x' || s[5] != '>') return -1;
    int hi = hex_val(s[3]), lo = hex_val(s[4]);
    if (hi < 0 || lo < 0) return -1;
    return hi * 16 + lo;
}

subq_status tokenizer_from_gguf(const gguf_file *f, tokenizer **out, subq_error *err) {
    if (!out) return subq_fail(err, SUBQ_ERR_ARG, "tokenizer_from_gguf: out is NULL");
    *out = NULL;
    if (!f) return subq_fail(err, SUBQ_ERR_ARG, "tokenizer_from_gguf: file is NULL");

    /* Which algorithm. */
    const gguf_kv *mkv = gguf_find_kv(f, "tokenizer.ggml.model");
    if (!mkv) return subq_fail(err, SUBQ_ERR_FORMAT, "missing key tokenizer.ggml.model");
    if (mkv->value.type != GGUF_TYPE_STRING)
        return subq_fail(err, SUBQ_ERR_FORMAT, "tokenizer.ggml.model has type %s, expected string",
                         gguf_type_name(mkv->value.type));
    gguf_str model = mkv->value.v.str;
    if (model.len == 4 && memcmp(model.data, "gpt2", 4) == 0) {
        /* Byte-level BPE: bpe.c loads and encodes; this object only
         * dispatches and answers the common queries. */
        bpe_vocab *bv = NULL;
        subq_status bst = bpe_from_gguf(f, &bv, err);
        if (bst != SUBQ_OK) return bst;
        tokenizer *t = calloc(1, sizeof *t);
        if (!t) {
            bpe_free(bv);
            return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory allocating the tokenizer");
        }
        t->kind = TOKENIZER_BPE;
        t->bpe = bv;
        t->n_vocab = bpe_n_vocab(bv);
        t->bos = bpe_bos(bv), t->eos = bpe_eos(bv), t->unk = -1;
        t->add_bos = bpe_add_bos(bv);
        t->add_space_prefix = false;
        *out = t;
        return SUBQ_OK;
    }
    if (!(model.len == 5 && memcmp(model.data, "llama", 5) == 0)) {
        /* Print at most 64 bytes, with non-printable bytes as '?', so a hostile
         * name cannot break the one-line message. */
        char name[65];
        size_t n = model.len < 64 ? (size_t)model.len : 64;
        for (size_t i = 0; i < n; i++) {
            unsigned char c = (unsigned char)model.data[i];
            name[i] = (c >= 0x20 && c < 0x7F) ? (char)c : '?';
        }
        name[n] = '\0';
        return subq_fail(err, SUBQ_ERR_UNSUPPORTED, "tokenizer model '%s'%s is not supported",
                         name, model.len > 64 ? "..." : "");
    }

    /* Vocabulary arrays. */
    const gguf_value *toks = NULL, *types = NULL;
    int n = 0;
    subq_status st = vocab_tokens_arr(f, TOK_MAX_VOCAB, &toks, &n, err);
    if (st != SUBQ_OK) return st;

    const gguf_kv *skv = gguf_find_kv(f, "tokenizer.ggml.scores");
    const gguf_value *scores = NULL;
    if (skv) {
        if (skv->value.type != GGUF_TYPE_ARRAY ||
            (skv->value.v.arr.elem_type != GGUF_TYPE_FLOAT32 &&
             skv->value.v.arr.elem_type != GGUF_TYPE_FLOAT64))
            return subq_fail(err, SUBQ_ERR_FORMAT,
                             "tokenizer.ggml.scores must be an array of float32");
        scores = &skv->value;
        if (scores->v.arr.n != (uint64_t)n)
            return subq_fail(err, SUBQ_ERR_FORMAT,
                             "tokenizer.ggml.scores has %llu entries but there are %d tokens",
                             (unsigned long long)scores->v.arr.n, n);
    }
    if ((st = vocab_types_arr(f, n, &types, err)) != SUBQ_OK) return st;

    int bos, eos, unk;
    if ((st = vocab_special_id(f, "tokenizer.ggml.bos_token_id", n, &bos, err)) != SUBQ_OK) return st;
    if ((st = vocab_special_id(f, "tokenizer.ggml.eos_token_id", n, &eos, err)) != SUBQ_OK) return st;
    if ((st = vocab_special_id(f, "tokenizer.ggml.unknown_token_id", n, &unk, err)) != SUBQ_OK)
        return st;
    bool add_space_prefix = true, add_bos = true;
    if ((st = gguf_get_bool_or(f, "tokenizer.ggml.add_space_prefix", true, &add_space_prefix,
                               err)) != SUBQ_OK)
        return st;
    if ((st = gguf_get_bool_or(f, "tokenizer.ggml.add_bos_token", true, &add_bos, err)) !=
        SUBQ_OK)
        return st;

    tokenizer *t = calloc(1, sizeof *t);
    if (!t) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory allocating the tokenizer");
    t->kind = TOKENIZER_SPM;
    t->n_vocab = n;
    t->bos = bos, t->eos = eos, t->unk = unk;
    t->add_bos = add_bos;
    t->add_space_prefix = add_space_prefix;
    if ((st = vocab_texts_load(toks, types, n, TOK_MAX_TOKEN_LEN, &t->v, err)) != SUBQ_OK) {
        tokenizer_free(t);
        return st;
    }

    t->score = malloc((size_t)n * sizeof *t->score);
    t->mergeable = malloc((size_t)n);
    if (!t->score || !t->mergeable) {
        tokenizer_free(t);
        return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory loading a vocabulary of %d tokens", n);
    }
    for (int i = 0; i < n; i++) {
        double sc = scores ? gguf_arr_get_f64(scores, (uint64_t)i) : 0.0;
        /* NaN would break the heap order; treat it as "never preferred". */
        t->score[i] = isnan(sc) ? -INFINITY : (float)sc;
    }

    /* Only text-like tokens may be formed from text (SentencePiece keeps
     * control, unknown and byte pieces out of its piece table): otherwise
     * literal "<s>" or "<0x41>" in the input could become a token that
     * decodes to something else. */
    t->max_merge_len = 0;
    for (int i = 0; i < n; i++) {
        int ty = t->v.type[i];
        t->mergeable[i] =
            !(ty == TOKEN_TYPE_CONTROL || ty == TOKEN_TYPE_UNKNOWN || ty == TOKEN_TYPE_BYTE);
        size_t len = vocab_len(&t->v, i);
        if (!t->mergeable[i]) continue;
        if (len > t->max_merge_len) t->max_merge_len = len;
        const uint8_t *u = (const uint8_t *)vocab_text(&t->v, i);
        for (size_t j = 0; j + 1 < len; j++) {
            unsigned k = (unsigned)u[j] << 8 | u[j + 1];
            t->pair_bits[k >> 3] |= (uint8_t)(1u << (k & 7));
        }
    }

    /* Decoded pieces. */
    size_t poff = 0;
    for (int i = 0; i < n; i++) {
        const char *s = vocab_text(&t->v, i);
        size_t len = vocab_len(&t->v, i);
        t->v.piece_off[i] = poff;
        int ty = t->v.type[i];
        int b;
        if (ty == TOKEN_TYPE_CONTROL || ty == TOKEN_TYPE_UNKNOWN) {
            /* nothing: BOS/EOS/unk are not text */
        } else if (ty == TOKEN_TYPE_BYTE && (b = parse_byte_token(s, len)) >= 0) {
            t->v.piece[poff++] = (char)b;
        } else {
            /* NORMAL, USER_DEFINED, UNUSED (and malformed BYTE names):
             * U+2581 -> ' '. User-defined tokens are unescaped too because
             * here they are only ever formed by merges over the escaped text
             * (llama.cpp matches them before escaping and copies them as is). */
            for (size_t j = 0; j < len;) {
                if (j + 3 <= len && (uint8_t)s[j] == 0xE2 && (uint8_t)s[j + 1] == 0x96 &&
                    (uint8_t)s[j + 2] == 0x81) {
                    t->v.piece[poff++] = ' ';
                    j += 3;
                } else {
                    t->v.piece[poff++] = s[j++];
                }
            }
        }
    }
    t->v.piece_off[n] = poff;

    /* Byte fallback table: BYTE tokens <0xXX> (first one wins), else a token
     * whose piece is exactly that one byte. */
    for (int b = 0; b < 256; b++) t->byte_tok[b] = -1;
    for (int i = 0; i < n; i++) {
        if (t->v.type[i] != TOKEN_TYPE_BYTE) continue;
        int b = parse_byte_token(vocab_text(&t->v, i), vocab_len(&t->v, i));
        if (b >= 0 && t->byte_tok[b] < 0) t->byte_tok[b] = i;
    }
    for (int b = 0; b < 256; b++) {
        if (t->byte_tok[b] >= 0) continue;
        char c = (char)b;
        int32_t id = vocab_lookup(&t->v, &c, 1);
        if (id >= 0 && t->v.piece_off[id + 1] - t->v.piece_off[id] == 1 &&
            t->v.piece[t->v.piece_off[id]] == c)
            t->byte_tok[b] = id;
    }

    *out = t;
    return SUBQ_OK;
}

void tokenizer_free(tokenizer *t) {
    if (!t) return;
    vocab_texts_free(&t->v);
    free(t->score);
    free(t->mergeable);
    bpe_free(t->bpe);
    free(t);
}

tokenizer_kind tokenizer_get_kind(const tokenizer *t) { return t->kind; }
int tokenizer_n_vocab(const tokenizer *t) { return t->n_vocab; }
int tokenizer_bos(const tokenizer *t) { return t->bos; }
int tokenizer_eos(const tokenizer *t) { return t->eos; }
bool tokenizer_add_bos(const tokenizer *t) { return t->add_bos; }

/* ---- encode -------------------------------------------------------------- */

typedef struct spm_sym {
    int32_t off;  /* start in the escaped text */
    int32_t n;    /* bytes; 0 once merged into its left neighbour */
    int32_t prev; /* -1: none */
    int32_t next; /* -1: none */
} spm_sym;

/* Queue the pair (left, right) if its concatenation is a token encode may produce. */
static bool try_add_bigram(const tokenizer *t, const char *buf, const spm_sym *sym, merge_heap *h,
                           int32_t left, int32_t right) {
    if (left < 0 || right < 0) return true;
    size_t len = (size_t)sym[left].n + (size_t)sym[right].n;
    if (len > t->max_merge_len) return true;
    int32_t id = vocab_lookup(&t->v, buf + sym[left].off, len);
    if (id < 0 || !t->mergeable[id]) return true;
    merge_cand b = {t->score[id], left, right, (int32_t)len};
    return merge_heap_push(h, b);
}

/* Scratch buffers reused across the segments of one encode call. */
typedef struct spm_work {
    spm_sym *sym;
    size_t sym_cap;
    merge_heap heap;
} spm_work;

/* Whether a merge could join a symbol ending in byte a to one starting with b:
 * only if some producible token contains the byte pair "ab". */
static inline bool pair_can_merge(const tokenizer *t, uint8_t a, uint8_t b) {
    unsigned k = (unsigned)a << 8 | b;
    return (t->pair_bits[k >> 3] >> (k & 7)) & 1;
}

/* Merge the characters of buf[a..b) and append the resulting ids. */
static subq_status spm_segment(const tokenizer *t, const char *buf, size_t a, size_t b,
                               spm_work *w, int32_t *out, size_t cap, size_t *count,
                               subq_error *err) {
    if (b - a > w->sym_cap) { /* at most one symbol per byte */
        size_t c = w->sym_cap ? w->sym_cap : 256;
        while (c < b - a) c *= 2;
        spm_sym *sym = realloc(w->sym, c * sizeof *sym);
        if (!sym) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory tokenising");
        w->sym = sym, w->sym_cap = c;
    }
    spm_sym *sym = w->sym;
    int32_t ns = 0;
    for (size_t i = a; i < b;) {
        size_t l = 1; /* buf is valid UTF-8: a character is its lead byte + continuations */
        while (i + l < b && ((uint8_t)buf[i + l] & 0xC0) == 0x80) l++;
        sym[ns].off = (int32_t)i;
        sym[ns].n = (int32_t)l;
        sym[ns].prev = ns - 1;
        sym[ns].next = (i + l < b) ? ns + 1 : -1;
        ns++;
        i += l;
    }

    merge_heap *h = &w->heap;
    h->n = 0;
    for (int32_t i = 1; i < ns; i++) {
        if (!try_add_bigram(t, buf, sym, h, i - 1, i)) goto nomem;
    }
    while (h->n > 0) {
        merge_cand bg = merge_heap_pop(h);
        spm_sym *l = &sym[bg.left], *r = &sym[bg.right];
        /* Stale: one side was merged away or grew since the pair was queued
         * (symbols only grow, and a pair whose sides are both alive is still
         * adjacent, since a symbol only absorbs its current right neighbour). */
        if (l->n == 0 || r->n == 0 || l->n + r->n != bg.size) continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = bg.left;
        if (!try_add_bigram(t, buf, sym, h, l->prev, bg.left)) goto nomem;
        if (!try_add_bigram(t, buf, sym, h, bg.left, l->next)) goto nomem;
    }

    /* Symbol 0 is never absorbed (merges fold right into left). */
    for (int32_t i = 0; i >= 0; i = sym[i].next) {
        const char *s = buf + sym[i].off;
        size_t n = (size_t)sym[i].n;
        int32_t id = vocab_lookup(&t->v, s, n);
        if (id >= 0 && t->mergeable[id]) {
            if (*count < cap) out[*count] = id;
            (*count)++;
            continue;
        }
        /* A single character outside the vocabulary: one token per byte. */
        for (size_t j = 0; j < n; j++) {
            uint8_t c = (uint8_t)s[j];
            int32_t bt = t->byte_tok[c] >= 0 ? t->byte_tok[c] : t->unk;
            if (bt < 0)
                return subq_fail(err, SUBQ_ERR_TOKENIZE,
                                 "no token for byte 0x%02X (no byte token and no unknown token)", c);
            if (*count < cap) out[*count] = bt;
            (*count)++;
        }
    }
    return SUBQ_OK;
nomem:
    return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory tokenising");
}

/* Append the ids of text[0..len) (valid UTF-8) to out: ids are stored
 * while *count < cap and *count always advances, so the caller learns how
 * much room the whole text needs. */
static subq_status encode_append(const tokenizer *t, const char *text, size_t len, int32_t *out, size_t cap,
                                 size_t *count, subq_error *err) {
    /* Empty text gives no tokens (not even the space prefix), as in llama.cpp. */
    if (len == 0) return SUBQ_OK;
    if (t->kind == TOKENIZER_BPE) return bpe_encode(t->bpe, text, len, out, cap, count, err);

    /* Escaped text: optional leading U+2581, every ' ' -> U+2581 (3 bytes). */
    if (len > TOK_MAX_TEXT)
        return subq_fail(err, SUBQ_ERR_ARG, "text of %zu bytes is too long to tokenise", len);
    size_t n_space = 0;
    for (size_t i = 0; i < len; i++) n_space += text[i] == ' ';
    size_t blen = len + 2 * n_space + (t->add_space_prefix ? 3 : 0); /* < 3 * 2^31: no overflow */
    if (blen > TOK_MAX_TEXT)
        return subq_fail(err, SUBQ_ERR_ARG, "text of %zu bytes is too long to tokenise", len);
    char *buf = malloc(blen);
    if (!buf) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory tokenising %zu bytes", len);
    size_t bp = 0;
    if (t->add_space_prefix) buf[bp++] = '\xE2', buf[bp++] = '\x96', buf[bp++] = '\x81';
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            buf[bp++] = '\xE2', buf[bp++] = '\x96', buf[bp++] = '\x81';
        } else {
            buf[bp++] = text[i];
        }
    }

    /* Cut the text where no merge can cross (e.g. between a word and the
     * U+2581 that starts the next one) and merge each piece on its own: the
     * candidates of one piece never depend on another, so the result equals
     * merging the whole text at once, but heaps stay small and cache-hot. */
    spm_work w = {0};
    subq_status st = SUBQ_OK;
    size_t seg = 0;
    for (size_t i = 1; i <= blen && st == SUBQ_OK; i++) {
        if (i < blen && (((uint8_t)buf[i] & 0xC0) == 0x80 ||
                         pair_can_merge(t, (uint8_t)buf[i - 1], (uint8_t)buf[i])))
            continue;
        st = spm_segment(t, buf, seg, i, &w, out, cap, count, err);
        seg = i;
    }
    merge_heap_free(&w.heap);
    free(w.sym);
    free(buf);
    return st;
}

/* The count goes out either way; more than the buffer holds is an error. */
static subq_status report_count(size_t count, size_t cap, size_t *n_out, subq_error *err) {
    *n_out = count;
    if (count > cap)
        return subq_fail(err, SUBQ_ERR_RANGE, "the text is %zu tokens, more than the %zu the buffer holds", count,
                         cap);
    return SUBQ_OK;
}

subq_status tokenizer_encode(const tokenizer *t, const char *text, size_t len, bool add_bos,
                             int32_t *out, size_t cap, size_t *n_out, subq_error *err) {
    if (n_out) *n_out = 0;
    if (!t || !n_out || (!text && len) || (!out && cap))
        return subq_fail(err, SUBQ_ERR_ARG, "tokenizer_encode: NULL argument");
    size_t bad = utf8_validate(text, len);
    if (bad < len) return subq_fail(err, SUBQ_ERR_TOKENIZE, "invalid UTF-8 at byte %zu", bad);

    size_t count = 0;
    if (add_bos && t->bos >= 0) {
        if (count < cap) out[count] = t->bos;
        count++;
    }
    subq_status st = encode_append(t, text, len, out, cap, &count, err);
    return st ? st : report_count(count, cap, n_out, err);
}

subq_status tokenizer_encode_alloc(const tokenizer *t, const char *text, size_t len, bool add_bos, bool special,
                                   int32_t **out, size_t *n_out, subq_error *err) {
    if (out) *out = NULL;
    if (n_out) *n_out = 0;
    if (!out || !n_out) return subq_fail(err, SUBQ_ERR_ARG, "tokenizer_encode_alloc: NULL argument");
    /* One id per byte plus BOS is enough for nearly every vocabulary (not for
     * one without U+2581, where a space is three byte tokens): then a second
     * pass with the exact size. */
    size_t cap = len < SIZE_MAX / sizeof(int32_t) - 2 ? len + 2 : SIZE_MAX, n = 0;
    for (int pass = 0; pass < 2; pass++) {
        if (cap > SIZE_MAX / sizeof(int32_t))
            return subq_fail(err, SUBQ_ERR_NOMEM, "text of %zu bytes is too long to tokenise", len);
        int32_t *ids = malloc(cap * sizeof *ids);
        if (!ids) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory tokenising %zu bytes", len);
        subq_status st = special ? tokenizer_encode_special(t, text, len, add_bos, ids, cap, &n, err)
                                 : tokenizer_encode(t, text, len, add_bos, ids, cap, &n, err);
        if (st == SUBQ_OK) {
            *out = ids;
            *n_out = n;
            return SUBQ_OK;
        }
        free(ids);
        if (st != SUBQ_ERR_RANGE) return st;
        cap = n;
    }
    return subq_fail(err, SUBQ_ERR_RANGE, "the token count of the text changed between two passes");
}

/* ---- decode -------------------------------------------------------------- */

/* Piece bytes of tok after `prev`, without copying. */
static const char *piece_of(const tokenizer *t, int32_t prev, int32_t tok, size_t *n) {
    if (t->kind == TOKENIZER_BPE) return bpe_piece(t->bpe, tok, n); /* no space prefix to undo */
    const char *p = t->v.piece + t->v.piece_off[tok];
    size_t len = t->v.piece_off[tok + 1] - t->v.piece_off[tok];
    /* Undo the space prefix encode added at the start of the text. */
    if (t->add_space_prefix && (prev < 0 || prev == t->bos) && len > 0 && p[0] == ' ') p++, len--;
    *n = len;
    return p;
}

int tokenizer_token_to_piece(const tokenizer *t, int32_t prev, int32_t tok, char *buf,
                             size_t cap) {
    if (!t || tok < 0 || tok >= t->n_vocab) return -1;
    size_t n;
    const char *p = piece_of(t, prev, tok, &n);
    if (buf && cap) memcpy(buf, p, n < cap ? n : cap);
    return (int)n; /* <= TOK_MAX_TOKEN_LEN */
}

subq_status tokenizer_decode(const tokenizer *t, const int32_t *toks, size_t n, char **out,
                             size_t *out_len, subq_error *err) {
    if (out) *out = NULL;
    if (out_len) *out_len = 0;
    if (!t || !out || (!toks && n))
        return subq_fail(err, SUBQ_ERR_ARG, "tokenizer_decode: NULL argument");
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (toks[i] < 0 || toks[i] >= t->n_vocab)
            return subq_fail(err, SUBQ_ERR_RANGE,
                             "token id %d at position %zu is out of range (vocabulary has %d)",
                             (int)toks[i], i, t->n_vocab);
        size_t len;
        piece_of(t, i ? toks[i - 1] : -1, toks[i], &len);
        if (len > SIZE_MAX - 1 - total)
            return subq_fail(err, SUBQ_ERR_NOMEM, "decoded text of %zu tokens is too long", n);
        total += len;
    }
    char *s = malloc(total + 1);
    if (!s) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory decoding %zu tokens", n);
    size_t pos = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len;
        const char *p = piece_of(t, i ? toks[i - 1] : -1, toks[i], &len);
        memcpy(s + pos, p, len);
        pos += len;
    }
    s[pos] = '\0';
    *out = s;
    if (out_len) *out_len = pos;
    return SUBQ_OK;
}

/* ---- encode with special tokens ------------------------------------------ */

/* Special tokens bucketed by first byte, longest first inside a bucket. */
typedef struct special_index {
    int32_t *ids;
    int32_t start[257];
} special_index;

static int is_special(const tokenizer *t, int32_t id) {
    int ty = t->v.type[id];
    return (ty == TOKEN_TYPE_CONTROL || ty == TOKEN_TYPE_USER_DEFINED || ty == TOKEN_TYPE_UNKNOWN) &&
           vocab_len(&t->v, id) > 0;
}

static subq_status special_index_build(const tokenizer *t, special_index *ix, subq_error *err) {
    memset(ix->start, 0, sizeof ix->start);
    int n = 0;
    for (int32_t id = 0; id < t->n_vocab; id++)
        if (is_special(t, id)) ix->start[(uint8_t)vocab_text(&t->v, id)[0] + 1]++, n++;
    ix->ids = malloc((size_t)(n ? n : 1) * sizeof(int32_t));
    if (!ix->ids) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory tokenising");
    for (int c = 0; c < 256; c++) ix->start[c + 1] += ix->start[c];
    int32_t fill[256];
    memcpy(fill, ix->start, sizeof fill);
    for (int32_t id = 0; id < t->n_vocab; id++) {
        if (!is_special(t, id)) continue;
        int c = (uint8_t)vocab_text(&t->v, id)[0], i = fill[c]++;
        /* insertion by length, descending: buckets are small */
        size_t len = vocab_len(&t->v, id);
        while (i > ix->start[c] && vocab_len(&t->v, ix->ids[i - 1]) < len) {
            ix->ids[i] = ix->ids[i - 1];
            i--;
        }
        ix->ids[i] = id;
    }
    return SUBQ_OK;
}

subq_status tokenizer_encode_special(const tokenizer *t, const char *text, size_t len, bool add_bos,
                                     int32_t *out, size_t cap, size_t *n_out, subq_error *err) {
    if (!t || t->kind == TOKENIZER_BPE) return tokenizer_encode(t, text, len, add_bos, out, cap, n_out, err);
    if (n_out) *n_out = 0;
    if (!n_out || (!text && len) || (!out && cap))
        return subq_fail(err, SUBQ_ERR_ARG, "tokenizer_encode_special: NULL argument");
    size_t bad = utf8_validate(text, len);
    if (bad < len) return subq_fail(err, SUBQ_ERR_TOKENIZE, "invalid UTF-8 at byte %zu", bad);
    special_index ix;
    subq_status st = special_index_build(t, &ix, err);
    if (st) return st;
    size_t count = 0, pos = 0;
    if (add_bos && t->bos >= 0) {
        if (count < cap) out[count] = t->bos;
        count++;
    }
    while (pos < len && st == SUBQ_OK) {
        /* leftmost special at or after pos, the longest there */
        size_t at = len, n_sp = 0;
        int32_t sid = -1;
        for (size_t i = pos; i < len && sid < 0; i++) {
            uint8_t c = (uint8_t)text[i];
            for (int32_t k = ix.start[c]; k < ix.start[c + 1]; k++) {
                int32_t id = ix.ids[k];
                size_t l = vocab_len(&t->v, id);
                if (l <= len - i && memcmp(text + i, vocab_text(&t->v, id), l) == 0) {
                    at = i, n_sp = l, sid = id;
                    break;
                }
            }
        }
        if (at > pos) st = encode_append(t, text + pos, at - pos, out, cap, &count, err);
        if (st == SUBQ_OK && sid >= 0) {
            if (count < cap) out[count] = sid;
            count++;
        }
        pos = at + n_sp;
    }
    free(ix.ids);
    return st ? st : report_count(count, cap, n_out, err);
}
