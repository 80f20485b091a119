/* Load hyper-parameters and weights from a GGUF file, validating every shape. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/bigmem.h"
#include "base/error.h"
#include "kernels/kernels.h"
#include "model/model.h"

const char *model_arch_name(model_arch a) {
    const arch_desc *d = arch_by_id((int)a);
    return d ? d->name : "?";
}

static const char *supported_types = "f32, f16, bf16, q8_0, q4_0, q4_K, q5_K, q6_K";

/* Look up tensor `name` and check it is 2-D {cols, rows} of a usable type. */
static subq_status load_matrix(subq_model *m, const char *name, int64_t cols, int64_t rows, matrix *out,
                               subq_error *err) {
    const gguf_tensor *t = gguf_find_tensor(m->file, name);
    if (!t) return subq_fail(err, SUBQ_ERR_FORMAT, "missing tensor '%s'", name);
    if (t->n_dims != 2 || (int64_t)t->ne[0] != cols || (int64_t)t->ne[1] != rows)
        return subq_fail(err, SUBQ_ERR_SHAPE, "tensor '%s' has shape [%llu, %llu], expected [%lld, %lld]",
                         name, (unsigned long long)t->ne[0], (unsigned long long)(t->n_dims > 1 ? t->ne[1] : 1),
                         (long long)cols, (long long)rows);
    const ggml_type_traits *tr = ggml_type_get(t->type);
    if (!tr || !tr->can_dequant)
        return subq_fail(err, SUBQ_ERR_UNSUPPORTED,
                         "tensor '%s' has type %s, which this build cannot use yet (supported: %s)", name,
                         tr ? tr->name : "unknown", supported_types);
    out->data = t->data;
    out->type = t->type;
    out->rows = rows;
    out->cols = cols;
    out->row_bytes = ggml_row_size(t->type, (uint64_t)cols);
    m->n_params += (uint64_t)(rows * cols);
    m->weight_bytes += t->n_bytes;
    return SUBQ_OK;
}

/* A 1-D tensor of n elements, copied to a new f32 array (*out). Absent and
 * optional: *out = NULL. */
static subq_status load_vector(subq_model *m, const char *name, int64_t n, int optional, float **out,
                               subq_error *err) {
    *out = NULL;
    const gguf_tensor *t = gguf_find_tensor(m->file, name);
    if (!t) {
        if (optional) return SUBQ_OK;
        return subq_fail(err, SUBQ_ERR_FORMAT, "missing tensor '%s'", name);
    }
    if (t->n_dims != 1 || (int64_t)t->ne[0] != n)
        return subq_fail(err, SUBQ_ERR_SHAPE, "tensor '%s' has %llu elements in %u dims, expected [%lld]",
                         name, (unsigned long long)t->n_elements, t->n_dims, (long long)n);
    const ggml_type_traits *tr = ggml_type_get(t->type);
    if (!tr || !tr->can_dequant || tr->block_size != 1)
        return subq_fail(err, SUBQ_ERR_UNSUPPORTED, "tensor '%s' has type %s; expected f32, f16 or bf16",
                         name, tr ? tr->name : "unknown");
    *out = malloc((size_t)n * sizeof(float));
    if (!*out) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory loading '%s'", name);
    dequant_row(t->type, t->data, *out, n);
    m->n_params += (uint64_t)n;
    m->weight_bytes += t->n_bytes;
    return SUBQ_OK;
}

static subq_status get_hparam(const gguf_file *f, const char *arch, const char *suffix, int optional,
                              uint32_t def, int lo, int hi, int *out, subq_error *err) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    uint32_t v;
    subq_status s = optional ? gguf_get_u32_or(f, key, def, &v, err) : gguf_get_u32(f, key, &v, err);
    if (s) return s;
    if ((int64_t)v < lo || (int64_t)v > hi)
        return subq_fail(err, SUBQ_ERR_FORMAT, "%s = %u is out of range [%d, %d]", key, v, lo, hi);
    *out = (int)v;
    return SUBQ_OK;
}

