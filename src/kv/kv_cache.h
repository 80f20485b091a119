/* KV cache: per layer and KV head, keys and values of every cached token
 * (post-RoPE keys), stored f32, f16, q8_0 or q4_0 (rows of head_dim values
 * in the layouts of kernels/kernels.h, quantised when they are stored),
 * plus each slot's position and document (segment) id for causal and
 * block-causal masks. */
#ifndef SUBQ_KV_CACHE_H
#define SUBQ_KV_CACHE_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"
#include "kv/kv_file.h"
#include "subq.h"

/* Widest head a cache takes (real models: 64-256): gathered rows are
 * copied through fixed scratch (attn_group_over_slots). */
#define KV_MAX_HEAD_DIM 4096

/* One layer's rows. A sliding-window layer (Gemma's local ones) reads only
 * the keys of its window, so in memory it may keep just the latest `ring`
 * slots: slot s lives in row s mod ring, and storing slot s overwrites
 * slot s - ring. The ring holds the window plus a batch (what a forward
 * step writes before it reads), as llama.cpp's SWA cache does. */
typedef struct kv_layer_rows {
    int ring;                   /* rows per KV head: n_ctx, or fewer for a sliding layer (a ring) */
    int window;                 /* the layer's sliding window (0: none): a query at slot s reads slots > s - window */
    int held_lo;                /* first slot whose rows are held (0 until a ring wraps, or a session file
                                   gave only the latest rows) */
    size_t head_stride;         /* bytes between a KV head's rows and the next head's */
    size_t slot_stride;         /* bytes between a slot's row and the next slot's */
    /* With a file, a head-major layer's decode rows: slots from stage_from
     * on (INT_MAX: none) are in stage, [kind][n_head_kv][KV_STAGE_SLOTS]
     * rows (stage_n of them a head and kind), not yet in the file
     * (kv_cache_store, kv_cache_flush). */
    int stage_from, stage_n;
    unsigned char *stage;
} kv_layer_rows;

typedef struct kv_cache {
    int n_layer, n_head_kv, head_dim, n_ctx;
    int n_used;                 /* slots filled: 0 .. n_used-1 */
    subq_kv_type type;
    size_t row_bytes;           /* one row of head_dim values in `type` */
    void **k, **v;              /* [layer] -> rows of every KV head and slot, placed by the strides */
    /* [layer]: ring, window, held rows and the strides. A layer the plan
     * reads in runs (dense, a window) is head-major [kind][n_head_kv][ring]
     * [row]: dense decode streams a head's rows contiguously. One that
     * retrieves its rows is slot-major [ring][keys, values][n_head_kv][row]:
     * a retrieved slot's rows of every KV head and both kinds share a page,
     * so a sparse step reads one page per slot, not one per row (from a
     * file: one page fault; in memory: one address translation, which
     * under a hypervisor that backs guests with 4 KiB pages costs as much
     * as the row). In memory a cache starts head-major (kv_cache_set_layout);
     * in a file every layer is whole (kv_file.h). */
    kv_layer_rows *layers;
    int32_t *pos;               /* [n_ctx] */
    int32_t *seg;               /* [n_ctx]; in memory, the second half of pos's allocation */
    kv_file *file;              /* NULL: rows in memory; else rows, pos and seg live in its mapping */
    unsigned char *store_buf;   /* with a file: KV_STORE_SLOTS slots' rows, made here, then written at once
                                   (one run a slot-major layer, one a head and kind a head-major one) */
    int prefetch;               /* with a file: ask for the rows a query attends before reading them
                                   (set per step by the context after a step waited on the disk) */
} kv_cache;

/* Rows per KV head a layer keeps in memory: n_ctx, or for a sliding
 * window the window plus n_batch (the rows a forward step writes before it
 * reads them), when that is fewer. */
int kv_cache_ring_rows(int n_ctx, int window, int n_batch);
/* Bytes the cache would take; used to refuse contexts larger than memory
 * (SIZE_MAX when the type cannot hold rows of head_dim values). window:
 * each layer's sliding window (NULL: none slides), kept in rings of
 * kv_cache_ring_rows(n_ctx, window, n_batch) rows. */
size_t kv_cache_bytes(int n_layer, int n_head_kv, int head_dim, int n_ctx, subq_kv_type type, const int *window,
                      int n_batch);
