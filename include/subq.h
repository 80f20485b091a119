/* subq: sub-quadratic attention for frozen LLMs. Public C API.
 *
 * Every call that can fail returns a subq_status and, when `err` is not NULL,
 * writes a one-line human-readable message into it. The library never exits
 * the process and keeps no global mutable state. */
#ifndef SUBQ_H
#define SUBQ_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum subq_status {
    SUBQ_OK = 0,
    SUBQ_ERR_IO,          /* file cannot be opened / read / written */
    SUBQ_ERR_FORMAT,      /* malformed, truncated or hostile file */
    SUBQ_ERR_UNSUPPORTED, /* valid but not supported (type, architecture, ...) */
    SUBQ_ERR_SHAPE,       /* tensor or argument shapes do not agree */
    SUBQ_ERR_NOMEM,       /* allocation failed or request larger than memory */
    SUBQ_ERR_ARG,         /* invalid argument from the caller */
    SUBQ_ERR_TOKENIZE,    /* text cannot be tokenised (e.g. invalid UTF-8) */
    SUBQ_ERR_MISMATCH,    /* file belongs to another model */
    SUBQ_ERR_RANGE,       /* context full, token id out of range, ... */
} subq_status;

#define SUBQ_ERROR_MSG_MAX 512
typedef struct subq_error {
    subq_status code;
    char msg[SUBQ_ERROR_MSG_MAX];
} subq_error;

/* Short name of a status code ("format error", ...). */
const char *subq_status_name(subq_status s);

/* ---- model ------------------------------------------------------------ */

typedef struct subq_model subq_model;

typedef struct subq_model_info {
    char arch[32];         /* "llama", ... */
    int n_layer;
    int n_embd;            /* d_model */
    int n_head;            /* query heads */
    int n_head_kv;
    int head_dim;
    int n_ff;
    int n_vocab;
    int n_ctx_train;
    float rope_base;
    float norm_eps;
    int bos_id, eos_id;    /* -1 when absent */
    int add_bos;           /* whether the vocabulary asks for BOS at the start */
    uint64_t n_params;
    uint64_t weight_bytes; /* bytes of all weight tensors as stored */
} subq_model_info;

subq_status subq_model_load(const char *path, subq_model **out, subq_error *err);
void subq_model_free(subq_model *m);
void subq_model_get_info(const subq_model *m, subq_model_info *info);

/* ---- tokenizer (owned by the model) --------------------------------- */

/* Encode UTF-8 text. `add_bos` prepends BOS. Writes at most `cap` ids into
 * `out`; *n_out receives the full count (call again with a bigger buffer
 * when *n_out > cap). */
subq_status subq_tokenize(const subq_model *m, const char *text, size_t len, int add_bos,
                          int32_t *out, size_t cap, size_t *n_out, subq_error *err);

/* Raw bytes of one token as it appears in text (byte tokens give one byte,
 * U+2581 becomes a space). Returns the byte count written (<= cap), or -1
 * for an out-of-range id. `prev` is the token before it (-1 for none):
 * the SentencePiece leading space after BOS is dropped. */
int subq_token_to_piece(const subq_model *m, int32_t prev, int32_t tok, char *buf, size_t cap);

/* ---- inference context ---------------------------------------------- */

typedef struct subq_context subq_context;

typedef enum subq_kv_type { SUBQ_KV_F32 = 0, SUBQ_KV_F16 = 1 } subq_kv_type;

typedef struct subq_context_params {
    int n_ctx;          /* KV cache capacity in tokens (<= 0: model's training context) */
    int n_threads;      /* OpenMP threads (<= 0: all cores) */
    subq_kv_type kv_type;
} subq_context_params;

subq_context_params subq_context_default_params(void);
subq_status subq_context_new(subq_model *m, const subq_context_params *p, subq_context **out,
                             subq_error *err);
void subq_context_free(subq_context *c);
/* Forget all cached tokens. */
void subq_context_reset(subq_context *c);
/* Number of tokens in the KV cache. */
int subq_context_n_past(const subq_context *c);

/* Run n tokens through the model, appending them to the KV cache at
 * positions n_past .. n_past+n-1. When `logits` is not NULL it receives
 * n_vocab floats per token if `all_logits`, else for the last token only. */
subq_status subq_decode(subq_context *c, const int32_t *tokens, int n, float *logits,
                        int all_logits, subq_error *err);

/* ---- sampling --------------------------------------------------------- */

typedef struct subq_sampler_params {
    float temp;       /* 0: greedy */
    int top_k;        /* <= 0: off */
    float top_p;      /* >= 1: off */
    uint64_t seed;
} subq_sampler_params;

/* Pick a token from logits (n_vocab floats; may be modified in place).
 * `rng_state` is the caller's generator state, seeded from params.seed. */
int32_t subq_sample(const subq_sampler_params *p, float *logits, int n_vocab, uint64_t *rng_state);

/* ---- perplexity (llama.cpp's method) -------------------------------- */

typedef struct subq_ppl_result {
    double ppl;          /* exp(mean NLL) over all scored tokens */
    double ppl_stderr;   /* standard error of ppl (delta method) */
    double nll_mean;
    int n_chunks;
    int64_t n_scored;
} subq_ppl_result;

/* Called after each chunk with the running result. */
typedef void (*subq_ppl_callback)(void *user, int chunk, int n_chunks, const subq_ppl_result *running);

/* `tokens` is the whole text tokenised with BOS. Chunks of n_ctx tokens
 * (at most max_chunks; <= 0 for all) have their first token replaced by BOS
 * and the second half of each chunk is scored. If `nll_out` is not NULL it
 * receives the per-token NLLs in order (n_chunks * (n_ctx - 1 - n_ctx/2)). */
subq_status subq_perplexity(subq_context *c, const int32_t *tokens, size_t n_tokens, int n_ctx, int max_chunks,
                            subq_ppl_callback cb, void *user, subq_ppl_result *res, float *nll_out,
                            subq_error *err);

#ifdef __cplusplus
}
#endif
#endif
