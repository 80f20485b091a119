/* GGUF v2/v3 reader. The file is treated as hostile: every read checks the
 * remaining bytes, every count is bounded by the bytes that could hold it
 * before anything is allocated, and every size computation is overflow-checked.
 * Parsing only touches the header (kvs + tensor infos); tensor data is never
 * read here, only bounds-checked. */
#include "gguf/gguf.h"

#include "base/bigmem.h"
#include "base/error.h"
#include "base/fingerprint.h"
#include "quant/types.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the GGUF reader copies little-endian values straight from the file"
#endif

#define GGUF_MAX_NESTING 8                      /* arrays of arrays of ... */
#define GGUF_KV_MIN_BYTES (8 + 4 + 1)           /* key length, value type, smallest value */
#define GGUF_TENSOR_MIN_BYTES (8 + 4 + 8 + 4 + 8) /* name length, n_dims, ne[0], type, offset */
#define GGUF_SHOW_NAME 64                       /* bytes of a key/name echoed in messages */

/* ---- parse state ------------------------------------------------------ */

typedef struct rd {
    const uint8_t *base;
    size_t size;
    size_t pos;
    subq_error *err;
    char fname[192];    /* sanitised, for messages */
    /* Where we are, for messages: */
    const char *sect;   /* "header", "kv" or "tensor" */
    uint64_t idx;       /* kv / tensor index */
    const char *name;   /* key or tensor name once read (not NUL-terminated), else NULL */
    size_t name_len;
    int64_t elem;       /* element of a top-level array being read, -1 outside arrays */
} rd;

/* Copy untrusted bytes for a one-line message: bytes that are not
 * printable UTF-8 show as \xNN (text_escape); what does not fit in dst is
 * cut with "...". */
static void sanitize(char *dst, size_t cap, const char *s, size_t n) {
    if (cap < 4) {
        if (cap) dst[0] = '\0';
        return;
    }
    if (text_escape(dst, cap, s, n) < n) {
        text_escape(dst, cap - 3, s, n);
        strcat(dst, "...");
    }
}

static void where(const rd *r, char *buf, size_t cap) {
    char nm[GGUF_SHOW_NAME + 4];
    size_t k;
    if (strcmp(r->sect, "header") == 0) {
        snprintf(buf, cap, "header");
        return;
    }
    snprintf(buf, cap, "%s %" PRIu64, r->sect, r->idx);
    k = strlen(buf);
    if (r->name && k < cap) {
        sanitize(nm, sizeof nm, r->name, r->name_len);
        snprintf(buf + k, cap - k, " ('%s')", nm);
        k = strlen(buf);
    }
    if (r->elem >= 0 && k < cap) snprintf(buf + k, cap - k, " element %" PRId64, r->elem);
}

