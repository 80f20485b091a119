/* GGUF v2/v3 reader (memory-mapped, every offset/count/size bounds-checked)
 * and writer (atomic: temp file + fsync + rename).
 *
 * File layout (little-endian):
 *   magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
 *   n_kv x { string key | u32 value_type | value }
 *   n_tensors x { string name | u32 n_dims | u64 ne[n_dims] | u32 ggml_type | u64 offset }
 *   padding to `general.alignment` (default 32) | tensor data (offsets relative to here)
 * string = u64 length + bytes (no NUL); array = u32 elem_type + u64 count + elements. */
#ifndef SUBQ_GGUF_H
#define SUBQ_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "subq.h"

typedef enum gguf_type {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
    GGUF_TYPE_COUNT
} gguf_type;

#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS 4

/* A string inside the mapped file: NOT NUL-terminated. */
typedef struct gguf_str {
    uint64_t len;
    const char *data;
} gguf_str;

typedef struct gguf_value gguf_value;
struct gguf_value {
    gguf_type type;
    union {
        uint64_t u64;  /* UINT8/16/32/64 */
        int64_t i64;   /* INT8/16/32/64 */
        double f64;    /* FLOAT32/64 */
        bool b;        /* BOOL */
        gguf_str str;  /* STRING */
        struct {
            gguf_type elem_type;
            uint64_t n;
            /* Fixed-size element types: `data` points at the n packed
             * little-endian elements inside the mapping (may be unaligned:
             * read with memcpy). STRING and ARRAY elements: `items` holds
             * n parsed values. */
            const void *data;
            gguf_value *items;
        } arr;
    } v;
};

typedef struct gguf_kv {
    gguf_str key;
    gguf_value value;
} gguf_kv;

typedef struct gguf_tensor {
    char name[128];            /* NUL-terminated copy (names longer than 127 bytes are refused) */
    uint32_t n_dims;
    uint64_t ne[GGUF_MAX_DIMS]; /* ne[0] is the contiguous (row) dimension; unused dims = 1 */
    uint32_t type;             /* ggml_type */
    uint64_t offset;           /* relative to the data section */
    uint64_t n_elements;
    uint64_t n_bytes;
    const void *data;          /* inside the mapping */
} gguf_tensor;

typedef struct gguf_file {
    uint32_t version;
    uint64_t n_kv;
    gguf_kv *kv;
    uint64_t n_tensors;
    gguf_tensor *tensors;
    uint64_t alignment;
    uint64_t data_offset;      /* start of the tensor data section in the file */
    const uint8_t *base;       /* whole file contents */
    size_t size;
    int owns_mapping;          /* 1: munmap on close */
    int owns_buffer;           /* 1: free on close (read into memory) */
} gguf_file;

/* Open and validate a file (mmap). On failure *out is NULL and err says why,
 * e.g. "model.gguf: truncated at byte 1234 while reading tensor 5 name". */
subq_status gguf_open(const char *path, gguf_file **out, subq_error *err);
/* The same, the file read into memory in 2 MiB pages instead of mapped when
 * `read_in` (decode streams the weights every token: from huge pages the
 * weight GEMV runs ~1.3x faster than from the 4 KiB pages of a mapping). */
subq_status gguf_open_ex(const char *path, int read_in, gguf_file **out, subq_error *err);
/* Same over a caller-owned buffer that must outlive the returned handle. */
subq_status gguf_open_memory(const void *data, size_t size, gguf_file **out, subq_error *err);
void gguf_close(gguf_file *f);
/* Load an object that can read itself from an open file: gguf_open, then
 * read_fn(f, path, out, err), then gguf_close (what read returns lives on). */
typedef subq_status (*gguf_read_fn)(const gguf_file *f, const char *path, void *out, subq_error *err);
subq_status gguf_load(const char *path, gguf_read_fn read_fn, void *out, subq_error *err);

/* Sum of the sizes of all tensors. */
uint64_t gguf_tensor_bytes(const gguf_file *f);

/* Lookups: NULL when absent. `key`/`name` are NUL-terminated. */
const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);

