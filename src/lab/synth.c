#include "lab/synth.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/rng.h"
#include "gguf/gguf.h"
#include "quant/quant.h"
#include "lab/bpe_synth.h"
#include "tokenize/bpe.h"

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

/* Real layer counts, widths, heads, vocabulary sizes and rope settings of
 * the published models (from their config.json), plus tiny shapes for tests
 * (tiny-llama3 has Llama 3.2's rope parameters and head size, so its
 * rope_freqs.weight is the real model's). */
#define NO_SCALING ROPE_SCALING_NONE, 1.f, 0
#define NO_FREQS 0.f, 0.f, 0.f, 0
#define LLAMA32_FREQS 32.f, 1.f, 4.f, 8192
/* the families' own: window, n_rot, attn_softcap, final_softcap, bpe_pre, longrope_ctx_orig */
#define NONE 0, 0, 0.f, 0.f, NULL, 0
static const synth_shape shapes[] = {
    /* name            arch        L   d     H   Hkv hd   ff    vocab   ctx     base      eps    tied  scaling */
    {"tiny",           ARCH_LLAMA, 2,  256,  4,  2,  64,  512,  320,    256,    10000.f,  1e-5f, 1, NO_SCALING, NO_FREQS, NONE},
    {"tiny-qwen2",     ARCH_QWEN2, 2,  256,  4,  2,  64,  512,  320,    256,    1e6f,     1e-6f, 1, NO_SCALING, NO_FREQS, NONE},
    {"tiny-qwen3",     ARCH_QWEN3, 2,  256,  4,  2,  32,  512,  320,    256,    1e6f,     1e-6f, 0, NO_SCALING, NO_FREQS, NONE},
    {"tiny-llama3",    ARCH_LLAMA, 2,  256,  4,  2,  64,  512,  320,    256,    500000.f, 1e-5f, 1, NO_SCALING,
     LLAMA32_FREQS, NONE},
    {"tiny-qwen3-yarn", ARCH_QWEN3, 2, 256,  4,  2,  32,  512,  320,    256,    1e6f,     1e-6f, 0,
     ROPE_SCALING_YARN, 4.f, 64, NO_FREQS, NONE},
    {"stories260k",    ARCH_LLAMA, 5,  64,   8,  4,  8,   172,  512,    512,    10000.f,  1e-5f, 0, NO_SCALING, NO_FREQS, NONE},
    {"smollm2-135m",   ARCH_LLAMA, 30, 576,  9,  3,  64,  1536, 49152,  8192,   100000.f, 1e-5f, 1, NO_SCALING, NO_FREQS, NONE},
    {"qwen2.5-0.5b",   ARCH_QWEN2, 24, 896,  14, 2,  64,  4864, 151936, 32768,  1e6f,     1e-6f, 1, NO_SCALING, NO_FREQS, NONE},
    {"qwen3-0.6b",     ARCH_QWEN3, 28, 1024, 16, 8,  128, 3072, 151936, 40960,  1e6f,     1e-6f, 1, NO_SCALING, NO_FREQS, NONE},
    /* Qwen3 with the YaRN settings Qwen documents for 128K: factor 4 over 32768 */
    {"qwen3-0.6b-yarn", ARCH_QWEN3, 28, 1024, 16, 8, 128, 3072, 151936, 131072, 1e6f,     1e-6f, 1,
     ROPE_SCALING_YARN, 4.f, 32768, NO_FREQS, NONE},
    {"llama3.2-1b",    ARCH_LLAMA, 16, 2048, 32, 8,  64,  8192, 128256, 131072, 500000.f, 1e-5f, 1, NO_SCALING,
     LLAMA32_FREQS, NONE},
    /* the families of issue 43: tiny shapes whose windows and caps act
     * within a 48-token test, then the real ones (config.json) */
    {"tiny-gemma3",    ARCH_GEMMA3, 6, 256,  4,  1,  64,  512,  320,    256,    1e6f,     1e-6f, 1, NO_SCALING, NO_FREQS,
     8, 0, 0.f, 0.f, NULL, 0},
    {"tiny-gemma2",    ARCH_GEMMA2, 4, 256,  4,  2,  64,  512,  320,    256,    10000.f,  1e-6f, 1, NO_SCALING, NO_FREQS,
     8, 0, 4.f, 30.f, NULL, 0},
    {"tiny-phi3",      ARCH_PHI3,  2,  256,  4,  2,  64,  512,  320,    256,    10000.f,  1e-5f, 0, NO_SCALING, NO_FREQS,
     0, 48, 0.f, 0.f, NULL, 0},
    /* tiny-phi3 with LongRoPE over an original context of 256 (a multiple of
     * 256, as llama.cpp rounds contexts): -c 256 short factors, -c 257+ long */
    {"tiny-phi3-longrope", ARCH_PHI3, 2, 256, 4,  2,  64,  512,  320,    1024,   10000.f,  1e-5f, 0, NO_SCALING, NO_FREQS,
     0, 48, 0.f, 0.f, NULL, 256},
    {"tiny-smollm3",   ARCH_SMOLLM3, 4, 256, 4,  2,  64,  512,  320,    256,    5e6f,     1e-6f, 1, NO_SCALING, NO_FREQS,
     0, 0, 0.f, 0.f, "llama-bpe", 0},
    {"tiny-mistral",   ARCH_LLAMA, 2,  256,  4,  2,  64,  512,  320,    256,    10000.f,  1e-5f, 0, NO_SCALING, NO_FREQS,
     8, 0, 0.f, 0.f, NULL, 0},
    {"gemma3-270m",    ARCH_GEMMA3, 18, 640, 4,  1,  256, 2048, 262144, 32768,  1e6f,     1e-6f, 1, NO_SCALING, NO_FREQS,
     512, 0, 0.f, 0.f, NULL, 0},
    {"gemma3-1b",      ARCH_GEMMA3, 26, 1152, 4, 1,  256, 6912, 262144, 32768,  1e6f,     1e-6f, 1, NO_SCALING, NO_FREQS,
     512, 0, 0.f, 0.f, NULL, 0},
    {"gemma3-4b",      ARCH_GEMMA3, 34, 2560, 8, 4,  256, 10240, 262208, 131072, 1e6f,    1e-6f, 1,
     ROPE_SCALING_LINEAR, 8.f, 0, NO_FREQS,
     1024, 0, 0.f, 0.f, NULL, 0},
    {"gemma2-2b",      ARCH_GEMMA2, 26, 2304, 8, 4,  256, 9216, 256000, 8192,   10000.f,  1e-6f, 1, NO_SCALING, NO_FREQS,
     4096, 0, 50.f, 30.f, NULL, 0},
    {"phi3-mini",      ARCH_PHI3,  32, 3072, 32, 32, 96,  8192, 32064,  4096,   10000.f,  1e-5f, 0, NO_SCALING, NO_FREQS, NONE},
    {"phi4-mini",      ARCH_PHI3,  32, 3072, 24, 8,  128, 8192, 200064, 131072, 10000.f,  1e-5f, 1, NO_SCALING, NO_FREQS,
     0, 96, 0.f, 0.f, "gpt-4o", 0},
    {"smollm3-3b",     ARCH_SMOLLM3, 36, 2048, 16, 4, 128, 11008, 128256, 65536, 5e6f,    1e-6f, 1, NO_SCALING, NO_FREQS,
     0, 0, 0.f, 0.f, "llama-bpe", 0},
    {"mistral-7b",     ARCH_LLAMA, 32, 4096, 32, 8,  128, 14336, 32768, 32768,  1e6f,     1e-5f, 0, NO_SCALING, NO_FREQS, NONE},
    {"mistral-7b-v0.1", ARCH_LLAMA, 32, 4096, 32, 8, 128, 14336, 32000, 32768,  10000.f,  1e-5f, 0, NO_SCALING, NO_FREQS,
     4096, 0, 0.f, 0.f, NULL, 0},
};

