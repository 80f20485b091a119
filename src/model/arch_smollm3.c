/* SmolLM3: llama (RoPE on adjacent pairs, as the converter permutes q and k), and no RoPE at all in every
 * fourth layer (3, 7, 11, ...: "NoPE"), which llama.cpp fixes at 4 with no
 * GGUF key. */
#include "model/arch.h"
#include "model/model.h"

#define NO_ROPE_EVERY 4

static subq_status load_smollm3(const gguf_file *f, model_hparams *hp, subq_error *err) {
    (void)f, (void)err;
    for (int l = NO_ROPE_EVERY - 1; l < hp->n_layer; l += NO_ROPE_EVERY) hp->layer[l].rope = LAYER_ROPE_NONE;
    return SUBQ_OK;
}

const arch_desc arch_smollm3 = {.name = "smollm3", .id = ARCH_SMOLLM3, .act = FFN_SILU,
                                .load = load_smollm3};
