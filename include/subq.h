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

/* Everything declared here is the library's interface: the library is built
 * with hidden visibility and exports these names only (its internal symbols
 * are made local when it is linked, so they cannot collide with a program's
 * own or with ggml's). */
#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility push(default)
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
    uint64_t decode_bytes; /* weight bytes one decode step reads: every matrix and norm
                              once, one embedding row */
    uint64_t matmul_params; /* multiply-adds per token in the layer matrices and the
                              output matrix (prefill FLOP = 2 x this x tokens + attention) */
    uint64_t fingerprint;  /* identity of the weights; files derived from the model
                              (search projections, completion maps) carry it */
} subq_model_info;

subq_status subq_model_load(const char *path, subq_model **out, subq_error *err);
void subq_model_free(subq_model *m);
void subq_model_get_info(const subq_model *m, subq_model_info *info);

/* A metadata value of the model's GGUF file as text (strings as they are,
 * numbers and booleans formatted), e.g. "tokenizer.chat_template".
 * SUBQ_ERR_RANGE when absent, SUBQ_ERR_UNSUPPORTED for arrays; *len gets
 * the full length (the copy into buf is NUL-terminated and truncated to
 * cap - 1 bytes). */
subq_status subq_model_meta(const subq_model *m, const char *key, char *buf, size_t cap, size_t *len,
                            subq_error *err);

/* ---- tokenizer (owned by the model) --------------------------------- */

/* Encode UTF-8 text. `add_bos` prepends BOS. Never writes past out[cap - 1].
 * When the ids do not fit: SUBQ_ERR_RANGE with *n_out = the count the text
 * needs (out then holds nothing usable; call again with that many), as
 * llama.cpp's llama_tokenize reports -n. The count is not bounded by the text
 * length (a vocabulary without U+2581 spends three tokens on a space); a
 * count-only call passes out = NULL, cap = 0. */
subq_status subq_tokenize(const subq_model *m, const char *text, size_t len, int add_bos,
                          int32_t *out, size_t cap, size_t *n_out, subq_error *err);

/* subq_tokenize, and the text of the vocabulary's special tokens (control,
 * user-defined and unknown tokens such as "<|im_start|>", "[INST]", "<s>")
 * becomes those single tokens (llama.cpp's parse_special): for prompts made
 * by chat templates. Byte-level BPE vocabularies match them in subq_tokenize
 * already; SentencePiece ones only here. */
subq_status subq_tokenize_special(const subq_model *m, const char *text, size_t len, int add_bos,
                                  int32_t *out, size_t cap, size_t *n_out, subq_error *err);

/* Raw bytes of one token as it appears in text (byte tokens give one byte,
 * U+2581 becomes a space; no NUL is added). `prev` is the token before it
 * (-1 for none): the SentencePiece leading space after BOS is dropped.
 * *n_out gets the piece's length; when it exceeds cap nothing is written and
 * the result is SUBQ_ERR_RANGE (as subq_tokenize). An id outside the
 * vocabulary is SUBQ_ERR_ARG. */
subq_status subq_token_to_piece(const subq_model *m, int32_t prev, int32_t tok, char *buf, size_t cap,
                                size_t *n_out, subq_error *err);

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
/* Forget all cached tokens (and every sparse layer's index). */
void subq_context_reset(subq_context *c);
/* Number of tokens in the KV cache. */
int subq_context_n_past(const subq_context *c);
/* KV cache capacity in tokens, and the threads the context computes with. */
int subq_context_n_ctx(const subq_context *c);
/* The model a context runs. */
const subq_model *subq_context_model(const subq_context *c);
int subq_context_n_threads(const subq_context *c);

/* Run n tokens through the model, appending them to the KV cache at
 * positions n_past .. n_past+n-1. When `logits` is not NULL it receives
 * n_vocab floats per token if `all_logits`, else for the last token only. */
subq_status subq_decode(subq_context *c, const int32_t *tokens, int n, float *logits,
                        int all_logits, subq_error *err);