/* Typed getters. Missing key: SUBQ_ERR_FORMAT with a message naming the key,
 * unless the *_or variant is used (which returns `def` when absent).
 * Integer getters accept any integer type whose value fits; float getters
 * accept FLOAT32/FLOAT64. Type mismatch: SUBQ_ERR_FORMAT. */
subq_status gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out, subq_error *err);
subq_status gguf_get_u32_or(const gguf_file *f, const char *key, uint32_t def, uint32_t *out,
                            subq_error *err);
subq_status gguf_get_f32_or(const gguf_file *f, const char *key, float def, float *out,
                            subq_error *err);
subq_status gguf_get_bool_or(const gguf_file *f, const char *key, bool def, bool *out,
                             subq_error *err);
/* Copies the string NUL-terminated into buf (cap bytes; too long -> error). */
subq_status gguf_get_str(const gguf_file *f, const char *key, char *buf, size_t cap,
                         subq_error *err);
/* Array accessor: requires the key to be an array of `elem_type`. */
subq_status gguf_get_arr(const gguf_file *f, const char *key, gguf_type elem_type,
                         const gguf_value **out, subq_error *err);
/* Element i of a fixed-size-type array converted to double / u64. */
double gguf_arr_get_f64(const gguf_value *arr, uint64_t i);
int64_t gguf_arr_get_i64(const gguf_value *arr, uint64_t i);

const char *gguf_type_name(gguf_type t);
/* Bytes of one element of a fixed-size type; 0 for STRING, ARRAY and unknown. */
size_t gguf_type_size(uint32_t t);

/* FNV-1a (base/fingerprint.h) of a value, its type and, for arrays, every
 * element, chained onto h. */
uint64_t gguf_value_hash(uint64_t h, const gguf_value *v);

/* ---- writer ---------------------------------------------------------- */

typedef struct gguf_writer gguf_writer;

gguf_writer *gguf_writer_new(void);
void gguf_writer_free(gguf_writer *w);
/* Metadata setters; the key and string are copied. Setting an existing key
 * replaces it. Return SUBQ_ERR_NOMEM on allocation failure. */
subq_status gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v);
subq_status gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v);
subq_status gguf_writer_set_u64(gguf_writer *w, const char *key, uint64_t v);
subq_status gguf_writer_set_f32(gguf_writer *w, const char *key, float v);
subq_status gguf_writer_set_bool(gguf_writer *w, const char *key, bool v);
subq_status gguf_writer_set_str(gguf_writer *w, const char *key, const char *v);
/* Array of fixed-size elements (n elements of elem_type, packed, copied). */
subq_status gguf_writer_set_arr(gguf_writer *w, const char *key, gguf_type elem_type,
                                const void *data, uint64_t n);
subq_status gguf_writer_set_arr_str(gguf_writer *w, const char *key, const char *const *v,
                                    uint64_t n);
/* Copy every metadata pair of an open file (any type, nested arrays
 * included), e.g. to rewrite a file with one key changed. */
subq_status gguf_writer_copy_kvs(gguf_writer *w, const gguf_file *f);
/* Copy metadata pair i of f (e.g. to copy some keys only). */
subq_status gguf_writer_copy_kv(gguf_writer *w, const gguf_file *f, uint64_t i);
/* Add a tensor: ne[0] is the row length. The data is NOT copied: it must stay
 * valid until gguf_writer_write returns; with `take_ownership` the writer
 * free()s it in gguf_writer_free. n_bytes must equal the size implied by
 * type and shape (SUBQ_ERR_SHAPE otherwise). */
subq_status gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                                   const uint64_t *ne, const void *data, uint64_t n_bytes,
                                   int take_ownership, subq_error *err);
/* Write version 3 with `general.alignment` alignment (default 32) atomically:
 * a temporary file beside path, fsync, rename (see base/atomic_file.h; stale
 * temporaries of killed writers are removed). */
subq_status gguf_writer_write(gguf_writer *w, const char *path, subq_error *err);

/* Save an object that can add itself to a writer: a new writer, what
 * fill(obj, w, err) adds to it, written to path (gguf_writer_write), freed. */
typedef subq_status (*gguf_fill_fn)(const void *obj, gguf_writer *w, subq_error *err);
subq_status gguf_save(const char *path, gguf_fill_fn fill, const void *obj, subq_error *err);

#endif
