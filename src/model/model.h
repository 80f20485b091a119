/* Model hyper-parameters and weights, read from a GGUF file (weights stay
 * in the memory-mapped file; only small 1-D tensors are copied to f32). */
#ifndef SUBQ_MODEL_H
#define SUBQ_MODEL_H

#include <stdint.h>

#include "gguf/gguf.h"
#include "subq.h"
#include "tokenize/tokenizer.h"

typedef enum model_arch { ARCH_LLAMA = 0, ARCH_QWEN2 = 1, ARCH_QWEN3 = 2 } model_arch;

/* A 2-D weight: `rows` output features, each a row of `cols` elements of `type`
 * (GGUF ne = {cols, rows}). */
typedef struct matrix {
    const void *data;
    uint32_t type;
    int64_t rows, cols;
    size_t row_bytes;
} matrix;

typedef struct model_hparams {
    model_arch arch;
    int n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx_train;
    int n_rot;          /* rotated dims per head (<= head_dim) */
    int rope_neox;      /* 0: rotate adjacent pairs (llama); 1: split halves (qwen) */
    float rope_base;
    float rope_pos_scale; /* linear rope scaling: positions are multiplied by this */
    float norm_eps;
} model_hparams;

typedef struct layer_weights {
    float *attn_norm, *ffn_norm;   /* [n_embd] */
    float *q_norm, *k_norm;        /* [head_dim], qwen3 only, else NULL */
    float *bq, *bk, *bv;           /* qwen2 biases, else NULL */
    matrix wq, wk, wv, wo;
    matrix w_gate, w_up, w_down;
} layer_weights;

struct subq_model {
    model_hparams hp;
    gguf_file *file;
    tokenizer *tok;
    matrix token_embd, output;     /* output aliases token_embd when tied */
    float *output_norm;
    layer_weights *layers;
    uint64_t n_params, weight_bytes;
};

const char *model_arch_name(model_arch a);

/* Identity of the model's weights, stored in files derived from it so that
 * loading them with another model fails with a clear error. */
uint64_t model_fingerprint(const subq_model *m);

#endif
