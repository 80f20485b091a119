/* GGUF reader/writer tests: writer -> reader round trips, hand-built files
 * with every value type, stories260K, every truncation, targeted corruptions
 * and seeded random mutations, FIFOs, temporary files of killed writers.
 * Prints "N passed, M failed" last. */
#include "gguf/gguf.h"
#include "base/atomic_file.h"
#include "quant/types.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int g_pass, g_fail;

#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        if (cond) {                                                        \
            g_pass++;                                                      \
        } else {                                                           \
            g_fail++;                                                      \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);           \
            fprintf(stderr, __VA_ARGS__);                                  \
            fputc('\n', stderr);                                           \
        }                                                                  \
    } while (0)

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rng_next(uint64_t *s) { /* xorshift64* */
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 2685821657736338717ull;
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "test: out of memory\n");
        exit(2);
    }
    return p;
}

/* ---- byte builder for hand-made files --------------------------------- */

typedef struct bb {
    uint8_t *p;
    size_t n, cap;
} bb;

static void bput(bb *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n) cap *= 2;
        b->p = realloc(b->p, cap);
        if (!b->p) exit(2);
        b->cap = cap;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}
static void bu8(bb *b, uint8_t v) { bput(b, &v, 1); }
static void bu16(bb *b, uint16_t v) { bput(b, &v, 2); }
static void bu32(bb *b, uint32_t v) { bput(b, &v, 4); }
static void bu64(bb *b, uint64_t v) { bput(b, &v, 8); }
static void bf32(bb *b, float v) { bput(b, &v, 4); }
static void bf64(bb *b, double v) { bput(b, &v, 8); }
static void bstr(bb *b, const char *s) {
    bu64(b, strlen(s));
    bput(b, s, strlen(s));
}
static void bheader(bb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    bput(b, "GGUF", 4);
    bu32(b, version);
    bu64(b, n_tensors);
    bu64(b, n_kv);
}
static void bpad(bb *b, size_t align) {
    while (b->n % align) bu8(b, 0);
}
static void patch32(uint8_t *p, size_t off, uint32_t v) { memcpy(p + off, &v, 4); }
static void patch64(uint8_t *p, size_t off, uint64_t v) { memcpy(p + off, &v, 8); }

/* ---- open helpers ----------------------------------------------------- */

static int one_line(const subq_error *e) { return e->msg[0] != '\0' && strchr(e->msg, '\n') == NULL; }

/* Open an exact-size heap copy (so ASan sees any over-read) and expect
 * failure with `code` (or any error when code == SUBQ_OK) and a message
 * containing `sub` (if not NULL). */
static void expect_fail(const char *label, const uint8_t *buf, size_t n, subq_status code,
                        const char *sub) {
    uint8_t *copy = xmalloc(n);
    gguf_file *f = NULL;
    subq_error e = {0};
    subq_status s;
    memcpy(copy, buf, n);
    s = gguf_open_memory(copy, n, &f, &e);
    if (s == SUBQ_OK) {
        CHECK(0, "%s: expected an error, but the file opened", label);
        gguf_close(f);
        free(copy);
        return;
    }
    CHECK(f == NULL, "%s: *out not NULL on failure", label);
    CHECK(code == SUBQ_OK || s == code, "%s: status %d (%s), expected %d", label, (int)s,
          subq_status_name(s), (int)code);
    CHECK(e.code == s, "%s: err.code %d != status %d", label, (int)e.code, (int)s);
    CHECK(one_line(&e), "%s: message empty or multi-line: '%s'", label, e.msg);
    CHECK(strncmp(e.msg, "<memory>: ", 10) == 0, "%s: message does not start with <memory>: '%s'",
          label, e.msg);
    if (sub) CHECK(strstr(e.msg, sub) != NULL, "%s: message '%s' lacks '%s'", label, e.msg, sub);
    if (getenv("SUBQ_TEST_VERBOSE")) printf("  %-28s -> %s\n", label, e.msg);
    free(copy);
}

static int read_file(const char *path, uint8_t **out, size_t *n) {
    FILE *fp = fopen(path, "rb");
    long sz;
    if (!fp) return -1;
    if (fseek(fp, 0, SEEK_END) != 0 || (sz = ftell(fp)) < 0 || fseek(fp, 0, SEEK_SET) != 0) {
        fclose(fp);
        return -1;
    }
    *out = xmalloc((size_t)sz);
    if (fread(*out, 1, (size_t)sz, fp) != (size_t)sz) {
        fclose(fp);
        free(*out);
        return -1;
    }
    fclose(fp);
    *n = (size_t)sz;
    return 0;
}

static int write_file(const char *path, const void *p, size_t n) {
    FILE *fp = fopen(path, "wb");
    if (!fp) return -1;
    size_t w = n ? fwrite(p, 1, n, fp) : 0;
    return (fclose(fp) == 0 && w == n) ? 0 : -1;
}

/* Count directory entries whose name starts with `prefix` (leftover temp files). */
static int count_prefix(const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    struct dirent *de;
    int n = 0;
    if (!d) return -1;
    while ((de = readdir(d)) != NULL)
        if (strncmp(de->d_name, prefix, strlen(prefix)) == 0) n++;
    closedir(d);
    return n;
}

static const char *tmp_dir(void) {
    const char *t = getenv("SUBQ_TMP");
    if (t && t[0]) {
        mkdir(t, 0755);
        return t;
    }
    return "/tmp";
}

/* ---- 1. writer -> reader round trip ----------------------------------- */

typedef struct tspec {
    const char *name;
    uint32_t type, n_dims;
    uint64_t ne[4];
} tspec;

static uint64_t tensor_bytes(const tspec *t) {
    uint64_t n = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) n *= t->ne[d];
    const ggml_type_traits *tr = ggml_type_get(t->type);
    return n / (uint64_t)tr->block_size * (uint64_t)tr->type_size;
}

static void fill_random(uint8_t *p, size_t n, uint64_t seed) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(rng_next(&s) >> 56);
}

