/* GGUF v3 writer. Metadata is serialised when it is set (so the writer owns
 * no pointers into caller memory except tensor data); gguf_writer_write
 * streams header, kvs, tensor infos, padding and data to a temporary file
 * beside `path`, fsyncs it and renames it over `path` (base/atomic_file.h),
 * so readers never see a half-written model. */
#include "gguf/gguf.h"

#include "base/atomic_file.h"
#include "base/error.h"
#include "quant/types.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the GGUF writer copies host values straight into the little-endian file"
#endif

#define GGUF_WRITE_MAX_NESTING 8 /* same limit the reader enforces */

typedef struct wkv {
    char *key;
    uint8_t *blob; /* u32 value type + encoded value */
    size_t blob_len;
} wkv;

typedef struct wtensor {
    char name[128];
    uint32_t type;
    uint32_t n_dims;
    uint64_t ne[GGUF_MAX_DIMS];
    const void *data;
    uint64_t n_bytes;
    uint64_t offset; /* filled by gguf_writer_write */
    int owned;
} wtensor;

struct gguf_writer {
    wkv *kv;
    size_t n_kv, cap_kv;
    wtensor *t;
    size_t n_t, cap_t;
    uint64_t alignment;
};

/* ---- growable byte buffer --------------------------------------------- */

typedef struct bbuf {
    uint8_t *p;
    size_t n, cap;
    int oom;
} bbuf;

static void bb_put(bbuf *b, const void *src, size_t n) {
    if (b->oom || n == 0) return;
    if (n > SIZE_MAX - b->n) {
        b->oom = 1;
        return;
    }
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n) {
            if (cap > SIZE_MAX / 2) {
                cap = b->n + n;
                break;
            }
            cap *= 2;
        }
        uint8_t *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void bb_u32(bbuf *b, uint32_t v) { bb_put(b, &v, 4); }
static void bb_u64(bbuf *b, uint64_t v) { bb_put(b, &v, 8); }

/* Encode v (without its type tag) into b. Returns SUBQ_ERR_ARG for values the
 * reader would refuse (unknown types, nesting too deep). */
static subq_status encode_value(bbuf *b, const gguf_value *v, int depth) {
    switch (v->type) {
    case GGUF_TYPE_UINT8: { uint8_t x = (uint8_t)v->v.u64; bb_put(b, &x, 1); return SUBQ_OK; }
    case GGUF_TYPE_INT8: { int8_t x = (int8_t)v->v.i64; bb_put(b, &x, 1); return SUBQ_OK; }
    case GGUF_TYPE_BOOL: { uint8_t x = v->v.b ? 1 : 0; bb_put(b, &x, 1); return SUBQ_OK; }
    case GGUF_TYPE_UINT16: { uint16_t x = (uint16_t)v->v.u64; bb_put(b, &x, 2); return SUBQ_OK; }
    case GGUF_TYPE_INT16: { int16_t x = (int16_t)v->v.i64; bb_put(b, &x, 2); return SUBQ_OK; }
    case GGUF_TYPE_UINT32: { uint32_t x = (uint32_t)v->v.u64; bb_put(b, &x, 4); return SUBQ_OK; }
    case GGUF_TYPE_INT32: { int32_t x = (int32_t)v->v.i64; bb_put(b, &x, 4); return SUBQ_OK; }
    case GGUF_TYPE_FLOAT32: { float x = (float)v->v.f64; bb_put(b, &x, 4); return SUBQ_OK; }
    case GGUF_TYPE_UINT64: bb_u64(b, v->v.u64); return SUBQ_OK;
    case GGUF_TYPE_INT64: { int64_t x = v->v.i64; bb_put(b, &x, 8); return SUBQ_OK; }
    case GGUF_TYPE_FLOAT64: { double x = v->v.f64; bb_put(b, &x, 8); return SUBQ_OK; }
    case GGUF_TYPE_STRING:
        if (!v->v.str.data && v->v.str.len > 0) return SUBQ_ERR_ARG;
        bb_u64(b, v->v.str.len);
        bb_put(b, v->v.str.data, (size_t)v->v.str.len);
        return SUBQ_OK;
    case GGUF_TYPE_ARRAY: {
        gguf_type et = v->v.arr.elem_type;
        uint64_t n = v->v.arr.n;
        size_t esz = gguf_type_size(et);
        if (depth >= GGUF_WRITE_MAX_NESTING || (unsigned)et >= GGUF_TYPE_COUNT) return SUBQ_ERR_ARG;
        bb_u32(b, (uint32_t)et);
        bb_u64(b, n);
        if (esz) {
            if (n > SIZE_MAX / esz) return SUBQ_ERR_NOMEM;
            if (n > 0 && !v->v.arr.data) return SUBQ_ERR_ARG;
            bb_put(b, v->v.arr.data, (size_t)(n * esz));
            return SUBQ_OK;
        }
        if (n > 0 && !v->v.arr.items) return SUBQ_ERR_ARG;
        for (uint64_t i = 0; i < n; i++) {
            if (v->v.arr.items[i].type != et) return SUBQ_ERR_ARG;
            subq_status s = encode_value(b, &v->v.arr.items[i], depth + 1);
            if (s != SUBQ_OK) return s;
        }
        return SUBQ_OK;
    }
    case GGUF_TYPE_COUNT: break;
    }
    return SUBQ_ERR_ARG;
}

