/* Phi-3 and Phi-4-mini: one attn_qkv matrix (q, k, v rows), one ffn_up
 * holding the gate rows then the up rows, RoPE on split halves (Phi-4-mini
 * rotates 96 of 128 dims). Its sliding window (phi3.attention.sliding_window)
 * is ignored, as llama.cpp does: the released models attend to the whole
 * context in practice (llama.cpp PR 13676).
 *
 * LongRoPE (Phi-3-128K, Phi-4-mini): rope_factors_short/long.weight divide
 * each pair's frequency, the short ones in contexts up to
 * rope.scaling.original_context_length, the long ones past it, with
 * rope.scaling.attn_factor on cos and sin (rope.c: rope_load_longrope). */
#include "model/arch.h"
#include "model/model.h"

static subq_status load_phi3(const gguf_file *f, model_hparams *hp, subq_error *err) {
    return rope_load_longrope(f, hp, err);
}

const arch_desc arch_phi3 = {.name = "phi3", .id = ARCH_PHI3, .rope_neox = 1, .fused_qkv = 1, .fused_gate_up = 1,
                             .act = FFN_SILU, .load = load_phi3};