subq_status model_hparams_load(const gguf_file *f, model_hparams *hp, subq_error *err) {
    memset(hp, 0, sizeof *hp);
    char arch[32];
    subq_status s = gguf_get_str(f, "general.architecture", arch, sizeof arch, err);
    if (s) return s;
    if (!(hp->desc = arch_by_name(arch)))
        return subq_fail(err, SUBQ_ERR_UNSUPPORTED, "architecture '%s' is not supported (supported: %s)", arch,
                         arch_names());
    hp->arch = (model_arch)hp->desc->id;
    if ((s = get_hparam(f, arch, "block_count", 0, 0, 1, 4096, &hp->n_layer, err))) return s;
    if ((s = get_hparam(f, arch, "embedding_length", 0, 0, 1, 1 << 17, &hp->n_embd, err))) return s;
    if ((s = get_hparam(f, arch, "feed_forward_length", 0, 0, 1, 1 << 20, &hp->n_ff, err))) return s;
    if ((s = get_hparam(f, arch, "attention.head_count", 0, 0, 1, 4096, &hp->n_head, err))) return s;
    if ((s = get_hparam(f, arch, "attention.head_count_kv", 1, (uint32_t)hp->n_head, 1, 4096,
                        &hp->n_head_kv, err)))
        return s;
    if (hp->n_head % hp->n_head_kv != 0)
        return subq_fail(err, SUBQ_ERR_FORMAT, "head_count %d is not a multiple of head_count_kv %d",
                         hp->n_head, hp->n_head_kv);
    uint32_t def_hd = (uint32_t)(hp->n_embd / hp->n_head);
    if ((s = get_hparam(f, arch, "attention.key_length", 1, def_hd, 1, 4096, &hp->head_dim, err))) return s;
    if ((s = get_hparam(f, arch, "context_length", 1, 2048, 1, 1 << 24, &hp->n_ctx_train, err))) return s;
    char key[128];
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", arch);
    if ((s = gguf_get_f32_or(f, key, 1e-5f, &hp->norm_eps, err))) return s;
    if (!(hp->norm_eps > 0.0f) || hp->norm_eps > 1.0f)
        return subq_fail(err, SUBQ_ERR_FORMAT, "%s = %g is out of range (0, 1]", key, (double)hp->norm_eps);
    if ((s = rope_load(f, arch, hp, err))) return s;
    /* every layer as llama's, then the family's own (arch_<name>.c) */
    if (!(hp->layer = malloc((size_t)hp->n_layer * sizeof *hp->layer))) s = subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    for (int l = 0; !s && l < hp->n_layer; l++)
        hp->layer[l] = (layer_attn){.scale = 1.0f / sqrtf((float)hp->head_dim), .rope = LAYER_ROPE_GLOBAL};
    hp->embd_scale = hp->desc->embd_scale ? sqrtf((float)hp->n_embd) : 1.0f;
    if (!s && hp->desc->load) s = hp->desc->load(f, hp, err);
    if (s) model_hparams_free(hp); /* a failed load holds nothing */
    return s;
}

void model_hparams_free(model_hparams *hp) {
    free(hp->rope.freq);
    free(hp->rope.freq_long);
    free(hp->rope_local.freq);
    free(hp->rope.turns);
    free(hp->rope.turns_long);
    free(hp->rope_local.turns);
    free(hp->layer);
    hp->rope.freq = hp->rope.freq_long = hp->rope_local.freq = NULL;
    hp->rope.turns = hp->rope.turns_long = hp->rope_local.turns = NULL;
    hp->layer = NULL;
}

/* Rows [r0, r0 + rows) of a matrix as a matrix of their own (the parts of
 * a fused attn_qkv or ffn_up). */
static matrix row_view(const matrix *m, int64_t r0, int64_t rows) {
    matrix v = *m;
    v.data = (const char *)m->data + (size_t)r0 * m->row_bytes;
    v.rows = rows;
    return v;
}