/* Core of every setter: encodes any value, including nested arrays.
 * Replacing a key keeps its original position. */
static subq_status writer_set_value(gguf_writer *w, const char *key, const gguf_value *v) {
    bbuf b = {0};
    subq_status s;
    if (!w || !key || !key[0] || !v) return SUBQ_ERR_ARG;
    if (strcmp(key, "general.alignment") == 0) {
        /* The reader requires a uint32 power of two >= 8; refuse anything else here. */
        if (v->type != GGUF_TYPE_UINT32 || v->v.u64 < 8 || (v->v.u64 & (v->v.u64 - 1)) != 0)
            return SUBQ_ERR_ARG;
    }
    bb_u32(&b, (uint32_t)v->type);
    s = encode_value(&b, v, 0);
    if (s == SUBQ_OK && b.oom) s = SUBQ_ERR_NOMEM;
    if (s != SUBQ_OK) {
        free(b.p);
        return s;
    }
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kv[i].key, key) == 0) {
            free(w->kv[i].blob);
            w->kv[i].blob = b.p;
            w->kv[i].blob_len = b.n;
            if (strcmp(key, "general.alignment") == 0) w->alignment = v->v.u64;
            return SUBQ_OK;
        }
    }
    if (w->n_kv == w->cap_kv) {
        size_t cap = w->cap_kv ? 2 * w->cap_kv : 16;
        wkv *kv = realloc(w->kv, cap * sizeof *kv);
        if (!kv) {
            free(b.p);
            return SUBQ_ERR_NOMEM;
        }
        w->kv = kv;
        w->cap_kv = cap;
    }
    char *k = strdup(key);
    if (!k) {
        free(b.p);
        return SUBQ_ERR_NOMEM;
    }
    w->kv[w->n_kv].key = k;
    w->kv[w->n_kv].blob = b.p;
    w->kv[w->n_kv].blob_len = b.n;
    w->n_kv++;
    if (strcmp(key, "general.alignment") == 0) w->alignment = v->v.u64;
    return SUBQ_OK;
}

gguf_writer *gguf_writer_new(void) {
    gguf_writer *w = calloc(1, sizeof *w);
    if (w) w->alignment = GGUF_DEFAULT_ALIGNMENT;
    return w;
}

void gguf_writer_free(gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].blob);
    }
    free(w->kv);
    for (size_t i = 0; i < w->n_t; i++)
        if (w->t[i].owned) free((void *)w->t[i].data);
    free(w->t);
    free(w);
}

subq_status gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v) {
    gguf_value x = {.type = GGUF_TYPE_UINT32, .v.u64 = v};
    return writer_set_value(w, key, &x);
}

subq_status gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v) {
    gguf_value x = {.type = GGUF_TYPE_INT32, .v.i64 = v};
    return writer_set_value(w, key, &x);
}

subq_status gguf_writer_set_u64(gguf_writer *w, const char *key, uint64_t v) {
    gguf_value x = {.type = GGUF_TYPE_UINT64, .v.u64 = v};
    return writer_set_value(w, key, &x);
}

subq_status gguf_writer_set_f32(gguf_writer *w, const char *key, float v) {
    gguf_value x = {.type = GGUF_TYPE_FLOAT32, .v.f64 = v};
    return writer_set_value(w, key, &x);
}

subq_status gguf_writer_set_bool(gguf_writer *w, const char *key, bool v) {
    gguf_value x = {.type = GGUF_TYPE_BOOL, .v.b = v};
    return writer_set_value(w, key, &x);
}

subq_status gguf_writer_set_str(gguf_writer *w, const char *key, const char *v) {
    if (!v) return SUBQ_ERR_ARG;
    gguf_value x = {.type = GGUF_TYPE_STRING, .v.str = {strlen(v), v}};
    return writer_set_value(w, key, &x);
}

subq_status gguf_writer_set_arr(gguf_writer *w, const char *key, gguf_type elem_type,
                                const void *data, uint64_t n) {
    if (gguf_type_size(elem_type) == 0) return SUBQ_ERR_ARG; /* strings/arrays: other setters */
    gguf_value x = {.type = GGUF_TYPE_ARRAY};
    x.v.arr.elem_type = elem_type;
    x.v.arr.n = n;
    x.v.arr.data = data;
    return writer_set_value(w, key, &x);
}

