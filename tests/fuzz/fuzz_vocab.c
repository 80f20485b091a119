/* Structure-aware libFuzzer target for the vocabulary loaders and both
 * encoders. The input is read as a vocabulary and a text:
 *
 *   u8 flags      bit 0 gpt2 (else llama), 1 add the 256 byte tokens, 2 scores,
 *                 3 token types, 4 no space prefix, 5 no BOS, 6 control tokens
 *                 <unk> <s> </s> first, 7 types as int8
 *   u8 pre        index into `pres` (gpt2 only; past the end: key absent)
 *   u8 n          tokens, each: u8 len (& 31), bytes, u8 score code, u8 type
 *   u8 n_merges   merges, each: u8 a, u8 b (token indices: "A B"), or a = 255:
 *                 u8 len (& 31) and raw bytes
 *   u8 bos, eos, unk   255: absent, 254: out of range, else index mod n_vocab
 *   the rest      the text (at most 4 KiB)
 *
 * The vocabulary is serialised as GGUF metadata in memory and loaded. When
 * it loads, the text is encoded into exact-size heap buffers below, at and
 * above the count it needs (ASan sees any access past them): a short buffer
 * must give SUBQ_ERR_RANGE with the count, a large enough one the same ids
 * as tokenizer_encode_alloc; ids are in range; decode succeeds and its
 * length is the sum of the pieces. The same with special-token parsing
 * (tokenizer_encode_special, behind subq serve's chat prompts). Any failure
 * must be one line. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "tokenize/bpe.h"
#include "tokenize/tokenizer.h"

typedef struct in {
    const uint8_t *p;
    size_t n;
} in;

static uint8_t take(in *r) {
    if (!r->n) return 0;
    r->n--;
    return *r->p++;
}

/* ---- a minimal GGUF serialiser (metadata only) --------------------------- */

typedef struct buf {
    uint8_t *p;
    size_t n, cap;
} buf;

static void put(buf *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n) cap *= 2;
        b->p = realloc(b->p, cap);
        if (!b->p) abort();
        b->cap = cap;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}
static void put32(buf *b, uint32_t v) { put(b, &v, 4); }
static void put64(buf *b, uint64_t v) { put(b, &v, 8); }
static void put_str(buf *b, const char *s, size_t n) {
    put64(b, n);
    put(b, s, n);
}
static void put_key(buf *b, const char *key, gguf_type t) {
    put_str(b, key, strlen(key));
    put32(b, t);
}

#define MAX_TOK (3 + 256 + 255)
#define MAX_MERGES 255

typedef struct vocab {
    int n;
    char text[MAX_TOK][32];
    uint8_t len[MAX_TOK];
    float score[MAX_TOK];
    int32_t type[MAX_TOK];
    int n_merges;
    char merge[MAX_MERGES][68];
    uint8_t merge_len[MAX_MERGES];
} vocab;

static void add_tok(vocab *v, const void *s, size_t n, float score, int32_t type) {
    memcpy(v->text[v->n], s, n);
    v->len[v->n] = (uint8_t)n;
    v->score[v->n] = score;
    v->type[v->n] = type;
    v->n++;
}

static float score_of(uint8_t c) {
    switch (c) {
    case 0: return NAN;
    case 1: return INFINITY;
    case 2: return -INFINITY;
    case 3: return 0.0f;
    default: return (float)((int)c - 128) / 8.0f;
    }
}

/* New names go at the end: a seed's pre byte keeps its meaning. */
static const char *const pres[] = {"gpt2", "qwen2", "llama-bpe", "smollm", "default", "unknown-pre", "gpt-4o"};

static void fail_if_multiline(const subq_error *e) {
    if (e->msg[0] == '\0' || strchr(e->msg, '\n')) abort();
}

/* Encode (plain or with special tokens) into an exact-size heap buffer of
 * cap ids (NULL for 0). */
static subq_status encode_cap(const tokenizer *t, const char *text, size_t len, bool bos, bool special, size_t cap,
                              int32_t **out, size_t *n) {
    subq_error e = {0};
    *out = cap ? malloc(cap * sizeof **out) : NULL;
    if (cap && !*out) abort();
    subq_status st = special ? tokenizer_encode_special(t, text, len, bos, *out, cap, n, &e)
                             : tokenizer_encode(t, text, len, bos, *out, cap, n, &e);
    if (st) fail_if_multiline(&e);
    return st;
}

