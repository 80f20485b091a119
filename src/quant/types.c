#include "quant/types.h"

/* Block layouts from ggml (ggml-common.h): K-quants use 256-element super-blocks. */
static const ggml_type_traits type_table[GGML_TYPE_COUNT] = {
    [GGML_TYPE_F32] = {"f32", 1, 4, 1},
    [GGML_TYPE_F16] = {"f16", 1, 2, 1},
    [GGML_TYPE_Q4_0] = {"q4_0", 32, 18, 1},
    [GGML_TYPE_Q4_1] = {"q4_1", 32, 20, 0},
    [GGML_TYPE_Q5_0] = {"q5_0", 32, 22, 0},
    [GGML_TYPE_Q5_1] = {"q5_1", 32, 24, 0},
    [GGML_TYPE_Q8_0] = {"q8_0", 32, 34, 1},
    [GGML_TYPE_Q8_1] = {"q8_1", 32, 36, 0},
    [GGML_TYPE_Q2_K] = {"q2_K", 256, 84, 0},
    [GGML_TYPE_Q3_K] = {"q3_K", 256, 110, 0},
    [GGML_TYPE_Q4_K] = {"q4_K", 256, 144, 1},
    [GGML_TYPE_Q5_K] = {"q5_K", 256, 176, 1},
    [GGML_TYPE_Q6_K] = {"q6_K", 256, 210, 1},
    [GGML_TYPE_Q8_K] = {"q8_K", 256, 292, 0},
    [GGML_TYPE_IQ2_XXS] = {"iq2_xxs", 256, 66, 0},
    [GGML_TYPE_IQ2_XS] = {"iq2_xs", 256, 74, 0},
    [GGML_TYPE_IQ3_XXS] = {"iq3_xxs", 256, 98, 0},
    [GGML_TYPE_IQ1_S] = {"iq1_s", 256, 50, 0},
    [GGML_TYPE_IQ4_NL] = {"iq4_nl", 32, 18, 0},
    [GGML_TYPE_IQ3_S] = {"iq3_s", 256, 110, 0},
    [GGML_TYPE_IQ2_S] = {"iq2_s", 256, 82, 0},
    [GGML_TYPE_IQ4_XS] = {"iq4_xs", 256, 136, 0},
    [GGML_TYPE_I8] = {"i8", 1, 1, 0},
    [GGML_TYPE_I16] = {"i16", 1, 2, 0},
    [GGML_TYPE_I32] = {"i32", 1, 4, 0},
    [GGML_TYPE_I64] = {"i64", 1, 8, 0},
    [GGML_TYPE_F64] = {"f64", 1, 8, 0},
    [GGML_TYPE_IQ1_M] = {"iq1_m", 256, 56, 0},
    [GGML_TYPE_BF16] = {"bf16", 1, 2, 1},
    [GGML_TYPE_TQ1_0] = {"tq1_0", 256, 54, 0},
    [GGML_TYPE_TQ2_0] = {"tq2_0", 256, 66, 0},
};

const ggml_type_traits *ggml_type_get(uint32_t type) {
    if (type >= GGML_TYPE_COUNT || type_table[type].name == NULL) return NULL;
    return &type_table[type];
}

size_t ggml_row_size(uint32_t type, uint64_t n) {
    const ggml_type_traits *t = ggml_type_get(type);
    if (!t || n % (uint64_t)t->block_size != 0) return 0;
    return (size_t)(n / (uint64_t)t->block_size) * (size_t)t->type_size;
}