/* ---- prompt caches ---------------------------------------------------- */

/* The token ids of the n_past cached tokens, in order (-1 for slots of a
 * synthetic fill); valid until the context changes. */
const int32_t *subq_context_tokens(const subq_context *c);
/* Logits (n_vocab floats) of the last cached token when they are known (the
 * last decode asked for them, or a session file held them), else NULL. */
const float *subq_context_last_logits(const subq_context *c);
/* Drop the cached tokens after the first n_keep: the KV cache and every
 * sparse layer's index then hold what decoding those n_keep tokens alone
 * would have left (exact, quest, oracle and window drop their tail; hnsw
 * and faiss rebuild their graphs from the kept keys; completion summaries
 * are recomputed from the kept KV rows). A request sharing a prefix with
 * the cached tokens continues from there instead of prefilling again. */
subq_status subq_context_truncate(subq_context *c, int n_keep, subq_error *err);
/* Save the cached tokens to a session file (atomically): the model's
 * fingerprint, context size, KV type, attention plan, token ids, KV rows,
 * the sparse layers' search keys and the last logits when known. */
subq_status subq_context_save(const subq_context *c, const char *path, subq_error *err);
/* Replace what c holds by a session file's tokens. A file of another
 * model, KV type or attention plan is SUBQ_ERR_MISMATCH; more tokens than
 * the context holds SUBQ_ERR_RANGE. The indexes are rebuilt from the stored
 * keys, so decoding continues as it would have in the saved context. On
 * failure c is empty. */
subq_status subq_context_load(subq_context *c, const char *path, subq_error *err);

/* ---- sampling --------------------------------------------------------- */

typedef struct subq_sampler_params {
    float temp;       /* >= 0; 0: greedy */
    int top_k;        /* >= 0; 0: off */
    float top_p;      /* in [0, 1]; 1: off */
    uint64_t seed;    /* any value (0 included) gives a valid stream */
} subq_sampler_params;

/* A sampler owns its random stream, seeded from params.seed: two samplers
 * with the same parameters pick the same tokens from the same logits.
 * Parameters out of range give SUBQ_ERR_ARG. */
typedef struct subq_sampler subq_sampler;
subq_sampler_params subq_sampler_default_params(void); /* temp 0.8, top_k 40, top_p 0.95, seed 42 */
subq_status subq_sampler_new(const subq_sampler_params *p, subq_sampler **out, subq_error *err);
void subq_sampler_free(subq_sampler *s);
/* Pick a token from logits (n_vocab floats; may be modified in place). */
int32_t subq_sampler_sample(subq_sampler *s, float *logits, int n_vocab);

/* ---- sparse attention: attention plans ------------------------------ */

/* How a sparse layer picks the keys each query attends to besides the
 * sinks and the recent tail. exact, hnsw and faiss rank keys in the learned
 * search space (they need search projections); quest bounds pages of native
 * keys, oracle takes the exact top-K of the head-mean native q.k, window
 * retrieves the K most recent keys before the tail. */
typedef enum subq_selector_kind {
    SUBQ_SELECT_EXACT = 0,
    SUBQ_SELECT_HNSW,
    SUBQ_SELECT_FAISS,
    SUBQ_SELECT_QUEST,
    SUBQ_SELECT_ORACLE,
    SUBQ_SELECT_WINDOW,
    SUBQ_SELECT_COUNT
} subq_selector_kind;

/* "exact" -> SUBQ_SELECT_EXACT ...; -1 when unknown. */
int subq_selector_parse(const char *name);
const char *subq_selector_name(subq_selector_kind k);
/* 1 if this build has it (faiss is optional). */
int subq_selector_available(subq_selector_kind k);
/* 1 if it ranks in the learned search space (needs search projections). */
int subq_selector_needs_search(subq_selector_kind k);

/* What the search-space selectors rank keys by: cosine (keys and queries
 * L2-normalised; what training optimises) or the raw inner product q.k (as
 * the llama.cpp runtime ranks). */
