#include "kv/kv_cache.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "kernels/kernels.h"

size_t kv_cache_bytes(int n_layer, int n_head_kv, int head_dim, int n_ctx, subq_kv_type type) {
    size_t es = type == SUBQ_KV_F16 ? 2 : 4;
    return 2 * (size_t)n_layer * (size_t)n_head_kv * (size_t)n_ctx * (size_t)head_dim * es +
           2 * (size_t)n_ctx * sizeof(int32_t);
}

subq_status kv_cache_init(kv_cache *kv, int n_layer, int n_head_kv, int head_dim, int n_ctx,
                          subq_kv_type type, subq_error *err) {
    memset(kv, 0, sizeof *kv);
    if (n_ctx <= 0 || n_layer <= 0 || n_head_kv <= 0 || head_dim <= 0)
        return subq_fail(err, SUBQ_ERR_ARG, "invalid KV cache size (n_ctx %d)", n_ctx);
    size_t need = kv_cache_bytes(n_layer, n_head_kv, head_dim, n_ctx, type);
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0 && need > (size_t)pages * (size_t)page)
        return subq_fail(err, SUBQ_ERR_NOMEM,
                         "KV cache for %d tokens needs %.1f GiB, more than this machine's memory (%.1f GiB); "
                         "use a smaller -c or --kv f16",
                         n_ctx, need / 1073741824.0, (double)pages * (double)page / 1073741824.0);
    kv->n_layer = n_layer;
    kv->n_head_kv = n_head_kv;
    kv->head_dim = head_dim;
    kv->n_ctx = n_ctx;
    kv->type = type;
    kv->elem_size = type == SUBQ_KV_F16 ? 2 : 4;
    size_t per_layer = (size_t)n_head_kv * (size_t)n_ctx * (size_t)head_dim * kv->elem_size;
    kv->k = calloc((size_t)n_layer, sizeof(void *));
    kv->v = calloc((size_t)n_layer, sizeof(void *));
    kv->pos = malloc((size_t)n_ctx * sizeof(int32_t));
    kv->seg = malloc((size_t)n_ctx * sizeof(int32_t));
    if (!kv->k || !kv->v || !kv->pos || !kv->seg) goto nomem;
    for (int l = 0; l < n_layer; l++) {
        kv->k[l] = malloc(per_layer);
        kv->v[l] = malloc(per_layer);
        if (!kv->k[l] || !kv->v[l]) goto nomem;
    }
    return SUBQ_OK;
nomem:
    kv_cache_free(kv);
    return subq_fail(err, SUBQ_ERR_NOMEM, "cannot allocate the KV cache (%.1f GiB); use a smaller -c",
                     need / 1073741824.0);
}

void kv_cache_free(kv_cache *kv) {
    for (int l = 0; kv->k && l < kv->n_layer; l++) free(kv->k[l]);
    for (int l = 0; kv->v && l < kv->n_layer; l++) free(kv->v[l]);
    free(kv->k);
    free(kv->v);
    free(kv->pos);
    free(kv->seg);
    memset(kv, 0, sizeof *kv);
}

static void store_row(const kv_cache *kv, void *dst, const float *src) {
    if (kv->type == SUBQ_KV_F16) {
        uint16_t *d = dst;
        for (int i = 0; i < kv->head_dim; i++) d[i] = fp32_to_fp16(src[i]);
    } else {
        memcpy(dst, src, (size_t)kv->head_dim * sizeof(float));
    }
}

void kv_cache_store(kv_cache *kv, int layer, int slot0, int n, const float *k, const float *v) {
    int row = kv->n_head_kv * kv->head_dim;
    for (int t = 0; t < n; t++) {
        for (int h = 0; h < kv->n_head_kv; h++) {
            store_row(kv, (void *)kv_cache_key(kv, layer, h, slot0 + t), k + (size_t)t * row + h * kv->head_dim);
            store_row(kv, (void *)kv_cache_value(kv, layer, h, slot0 + t), v + (size_t)t * row + h * kv->head_dim);
        }
    }
}

void kv_cache_row_f32(const kv_cache *kv, const void *row, float *dst) {
    if (kv->type == SUBQ_KV_F32) memcpy(dst, row, (size_t)kv->head_dim * sizeof(float));
    else dequant_row(GGML_TYPE_F16, row, dst, kv->head_dim);
}
