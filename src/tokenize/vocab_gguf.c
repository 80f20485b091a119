#include "tokenize/vocab_gguf.h"

#include <string.h>

#include "base/error.h"
#include "base/fingerprint.h"

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