static void test_writer_roundtrip(uint32_t custom_align) {
    char path[512], prefix[64];
    const char *dir = tmp_dir();
    const uint64_t align = custom_align ? custom_align : GGUF_DEFAULT_ALIGNMENT;
    gguf_writer *w = gguf_writer_new();
    subq_error e = {0};
    subq_status s;

    snprintf(prefix, sizeof prefix, "rt_%u.gguf", (unsigned)align);
    snprintf(path, sizeof path, "%s/%s", dir, prefix);
    CHECK(w != NULL, "gguf_writer_new");
    if (!w) return;

    /* Scalars and strings. */
    const char *utf8 = "h\xc3\xa9llo w\xc3\xb6rld \xe2\x9c\x93 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x99\x82";
    CHECK(gguf_writer_set_u32(w, "t.replaced", 1) == SUBQ_OK, "set u32");
    CHECK(gguf_writer_set_u32(w, "t.u32", 0xDEADBEEFu) == SUBQ_OK, "set u32");
    CHECK(gguf_writer_set_i32(w, "t.i32", -123456) == SUBQ_OK, "set i32");
    CHECK(gguf_writer_set_u64(w, "t.u64", 0x123456789ABCDEF0ull) == SUBQ_OK, "set u64");
    CHECK(gguf_writer_set_f32(w, "t.f32", 3.25f) == SUBQ_OK, "set f32");
    CHECK(gguf_writer_set_bool(w, "t.bool", true) == SUBQ_OK, "set bool");
    CHECK(gguf_writer_set_bool(w, "t.bool0", false) == SUBQ_OK, "set bool");
    CHECK(gguf_writer_set_str(w, "t.str", "hello") == SUBQ_OK, "set str");
    CHECK(gguf_writer_set_str(w, "t.empty", "") == SUBQ_OK, "set empty str");
    CHECK(gguf_writer_set_str(w, "t.utf8", utf8) == SUBQ_OK, "set utf8 str");
    if (custom_align) CHECK(gguf_writer_set_u32(w, "general.alignment", custom_align) == SUBQ_OK, "align");

    /* Arrays of every fixed-size type. */
    const uint8_t a_u8[] = {0, 1, 255};
    const int8_t a_i8[] = {-128, 0, 127};
    const uint16_t a_u16[] = {0, 65535, 1234};
    const int16_t a_i16[] = {-32768, 32767, -1};
    const uint32_t a_u32[] = {0, UINT32_MAX, 7};
    const int32_t a_i32[] = {INT32_MIN, INT32_MAX, -7};
    const float a_f32[] = {1.5f, -0.0f, INFINITY, 1e-40f};
    const uint8_t a_bool[] = {1, 0, 1};
    const uint64_t a_u64[] = {UINT64_MAX, 0, 42};
    const int64_t a_i64[] = {INT64_MIN, INT64_MAX, -42};
    const double a_f64[] = {3.141592653589793, -1e300, 5e-324};
    struct {
        const char *key;
        gguf_type t;
        const void *data;
        uint64_t n;
        size_t esz;
    } arrs[] = {
        {"a.u8", GGUF_TYPE_UINT8, a_u8, 3, 1},     {"a.i8", GGUF_TYPE_INT8, a_i8, 3, 1},
        {"a.u16", GGUF_TYPE_UINT16, a_u16, 3, 2},  {"a.i16", GGUF_TYPE_INT16, a_i16, 3, 2},
        {"a.u32", GGUF_TYPE_UINT32, a_u32, 3, 4},  {"a.i32", GGUF_TYPE_INT32, a_i32, 3, 4},
        {"a.f32", GGUF_TYPE_FLOAT32, a_f32, 4, 4}, {"a.bool", GGUF_TYPE_BOOL, a_bool, 3, 1},
        {"a.u64", GGUF_TYPE_UINT64, a_u64, 3, 8},  {"a.i64", GGUF_TYPE_INT64, a_i64, 3, 8},
        {"a.f64", GGUF_TYPE_FLOAT64, a_f64, 3, 8}, {"a.empty", GGUF_TYPE_UINT32, a_u32, 0, 4},
    };
    const size_t n_arrs = sizeof arrs / sizeof arrs[0];
    for (size_t i = 0; i < n_arrs; i++)
        CHECK(gguf_writer_set_arr(w, arrs[i].key, arrs[i].t, arrs[i].data, arrs[i].n) == SUBQ_OK,
              "set_arr %s", arrs[i].key);
    const char *strs[] = {"<unk>", "", utf8, "\xe6\x97\xa5\xe6\x9c\xac", "a b\tc"};
    CHECK(gguf_writer_set_arr_str(w, "a.str", strs, 5) == SUBQ_OK, "set_arr_str");
    CHECK(gguf_writer_set_arr_str(w, "a.str_empty", strs, 0) == SUBQ_OK, "set_arr_str empty");
    /* Replacing keeps the first position. */
    CHECK(gguf_writer_set_str(w, "t.replaced", "two") == SUBQ_OK, "replace");

    /* Setter argument checks. */
    CHECK(gguf_writer_set_u32(w, "", 1) == SUBQ_ERR_ARG, "empty key refused");
    CHECK(gguf_writer_set_u32(w, NULL, 1) == SUBQ_ERR_ARG, "NULL key refused");
    CHECK(gguf_writer_set_str(w, "t.null", NULL) == SUBQ_ERR_ARG, "NULL string refused");
    CHECK(gguf_writer_set_u64(w, "general.alignment", 64) == SUBQ_ERR_ARG, "u64 alignment refused");
    CHECK(gguf_writer_set_u32(w, "general.alignment", 3) == SUBQ_ERR_ARG, "alignment 3 refused");
    CHECK(gguf_writer_set_u32(w, "general.alignment", 0) == SUBQ_ERR_ARG, "alignment 0 refused");
    CHECK(gguf_writer_set_u32(w, "general.alignment", 4) == SUBQ_ERR_ARG, "alignment 4 refused (spec: multiple of 8)");
    CHECK(gguf_writer_set_arr(w, "a.bad", GGUF_TYPE_STRING, a_u8, 1) == SUBQ_ERR_ARG,
          "set_arr of strings refused");

    /* Tensors. */
    const tspec ts[] = {
        {"f32.1d", GGML_TYPE_F32, 1, {7, 1, 1, 1}},
        {"f16.2d", GGML_TYPE_F16, 2, {5, 3, 1, 1}},
        {"bf16.3d", GGML_TYPE_BF16, 3, {4, 3, 2, 1}},
        {"q8_0.4d", GGML_TYPE_Q8_0, 4, {64, 2, 2, 1}},
        {"f32.4d", GGML_TYPE_F32, 4, {2, 3, 4, 5}},
        {"q8_0.2d", GGML_TYPE_Q8_0, 2, {32, 3, 1, 1}},
        {"owned.f16", GGML_TYPE_F16, 1, {9, 1, 1, 1}},
    };
    const size_t n_ts = sizeof ts / sizeof ts[0];
    uint8_t *tdata[16];
    for (size_t i = 0; i < n_ts; i++) {
        uint64_t nb = tensor_bytes(&ts[i]);
        int own = i == n_ts - 1;
        tdata[i] = xmalloc((size_t)nb);
        fill_random(tdata[i], (size_t)nb, i + 1);
        s = gguf_writer_add_tensor(w, ts[i].name, ts[i].type, ts[i].n_dims, ts[i].ne, tdata[i], nb,
                                   own, &e);
        CHECK(s == SUBQ_OK, "add_tensor %s: %s", ts[i].name, e.msg);
    }
    /* The owned buffer is freed by gguf_writer_free; keep a copy for comparison. */
    uint64_t own_nb = tensor_bytes(&ts[n_ts - 1]);
    uint8_t *own_copy = xmalloc((size_t)own_nb);
    memcpy(own_copy, tdata[n_ts - 1], (size_t)own_nb);
    tdata[n_ts - 1] = own_copy;

    /* add_tensor argument checks. */
    {
        uint64_t ne[4] = {8, 2, 1, 1};
        uint64_t ne33[1] = {33};
        uint64_t ne0[2] = {8, 0};
        uint64_t big[2] = {1ull << 40, 1ull << 40};
        char longname[200];
        memset(longname, 'x', 128);
        longname[128] = '\0';
        e.msg[0] = '\0';
        CHECK(gguf_writer_add_tensor(w, "bad", GGML_TYPE_F32, 2, ne, tdata[0], 63, 0, &e) ==
                  SUBQ_ERR_SHAPE && one_line(&e),
              "wrong n_bytes -> SHAPE");
        CHECK(gguf_writer_add_tensor(w, "bad", GGML_TYPE_Q8_0, 1, ne33, tdata[0], 34, 0, &e) ==
                  SUBQ_ERR_SHAPE,
              "q8_0 row 33 -> SHAPE");
        CHECK(gguf_writer_add_tensor(w, "bad", 4, 2, ne, tdata[0], 64, 0, &e) == SUBQ_ERR_ARG,
              "type 4 -> ARG");
        CHECK(gguf_writer_add_tensor(w, "bad", GGML_TYPE_F32, 0, ne, tdata[0], 64, 0, &e) ==
                  SUBQ_ERR_ARG,
              "n_dims 0 -> ARG");
        CHECK(gguf_writer_add_tensor(w, "bad", GGML_TYPE_F32, 5, ne, tdata[0], 64, 0, &e) ==
                  SUBQ_ERR_ARG,
              "n_dims 5 -> ARG");
        CHECK(gguf_writer_add_tensor(w, "bad", GGML_TYPE_F32, 2, ne0, tdata[0], 0, 0, &e) ==
                  SUBQ_ERR_SHAPE,
              "dimension 0 -> SHAPE");
        CHECK(gguf_writer_add_tensor(w, "bad", GGML_TYPE_F32, 2, big, tdata[0], 64, 0, &e) ==
                  SUBQ_ERR_SHAPE,
              "huge dims -> SHAPE");
        CHECK(gguf_writer_add_tensor(w, "f32.1d", GGML_TYPE_F32, 1, ts[0].ne, tdata[0], 28, 0,
                                     &e) == SUBQ_ERR_ARG,
              "duplicate tensor -> ARG");
        CHECK(gguf_writer_add_tensor(w, longname, GGML_TYPE_F32, 1, ts[0].ne, tdata[0], 28, 0,
                                     &e) == SUBQ_ERR_ARG,
              "128-byte name -> ARG");
        CHECK(gguf_writer_add_tensor(w, "", GGML_TYPE_F32, 1, ts[0].ne, tdata[0], 28, 0, &e) ==
                  SUBQ_ERR_ARG,
              "empty name -> ARG");
        /* With take_ownership the buffer is freed even on failure (the leak
         * checker verifies it). */
        CHECK(gguf_writer_add_tensor(w, "bad", GGML_TYPE_F32, 2, ne, xmalloc(64), 60, 1, &e) ==
                  SUBQ_ERR_SHAPE,
              "owned buffer on failure");
    }

    /* Write twice: the second write replaces the first atomically. */
    s = gguf_writer_write(w, path, &e);
    CHECK(s == SUBQ_OK, "write %s: %s", path, e.msg);
    s = gguf_writer_write(w, path, &e);
    CHECK(s == SUBQ_OK, "rewrite %s: %s", path, e.msg);
    {
        char tp[80];
        snprintf(tp, sizeof tp, "%s.subq-tmp.", prefix);
        CHECK(count_prefix(dir, tp) == 0, "temp file left behind in %s", dir);
    }
    gguf_writer_free(w);

    gguf_file *f = NULL;
    s = gguf_open(path, &f, &e);
    CHECK(s == SUBQ_OK, "open round trip %s: %s", path, e.msg);
    if (s != SUBQ_OK) {
        for (size_t i = 0; i < n_ts; i++) free(tdata[i]);
        return;
    }
    CHECK(f->version == 3, "version %u", f->version);
    CHECK(f->alignment == align, "alignment %" PRIu64, f->alignment);

    /* kvs in insertion order */
    const char *order[64];
    size_t no = 0;
    order[no++] = "t.replaced";
    order[no++] = "t.u32";
    order[no++] = "t.i32";
    order[no++] = "t.u64";
    order[no++] = "t.f32";
    order[no++] = "t.bool";
    order[no++] = "t.bool0";
    order[no++] = "t.str";
    order[no++] = "t.empty";
    order[no++] = "t.utf8";
    if (custom_align) order[no++] = "general.alignment";
    for (size_t i = 0; i < n_arrs; i++) order[no++] = arrs[i].key;
    order[no++] = "a.str";
    order[no++] = "a.str_empty";
    CHECK(f->n_kv == no, "n_kv %" PRIu64 ", expected %zu", f->n_kv, no);
    for (size_t i = 0; i < no && i < f->n_kv; i++)
        CHECK(f->kv[i].key.len == strlen(order[i]) &&
                  memcmp(f->kv[i].key.data, order[i], strlen(order[i])) == 0,
              "kv %zu is not '%s'", i, order[i]);

    const gguf_kv *kv;
    kv = gguf_find_kv(f, "t.replaced");
    CHECK(kv && kv->value.type == GGUF_TYPE_STRING && kv->value.v.str.len == 3 &&
              memcmp(kv->value.v.str.data, "two", 3) == 0,
          "replaced key");
    kv = gguf_find_kv(f, "t.u32");
    CHECK(kv && kv->value.type == GGUF_TYPE_UINT32 && kv->value.v.u64 == 0xDEADBEEFu, "u32");
    kv = gguf_find_kv(f, "t.i32");
    CHECK(kv && kv->value.type == GGUF_TYPE_INT32 && kv->value.v.i64 == -123456, "i32");
    kv = gguf_find_kv(f, "t.u64");
    CHECK(kv && kv->value.type == GGUF_TYPE_UINT64 && kv->value.v.u64 == 0x123456789ABCDEF0ull, "u64");
    kv = gguf_find_kv(f, "t.f32");
    CHECK(kv && kv->value.type == GGUF_TYPE_FLOAT32 && kv->value.v.f64 == 3.25, "f32");
    kv = gguf_find_kv(f, "t.bool");
    CHECK(kv && kv->value.type == GGUF_TYPE_BOOL && kv->value.v.b, "bool");
    kv = gguf_find_kv(f, "t.bool0");
    CHECK(kv && kv->value.type == GGUF_TYPE_BOOL && !kv->value.v.b, "bool false");
    kv = gguf_find_kv(f, "t.empty");
    CHECK(kv && kv->value.type == GGUF_TYPE_STRING && kv->value.v.str.len == 0, "empty string");

    for (size_t i = 0; i < n_arrs; i++) {
        const gguf_value *a = NULL;
        s = gguf_get_arr(f, arrs[i].key, arrs[i].t, &a, &e);
        CHECK(s == SUBQ_OK && a && a->v.arr.n == arrs[i].n &&
                  (arrs[i].n == 0 ||
                   memcmp(a->v.arr.data, arrs[i].data, (size_t)arrs[i].n * arrs[i].esz) == 0),
              "array %s round trip", arrs[i].key);
    }
    {
        const gguf_value *a = NULL;
        s = gguf_get_arr(f, "a.str", GGUF_TYPE_STRING, &a, &e);
        CHECK(s == SUBQ_OK && a && a->v.arr.n == 5 && a->v.arr.items, "string array");
        if (s == SUBQ_OK && a && a->v.arr.items)
            for (int i = 0; i < 5; i++)
                CHECK(a->v.arr.items[i].type == GGUF_TYPE_STRING &&
                          a->v.arr.items[i].v.str.len == strlen(strs[i]) &&
                          memcmp(a->v.arr.items[i].v.str.data, strs[i], strlen(strs[i])) == 0,
                      "string array element %d", i);
        s = gguf_get_arr(f, "a.str_empty", GGUF_TYPE_STRING, &a, &e);
        CHECK(s == SUBQ_OK && a && a->v.arr.n == 0, "empty string array");
    }

    /* Typed getters. */
    {
        uint32_t u = 0;
        float fl = 0;
        bool b = false;
        char buf[128];
        const gguf_value *a = NULL;
        CHECK(gguf_get_u32(f, "t.u32", &u, &e) == SUBQ_OK && u == 0xDEADBEEFu, "get_u32");
        CHECK(gguf_get_u32(f, "t.i32", &u, &e) == SUBQ_ERR_FORMAT && one_line(&e), "negative i32 -> u32");
        CHECK(gguf_get_u32(f, "t.u64", &u, &e) == SUBQ_ERR_FORMAT, "big u64 -> u32");
        CHECK(gguf_get_u32(f, "t.str", &u, &e) == SUBQ_ERR_FORMAT && strstr(e.msg, "t.str"),
              "string -> u32");
        CHECK(gguf_get_u32(f, "no.such.key", &u, &e) == SUBQ_ERR_FORMAT &&
                  strstr(e.msg, "no.such.key"),
              "missing key names the key: '%s'", e.msg);
        CHECK(gguf_get_u32_or(f, "no.such.key", 77, &u, &e) == SUBQ_OK && u == 77, "u32_or default");
        CHECK(gguf_get_u32_or(f, "t.u32", 77, &u, &e) == SUBQ_OK && u == 0xDEADBEEFu, "u32_or present");
        CHECK(gguf_get_u32_or(f, "t.f32", 77, &u, &e) == SUBQ_ERR_FORMAT, "u32_or type mismatch");
        CHECK(gguf_get_f32_or(f, "t.f32", 1.0f, &fl, &e) == SUBQ_OK && fl == 3.25f, "f32_or");
        CHECK(gguf_get_f32_or(f, "nope", 1.5f, &fl, &e) == SUBQ_OK && fl == 1.5f, "f32_or default");
        CHECK(gguf_get_f32_or(f, "t.u32", 1.5f, &fl, &e) == SUBQ_ERR_FORMAT, "f32_or mismatch");
        CHECK(gguf_get_bool_or(f, "t.bool", false, &b, &e) == SUBQ_OK && b, "bool_or");
        CHECK(gguf_get_bool_or(f, "nope", true, &b, &e) == SUBQ_OK && b, "bool_or default");
        CHECK(gguf_get_bool_or(f, "t.u32", true, &b, &e) == SUBQ_ERR_FORMAT, "bool_or mismatch");
        CHECK(gguf_get_str(f, "t.utf8", buf, sizeof buf, &e) == SUBQ_OK && strcmp(buf, utf8) == 0,
              "get_str utf8");
        CHECK(gguf_get_str(f, "t.empty", buf, sizeof buf, &e) == SUBQ_OK && buf[0] == '\0',
              "get_str empty");
        CHECK(gguf_get_str(f, "t.str", buf, 5, &e) == SUBQ_ERR_FORMAT, "get_str too small");
        CHECK(gguf_get_str(f, "t.str", buf, 6, &e) == SUBQ_OK && strcmp(buf, "hello") == 0,
              "get_str exact fit");
        CHECK(gguf_get_str(f, "t.u32", buf, sizeof buf, &e) == SUBQ_ERR_FORMAT, "get_str mismatch");
        CHECK(gguf_get_str(f, "nope", buf, sizeof buf, &e) == SUBQ_ERR_FORMAT, "get_str missing");
        CHECK(gguf_get_arr(f, "a.i32", GGUF_TYPE_UINT32, &a, &e) == SUBQ_ERR_FORMAT && a == NULL,
              "get_arr elem mismatch");
        CHECK(gguf_get_arr(f, "t.u32", GGUF_TYPE_UINT32, &a, &e) == SUBQ_ERR_FORMAT, "get_arr scalar");
        CHECK(gguf_get_arr(f, "nope", GGUF_TYPE_UINT32, &a, &e) == SUBQ_ERR_FORMAT, "get_arr missing");
        if (gguf_get_arr(f, "a.f32", GGUF_TYPE_FLOAT32, &a, &e) == SUBQ_OK) {
            CHECK(gguf_arr_get_f64(a, 0) == 1.5 && isinf(gguf_arr_get_f64(a, 2)), "arr_get_f64");
            CHECK(gguf_arr_get_i64(a, 0) == 1 && gguf_arr_get_i64(a, 2) == INT64_MAX,
                  "arr_get_i64 on floats");
            CHECK(gguf_arr_get_f64(a, 99) == 0.0, "arr_get_f64 out of range");
        }
        if (gguf_get_arr(f, "a.i64", GGUF_TYPE_INT64, &a, &e) == SUBQ_OK)
            CHECK(gguf_arr_get_i64(a, 0) == INT64_MIN && gguf_arr_get_i64(a, 2) == -42, "arr i64");
        if (gguf_get_arr(f, "a.u64", GGUF_TYPE_UINT64, &a, &e) == SUBQ_OK)
            CHECK(gguf_arr_get_i64(a, 0) == INT64_MAX && gguf_arr_get_i64(a, 2) == 42, "arr u64");
        if (gguf_get_arr(f, "a.i8", GGUF_TYPE_INT8, &a, &e) == SUBQ_OK)
            CHECK(gguf_arr_get_i64(a, 0) == -128 && gguf_arr_get_f64(a, 2) == 127.0, "arr i8");
        if (gguf_get_arr(f, "a.u16", GGUF_TYPE_UINT16, &a, &e) == SUBQ_OK)
            CHECK(gguf_arr_get_i64(a, 1) == 65535, "arr u16");
        if (gguf_get_arr(f, "a.bool", GGUF_TYPE_BOOL, &a, &e) == SUBQ_OK)
            CHECK(gguf_arr_get_i64(a, 0) == 1 && gguf_arr_get_i64(a, 1) == 0, "arr bool");
        if (gguf_get_arr(f, "a.str", GGUF_TYPE_STRING, &a, &e) == SUBQ_OK)
            CHECK(gguf_arr_get_i64(a, 0) == 0, "arr_get_i64 on strings gives 0");
    }

    /* Tensors: shape, type, size, bytes, alignment. */
    CHECK(f->n_tensors == n_ts, "n_tensors %" PRIu64, f->n_tensors);
    CHECK(f->data_offset % align == 0, "data_offset %" PRIu64 " not aligned", f->data_offset);
    uint64_t last_end = 0;
    for (size_t i = 0; i < n_ts && i < f->n_tensors; i++) {
        const gguf_tensor *t = gguf_find_tensor(f, ts[i].name);
        uint64_t nb = tensor_bytes(&ts[i]);
        CHECK(t == &f->tensors[i], "tensor %s found in order", ts[i].name);
        if (!t) continue;
        CHECK(t->type == ts[i].type && t->n_dims == ts[i].n_dims, "tensor %s type/dims", t->name);
        for (int d = 0; d < 4; d++)
            CHECK(t->ne[d] == (d < (int)ts[i].n_dims ? ts[i].ne[d] : 1), "tensor %s ne[%d]", t->name, d);
        CHECK(t->n_bytes == nb, "tensor %s n_bytes %" PRIu64, t->name, t->n_bytes);
        CHECK(t->offset % align == 0, "tensor %s offset %" PRIu64 " unaligned", t->name, t->offset);
        CHECK(((const uint8_t *)t->data - f->base) % align == 0 && ((uintptr_t)t->data % align) == 0,
              "tensor %s data unaligned", t->name);
        CHECK(memcmp(t->data, tdata[i], (size_t)nb) == 0, "tensor %s data differs", t->name);
        last_end = t->offset + nb;
    }
    CHECK(f->size == f->data_offset + ((last_end + align - 1) / align) * align,
          "file size %zu: data is not followed by padding to the alignment", f->size);
    CHECK(gguf_find_tensor(f, "nope") == NULL, "find missing tensor");
    CHECK(gguf_find_kv(f, "nope") == NULL, "find missing kv");
    gguf_close(f);
    unlink(path);
    for (size_t i = 0; i < n_ts; i++) free(tdata[i]);
}

