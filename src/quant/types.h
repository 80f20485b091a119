/* ggml tensor types as stored in GGUF: ids, block sizes and which ones
 * subq can dequantise. The ids are fixed by the ggml file format. */
#ifndef SUBQ_QUANT_TYPES_H
#define SUBQ_QUANT_TYPES_H

#include <stddef.h>
#include <stdint.h>

typedef enum ggml_type {
    GGML_TYPE_F32 = 0,
    GGML_TYPE_F16 = 1,
    GGML_TYPE_Q4_0 = 2,
    GGML_TYPE_Q4_1 = 3,
    GGML_TYPE_Q5_0 = 6,
    GGML_TYPE_Q5_1 = 7,
    GGML_TYPE_Q8_0 = 8,
    GGML_TYPE_Q8_1 = 9,
    GGML_TYPE_Q2_K = 10,
    GGML_TYPE_Q3_K = 11,
    GGML_TYPE_Q4_K = 12,
    GGML_TYPE_Q5_K = 13,
    GGML_TYPE_Q6_K = 14,
    GGML_TYPE_Q8_K = 15,
    GGML_TYPE_IQ2_XXS = 16,
    GGML_TYPE_IQ2_XS = 17,
    GGML_TYPE_IQ3_XXS = 18,
    GGML_TYPE_IQ1_S = 19,
    GGML_TYPE_IQ4_NL = 20,
    GGML_TYPE_IQ3_S = 21,
    GGML_TYPE_IQ2_S = 22,
    GGML_TYPE_IQ4_XS = 23,
    GGML_TYPE_I8 = 24,
    GGML_TYPE_I16 = 25,
    GGML_TYPE_I32 = 26,
    GGML_TYPE_I64 = 27,
    GGML_TYPE_F64 = 28,
    GGML_TYPE_IQ1_M = 29,
    GGML_TYPE_BF16 = 30,
    GGML_TYPE_TQ1_0 = 34,
    GGML_TYPE_TQ2_0 = 35,
    GGML_TYPE_COUNT = 40,
} ggml_type;

typedef struct ggml_type_traits {
    const char *name;   /* NULL for ids that are not a known type */
    int block_size;     /* elements per block */
    int type_size;      /* bytes per block */
    int can_dequant;    /* subq can convert it to f32 */
} ggml_type_traits;

/* Traits for a type id; returns NULL for unknown ids (>= GGML_TYPE_COUNT or a gap). */
const ggml_type_traits *ggml_type_get(uint32_t type);

/* Bytes of a row of n elements; 0 when n is not a multiple of the block size
 * or the type is unknown. */
size_t ggml_row_size(uint32_t type, uint64_t n);

#endif