/* "<file>: <where>: <problem>" */
static subq_status rd_fail(rd *r, subq_status code, const char *fmt, ...) SUBQ_PRINTF(3, 4);
static subq_status rd_fail(rd *r, subq_status code, const char *fmt, ...) {
    char msg[320], w[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    where(r, w, sizeof w);
    return subq_fail(r->err, code, "%s: %s: %s", r->fname, w, msg);
}

static subq_status rd_trunc(rd *r, const char *what, uint64_t need) {
    char w[160];
    where(r, w, sizeof w);
    return subq_fail(r->err, SUBQ_ERR_FORMAT,
                     "%s: truncated at byte %zu while reading %s %s (needs %" PRIu64
                     " bytes, %zu left); the file is incomplete: re-download or re-convert it",
                     r->fname, r->pos, w, what, need, r->size - r->pos);
}

static subq_status rd_bytes(rd *r, uint64_t n, const char *what, const uint8_t **p) {
    if (n > r->size - r->pos) return rd_trunc(r, what, n);
    *p = r->base + r->pos;
    r->pos += (size_t)n;
    return SUBQ_OK;
}

/* n bytes copied out to v */
static subq_status rd_copy(rd *r, uint64_t n, const char *what, void *v) {
    const uint8_t *p = NULL;
    subq_status s = rd_bytes(r, n, what, &p);
    if (s == SUBQ_OK) memcpy(v, p, (size_t)n);
    return s;
}

static subq_status rd_u32(rd *r, const char *what, uint32_t *v) { return rd_copy(r, 4, what, v); }
static subq_status rd_u64(rd *r, const char *what, uint64_t *v) { return rd_copy(r, 8, what, v); }

/* u64 length + bytes; the bytes stay in the buffer. */
static subq_status rd_str(rd *r, const char *what, gguf_str *out) {
    uint64_t len;
    const uint8_t *p = NULL;
    subq_status s = rd_u64(r, what, &len);
    if (s != SUBQ_OK) return s;
    if (len > r->size)
        return rd_fail(r, SUBQ_ERR_FORMAT,
                       "%s length %" PRIu64 " at byte %zu is larger than the whole file (%zu bytes)"
                       "; corrupt file?",
                       what, len, r->pos - 8, r->size);
    s = rd_bytes(r, len, what, &p);
    if (s != SUBQ_OK) return s;
    out->len = len;
    out->data = (const char *)p;
    return SUBQ_OK;
}

/* ---- values ----------------------------------------------------------- */

size_t gguf_type_size(uint32_t t) {
    switch (t) {
    case GGUF_TYPE_UINT8:
    case GGUF_TYPE_INT8:
    case GGUF_TYPE_BOOL: return 1;
    case GGUF_TYPE_UINT16:
    case GGUF_TYPE_INT16: return 2;
    case GGUF_TYPE_UINT32:
    case GGUF_TYPE_INT32:
    case GGUF_TYPE_FLOAT32: return 4;
    case GGUF_TYPE_UINT64:
    case GGUF_TYPE_INT64:
    case GGUF_TYPE_FLOAT64: return 8;
    default: return 0;
    }
}

uint64_t gguf_value_hash(uint64_t h, const gguf_value *v) {
    const uint32_t ty = v->type;
    h = fnv1a(h, &ty, sizeof ty);
    switch (v->type) {
    case GGUF_TYPE_STRING: return fnv1a(h, v->v.str.data, (size_t)v->v.str.len);
    case GGUF_TYPE_ARRAY: {
        const uint32_t et = v->v.arr.elem_type;
        h = fnv1a(h, &et, sizeof et);
        h = fnv1a(h, &v->v.arr.n, sizeof v->v.arr.n);
        if (v->v.arr.items) {
            for (uint64_t i = 0; i < v->v.arr.n; i++) h = gguf_value_hash(h, &v->v.arr.items[i]);
            return h;
        }
        return fnv1a(h, v->v.arr.data, (size_t)(v->v.arr.n * gguf_type_size(et)));
    }
    case GGUF_TYPE_FLOAT32:
    case GGUF_TYPE_FLOAT64: return fnv1a(h, &v->v.f64, sizeof v->v.f64);
    case GGUF_TYPE_BOOL: {
        const unsigned char b = v->v.b;
        return fnv1a(h, &b, 1);
    }
    case GGUF_TYPE_INT8:
    case GGUF_TYPE_INT16:
    case GGUF_TYPE_INT32:
    case GGUF_TYPE_INT64: return fnv1a(h, &v->v.i64, sizeof v->v.i64);
    default: return fnv1a(h, &v->v.u64, sizeof v->v.u64);
    }
}

const char *gguf_type_name(gguf_type t) {
    switch (t) {
    case GGUF_TYPE_UINT8: return "uint8";
    case GGUF_TYPE_INT8: return "int8";
    case GGUF_TYPE_UINT16: return "uint16";
    case GGUF_TYPE_INT16: return "int16";
    case GGUF_TYPE_UINT32: return "uint32";
    case GGUF_TYPE_INT32: return "int32";
    case GGUF_TYPE_FLOAT32: return "float32";
    case GGUF_TYPE_BOOL: return "bool";
    case GGUF_TYPE_STRING: return "string";
    case GGUF_TYPE_ARRAY: return "array";
    case GGUF_TYPE_UINT64: return "uint64";
    case GGUF_TYPE_INT64: return "int64";
    case GGUF_TYPE_FLOAT64: return "float64";
    case GGUF_TYPE_COUNT: break;
    }
    return "unknown";
}

/* Decode one fixed-size element at p (unaligned) into v. */
static void decode_scalar(gguf_type t, const uint8_t *p, gguf_value *v) {
    v->type = t;
    switch (t) {
    case GGUF_TYPE_UINT8: v->v.u64 = p[0]; break;
    case GGUF_TYPE_INT8: v->v.i64 = (int8_t)p[0]; break;
    case GGUF_TYPE_BOOL: v->v.b = p[0] != 0; break;
    case GGUF_TYPE_UINT16: { uint16_t x; memcpy(&x, p, 2); v->v.u64 = x; break; }
    case GGUF_TYPE_INT16: { int16_t x; memcpy(&x, p, 2); v->v.i64 = x; break; }
    case GGUF_TYPE_UINT32: { uint32_t x; memcpy(&x, p, 4); v->v.u64 = x; break; }
    case GGUF_TYPE_INT32: { int32_t x; memcpy(&x, p, 4); v->v.i64 = x; break; }
    case GGUF_TYPE_FLOAT32: { float x; memcpy(&x, p, 4); v->v.f64 = x; break; }
    case GGUF_TYPE_UINT64: { uint64_t x; memcpy(&x, p, 8); v->v.u64 = x; break; }
    case GGUF_TYPE_INT64: { int64_t x; memcpy(&x, p, 8); v->v.i64 = x; break; }
    case GGUF_TYPE_FLOAT64: { double x; memcpy(&x, p, 8); v->v.f64 = x; break; }
    default: break;
    }
}

static void free_value(gguf_value *v) {
    if (v->type != GGUF_TYPE_ARRAY || v->v.arr.items == NULL) return;
    /* items is calloc'd: elements not parsed yet are zero (UINT8) and own nothing. */
    for (uint64_t i = 0; i < v->v.arr.n; i++) free_value(&v->v.arr.items[i]);
    free(v->v.arr.items);
    v->v.arr.items = NULL;
}

static subq_status read_value(rd *r, uint32_t type, gguf_value *v, int depth) {
    uint32_t et;
    uint64_t n;
    size_t esz, rem, min_elem;
    const uint8_t *p = NULL;
    subq_status s;

    v->type = (gguf_type)type;
    esz = gguf_type_size(type);
    if (esz) {
        s = rd_bytes(r, esz, "value", &p);
        if (s != SUBQ_OK) return s;
        decode_scalar((gguf_type)type, p, v);
        return SUBQ_OK;
    }
    if (type == GGUF_TYPE_STRING) return rd_str(r, "string", &v->v.str);

    /* ARRAY. The depth limit bounds both recursion and hostile allocations. */
    if (depth >= GGUF_MAX_NESTING)
        return rd_fail(r, SUBQ_ERR_FORMAT, "arrays nested more than %d deep at byte %zu",
                       GGUF_MAX_NESTING, r->pos);
    s = rd_u32(r, "array element type", &et);
    if (s != SUBQ_OK) return s;
    if (et >= GGUF_TYPE_COUNT)
        return rd_fail(r, SUBQ_ERR_FORMAT, "unknown array element type %" PRIu32 " at byte %zu",
                       et, r->pos - 4);
    s = rd_u64(r, "array length", &n);
    if (s != SUBQ_OK) return s;
    v->v.arr.elem_type = (gguf_type)et;
    v->v.arr.n = 0;
    v->v.arr.data = NULL;
    v->v.arr.items = NULL;

    rem = r->size - r->pos;
    esz = gguf_type_size(et);
    /* Smallest encoding of one element: fixed size, a string's u64 length,
     * or a nested array's type + length. */
    min_elem = esz ? esz : (et == GGUF_TYPE_STRING ? 8 : 12);
    if (n > rem / min_elem)
        return rd_fail(r, SUBQ_ERR_FORMAT,
                       "array of %" PRIu64 " %s elements cannot fit in the %zu bytes left at byte %zu"
                       " (truncated or corrupt file)",
                       n, gguf_type_name((gguf_type)et), rem, r->pos);
    if (esz) {
        v->v.arr.n = n;
        v->v.arr.data = r->base + r->pos;
        r->pos += (size_t)(n * esz); /* n * esz <= rem: no overflow */
        return SUBQ_OK;
    }
    if (n == 0) return SUBQ_OK;
    v->v.arr.items = calloc((size_t)n, sizeof *v->v.arr.items);
    if (!v->v.arr.items)
        return rd_fail(r, SUBQ_ERR_NOMEM, "out of memory for an array of %" PRIu64 " elements", n);
    v->v.arr.n = n;
    for (uint64_t i = 0; i < n; i++) {
        if (depth == 0) r->elem = (int64_t)i;
        s = read_value(r, et, &v->v.arr.items[i], depth + 1);
        if (s != SUBQ_OK) return s;
    }
    if (depth == 0) r->elem = -1;
    return SUBQ_OK;
}

/* ---- duplicate detection ---------------------------------------------- */

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    return h;
}