static void test_writer_errors(void) {
    const char *dir = tmp_dir();
    char path[512], tp[64];
    subq_error e = {0};
    gguf_writer *w = gguf_writer_new();
    float x[4] = {1, 2, 3, 4};
    uint64_t ne[1] = {4};

    gguf_writer_set_str(w, "general.architecture", "llama");
    gguf_writer_add_tensor(w, "x", GGML_TYPE_F32, 1, ne, x, sizeof x, 0, &e);

    snprintf(path, sizeof path, "%s/no/such/dir/out.gguf", dir);
    CHECK(gguf_writer_write(w, path, &e) == SUBQ_ERR_IO && strstr(e.msg, path) && one_line(&e),
          "write into a missing directory -> IO naming the path: '%s'", e.msg);

    /* a directory is refused before anything is written: no temporary file is left */
    snprintf(path, sizeof path, "%s/gguf_is_a_dir", dir);
    mkdir(path, 0755);
    CHECK(gguf_writer_write(w, path, &e) == SUBQ_ERR_ARG && strstr(e.msg, path),
          "write over a directory -> ARG: '%s'", e.msg);
    snprintf(tp, sizeof tp, "gguf_is_a_dir.subq-tmp.");
    CHECK(count_prefix(dir, tp) == 0, "temp file not removed after a failed rename");
    rmdir(path);

    CHECK(gguf_writer_write(w, NULL, &e) == SUBQ_ERR_ARG, "NULL path");
    gguf_writer_free(w);
    gguf_writer_free(NULL);

    /* An empty writer makes a valid, empty GGUF. */
    w = gguf_writer_new();
    snprintf(path, sizeof path, "%s/empty_writer.gguf", dir);
    CHECK(gguf_writer_write(w, path, &e) == SUBQ_OK, "write empty: %s", e.msg);
    gguf_writer_free(w);
    gguf_file *f = NULL;
    CHECK(gguf_open(path, &f, &e) == SUBQ_OK && f->n_kv == 0 && f->n_tensors == 0,
          "open empty writer output: %s", e.msg);
    gguf_close(f);
    unlink(path);
}