const synth_shape *synth_find_shape(const char *name) {
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        if (strcmp(shapes[i].name, name) == 0) return &shapes[i];
    return NULL;
}

const char *synth_shape_names(void) {
    return "tiny, tiny-qwen2, tiny-qwen3, tiny-llama3, tiny-qwen3-yarn, stories260k, smollm2-135m, qwen2.5-0.5b, "
           "qwen3-0.6b, qwen3-0.6b-yarn, llama3.2-1b, tiny-gemma3, tiny-gemma2, tiny-phi3, tiny-phi3-longrope, "
           "tiny-smollm3, tiny-mistral, "
           "gemma3-270m, gemma3-1b, gemma3-4b, gemma2-2b, phi3-mini, phi4-mini, smollm3-3b, mistral-7b, mistral-7b-v0.1";
}

/* Shapes whose real models use a byte-level BPE ("gpt2") vocabulary, with
 * the tokenizer.ggml.pre their GGUF conversions carry; every other shape gets
 * the SentencePiece vocabulary below. */
static const struct {
    const char *shape, *pre;
} bpe_shapes[] = {
    {"tiny-qwen2", "qwen2"},      {"tiny-qwen3", "qwen2"},      {"tiny-qwen3-yarn", "qwen2"},
    {"qwen2.5-0.5b", "qwen2"},    {"qwen3-0.6b", "qwen2"},      {"qwen3-0.6b-yarn", "qwen2"},
    {"llama3.2-1b", "llama-bpe"}, {"smollm2-135m", "smollm"},
};