subq_status gguf_writer_copy_kv(gguf_writer *w, const gguf_file *f, uint64_t i) {
    if (i >= f->n_kv) return SUBQ_ERR_ARG;
    const gguf_str *k = &f->kv[i].key;
    char *key = malloc((size_t)k->len + 1);
    if (!key) return SUBQ_ERR_NOMEM;
    memcpy(key, k->data, (size_t)k->len);
    key[k->len] = 0;
    subq_status s = writer_set_value(w, key, &f->kv[i].value);
    free(key);
    return s;
}

subq_status gguf_writer_copy_kvs(gguf_writer *w, const gguf_file *f) {
    for (uint64_t i = 0; i < f->n_kv; i++) {
        subq_status s = gguf_writer_copy_kv(w, f, i);
        if (s) return s;
    }
    return SUBQ_OK;
}

subq_status gguf_writer_set_arr_str(gguf_writer *w, const char *key, const char *const *v,
                                    uint64_t n) {
    gguf_value x = {.type = GGUF_TYPE_ARRAY};
    gguf_value *items = NULL;
    subq_status s;
    if (n > 0 && !v) return SUBQ_ERR_ARG;
    if (n > SIZE_MAX / sizeof *items) return SUBQ_ERR_NOMEM;
    if (n > 0) {
        items = calloc((size_t)n, sizeof *items);
        if (!items) return SUBQ_ERR_NOMEM;
    }
    for (uint64_t i = 0; i < n; i++) {
        if (!v[i]) {
            free(items);
            return SUBQ_ERR_ARG;
        }
        items[i].type = GGUF_TYPE_STRING;
        items[i].v.str.len = strlen(v[i]);
        items[i].v.str.data = v[i];
    }
    x.v.arr.elem_type = GGUF_TYPE_STRING;
    x.v.arr.n = n;
    x.v.arr.items = items;
    s = writer_set_value(w, key, &x);
    free(items);
    return s;
}

static subq_status add_tensor(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                              const uint64_t *ne, const void *data, uint64_t n_bytes,
                              int take_ownership, subq_error *err) {
    const ggml_type_traits *tr;
    uint64_t n_el = 1, blocks, expect;
    size_t len;

    if (!w || !name || !ne)
        return subq_fail(err, SUBQ_ERR_ARG, "gguf_writer_add_tensor: NULL argument");
    len = strlen(name);
    if (len == 0 || len > 127)
        return subq_fail(err, SUBQ_ERR_ARG, "tensor name '%.64s' has length %zu (must be 1..127)",
                         name, len);
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return subq_fail(err, SUBQ_ERR_ARG, "tensor '%s': n_dims %" PRIu32 " (must be 1..%d)", name,
                         n_dims, GGUF_MAX_DIMS);
    tr = ggml_type_get(type);
    if (!tr)
        return subq_fail(err, SUBQ_ERR_ARG, "tensor '%s': unknown ggml type %" PRIu32, name, type);
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] == 0)
            return subq_fail(err, SUBQ_ERR_SHAPE, "tensor '%s': dimension %" PRIu32 " is 0", name, d);
        if (ne[d] > (uint64_t)INT64_MAX / n_el)
            return subq_fail(err, SUBQ_ERR_SHAPE, "tensor '%s': element count overflows", name);
        n_el *= ne[d];
    }
    if (ne[0] % (uint64_t)tr->block_size != 0)
        return subq_fail(err, SUBQ_ERR_SHAPE,
                         "tensor '%s': row length %" PRIu64 " is not a multiple of the %s block size %d",
                         name, ne[0], tr->name, tr->block_size);
    blocks = n_el / (uint64_t)tr->block_size; /* ne[0] divisible => n_el divisible */
    if (blocks > UINT64_MAX / (uint64_t)tr->type_size)
        return subq_fail(err, SUBQ_ERR_SHAPE, "tensor '%s': byte size overflows", name);
    expect = blocks * (uint64_t)tr->type_size;
    if (n_bytes != expect)
        return subq_fail(err, SUBQ_ERR_SHAPE,
                         "tensor '%s': %" PRIu64 " bytes given, but a %s tensor of %" PRIu64
                         " elements needs %" PRIu64,
                         name, n_bytes, tr->name, n_el, expect);
    if (!data) return subq_fail(err, SUBQ_ERR_ARG, "tensor '%s': data is NULL", name);
    for (size_t i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0)
            return subq_fail(err, SUBQ_ERR_ARG, "duplicate tensor name '%s'", name);

    if (w->n_t == w->cap_t) {
        size_t cap = w->cap_t ? 2 * w->cap_t : 16;
        wtensor *t = realloc(w->t, cap * sizeof *t);
        if (!t) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory adding tensor '%s'", name);
        w->t = t;
        w->cap_t = cap;
    }
    wtensor *t = &w->t[w->n_t];
    memset(t, 0, sizeof *t);
    memcpy(t->name, name, len + 1);
    t->type = type;
    t->n_dims = n_dims;
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = d < n_dims ? ne[d] : 1;
    t->data = data;
    t->n_bytes = n_bytes;
    t->owned = take_ownership != 0;
    w->n_t++;
    return SUBQ_OK;
}

