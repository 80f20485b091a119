#include "kv/kv_cache.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "base/bigmem.h"
#include "base/error.h"
#include "kernels/kernels.h"

/* a * b, saturating at SIZE_MAX (absurd contexts must not wrap to small sizes) */
static size_t mul_sat(size_t a, size_t b) { return b && a > SIZE_MAX / b ? SIZE_MAX : a * b; }

int subq_kv_type_parse(const char *name) {
    for (int t = 0; t < SUBQ_KV_TYPE_COUNT; t++)
        if (name && strcmp(name, subq_kv_type_name((subq_kv_type)t)) == 0) return t;
    return -1;
}

const char *subq_kv_type_name(subq_kv_type t) {
    static const char *const names[SUBQ_KV_TYPE_COUNT] = {"f32", "f16", "q8_0", "q4_0"};
    return (unsigned)t < SUBQ_KV_TYPE_COUNT ? names[t] : "?";
}

subq_status kv_cache_check_type(subq_kv_type type, int head_dim, subq_error *err) {
    if ((unsigned)type >= SUBQ_KV_TYPE_COUNT) return subq_fail(err, SUBQ_ERR_ARG, "unknown KV cache type %d", (int)type);
    if (head_dim > KV_MAX_HEAD_DIM)
        return subq_fail(err, SUBQ_ERR_UNSUPPORTED, "this model's heads have %d values; the KV cache takes at most %d",
                         head_dim, KV_MAX_HEAD_DIM);
    if (kernels_kv_row_bytes(type, head_dim) == 0)
        return subq_fail(err, SUBQ_ERR_UNSUPPORTED,
                         "a %s KV cache needs a head width that is a multiple of 32 (or 2, 4, 8, 16); this model's "
                         "heads have %d values",
                         subq_kv_type_name(type), head_dim);
    return SUBQ_OK;
}

int kv_cache_ring_rows(int n_ctx, int window, int n_batch) {
    if (window <= 0 || (int64_t)window + n_batch >= n_ctx) return n_ctx;
    return window + n_batch;
}

size_t kv_cache_bytes(int n_layer, int n_head_kv, int head_dim, int n_ctx, subq_kv_type type, const int *window,
                      int n_batch) {
    size_t rb = (unsigned)type < SUBQ_KV_TYPE_COUNT ? kernels_kv_row_bytes(type, head_dim) : 0;
    if (rb == 0) return SIZE_MAX;
    size_t rows = 0; /* per KV head and kind, over the layers */
    for (int l = 0; l < n_layer; l++) {
        size_t r = (size_t)kv_cache_ring_rows(n_ctx, window ? window[l] : 0, n_batch);
        rows = rows > SIZE_MAX - r ? SIZE_MAX : rows + r;
    }
    size_t kv = mul_sat(mul_sat(mul_sat(2, (size_t)n_head_kv), rows), rb);
    size_t meta = mul_sat((size_t)n_ctx, 2 * sizeof(int32_t));
    return kv > SIZE_MAX - meta ? SIZE_MAX : kv + meta;
}

size_t kv_cache_held_bytes(const kv_cache *kv) {
    size_t rows = 0;
    for (int l = 0; l < kv->n_layer; l++) rows += (size_t)kv->layers[l].ring;
    return 2 * (size_t)kv->n_head_kv * rows * kv->row_bytes + (size_t)kv->n_ctx * 2 * sizeof(int32_t);
}

/* kv->layers, every layer whole (ring n_ctx), head-major */
static int layers_new(kv_cache *kv) {
    kv->layers = calloc((size_t)kv->n_layer, sizeof *kv->layers);
    for (int l = 0; kv->layers && l < kv->n_layer; l++)
        kv->layers[l] = (kv_layer_rows){.ring = kv->n_ctx, .head_stride = (size_t)kv->n_ctx * kv->row_bytes,
                                        .slot_stride = kv->row_bytes, .stage_from = INT_MAX};
    return kv->layers != NULL;
}