static const char *shape_bpe_pre(const synth_shape *sh) {
    if (sh->bpe_pre) return sh->bpe_pre;
    for (size_t i = 0; i < sizeof bpe_shapes / sizeof bpe_shapes[0]; i++)
        if (strcmp(bpe_shapes[i].shape, sh->name) == 0) return bpe_shapes[i].pre;
    return NULL;
}

/* Phi-3's added tokens as its GGUF holds them (ids 32000..32010, control),
 * the last ids of a phi3 SentencePiece vocabulary here. They are not
 * decoration: llama.cpp, for a model whose general.name contains "phi3" or
 * "phi-3", sets attributes on <unk>, <s>, </s> and <|endoftext|> looked up
 * by text (token_to_id.at in llama-vocab.cpp's load) and fails to load a
 * vocabulary without one of them ("_Map_base::at"). */
static const char *const phi3_added[] = {"<|endoftext|>",   "<|assistant|>",   "<|placeholder1|>", "<|placeholder2|>",
                                         "<|placeholder3|>", "<|placeholder4|>", "<|system|>",       "<|end|>",
                                         "<|placeholder5|>", "<|placeholder6|>", "<|user|>"};
#define N_PHI3_ADDED ((int)(sizeof phi3_added / sizeof phi3_added[0]))

/* A small SentencePiece vocabulary: <unk> <s> </s>, 256 byte tokens, then
 * U+2581, letters, "▁"+letter and frequent English pieces, padded with
 * two-letter pieces until n_vocab - n_added, no piece twice (llama.cpp
 * refuses a vocabulary that has one), then the n_added control tokens
 * added. Scores fall with the index so earlier pieces merge first. */
static char **make_vocab(int n_vocab, float *scores, int32_t *types, const char *const *added, int n_added) {
    char **tok = calloc((size_t)n_vocab, sizeof(char *));
    if (!tok) return NULL;
    const int n_total = n_vocab;
    n_vocab -= n_added; /* the pieces' share; the added tokens follow them */
    static const char *const extra[] = {"the", "▁the", "he", "th", "in", "er", "an", "nd", "▁a", "on",
                                        "ed", "ing", "▁and", "▁to", "re", "at", "ou", "it", "is", "en"};
    const char *letters = "etaoinshrdlucmfwypvbgkqjxzETAOINSHRDLUCMFWYPVBGKQJXZ.,!?'\"0123456789";
    char buf[32];
    int n = 0;
#define ADD(s, ty, sc)                                     \
    do {                                                   \
        if (n < n_vocab) {                                 \
            tok[n] = strdup(s);                            \
            types[n] = (ty);                               \
            scores[n] = (sc);                              \
            if (!tok[n]) goto fail;                        \
            n++;                                           \
        }                                                  \
    } while (0)
    ADD("<unk>", 2, 0.0f);
    ADD("<s>", 3, 0.0f);
    ADD("</s>", 3, 0.0f);
    for (int b = 0; b < 256; b++) {
        snprintf(buf, sizeof buf, "<0x%02X>", b);
        ADD(buf, 6, 0.0f);
    }
    ADD("▁", 1, -1.0f);
    for (const char *p = letters; *p; p++) {
        snprintf(buf, sizeof buf, "%c", *p);
        ADD(buf, 1, -2.0f - (float)n);
    }
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++) ADD(extra[i], 1, -2.0f - (float)n);
    for (const char *p = letters; *p && n < n_vocab; p++) { /* "▁a" is among the extras */
        snprintf(buf, sizeof buf, "▁%c", *p);
        int dup = 0;
        for (int i = 0; i < n && !dup; i++) dup = strcmp(tok[i], buf) == 0;
        if (!dup) ADD(buf, 1, -2.0f - (float)n);
    }
    for (const char *a = letters; *a && n < n_vocab; a++)
        for (const char *b = letters; *b && n < n_vocab; b++) {
            snprintf(buf, sizeof buf, "%c%c", *a, *b);
            int dup = 0;
            for (int i = 0; i < n && !dup; i++) dup = strcmp(tok[i], buf) == 0;
            if (!dup) ADD(buf, 1, -2.0f - (float)n);
        }
    for (int i = 0; n < n_vocab; i++) { /* unreachable for sane sizes; keeps the count exact */
        snprintf(buf, sizeof buf, "<unused%d>", i);
        ADD(buf, 5, -1e9f);
    }
    n_vocab = n_total;
    for (int i = 0; i < n_added; i++) ADD(added[i], 3, 0.0f);
