/* Architectures: one unit per family (arch_<name>.c) says what its GGUF
 * holds and how its layers differ; the loader and the forward pass run the
 * description and never test which architecture they hold.
 *
 * Adding a family (docs/adding-an-architecture.md): its unit, a row in
 * arch.c's list, its shapes in synth.c, its chat template if new, and the
 * numpy reference (tests/ref/llama_ref.py). */
#ifndef SUBQ_ARCH_H
#define SUBQ_ARCH_H

#include "gguf/gguf.h"
#include "subq.h"

struct model_hparams;

/* The FFN's gated activation: out = act(gate) * up. */
typedef enum ffn_act {
    FFN_SILU = 0, /* SwiGLU: silu(g) = g sigmoid(g) */
    FFN_GELU = 1, /* GeGLU, GELU's tanh form (gemma) */
} ffn_act;

typedef struct arch_desc {
    const char *name;          /* general.architecture */
    int id;                    /* model_arch: kept in model fingerprints, never renumbered */
    int rope_neox;             /* 1: rotate split halves (x[i], x[i + n_rot/2]); 0: adjacent pairs */
    int qkv_bias;              /* blk.N.attn_{q,k,v}.bias */
    int qk_norm;               /* blk.N.attn_{q,k}_norm.weight: RMSNorm of each head's q and k */
    int post_norms;            /* blk.N.post_attention_norm / post_ffw_norm: RMSNorm of each block's
                                  output before its residual add (gemma) */
    int fused_qkv;             /* blk.N.attn_qkv.weight: q, k, v rows in one matrix (phi3) */
    int fused_gate_up;         /* blk.N.ffn_up.weight holds gate rows then up rows, no ffn_gate (phi3) */
    ffn_act act;
    int embd_scale;            /* embeddings times sqrt(n_embd) (gemma) */
    /* The family's own keys, after the common ones and RoPE are read:
     * fills hp->layer[] (scale, softcap, window, RoPE per layer) and
     * hp->final_softcap; may read hp->rope_local. NULL: every layer
     * attends to all keys at 1/sqrt(head_dim) with the file's RoPE. */
    subq_status (*load)(const gguf_file *f, struct model_hparams *hp, subq_error *err);
} arch_desc;

/* The architecture named `name`, NULL when not supported. */
const arch_desc *arch_by_name(const char *name);
/* "llama, qwen2, ..." for error messages. */
const char *arch_names(void);
/* The description of id (model_arch), NULL when out of range. */
const arch_desc *arch_by_id(int id);

/* Shared by the units: {arch}.attention.sliding_window (def when absent; 0: none),
 * and the layer pattern of llama.cpp's set_swa_pattern(n): layer l slides
 * when l % n < n - 1 (every n-th layer is global). */
subq_status arch_sliding_window(const gguf_file *f, const char *arch, int def, int *window, subq_error *err);
void arch_slide_pattern(struct model_hparams *hp, int window, int period);
/* The same where {arch}.attention.sliding_window_pattern may override the
 * period, or give one flag per layer (nonzero: sliding), as newer
 * converters write it. */
subq_status arch_slide_layers(const gguf_file *f, const char *arch, struct model_hparams *hp, int window, int period,
                              subq_error *err);

extern const arch_desc arch_llama, arch_qwen2, arch_qwen3, arch_gemma2, arch_gemma3, arch_phi3, arch_smollm3;

#endif
