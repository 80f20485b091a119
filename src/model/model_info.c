/* What a caller may ask of a loaded model: its shape, its size, its
 * fingerprint and any metadata value as text. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "model/model.h"

/* Bytes one decode step reads from the weights: every tensor once, except
 * the embedding, of which one row is read (unless it is also the output). */
static uint64_t decode_bytes(const subq_model *m) {
    uint64_t b = m->weight_bytes;
    if (m->output.data != m->token_embd.data) b -= (uint64_t)m->token_embd.row_bytes * (uint64_t)m->token_embd.rows;
    return b + m->token_embd.row_bytes;
}

static uint64_t matmul_params(const subq_model *m) {
    uint64_t n = (uint64_t)m->output.rows * (uint64_t)m->output.cols;
    for (int l = 0; l < m->hp.n_layer; l++) {
        const layer_weights *L = &m->layers[l];
        const matrix *mats[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (int j = 0; j < 7; j++) n += (uint64_t)mats[j]->rows * (uint64_t)mats[j]->cols;
    }
    return n;
}

void subq_model_get_info(const subq_model *m, subq_model_info *info) {
    const model_hparams *hp = &m->hp;
    memset(info, 0, sizeof *info);
    snprintf(info->arch, sizeof info->arch, "%s", model_arch_name(hp->arch));
    info->n_layer = hp->n_layer;
    info->n_embd = hp->n_embd;
    info->n_head = hp->n_head;
    info->n_head_kv = hp->n_head_kv;
    info->head_dim = hp->head_dim;
    info->n_ff = hp->n_ff;
    info->n_vocab = hp->n_vocab;
    info->n_ctx_train = hp->n_ctx_train;
    info->rope_base = hp->rope.base;
    info->norm_eps = hp->norm_eps;
    info->bos_id = tokenizer_bos(m->tok);
    info->eos_id = tokenizer_eos(m->tok);
    info->add_bos = tokenizer_add_bos(m->tok);
    info->n_params = m->n_params;
    info->weight_bytes = m->weight_bytes;
    info->decode_bytes = decode_bytes(m);
    info->matmul_params = matmul_params(m);
    info->fingerprint = model_fingerprint(m);
}

subq_status subq_model_meta(const subq_model *m, const char *key, char *buf, size_t cap, size_t *len,
                            subq_error *err) {
    const gguf_kv *kv = gguf_find_kv(m->file, key);
    if (!kv) return subq_fail(err, SUBQ_ERR_RANGE, "the model has no metadata key '%s'", key);
    const gguf_value *v = &kv->value;
    char num[64];
    const char *text = num;
    size_t n;
    switch (v->type) {
    case GGUF_TYPE_STRING:
        text = v->v.str.data;
        n = (size_t)v->v.str.len;
        break;
    case GGUF_TYPE_UINT8: case GGUF_TYPE_UINT16: case GGUF_TYPE_UINT32: case GGUF_TYPE_UINT64:
        n = (size_t)snprintf(num, sizeof num, "%" PRIu64, v->v.u64);
        break;
    case GGUF_TYPE_INT8: case GGUF_TYPE_INT16: case GGUF_TYPE_INT32: case GGUF_TYPE_INT64:
        n = (size_t)snprintf(num, sizeof num, "%" PRId64, v->v.i64);
        break;
    case GGUF_TYPE_FLOAT32: case GGUF_TYPE_FLOAT64:
        n = (size_t)snprintf(num, sizeof num, "%.9g", v->v.f64);
        break;
    case GGUF_TYPE_BOOL:
        n = (size_t)snprintf(num, sizeof num, "%s", v->v.b ? "true" : "false");
        break;
    default:
        return subq_fail(err, SUBQ_ERR_UNSUPPORTED, "metadata key '%s' holds an array", key);
    }
    if (len) *len = n;
    if (cap > 0) {
        size_t c = n < cap - 1 ? n : cap - 1;
        memcpy(buf, text, c);
        buf[c] = '\0';
    }
    return SUBQ_OK;
}