#undef ADD
    return tok;
fail:
    for (int i = 0; i < n_total; i++) free(tok[i]);
    free(tok);
    return NULL;
}

/* Random tensor of rows_a + rows_b rows of cols: the first rows_a rows ~
 * N(mean, std_a), the next rows_b ~ N(mean, std_b) (a fused attn_qkv: q and
 * k rows, then v rows), quantised to `type` (or f16 if cols is not a
 * multiple of the block; one row stays f32), added to the writer. */
static subq_status add_random_parts(gguf_writer *w, const char *name, uint32_t type, int64_t cols, int64_t rows_a,
                                    float std_a, int64_t rows_b, float std_b, float mean, uint64_t *rng,
                                    subq_error *err) {
    const ggml_type_traits *tr = ggml_type_get(type);
    const int64_t rows = rows_a + rows_b;
    if (cols % tr->block_size) type = GGML_TYPE_F16;
    if (rows == 1) type = GGML_TYPE_F32; /* 1-D norms stay f32 */
    size_t row_bytes = ggml_row_size(type, (uint64_t)cols);
    uint8_t *data = malloc(row_bytes * (size_t)rows);
    float *row = malloc((size_t)cols * sizeof(float));
    if (!data || !row) {
        free(data);
        free(row);
        return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory for tensor '%s'", name);
    }
    for (int64_t r = 0; r < rows; r++) {
        const float std = r < rows_a ? std_a : std_b;
        for (int64_t i = 0; i < cols; i++) row[i] = mean + std * rng_normal(rng);
        quantize_row(type, row, data + (size_t)r * row_bytes, cols);
    }
    free(row);
    uint64_t ne[2] = {(uint64_t)cols, (uint64_t)rows};
    return gguf_writer_add_tensor(w, name, type, rows == 1 ? 1 : 2, ne, data, row_bytes * (size_t)rows, 1, err);
}

/* Random tensor of rows x cols ~ N(mean, std) (add_random_parts). */
static subq_status add_random(gguf_writer *w, const char *name, uint32_t type, int64_t cols, int64_t rows,
                              float mean, float std, uint64_t *rng, subq_error *err) {
    return add_random_parts(w, name, type, cols, rows, std, 0, 0.0f, mean, rng, err);
}

/* Llama 3.1+ frequency factors (Meta's "llama3" rope scaling, stored as
 * llama.cpp's convert script stores them): pair i has wavelength
 * 2 pi base^(2i/hd); wavelengths below ctx_orig/high_freq keep their
 * frequency (factor 1), those above ctx_orig/low_freq are slowed by
 * `factor`, and in between the frequency blends linearly in
 * smooth = (ctx_orig/wavelength - low_freq) / (high_freq - low_freq):
 * new = (1 - smooth) freq/factor + smooth freq. Stored: freq / new. */
static subq_status add_llama3_freq_factors(gguf_writer *w, const synth_shape *sh, subq_error *err) {
    int half = sh->head_dim / 2;
    float *ff = malloc((size_t)half * sizeof(float));
    if (!ff) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    double lo_wl = sh->llama3_ctx_orig / sh->llama3_low_freq, hi_wl = sh->llama3_ctx_orig / sh->llama3_high_freq;
    for (int i = 0; i < half; i++) {
        double wl = 2.0 * M_PI * pow((double)sh->rope_base, 2.0 * i / sh->head_dim);
        if (wl < hi_wl) {
            ff[i] = 1.0f;
        } else if (wl > lo_wl) {
            ff[i] = sh->llama3_factor;
        } else {
            double smooth = (sh->llama3_ctx_orig / wl - sh->llama3_low_freq) /
                            (sh->llama3_high_freq - sh->llama3_low_freq);
            ff[i] = (float)(1.0 / ((1.0 - smooth) / sh->llama3_factor + smooth));
        }
    }
    uint64_t ne[1] = {(uint64_t)half};
    return gguf_writer_add_tensor(w, "rope_freqs.weight", GGML_TYPE_F32, 1, ne, ff, (uint64_t)half * sizeof(float), 1,
                                  err);
}

