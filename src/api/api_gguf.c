/* Read-only inspection of any GGUF file through the public API (subq info). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "gguf/gguf.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "quant/types.h"
#include "subq.h"

struct subq_gguf {
    gguf_file *f;
};

subq_status subq_gguf_open(const char *path, subq_gguf **out, subq_error *err) {
    *out = NULL;
    gguf_file *f;
    subq_status s = gguf_open(path, &f, err);
    if (s) return s;
    if (!(*out = malloc(sizeof **out))) {
        gguf_close(f);
        return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    }
    (*out)->f = f;
    return SUBQ_OK;
}

void subq_gguf_close(subq_gguf *g) {
    if (!g) return;
    gguf_close(g->f);
    free(g);
}

void subq_gguf_get_header(const subq_gguf *g, subq_gguf_header *h) {
    const gguf_file *f = g->f;
    h->version = f->version;
    h->n_kv = f->n_kv;
    h->n_tensors = f->n_tensors;
    h->alignment = f->alignment;
    h->tensor_bytes = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) h->tensor_bytes += f->tensors[i].n_bytes;
}

/* A scalar value, or an array's element type and count. */
static void describe(const gguf_value *v, subq_value *out) {
    memset(out, 0, sizeof *out);
    out->type_name = gguf_type_name(v->type);
    switch (v->type) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_UINT16: case GGUF_TYPE_UINT32: case GGUF_TYPE_UINT64:
        out->kind = SUBQ_VALUE_UINT, out->u = v->v.u64;
        break;
    case GGUF_TYPE_INT8: case GGUF_TYPE_INT16: case GGUF_TYPE_INT32: case GGUF_TYPE_INT64:
        out->kind = SUBQ_VALUE_INT, out->i = v->v.i64;
        break;
    case GGUF_TYPE_FLOAT32: case GGUF_TYPE_FLOAT64:
        out->kind = SUBQ_VALUE_FLOAT, out->f = v->v.f64;
        break;
    case GGUF_TYPE_BOOL:
        out->kind = SUBQ_VALUE_BOOL, out->u = v->v.b;
        break;
    case GGUF_TYPE_STRING:
        out->kind = SUBQ_VALUE_STRING, out->str = v->v.str.data, out->str_len = (size_t)v->v.str.len;
        break;
    default:
        out->kind = SUBQ_VALUE_ARRAY, out->elem_type = gguf_type_name(v->v.arr.elem_type), out->n = v->v.arr.n;
        break;
    }
}

subq_status subq_gguf_kv(const subq_gguf *g, uint64_t i, const char **key, size_t *key_len, subq_value *v,
                         subq_error *err) {
    if (i >= g->f->n_kv)
        return subq_fail(err, SUBQ_ERR_RANGE, "metadata index %llu out of range (%llu keys)", (unsigned long long)i,
                         (unsigned long long)g->f->n_kv);
    const gguf_kv *kv = &g->f->kv[i];
    *key = kv->key.data;
    *key_len = (size_t)kv->key.len;
    describe(&kv->value, v);
    return SUBQ_OK;
}

subq_status subq_gguf_kv_item(const subq_gguf *g, uint64_t i, uint64_t j, subq_value *v, subq_error *err) {
    if (i >= g->f->n_kv)
        return subq_fail(err, SUBQ_ERR_RANGE, "metadata index %llu out of range", (unsigned long long)i);
    const gguf_value *a = &g->f->kv[i].value;
    if (a->type != GGUF_TYPE_ARRAY || j >= a->v.arr.n)
        return subq_fail(err, SUBQ_ERR_RANGE, "metadata %llu has no element %llu", (unsigned long long)i,
                         (unsigned long long)j);
    if (a->v.arr.items) { /* strings and nested arrays are parsed values */
        describe(&a->v.arr.items[j], v);
        return SUBQ_OK;
    }
    gguf_value e = {.type = a->v.arr.elem_type};
    switch (a->v.arr.elem_type) {
    case GGUF_TYPE_FLOAT32: case GGUF_TYPE_FLOAT64:
        e.v.f64 = gguf_arr_get_f64(a, j);
        break;
    case GGUF_TYPE_BOOL:
        e.v.b = gguf_arr_get_i64(a, j) != 0;
        break;
    case GGUF_TYPE_UINT8: case GGUF_TYPE_UINT16: case GGUF_TYPE_UINT32: case GGUF_TYPE_UINT64:
        e.v.u64 = (uint64_t)gguf_arr_get_i64(a, j);
        break;
    default:
        e.v.i64 = gguf_arr_get_i64(a, j);
        break;
    }
    describe(&e, v);
    return SUBQ_OK;
}

