/* Phi-3 and Phi-4-mini: one attn_qkv matrix (q, k, v rows), one ffn_up
 * holding the gate rows then the up rows, RoPE on split halves (Phi-4-mini
 * rotates 96 of 128 dims). Its sliding window (phi3.attention.sliding_window)
 * is ignored, as llama.cpp does: the released models attend to the whole
 * context in practice (llama.cpp PR 13676). */
#include "base/error.h"
#include "model/arch.h"
#include "model/model.h"

/* LongRoPE (Phi-3-128K, Phi-4-mini) divides each pair's frequency by short
 * factors within the original context and long ones past it: not built
 * yet, and running without them would rotate every position wrongly. */
static subq_status load_phi3(const gguf_file *f, model_hparams *hp, subq_error *err) {
    (void)hp;
    if (gguf_find_tensor(f, "rope_factors_short.weight") || gguf_find_tensor(f, "rope_factors_long.weight"))
        return subq_fail(err, SUBQ_ERR_UNSUPPORTED, "rope_factors_short/long.weight (Phi's LongRoPE) are not "
                         "supported yet; refusing to run with positions the model was not trained on");
    return SUBQ_OK;
}

const arch_desc arch_phi3 = {.name = "phi3", .id = ARCH_PHI3, .rope_neox = 1, .fused_qkv = 1, .fused_gate_up = 1,
                             .act = FFN_SILU, .load = load_phi3};