subq_status kv_cache_init_windows(kv_cache *kv, int n_layer, int n_head_kv, int head_dim, int n_ctx,
                                  subq_kv_type type, const int *window, int n_batch, subq_error *err) {
    memset(kv, 0, sizeof *kv);
    if (n_ctx <= 0 || n_layer <= 0 || n_head_kv <= 0 || head_dim <= 0 || n_batch <= 0)
        return subq_fail(err, SUBQ_ERR_ARG, "invalid KV cache size (n_ctx %d)", n_ctx);
    subq_status s = kv_cache_check_type(type, head_dim, err);
    if (s) return s;
    /* refuse before allocating: malloc of more than the machine has may
     * succeed (overcommit) and the process be killed when it fills up */
    size_t need = kv_cache_bytes(n_layer, n_head_kv, head_dim, n_ctx, type, window, n_batch);
    const char *source;
    uint64_t avail = bigmem_available(&source);
    if ((uint64_t)need > avail)
        return subq_fail(err, SUBQ_ERR_NOMEM,
                         "the KV cache for %d tokens needs %zu bytes (%.2f GiB) but %llu bytes (%.2f GiB) are "
                         "available (%s); use a smaller context%s",
                         n_ctx, need, need / 1073741824.0, (unsigned long long)avail, avail / 1073741824.0, source,
                         type == SUBQ_KV_F32   ? " or an f16 or q8_0 KV cache"
                         : type == SUBQ_KV_F16 ? " or a q8_0 KV cache"
                                               : "");
    kv->n_layer = n_layer;
    kv->n_head_kv = n_head_kv;
    kv->head_dim = head_dim;
    kv->n_ctx = n_ctx;
    kv->type = type;
    kv->row_bytes = kernels_kv_row_bytes(type, head_dim);
    kv->k = calloc((size_t)n_layer, sizeof(void *));
    kv->v = calloc((size_t)n_layer, sizeof(void *));
    kv->pos = malloc(2 * (size_t)n_ctx * sizeof(int32_t));
    if (!kv->k || !kv->v || !kv->pos || !layers_new(kv)) goto nomem;
    kv->seg = kv->pos + n_ctx;
    for (int l = 0; l < n_layer; l++) {
        kv_layer_rows *L = &kv->layers[l];
        L->window = window && window[l] > 0 ? window[l] : 0;
        L->ring = kv_cache_ring_rows(n_ctx, L->window, n_batch);
        L->head_stride = (size_t)L->ring * kv->row_bytes;
        /* keys and values in one block, so that kv_cache_set_layout can
         * lay a layer out either way */
        if (!(kv->k[l] = bigmem_alloc(2 * (size_t)n_head_kv * L->head_stride))) goto nomem;
        kv->v[l] = (char *)kv->k[l] + (size_t)n_head_kv * L->head_stride;
    }
    return SUBQ_OK;
nomem:
    kv_cache_free(kv);
    return subq_fail(err, SUBQ_ERR_NOMEM, "cannot allocate the KV cache (%zu bytes, %.2f GiB); use a smaller context",
                     need, need / 1073741824.0);
}

subq_status kv_cache_init(kv_cache *kv, int n_layer, int n_head_kv, int head_dim, int n_ctx, subq_kv_type type,
                          subq_error *err) {
    return kv_cache_init_windows(kv, n_layer, n_head_kv, head_dim, n_ctx, type, NULL, 1, err);
}

subq_status kv_cache_init_file(kv_cache *kv, kv_file *f, subq_error *err) {
    const kv_file_geometry *g = kv_file_geom(f);
    memset(kv, 0, sizeof *kv);
    kv->n_layer = (int)g->n_layer;
    kv->n_head_kv = (int)g->n_head_kv;
    kv->head_dim = (int)g->head_dim;
    kv->n_ctx = (int)g->n_ctx;
    kv->type = (subq_kv_type)g->kv_type;
    kv->row_bytes = (size_t)g->row_bytes;
    kv->file = f;
    kv->k = calloc((size_t)kv->n_layer, sizeof(void *));
    kv->v = calloc((size_t)kv->n_layer, sizeof(void *));
    kv->pos = kv_file_pos(f);
    kv->seg = kv_file_seg(f);
    kv->store_buf = malloc(KV_STORE_SLOTS * 2 * (size_t)kv->n_head_kv * kv->row_bytes);
    if (!kv->k || !kv->v || !kv->store_buf || !layers_new(kv)) {
        kv_cache_free(kv);
        return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    }
    kv_cache_file_layout(kv);
    return SUBQ_OK;
}

void kv_cache_file_layout(kv_cache *kv) {
    for (int l = 0; l < kv->n_layer; l++) {
        kv->layers[l].stage_from = INT_MAX, kv->layers[l].stage_n = 0;
        kv->k[l] = kv_file_keys(kv->file, l);
        kv->v[l] = kv_file_values(kv->file, l);
        kv_file_strides(kv->file, l, &kv->layers[l].head_stride, &kv->layers[l].slot_stride);
    }
}

