/* KV cache: per layer and KV head, keys and values of every cached token
 * (post-RoPE keys), stored f32, f16, q8_0 or q4_0 (rows of head_dim values
 * in the layouts of kernels/kernels.h, quantised when they are stored),
 * plus each slot's position and document (segment) id for causal and
 * block-causal masks. */
#ifndef SUBQ_KV_CACHE_H
#define SUBQ_KV_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"
#include "kv/kv_file.h"
#include "subq.h"

/* Widest head a cache takes (real models: 64-256): gathered rows are
 * copied through fixed scratch (attn_group_over_slots). */
#define KV_MAX_HEAD_DIM 4096

typedef struct kv_cache {
    int n_layer, n_head_kv, head_dim, n_ctx;
    int n_used;                 /* slots filled: 0 .. n_used-1 */
    subq_kv_type type;
    size_t row_bytes;           /* one row of head_dim values in `type` */
    void **k, **v;              /* [layer] -> rows of every KV head and slot, placed by the strides */
    /* Bytes between a KV head's rows and the next head's (head_stride), and
     * between a slot's row and the next slot's (slot_stride). In memory the
     * layout is head-major [n_head_kv][n_ctx][row]: dense decode streams a
     * head's rows contiguously. In a file it is slot-major
     * [n_ctx][keys, values][n_head_kv][row]: a retrieved slot's rows of
     * every KV head and both kinds share a page, so a sparse step reads one
     * page per slot, not one per row. */
    size_t head_stride, slot_stride;
    int32_t *pos;               /* [n_ctx] */
    int32_t *seg;               /* [n_ctx]; in memory, the second half of pos's allocation */
    kv_file *file;              /* NULL: rows in memory; else rows, pos and seg live in its mapping */
    unsigned char *store_buf;   /* with a file: KV_STORE_SLOTS slots' rows, made here, then written at once */
    int prefetch;               /* with a file: ask for the rows a query attends before reading them
                                   (set per step by the context after a step waited on the disk) */
} kv_cache;

/* Bytes the cache would take; used to refuse contexts larger than memory
 * (SIZE_MAX when the type cannot hold rows of head_dim values). */
size_t kv_cache_bytes(int n_layer, int n_head_kv, int head_dim, int n_ctx, subq_kv_type type);
/* SUBQ_OK when `type` can hold rows of head_dim values, else a one-line
 * SUBQ_ERR_UNSUPPORTED (head_dim at most KV_MAX_HEAD_DIM; quantised types:
 * a multiple of 32, or 2, 4, 8, 16) or SUBQ_ERR_ARG (unknown type). */
subq_status kv_cache_check_type(subq_kv_type type, int head_dim, subq_error *err);
subq_status kv_cache_init(kv_cache *kv, int n_layer, int n_head_kv, int head_dim, int n_ctx,
                          subq_kv_type type, subq_error *err);
/* The same over a KV file's mapping (kv_file.h); the cache owns f (closed
 * on failure too). */
subq_status kv_cache_init_file(kv_cache *kv, kv_file *f, subq_error *err);
void kv_cache_free(kv_cache *kv);

/* With a file: start reading the pages of the key and value rows of
 * `slots` (every KV head of `layer`) at once, so that the disk serves them
 * in parallel rather than one page fault at a time. */
void kv_cache_prefetch(const kv_cache *kv, int layer, const int *slots, int n);

/* First slot of the document (segment) that `slot` lies in. Segment ids
 * never go down along the cache (context_forward refuses that), so each
 * document is a run of slots, found by bisection. */
int kv_cache_doc_start(const kv_cache *kv, int slot);

/* Write n tokens' keys and values (rows [t][n_head_kv*head_dim]) of one layer
 * into slots slot0 .. slot0+n-1, converted to the cache's type (in a file:
 * runs of up to KV_STORE_SLOTS slots made in store_buf, then written with
 * one pwrite each; SUBQ_ERR_IO when the disk refuses). */
#define KV_STORE_SLOTS 256
subq_status kv_cache_store(kv_cache *kv, int layer, int slot0, int n, const float *k, const float *v,
                           subq_error *err);

/* n rows (slots slot0 ..) of one KV head's keys (values = 0) or values,
 * copied out side by side into dst / in from src side by side, whatever
 * the cache's layout (session files keep a head's rows as one tensor). */
void kv_cache_read_rows(const kv_cache *kv, int layer, int h, int values, int slot0, int n, void *dst);
void kv_cache_write_rows(kv_cache *kv, int layer, int h, int values, int slot0, int n, const void *src);
/* The same n rows as f32 rows side by side: the cache's own when it holds
 * them so (f32, head-major), else converted into scratch (n x head_dim). */
const float *kv_cache_rows_f32(const kv_cache *kv, int layer, int h, int values, int slot0, int n, float *scratch);
/* Whether kv_cache_rows_f32 needs its scratch. */
static inline int kv_cache_rows_f32_copied(const kv_cache *kv) {
    return kv->type != SUBQ_KV_F32 || kv->slot_stride != kv->row_bytes;
}

/* Pointer to the key / value of (layer, kv head, slot) in the cache's type. */
static inline const void *kv_cache_key(const kv_cache *kv, int layer, int h, int slot) {
    return (const char *)kv->k[layer] + (size_t)h * kv->head_stride + (size_t)slot * kv->slot_stride;
}
static inline const void *kv_cache_value(const kv_cache *kv, int layer, int h, int slot) {
    return (const char *)kv->v[layer] + (size_t)h * kv->head_stride + (size_t)slot * kv->slot_stride;
}
/* The key (values = 0) or value row of (layer, kv head, slot). */
static inline const void *kv_cache_row(const kv_cache *kv, int layer, int h, int values, int slot) {
    return values ? kv_cache_value(kv, layer, h, slot) : kv_cache_key(kv, layer, h, slot);
}
/* Whether a KV head's consecutive slots are adjacent rows (head-major) */
static inline int kv_cache_rows_adjacent(const kv_cache *kv) { return kv->slot_stride == kv->row_bytes; }
/* A KV head's slot-to-slot distance in values of head_dim-wide rows (the
 * stride of the gathered dots, kernels_kv.gather_dot: a multiple of head_dim) */
static inline size_t kv_cache_slot_stride_values(const kv_cache *kv) {
    return (size_t)kv->head_dim * (kv->slot_stride / kv->row_bytes);
}

/* A KV head's first n rows as a 2-D GGUF tensor [ne0][n] (session files):
 * the ggml type of the rows with ne0 = head_dim where ggml has one (f32,
 * f16; q8_0 / q4_0 of 32-value blocks), else raw bytes (I8, ne0 = row_bytes). */
void kv_cache_row_tensor(const kv_cache *kv, uint32_t *type, uint64_t *ne0);

/* The kernels for the cache's rows (dot, axpy, conversion, decode scores
 * and accumulation, gathered dots). */
static inline const kernels_kv *kv_cache_ops(const kv_cache *kv) { return &kernels_get()->kv[kv->type]; }

/* One cached key or value row (head_dim values, from kv_cache_key/value) as floats. */
static inline void kv_cache_row_f32(const kv_cache *kv, const void *row, float *dst) {
    kv_cache_ops(kv)->to_f32(row, 1, kv->head_dim, dst);
}

#endif
