/* Public tools: random-weight models of real shapes, and dequantising raw
 * blocks (a test hook for reference implementations). */
#include <string.h>
#include <strings.h>

#include "base/error.h"
#include "lab/synth.h"
#include "kernels/kernels.h"
#include "subq_lab.h"

/* Element type id of a name ("q8_0", "Q8_0", ...); GGML_TYPE_COUNT when unknown. */
static uint32_t type_by_name(const char *name) {
    for (uint32_t t = 0; name && t < GGML_TYPE_COUNT; t++) {
        const ggml_type_traits *tr = ggml_type_get(t);
        if (tr && !strcasecmp(tr->name, name)) return t;
    }
    return GGML_TYPE_COUNT;
}

const char *subq_synth_shapes(void) { return synth_shape_names(); }

subq_status subq_synth_model(const char *shape, const char *type, uint64_t seed, const char *path,
                             subq_error *err) {
    const synth_shape *sh = synth_find_shape(shape);
    if (!sh) return subq_fail(err, SUBQ_ERR_ARG, "unknown shape '%s' (known: %s)", shape, synth_shape_names());
    uint32_t t = type_by_name(type);
    if (t == GGML_TYPE_COUNT)
        return subq_fail(err, SUBQ_ERR_ARG, "unknown type '%s' (try f32, f16, bf16, q8_0, q4_0, q4_K, q5_K, q6_K)",
                         type);
    return synth_write_model(sh, t, seed, path, err);
}

subq_status subq_dequantize(const char *type, const void *src, size_t n_bytes, int portable, float *dst,
                            size_t cap, size_t *n_out, subq_error *err) {
    *n_out = 0;
    uint32_t t = type_by_name(type);
    const ggml_type_traits *tr = ggml_type_get(t);
    if (!tr) return subq_fail(err, SUBQ_ERR_ARG, "unknown type '%s'", type);
    const kernels *k = portable ? kernels_scalar() : kernels_get();
    if (!tr->can_dequant || !k->dequant[t])
        return subq_fail(err, SUBQ_ERR_UNSUPPORTED, "type %s cannot be dequantised yet", tr->name);
    if (n_bytes % (size_t)tr->type_size)
        return subq_fail(err, SUBQ_ERR_SHAPE, "%zu bytes are not a whole number of %s blocks (%d bytes each)", n_bytes,
                         tr->name, tr->type_size);
    size_t n = n_bytes / (size_t)tr->type_size * (size_t)tr->block_size;
    *n_out = n;
    if (n > cap) return subq_fail(err, SUBQ_ERR_RANGE, "%zu elements do not fit in %zu floats", n, cap);
    if (n) k->dequant[t](src, dst, (int64_t)n);
    return SUBQ_OK;
}