void kv_cache_set_layout(kv_cache *kv, const unsigned char *head_major) {
    if (kv->file) return;
    const size_t rows = (size_t)kv->n_head_kv * kv->row_bytes; /* a slot's rows of one kind */
    for (int l = 0; l < kv->n_layer; l++) {
        kv_layer_rows *L = &kv->layers[l];
        L->head_stride = head_major[l] ? (size_t)L->ring * kv->row_bytes : kv->row_bytes;
        L->slot_stride = head_major[l] ? kv->row_bytes : 2 * rows;
        kv->v[l] = (char *)kv->k[l] + (head_major[l] ? (size_t)L->ring * rows : rows);
    }
}

void kv_cache_free(kv_cache *kv) {
    if (!kv->file) {
        for (int l = 0; kv->k && l < kv->n_layer; l++) free(kv->k[l]); /* and v[l] */
        free(kv->pos); /* and seg */
    }
    free(kv->k);
    free(kv->v);
    for (int l = 0; kv->layers && l < kv->n_layer; l++) free(kv->layers[l].stage);
    free(kv->layers);
    free(kv->store_buf);
    kv_file_close(kv->file);
    memset(kv, 0, sizeof *kv);
}

void kv_cache_prefetch(const kv_cache *kv, int layer, const int *slots, int n) {
    const uintptr_t page = 4096;
    /* slot-major rows (a file): a slot's key and value rows of every KV head
     * are one run of slot_stride bytes, so one advice per slot covers them */
    const int adjacent = kv_cache_rows_adjacent(kv, layer);
    const size_t span = adjacent ? kv->row_bytes : kv->layers[layer].slot_stride;
    const int n_head = adjacent ? kv->n_head_kv : 1, n_kind = adjacent ? 2 : 1;
    for (int h = 0; h < n_head; h++)
        for (int kind = 0; kind < n_kind; kind++) {
            uintptr_t last = 0;
            for (int i = 0; i < n; i++) {
                if (slots[i] < 0) continue;
                const char *row = kind ? kv_cache_value(kv, layer, h, slots[i]) : kv_cache_key(kv, layer, h, slots[i]);
                uintptr_t lo = (uintptr_t)row & ~(page - 1), hi = ((uintptr_t)row + span + page - 1) & ~(page - 1);
                if (lo == last) continue; /* neighbours (the tail) share pages */
                madvise((void *)lo, hi - lo, MADV_WILLNEED);
                last = lo;
            }
        }
}

void kv_cache_clear(kv_cache *kv) {
    kv->n_used = 0;
    for (int l = 0; l < kv->n_layer; l++) kv->layers[l].held_lo = 0, kv->layers[l].stage_from = INT_MAX;
}

int kv_cache_min_keep(const kv_cache *kv) {
    int min_keep = 0;
    for (int l = 0; l < kv->n_layer; l++) {
        /* the next query, at slot n, reads slots n - window + 1 .. n - 1 */
        const kv_layer_rows *L = &kv->layers[l];
        const int need = L->held_lo > 0 ? L->held_lo + L->window - 1 : 0;
        min_keep = need > min_keep ? need : min_keep;
    }
    return min_keep;
}

