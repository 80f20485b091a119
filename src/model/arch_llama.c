/* Llama (and Mistral, SmolLM2, TinyLlama ...): pre-norm, SwiGLU, RoPE on
 * adjacent pairs. A llama.attention.sliding_window (Mistral 7B v0.1's 4096)
 * slides every layer, as the model was trained; llama.cpp reads no window
 * for llama and attends to all keys, which differs past the window. */
#include "model/arch.h"
#include "model/model.h"

static subq_status load_llama(const gguf_file *f, model_hparams *hp, subq_error *err) {
    int window;
    subq_status s = arch_sliding_window(f, "llama", 0, &window, err);
    if (!s) arch_slide_pattern(hp, window, 1 << 30);
    return s;
}

const arch_desc arch_llama = {.name = "llama", .id = ARCH_LLAMA, .act = FFN_SILU, .load = load_llama};