/* LongRoPE factors of the shape (Phi-3's short_factor / long_factor): no
 * published model's, but shaped like them, near 1 for the fast pairs and
 * growing with the pair index, the long ones up to twice the context
 * extension: short_i = 1 + 0.5 u^2, long_i = 1 + (2 n_ctx / orig - 1) u^2,
 * u = i / (n_rot/2 - 1). Also the key the converter writes with them:
 * attn_factor = sqrt(1 + ln(n_ctx / orig) / ln(orig)) (its 'longrope'). */
static subq_status add_longrope(gguf_writer *w, const synth_shape *sh, const char *arch, subq_error *err) {
    const int half = (sh->n_rot ? sh->n_rot : sh->head_dim) / 2;
    const double scale = (double)sh->n_ctx / sh->longrope_ctx_orig;
    const uint64_t ne[1] = {(uint64_t)half};
    subq_status s = SUBQ_OK;
    for (int which = 0; which < 2 && !s; which++) { /* long, then short, as the converter yields them */
        float *f = malloc((size_t)half * sizeof(float));
        if (!f) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
        for (int i = 0; i < half; i++) {
            const double u = half > 1 ? (double)i / (half - 1) : 0.0;
            f[i] = (float)(1.0 + (which ? 0.5 : 2.0 * scale - 1.0) * u * u);
        }
        s = gguf_writer_add_tensor(w, which ? "rope_factors_short.weight" : "rope_factors_long.weight", GGML_TYPE_F32,
                                   1, ne, f, (uint64_t)half * sizeof(float), 1, err);
    }
    if (s) return s;
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.original_context_length", arch);
    if ((s = gguf_writer_set_u32(w, key, (uint32_t)sh->longrope_ctx_orig))) return subq_fail(err, s, "out of memory");
    snprintf(key, sizeof key, "%s.rope.scaling.attn_factor", arch);
    const float attn = scale > 1.0 ? (float)sqrt(1.0 + log(scale) / log((double)sh->longrope_ctx_orig)) : 1.0f;
    if ((s = gguf_writer_set_f32(w, key, attn))) return subq_fail(err, s, "out of memory");
    return SUBQ_OK;
}