typedef gguf_str (*key_of_fn)(const gguf_file *f, uint64_t i);

static gguf_str kv_key(const gguf_file *f, uint64_t i) { return f->kv[i].key; }

static gguf_str tensor_key(const gguf_file *f, uint64_t i) {
    gguf_str s = {strlen(f->tensors[i].name), f->tensors[i].name};
    return s;
}

/* Open-addressing hash set over indices, so hostile files with many entries
 * stay linear. On a duplicate returns SUBQ_OK with *first < *second;
 * *second == n when there is none. */
static subq_status find_duplicate(const gguf_file *f, uint64_t n, key_of_fn key_of, uint64_t *first,
                                  uint64_t *second) {
    size_t cap = 16;
    uint64_t *slot;
    *second = n;
    if (n < 2) return SUBQ_OK;
    while (cap < 2 * n) cap *= 2; /* n <= file size / 13, so this cannot overflow */
    slot = malloc(cap * sizeof *slot);
    if (!slot) return SUBQ_ERR_NOMEM;
    for (size_t i = 0; i < cap; i++) slot[i] = UINT64_MAX;
    for (uint64_t i = 0; i < n; i++) {
        gguf_str k = key_of(f, i);
        size_t h = (size_t)hash_bytes(k.data, (size_t)k.len) & (cap - 1);
        for (;;) {
            if (slot[h] == UINT64_MAX) {
                slot[h] = i;
                break;
            }
            gguf_str o = key_of(f, slot[h]);
            if (o.len == k.len && memcmp(o.data, k.data, (size_t)k.len) == 0) {
                *first = slot[h];
                *second = i;
                free(slot);
                return SUBQ_OK;
            }
            h = (h + 1) & (cap - 1);
        }
    }
    free(slot);
    return SUBQ_OK;
}

/* ---- the parser ------------------------------------------------------- */

static void free_file(gguf_file *f) {
    if (!f) return;
    if (f->kv) {
        for (uint64_t i = 0; i < f->n_kv; i++) free_value(&f->kv[i].value);
        free(f->kv);
    }
    free(f->tensors);
    free(f);
}