typedef enum subq_score { SUBQ_SCORE_COSINE = 0, SUBQ_SCORE_DOT, SUBQ_SCORE_COUNT } subq_score;
/* What the exact selector's scan reads per key: the stored keys (f32, or
 * f16 with search_f16), or int8 / int4 codes of them with one scale per key
 * (a quarter / an eighth of the f32 bytes), whose best 8 K slots are
 * re-ranked on the stored keys. */
typedef enum subq_scan { SUBQ_SCAN_FULL = 0, SUBQ_SCAN_INT8, SUBQ_SCAN_INT4, SUBQ_SCAN_COUNT } subq_scan;
/* "cosine" / "dot", "full" / "int8" / "int4" -> the value; -1 when unknown. */
int subq_score_parse(const char *name);
const char *subq_score_name(subq_score s);
int subq_scan_parse(const char *name);
const char *subq_scan_name(subq_scan s);

typedef struct subq_attn_plan {
    /* layers to make sparse: "all", "1-4", "2--3" (negative counts from the
     * end), comma lists; NULL: the layers that have search projections, or
     * every layer for selectors without a search space */
    const char *layers;
    /* per-layer top-K by exact selection, "L:K,..." (L a layer or range as in
     * `layers`): those layers retrieve K keys with the exact selector
     * whatever `selector` is, and are sparse even when `layers` omits them,
     * e.g. a large K for layers otherwise kept dense, so that no layer reads
     * the whole cache; NULL: none */
    const char *topk_layers;
    subq_selector_kind selector;   /* exact */
    int top_k;                     /* keys retrieved per query (64) */
    int n_sink;                    /* first tokens of a document always attended (4) */
    int n_tail;                    /* most recent tokens always attended, the query included (16);
                                      sink 0 and tail 0: exactly the K retrieved keys */
    int sparse_prefill;            /* 1: batches of several tokens retrieve too; 0: they
                                      attend densely and only their keys are indexed (0) */
    int hnsw_m, hnsw_ef_construction, hnsw_ef_search; /* 32, 40, 64 */
    int quest_page;                /* tokens per Quest page (16) */
    int search_f16;                /* exact, hnsw: keep search keys in f16 (0) */
    subq_score score;              /* exact, hnsw, faiss: ranking (cosine) */
    subq_scan scan;                /* exact: what the scan reads (full) */
    uint64_t seed;                 /* index randomness (1) */
    /* with completion maps: complete only query heads whose mid-region
     * entropy, stored in the maps file, is at least this; < 0: every head (-1) */
    float complete_min_entropy;
} subq_attn_plan;

subq_attn_plan subq_attn_plan_default(void);

/* Learned search projections (W_Qs, W_Ks per layer) from a file written by
 * training, made for one model: another model's file is SUBQ_ERR_MISMATCH. */
typedef struct subq_search subq_search;
subq_status subq_search_load(const char *path, const subq_model *m, subq_search **out, subq_error *err);
/* Untrained N(0, 1/d_model) projections of width d_search on `layers` (a
 * layer list as in plans; NULL: layers 2 .. L-3): a baseline and a stand-in
 * for speed measurements. */
subq_status subq_search_random(const subq_model *m, const char *layers, int d_search, uint64_t seed,
                               subq_search **out, subq_error *err);
void subq_search_free(subq_search *s);
/* Width of the search space; whether layer l has projections. */
int subq_search_d(const subq_search *s);
int subq_search_has_layer(const subq_search *s, int layer);

/* Completion maps (learned positive feature maps that add the attention
 * mass of the keys a sparse layer does not retrieve), for one model. */
typedef struct subq_complete subq_complete;
subq_status subq_complete_load(const char *path, const subq_model *m, subq_complete **out, subq_error *err);
void subq_complete_free(subq_complete *c);

/* Make the plan's layers of an empty context sparse (the others keep full
 * attention). `search` is needed by selectors in the search space;
 * `complete` (may be NULL) adds the completion on the layers it covers.
 * Both must outlive the plan (until clear_plan or context_free). */