/* ---- 1b. hand-built files: every scalar type, nested arrays ---------- */

/* `levels` nested arrays around one int32 42, under key "deep". */
static void build_nested(bb *b, int levels) {
    bheader(b, 3, 0, 1);
    bstr(b, "deep");
    bu32(b, GGUF_TYPE_ARRAY);
    for (int i = 1; i < levels; i++) {
        bu32(b, GGUF_TYPE_ARRAY);
        bu64(b, 1);
    }
    bu32(b, GGUF_TYPE_INT32);
    bu64(b, 1);
    bu32(b, 42);
}

static void test_handbuilt(uint32_t version) {
    bb b = {0};
    gguf_file *f = NULL;
    subq_error e = {0};
    subq_status s;

    bheader(&b, version, 1, 18);
    bstr(&b, "s.u8"); bu32(&b, GGUF_TYPE_UINT8); bu8(&b, 200);
    bstr(&b, "s.i8"); bu32(&b, GGUF_TYPE_INT8); bu8(&b, (uint8_t)-100);
    bstr(&b, "s.u16"); bu32(&b, GGUF_TYPE_UINT16); bu16(&b, 60000);
    bstr(&b, "s.i16"); bu32(&b, GGUF_TYPE_INT16); bu16(&b, (uint16_t)-30000);
    bstr(&b, "s.u32"); bu32(&b, GGUF_TYPE_UINT32); bu32(&b, 4000000000u);
    bstr(&b, "s.i32"); bu32(&b, GGUF_TYPE_INT32); bu32(&b, (uint32_t)-2000000000);
    bstr(&b, "s.f32"); bu32(&b, GGUF_TYPE_FLOAT32); bf32(&b, 2.5f);
    bstr(&b, "s.bool"); bu32(&b, GGUF_TYPE_BOOL); bu8(&b, 1);
    bstr(&b, "s.str"); bu32(&b, GGUF_TYPE_STRING); bstr(&b, "\xce\xb1\xce\xb2\xce\xb3");
    bstr(&b, "s.u64"); bu32(&b, GGUF_TYPE_UINT64); bu64(&b, UINT64_MAX);
    bstr(&b, "s.i64"); bu32(&b, GGUF_TYPE_INT64); bu64(&b, (uint64_t)INT64_MIN);
    bstr(&b, "s.f64"); bu32(&b, GGUF_TYPE_FLOAT64); bf64(&b, 1e300);
    /* [[1,2,3], [], [-4]] */
    bstr(&b, "n.i32"); bu32(&b, GGUF_TYPE_ARRAY); bu32(&b, GGUF_TYPE_ARRAY); bu64(&b, 3);
    bu32(&b, GGUF_TYPE_INT32); bu64(&b, 3); bu32(&b, 1); bu32(&b, 2); bu32(&b, 3);
    bu32(&b, GGUF_TYPE_INT32); bu64(&b, 0);
    bu32(&b, GGUF_TYPE_INT32); bu64(&b, 1); bu32(&b, (uint32_t)-4);
    /* [["a","bc"], [""], []] */
    bstr(&b, "n.str"); bu32(&b, GGUF_TYPE_ARRAY); bu32(&b, GGUF_TYPE_ARRAY); bu64(&b, 3);
    bu32(&b, GGUF_TYPE_STRING); bu64(&b, 2); bstr(&b, "a"); bstr(&b, "bc");
    bu32(&b, GGUF_TYPE_STRING); bu64(&b, 1); bstr(&b, "");
    bu32(&b, GGUF_TYPE_STRING); bu64(&b, 0);
    /* [[[7, 8]]] */
    bstr(&b, "n.deep"); bu32(&b, GGUF_TYPE_ARRAY); bu32(&b, GGUF_TYPE_ARRAY); bu64(&b, 1);
    bu32(&b, GGUF_TYPE_ARRAY); bu64(&b, 1); bu32(&b, GGUF_TYPE_INT32); bu64(&b, 2);
    bu32(&b, 7); bu32(&b, 8);
    bstr(&b, "n.empty"); bu32(&b, GGUF_TYPE_ARRAY); bu32(&b, GGUF_TYPE_ARRAY); bu64(&b, 0);
    bstr(&b, "general.alignment"); bu32(&b, GGUF_TYPE_UINT32); bu32(&b, 64);
    bstr(&b, "s.bool2"); bu32(&b, GGUF_TYPE_BOOL); bu8(&b, 0);
    /* one tensor at offset 0 */
    bstr(&b, "w"); bu32(&b, 2); bu64(&b, 3); bu64(&b, 2); bu32(&b, GGML_TYPE_F32); bu64(&b, 0);
    bpad(&b, 64);
    size_t data_at = b.n;
    for (int i = 0; i < 6; i++) bf32(&b, (float)i);

    uint8_t *copy = xmalloc(b.n);
    memcpy(copy, b.p, b.n);
    s = gguf_open_memory(copy, b.n, &f, &e);
    CHECK(s == SUBQ_OK, "hand-built v%u: %s", version, e.msg);
    if (s == SUBQ_OK) {
        const gguf_kv *kv;
        uint32_t u;
        float fl;
        CHECK(f->version == version && f->n_kv == 18 && f->alignment == 64 && f->data_offset == data_at,
              "hand-built header fields");
#define KV(k, t, cond)                                                              \
    kv = gguf_find_kv(f, k);                                                        \
    CHECK(kv && kv->value.type == (t) && (cond), "hand-built %s", k)
        KV("s.u8", GGUF_TYPE_UINT8, kv->value.v.u64 == 200);
        KV("s.i8", GGUF_TYPE_INT8, kv->value.v.i64 == -100);
        KV("s.u16", GGUF_TYPE_UINT16, kv->value.v.u64 == 60000);
        KV("s.i16", GGUF_TYPE_INT16, kv->value.v.i64 == -30000);
        KV("s.u32", GGUF_TYPE_UINT32, kv->value.v.u64 == 4000000000u);
        KV("s.i32", GGUF_TYPE_INT32, kv->value.v.i64 == -2000000000);
        KV("s.f32", GGUF_TYPE_FLOAT32, kv->value.v.f64 == 2.5);
        KV("s.bool", GGUF_TYPE_BOOL, kv->value.v.b);
        KV("s.bool2", GGUF_TYPE_BOOL, !kv->value.v.b);
        KV("s.str", GGUF_TYPE_STRING, kv->value.v.str.len == 6);
        KV("s.u64", GGUF_TYPE_UINT64, kv->value.v.u64 == UINT64_MAX);
        KV("s.i64", GGUF_TYPE_INT64, kv->value.v.i64 == INT64_MIN);
        KV("s.f64", GGUF_TYPE_FLOAT64, kv->value.v.f64 == 1e300);
        KV("n.empty", GGUF_TYPE_ARRAY, kv->value.v.arr.elem_type == GGUF_TYPE_ARRAY && kv->value.v.arr.n == 0);
        kv = gguf_find_kv(f, "n.i32");
        CHECK(kv && kv->value.type == GGUF_TYPE_ARRAY && kv->value.v.arr.elem_type == GGUF_TYPE_ARRAY &&
                  kv->value.v.arr.n == 3 && kv->value.v.arr.items,
              "nested int32 array");
        if (kv && kv->value.v.arr.items && kv->value.v.arr.n == 3) {
            const gguf_value *it = kv->value.v.arr.items;
            CHECK(it[0].type == GGUF_TYPE_ARRAY && it[0].v.arr.elem_type == GGUF_TYPE_INT32 &&
                      it[0].v.arr.n == 3 && gguf_arr_get_i64(&it[0], 0) == 1 &&
                      gguf_arr_get_i64(&it[0], 2) == 3,
                  "nested [0]");
            CHECK(it[1].v.arr.n == 0 && it[2].v.arr.n == 1 && gguf_arr_get_i64(&it[2], 0) == -4,
                  "nested [1],[2]");
        }
        kv = gguf_find_kv(f, "n.str");
        CHECK(kv && kv->value.v.arr.n == 3 && kv->value.v.arr.items, "nested string array");
        if (kv && kv->value.v.arr.items && kv->value.v.arr.n == 3) {
            const gguf_value *it = kv->value.v.arr.items;
            CHECK(it[0].v.arr.elem_type == GGUF_TYPE_STRING && it[0].v.arr.n == 2 &&
                      it[0].v.arr.items[1].v.str.len == 2 &&
                      memcmp(it[0].v.arr.items[1].v.str.data, "bc", 2) == 0,
                  "nested string [0][1]");
            CHECK(it[1].v.arr.n == 1 && it[1].v.arr.items[0].v.str.len == 0 && it[2].v.arr.n == 0,
                  "nested string [1],[2]");
        }
        kv = gguf_find_kv(f, "n.deep");
        CHECK(kv && kv->value.v.arr.n == 1 && kv->value.v.arr.items[0].v.arr.n == 1 &&
                  gguf_arr_get_i64(&kv->value.v.arr.items[0].v.arr.items[0], 1) == 8,
              "3-level array");
        /* Integer getters convert any integer type whose value fits. */
        CHECK(gguf_get_u32(f, "s.u8", &u, &e) == SUBQ_OK && u == 200, "u32 from uint8");
        CHECK(gguf_get_u32(f, "s.u16", &u, &e) == SUBQ_OK && u == 60000, "u32 from uint16");
        CHECK(gguf_get_u32(f, "s.i8", &u, &e) == SUBQ_ERR_FORMAT, "u32 from negative int8");
        CHECK(gguf_get_u32(f, "s.u64", &u, &e) == SUBQ_ERR_FORMAT, "u32 from huge uint64");
        CHECK(gguf_get_u32(f, "s.bool", &u, &e) == SUBQ_ERR_FORMAT, "u32 from bool");
        CHECK(gguf_get_f32_or(f, "s.f64", 0, &fl, &e) == SUBQ_ERR_FORMAT, "1e300 does not fit float");
        CHECK(gguf_get_f32_or(f, "s.f32", 0, &fl, &e) == SUBQ_OK && fl == 2.5f, "f32_or on f32");
        const gguf_tensor *t = gguf_find_tensor(f, "w");
        CHECK(t && t->n_elements == 6 && t->n_bytes == 24 && ((const float *)t->data)[5] == 5.0f,
              "hand-built tensor");
        gguf_close(f);
    }
    free(copy);
    free(b.p);

    /* Nesting: 8 levels are accepted, 9 are not. */
    b = (bb){0};
    build_nested(&b, 8);
    copy = xmalloc(b.n);
    memcpy(copy, b.p, b.n);
    s = gguf_open_memory(copy, b.n, &f, &e);
    CHECK(s == SUBQ_OK, "8-level nesting accepted: %s", e.msg);
    gguf_close(f);
    free(copy);
    free(b.p);
    b = (bb){0};
    build_nested(&b, 9);
    expect_fail("9-level nesting", b.p, b.n, SUBQ_ERR_FORMAT, "nested");
    free(b.p);
}

