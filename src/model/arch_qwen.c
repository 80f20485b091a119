/* Qwen2 (q/k/v biases) and Qwen3 (RMSNorm of each head's q and k): llama
 * otherwise, with RoPE on split halves. */
#include "model/arch.h"
#include "model/model.h"

const arch_desc arch_qwen2 = {.name = "qwen2", .id = ARCH_QWEN2, .rope_neox = 1, .qkv_bias = 1, .act = FFN_SILU};
const arch_desc arch_qwen3 = {.name = "qwen3", .id = ARCH_QWEN3, .rope_neox = 1, .qk_norm = 1, .act = FFN_SILU};
