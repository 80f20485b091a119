#include "tokenize/vocab_gguf.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/fingerprint.h"
#include "tokenize/tokenizer.h"

uint64_t vocab_hash(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)s[i];
        h *= 0x100000001b3ull;
    }
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return h;
}

subq_status vocab_special_id(const gguf_file *f, const char *key, int n_vocab, int *out, subq_error *err) {
    *out = -1;
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return SUBQ_OK;
    gguf_type ty = kv->value.type;
    if ((ty == GGUF_TYPE_INT8 || ty == GGUF_TYPE_INT16 || ty == GGUF_TYPE_INT32 || ty == GGUF_TYPE_INT64) &&
        kv->value.v.i64 < 0) {
        if (kv->value.v.i64 == -1) return SUBQ_OK;
        return subq_fail(err, SUBQ_ERR_FORMAT, "%s = %lld is not a valid token id", key, (long long)kv->value.v.i64);
    }
    uint32_t v = 0;
    subq_status st = gguf_get_u32(f, key, &v, err);
    if (st != SUBQ_OK) return st;
    if (v == 0xFFFFFFFFu) return SUBQ_OK;
    if (v >= (uint32_t)n_vocab)
        return subq_fail(err, SUBQ_ERR_FORMAT, "%s = %u is out of range (vocabulary has %d tokens)", key, v, n_vocab);
    *out = (int)v;
    return SUBQ_OK;
}

bool vocab_is_int_type(gguf_type ty) {
    return ty == GGUF_TYPE_UINT8 || ty == GGUF_TYPE_INT8 || ty == GGUF_TYPE_UINT16 || ty == GGUF_TYPE_INT16 ||
           ty == GGUF_TYPE_UINT32 || ty == GGUF_TYPE_INT32 || ty == GGUF_TYPE_UINT64 || ty == GGUF_TYPE_INT64;
}

uint64_t vocab_fingerprint(const gguf_file *f) {
    uint64_t h = FNV_OFFSET;
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const gguf_kv *kv = &f->kv[i];
        if (kv->key.len < 10 || memcmp(kv->key.data, "tokenizer.", 10) != 0) continue;
        h = fnv1a(h, kv->key.data, (size_t)kv->key.len);
        h = gguf_value_hash(h, &kv->value);
    }
    return h;
}

subq_status vocab_tokens_arr(const gguf_file *f, int max_vocab, const gguf_value **toks, int *n, subq_error *err) {
    if (!gguf_find_kv(f, "tokenizer.ggml.tokens"))
        return subq_fail(err, SUBQ_ERR_FORMAT, "missing key tokenizer.ggml.tokens");
    subq_status st = gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, toks, err);
    if (st != SUBQ_OK) return st;
    uint64_t n64 = (*toks)->v.arr.n;
    if (n64 == 0) return subq_fail(err, SUBQ_ERR_FORMAT, "tokenizer.ggml.tokens is empty");
    if (n64 > (uint64_t)max_vocab)
        return subq_fail(err, SUBQ_ERR_FORMAT, "tokenizer.ggml.tokens has %llu entries (max %d)",
                         (unsigned long long)n64, max_vocab);
    *n = (int)n64;
    return SUBQ_OK;
}

subq_status vocab_types_arr(const gguf_file *f, int n, const gguf_value **types, subq_error *err) {
    *types = NULL;
    const gguf_kv *tkv = gguf_find_kv(f, "tokenizer.ggml.token_type");
    if (!tkv) return SUBQ_OK;
    if (tkv->value.type != GGUF_TYPE_ARRAY || !vocab_is_int_type(tkv->value.v.arr.elem_type))
        return subq_fail(err, SUBQ_ERR_FORMAT, "tokenizer.ggml.token_type must be an array of int32");
    if (tkv->value.v.arr.n != (uint64_t)n)
        return subq_fail(err, SUBQ_ERR_FORMAT, "tokenizer.ggml.token_type has %llu entries but there are %d tokens",
                         (unsigned long long)tkv->value.v.arr.n, n);
    *types = &tkv->value;
    return SUBQ_OK;
}

int32_t vocab_lookup(const vocab_texts *v, const char *s, size_t n) {
    size_t i = (size_t)vocab_hash(s, n) & v->map_mask;
    for (;;) {
        int32_t id = v->map[i];
        if (id < 0) return -1;
        if (vocab_len(v, id) == n && memcmp(vocab_text(v, id), s, n) == 0) return id;
        i = (i + 1) & v->map_mask;
    }
}

/* Later duplicates replace earlier ones. */
static void map_insert(vocab_texts *v, int32_t id) {
    const char *s = vocab_text(v, id);
    size_t n = vocab_len(v, id);
    size_t i = (size_t)vocab_hash(s, n) & v->map_mask;
    for (;;) {
        int32_t cur = v->map[i];
        if (cur < 0 || (vocab_len(v, cur) == n && memcmp(vocab_text(v, cur), s, n) == 0)) {
            v->map[i] = id;
            return;
        }
        i = (i + 1) & v->map_mask;
    }
}

subq_status vocab_texts_load(const gguf_value *toks, const gguf_value *types, int n, int max_len, vocab_texts *v,
                             subq_error *err) {
    memset(v, 0, sizeof *v);
    /* Total text size; the per-token bound keeps the sum far from overflow. */
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        uint64_t len = toks->v.arr.items[i].v.str.len;
        if (len > (uint64_t)max_len)
            return subq_fail(err, SUBQ_ERR_FORMAT, "token %d is %llu bytes long (max %d)", i,
                             (unsigned long long)len, max_len);
        total += (size_t)len; /* <= 2^24 * 2^16: no overflow */
    }
    size_t cap = 1;
    while (cap < (size_t)n * 2) cap <<= 1; /* load factor <= 1/2 keeps probes short */
    v->map_mask = cap - 1;
    v->text = malloc(2 * (total + 1));
    v->off = malloc(2 * ((size_t)n + 1) * sizeof *v->off);
    v->type = malloc((size_t)n * sizeof *v->type);
    v->map = malloc(cap * sizeof *v->map);
    if (!v->text || !v->off || !v->type || !v->map)
        return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory loading a vocabulary of %d tokens", n);
    v->piece = v->text + total + 1;
    v->piece_off = v->off + n + 1;

    size_t off = 0;
    for (int i = 0; i < n; i++) {
        gguf_str s = toks->v.arr.items[i].v.str;
        v->off[i] = off;
        if (s.len) memcpy(v->text + off, s.data, (size_t)s.len);
        off += (size_t)s.len;
        int64_t ty = types ? gguf_arr_get_i64(types, (uint64_t)i) : TOKEN_TYPE_NORMAL;
        if (ty < 0 || ty > TOKEN_TYPE_BYTE) ty = TOKEN_TYPE_NORMAL; /* unknown kinds: plain text */
        v->type[i] = (int32_t)ty;
    }
    v->off[n] = off;
    v->text[off] = '\0';
    memset(v->map, 0xFF, cap * sizeof *v->map); /* all -1 */
    for (int i = 0; i < n; i++) map_insert(v, i);
    return SUBQ_OK;
}

void vocab_texts_free(vocab_texts *v) {
    free(v->text);
    free(v->off);
    free(v->type);
    free(v->map);
}