subq_status gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                                   const uint64_t *ne, const void *data, uint64_t n_bytes,
                                   int take_ownership, subq_error *err) {
    subq_status s = add_tensor(w, name, type, n_dims, ne, data, n_bytes, take_ownership, err);
    /* take_ownership hands the buffer over even when the call fails, so
     * callers can `return gguf_writer_add_tensor(...)` without leaking. */
    if (s != SUBQ_OK && take_ownership) free((void *)data);
    return s;
}

/* ---- output ----------------------------------------------------------- */

typedef struct wout {
    FILE *fp;
    uint64_t written;
    int err; /* first errno */
} wout;

static void out_put(wout *o, const void *p, size_t n) {
    if (o->err || n == 0) return;
    errno = 0;
    if (fwrite(p, 1, n, o->fp) != n) {
        o->err = errno ? errno : EIO;
        return;
    }
    o->written += n;
}

static void out_u32(wout *o, uint32_t v) { out_put(o, &v, 4); }
static void out_u64(wout *o, uint64_t v) { out_put(o, &v, 8); }

static void out_pad(wout *o, uint64_t align) {
    static const uint8_t zeros[4096]; /* read-only */
    uint64_t pad = (align - o->written % align) % align;
    while (pad > 0 && !o->err) {
        size_t k = pad < sizeof zeros ? (size_t)pad : sizeof zeros;
        out_put(o, zeros, k);
        pad -= k;
    }
}

subq_status gguf_writer_write(gguf_writer *w, const char *path, subq_error *err) {
    wout o = {0};
    atomic_file af;
    uint64_t off = 0;
    const uint64_t align = w ? w->alignment : GGUF_DEFAULT_ALIGNMENT;

    if (!w || !path || !path[0]) return subq_fail(err, SUBQ_ERR_ARG, "gguf_writer_write: no path");

    /* Offsets of each tensor in the data section, each padded to the alignment. */
    for (size_t i = 0; i < w->n_t; i++) {
        uint64_t end;
        w->t[i].offset = off;
        if (off > UINT64_MAX - align || w->t[i].n_bytes > UINT64_MAX - align - off)
            return subq_fail(err, SUBQ_ERR_ARG, "%s: total tensor size overflows", path);
        end = off + w->t[i].n_bytes;
        off = (end + align - 1) & ~(align - 1);
    }

    subq_status s = atomic_file_open(&af, path, err);
    if (s != SUBQ_OK) return s;
    o.fp = af.fp;

    out_put(&o, "GGUF", 4);
    out_u32(&o, 3);
    out_u64(&o, (uint64_t)w->n_t);
    out_u64(&o, (uint64_t)w->n_kv);
    for (size_t i = 0; i < w->n_kv; i++) {
        size_t klen = strlen(w->kv[i].key);
        out_u64(&o, klen);
        out_put(&o, w->kv[i].key, klen);
        out_put(&o, w->kv[i].blob, w->kv[i].blob_len);
    }
    for (size_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        size_t nlen = strlen(t->name);
        out_u64(&o, nlen);
        out_put(&o, t->name, nlen);
        out_u32(&o, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) out_u64(&o, t->ne[d]);
        out_u32(&o, t->type);
        out_u64(&o, t->offset);
    }
    out_pad(&o, align);
    /* Like ggml, every tensor (the last one too) is followed by padding, so
     * readers that load the whole padded data blob find it all. */
    for (size_t i = 0; i < w->n_t && !o.err; i++) {
        const uint8_t *p = w->t[i].data;
        uint64_t left = w->t[i].n_bytes;
        while (left > 0 && !o.err) { /* chunked: n_bytes may exceed size_t on 32-bit */
            size_t k = left > (1u << 30) ? (size_t)1 << 30 : (size_t)left;
            out_put(&o, p, k);
            p += k;
            left -= k;
        }
        out_pad(&o, align);
    }
    return atomic_file_commit(&af, o.err, err);
}

subq_status gguf_save(const char *path, gguf_fill_fn fill, const void *obj, subq_error *err) {
    gguf_writer *w = gguf_writer_new();
    if (!w) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    subq_status s = fill(obj, w, err);
    if (!s) s = gguf_writer_write(w, path, err);
    gguf_writer_free(w);
    return s;
}
