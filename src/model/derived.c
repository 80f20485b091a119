/* Layer lists and model fingerprints of files derived from a model (derived.h). */
#include "model/derived.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/fingerprint.h"

static int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

subq_status derived_sort_layers(const int *layers, int n, int n_layer, const char *what, int *out, subq_error *err) {
    memcpy(out, layers, (size_t)n * sizeof(int));
    qsort(out, (size_t)n, sizeof(int), cmp_int);
    for (int i = 0; i < n; i++)
        if (out[i] < 0 || out[i] >= n_layer || (i > 0 && out[i] == out[i - 1]))
            return subq_fail(err, SUBQ_ERR_ARG, "%s layer %d is out of range or repeated (model has %d layers)", what,
                             out[i], n_layer);
    return SUBQ_OK;
}

_Static_assert(sizeof(int) == sizeof(int32_t), "layer lists are written as int32 as they are");

subq_status derived_write_ident(gguf_writer *w, const char *prefix, const int *layers, int n, uint64_t fp) {
    char key[96], hex[17];
    snprintf(key, sizeof key, "%s.layers", prefix);
    subq_status s = gguf_writer_set_arr(w, key, GGUF_TYPE_INT32, layers, (uint64_t)n);
    fingerprint_hex(fp, hex);
    snprintf(key, sizeof key, "%s.model_fingerprint", prefix);
    return s ? s : gguf_writer_set_str(w, key, hex);
}

subq_status derived_read_ident(const gguf_file *f, const char *path, const char *prefix, const gguf_value **layers,
                               uint64_t *fp, subq_error *err) {
    char lkey[96], fkey[96], hex[32];
    subq_error e2 = {0};
    snprintf(lkey, sizeof lkey, "%s.layers", prefix);
    snprintf(fkey, sizeof fkey, "%s.model_fingerprint", prefix);
    if (gguf_get_arr(f, lkey, GGUF_TYPE_INT32, layers, &e2) || gguf_get_str(f, fkey, hex, sizeof hex, &e2))
        return subq_fail(err, SUBQ_ERR_FORMAT, "%s: %s", path, e2.msg);
    if (!fingerprint_parse(hex, fp))
        return subq_fail(err, SUBQ_ERR_FORMAT, "%s: %s '%s' is not 16 hex digits", path, fkey, hex);
    return SUBQ_OK;
}

subq_status derived_check_count(const gguf_value *layers, uint32_t n_layer, const char *path, const char *prefix,
                                subq_error *err) {
    const uint64_t n = layers->v.arr.n;
    if (n_layer == 0 || n_layer > 4096 || n == 0 || n > n_layer)
        return subq_fail(err, SUBQ_ERR_FORMAT, "%s: %s.layers has %" PRIu64 " entries for a %u-layer model", path,
                         prefix, n, n_layer);
    return SUBQ_OK;
}

subq_status derived_layer(const gguf_value *layers, uint64_t i, uint32_t n_layer, const char *path, const char *prefix,
                          int *layer, subq_error *err) {
    const int64_t l = gguf_arr_get_i64(layers, i);
    if (l < 0 || l >= (int64_t)n_layer)
        return subq_fail(err, SUBQ_ERR_FORMAT, "%s: layer %" PRId64 " in %s.layers is outside 0..%u", path, l, prefix,
                         n_layer - 1);
    *layer = (int)l;
    return SUBQ_OK;
}

subq_status derived_check_model(const char *path, uint64_t fp, const subq_model *m, const char *them,
                                subq_error *err) {
    const uint64_t mine = model_fingerprint(m);
    if (fp == mine) return SUBQ_OK;
    char a[17], b[17];
    fingerprint_hex(fp, a);
    fingerprint_hex(mine, b);
    return subq_fail(err, SUBQ_ERR_MISMATCH,
                     "%s was trained for another model (fingerprint %s, this model %s); train %s again for this model",
                     path, a, b, them);
}