/* ---- 2. stories260K --------------------------------------------------- */

static int stories_path(char *buf, size_t cap) {
    const char *sh = getenv("SUBQ_SHARED");
    snprintf(buf, cap, "%s/models/stories260K.gguf", sh && sh[0] ? sh : "../shared");
    if (access(buf, R_OK) != 0) {
        CHECK(0, "stories260K missing: %s (set SUBQ_SHARED to the shared data folder)", buf);
        return -1;
    }
    return 0;
}

static void test_stories(const char *path) {
    gguf_file *f = NULL;
    subq_error e = {0};
    subq_status s = gguf_open(path, &f, &e);
    CHECK(s == SUBQ_OK, "open %s: %s", path, e.msg);
    if (s != SUBQ_OK) return;
    CHECK(f->version == 3 && f->n_kv == 19 && f->n_tensors == 48,
          "stories: version %u, %" PRIu64 " kvs, %" PRIu64 " tensors", f->version, f->n_kv,
          f->n_tensors);
    const gguf_value *tok = NULL;
    s = gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &tok, &e);
    CHECK(s == SUBQ_OK && tok->v.arr.n == 512, "tokens: %s", e.msg);
    if (s == SUBQ_OK && tok->v.arr.n > 1)
        CHECK(tok->v.arr.items[1].v.str.len == 3 && memcmp(tok->v.arr.items[1].v.str.data, "<s>", 3) == 0,
              "token 1 is <s>");
    const gguf_tensor *t = gguf_find_tensor(f, "blk.0.attn_k.weight");
    CHECK(t && t->n_dims == 2 && t->ne[0] == 64 && t->ne[1] == 32 && t->type == GGML_TYPE_F32 &&
              t->n_bytes == 64 * 32 * 4,
          "blk.0.attn_k.weight shape/type");
    uint32_t nl = 0;
    CHECK(gguf_get_u32(f, "llama.block_count", &nl, &e) == SUBQ_OK && nl == 5, "block_count %u", nl);
    char arch[32];
    CHECK(gguf_get_str(f, "general.architecture", arch, sizeof arch, &e) == SUBQ_OK &&
              strcmp(arch, "llama") == 0,
          "architecture");
    float eps = 0;
    CHECK(gguf_get_f32_or(f, "llama.attention.layer_norm_rms_epsilon", 0, &eps, &e) == SUBQ_OK &&
              fabsf(eps - 1e-5f) < 1e-9f,
          "rms eps");
    gguf_close(f);
}

/* ---- 3. every truncation ---------------------------------------------- */

static int check_prefix(const uint8_t *src, size_t len, int exact_copy) {
    uint8_t *copy = NULL;
    const uint8_t *p = src;
    gguf_file *f = NULL;
    subq_error e = {0};
    int bad = 0;
    if (exact_copy) {
        copy = xmalloc(len);
        memcpy(copy, src, len);
        p = copy;
    }
    subq_status s = gguf_open_memory(p, len, &f, &e);
    if (s != SUBQ_ERR_FORMAT || !one_line(&e) || f != NULL) {
        fprintf(stderr, "FAIL truncation to %zu bytes: status %d, message '%s'\n", len, (int)s, e.msg);
        bad = 1;
    }
    gguf_close(f);
    free(copy);
    return bad;
}

static void test_truncation(const uint8_t *file, size_t size) {
    gguf_file *f = NULL;
    subq_error e = {0};
    if (gguf_open_memory(file, size, &f, &e) != SUBQ_OK) {
        CHECK(0, "truncation: full file does not open: %s", e.msg);
        return;
    }
    const uint64_t hdr_end = f->data_offset + 1;
    int exhaustive = getenv("SUBQ_GGUF_EXHAUSTIVE") != NULL;
    size_t bad = 0, n_tested = 0;
    double t0 = now_s();

    /* Header region: every length, each an exact-size heap copy. */
    for (size_t len = 0; len <= hdr_end && len < size; len++) {
        bad += (size_t)check_prefix(file, len, 1);
        n_tested++;
    }
    if (exhaustive) {
        /* Data region: every length. Parsing never reads tensor data, so the
         * full buffer with a shorter size is equivalent to a copy there. */
        for (size_t len = hdr_end + 1; len < size; len++) {
            bad += (size_t)check_prefix(file, len, 0);
            n_tested++;
        }
    } else {
        /* Data region: both sides of every tensor boundary plus evenly spaced
         * lengths, as exact-size copies. */
        for (uint64_t i = 0; i < f->n_tensors; i++) {
            uint64_t start = f->data_offset + f->tensors[i].offset;
            uint64_t end = start + f->tensors[i].n_bytes;
            uint64_t cand[] = {start - 1, start, start + 1, end - 1, end, end + 1};
            for (int k = 0; k < 6; k++)
                if (cand[k] > hdr_end && cand[k] < size) {
                    bad += (size_t)check_prefix(file, (size_t)cand[k], 1);
                    n_tested++;
                }
        }
        const size_t steps = 3000;
        for (size_t k = 0; k < steps; k++) {
            size_t len = (size_t)(hdr_end + 1 + (uint64_t)(size - hdr_end - 1) * k / steps);
            bad += (size_t)check_prefix(file, len, 1);
            n_tested++;
        }
        bad += (size_t)check_prefix(file, size - 1, 1);
        n_tested++;
    }
    double dt = now_s() - t0;
    CHECK(bad == 0, "%zu of %zu truncated prefixes did not fail cleanly", bad, n_tested);
    printf("truncation: %zu prefix lengths (%s; header region 0..%" PRIu64
           " all exact-size copies) in %.2f s\n",
           n_tested, exhaustive ? "exhaustive" : "header exhaustive + sampled data region", hdr_end,
           dt);
    gguf_close(f);
}

/* ---- 4. corruptions --------------------------------------------------- */

typedef struct layout {
    size_t version, n_tensors, n_kv;
    size_t key0_len, str_len, kv_type1, arr_type, arr_count, arr_str_count, align_type, align_val;
    size_t t_name_len[2], t_name[2], t_ndims[2], t_ne[2], t_type[2], t_offset[2];
    uint64_t off1;
} layout;

