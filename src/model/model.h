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

/* How a model stretches RoPE past its training context ({arch}.rope.scaling.type). */
typedef enum rope_scaling_type { ROPE_SCALING_NONE = 0, ROPE_SCALING_LINEAR = 1, ROPE_SCALING_YARN = 2 } rope_scaling_type;

/* RoPE as the GGUF declares it (llama.cpp's keys and defaults), and the
 * per-pair angular frequencies derived from it once at load (rope.c). */
typedef struct rope_hparams {
    int n_rot;              /* rotated dims per head (<= head_dim), even */
    int neox;               /* 0: rotate adjacent pairs (llama); 1: split halves (qwen) */
    float base;             /* {arch}.rope.freq_base */
    rope_scaling_type scaling;
    float factor;           /* {arch}.rope.scaling.factor (linear, yarn); 1 = none */
    int n_ctx_orig;         /* yarn: {arch}.rope.scaling.original_context_length */
    float ext_factor;       /* yarn: ramp weight (1 = full YaRN, 0 = plain linear) */
    float beta_fast, beta_slow; /* yarn: rotations bounding the ramp (32, 1) */
    float attn_factor;      /* {arch}.rope.scaling.attn_factor: extra cos/sin scale */
    int has_freq_factors;   /* rope_freqs.weight (Llama 3.1+ frequency factors) present */
    float freq_factor_min, freq_factor_max;
    /* derived: the angle of pair i at position p is p * freq[i]; cos and sin
     * are multiplied by mscale */
    double *freq;           /* [n_rot/2], owned */
    float mscale;
} rope_hparams;

typedef struct model_hparams {
    model_arch arch;
    int n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx_train;
    float attn_scale;   /* of q . k in every layer's softmax: 1 / sqrt(head_dim); the one copy
                           that forward, sparse metrics and the teachers read */
    rope_hparams rope;
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

/* Hyper-parameters of a GGUF model file (no weights, no tokenizer; n_vocab
 * stays 0), with the rope frequency table; free with model_hparams_free. */
subq_status model_hparams_load(const gguf_file *f, model_hparams *hp, subq_error *err);
void model_hparams_free(model_hparams *hp);

/* rope.c: read and validate the rope keys and the optional rope_freqs.weight
 * tensor ({arch} = arch), then fill hp->rope's frequency table. Needs
 * head_dim and n_ctx_train set. Unknown scaling types are refused. */
subq_status rope_load(const gguf_file *f, const char *arch, model_hparams *hp, subq_error *err);
/* One line describing the rope in use, e.g. "yarn x4 (original context 32768, ...)". */
void rope_describe(const rope_hparams *r, char *buf, size_t cap);

/* Identity of the model's weights, stored in files derived from it so that
 * loading them with another model fails with a clear error. */
uint64_t model_fingerprint(const subq_model *m);

#endif