static subq_status parse_header(rd *r, gguf_file *f) {
    uint32_t magic_ok, version;
    subq_status s;
    const uint8_t *p = NULL;

    if (r->size == 0)
        return subq_fail(r->err, SUBQ_ERR_FORMAT,
                         "%s: empty file (0 bytes); is this a GGUF model file?", r->fname);
    magic_ok = memcmp(r->base, "GGUF", r->size < 4 ? r->size : 4) == 0;
    if (!magic_ok) {
        char hex[16] = "";
        for (size_t i = 0; i < 4 && i < r->size; i++)
            snprintf(hex + 3 * i, sizeof hex - 3 * i, "%02x ", r->base[i]);
        hex[strlen(hex) - 1] = '\0';
        return rd_fail(r, SUBQ_ERR_FORMAT,
                       "bad magic (%s, expected 47 47 55 46 'GGUF'); is this a GGUF model file?", hex);
    }
    s = rd_bytes(r, 4, "magic", &p);
    if (s != SUBQ_OK) return s;
    s = rd_u32(r, "version", &version);
    if (s != SUBQ_OK) return s;
    if (version == 1)
        return rd_fail(r, SUBQ_ERR_UNSUPPORTED,
                       "GGUF version 1 is not supported (only versions 2 and 3); re-convert the "
                       "model with a current llama.cpp");
    if (version != 2 && version != 3) {
        /* A byte-swapped small version is a big-endian file. */
        uint32_t sw = __builtin_bswap32(version);
        if (sw >= 1 && sw <= 3)
            return rd_fail(r, SUBQ_ERR_UNSUPPORTED,
                           "big-endian GGUF files are not supported (version field %" PRIu32 ")",
                           version);
        return rd_fail(r, SUBQ_ERR_FORMAT,
                       "unsupported GGUF version %" PRIu32 " (expected 2 or 3); corrupt file?",
                       version);
    }
    f->version = version;
    s = rd_u64(r, "tensor count", &f->n_tensors);
    if (s != SUBQ_OK) return s;
    s = rd_u64(r, "kv count", &f->n_kv);
    if (s != SUBQ_OK) return s;
    return SUBQ_OK;
}

static subq_status parse_kvs(rd *r, gguf_file *f) {
    size_t rem = r->size - r->pos;
    uint64_t n = f->n_kv;
    subq_status s;

    /* Bound the counts by the bytes that could hold them before allocating. */
    if (n > rem / GGUF_KV_MIN_BYTES)
        return rd_fail(r, SUBQ_ERR_FORMAT,
                       "%" PRIu64 " kvs cannot fit in the %zu bytes after the header"
                       " (at least %d bytes each); truncated or corrupt file",
                       n, rem, GGUF_KV_MIN_BYTES);
    rem -= (size_t)n * GGUF_KV_MIN_BYTES;
    if (f->n_tensors > rem / GGUF_TENSOR_MIN_BYTES)
        return rd_fail(r, SUBQ_ERR_FORMAT,
                       "%" PRIu64 " tensors and %" PRIu64 " kvs cannot fit in the %zu bytes after "
                       "the header; truncated or corrupt file",
                       f->n_tensors, n, r->size - r->pos);
    /* free_file walks f->n_kv entries: count them only once they have storage
     * (calloc'd, so entries not parsed yet own nothing). */
    f->n_kv = 0;
    if (n == 0) return SUBQ_OK;
    f->kv = calloc((size_t)n, sizeof *f->kv);
    if (!f->kv) return rd_fail(r, SUBQ_ERR_NOMEM, "out of memory for %" PRIu64 " kvs", n);
    f->n_kv = n;

    for (uint64_t i = 0; i < n; i++) {
        gguf_kv *kv = &f->kv[i];
        uint32_t type;
        r->sect = "kv";
        r->idx = i;
        r->name = NULL;
        r->elem = -1;
        s = rd_str(r, "key", &kv->key);
        if (s != SUBQ_OK) return s;
        if (kv->key.len == 0) return rd_fail(r, SUBQ_ERR_FORMAT, "empty key at byte %zu", r->pos - 8);
        r->name = kv->key.data;
        r->name_len = (size_t)kv->key.len;
        s = rd_u32(r, "value type", &type);
        if (s != SUBQ_OK) return s;
        if (type >= GGUF_TYPE_COUNT)
            return rd_fail(r, SUBQ_ERR_FORMAT, "unknown value type %" PRIu32 " at byte %zu",
                           type, r->pos - 4);
        s = read_value(r, type, &kv->value, 0);
        if (s != SUBQ_OK) return s;
    }
    r->sect = "header";
    r->name = NULL;
    r->elem = -1;

    uint64_t a, b;
    s = find_duplicate(f, n, kv_key, &a, &b);
    if (s != SUBQ_OK) return rd_fail(r, s, "out of memory checking %" PRIu64 " keys", n);
    if (b < n) {
        char nm[GGUF_SHOW_NAME + 4];
        sanitize(nm, sizeof nm, f->kv[b].key.data, (size_t)f->kv[b].key.len);
        return rd_fail(r, SUBQ_ERR_FORMAT, "duplicate key '%s' (kv %" PRIu64 " and kv %" PRIu64 ")",
                       nm, a, b);
    }

    const gguf_kv *al = gguf_find_kv(f, "general.alignment");
    if (al) {
        if (al->value.type != GGUF_TYPE_UINT32)
            return rd_fail(r, SUBQ_ERR_FORMAT, "general.alignment has type %s, expected uint32",
                           gguf_type_name(al->value.type));
        uint64_t v = al->value.v.u64;
        /* The GGUF spec asks for a multiple of 8; a power of two keeps the
         * rounding exact. Smaller alignments would put f32 and f16 tensor
         * data at addresses the kernels may not load from. */
        if (v < 8 || (v & (v - 1)) != 0)
            return rd_fail(r, SUBQ_ERR_FORMAT,
                           "general.alignment is %" PRIu64 ", expected a power of two >= 8", v);
        f->alignment = v;
    }
    return SUBQ_OK;
}

