/* The list of supported architectures and what their units share. */
#include "model/arch.h"

#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "model/model.h"

static const arch_desc *const all[] = {&arch_llama, &arch_qwen2, &arch_qwen3, &arch_gemma2,
                                        &arch_gemma3, &arch_phi3, &arch_smollm3};
_Static_assert(sizeof all / sizeof all[0] == ARCH_COUNT, "one unit per model_arch");

const arch_desc *arch_by_name(const char *name) {
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (!strcmp(all[i]->name, name)) return all[i];
    return NULL;
}

const arch_desc *arch_by_id(int id) {
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i]->id == id) return all[i];
    return NULL;
}

const char *arch_names(void) { return "llama, qwen2, qwen3, gemma2, gemma3, phi3, smollm3"; }

subq_status arch_sliding_window(const gguf_file *f, const char *arch, int def, int *window, subq_error *err) {
    char key[96];
    uint32_t w;
    snprintf(key, sizeof key, "%s.attention.sliding_window", arch);
    subq_status s = gguf_get_u32_or(f, key, (uint32_t)def, &w, err);
    if (s) return s;
    if (w > (1u << 24)) return subq_fail(err, SUBQ_ERR_FORMAT, "%s = %u is out of range [0, %u]", key, w, 1u << 24);
    *window = (int)w;
    return SUBQ_OK;
}

void arch_slide_pattern(model_hparams *hp, int window, int period) {
    for (int l = 0; l < hp->n_layer; l++)
        if (l % period < period - 1) hp->layer[l].window = window;
}

subq_status arch_slide_layers(const gguf_file *f, const char *arch, model_hparams *hp, int window, int period,
                              subq_error *err) {
    char key[96];
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", arch);
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) {
        arch_slide_pattern(hp, window, period);
        return SUBQ_OK;
    }
    const gguf_value *v = &kv->value;
    if (v->type == GGUF_TYPE_ARRAY) { /* one flag per layer, nonzero: sliding */
        const gguf_type t = v->v.arr.elem_type;
        const int integral = t == GGUF_TYPE_BOOL || (t >= GGUF_TYPE_UINT8 && t <= GGUF_TYPE_INT32) ||
                             t == GGUF_TYPE_UINT64 || t == GGUF_TYPE_INT64;
        if (!integral || v->v.arr.n != (uint64_t)hp->n_layer)
            return subq_fail(err, SUBQ_ERR_FORMAT, "%s must be a period or one flag per layer (%d)", key, hp->n_layer);
        for (int l = 0; l < hp->n_layer; l++)
            if (gguf_arr_get_i64(v, (uint64_t)l)) hp->layer[l].window = window;
        return SUBQ_OK;
    }
    uint32_t p;
    subq_status s = gguf_get_u32(f, key, &p, err);
    if (s) return s;
    if (p < 1 || p > 4096) return subq_fail(err, SUBQ_ERR_FORMAT, "%s = %u is out of range [1, 4096]", key, p);
    arch_slide_pattern(hp, window, (int)p);
    return SUBQ_OK;
}