subq_status synth_write_model(const synth_shape *sh, uint32_t type, uint64_t seed, const char *path,
                              subq_error *err) {
    const ggml_type_traits *tr = ggml_type_get(type);
    if (!tr || !tr->can_dequant)
        return subq_fail(err, SUBQ_ERR_UNSUPPORTED,
                         "synth cannot write type %s (supported: f32, f16, bf16, q8_0, q4_0, q4_K, q5_K, q6_K)",
                         tr ? tr->name : "unknown");
    gguf_writer *w = gguf_writer_new();
    float *scores = malloc((size_t)sh->n_vocab * sizeof(float));
    int32_t *types = malloc((size_t)sh->n_vocab * sizeof(int32_t));
    char **vocab = NULL;
    const char *bpe_pre = shape_bpe_pre(sh);
    /* a Phi-3 SentencePiece vocabulary ends in Phi-3's added tokens, its eos
     * <|endoftext|> (as converted Phi-3 GGUFs carry it) */
    const int phi3 = !bpe_pre && sh->arch == ARCH_PHI3;
    const uint32_t eos = phi3 ? (uint32_t)(sh->n_vocab - N_PHI3_ADDED) : 2;
    bpe_synth bv = {0};
    subq_status s = SUBQ_OK;
    if (!w || !scores || !types) {
        s = subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
        goto done;
    }
    if (bpe_pre) {
        if ((s = bpe_synth_make(sh->n_vocab, bpe_pre, &bv, err))) goto done;
    } else if (!(vocab = make_vocab(sh->n_vocab, scores, types, phi3 ? phi3_added : NULL, phi3 ? N_PHI3_ADDED : 0))) {
        s = subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
        goto done;
    }
    const char *arch = model_arch_name(sh->arch);
    char key[128];
#define KEY(suffix) (snprintf(key, sizeof key, "%s." suffix, arch), key)
    char name[64];
    snprintf(name, sizeof name, "subq-synth-%s", sh->name);
    /* llama_ftype ids: the file's "mostly" type */
    uint32_t ftype = type == GGML_TYPE_F32    ? 0
                     : type == GGML_TYPE_F16  ? 1
                     : type == GGML_TYPE_Q4_0 ? 2
                     : type == GGML_TYPE_Q8_0 ? 7
                     : type == GGML_TYPE_Q4_K ? 15
                     : type == GGML_TYPE_Q5_K ? 17
                     : type == GGML_TYPE_Q6_K ? 18
                                              : 32;
    if ((s = gguf_writer_set_str(w, "general.architecture", arch)) ||
        (s = gguf_writer_set_str(w, "general.name", name)) ||
        (s = gguf_writer_set_u32(w, "general.file_type", ftype)) ||
        (s = gguf_writer_set_u32(w, KEY("block_count"), (uint32_t)sh->n_layer)) ||
        (s = gguf_writer_set_u32(w, KEY("context_length"), (uint32_t)sh->n_ctx)) ||
        (s = gguf_writer_set_u32(w, KEY("embedding_length"), (uint32_t)sh->n_embd)) ||
        (s = gguf_writer_set_u32(w, KEY("feed_forward_length"), (uint32_t)sh->n_ff)) ||
        (s = gguf_writer_set_u32(w, KEY("attention.head_count"), (uint32_t)sh->n_head)) ||
        (s = gguf_writer_set_u32(w, KEY("attention.head_count_kv"), (uint32_t)sh->n_head_kv)) ||
        (s = gguf_writer_set_u32(w, KEY("attention.key_length"), (uint32_t)sh->head_dim)) ||
        (s = gguf_writer_set_u32(w, KEY("attention.value_length"), (uint32_t)sh->head_dim)) ||
        (s = gguf_writer_set_u32(w, KEY("rope.dimension_count"), (uint32_t)(sh->n_rot ? sh->n_rot : sh->head_dim))) ||
        (s = gguf_writer_set_f32(w, KEY("rope.freq_base"), sh->rope_base)) ||
        (s = gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), sh->norm_eps))) {
        subq_fail(err, s, "out of memory writing metadata");
        goto done;
    }
    if (sh->rope_scaling != ROPE_SCALING_NONE &&
        ((s = gguf_writer_set_str(w, KEY("rope.scaling.type"), sh->rope_scaling == ROPE_SCALING_YARN ? "yarn" : "linear")) ||
         (s = gguf_writer_set_f32(w, KEY("rope.scaling.factor"), sh->rope_factor)) ||
         (sh->rope_scaling == ROPE_SCALING_YARN &&
          (s = gguf_writer_set_u32(w, KEY("rope.scaling.original_context_length"), (uint32_t)sh->rope_ctx_orig))))) {
        subq_fail(err, s, "out of memory writing metadata");
        goto done;
    }
    if ((sh->window && (s = gguf_writer_set_u32(w, KEY("attention.sliding_window"), (uint32_t)sh->window))) ||
        (sh->attn_softcap > 0.f && (s = gguf_writer_set_f32(w, KEY("attn_logit_softcapping"), sh->attn_softcap))) ||
        (sh->final_softcap > 0.f && (s = gguf_writer_set_f32(w, KEY("final_logit_softcapping"), sh->final_softcap)))) {
        subq_fail(err, s, "out of memory writing metadata");
        goto done;
    }
    if (bpe_pre) {
        if ((s = bpe_synth_write(&bv, w, err))) goto done;
    } else if ((s = gguf_writer_set_str(w, "tokenizer.ggml.model", "llama")) ||
        (s = gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)vocab, (uint64_t)sh->n_vocab)) ||
        (s = gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, scores, (uint64_t)sh->n_vocab)) ||
        (s = gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, (uint64_t)sh->n_vocab)) ||
        (s = gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0)) ||
        (s = gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1)) ||
        (s = gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", eos))) {
        subq_fail(err, s, "out of memory writing metadata");
        goto done;
    }