static subq_status parse_tensor_info(rd *r, gguf_file *f, uint64_t i) {
    gguf_tensor *t = &f->tensors[i];
    gguf_str name = {0, NULL};
    subq_status s;
    const ggml_type_traits *tr;
    uint64_t ne_total = 1, rows, row_bytes, blocks;

    r->sect = "tensor";
    r->idx = i;
    r->name = NULL;
    r->elem = -1;
    s = rd_str(r, "name", &name);
    if (s != SUBQ_OK) return s;
    if (name.len == 0 || name.len >= sizeof t->name)
        return rd_fail(r, SUBQ_ERR_FORMAT, "name length %" PRIu64 " (must be 1..%zu)", name.len,
                       sizeof t->name - 1);
    r->name = name.data;
    r->name_len = (size_t)name.len;
    if (memchr(name.data, '\0', (size_t)name.len))
        return rd_fail(r, SUBQ_ERR_FORMAT, "tensor name contains a NUL byte");
    memcpy(t->name, name.data, (size_t)name.len);
    t->name[name.len] = '\0';

    s = rd_u32(r, "n_dims", &t->n_dims);
    if (s != SUBQ_OK) return s;
    if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
        return rd_fail(r, SUBQ_ERR_FORMAT, "n_dims %" PRIu32 " (must be 1..%d)", t->n_dims,
                       GGUF_MAX_DIMS);
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        s = rd_u64(r, "dimensions", &t->ne[d]);
        if (s != SUBQ_OK) return s;
        if (t->ne[d] == 0) return rd_fail(r, SUBQ_ERR_FORMAT, "dimension %" PRIu32 " is 0", d);
        /* ggml keeps shapes in int64_t: the element count must fit there. */
        if (t->ne[d] > (uint64_t)INT64_MAX / ne_total)
            return rd_fail(r, SUBQ_ERR_FORMAT,
                           "element count overflows at dimension %" PRIu32 " (ne = %" PRIu64 ")", d,
                           t->ne[d]);
        ne_total *= t->ne[d];
    }
    t->n_elements = ne_total;

    s = rd_u32(r, "type", &t->type);
    if (s != SUBQ_OK) return s;
    tr = ggml_type_get(t->type);
    if (!tr)
        return rd_fail(r, SUBQ_ERR_UNSUPPORTED,
                       "unknown tensor type %" PRIu32 " (a ggml type newer than subq, or a corrupt "
                       "file)",
                       t->type);
    if (t->ne[0] % (uint64_t)tr->block_size != 0)
        return rd_fail(r, SUBQ_ERR_FORMAT,
                       "row length %" PRIu64 " is not a multiple of the %s block size %d", t->ne[0],
                       tr->name, tr->block_size);
    blocks = t->ne[0] / (uint64_t)tr->block_size;
    if (blocks > UINT64_MAX / (uint64_t)tr->type_size)
        return rd_fail(r, SUBQ_ERR_FORMAT, "row size overflows");
    row_bytes = blocks * (uint64_t)tr->type_size;
    rows = ne_total / t->ne[0];
    if (rows > UINT64_MAX / row_bytes) return rd_fail(r, SUBQ_ERR_FORMAT, "byte size overflows");
    t->n_bytes = row_bytes * rows;

    s = rd_u64(r, "offset", &t->offset);
    if (s != SUBQ_OK) return s;
    if (t->offset % f->alignment != 0)
        return rd_fail(r, SUBQ_ERR_FORMAT,
                       "data offset %" PRIu64 " is not a multiple of the alignment %" PRIu64,
                       t->offset, f->alignment);
    return SUBQ_OK;
}