static subq_status load_weights(subq_model *m, subq_error *err) {
    const model_hparams *hp = &m->hp;
    int64_t d = hp->n_embd, dq = (int64_t)hp->n_head * hp->head_dim, dkv = (int64_t)hp->n_head_kv * hp->head_dim;
    subq_status s;
    if ((s = load_matrix(m, "token_embd.weight", d, hp->n_vocab, &m->token_embd, err))) return s;
    if ((s = load_vector(m, "output_norm.weight", d, 0, &m->output_norm, err))) return s;
    if (gguf_find_tensor(m->file, "output.weight")) {
        if ((s = load_matrix(m, "output.weight", d, hp->n_vocab, &m->output, err))) return s;
    } else {
        m->output = m->token_embd; /* tied embeddings */
    }
    m->layers = calloc((size_t)hp->n_layer, sizeof(layer_weights));
    if (!m->layers) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    const arch_desc *a = hp->desc;
    for (int i = 0; i < hp->n_layer; i++) {
        layer_weights *L = &m->layers[i];
        char name[96];
#define TN(suffix) (snprintf(name, sizeof name, "blk.%d." suffix, i), name)
        if ((s = load_vector(m, TN("attn_norm.weight"), d, 0, &L->attn_norm, err))) return s;
        if ((s = load_vector(m, TN("ffn_norm.weight"), d, 0, &L->ffn_norm, err))) return s;
        if (a->fused_qkv) {
            matrix qkv;
            if ((s = load_matrix(m, TN("attn_qkv.weight"), d, dq + 2 * dkv, &qkv, err))) return s;
            L->wq = row_view(&qkv, 0, dq);
            L->wk = row_view(&qkv, dq, dkv);
            L->wv = row_view(&qkv, dq + dkv, dkv);
        } else if ((s = load_matrix(m, TN("attn_q.weight"), d, dq, &L->wq, err)) ||
                   (s = load_matrix(m, TN("attn_k.weight"), d, dkv, &L->wk, err)) ||
                   (s = load_matrix(m, TN("attn_v.weight"), d, dkv, &L->wv, err))) {
            return s;
        }
        if ((s = load_matrix(m, TN("attn_output.weight"), dq, d, &L->wo, err))) return s;
        if (a->fused_gate_up) {
            matrix gate_up;
            if ((s = load_matrix(m, TN("ffn_up.weight"), d, 2 * (int64_t)hp->n_ff, &gate_up, err))) return s;
            L->w_gate = row_view(&gate_up, 0, hp->n_ff);
            L->w_up = row_view(&gate_up, hp->n_ff, hp->n_ff);
        } else if ((s = load_matrix(m, TN("ffn_gate.weight"), d, hp->n_ff, &L->w_gate, err)) ||
                   (s = load_matrix(m, TN("ffn_up.weight"), d, hp->n_ff, &L->w_up, err))) {
            return s;
        }
        if ((s = load_matrix(m, TN("ffn_down.weight"), hp->n_ff, d, &L->w_down, err))) return s;
        if (a->qkv_bias && ((s = load_vector(m, TN("attn_q.bias"), dq, 0, &L->bq, err)) ||
                            (s = load_vector(m, TN("attn_k.bias"), dkv, 0, &L->bk, err)) ||
                            (s = load_vector(m, TN("attn_v.bias"), dkv, 0, &L->bv, err))))
            return s;
        if (a->qk_norm && ((s = load_vector(m, TN("attn_q_norm.weight"), hp->head_dim, 0, &L->q_norm, err)) ||
                           (s = load_vector(m, TN("attn_k_norm.weight"), hp->head_dim, 0, &L->k_norm, err))))
            return s;
        if (a->post_norms && ((s = load_vector(m, TN("post_attention_norm.weight"), d, 0, &L->post_attn_norm, err)) ||
                              (s = load_vector(m, TN("post_ffw_norm.weight"), d, 0, &L->post_ffn_norm, err))))
            return s;
#undef TN
    }
    return SUBQ_OK;
}