int kv_cache_doc_start(const kv_cache *kv, int slot) {
    const int32_t seg = kv->seg[slot];
    int lo = 0, hi = slot; /* the first slot with seg[] >= seg lies in [lo, hi] */
    while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        if (kv->seg[mid] < seg) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* one slot's key and value rows of every KV head from floats into k_dst,
 * v_dst (the head rows head_stride apart) */
static void store_slot(const kv_cache *kv, size_t head_stride, const float *k, const float *v, void *k_dst,
                       void *v_dst) {
    for (int h = 0; h < kv->n_head_kv; h++) {
        kernels_kv_from_f32(kv->type, k + h * kv->head_dim, (char *)k_dst + h * head_stride, kv->head_dim);
        kernels_kv_from_f32(kv->type, v + h * kv->head_dim, (char *)v_dst + h * head_stride, kv->head_dim);
    }
}

/* The staged rows of slots below `upto` written into the file (a head and
 * kind a run), then the stage emptied. */
static subq_status flush_layer(kv_cache *kv, int layer, int upto, subq_error *err) {
    kv_layer_rows *L = &kv->layers[layer];
    if (L->stage_from == INT_MAX) return SUBQ_OK;
    const int m = upto - L->stage_from < L->stage_n ? upto - L->stage_from : L->stage_n;
    subq_status s = SUBQ_OK;
    for (int r = 0; m > 0 && !s && r < 2 * kv->n_head_kv; r++) {
        const int values = r / kv->n_head_kv, h = r % kv->n_head_kv;
        s = kv_file_write(kv->file, kv_file_row(kv->file, layer, values, h, L->stage_from),
                          kv_cache_staged(kv, L, values, h, L->stage_from), (size_t)m * kv->row_bytes, err);
    }
    if (!s) L->stage_from = INT_MAX, L->stage_n = 0;
    return s;
}

subq_status kv_cache_flush(kv_cache *kv, subq_error *err) {
    subq_status s = SUBQ_OK;
    for (int l = 0; kv->file && !s && l < kv->n_layer; l++) s = flush_layer(kv, l, INT_MAX, err);
    return s;
}

/* Room in the stage for slots [slot0, slot0 + n): rows the stage holds
 * from slot0 on are written again; if the stage does not reach slot0 or
 * has no room, its rows below slot0 go to the file and a stage starts. */
static subq_status stage_for(kv_cache *kv, int layer, int slot0, int n, subq_error *err) {
    kv_layer_rows *L = &kv->layers[layer];
    if (!L->stage && !(L->stage = malloc(2 * (size_t)kv->n_head_kv * KV_STAGE_SLOTS * kv->row_bytes)))
        return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    if (L->stage_from != INT_MAX && slot0 >= L->stage_from && slot0 <= L->stage_from + L->stage_n &&
        slot0 + n <= L->stage_from + KV_STAGE_SLOTS)
        return SUBQ_OK;
    subq_status s = flush_layer(kv, layer, slot0, err);
    if (s) return s;
    /* from the multiple of KV_RUN_ALIGN at or below slot0, the rows before
     * slot0 copied in (the file holds them: written above or before) */
    const int from = slot0 / KV_RUN_ALIGN * KV_RUN_ALIGN;
    for (int r = 0; r < 2 * kv->n_head_kv; r++) {
        const int values = r / kv->n_head_kv, h = r % kv->n_head_kv;
        memcpy(L->stage + (size_t)r * KV_STAGE_SLOTS * kv->row_bytes, kv_file_row(kv->file, layer, values, h, from),
               (size_t)(slot0 - from) * kv->row_bytes);
    }
    L->stage_from = from, L->stage_n = slot0 - from;
    return SUBQ_OK;
}

subq_status kv_cache_store(kv_cache *kv, int layer, int slot0, int n, const float *k, const float *v,
                           subq_error *err) {
    const size_t row = (size_t)kv->n_head_kv * kv->head_dim;
    kv_layer_rows *L = &kv->layers[layer];
    if (kv_cache_is_ring(kv, layer) && n > L->ring - L->window + 1)
        return subq_fail(err, SUBQ_ERR_ARG, "%d slots at once overwrite the window of layer %d's %d-row ring", n, layer,
                         L->ring);
    const int head_major = kv_cache_rows_adjacent(kv, layer);
    subq_status s = SUBQ_OK;
    if (kv->file && head_major && n <= KV_FILE_SHORT_WRITE) s = stage_for(kv, layer, slot0, n, err);
    else if (kv->file) s = flush_layer(kv, layer, slot0, err);
    if (s) return s;
    if (!kv->file || slot0 >= L->stage_from) {
        /* into memory, or the stage: a head's rows KV_STAGE_SLOTS apart */
        const size_t head_stride = slot0 >= L->stage_from ? KV_STAGE_SLOTS * kv->row_bytes : L->head_stride;
        for (int t = 0; t < n; t++)
            store_slot(kv, head_stride, k + t * row, v + t * row, (void *)kv_cache_key(kv, layer, 0, slot0 + t),
                       (void *)kv_cache_value(kv, layer, 0, slot0 + t));
        if (slot0 >= L->stage_from) L->stage_n = slot0 + n - L->stage_from;
        /* slot s overwrote slot s - ring */
        if (slot0 + n - L->ring > L->held_lo) L->held_lo = slot0 + n - L->ring;
        return SUBQ_OK;
    }
    /* a file, slot-major: slots are adjacent runs of slot_stride bytes,
     * keys then values, written as one; head-major: m rows a head and kind
     * side by side in store_buf ([kind][head][m]), written head by head */
    const size_t v_off = (size_t)((const char *)kv_cache_value(kv, layer, 0, 0) -
                                  (const char *)kv_cache_key(kv, layer, 0, 0));
    for (int t0 = 0; t0 < n; t0 += KV_STORE_SLOTS) {
        const int m = n - t0 < KV_STORE_SLOTS ? n - t0 : KV_STORE_SLOTS;
        const size_t run = (size_t)m * kv->row_bytes, buf_head = head_major ? run : kv->row_bytes;
        for (int t = 0; t < m; t++) {
            unsigned char *dst = kv->store_buf + (size_t)t * (head_major ? kv->row_bytes : L->slot_stride);
            store_slot(kv, buf_head, k + (t0 + t) * row, v + (t0 + t) * row, dst,
                       dst + (head_major ? (size_t)kv->n_head_kv * run : v_off));
        }
        if (!head_major)
            s = kv_file_write(kv->file, kv_cache_key(kv, layer, 0, slot0 + t0), kv->store_buf,
                              (size_t)m * L->slot_stride, err);
        for (int r = 0; head_major && !s && r < 2 * kv->n_head_kv; r++)
            s = kv_file_write(kv->file, kv_cache_row(kv, layer, r % kv->n_head_kv, r / kv->n_head_kv, slot0 + t0),
                              kv->store_buf + (size_t)r * run, run, err);
        if (s) return s;
    }
    return SUBQ_OK;
}

/* the row of (layer, h, slot), writable where the cache is */
static void *row_at(const kv_cache *kv, int layer, int h, int values, int slot) {
    return (void *)kv_cache_row(kv, layer, h, values, slot);
}

/* Rows of adjacent slots lie in runs (kv_cache_run: a ring wraps); in a
 * slot-major file, every row on its own. */
void kv_cache_read_rows(const kv_cache *kv, int layer, int h, int values, int slot0, int n, void *dst) {
    for (int j = 0; j < n;) {
        const int m = kv_cache_rows_adjacent(kv, layer) ? kv_cache_run(kv, layer, slot0 + j, n - j) : 1;
        memcpy((char *)dst + (size_t)j * kv->row_bytes, row_at(kv, layer, h, values, slot0 + j), (size_t)m * kv->row_bytes);
        j += m;
    }
}

void kv_cache_write_rows(kv_cache *kv, int layer, int h, int values, int slot0, int n, const void *src) {
    for (int j = 0; j < n;) {
        const int m = kv_cache_rows_adjacent(kv, layer) ? kv_cache_run(kv, layer, slot0 + j, n - j) : 1;
        memcpy(row_at(kv, layer, h, values, slot0 + j), (const char *)src + (size_t)j * kv->row_bytes, (size_t)m * kv->row_bytes);
        j += m;
    }
}

const float *kv_cache_rows_f32(const kv_cache *kv, int layer, int h, int values, int slot0, int n, float *scratch) {
    if (!kv_cache_rows_f32_copied(kv, layer)) return kv_cache_row(kv, layer, h, values, slot0);
    for (int j = 0; j < n;) {
        const int m = kv_cache_rows_adjacent(kv, layer) ? kv_cache_run(kv, layer, slot0 + j, n - j) : 1;
        kv_cache_ops(kv)->to_f32(kv_cache_row(kv, layer, h, values, slot0 + j), m, kv->head_dim,
                                 scratch + (size_t)j * kv->head_dim);
        j += m;
    }
    return scratch;
}

void kv_cache_gather_dot(const kv_cache *kv, int layer, int h, const float *q, const int32_t *idx, int n, float *out) {
    const kernels_gather_dot_fn dot = kv_cache_ops(kv)->gather_dot;
    const kv_layer_rows *L = &kv->layers[layer];
    const void *base = (const char *)kv->k[layer] + kv_cache_row_offset(kv, layer, h, 0);
    const size_t stride = kv_cache_slot_stride_values(kv, layer);
    const int32_t first = 0;
    for (int i = 0; i < n;) {
        int m = 0;
        while (i + m < n && idx[i + m] < L->stage_from) m++;
        if (m) dot(q, base, stride, kv->head_dim, idx + i, m, out + i);
        else dot(q, kv_cache_key(kv, layer, h, idx[i]), stride, kv->head_dim, &first, 1, out + i), m = 1;
        i += m;
    }
}

void kv_cache_row_tensor(const kv_cache *kv, uint32_t *type, uint64_t *ne0) {
    static const uint32_t types[SUBQ_KV_TYPE_COUNT] = {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_Q8_0, GGML_TYPE_Q4_0};
    *type = types[kv->type];
    *ne0 = (uint64_t)kv->head_dim;
    if (ggml_row_size(*type, *ne0) != kv->row_bytes) { /* narrow quantised heads: no ggml type */
        *type = GGML_TYPE_I8;
        *ne0 = kv->row_bytes;
    }
}