static subq_status parse_tensors(rd *r, gguf_file *f) {
    uint64_t n = f->n_tensors;
    size_t rem = r->size - r->pos;
    subq_status s;
    char nm[GGUF_SHOW_NAME + 4];

    r->sect = "header";
    /* Recheck against what is really left after the kvs. */
    if (n > rem / GGUF_TENSOR_MIN_BYTES)
        return rd_fail(r, SUBQ_ERR_FORMAT,
                       "%" PRIu64 " tensor infos cannot fit in the %zu bytes left at byte %zu"
                       " (at least %d bytes each); truncated or corrupt file",
                       n, rem, r->pos, GGUF_TENSOR_MIN_BYTES);
    if (n > 0) {
        f->tensors = calloc((size_t)n, sizeof *f->tensors);
        if (!f->tensors) return rd_fail(r, SUBQ_ERR_NOMEM, "out of memory for %" PRIu64 " tensors", n);
    }
    for (uint64_t i = 0; i < n; i++) {
        s = parse_tensor_info(r, f, i);
        if (s != SUBQ_OK) return s;
    }
    r->sect = "header";
    r->name = NULL;

    uint64_t a, b;
    s = find_duplicate(f, n, tensor_key, &a, &b);
    if (s != SUBQ_OK) return rd_fail(r, s, "out of memory checking %" PRIu64 " tensor names", n);
    if (b < n) {
        sanitize(nm, sizeof nm, f->tensors[b].name, strlen(f->tensors[b].name));
        return rd_fail(r, SUBQ_ERR_FORMAT,
                       "duplicate tensor name '%s' (tensor %" PRIu64 " and tensor %" PRIu64 ")", nm,
                       a, b);
    }

    /* The data section starts at the end of the header rounded up to the alignment. */
    uint64_t pos = r->pos;
    if (pos > UINT64_MAX - (f->alignment - 1))
        return rd_fail(r, SUBQ_ERR_FORMAT, "data section offset overflows");
    f->data_offset = (pos + f->alignment - 1) & ~(f->alignment - 1);

    for (uint64_t i = 0; i < n; i++) {
        gguf_tensor *t = &f->tensors[i];
        uint64_t size = r->size;
        sanitize(nm, sizeof nm, t->name, strlen(t->name));
        if (t->offset > UINT64_MAX - f->data_offset ||
            t->n_bytes > UINT64_MAX - f->data_offset - t->offset)
            return subq_fail(r->err, SUBQ_ERR_FORMAT,
                             "%s: tensor %" PRIu64 " ('%s'): data offset %" PRIu64 " + size %" PRIu64
                             " overflows; corrupt file",
                             r->fname, i, nm, t->offset, t->n_bytes);
        uint64_t end = f->data_offset + t->offset + t->n_bytes;
        if (end > size)
            return subq_fail(r->err, SUBQ_ERR_FORMAT,
                             "%s: truncated: tensor %" PRIu64 " ('%s') data ends at byte %" PRIu64
                             " but the file has %" PRIu64 " bytes; re-download or re-convert it",
                             r->fname, i, nm, end, size);
        t->data = r->base + f->data_offset + t->offset;
    }
    return SUBQ_OK;
}

static subq_status parse(const uint8_t *base, size_t size, const char *fname, gguf_file **out,
                         subq_error *err) {
    rd r;
    subq_status s;
    gguf_file *f;

    memset(&r, 0, sizeof r);
    r.base = base;
    r.size = size;
    r.err = err;
    r.sect = "header";
    r.elem = -1;
    sanitize(r.fname, sizeof r.fname, fname, strlen(fname));

    f = calloc(1, sizeof *f);
    if (!f) return subq_fail(err, SUBQ_ERR_NOMEM, "%s: out of memory", r.fname);
    f->base = base;
    f->size = size;
    f->alignment = GGUF_DEFAULT_ALIGNMENT;

    s = parse_header(&r, f);
    if (s == SUBQ_OK) s = parse_kvs(&r, f);
    if (s == SUBQ_OK) s = parse_tensors(&r, f);
    if (s != SUBQ_OK) {
        free_file(f);
        return s;
    }
    *out = f;
    return SUBQ_OK;
}

/* ---- public entry points ---------------------------------------------- */

subq_status gguf_open_memory(const void *data, size_t size, gguf_file **out, subq_error *err) {
    if (!out) return subq_fail(err, SUBQ_ERR_ARG, "gguf_open_memory: out is NULL");
    *out = NULL;
    if (!data && size > 0) return subq_fail(err, SUBQ_ERR_ARG, "gguf_open_memory: data is NULL");
    return parse(data, size, "<memory>", out, err);
}

/* The whole file into a new buffer *out. */
static subq_status read_whole(int fd, size_t size, const char *nm, void **out, subq_error *err) {
    uint8_t *buf = bigmem_alloc(size);
    if (!buf) return subq_fail(err, SUBQ_ERR_NOMEM, "%s: out of memory reading %zu bytes", nm, size);
    for (size_t at = 0; at < size;) {
        const size_t want = size - at < ((size_t)1 << 30) ? size - at : (size_t)1 << 30;
        ssize_t got = pread(fd, buf + at, want, (off_t)at);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            int e = errno;
            free(buf);
            return subq_fail(err, SUBQ_ERR_IO, "%s: read failed at byte %zu: %s", nm, at,
                             got < 0 ? strerror(e) : "unexpected end of file");
        }
        at += (size_t)got;
    }
    *out = buf;
    return SUBQ_OK;
}

subq_status gguf_open(const char *path, gguf_file **out, subq_error *err) { return gguf_open_ex(path, 0, out, err); }

subq_status gguf_load(const char *path, gguf_read_fn read_fn, void *out, subq_error *err) {
    gguf_file *f;
    subq_status s = gguf_open(path, &f, err);
    if (s) return s;
    s = read_fn(f, path, out, err);
    gguf_close(f);
    return s;
}