subq_status subq_context_set_plan(subq_context *c, const subq_attn_plan *plan, const subq_search *search,
                                  const subq_complete *complete, subq_error *err);
/* Back to full attention on every layer. */
void subq_context_clear_plan(subq_context *c);

/* Where decode time went, summed since the context was made. */
typedef struct subq_context_stats {
    double t_attn_s;      /* attention stages, selection and index inserts included */
    double t_select_s;    /* selectors' queries */
    double t_append_s;    /* selectors' index inserts */
    uint64_t kv_bytes;    /* KV cache size */
    uint64_t index_bytes; /* memory held by the selectors */
} subq_context_stats;
void subq_context_get_stats(const subq_context *c, subq_context_stats *st);

/* Fill an empty context with n_past synthetic tokens: random keys and values
 * in the KV cache, random search keys in every sparse layer's index. Decode
 * speed does not depend on the values, and a real prefill of a long context
 * takes far longer than a speed measurement (benchmarks only). */
subq_status subq_context_fill_synthetic(subq_context *c, int n_past, uint64_t seed, subq_error *err);

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

/* ---- recall: needle-in-a-haystack ------------------------------------- */

/* Pass-key and needle-in-a-haystack tasks (as in the pass-key test of
 * Mohtashami & Jaggi 2023 and RULER's NIAH variants): a fact stated once
 * inside filler text of a given token length, at a given depth, then a
 * question whose answer is a number; the model answers by greedy decoding.
 *   passkey      "The pass key is 71432. Remember it. 71432 is the pass key."
 *                ... "What is the pass key? The pass key is" -> 71432
 *   multikey     n_keys needles "The special magic number for KEY is N.",
 *                one asked (at the depth), the others at random depths
 *   multivalue   n_values needles for one KEY (the first at the depth),
 *                all asked; correct when every value appears */
typedef enum subq_recall_task {
    SUBQ_RECALL_PASSKEY = 0,
    SUBQ_RECALL_MULTIKEY,
    SUBQ_RECALL_MULTIVALUE,
} subq_recall_task;

/* "passkey", "niah-multikey", "niah-multivalue" -> task; -1 when unknown. */
int subq_recall_task_parse(const char *name);
const char *subq_recall_task_name(subq_recall_task t);

typedef struct subq_recall_params {
    subq_recall_task task;
    const char *haystack;     /* filler text (UTF-8), repeated to length (copied) */
    size_t haystack_len;
    int n_keys;               /* multikey: needles in the prompt (4) */
    int n_values;             /* multivalue: values of the key (4) */
    uint64_t seed;            /* keys, filler offsets and distractor depths (1) */
} subq_recall_params;

subq_recall_params subq_recall_default_params(void);

/* One prompt: exactly `length` tokens (BOS, filler with the needles, the
 * question), the answer the model must give, where the asked needle sits. */
typedef struct subq_recall_prompt {
    int32_t *tokens;          /* [n_tokens], malloc'd */
    int n_tokens;
    int needle_pos;           /* index of the first token of the asked needle */
    int needle_len;           /* its tokens */
    int n_filler;             /* filler tokens in the prompt */
    int n_values;             /* answers: n_values numbers of up to 15 digits */
    char values[8][16];
} subq_recall_prompt;

/* A prompt builder: the haystack tokenised once for one model.
 * SUBQ_ERR_ARG when the haystack holds no text. */
typedef struct subq_recall subq_recall;
subq_status subq_recall_new(const subq_model *m, const subq_recall_params *p, subq_recall **out, subq_error *err);
void subq_recall_free(subq_recall *r);

/* Build the prompt of trial `trial` at `length` tokens with the asked needle
 * after a share `depth` in [0, 1] of the filler (snapped to the nearest word
 * start). The same (params, length, depth, trial) give the same prompt.
 * SUBQ_ERR_ARG when the needles and the question do not fit in `length` or
 * the length exceeds the model's context. */
subq_status subq_recall_make_prompt(const subq_recall *r, int length, double depth, int trial,
                                    subq_recall_prompt *out, subq_error *err);