/* What a cache holds: its rows (in memory or in its file), positions and documents. */
size_t kv_cache_held_bytes(const kv_cache *kv);
/* SUBQ_OK when `type` can hold rows of head_dim values, else a one-line
 * SUBQ_ERR_UNSUPPORTED (head_dim at most KV_MAX_HEAD_DIM; quantised types:
 * a multiple of 32, or 2, 4, 8, 16) or SUBQ_ERR_ARG (unknown type). */
subq_status kv_cache_check_type(subq_kv_type type, int head_dim, subq_error *err);
/* A cache in memory. window: each layer's sliding window or NULL (then
 * every layer keeps every slot); n_batch: the most slots one forward step
 * stores before it attends (the rings' slack). */
subq_status kv_cache_init_windows(kv_cache *kv, int n_layer, int n_head_kv, int head_dim, int n_ctx,
                                  subq_kv_type type, const int *window, int n_batch, subq_error *err);
/* Every layer whole (no window). */
subq_status kv_cache_init(kv_cache *kv, int n_layer, int n_head_kv, int head_dim, int n_ctx,
                          subq_kv_type type, subq_error *err);
/* The same over a KV file's mapping (kv_file.h), every layer whole; the
 * cache owns f (closed on failure too). */
subq_status kv_cache_init_file(kv_cache *kv, kv_file *f, subq_error *err);
/* The file's layers laid out again (kv_file_set_layout): each layer's rows
 * and strides read from it anew. */
void kv_cache_file_layout(kv_cache *kv);
/* An empty cache in memory (n_used 0) laid out for a plan: layer l
 * head-major where head_major[l] != 0, else slot-major (kv_layer_rows). A
 * file's layout is the file's (kv_file_set_layout): unchanged here. */
void kv_cache_set_layout(kv_cache *kv, const unsigned char *head_major);
void kv_cache_free(kv_cache *kv);

/* With a file: start reading the pages of the key and value rows of
 * `slots` (every KV head of `layer`) at once, so that the disk serves them
 * in parallel rather than one page fault at a time. */
void kv_cache_prefetch(const kv_cache *kv, int layer, const int *slots, int n);

/* Forget every slot (n_used 0, every row held again). */
void kv_cache_clear(kv_cache *kv);
/* The fewest slots a cache of n_used > 0 can be cut back to and still
 * decode on (a sliding layer's query at slot n reads its window's slots
 * before n, which a ring may have overwritten): 0 when any count is fine.
 * Cutting to 0 is always fine (kv_cache_clear). */
int kv_cache_min_keep(const kv_cache *kv);

/* First slot of the document (segment) that `slot` lies in. Segment ids
 * never go down along the cache (context_forward refuses that), so each
 * document is a run of slots, found by bisection. */
int kv_cache_doc_start(const kv_cache *kv, int slot);

/* Write n tokens' keys and values (rows [t][n_head_kv*head_dim]) of one layer
 * into slots slot0 .. slot0+n-1, converted to the cache's type. In a file:
 * runs of up to KV_STORE_SLOTS slots made in store_buf, then written with
 * one pwrite each (SUBQ_ERR_IO when the disk refuses), except a head-major
 * layer's short writes (at most KV_FILE_SHORT_WRITE slots: a decode step's),
 * which wait in the layer's stage of KV_STAGE_SLOTS slots until it is full
 * or the cache is flushed: a decode step wrote a row a head and kind, each a
 * pwrite into a 2 MiB page-cache page that walks its 512 block buffers
 * (13-25 us; 128 a step for four dense layers), where a full stage writes
 * its runs at once. A ring takes at most ring - window + 1 slots at once
 * (more would overwrite keys their own queries read). */
#define KV_STAGE_SLOTS 256
/* A stage starts at a multiple of KV_RUN_ALIGN slots (the rows before its
 * first new one copied in from the file): decode chunks start at multiples
 * of it, and the kernels group rows within it, so the stage's run splits a
 * chunk where one pass's sums come out the same (attn_full.c). */
#define KV_RUN_ALIGN 64
#define KV_STORE_SLOTS 256
subq_status kv_cache_store(kv_cache *kv, int layer, int slot0, int n, const float *k, const float *v,
                           subq_error *err);
/* Write every stage's rows into the file (before a commit reads them). */
subq_status kv_cache_flush(kv_cache *kv, subq_error *err);

/* n rows (slots slot0 ..) of one KV head's keys (values = 0) or values,
 * copied out side by side into dst / in from src side by side, whatever
 * the cache's layout (session files keep a head's rows as one tensor). */