subq_status gguf_open_ex(const char *path, int read_in, gguf_file **out, subq_error *err) {
    struct stat st;
    void *map;
    int fd;
    subq_status s;
    char nm[192];

    if (!out) return subq_fail(err, SUBQ_ERR_ARG, "gguf_open: out is NULL");
    *out = NULL;
    if (!path) return subq_fail(err, SUBQ_ERR_ARG, "gguf_open: path is NULL");
    sanitize(nm, sizeof nm, path, strlen(path));

    /* O_NONBLOCK: opening a FIFO for reading would wait for a writer forever;
     * this way it opens at once and the regular-file check below refuses it
     * (the flag changes nothing for a regular file, which is only mapped). */
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return subq_fail(err, SUBQ_ERR_IO, "%s: cannot open: %s", nm, strerror(errno));
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return subq_fail(err, SUBQ_ERR_IO, "%s: cannot stat: %s", nm, strerror(e));
    }
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        return subq_fail(err, SUBQ_ERR_IO, "%s: is a directory, not a GGUF model file", nm);
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return subq_fail(err, SUBQ_ERR_IO, "%s: not a regular file", nm);
    }
    if (st.st_size == 0) {
        close(fd);
        return subq_fail(err, SUBQ_ERR_FORMAT, "%s: empty file (0 bytes); is this a GGUF model file?",
                         nm);
    }
    if (st.st_size < 0 || (uint64_t)st.st_size > SIZE_MAX) {
        close(fd);
        return subq_fail(err, SUBQ_ERR_IO, "%s: file too large to map", nm);
    }
    if (read_in) {
        void *buf = NULL;
        s = read_whole(fd, (size_t)st.st_size, nm, &buf, err);
        close(fd);
        if (s != SUBQ_OK) return s;
        s = parse(buf, (size_t)st.st_size, path, out, err);
        if (s != SUBQ_OK) {
            free(buf);
            return s;
        }
        (*out)->owns_buffer = 1;
        return SUBQ_OK;
    }
    map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        int e = errno;
        close(fd);
        return subq_fail(err, SUBQ_ERR_IO, "%s: cannot mmap %lld bytes: %s", nm,
                         (long long)st.st_size, strerror(e));
    }
    close(fd); /* the mapping keeps the file alive */

    s = parse(map, (size_t)st.st_size, path, out, err);
    if (s != SUBQ_OK) {
        munmap(map, (size_t)st.st_size);
        return s;
    }
    (*out)->owns_mapping = 1;
    return SUBQ_OK;
}

void gguf_close(gguf_file *f) {
    if (!f) return;
    if (f->owns_mapping && f->base) munmap((void *)f->base, f->size);
    if (f->owns_buffer) free((void *)f->base);
    free_file(f);
}

/* ---- lookups and getters ---------------------------------------------- */

uint64_t gguf_tensor_bytes(const gguf_file *f) {
    uint64_t n = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) n += f->tensors[i].n_bytes;
    return n;
}

const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key) {
    size_t n;
    if (!f || !key) return NULL;
    n = strlen(key);
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const gguf_kv *kv = &f->kv[i];
        if (kv->key.len == n && memcmp(kv->key.data, key, n) == 0) return kv;
    }
    return NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
    if (!f || !name) return NULL;
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
    return NULL;
}

static int is_unsigned(gguf_type t) {
    return t == GGUF_TYPE_UINT8 || t == GGUF_TYPE_UINT16 || t == GGUF_TYPE_UINT32 ||
           t == GGUF_TYPE_UINT64;
}

static int is_signed(gguf_type t) {
    return t == GGUF_TYPE_INT8 || t == GGUF_TYPE_INT16 || t == GGUF_TYPE_INT32 ||
           t == GGUF_TYPE_INT64;
}

/* SUBQ_ERR_FORMAT: the value of key is not of the type `want` names. */
static subq_status wrong_type(const gguf_value *v, const char *key, const char *want, subq_error *err) {
    char ty[48];
    if (v->type == GGUF_TYPE_ARRAY)
        snprintf(ty, sizeof ty, "array of %s", gguf_type_name(v->v.arr.elem_type));
    else
        snprintf(ty, sizeof ty, "%s", gguf_type_name(v->type));
    return subq_fail(err, SUBQ_ERR_FORMAT, "key '%s' has type %s, expected %s", key, ty, want);
}

static subq_status kv_to_u32(const gguf_kv *kv, const char *key, uint32_t *out, subq_error *err) {
    const gguf_value *v = &kv->value;
    if (is_unsigned(v->type)) {
        if (v->v.u64 > UINT32_MAX)
            return subq_fail(err, SUBQ_ERR_FORMAT, "key '%s' is %" PRIu64 ", too large for uint32",
                             key, v->v.u64);
        *out = (uint32_t)v->v.u64;
        return SUBQ_OK;
    }
    if (is_signed(v->type)) {
        if (v->v.i64 < 0 || v->v.i64 > (int64_t)UINT32_MAX)
            return subq_fail(err, SUBQ_ERR_FORMAT, "key '%s' is %" PRId64 ", out of range for uint32",
                             key, v->v.i64);
        *out = (uint32_t)v->v.i64;
        return SUBQ_OK;
    }
    return wrong_type(v, key, "an integer", err);
}

