/* Random-weight GGUF models of named real shapes, for tests and speed work
 * at scale (no pretrained weights can be downloaded here). */
#ifndef SUBQ_SYNTH_H
#define SUBQ_SYNTH_H

#include <stdint.h>

#include "model/model.h"

typedef struct synth_shape {
    const char *name;
    model_arch arch;
    int n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx;
    float rope_base;
    float norm_eps;
    int tied;        /* output shares token_embd */
    /* rope scaling as the real model's GGUF carries it ({arch}.rope.scaling.*) */
    rope_scaling_type rope_scaling;
    float rope_factor;           /* linear / yarn factor */
    int rope_ctx_orig;           /* yarn: original context */
    /* Llama 3.1+ frequency factors, written as rope_freqs.weight (the way
     * llama.cpp's convert_hf_to_gguf.py computes them) when llama3_factor > 0 */
    float llama3_factor, llama3_low_freq, llama3_high_freq;
    int llama3_ctx_orig;
    /* the families' own keys (0: absent): {arch}.attention.sliding_window,
     * rope.dimension_count below head_dim (partial rotary, Phi-4-mini), and
     * gemma2's attn_logit_softcapping / final_logit_softcapping */
    int window, n_rot;
    float attn_softcap, final_softcap;
    const char *bpe_pre;  /* tokenizer.ggml.pre of a byte-level BPE vocabulary; NULL: SentencePiece */
    /* Phi-3's LongRoPE when > 0: this original context (n_ctx the extended
     * one), rope_factors_short/long.weight and the converter's attn_factor */
    int longrope_ctx_orig;
} synth_shape;

/* NULL when unknown. */
const synth_shape *synth_find_shape(const char *name);
/* Comma-separated list of known shape names. */
const char *synth_shape_names(void);

/* Write a model of `shape` with 2-D weights in `type` (f32, f16, bf16, q8_0;
 * tensors whose rows are not a multiple of the type's block fall back to f16,
 * as llama.cpp's quantizer does) and 1-D norms and biases in f32. Weights
 * are Gaussian with std ~ 1/sqrt(fan_in) so activations stay O(1); norms
 * ~ 1 + N(0, 0.1). */
subq_status synth_write_model(const synth_shape *shape, uint32_t type, uint64_t seed, const char *path,
                              subq_error *err);

#endif