static void exercise(const tokenizer *t, const char *text, size_t len, bool bos, bool special) {
    subq_error e = {0};
    int32_t *all = NULL;
    size_t need = 0;
    subq_status st = tokenizer_encode_alloc(t, text, len, bos, special, &all, &need, &e);
    if (st != SUBQ_OK) {
        /* the same failure at every size */
        fail_if_multiline(&e);
        if (all || need) abort();
        int32_t *ids;
        size_t n;
        if (encode_cap(t, text, len, bos, special, len + 8, &ids, &n) != st) abort();
        free(ids);
        return;
    }
    const int nv = tokenizer_n_vocab(t);
    for (size_t i = 0; i < need; i++)
        if (all[i] < 0 || all[i] >= nv) abort();
    /* too small by one, nothing at all, exactly enough, one spare */
    const size_t caps[4] = {need ? need - 1 : 0, 0, need, need + 1};
    for (int k = 0; k < 4; k++) {
        int32_t *ids;
        size_t n = 0;
        st = encode_cap(t, text, len, bos, special, caps[k], &ids, &n);
        if (caps[k] < need) {
            if (st != SUBQ_ERR_RANGE || n != need) abort();
        } else if (st != SUBQ_OK || n != need || (need && memcmp(ids, all, need * sizeof *ids) != 0)) {
            abort();
        }
        free(ids);
    }
    char *dec = NULL;
    size_t dlen = 0, sum = 0;
    if (tokenizer_decode(t, all, need, &dec, &dlen, &e) != SUBQ_OK || dec[dlen] != '\0') abort();
    char piece[8];
    for (size_t i = 0; i < need; i++) {
        int pl = tokenizer_token_to_piece(t, i ? all[i - 1] : -1, all[i], piece, sizeof piece);
        if (pl < 0) abort();
        sum += (size_t)pl;
    }
    if (sum != dlen) abort();
    free(dec);
    free(all);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    in r = {data, size};
    const uint8_t flags = take(&r), pre = take(&r);
    const bool gpt2 = flags & 1;
    static vocab v;
    v.n = 0;
    v.n_merges = 0;
    if (flags & 64) {
        add_tok(&v, "<unk>", 5, 0, TOKEN_TYPE_UNKNOWN);
        add_tok(&v, "<s>", 3, 0, TOKEN_TYPE_CONTROL);
        add_tok(&v, "</s>", 4, 0, TOKEN_TYPE_CONTROL);
    }
    if (flags & 2) {
        for (int b = 0; b < 256; b++) {
            char s[8];
            if (gpt2) {
                /* GPT-2's byte alphabet, as UTF-8 */
                uint32_t cp = bpe_byte_to_cp((uint8_t)b);
                int l = cp < 0x80 ? 1 : 2; /* bytes_to_unicode stays below U+0800 */
                if (l == 1) s[0] = (char)cp;
                else s[0] = (char)(0xC0 | (cp >> 6)), s[1] = (char)(0x80 | (cp & 0x3F));
                add_tok(&v, s, (size_t)l, 0, TOKEN_TYPE_NORMAL);
            } else {
                snprintf(s, sizeof s, "<0x%02X>", b);
                add_tok(&v, s, 6, 0, TOKEN_TYPE_BYTE);
            }
        }
    }
    const int n_rand = take(&r);
    for (int i = 0; i < n_rand && v.n < MAX_TOK; i++) {
        size_t l = take(&r) & 31u;
        if (l > r.n) l = r.n;
        char s[32];
        memcpy(s, r.p, l);
        r.p += l, r.n -= l;
        float sc = score_of(take(&r));
        add_tok(&v, s, l, sc, (int32_t)(int8_t)take(&r));
    }
    const int n_merges = take(&r);
    for (int i = 0; i < n_merges && v.n > 0; i++) {
        uint8_t a = take(&r);
        char *m = v.merge[v.n_merges];
        size_t l;
        if (a == 255) {
            l = take(&r) & 31u;
            if (l > r.n) l = r.n;
            memcpy(m, r.p, l);
            r.p += l, r.n -= l;
        } else {
            int ia = (int)(a % v.n), ib = take(&r) % v.n;
            memcpy(m, v.text[ia], v.len[ia]);
            m[v.len[ia]] = ' ';
            memcpy(m + v.len[ia] + 1, v.text[ib], v.len[ib]);
            l = (size_t)v.len[ia] + 1 + v.len[ib];
        }
        v.merge_len[v.n_merges++] = (uint8_t)l;
    }
    uint8_t ids[3] = {take(&r), take(&r), take(&r)};
    const char *text = (const char *)r.p;
    const size_t tlen = r.n > 4096 ? 4096 : r.n;

    buf b = {0};
    uint64_t n_kv = 2 + ((flags & 4) != 0) + ((flags & 8) != 0) + (gpt2 ? 1 : 0) +
                    (gpt2 && pre < sizeof pres / sizeof pres[0]) + 2;
    for (int k = 0; k < 3; k++) n_kv += ids[k] != 255;
    put(&b, "GGUF", 4);
    put32(&b, 3);
    put64(&b, 0);
    put64(&b, n_kv);
    put_key(&b, "tokenizer.ggml.model", GGUF_TYPE_STRING);
    put_str(&b, gpt2 ? "gpt2" : "llama", gpt2 ? 4 : 5);
    put_key(&b, "tokenizer.ggml.tokens", GGUF_TYPE_ARRAY);
    put32(&b, GGUF_TYPE_STRING);
    put64(&b, (uint64_t)v.n);
    for (int i = 0; i < v.n; i++) put_str(&b, v.text[i], v.len[i]);
    if (flags & 4) {
        put_key(&b, "tokenizer.ggml.scores", GGUF_TYPE_ARRAY);
        put32(&b, GGUF_TYPE_FLOAT32);
        put64(&b, (uint64_t)v.n);
        put(&b, v.score, (size_t)v.n * sizeof(float));
    }
    if (flags & 8) {
        put_key(&b, "tokenizer.ggml.token_type", GGUF_TYPE_ARRAY);
        put32(&b, (flags & 128) ? GGUF_TYPE_INT8 : GGUF_TYPE_INT32);
        put64(&b, (uint64_t)v.n);
        for (int i = 0; i < v.n; i++) {
            if (flags & 128) {
                int8_t t8 = (int8_t)v.type[i];
                put(&b, &t8, 1);
            } else {
                put32(&b, (uint32_t)v.type[i]);
            }
        }
    }
    if (gpt2) {
        put_key(&b, "tokenizer.ggml.merges", GGUF_TYPE_ARRAY);
        put32(&b, GGUF_TYPE_STRING);
        put64(&b, (uint64_t)v.n_merges);
        for (int i = 0; i < v.n_merges; i++) put_str(&b, v.merge[i], v.merge_len[i]);
        if (pre < sizeof pres / sizeof pres[0]) {
            put_key(&b, "tokenizer.ggml.pre", GGUF_TYPE_STRING);
            put_str(&b, pres[pre], strlen(pres[pre]));
        }
    }
    static const char *const id_keys[3] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                                           "tokenizer.ggml.unknown_token_id"};
    for (int k = 0; k < 3; k++) {
        if (ids[k] == 255) continue;
        put_key(&b, id_keys[k], GGUF_TYPE_UINT32);
        put32(&b, ids[k] == 254 ? 1000000u : (uint32_t)(v.n ? ids[k] % v.n : ids[k]));
    }
    uint8_t no = (flags & 16) ? 0 : 1, bos_flag = (flags & 32) ? 0 : 1;
    put_key(&b, "tokenizer.ggml.add_space_prefix", GGUF_TYPE_BOOL);
    put(&b, &no, 1);
    put_key(&b, "tokenizer.ggml.add_bos_token", GGUF_TYPE_BOOL);
    put(&b, &bos_flag, 1);

    gguf_file *f = NULL;
    tokenizer *t = NULL;
    subq_error e = {0};
    if (gguf_open_memory(b.p, b.n, &f, &e) != SUBQ_OK) abort(); /* our own serialisation */
    subq_status st = tokenizer_from_gguf(f, &t, &e);
    gguf_close(f); /* the tokenizer owns copies of everything */
    if (st != SUBQ_OK) {
        fail_if_multiline(&e);
        if (t) abort();
    } else {
        exercise(t, text, tlen, true, false);
        exercise(t, text, tlen, false, false);
        exercise(t, text, tlen, flags & 32, true); /* special tokens in the text (chat templates) */
        tokenizer_free(t);
    }
    free(b.p);
    return 0;
}