void kv_cache_read_rows(const kv_cache *kv, int layer, int h, int values, int slot0, int n, void *dst);
void kv_cache_write_rows(kv_cache *kv, int layer, int h, int values, int slot0, int n, const void *src);
/* The same n rows as f32 rows side by side: the cache's own when it holds
 * them so (f32, head-major), else converted into scratch (n x head_dim). */
const float *kv_cache_rows_f32(const kv_cache *kv, int layer, int h, int values, int slot0, int n, float *scratch);

/* Byte offset of (layer, kv head, slot)'s row from its layer's first:
 * slot s of a ring sits in row s mod ring (no division for whole layers,
 * whose ring is n_ctx). */
static inline size_t kv_cache_row_offset(const kv_cache *kv, int layer, int h, int slot) {
    const kv_layer_rows *L = &kv->layers[layer];
    const int r = slot < L->ring ? slot : slot % L->ring;
    return (size_t)h * L->head_stride + (size_t)r * L->slot_stride;
}
/* A staged row: (kind, KV head, slot) in the layer's stage. */
static inline const void *kv_cache_staged(const kv_cache *kv, const kv_layer_rows *L, int values, int h, int slot) {
    return L->stage + ((size_t)(values * kv->n_head_kv + h) * KV_STAGE_SLOTS + (size_t)(slot - L->stage_from)) *
                          kv->row_bytes;
}
/* Pointer to the key / value of (layer, kv head, slot) in the cache's type. */
static inline const void *kv_cache_key(const kv_cache *kv, int layer, int h, int slot) {
    const kv_layer_rows *L = &kv->layers[layer];
    if (slot >= L->stage_from) return kv_cache_staged(kv, L, 0, h, slot);
    return (const char *)kv->k[layer] + kv_cache_row_offset(kv, layer, h, slot);
}
static inline const void *kv_cache_value(const kv_cache *kv, int layer, int h, int slot) {
    const kv_layer_rows *L = &kv->layers[layer];
    if (slot >= L->stage_from) return kv_cache_staged(kv, L, 1, h, slot);
    return (const char *)kv->v[layer] + kv_cache_row_offset(kv, layer, h, slot);
}
/* The key (values = 0) or value row of (layer, kv head, slot). */
static inline const void *kv_cache_row(const kv_cache *kv, int layer, int h, int values, int slot) {
    return values ? kv_cache_value(kv, layer, h, slot) : kv_cache_key(kv, layer, h, slot);
}
/* How many of the n slots from `slot` on lie in consecutive rows (a ring
 * wraps once at most within its size; staged rows are a run of their own). */
static inline int kv_cache_run(const kv_cache *kv, int layer, int slot, int n) {
    const kv_layer_rows *L = &kv->layers[layer];
    const int end = slot < L->stage_from ? L->stage_from : L->stage_from + KV_STAGE_SLOTS;
    const int r = L->ring - slot % L->ring, m = end - slot < r ? end - slot : r;
    return n < m ? n : m;
}
/* Whether a layer keeps fewer rows than slots (a sliding layer's ring). */
static inline int kv_cache_is_ring(const kv_cache *kv, int layer) { return kv->layers[layer].ring < kv->n_ctx; }
/* Whether kv_cache_rows_f32 needs its scratch for this layer. */
static inline int kv_cache_rows_f32_copied(const kv_cache *kv, int layer) {
    return kv->type != SUBQ_KV_F32 || kv->layers[layer].slot_stride != kv->row_bytes || kv_cache_is_ring(kv, layer) ||
           kv->layers[layer].stage_from != INT_MAX;
}
/* Whether a KV head's consecutive slots are adjacent rows in a layer (head-major) */
static inline int kv_cache_rows_adjacent(const kv_cache *kv, int layer) {
    return kv->layers[layer].slot_stride == kv->row_bytes;
}
/* A KV head's slot-to-slot distance in values of head_dim-wide rows (the
 * stride of the gathered dots, kernels_kv.gather_dot: a multiple of head_dim) */
static inline size_t kv_cache_slot_stride_values(const kv_cache *kv, int layer) {
    return (size_t)kv->head_dim * (kv->layers[layer].slot_stride / kv->row_bytes);
}

/* out[i] = q . key of KV head h at slot idx[i] (i < n), by the cache type's
 * gathered dot over the layer's rows a slot stride apart; staged slots
 * (kv_cache_store) one by one. */
void kv_cache_gather_dot(const kv_cache *kv, int layer, int h, const float *q, const int32_t *idx, int n, float *out);

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