subq_status gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out, subq_error *err) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return subq_fail(err, SUBQ_ERR_FORMAT, "missing key '%s'", key ? key : "(null)");
    return kv_to_u32(kv, key, out, err);
}

subq_status gguf_get_u32_or(const gguf_file *f, const char *key, uint32_t def, uint32_t *out,
                            subq_error *err) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) {
        *out = def;
        return SUBQ_OK;
    }
    return kv_to_u32(kv, key, out, err);
}

subq_status gguf_get_f32_or(const gguf_file *f, const char *key, float def, float *out,
                            subq_error *err) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) {
        *out = def;
        return SUBQ_OK;
    }
    if (kv->value.type == GGUF_TYPE_FLOAT32 || kv->value.type == GGUF_TYPE_FLOAT64) {
        double d = kv->value.v.f64;
        /* double -> float of an out-of-range finite value is undefined behaviour */
        if (isfinite(d) && fabs(d) > 3.4028234663852886e38)
            return subq_fail(err, SUBQ_ERR_FORMAT, "key '%s' is %g, out of range for float32", key,
                             d);
        *out = (float)d;
        return SUBQ_OK;
    }
    return wrong_type(&kv->value, key, "a float", err);
}

subq_status gguf_get_bool_or(const gguf_file *f, const char *key, bool def, bool *out,
                             subq_error *err) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) {
        *out = def;
        return SUBQ_OK;
    }
    if (kv->value.type == GGUF_TYPE_BOOL) {
        *out = kv->value.v.b;
        return SUBQ_OK;
    }
    return wrong_type(&kv->value, key, "bool", err);
}

subq_status gguf_get_str(const gguf_file *f, const char *key, char *buf, size_t cap,
                         subq_error *err) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!buf || cap == 0)
        return subq_fail(err, SUBQ_ERR_ARG, "gguf_get_str: no buffer for '%s'", key ? key : "(null)");
    buf[0] = '\0';
    if (!kv) return subq_fail(err, SUBQ_ERR_FORMAT, "missing key '%s'", key ? key : "(null)");
    if (kv->value.type != GGUF_TYPE_STRING) return wrong_type(&kv->value, key, "string", err);
    if (kv->value.v.str.len >= cap)
        return subq_fail(err, SUBQ_ERR_FORMAT, "key '%s' is a string of %" PRIu64
                         " bytes, longer than the %zu-byte buffer allows",
                         key, kv->value.v.str.len, cap - 1);
    memcpy(buf, kv->value.v.str.data, (size_t)kv->value.v.str.len);
    buf[kv->value.v.str.len] = '\0';
    return SUBQ_OK;
}

subq_status gguf_get_arr(const gguf_file *f, const char *key, gguf_type elem_type,
                         const gguf_value **out, subq_error *err) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    *out = NULL;
    if (!kv) return subq_fail(err, SUBQ_ERR_FORMAT, "missing key '%s'", key ? key : "(null)");
    if (kv->value.type != GGUF_TYPE_ARRAY || kv->value.v.arr.elem_type != elem_type) {
        char want[48];
        snprintf(want, sizeof want, "array of %s", gguf_type_name(elem_type));
        return wrong_type(&kv->value, key, want, err);
    }
    *out = &kv->value;
    return SUBQ_OK;
}

/* Element i decoded as a scalar; 0 when arr is not a fixed-size array or i is out of range. */
static int arr_elem(const gguf_value *arr, uint64_t i, gguf_value *v) {
    size_t esz;
    if (!arr || arr->type != GGUF_TYPE_ARRAY || !arr->v.arr.data) return 0;
    esz = gguf_type_size(arr->v.arr.elem_type);
    if (esz == 0 || i >= arr->v.arr.n) return 0;
    decode_scalar(arr->v.arr.elem_type, (const uint8_t *)arr->v.arr.data + i * esz, v);
    return 1;
}

double gguf_arr_get_f64(const gguf_value *arr, uint64_t i) {
    gguf_value v;
    if (!arr_elem(arr, i, &v)) return 0.0;
    if (is_unsigned(v.type)) return (double)v.v.u64;
    if (is_signed(v.type)) return (double)v.v.i64;
    if (v.type == GGUF_TYPE_BOOL) return v.v.b ? 1.0 : 0.0;
    return v.v.f64;
}

int64_t gguf_arr_get_i64(const gguf_value *arr, uint64_t i) {
    gguf_value v;
    if (!arr_elem(arr, i, &v)) return 0;
    if (is_unsigned(v.type)) return v.v.u64 > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)v.v.u64;
    if (is_signed(v.type)) return v.v.i64;
    if (v.type == GGUF_TYPE_BOOL) return v.v.b ? 1 : 0;
    /* floats: truncate toward zero, saturating (out-of-range casts are UB) */
    if (isnan(v.v.f64)) return 0;
    if (v.v.f64 >= 9223372036854775808.0) return INT64_MAX;
    if (v.v.f64 < -9223372036854775808.0) return INT64_MIN;
    return (int64_t)v.v.f64;
}