void subq_model_free(subq_model *m) {
    if (!m) return;
    if (m->layers) {
        for (int i = 0; i < m->hp.n_layer; i++) {
            layer_weights *L = &m->layers[i];
            free(L->attn_norm);
            free(L->ffn_norm);
            free(L->q_norm);
            free(L->k_norm);
            free(L->bq);
            free(L->bk);
            free(L->bv);
            free(L->post_attn_norm);
            free(L->post_ffn_norm);
        }
        free(m->layers);
    }
    free(m->output_norm);
    model_hparams_free(&m->hp);
    tokenizer_free(m->tok);
    gguf_close(m->file);
    free(m);
}

subq_status subq_model_load(const char *path, subq_model **out, subq_error *err) {
    return subq_model_load_ex(path, SUBQ_LOAD_AUTO, out, err);
}

/* AUTO reads the file in when it takes at most half of the memory available
 * (the copy must never push the machine into swapping) */
static int read_in(const char *path, subq_load_mode mode) {
    if (mode != SUBQ_LOAD_AUTO) return mode == SUBQ_LOAD_READ;
    struct stat st;
    const char *source;
    return stat(path, &st) == 0 && st.st_size > 0 && (uint64_t)st.st_size <= bigmem_available(&source) / 2;
}

subq_status subq_model_load_ex(const char *path, subq_load_mode mode, subq_model **out, subq_error *err) {
    *out = NULL;
    if (mode != SUBQ_LOAD_AUTO && mode != SUBQ_LOAD_MMAP && mode != SUBQ_LOAD_READ)
        return subq_fail(err, SUBQ_ERR_ARG, "invalid load mode %d", (int)mode);
    subq_model *m = calloc(1, sizeof *m);
    if (!m) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    subq_status s = gguf_open_ex(path, read_in(path, mode), &m->file, err);
    if (!s) s = model_hparams_load(m->file, &m->hp, err);
    if (!s) s = tokenizer_from_gguf(m->file, &m->tok, err);
    if (!s) {
        m->hp.n_vocab = tokenizer_n_vocab(m->tok);
        s = load_weights(m, err);
    }
    if (s) {
        /* prefix the file name so the CLI's one line says which file is wrong */
        if (err && strncmp(err->msg, path, strlen(path)) != 0) {
            char msg[SUBQ_ERROR_MSG_MAX];
            snprintf(msg, sizeof msg, "%s", err->msg);
            subq_fail(err, s, "%.200s: %s", path, msg);
        }
        subq_model_free(m);
        return s;
    }
    *out = m;
    return SUBQ_OK;
}

subq_status subq_tokenize(const subq_model *m, const char *text, size_t len, int add_bos, int32_t *out,
                          size_t cap, size_t *n_out, subq_error *err) {
    if (!m) return subq_fail(err, SUBQ_ERR_ARG, "subq_tokenize: model is NULL");
    return tokenizer_encode(m->tok, text, len, add_bos != 0, out, cap, n_out, err);
}

subq_status subq_tokenize_special(const subq_model *m, const char *text, size_t len, int add_bos, int32_t *out,
                                  size_t cap, size_t *n_out, subq_error *err) {
    return tokenizer_encode_special(m->tok, text, len, add_bos != 0, out, cap, n_out, err);
}

subq_status subq_token_to_piece(const subq_model *m, int32_t prev, int32_t tok, char *buf, size_t cap,
                                size_t *n_out, subq_error *err) {
    if (!m || !n_out || (!buf && cap)) return subq_fail(err, SUBQ_ERR_ARG, "subq_token_to_piece: NULL argument");
    *n_out = 0;
    int n = tokenizer_token_to_piece(m->tok, prev, tok, NULL, 0);
    if (n < 0)
        return subq_fail(err, SUBQ_ERR_ARG, "token id %d is outside the vocabulary of %d", (int)tok,
                         tokenizer_n_vocab(m->tok));
    *n_out = (size_t)n;
    if ((size_t)n > cap)
        return subq_fail(err, SUBQ_ERR_RANGE, "the piece of token %d is %d bytes, more than the %zu the buffer holds",
                         (int)tok, n, cap);
    tokenizer_token_to_piece(m->tok, prev, tok, buf, cap);
    return SUBQ_OK;
}