#undef KEY
    uint64_t rng = rng_seed(seed);
    const int64_t d = sh->n_embd, dq = (int64_t)sh->n_head * sh->head_dim, dkv = (int64_t)sh->n_head_kv * sh->head_dim;
    /* std 1/sqrt(fan_in) keeps activations O(1); embeddings std 1 */
    if ((s = add_random(w, "token_embd.weight", type, d, sh->n_vocab, 0.0f, 1.0f, &rng, err))) goto done;
    if (sh->llama3_factor > 0.0f && (s = add_llama3_freq_factors(w, sh, err))) goto done;
    if (sh->longrope_ctx_orig > 0 && (s = add_longrope(w, sh, arch, err))) goto done;
    if ((s = add_random(w, "output_norm.weight", type, d, 1, 1.0f, 0.1f, &rng, err))) goto done;
    if (!sh->tied && (s = add_random(w, "output.weight", type, d, sh->n_vocab, 0.0f, 0.02f, &rng, err))) goto done;
    const arch_desc *a = arch_by_id(sh->arch);
    const float s_qk = 0.5f / sqrtf((float)d) * 4, s_d = 1.0f / sqrtf((float)d); /* q/k larger: attention not uniform */
    for (int l = 0; l < sh->n_layer; l++) {
#define TN(suffix) (snprintf(name, sizeof name, "blk.%d." suffix, l), name)
        if ((s = add_random(w, TN("attn_norm.weight"), type, d, 1, 1.0f, 0.1f, &rng, err))) goto done;
        if (a->fused_qkv) { /* q and k rows at q/k's scale, v rows at v's */
            if ((s = add_random_parts(w, TN("attn_qkv.weight"), type, d, dq + dkv, s_qk, dkv, s_d, 0.0f, &rng, err)))
                goto done;
        } else if ((s = add_random(w, TN("attn_q.weight"), type, d, dq, 0.0f, s_qk, &rng, err)) ||
                   (s = add_random(w, TN("attn_k.weight"), type, d, dkv, 0.0f, s_qk, &rng, err)) ||
                   (s = add_random(w, TN("attn_v.weight"), type, d, dkv, 0.0f, s_d, &rng, err))) {
            goto done;
        }
        if ((s = add_random(w, TN("attn_output.weight"), type, dq, d, 0.0f, 1.0f / sqrtf((float)dq), &rng, err)) ||
            (s = add_random(w, TN("ffn_norm.weight"), type, d, 1, 1.0f, 0.1f, &rng, err)))
            goto done;
        if (a->fused_gate_up) {
            if ((s = add_random(w, TN("ffn_up.weight"), type, d, 2 * (int64_t)sh->n_ff, 0.0f, s_d, &rng, err))) goto done;
        } else if ((s = add_random(w, TN("ffn_gate.weight"), type, d, sh->n_ff, 0.0f, s_d, &rng, err)) ||
                   (s = add_random(w, TN("ffn_up.weight"), type, d, sh->n_ff, 0.0f, s_d, &rng, err))) {
            goto done;
        }
        if ((s = add_random(w, TN("ffn_down.weight"), type, sh->n_ff, d, 0.0f, 1.0f / sqrtf((float)sh->n_ff), &rng, err)))
            goto done;
        if (a->qkv_bias &&
            ((s = add_random(w, TN("attn_q.bias"), type, dq, 1, 0.0f, 0.1f, &rng, err)) ||
             (s = add_random(w, TN("attn_k.bias"), type, dkv, 1, 0.0f, 0.1f, &rng, err)) ||
             (s = add_random(w, TN("attn_v.bias"), type, dkv, 1, 0.0f, 0.1f, &rng, err))))
            goto done;
        if (a->qk_norm &&
            ((s = add_random(w, TN("attn_q_norm.weight"), type, sh->head_dim, 1, 1.0f, 0.1f, &rng, err)) ||
             (s = add_random(w, TN("attn_k_norm.weight"), type, sh->head_dim, 1, 1.0f, 0.1f, &rng, err))))
            goto done;
        if (a->post_norms &&
            ((s = add_random(w, TN("post_attention_norm.weight"), type, d, 1, 1.0f, 0.1f, &rng, err)) ||
             (s = add_random(w, TN("post_ffw_norm.weight"), type, d, 1, 1.0f, 0.1f, &rng, err))))
            goto done;
#undef TN
    }
    s = gguf_writer_write(w, path, err);
done:
    if (vocab)
        for (int i = 0; i < sh->n_vocab; i++) free(vocab[i]);
    free(vocab);
    bpe_synth_free(&bv);
    free(scores);
    free(types);
    gguf_writer_free(w);
    return s;
}