/* A small valid file: 4 kvs (+ alignment, + a duplicate key) and 2 tensors. */
static void build_base(bb *b, layout *lo, uint32_t align, int dup_key, int dup_tensor) {
    uint64_t n_kv = 4 + (align != 0) + (dup_key != 0);
    uint64_t a = align ? align : 32;
    memset(lo, 0, sizeof *lo);
    bheader(b, 3, 2, n_kv);
    lo->version = 4;
    lo->n_tensors = 8;
    lo->n_kv = 16;
    lo->key0_len = b->n;
    bstr(b, "general.architecture");
    bu32(b, GGUF_TYPE_STRING);
    lo->str_len = b->n;
    bstr(b, "llama");
    bstr(b, "test.u32");
    lo->kv_type1 = b->n;
    bu32(b, GGUF_TYPE_UINT32);
    bu32(b, 5);
    bstr(b, "test.arr");
    bu32(b, GGUF_TYPE_ARRAY);
    lo->arr_type = b->n;
    bu32(b, GGUF_TYPE_INT32);
    lo->arr_count = b->n;
    bu64(b, 3);
    bu32(b, 1);
    bu32(b, 2);
    bu32(b, 3);
    bstr(b, "test.strs");
    bu32(b, GGUF_TYPE_ARRAY);
    bu32(b, GGUF_TYPE_STRING);
    lo->arr_str_count = b->n;
    bu64(b, 2);
    bstr(b, "a");
    bstr(b, "b");
    if (align) {
        bstr(b, "general.alignment");
        lo->align_type = b->n;
        bu32(b, GGUF_TYPE_UINT32);
        lo->align_val = b->n;
        bu32(b, align);
    }
    if (dup_key) {
        bstr(b, "test.u32");
        bu32(b, GGUF_TYPE_UINT32);
        bu32(b, 6);
    }
    /* tensor 0: f32 [4, 2] at 0; tensor 1: q8_0 [32] after it */
    lo->off1 = (32 + a - 1) / a * a;
    const char *names[2] = {"tok.weight", dup_tensor ? "tok.weight" : "out.weight"};
    const uint32_t types[2] = {GGML_TYPE_F32, GGML_TYPE_Q8_0};
    for (int i = 0; i < 2; i++) {
        lo->t_name_len[i] = b->n;
        lo->t_name[i] = b->n + 8;
        bstr(b, names[i]);
        lo->t_ndims[i] = b->n;
        bu32(b, i == 0 ? 2 : 1);
        lo->t_ne[i] = b->n;
        if (i == 0) {
            bu64(b, 4);
            bu64(b, 2);
        } else {
            bu64(b, 32);
        }
        lo->t_type[i] = b->n;
        bu32(b, types[i]);
        lo->t_offset[i] = b->n;
        bu64(b, i == 0 ? 0 : lo->off1);
    }
    bpad(b, (size_t)a);
    for (int i = 0; i < 8; i++) bf32(b, 0.5f * (float)i);
    bpad(b, (size_t)a);
    for (int i = 0; i < 34; i++) bu8(b, (uint8_t)(i * 7 + 1));
}

static void test_corruptions(void) {
    bb b = {0};
    layout lo;
    uint8_t *m;
    gguf_file *f = NULL;
    subq_error e = {0};

    build_base(&b, &lo, 0, 0, 0);
    m = xmalloc(b.n);
#define RESET() memcpy(m, b.p, b.n)
    RESET();
    CHECK(gguf_open_memory(m, b.n, &f, &e) == SUBQ_OK, "base corruption file opens: %s", e.msg);
    gguf_close(f);
    f = NULL;

    RESET(); m[0] = 'X';
    expect_fail("bad magic", m, b.n, SUBQ_ERR_FORMAT, "GGUF model file");
    RESET(); memcpy(m, "\x7f" "ELF", 4);
    expect_fail("ELF magic", m, b.n, SUBQ_ERR_FORMAT, "magic");
    expect_fail("3 bytes of magic", b.p, 3, SUBQ_ERR_FORMAT, "truncated");
    const uint32_t versions[] = {0, 1, 4, 0xFFFFFFFFu, 0x03000000u};
    for (int i = 0; i < 5; i++) {
        char label[48];
        snprintf(label, sizeof label, "version 0x%x", versions[i]);
        RESET(); patch32(m, lo.version, versions[i]);
        expect_fail(label, m, b.n, SUBQ_OK, "version");
    }
    RESET(); patch32(m, lo.version, 1);
    expect_fail("version 1 is unsupported", m, b.n, SUBQ_ERR_UNSUPPORTED, "version 1");
    RESET(); patch32(m, lo.version, 2);
    CHECK(gguf_open_memory(m, b.n, &f, &e) == SUBQ_OK && f->version == 2, "version 2 opens");
    gguf_close(f);
    f = NULL;

    const uint64_t huge[] = {1ull << 63, 1ull << 32, UINT64_MAX};
    for (int i = 0; i < 3; i++) {
        RESET(); patch64(m, lo.n_tensors, huge[i]);
        expect_fail("huge n_tensors", m, b.n, SUBQ_ERR_FORMAT, "tensors");
        RESET(); patch64(m, lo.n_kv, huge[i]);
        expect_fail("huge n_kv", m, b.n, SUBQ_ERR_FORMAT, "kvs");
    }
    RESET(); patch64(m, lo.n_tensors, 3);
    expect_fail("n_tensors + 1", m, b.n, SUBQ_OK, NULL);
    RESET(); patch64(m, lo.n_kv, 5);
    expect_fail("n_kv + 1", m, b.n, SUBQ_OK, NULL);
    RESET(); patch64(m, lo.n_kv, 3);
    expect_fail("n_kv - 1", m, b.n, SUBQ_OK, NULL);
    RESET(); patch64(m, lo.n_tensors, 1);
    CHECK(gguf_open_memory(m, b.n, &f, &e) == SUBQ_OK && f->n_tensors == 1,
          "n_tensors - 1 still a valid file (trailing data is allowed): %s", e.msg);
    gguf_close(f);
    f = NULL;

    RESET(); patch64(m, lo.key0_len, UINT64_MAX);
    expect_fail("key length 2^64-1", m, b.n, SUBQ_ERR_FORMAT, "key length");
    RESET(); patch64(m, lo.key0_len, 0);
    expect_fail("empty key", m, b.n, SUBQ_ERR_FORMAT, "empty key");
    RESET(); patch64(m, lo.str_len, UINT64_MAX);
    expect_fail("string length 2^64-1", m, b.n, SUBQ_ERR_FORMAT, "string length");
    RESET(); patch64(m, lo.str_len, b.n - lo.str_len - 8 + 1);
    expect_fail("string length one past EOF", m, b.n, SUBQ_ERR_FORMAT, "truncated");
    RESET(); patch32(m, lo.kv_type1, 13);
    expect_fail("kv type 13", m, b.n, SUBQ_ERR_FORMAT, "unknown value type 13");
    RESET(); patch32(m, lo.kv_type1, 0xFFFFFFFFu);
    expect_fail("kv type 0xFFFFFFFF", m, b.n, SUBQ_ERR_FORMAT, "unknown value type");
    RESET(); patch32(m, lo.arr_type, 13);
    expect_fail("array element type 13", m, b.n, SUBQ_ERR_FORMAT, "element type");
    const uint64_t counts[] = {1ull << 62, UINT64_MAX, 1ull << 32, 1000};
    for (int i = 0; i < 4; i++) {
        RESET(); patch64(m, lo.arr_count, counts[i]);
        expect_fail("huge int32 array count", m, b.n, SUBQ_ERR_FORMAT, NULL);
        RESET(); patch64(m, lo.arr_str_count, counts[i]);
        expect_fail("huge string array count", m, b.n, SUBQ_ERR_FORMAT, NULL);
    }
    {
        bb nb = {0};
        build_nested(&nb, 100);
        expect_fail("arrays nested 100 deep", nb.p, nb.n, SUBQ_ERR_FORMAT, "nested");
        free(nb.p);
        /* 100 deep with huge counts at every level */
        nb = (bb){0};
        bheader(&nb, 3, 0, 1);
        bstr(&nb, "deep");
        bu32(&nb, GGUF_TYPE_ARRAY);
        for (int i = 0; i < 100; i++) {
            bu32(&nb, GGUF_TYPE_ARRAY);
            bu64(&nb, 1ull << 60);
        }
        expect_fail("nested arrays with huge counts", nb.p, nb.n, SUBQ_ERR_FORMAT, NULL);
        free(nb.p);
    }

    RESET(); patch32(m, lo.t_ndims[0], 0);
    expect_fail("n_dims 0", m, b.n, SUBQ_ERR_FORMAT, "n_dims 0");
    RESET(); patch32(m, lo.t_ndims[0], 5);
    expect_fail("n_dims 5", m, b.n, SUBQ_ERR_FORMAT, "n_dims 5");
    RESET(); patch32(m, lo.t_ndims[1], 0xFFFFFFFFu);
    expect_fail("n_dims 2^32-1", m, b.n, SUBQ_ERR_FORMAT, "n_dims");
    RESET(); patch64(m, lo.t_ne[0] + 8, 0);
    expect_fail("dimension 0", m, b.n, SUBQ_ERR_FORMAT, "dimension 1 is 0");
    RESET(); patch64(m, lo.t_ne[0], 1ull << 33); patch64(m, lo.t_ne[0] + 8, 1ull << 33);
    expect_fail("dims product overflows", m, b.n, SUBQ_ERR_FORMAT, "overflow");
    RESET(); patch64(m, lo.t_ne[0], UINT64_MAX);
    expect_fail("dim 2^64-1", m, b.n, SUBQ_ERR_FORMAT, "overflow");
    RESET(); patch64(m, lo.t_ne[0], 1ull << 61);
    expect_fail("byte size past EOF", m, b.n, SUBQ_ERR_FORMAT, NULL);
    RESET(); patch32(m, lo.t_type[0], 4);
    expect_fail("ggml type 4", m, b.n, SUBQ_ERR_UNSUPPORTED, "unknown tensor type 4");
    RESET(); patch32(m, lo.t_type[0], 99);
    expect_fail("ggml type 99", m, b.n, SUBQ_ERR_UNSUPPORTED, "unknown tensor type 99");
    RESET(); patch64(m, lo.t_ne[1], 33);
    expect_fail("q8_0 row 33", m, b.n, SUBQ_ERR_FORMAT, "block size");
    RESET(); patch64(m, lo.t_offset[1], lo.off1 + 4);
    expect_fail("misaligned offset", m, b.n, SUBQ_ERR_FORMAT, "alignment");
    RESET(); patch64(m, lo.t_offset[1], 16);
    expect_fail("offset 16 with alignment 32", m, b.n, SUBQ_ERR_FORMAT, "alignment");
    RESET(); patch64(m, lo.t_offset[1], 1ull << 20);
    expect_fail("offset past EOF", m, b.n, SUBQ_ERR_FORMAT, "ends at byte");
    RESET(); patch64(m, lo.t_offset[1], UINT64_MAX - 31);
    expect_fail("offset + size overflows", m, b.n, SUBQ_ERR_FORMAT, "overflows");
    RESET(); patch64(m, lo.t_name_len[0], 0);
    expect_fail("tensor name length 0", m, b.n, SUBQ_ERR_FORMAT, "name length 0");
    RESET(); patch64(m, lo.t_name_len[0], 128);
    expect_fail("tensor name length 128", m, b.n, SUBQ_ERR_FORMAT, "name length 128");
    RESET(); m[lo.t_name[0] + 2] = 0;
    expect_fail("NUL in tensor name", m, b.n, SUBQ_ERR_FORMAT, "NUL");
    RESET(); m[lo.t_name[1] + 1] = '\n';
    m[lo.t_name[0] + 1] = '\n'; /* both names change: a newline must not reach the message */
    patch32(m, lo.t_type[1], 99);
    expect_fail("newline in tensor name", m, b.n, SUBQ_ERR_UNSUPPORTED, "('o\\x0at.weight')");
    /* bytes that are not printable UTF-8 are escaped, a valid character is kept */
    RESET(); m[lo.t_name[1]] = (uint8_t)0x80, m[lo.t_name[1] + 1] = 0x1b;
    patch32(m, lo.t_type[1], 99);
    expect_fail("non-UTF-8 byte in tensor name", m, b.n, SUBQ_ERR_UNSUPPORTED, "('\\x80\\x1bt.weight')");
    RESET(); m[lo.t_name[1]] = (uint8_t)0xc3, m[lo.t_name[1] + 1] = (uint8_t)0xa9;
    patch32(m, lo.t_type[1], 99);
    expect_fail("UTF-8 character in tensor name", m, b.n, SUBQ_ERR_UNSUPPORTED, "('\xc3\xa9t.weight')");
    expect_fail("data truncated by 1 byte", b.p, b.n - 1, SUBQ_ERR_FORMAT, "truncated: tensor 1");
    free(m);
    free(b.p);

    /* alignment */
    b = (bb){0};
    build_base(&b, &lo, 64, 0, 0);
    m = xmalloc(b.n);
    RESET();
    CHECK(gguf_open_memory(m, b.n, &f, &e) == SUBQ_OK && f->alignment == 64 &&
              f->data_offset % 64 == 0,
          "alignment 64 opens: %s", e.msg);
    gguf_close(f);
    f = NULL;
    RESET(); patch32(m, lo.align_val, 0);
    expect_fail("alignment 0", m, b.n, SUBQ_ERR_FORMAT, "general.alignment");
    RESET(); patch32(m, lo.align_val, 3);
    expect_fail("alignment 3", m, b.n, SUBQ_ERR_FORMAT, "power of two");
    /* Powers of two below the spec's multiple of 8: tensor data could sit at
     * addresses f32 loads may not use. */
    for (uint32_t a = 1; a <= 4; a *= 2) {
        RESET(); patch32(m, lo.align_val, a);
        expect_fail("alignment 1, 2 or 4", m, b.n, SUBQ_ERR_FORMAT, ">= 8");
    }
    RESET(); patch32(m, lo.align_val, 8);
    CHECK(gguf_open_memory(m, b.n, &f, &e) == SUBQ_OK && f->alignment == 8, "alignment 8 opens: %s", e.msg);
    gguf_close(f);
    f = NULL;
    RESET(); patch32(m, lo.align_val, 128);
    expect_fail("alignment 128, offsets at 64", m, b.n, SUBQ_ERR_FORMAT, "alignment");
    RESET(); patch32(m, lo.align_val, 0x80000000u);
    expect_fail("alignment 2^31", m, b.n, SUBQ_ERR_FORMAT, NULL);
    RESET(); patch32(m, lo.align_type, GGUF_TYPE_INT32);
    expect_fail("alignment int32", m, b.n, SUBQ_ERR_FORMAT, "uint32");
    free(m);
    free(b.p);

    b = (bb){0};
    build_base(&b, &lo, 0, 1, 0);
    expect_fail("duplicate key", b.p, b.n, SUBQ_ERR_FORMAT, "duplicate key 'test.u32'");
    free(b.p);
    b = (bb){0};
    build_base(&b, &lo, 0, 0, 1);
    expect_fail("duplicate tensor", b.p, b.n, SUBQ_ERR_FORMAT, "duplicate tensor name 'tok.weight'");
    free(b.p);

    /* Empty buffers. */
    expect_fail("0 bytes", (const uint8_t *)"", 0, SUBQ_ERR_FORMAT, "empty");
    CHECK(gguf_open_memory(NULL, 0, &f, &e) == SUBQ_ERR_FORMAT && f == NULL, "NULL, 0 bytes");
    CHECK(gguf_open_memory(NULL, 10, &f, &e) == SUBQ_ERR_ARG, "NULL with size");
#undef RESET
}

