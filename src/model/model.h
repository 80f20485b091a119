/* Model hyper-parameters and weights, read from a GGUF file (weights stay
 * in the memory-mapped file; only small 1-D tensors are copied to f32). */
#ifndef SUBQ_MODEL_H
#define SUBQ_MODEL_H

#include <stdint.h>

#include "gguf/gguf.h"
#include "model/arch.h"
#include "subq.h"
#include "tokenize/tokenizer.h"

/* arch_desc.id of each family (kept in model fingerprints: never renumbered) */
typedef enum model_arch {
    ARCH_LLAMA = 0, ARCH_QWEN2 = 1, ARCH_QWEN3 = 2, ARCH_GEMMA2 = 3, ARCH_GEMMA3 = 4, ARCH_PHI3 = 5, ARCH_SMOLLM3 = 6,
    ARCH_COUNT
} model_arch;

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
    int n_ctx_orig;         /* yarn, LongRoPE: {arch}.rope.scaling.original_context_length */
    float ext_factor;       /* yarn: ramp weight (1 = full YaRN, 0 = plain linear) */
    float beta_fast, beta_slow; /* yarn: rotations bounding the ramp (32, 1) */
    float attn_factor;      /* {arch}.rope.scaling.attn_factor: extra cos/sin scale */
    int has_freq_factors;   /* rope_freqs.weight (Llama 3.1+ frequency factors) present */
    float freq_factor_min, freq_factor_max;
    /* Phi-3's LongRoPE (rope_factors_short/long.weight, both or neither;
     * freq_long set): two sets of frequency divisors, the short for contexts
     * of up to n_ctx_orig tokens, the long past it (rope_freq_for) */
    float short_factor_min, short_factor_max, long_factor_min, long_factor_max;
    /* derived: the angle of pair i at position p is p * freq[i]; cos and sin
     * are multiplied by mscale */
    double *freq;           /* [n_rot/2], owned; with LongRoPE the short factors' */
    double *freq_long;      /* [n_rot/2], owned: the long factors'; NULL without LongRoPE */
    double *turns, *turns_long; /* owned: freq's and freq_long's turn tables (attn_rope_turns_fill), for far keys */
    float mscale;
} rope_hparams;

/* Which RoPE a layer applies (layer_attn.rope). */
enum { LAYER_ROPE_NONE = -1, LAYER_ROPE_GLOBAL = 0, LAYER_ROPE_LOCAL = 1 };

/* One layer's attention, computed once at load (the architecture unit's
 * load): the one copy that the forward, the sparse stages, the metrics and
 * the teachers read. */
typedef struct layer_attn {
    float scale;   /* of q . k before the softmax (1 / sqrt(head_dim) unless the family says) */
    float softcap; /* s <- softcap tanh(s / softcap) before the softmax (gemma2); 0: none */
    int window;    /* sliding window: the query's slot and the window - 1 before it; 0: all keys */
    int rope;      /* LAYER_ROPE_*: hp->rope, hp->rope_local, or none (SmolLM3's NoPE layers) */
} layer_attn;

typedef struct model_hparams {
    model_arch arch;
    const arch_desc *desc;
    int n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx_train;
    rope_hparams rope;
    rope_hparams rope_local; /* the sliding layers' RoPE where it differs (gemma3); n_rot 0 when unused */
    layer_attn *layer;       /* [n_layer], owned */
    float embd_scale;        /* token embeddings are multiplied by this (gemma: sqrt(n_embd)); 1 else */
    float final_softcap;     /* logits <- c tanh(logits / c) (gemma2); 0: none */
    float norm_eps;
} model_hparams;

/* The RoPE layer l applies, NULL for none. */
static inline const rope_hparams *layer_rope(const model_hparams *hp, int l) {
    const int r = hp->layer[l].rope;
    return r == LAYER_ROPE_GLOBAL ? &hp->rope : r == LAYER_ROPE_LOCAL ? &hp->rope_local : NULL;
}

typedef struct layer_weights {
    float *attn_norm, *ffn_norm;   /* [n_embd] */
    float *q_norm, *k_norm;        /* [head_dim] (arch_desc.qk_norm), else NULL */
    float *bq, *bk, *bv;           /* arch_desc.qkv_bias, else NULL */
    float *post_attn_norm, *post_ffn_norm; /* [n_embd] (arch_desc.post_norms), else NULL */
    matrix wq, wk, wv, wo;         /* views of one fused attn_qkv matrix's rows (arch_desc.fused_qkv) */
    matrix w_gate, w_up, w_down;   /* gate, up: views of one ffn_up (arch_desc.fused_gate_up) */
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
 * head_dim, n_ctx_train and desc set. Unknown scaling types are refused. */
subq_status rope_load(const gguf_file *f, const char *arch, model_hparams *hp, subq_error *err);
/* A second RoPE like hp->rope with another base and no scaling (gemma3's
 * sliding layers), in hp->rope_local. */
subq_status rope_load_local(model_hparams *hp, float base, subq_error *err);
/* Phi-3's LongRoPE: rope_factors_short.weight and rope_factors_long.weight
 * ([n_rot/2] each) into hp->rope.freq and hp->rope.freq_long (nothing when
 * the file has neither). After rope_load. */
subq_status rope_load_longrope(const gguf_file *f, model_hparams *hp, subq_error *err);
/* The frequency table a context of n_ctx tokens rotates by: LongRoPE's long
 * one when n_ctx exceeds the original context (llama.cpp's
 * get_rope_factors), else r->freq. Fixed for the context's life: its
 * cached keys were rotated by it. */
const double *rope_freq_for(const rope_hparams *r, int n_ctx);
/* The turn tables of freq, one of r's frequency tables (attn_rope.turns). */
const double *rope_turns_of(const rope_hparams *r, const double *freq);
/* One line describing the rope in use, e.g. "yarn x4 (original context 32768, ...)". */
void rope_describe(const rope_hparams *r, char *buf, size_t cap);

/* A layer list for sparse attention ("all", "global", "none", "1,3,5-7"):
 * the listed layers without a sliding window ("all", NULL and "global":
 * every such layer); a list of sliding layers only is refused (SUBQ_ERR_ARG). */
subq_status model_layers_parse(const model_hparams *hp, const char *list, unsigned char *mask, subq_error *err);

/* One line on the layers' attention: scale, sliding windows and the global
 * layers, layers without RoPE, soft caps (subq info). */
void model_describe_layers(const model_hparams *hp, char *buf, size_t cap);

/* Identity of the model's weights, stored in files derived from it so that
 * loading them with another model fails with a clear error. */
uint64_t model_fingerprint(const subq_model *m);

#endif