subq_status subq_gguf_tensor_info(const subq_gguf *g, uint64_t i, subq_gguf_tensor *t, subq_error *err) {
    if (i >= g->f->n_tensors)
        return subq_fail(err, SUBQ_ERR_RANGE, "tensor index %llu out of range (%llu tensors)", (unsigned long long)i,
                         (unsigned long long)g->f->n_tensors);
    const gguf_tensor *gt = &g->f->tensors[i];
    const ggml_type_traits *tr = ggml_type_get(gt->type);
    t->name = gt->name;
    t->type_name = tr ? tr->name : "?";
    t->n_dims = gt->n_dims;
    for (int d = 0; d < 4; d++) t->ne[d] = gt->ne[d];
    t->offset = gt->offset;
    t->n_bytes = gt->n_bytes;
    return SUBQ_OK;
}

/* For a model with sliding layers, appends what their rings save: the f16
 * KV cache at the trained context, in rings and with every slot kept. */
static void describe_rings(const model_hparams *hp, char *buf, size_t cap) {
    int *window = malloc((size_t)hp->n_layer * sizeof(int)), any = 0;
    for (int l = 0; window && l < hp->n_layer; l++) any |= (window[l] = hp->layer[l].window) > 0;
    const size_t o = strlen(buf);
    if (any && o < cap) {
        const int n = hp->n_ctx_train, b = subq_context_default_params().n_batch;
        const size_t ring = kv_cache_bytes(hp->n_layer, hp->n_head_kv, hp->head_dim, n, SUBQ_KV_F16, window, b);
        const size_t full = kv_cache_bytes(hp->n_layer, hp->n_head_kv, hp->head_dim, n, SUBQ_KV_F16, NULL, b);
        if (ring != SIZE_MAX && full != SIZE_MAX)
            snprintf(buf + o, cap - o, "; f16 KV cache at %d tokens %.1f MiB, sliding layers in rings (%.1f MiB "
                     "with --swa-full)", n, ring / 1048576.0, full / 1048576.0);
    }
    free(window);
}

/* describe(hp) into buf for a model file of a known architecture (1), "cannot
 * run: REASON" when its hyper-parameters are refused (1), else 0 */
static int describe_model(const subq_gguf *g, int layers, char *buf, size_t cap) {
    char arch[32];
    subq_error err = {0};
    if (gguf_get_str(g->f, "general.architecture", arch, sizeof arch, &err)) return 0;
    if (!arch_by_name(arch)) return 0;
    model_hparams hp;
    if (model_hparams_load(g->f, &hp, &err)) snprintf(buf, cap, "cannot run: %.480s", err.msg);
    else if (layers) {
        model_describe_layers(&hp, buf, cap);
        describe_rings(&hp, buf, cap);
    } else {
        rope_describe(&hp.rope, buf, cap);
        const size_t o = strlen(buf);
        if (hp.rope.freq_long && o < cap) /* what a context of the default size (the model's) takes */
            snprintf(buf + o, cap - o, "; the default context (%d tokens) takes the %s ones", hp.n_ctx_train,
                     rope_freq_for(&hp.rope, hp.n_ctx_train) == hp.rope.freq_long ? "long" : "short");
    }
    model_hparams_free(&hp);
    return 1;
}

int subq_gguf_describe_rope(const subq_gguf *g, char *buf, size_t cap) { return describe_model(g, 0, buf, cap); }

int subq_gguf_describe_attention(const subq_gguf *g, char *buf, size_t cap) { return describe_model(g, 1, buf, cap); }