/* Seeded random mutations: each must open or fail with a one-line message. */
static void mutate_run(const char *label, const uint8_t *src, size_t size, size_t region, int iters,
                       uint64_t seed) {
    uint8_t *m = xmalloc(size);
    size_t opened = 0, failed = 0, bad = 0;
    uint64_t s = seed;
    memcpy(m, src, size);
    for (int it = 0; it < iters; it++) {
        size_t pos[8];
        int n = 1 + (int)(rng_next(&s) % 4);
        for (int k = 0; k < n; k++) {
            pos[k] = (size_t)(rng_next(&s) % region);
            uint64_t r = rng_next(&s);
            if (r & 1) m[pos[k]] ^= (uint8_t)(1u << ((r >> 1) % 8));
            else m[pos[k]] = (uint8_t)(r >> 8);
        }
        gguf_file *f = NULL;
        subq_error e = {0};
        subq_status st = gguf_open_memory(m, size, &f, &e);
        if (st == SUBQ_OK) {
            opened++;
            gguf_close(f);
        } else {
            failed++;
            if (!one_line(&e) || f != NULL) {
                bad++;
                fprintf(stderr, "FAIL %s mutation %d: bad error '%s'\n", label, it, e.msg);
            }
        }
        for (int k = n - 1; k >= 0; k--) m[pos[k]] = src[pos[k]];
    }
    CHECK(bad == 0, "%s: %zu mutations failed without a proper message", label, bad);
    printf("%s: %d mutations, %zu opened, %zu refused cleanly\n", label, iters, opened, failed);
    free(m);
}

static void test_mutations(const uint8_t *stories, size_t size) {
    gguf_file *f = NULL;
    subq_error e = {0};
    if (stories && gguf_open_memory(stories, size, &f, &e) == SUBQ_OK) {
        mutate_run("stories260K header mutations", stories, size, (size_t)f->data_offset, 4000, 42);
        gguf_close(f);
    }
    bb b = {0};
    layout lo;
    build_base(&b, &lo, 64, 0, 0);
    mutate_run("small-file mutations", b.p, b.n, b.n, 20000, 7);
    free(b.p);
}

/* ---- 5. files on disk ------------------------------------------------- */

static void test_files(const uint8_t *stories, size_t size) {
    const char *dir = tmp_dir();
    char path[512];
    gguf_file *f = NULL;
    subq_error e = {0};

    snprintf(path, sizeof path, "%s/definitely-missing.gguf", dir);
    unlink(path);
    CHECK(gguf_open(path, &f, &e) == SUBQ_ERR_IO && f == NULL && strstr(e.msg, path) && one_line(&e),
          "missing file -> IO: '%s'", e.msg);
    snprintf(path, sizeof path, "%s/empty.gguf", dir);
    write_file(path, "", 0);
    CHECK(gguf_open(path, &f, &e) == SUBQ_ERR_FORMAT && f == NULL && strstr(e.msg, "empty"),
          "empty file -> FORMAT: '%s'", e.msg);
    unlink(path);
    CHECK(gguf_open(dir, &f, &e) == SUBQ_ERR_IO, "directory -> IO: '%s'", e.msg);
    /* A FIFO: opening it for reading would wait for a writer forever. The
     * alarm turns a hang into a failure. */
    snprintf(path, sizeof path, "%s/test_gguf.fifo", dir);
    unlink(path);
    CHECK(mkfifo(path, 0644) == 0, "mkfifo %s: %s", path, strerror(errno));
    alarm(20);
    CHECK(gguf_open(path, &f, &e) == SUBQ_ERR_IO && f == NULL && strstr(e.msg, "not a regular file"),
          "FIFO -> IO without blocking: '%s'", e.msg);
    alarm(0);
    unlink(path);
    if (stories) {
        snprintf(path, sizeof path, "%s/stories-truncated.gguf", dir);
        write_file(path, stories, 300000);
        CHECK(gguf_open(path, &f, &e) == SUBQ_ERR_FORMAT && strncmp(e.msg, path, strlen(path)) == 0 &&
                  strstr(e.msg, "truncated: tensor") && strstr(e.msg, "300000"),
              "truncated file message names the file and sizes: '%s'", e.msg);
        printf("example message: %s\n", e.msg);
        write_file(path, stories, 5000);
        CHECK(gguf_open(path, &f, &e) == SUBQ_ERR_FORMAT && strncmp(e.msg, path, strlen(path)) == 0,
              "header-truncated file: '%s'", e.msg);
        printf("example message: %s\n", e.msg);
        unlink(path);
    }
    gguf_close(NULL);
    CHECK(gguf_open(NULL, &f, &e) == SUBQ_ERR_ARG, "NULL path");
}