void subq_recall_prompt_free(subq_recall_prompt *pr);

/* Score a generated answer: the share of the prompt's values found as whole
 * digit runs in `text` (1 for exact recall of every value). */
double subq_recall_score(const subq_recall_prompt *pr, const char *text, size_t len);

/* Feed the prompt to an empty context (which runs its attention plan, dense
 * or sparse prefill as the plan says), decode greedily at most max_new
 * tokens (stopping at end-of-sequence or a newline) and score the answer.
 * The generated text is copied to `answer` (NUL-terminated, cap bytes). */
subq_status subq_recall_answer(subq_context *c, const subq_recall_prompt *pr, int max_new, char *answer,
                               size_t cap, double *score, subq_error *err);

/* ---- GGUF files: inspection ----------------------------------------- */

/* Any GGUF file (model, search projections, completion maps), read-only. */
typedef struct subq_gguf subq_gguf;
subq_status subq_gguf_open(const char *path, subq_gguf **out, subq_error *err);
void subq_gguf_close(subq_gguf *f);

typedef struct subq_gguf_header {
    uint32_t version;
    uint64_t n_kv, n_tensors, alignment;
    uint64_t tensor_bytes; /* sum over tensors */
} subq_gguf_header;
void subq_gguf_get_header(const subq_gguf *f, subq_gguf_header *h);

typedef enum subq_value_kind {
    SUBQ_VALUE_UINT, SUBQ_VALUE_INT, SUBQ_VALUE_FLOAT, SUBQ_VALUE_BOOL, SUBQ_VALUE_STRING, SUBQ_VALUE_ARRAY
} subq_value_kind;

/* One metadata value; strings point into the file (not NUL-terminated). */
typedef struct subq_value {
    subq_value_kind kind;
    const char *type_name;  /* GGUF type: "uint32", "float32", "string", "array", ... */
    uint64_t u;             /* UINT, BOOL (0/1) */
    int64_t i;              /* INT */
    double f;               /* FLOAT */
    const char *str;        /* STRING */
    size_t str_len;
    const char *elem_type;  /* ARRAY: element type name, and count */
    uint64_t n;
} subq_value;

/* Metadata pair i < n_kv: its key (not NUL-terminated) and value. */
subq_status subq_gguf_kv(const subq_gguf *f, uint64_t i, const char **key, size_t *key_len, subq_value *v,
                         subq_error *err);
/* Element j of the array value of pair i. */
subq_status subq_gguf_kv_item(const subq_gguf *f, uint64_t i, uint64_t j, subq_value *v, subq_error *err);

typedef struct subq_gguf_tensor {
    const char *name;       /* NUL-terminated */
    const char *type_name;  /* "f32", "q8_0", ... ("?" when unknown) */
    uint32_t n_dims;
    uint64_t ne[4];         /* ne[0] is the row length */
    uint64_t offset, n_bytes;
} subq_gguf_tensor;
subq_status subq_gguf_tensor_info(const subq_gguf *f, uint64_t i, subq_gguf_tensor *t, subq_error *err);

/* ---- tools: synthetic models, element formats ------------------------ */

/* Write a random-weight model of a named real shape (subq_synth_shapes
 * lists them) with 2-D weights of element type `type` ("f32", "f16", "bf16",
 * "q8_0", "q4_0", "q4_K", "q5_K", "q6_K"), atomically. */
subq_status subq_synth_model(const char *shape, const char *type, uint64_t seed, const char *path,
                             subq_error *err);
const char *subq_synth_shapes(void); /* "tiny, tiny-qwen2, ..." */

/* Dequantise n_bytes of whole blocks of element type `type` into dst (cap
 * floats); *n_out gets the element count. `portable`: the C kernels rather
 * than the best for this CPU (tests compare both). */
subq_status subq_dequantize(const char *type, const void *src, size_t n_bytes, int portable, float *dst,
                            size_t cap, size_t *n_out, subq_error *err);

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif
