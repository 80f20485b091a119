/* libFuzzer target for the GGUF reader: parse, then touch everything the
 * parser hands out (every string byte, nested arrays, the first and last
 * byte of each tensor's data) so ASan sees any pointer that escapes the
 * buffer. */
#include "gguf/gguf.h"

#include <stdint.h>
#include <string.h>

static unsigned touch_value(const gguf_value *v, int depth) {
    unsigned acc = 0;
    if (depth > 16) __builtin_trap(); /* the reader limits nesting to 8 */
    switch (v->type) {
    case GGUF_TYPE_STRING:
        for (uint64_t i = 0; i < v->v.str.len; i++) acc += (unsigned char)v->v.str.data[i];
        break;
    case GGUF_TYPE_ARRAY:
        if (v->v.arr.items) {
            for (uint64_t i = 0; i < v->v.arr.n; i++) {
                if (v->v.arr.items[i].type != v->v.arr.elem_type) __builtin_trap();
                acc += touch_value(&v->v.arr.items[i], depth + 1);
            }
        } else if (v->v.arr.n > 0) {
            if (v->v.arr.elem_type == GGUF_TYPE_STRING || v->v.arr.elem_type == GGUF_TYPE_ARRAY)
                __builtin_trap(); /* non-empty string/array arrays must have items */
            acc += (unsigned)gguf_arr_get_i64(v, 0) + (unsigned)gguf_arr_get_i64(v, v->v.arr.n - 1);
            acc += gguf_arr_get_f64(v, v->v.arr.n - 1) > 0.0; /* a float->int cast could be UB */
        }
        break;
    default: acc += (unsigned)v->v.u64; break;
    }
    return acc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gguf_file *f = NULL;
    subq_error err;
    volatile unsigned sink = 0;
    char buf[64];
    uint32_t u;
    float fl;
    bool b;
    const gguf_value *arr;

    if (gguf_open_memory(data, size, &f, &err) != SUBQ_OK) {
        /* Error messages must be one non-empty line. */
        if (err.msg[0] == '\0' || strchr(err.msg, '\n') || f != NULL) __builtin_trap();
        return 0;
    }
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const gguf_kv *kv = &f->kv[i];
        if (kv->key.len == 0) __builtin_trap();
        for (uint64_t k = 0; k < kv->key.len; k++) sink += (unsigned char)kv->key.data[k];
        sink += touch_value(&kv->value, 0);
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        const uint8_t *p = t->data;
        if (t->n_bytes == 0 || p < f->base || t->n_bytes > f->size ||
            (size_t)(p - f->base) > f->size - t->n_bytes)
            __builtin_trap();
        sink += p[0] + p[t->n_bytes - 1];
        sink += (unsigned)strlen(t->name);
        if (gguf_find_tensor(f, t->name) != t) __builtin_trap(); /* names are unique */
    }
    /* Getters on keys a model loader asks for. */
    gguf_get_u32(f, "llama.block_count", &u, &err);
    gguf_get_u32_or(f, "general.alignment", 0, &u, &err);
    gguf_get_f32_or(f, "llama.attention.layer_norm_rms_epsilon", 0, &fl, &err);
    gguf_get_bool_or(f, "tokenizer.ggml.add_bos_token", 0, &b, &err);
    gguf_get_str(f, "general.architecture", buf, sizeof buf, &err);
    if (gguf_get_arr(f, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, &arr, &err) == SUBQ_OK)
        sink += (unsigned)arr->v.arr.n;
    (void)sink;
    gguf_close(f);
    return 0;
}