/* Read into memory (gguf_open_ex): the same file as the mapping gives, byte
 * for byte, and the same errors. */
static void test_read_in(const char *spath, const uint8_t *stories, size_t size) {
    const char *dir = tmp_dir();
    char path[512];
    gguf_file *f = NULL, *g = NULL;
    subq_error e = {0};
    snprintf(path, sizeof path, "%s/definitely-missing.gguf", dir);
    unlink(path);
    CHECK(gguf_open_ex(path, 1, &f, &e) == SUBQ_ERR_IO && f == NULL && strstr(e.msg, path), "read-in missing: '%s'",
          e.msg);
    snprintf(path, sizeof path, "%s/stories-truncated-read.gguf", dir);
    write_file(path, stories, 300000);
    CHECK(gguf_open_ex(path, 1, &f, &e) == SUBQ_ERR_FORMAT && f == NULL && strstr(e.msg, "truncated: tensor"),
          "read-in truncated: '%s'", e.msg);
    unlink(path);
    CHECK(gguf_open_ex(spath, 1, &f, &e) == SUBQ_OK && f->owns_buffer && !f->owns_mapping, "read in: %s", e.msg);
    CHECK(gguf_open_ex(spath, 0, &g, &e) == SUBQ_OK && g->owns_mapping && !g->owns_buffer, "mapped: %s", e.msg);
    if (f && g) {
        CHECK(f->size == size && g->size == size && memcmp(f->base, stories, size) == 0, "read-in bytes = file bytes");
        int same = f->n_tensors == g->n_tensors && f->n_kv == g->n_kv;
        for (uint64_t i = 0; same && i < f->n_tensors; i++)
            same = !strcmp(f->tensors[i].name, g->tensors[i].name) && f->tensors[i].n_bytes == g->tensors[i].n_bytes &&
                   memcmp(f->tensors[i].data, g->tensors[i].data, f->tensors[i].n_bytes) == 0 &&
                   (const uint8_t *)f->tensors[i].data - f->base == (const uint8_t *)g->tensors[i].data - g->base;
        CHECK(same, "read-in and mapped files hold the same tensors at the same offsets");
    }
    gguf_close(f);
    gguf_close(g);
}

/* ---- 6. temporary files of killed writers ------------------------------ */

static void write_small(const char *path, subq_status want, const char *label) {
    subq_error e = {0};
    gguf_writer *w = gguf_writer_new();
    gguf_writer_set_str(w, "general.architecture", "llama");
    CHECK(gguf_writer_write(w, path, &e) == want, "%s: %s", label, e.msg);
    gguf_writer_free(w);
}

static void test_stale_temps(void) {
    const char *dir = tmp_dir();
    char path[512], tp[128], stale[600];
    snprintf(path, sizeof path, "%s/stale_test.gguf", dir);
    snprintf(tp, sizeof tp, "stale_test.gguf.subq-tmp.");

    /* A writer killed with SIGKILL between creating its temporary file and
     * the rename (a real process, killed for real). */
    pid_t pid = fork();
    if (pid == 0) {
        atomic_file af;
        subq_error e;
        if (atomic_file_open(&af, path, &e) == SUBQ_OK) {
            fputs("partial", af.fp);
            fflush(af.fp);
        }
        raise(SIGKILL);
        _exit(3);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
          "child writer killed");
    CHECK(count_prefix(dir, tp) == 1, "the killed writer left its temporary file");
    write_small(path, SUBQ_OK, "write after a killed writer");
    CHECK(count_prefix(dir, tp) == 0, "the next write removed the killed writer's temporary file");

    /* A live writer (this process holds one open) is left alone, and its
     * own commit still works afterwards. */
    atomic_file live;
    subq_error e = {0};
    CHECK(atomic_file_open(&live, path, &e) == SUBQ_OK, "open a live writer: %s", e.msg);
    write_small(path, SUBQ_OK, "write beside a live writer");
    CHECK(count_prefix(dir, tp) == 1, "a live writer's temporary file is kept");
    fputs("GGUF", live.fp);
    CHECK(atomic_file_commit(&live, 0, &e) == SUBQ_OK, "the live writer commits: %s", e.msg);
    CHECK(count_prefix(dir, tp) == 0, "no temporary file after the commit");

    /* Names that are not ours stay: another length, or a directory. */
    snprintf(stale, sizeof stale, "%s/stale_test.gguf.subq-tmp.notours", dir);
    write_file(stale, "x", 1);
    write_small(path, SUBQ_OK, "write beside a lookalike");
    CHECK(access(stale, F_OK) == 0, "a name of another length is kept");
    unlink(stale);
    snprintf(stale, sizeof stale, "%s/stale_test.gguf.subq-tmp.ADIR00", dir);
    mkdir(stale, 0755);
    write_small(path, SUBQ_OK, "write beside a directory named like a temporary file");
    CHECK(access(stale, F_OK) == 0, "a directory is kept");
    rmdir(stale);

    /* Aborted writes remove their file. */
    CHECK(atomic_file_open(&live, path, &e) == SUBQ_OK, "open: %s", e.msg);
    atomic_file_abort(&live);
    CHECK(count_prefix(dir, tp) == 0, "abort removes the temporary file");
    unlink(path);
}

/* Outputs replace regular files only: a FIFO, a character device (made
 * here, with /dev/full's numbers) and a directory are refused and stay what
 * they were. Nothing is written through a symbolic link: a link (to a
 * regular file, a device or nothing) is itself replaced by the new file and
 * what it led to stays as it was. */
static void test_special_outputs(void) {
    const char *dir = tmp_dir();
    char fifo[512], dev[512], sub[512], link[512], target[512];
    struct stat st;
    snprintf(fifo, sizeof fifo, "%s/out_fifo", dir);
    snprintf(dev, sizeof dev, "%s/out_full", dir);
    snprintf(sub, sizeof sub, "%s/out_dir", dir);
    snprintf(link, sizeof link, "%s/out_link", dir);
    snprintf(target, sizeof target, "%s/out_target.gguf", dir);
    unlink(fifo), unlink(dev), rmdir(sub), unlink(link), unlink(target);
    CHECK(mkfifo(fifo, 0644) == 0, "mkfifo: %s", strerror(errno));
    CHECK(mknod(dev, S_IFCHR | 0644, makedev(1, 7)) == 0, "mknod (root, CAP_MKNOD): %s", strerror(errno));
    CHECK(mkdir(sub, 0755) == 0, "mkdir: %s", strerror(errno));
    write_small(fifo, SUBQ_ERR_ARG, "a FIFO is refused");
    write_small(dev, SUBQ_ERR_ARG, "a character device is refused");
    write_small(sub, SUBQ_ERR_ARG, "a directory is refused");
    CHECK(lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode), "the FIFO is still a FIFO");
    CHECK(lstat(dev, &st) == 0 && S_ISCHR(st.st_mode), "the device is still a device");
    CHECK(lstat(sub, &st) == 0 && S_ISDIR(st.st_mode), "the directory is still a directory");
    /* a link to a regular file: the link is replaced, the file it led to kept */
    write_file(target, "old", 3);
    CHECK(symlink(target, link) == 0, "symlink: %s", strerror(errno));
    write_small(link, SUBQ_OK, "a symlink is replaced");
    CHECK(lstat(link, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 3, "the link is now the new file");
    CHECK(lstat(target, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 3, "its target is untouched");
    /* links to a device or to nothing: replaced, the device left alone */
    unlink(link);
    CHECK(symlink(dev, link) == 0, "symlink: %s", strerror(errno));
    write_small(link, SUBQ_OK, "a symlink to a device is replaced");
    CHECK(lstat(link, &st) == 0 && S_ISREG(st.st_mode), "the link to a device is now the new file");
    CHECK(lstat(dev, &st) == 0 && S_ISCHR(st.st_mode), "the device is still a device");
    unlink(link);
    CHECK(symlink("no/such/file", link) == 0, "symlink: %s", strerror(errno));
    write_small(link, SUBQ_OK, "a dangling symlink is replaced");
    CHECK(lstat(link, &st) == 0 && S_ISREG(st.st_mode), "the dangling link is now the new file");
    unlink(fifo), unlink(dev), rmdir(sub), unlink(link), unlink(target);
}

int main(void) {
    char spath[1024];
    uint8_t *stories = NULL;
    size_t ssize = 0;

    test_writer_roundtrip(0);
    test_writer_roundtrip(64);
    test_writer_errors();
    test_handbuilt(3);
    test_handbuilt(2);
    if (stories_path(spath, sizeof spath) == 0) {
        test_stories(spath);
        if (read_file(spath, &stories, &ssize) != 0) {
            CHECK(0, "cannot read %s", spath);
            stories = NULL;
        }
    }
    if (stories) test_truncation(stories, ssize);
    test_corruptions();
    test_mutations(stories, ssize);
    test_files(stories, ssize);
    if (stories) test_read_in(spath, stories, ssize);
    test_stale_temps();
    test_special_outputs();
    free(stories);

    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail || g_pass == 0 ? 1 : 0; /* nothing checked: a failure */
}
