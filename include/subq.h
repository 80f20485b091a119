/* subq: sub-quadratic attention for frozen LLMs. Public C API.
 *
 * Every call that can fail returns a subq_status and, when `err` is not NULL,
 * writes a one-line human-readable message into it. The library never exits
 * the process and keeps no global mutable state. */
#ifndef SUBQ_H
#define SUBQ_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The interface's version: MAJOR changes break programs built against an
 * older header, MINOR adds to it. subq_version() is the library's own,
 * for a program to compare with the header it was built with. */
#define SUBQ_VERSION_MAJOR 0
#define SUBQ_VERSION_MINOR 45
#define SUBQ_VERSION_PATCH 0
#define SUBQ_VERSION "0.45.0"

/* Marks a declaration a later MAJOR version removes (msg: what to use). */
#if defined(__GNUC__) || defined(__clang__)
#define SUBQ_DEPRECATED(msg) __attribute__((deprecated(msg)))
#else
#define SUBQ_DEPRECATED(msg)
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
    SUBQ_ERR_BUSY,        /* a file another process is writing (a KV file's lock) */
} subq_status;

#define SUBQ_ERROR_MSG_MAX 512
typedef struct subq_error {
    subq_status code;
    char msg[SUBQ_ERROR_MSG_MAX];
} subq_error;

/* SUBQ_VERSION of the library linked in ("0.45.0"). */
const char *subq_version(void);

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

/* How a loaded model holds its weights. Decode reads every weight once per
 * token: from memory in 2 MiB pages the weight GEMV runs ~1.3x faster than
 * from the 4 KiB pages of a file mapping (Qwen3-0.6B Q8_0, 2 threads). */
typedef enum subq_load_mode {
    SUBQ_LOAD_AUTO = 0, /* read in when the file takes at most half the available memory, else map */
    SUBQ_LOAD_MMAP,     /* map the file: starts at once, pages shared with the page cache */
    SUBQ_LOAD_READ,     /* read the file into memory in 2 MiB pages */
} subq_load_mode;

/* subq_model_load is subq_model_load_ex with SUBQ_LOAD_AUTO. */
subq_status subq_model_load_ex(const char *path, subq_load_mode mode, subq_model **out, subq_error *err);
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

/* Length (1..4) of the valid UTF-8 character (RFC 3629: no overlong forms,
 * no surrogates, nothing above U+10FFFF) that starts s[0..n), or 0 when the
 * bytes there start none (a truncated sequence included). */
int subq_utf8_len(const char *s, size_t n);

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

/* KV cache element types. q8_0 and q4_0 are llama.cpp's cache types: per
 * 32 values one fp16 scale and 8-bit / 4-bit integers (8.5 / 4.5 bits per
 * value), for heads whose width is a multiple of 32; heads of 2, 4, 8 or 16
 * values take one such block per head row (a finer block: 8 + 16/width and
 * 4 + 16/width bits per value); other widths are SUBQ_ERR_UNSUPPORTED. */
typedef enum subq_kv_type {
    SUBQ_KV_F32 = 0,
    SUBQ_KV_F16 = 1,
    SUBQ_KV_Q8_0 = 2,
    SUBQ_KV_Q4_0 = 3,
    SUBQ_KV_TYPE_COUNT
} subq_kv_type;

/* "f32", "f16", "q8_0", "q4_0" -> the type; -1 when unknown. */
int subq_kv_type_parse(const char *name);
/* The type's name ("?" when out of range). */
const char *subq_kv_type_name(subq_kv_type t);

/* The instruction set the kernels use on this CPU: "avx512-vnni", "avx2" or
 * "scalar" (the environment variable SUBQ_ISA=scalar|avx2|avx512 caps it,
 * to measure or test a lower level on a machine that has more). */
const char *subq_isa_name(void);

typedef struct subq_context_params {
    int n_ctx;          /* KV cache capacity in tokens (<= 0: model's training context); with
                           Phi-3's LongRoPE also which factors rotate: the long ones past
                           rope.scaling.original_context_length */
    int n_threads;      /* OpenMP threads (<= 0: all cores) */
    subq_kv_type kv_type;
    int n_batch;        /* most tokens per forward step: longer inputs of subq_decode run in
                           batches of this many (<= 0: 512; at most n_ctx) */
    const char *kv_file; /* NULL: the KV cache in memory. Else keys, values, token ids and the
                           sparse layers' search keys live in this file, mapped into memory and
                           read from disk where queries attend, so the context may exceed RAM;
                           created at its full size (n_ctx <= 0: the model's training context),
                           or an existing file of this model and KV type (n_ctx <= 0: its own)
                           whose committed tokens subq_context_resume continues from */
    int swa_full;       /* sliding-window layers (Gemma's local ones) keep every token's keys, as
                           llama.cpp's --swa-full; 0: only their window plus n_batch, so a long
                           context costs what its global layers need, but subq_context_truncate
                           cannot go back past the window (a KV file keeps every token) */
} subq_context_params;

subq_context_params subq_context_default_params(void);
/* Bytes of the KV cache a context made with p would hold in memory (rows,
 * positions, documents); SIZE_MAX-like huge when the KV type cannot hold
 * this model's heads. */
uint64_t subq_kv_cache_bytes(const subq_model *m, const subq_context_params *p);
subq_status subq_context_new(subq_model *m, const subq_context_params *p, subq_context **out,
                             subq_error *err);
void subq_context_free(subq_context *c);
/* Forget all cached tokens (and every sparse layer's index). */
void subq_context_reset(subq_context *c);
/* Number of tokens in the KV cache. */
int subq_context_n_past(const subq_context *c);
/* With a KV file: take up the tokens it has committed, as the last run
 * left them (KV rows in place, indexes rebuilt from the stored search keys,
 * last logits when stored). Set the attention plan the file was written
 * with first (another is SUBQ_ERR_MISMATCH). A context without a file, or
 * a new file, resumes nothing. */
subq_status subq_context_resume(subq_context *c, subq_error *err);
/* With a KV file: commit now (rows flushed to disk, then the header that
 * counts them). A context commits by itself after decodes, at most once a
 * second, and when freed; a process killed between commits loses only the
 * tokens after the last one. No-op without a file. */
subq_status subq_context_sync(subq_context *c, subq_error *err);
/* KV cache capacity in tokens, and the threads the context computes with. */
int subq_context_n_ctx(const subq_context *c);
/* The model a context runs. */
const subq_model *subq_context_model(const subq_context *c);
int subq_context_n_threads(const subq_context *c);
/* The fewest cached tokens subq_context_truncate keeps, 0 aside (starting
 * over): the sliding-window layers' rings hold the latest tokens' keys only
 * (see subq_context_params.swa_full); 0 when any count is fine. */
int subq_context_min_keep(const subq_context *c);
/* Most tokens per forward step (subq_context_params.n_batch). */
int subq_context_n_batch(const subq_context *c);
/* The type its KV cache stores. */
subq_kv_type subq_context_kv_type(const subq_context *c);

/* Run n tokens through the model, appending them to the KV cache at
 * positions n_past .. n_past+n-1. When `logits` is not NULL it receives
 * n_vocab floats per token if `all_logits`, else for the last token only. */
subq_status subq_decode(subq_context *c, const int32_t *tokens, int n, float *logits,
                        int all_logits, subq_error *err);

/* ---- KV files ---------------------------------------------------------- */

/* What a KV file (subq_context_params.kv_file) holds, read without a model. */
typedef struct subq_kv_file_info {
    uint64_t model_fingerprint; /* the model that wrote it (subq_model_info.fingerprint) */
    uint64_t file_bytes;
    subq_kv_type kv_type;
    int n_ctx, n_committed, has_logits;
    int n_layer, n_head_kv, head_dim, n_vocab, n_search_layers;
    double verify_s;            /* seconds the verification took (verify only) */
} subq_kv_file_info;
/* Read a KV file's header under a shared lock (a file a writer holds is
 * SUBQ_ERR_BUSY). With verify, also check every committed slot: its
 * checksum, and that its key, value and search rows and the last logits are
 * finite (SUBQ_ERR_FORMAT naming the first bad slot). A resume checks the
 * latest slots only (up to 1 GiB of them). */
subq_status subq_kv_file_inspect(const char *path, int verify, subq_kv_file_info *info, subq_error *err);

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
 * the cached tokens continues from there instead of prefilling again.
 * SUBQ_ERR_RANGE for 0 < n_keep < subq_context_min_keep. */
subq_status subq_context_truncate(subq_context *c, int n_keep, subq_error *err);
/* Save the cached tokens to a session file (atomically): the model's
 * fingerprint, context size, KV type, attention plan, token ids, KV rows,
 * the sparse layers' search keys and the last logits when known. */
subq_status subq_context_save(const subq_context *c, const char *path, subq_error *err);
/* Replace what c holds by a session file's tokens. A file of another
 * model, KV type or attention plan, or (Phi-3's LongRoPE) saved from a
 * context whose size took the other factors, is SUBQ_ERR_MISMATCH; more tokens than
 * the context holds SUBQ_ERR_RANGE. The indexes are rebuilt from the stored
 * keys, so decoding continues as it would have in the saved context. On
 * failure c is empty. */
subq_status subq_context_load(subq_context *c, const char *path, subq_error *err);
/* Replace what dst holds by src's cached tokens, KV rows and last logits,
 * with dst's own attention plan: its indexes are rebuilt over those rows,
 * search keys taken from src's layer of the same projections, score and
 * key storage (a sparse layer of dst with a search space needs one:
 * SUBQ_ERR_MISMATCH). One
 * dense prefill then serves several plans: what dst holds after the copy is
 * what a dense prefill of the same tokens under its plan leaves (HNSW
 * graphs up to insertion order). Same model and KV type, the same LongRoPE
 * factors (Phi-3: both contexts on one side of the original context), and
 * room for the tokens (SUBQ_ERR_MISMATCH, SUBQ_ERR_RANGE). On failure dst
 * is empty. */
subq_status subq_context_copy(subq_context *dst, const subq_context *src, subq_error *err);

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

/* ---- generation ------------------------------------------------------ */

/* Why subq_generate stopped. */
typedef enum subq_finish {
    SUBQ_FINISH_LENGTH,       /* n_predict tokens generated */
    SUBQ_FINISH_END_TOKEN,    /* an end token was sampled (it is not passed on) */
    SUBQ_FINISH_CALLER,       /* a callback returned nonzero */
    SUBQ_FINISH_CONTEXT_FULL  /* the KV cache has no room for the next token */
} subq_finish;

typedef struct subq_generate_params {
    int n_predict;                 /* most tokens to generate (>= 0) */
    subq_sampler_params sampler;
    int32_t end_tokens[2];         /* sampled ids that end the text (-1: none) */
    /* Called once the prompt is in the cache (n_reused of its tokens were
     * already there); may be NULL. Nonzero stops before the first token. */
    int (*on_prompt)(void *user, int n_reused);
    /* Called before each batch of the prompt is decoded (n_batch tokens at
     * a time, as subq_decode cuts them): n_reused tokens were in the cache,
     * n_done of the rest are decoded; may be NULL. Nonzero stops there
     * (SUBQ_FINISH_CALLER; the cache keeps the batches decoded): a server
     * whose client left, a progress bar. */
    int (*on_batch)(void *user, int n_reused, int n_done, int n_prompt);
    /* Called with each generated token and its bytes as subq_token_to_piece
     * gives them (a piece may end inside a UTF-8 character); may be NULL.
     * Nonzero stops after this token. */
    int (*on_token)(void *user, int32_t tok, const char *piece, size_t len);
    void *user;
} subq_generate_params;

typedef struct subq_generate_result {
    int n_reused;       /* prompt tokens the cache already held */
    int n_generated;    /* tokens passed to on_token */
    subq_finish finish;
} subq_generate_result;

/* The defaults of subq_sampler_default_params, 128 tokens, no end token. */
subq_generate_params subq_generate_default_params(void);
/* Continue a prompt: keep the longest prefix the context's cache shares
 * with it (all of it, with the logits, when the cache holds exactly this
 * prompt), decode the rest, then sample, pass on and decode one token at a
 * time. A full context ends the text (SUBQ_FINISH_CONTEXT_FULL), not an
 * error. The prompt must fit the context (SUBQ_ERR_RANGE) and not be empty
 * (SUBQ_ERR_ARG); on any error the context is emptied. The cache then holds
 * the prompt and every generated token but the last. */
subq_status subq_generate(subq_context *c, const int32_t *prompt, int n_prompt, const subq_generate_params *p,
                          subq_generate_result *res, subq_error *err);

/* ---- sparse attention: attention plans ------------------------------ */

/* How a sparse layer picks the keys each query attends to besides the
 * sinks and the recent tail. exact, hnsw and faiss rank keys in the learned
 * search space (they need search projections); quest bounds pages of native
 * keys (each query head its own pages, as in Quest), oracle takes the exact
 * top-K of a native score (subq_oracle_kind), window retrieves the K most
 * recent keys before the tail. */
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
 * f16 with search_f16), or int8 / int4 codes of them with one f32 scale per
 * key (132 / 68 bytes per 512 f32 bytes at d_search 128), whose best
 * K + min(3K, 1536) slots are re-ranked on the stored keys. */
typedef enum subq_scan { SUBQ_SCAN_FULL = 0, SUBQ_SCAN_INT8, SUBQ_SCAN_INT4, SUBQ_SCAN_COUNT } subq_scan;
/* "cosine" / "dot", "full" / "int8" / "int4" -> the value; -1 when unknown. */
int subq_score_parse(const char *name);
const char *subq_score_name(subq_score s);
int subq_scan_parse(const char *name);
const char *subq_scan_name(subq_scan s);

/* subq_attn_plan.sparse_prefill:
 *   DENSE:     full attention; the prompt's keys are indexed for decode.
 *   SPARSE:    each prompt token attends to the sinks, its local window (the
 *              tokens of its batch up to itself, at least the tail) and K keys
 *              retrieved from the batches before it: one index query per
 *              token, so a prompt costs ~linear time (batches of
 *              subq_context_params.n_batch tokens). With a completion
 *              (subq_complete) or a per-head selector (Quest per-head,
 *              the per-head oracle) it runs as TOKENWISE.
 *   TOKENWISE: token by token, each retrieving among every earlier key, as
 *              decode does (teacher forcing: what perplexity measures; slow). */
typedef enum subq_prefill_mode { SUBQ_PREFILL_DENSE = 0, SUBQ_PREFILL_SPARSE = 1, SUBQ_PREFILL_TOKENWISE = 2 } subq_prefill_mode;

/* What the oracle selector ranks:
 *   HEADMEAN_DOT     the head-mean of the heads' logits, (1/H) sum_h q_h . k
 *   HEADMEAN_COSINE  the cosine of the head-mean q and the head-mean k
 *                    (ann-sparseattention's raw-QK oracle)
 *   PER_HEAD         each query head its own exact top-K of q_h . k, and
 *                    each head attends its own keys */
typedef enum subq_oracle_kind {
    SUBQ_ORACLE_HEADMEAN_DOT = 0,
    SUBQ_ORACLE_HEADMEAN_COSINE,
    SUBQ_ORACLE_PER_HEAD,
    SUBQ_ORACLE_COUNT
} subq_oracle_kind;

/* "headmean-dot", "headmean-cosine", "per-head" -> kind; -1 when unknown. */
int subq_oracle_parse(const char *name);
const char *subq_oracle_name(subq_oracle_kind k);

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
    int sparse_prefill;            /* how a prompt (a batch of several tokens) attends; one-token
                                      steps are sparse in every mode (SUBQ_PREFILL_DENSE) */
    int hnsw_m, hnsw_ef_construction, hnsw_ef_search; /* 32, 40, 64 */
    int quest_page;                /* tokens per Quest page (16) */
    int quest_headmean;            /* quest: 1 = one page set per query from the bound of the
                                      head-mean q.k; 0 = each query head its own pages (0) */
    subq_oracle_kind oracle;       /* oracle: what it ranks (SUBQ_ORACLE_HEADMEAN_DOT) */
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
#define SUBQ_SEARCH_MAX_D 65536 /* widest search space */
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
/* The top-K a merged model file asks for ({arch}.attention.indexer.top_k);
 * 0 when the projections carry none. */
int subq_search_top_k(const subq_search *s);
/* The rotary part of the search space: the last rope_dims dims of q_s and
 * k_s rotate by the token's position (angles pos * rope_scale *
 * rope_base^(-2i/rope_dims); 0 dims: position-free), as the file says. Set
 * changes it before a plan uses s: position interpolation when serving past
 * the trained length (rope_scale 1/4 at 4x the length), or a rotated
 * stand-in for speed tests. SUBQ_ERR_ARG when the values do not fit (dims
 * odd or above d_search, base <= 1, scale <= 0). */
void subq_search_get_rope(const subq_search *s, int *rope_dims, float *rope_base, float *rope_scale);
subq_status subq_search_set_rope(subq_search *s, int rope_dims, float rope_base, float rope_scale, subq_error *err);

/* ---- search projections inside model files --------------------------- */

/* ann-sparseattention's llama.cpp runtime reads learned projections merged
 * into the model GGUF: blk.{i}.indexer.proj.weight (W_Qs) and
 * blk.{i}.indexer.attn_k.weight (W_Ks), f16, ne = {d_model, d_search}, with
 * {arch}.attention.indexer.head_count (1), .key_length (d_search) and .top_k
 * and ann_sparse.layers. subq reads such a model (matrices in any element
 * type it can dequantise, so a merged model re-quantised by llama-quantize
 * too), writes one from a projection file and extracts the projections back. Merged projections do not change the model's fingerprint, so files
 * made for the base model fit the merged one and the other way round. */

/* What a GGUF file carries: a projection file (merged = 0) or a model file
 * with merged projections (merged = 1). SUBQ_ERR_RANGE when it carries none;
 * malformed projections give the error loading them would. */
typedef struct subq_search_info {
    int merged;
    int d_search;
    int n_layers;          /* layers with projections ... */
    char layers[256];      /* ... as a layer list, e.g. "3-34" or "4,8,12" */
    int top_k;             /* merged: {arch}.attention.indexer.top_k; 0 when absent */
    char type[8];          /* element type of the matrices ("f32", "f16", "q8_0", ...; "mixed") */
    char arch[32];         /* merged: the model's architecture ("qwen3", ...) */
    int rope_dims;         /* the last rope_dims dims of the search space rotate by position (0: none) */
    float rope_base, rope_scale; /* its frequency base and position scale (when rope_dims > 0) */
} subq_search_info;
subq_status subq_search_info_file(const char *path, subq_search_info *out, subq_error *err);

/* The projections merged into m's own file; *out is NULL (and SUBQ_OK) when
 * it carries none. */
subq_status subq_search_from_model(const subq_model *m, subq_search **out, subq_error *err);

typedef struct subq_merge_params {
    int top_k;             /* written as {arch}.attention.indexer.top_k (128, the merge script's default) */
    const char *type;      /* "f16" (as the merge script writes), "f32" or "bf16" */
} subq_merge_params;
subq_merge_params subq_merge_default_params(void);

/* Write the model file model_path with the projections of search_path (a
 * projection file made for this model, or another merged model file of the
 * same weights) merged in, to out_path, atomically: every tensor and key of
 * the model unchanged, earlier merged projections replaced, the projection
 * file's subq.search.* metadata carried along. */
subq_status subq_search_merge(const char *model_path, const char *search_path, const subq_merge_params *p,
                              const char *out_path, subq_error *err);
/* Write the projections merged into merged_path as a projection file (for
 * the model's weights, with the metadata a merge carried), atomically.
 * SUBQ_ERR_RANGE when it carries none. */
subq_status subq_search_split(const char *merged_path, const char *out_path, subq_error *err);

/* Completion maps (learned positive feature maps that add the attention
 * mass of the keys a sparse layer does not retrieve), for one model. */
typedef struct subq_complete subq_complete;
subq_status subq_complete_load(const char *path, const subq_model *m, subq_complete **out, subq_error *err);
void subq_complete_free(subq_complete *c);
/* 1 if the file stores per-head mid-region entropies (complete_min_entropy
 * in a plan needs them). */
int subq_complete_has_entropy(const subq_complete *c);

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
    uint64_t select_bytes_read; /* bytes the selectors' queries read (exact: the search
                                   keys scanned; hnsw/faiss: distances x vector bytes, an
                                   estimate; quest/oracle: page bounds and native keys) */
    double t_fill_kv_s;   /* subq_context_fill_synthetic's writing of the keys and values
                             (its selectors' keys not included) */
} subq_context_stats;
void subq_context_get_stats(const subq_context *c, subq_context_stats *st);

/* Bytes of the KV cache one decode step reads when its query sees n_keys
 * cached tokens (its own included), over all layers: keys and values of
 * every KV head, all n_keys rows in a full-attention layer, the attended
 * rows (sinks + tail + K, at most n_keys) in a sparse one. With the model's
 * decode_bytes and the selectors' bytes read it gives the bytes a decode
 * step must read, whose time at the memory bandwidth bounds its speed. */
uint64_t subq_context_decode_kv_bytes(const subq_context *c, int n_keys);

/* The rate, in GB/s (best of `reps` passes over the context's threads), at
 * which this machine reads the context's KV cache as filled: the keys and
 * values of slots 0 .. n_used-1 of every layer, summed as 64-bit words; 0
 * when the cache is empty, its rows are not whole words (narrow q4_0) or
 * it is too small (under 64 MiB) for a pass to time memory rather than the
 * threads' start-up and the CPU's caches, or it lives in a KV file (a pass
 * would time the disk, reading the whole file, larger than memory maybe).
 * Memory bandwidth depends on where pages lie (on the virtual machines we
 * measure, fresh 1 GiB buffers read at 33 to 68 GB/s depending on the
 * process's footprint), so a decode step's bandwidth bound is best taken on
 * the memory it streams. */
double subq_context_kv_read_gbs(const subq_context *c, int reps);

/* Fill an empty context with n_past synthetic tokens: random keys and values
 * in the KV cache (4096 random slots per layer, repeated), random search
 * keys in every sparse layer's index. Decode speed does not depend on the
 * values, and a real prefill of a long context takes far longer than a
 * speed measurement (benchmarks only). */
subq_status subq_context_fill_synthetic(subq_context *c, int n_past, uint64_t seed, subq_error *err);
/* With a KV file: commit, then drop the file's pages from memory (this
 * process's mapping and the page cache), so that the next reads come from
 * the disk: cold-cache measurements. No-op without a file. */
subq_status subq_context_kv_evict(subq_context *c, subq_error *err);

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

/* ---- evaluation: sparse vs full attention on held-out text ------------ */

/* For every selector at every K (or KV-read budget), selection only and with
 * completion: perplexity and its gap to full attention, the paired NLL
 * difference, KL(p_full || p_method) and top-1 agreement (95% block-bootstrap
 * intervals over windows), retrieval mass and recall (today's head-mean and
 * the seed's per-head definitions), ANN recall vs exact, filler rate,
 * completion share; optionally each sparse layer substituted alone; and a
 * dynamic vs static index comparison. Only plain data comes back. */
typedef enum subq_eval_completion {
    SUBQ_EVAL_SELECTION = 0,    /* selection only */
    SUBQ_EVAL_HYBRID,           /* with completion, at the same K */
    SUBQ_EVAL_HYBRID_WORST,     /* with completion, the budget paying the cache fetch every step */
    SUBQ_EVAL_HYBRID_AMORTISED, /* with completion, the fetch amortised over the window */
} subq_eval_completion;

typedef struct subq_eval_method {
    int select;                    /* subq_selector_kind */
    int k;
    subq_eval_completion completion;
    double budget_pct;             /* NAN without budgets */
    double reads;                  /* token-equivalent KV reads per step, layer and KV head */
    double ppl, gap;               /* gap = ppl / full ppl - 1 */
    double nll_diff, nll_diff_lo, nll_diff_hi; /* mean NLL(method) - NLL(full) per token, 95% interval */
    double kl, kl_lo, kl_hi;       /* mean KL(p_full || p_method) per token in nats, 95% interval */
    double top1;                   /* share of tokens whose argmax equals full attention's */
    double mass, recall, mass_seed, recall_seed, ann_recall, filler, share; /* NAN where not measured */
    double *layer_mass, *layer_recall, *layer_mass_seed, *layer_recall_seed; /* [n_layer], NAN on dense layers */
    /* [n_layer]: this method on that layer alone, the others full; NAN on
     * dense layers and without per_layer */
    double *layer_kl, *layer_kl_lo, *layer_kl_hi, *layer_top1;
    double *win_nll;               /* [n_windows]: NLL summed over each window's scored tokens */
} subq_eval_method;

typedef struct subq_eval_skip {         /* a budget the fixed reads alone exceed */
    double budget_pct, budget_reads;
    subq_eval_completion completion;
    double fixed_reads;
} subq_eval_skip;

typedef struct subq_eval_static {
    int method;                    /* index of the method run with a frozen index; -1: off */
    double split;
    double ppl_full, ppl_dynamic, ppl_static; /* perplexity of the suffix tokens */
    double kl_dynamic, kl_static;  /* their mean KL vs full attention */
} subq_eval_static;

typedef struct subq_eval_result {
    int n_layer, n_windows, ctx;
    unsigned char *sparse_layers;  /* [n_layer] */
    int64_t n_scored;              /* next tokens scored (same document) */
    int64_t *win_n;                /* [n_windows]: scored tokens per window */
    double full_ppl;
    double *full_win_nll;          /* [n_windows] */
    int n_methods;
    subq_eval_method *methods;
    int n_skipped;
    subq_eval_skip *skipped;
    subq_eval_static stat;
    double seconds;
} subq_eval_result;

/* Called after each forward pass over a window: done of total. */
typedef void (*subq_eval_progress_fn)(void *user, int64_t done, int64_t total);

typedef struct subq_eval_params {
    /* held-out text: the held-out split (eval_frac of the pieces) of files,
     * plus every piece of eval_files; windows of ctx tokens, pieces packed
     * block-causally when pack; at most max_windows windows */
    const char *const *files;
    int n_files;
    const char *const *eval_files;
    int n_eval_files;
    int ctx, pack, max_windows;       /* 512, 1, 32 */
    float eval_frac;                  /* 0.05 */
    /* methods: each selector at each K, or at the K each budget (% of the
     * window, rounded up to whole tokens) leaves after sinks and tail;
     * selection only, and with completion when `complete` is given */
    const subq_selector_kind *selectors;
    int n_selectors;
    const int *ks;
    int n_k;
    const double *budgets;            /* n_budgets > 0 replaces ks and needs completion maps */
    int n_budgets;
    /* sinks, tail, layers, selector parameters and completion heads of every
     * method (its selector and top_k are set per method) */
    subq_attn_plan plan;
    const subq_search *search;        /* NULL: only selectors without a search space */
    const subq_complete *complete;    /* NULL: selection only */
    double static_split;              /* > 0: static index frozen at this fraction of each window (0.5) */
    int per_layer;                    /* also every sparse layer substituted alone (0) */
    int n_resamples;                  /* bootstrap resamples (1000) */
    uint64_t seed;                    /* bootstrap seed */
} subq_eval_params;

subq_eval_params subq_eval_default_params(void);
/* Run on context c (its KV cache holds at least p->ctx tokens; its plan is
 * cleared on return); *out is freed with subq_eval_result_free. */
subq_status subq_eval_run(subq_context *c, const subq_eval_params *p, subq_eval_progress_fn progress, void *user,
                          subq_eval_result **out, subq_error *err);
void subq_eval_result_free(subq_eval_result *r);
/* "exact@64", "quest@32+phi", "exact@41+phiA" (amortised budget), "exact@21+phi1" (worst case). */
const char *subq_eval_method_name(const subq_eval_method *m, char *buf, size_t cap);
/* Mean per-token NLL difference of methods a and b (-1: full attention)
 * and its 95% block-bootstrap interval. */
subq_status subq_eval_compare(const subq_eval_result *r, int a, int b, int n_resamples, uint64_t seed, double *mean,
                              double *lo, double *hi, subq_error *err);

/* ---- training: search projections and completion maps ---------------- */

/* Training data: documents from text files, directories of them and JSON
 * lines ({"text": ...} per line), tokenised with the model's tokenizer, cut
 * into pieces of at most seq tokens, packed block-causally; a fixed share
 * of the pieces (or the pieces of evaluation files) is held out. Or a
 * pre-tokenised corpus file (subq_corpus_save) as the only path: nothing is
 * tokenised, and only the tokens of the sequences a process asks for are
 * read from it (each data-parallel rank its share); the pieces, split and
 * packing are those of the text it was made from. */
typedef struct subq_corpus subq_corpus;
typedef struct subq_corpus_params {
    int seq;            /* max tokens per sequence, BOS included (>= 2) */
    int pack;           /* 1: pack pieces into sequences; 0: one piece per sequence */
    float eval_frac;    /* fraction of pieces held out when no eval files were added */
    uint64_t seed;      /* order of the training pieces before packing */
    int eval_only;      /* evaluation needs no training split (else an empty one is an error) */
} subq_corpus_params;

subq_status subq_corpus_load(const subq_model *m, const subq_corpus_params *p, const char *const *paths, int n_paths,
                             const char *const *eval_paths, int n_eval, subq_corpus **out, subq_error *err);
void subq_corpus_free(subq_corpus *c);
/* Write the documents of a corpus loaded from text (tokens, lengths,
 * held-out marks; no packing) to a pre-tokenised corpus file (GGUF,
 * atomic). */
subq_status subq_corpus_save(const subq_corpus *c, const char *path, subq_error *err);
typedef struct subq_corpus_info {
    int n_docs, n_eval_docs;     /* documents for training / given as held-out */
    int64_t n_tokens;            /* of all documents, no BOS */
    int64_t train_tokens, eval_tokens; /* in the packed splits, BOS included */
    int from_file;               /* a pre-tokenised corpus file */
    int64_t file_tokens_read;    /* tokens this process has read from that file so far */
    uint64_t fingerprint;        /* documents, split and packing (checkpoints record it) */
} subq_corpus_info;
void subq_corpus_get_info(const subq_corpus *c, subq_corpus_info *out);

/* Layer lists as plans take them ("all", "none", "1,3,5-7", negative from
 * the end: "2--1"): mask[l] = 1 for each listed layer of n_layer. */
subq_status subq_parse_layers(const char *s, int n_layer, unsigned char *mask, subq_error *err);
/* The same for model m, keeping the listed layers where sparse attention
 * applies: those that attend to the whole context, not Gemma's sliding-window
 * ones ("global" lists them all); a list of sliding layers only is refused. */
subq_status subq_model_parse_layers(const subq_model *m, const char *s, unsigned char *mask, subq_error *err);

#define SUBQ_TRAIN_MAX_PARTS 6
#define SUBQ_SEARCH_EVAL_MAX_K 16
#define SUBQ_PHI_DIAG_MAX_K 16

/* Data-parallel training (over MPI, say): `size` processes run the same
 * training call with the same options, model and data; rank r trains on
 * sequences r, r + size, ... of every step (the step still averages over
 * batch x grad_accum sequences, so any number of ranks follows the same
 * trajectory as one, up to float rounding) and evaluates its share of the
 * held-out sequences; gradients and loss sums are summed over the ranks.
 * Only rank 0 writes the output and checkpoints. A checkpoint resumes with
 * any number of ranks. Ranks whose options, model or data differ from rank
 * 0's fail at the start naming the difference. */
typedef struct subq_train_comm {
    int rank, size;
    void *user;
    /* x[0..n) summed over the ranks in place, the same result on every rank;
     * 0, or nonzero when a rank cannot be reached (the run then fails) */
    int (*sum)(void *user, double *x, size_t n);
    /* rank 0's `bytes` bytes at buf copied into every rank's buf; 0 or nonzero as sum */
    int (*bcast)(void *user, void *buf, size_t bytes);
} subq_train_comm;

typedef struct subq_train_params {
    const int *layers;          /* target layers (distinct, any order) */
    int n_layers;
    int batch;                  /* sequences per micro-batch (1) */
    int grad_accum;             /* micro-batches per step (1): the step averages over batch x grad_accum sequences */
    float lr;                   /* peak learning rate */
    float weight_decay;
    float beta1, beta2, eps;    /* AdamW: 0.9, 0.999, 1e-8 */
    float grad_clip;            /* global gradient-norm clip (1.0; <= 0: off) */
    int warmup;                 /* linear warm-up steps, then cosine decay to 0 */
    int64_t steps;              /* total steps (the schedule spans them) */
    int64_t stop_after;         /* > 0: stop (with a checkpoint) once this step is reached */
    uint64_t seed;              /* initial weights and data order */
    int eval_every;             /* evaluate before step 1 and every N steps (0: only at the end) */
    int64_t eval_tokens;        /* held-out tokens per evaluation (<= 0: all) */
    int save_every;             /* steps between checkpoints (0: only at the end) */
    const char *out_path;       /* the weights; the checkpoint is out_path + ".ckpt" */
    int resume;                 /* continue from the checkpoint */
    int n_threads;              /* <= 0: all cores */
    int n_ubatch;               /* tokens per forward batch of the frozen model (<= 0: the whole sequence,
                                   where train-search's teacher gives each target layer's attention) */
    const subq_train_comm *comm; /* data-parallel ranks; NULL: this process alone */
} subq_train_params;

typedef struct subq_train_start_info {
    int64_t start_step;         /* > 0 when resumed */
    int resumed;
    int n_train_seq, n_eval_seq;
    int64_t train_tokens, eval_tokens;
    int n_threads;
    size_t n_params;
    int n_parts;                /* the loss parts of this task, as named in the stats */
    const char *const *part_names;
} subq_train_start_info;

typedef struct subq_train_step_stats {
    int64_t step, steps;        /* steps done after this one, total */
    float lr;
    double loss;                /* the objective: mean over the step's (layer, query) terms */
    double part[SUBQ_TRAIN_MAX_PARTS]; /* means of its parts */
    double grad_norm;           /* before clipping */
    int64_t tokens, queries;    /* in this step */
    double tok_per_s;           /* training throughput of this run so far */
    double gflop_per_s;         /* counted work of this run so far (the frozen forward, and what the
                                   task counts: 0 when it counts nothing) / its time, in GFLOP/s */
    double elapsed_s;
} subq_train_step_stats;

typedef struct subq_train_eval_layer {
    int layer;
    double loss, part[SUBQ_TRAIN_MAX_PARTS]; /* means over the layer's held-out queries */
    int64_t n_queries;
} subq_train_eval_layer;

typedef struct subq_retrieval_eval {
    int n_k;
    int k[SUBQ_SEARCH_EVAL_MAX_K];
    int64_t n_queries[SUBQ_SEARCH_EVAL_MAX_K];
    double mass_learned[SUBQ_SEARCH_EVAL_MAX_K], mass_oracle[SUBQ_SEARCH_EVAL_MAX_K];
    double recall_learned[SUBQ_SEARCH_EVAL_MAX_K], recall_oracle[SUBQ_SEARCH_EVAL_MAX_K];
    double mass_window[SUBQ_SEARCH_EVAL_MAX_K], recall_window[SUBQ_SEARCH_EVAL_MAX_K];
} subq_retrieval_eval;

typedef struct subq_train_eval_stats {
    int64_t step;
    int n_layers;
    const subq_train_eval_layer *layers;
    /* search projections: retrieval metrics per layer (sums, divide by n_queries[k]); else NULL */
    const subq_retrieval_eval *retrieval;
    int n_seq;
    int64_t n_tokens;
    double loss, part[SUBQ_TRAIN_MAX_PARTS]; /* means over layers */
    double seconds;
} subq_train_eval_stats;

typedef struct subq_train_hooks {
    void *user;
    /* after the checkpoint (if any) is restored; a non-zero return stops the
     * run before its first step, nothing written (SUBQ_ERR_IO) */
    int (*on_start)(void *user, const subq_train_start_info *info);
    void (*on_step)(void *user, const subq_train_step_stats *s);
    void (*on_eval)(void *user, const subq_train_eval_stats *e);
    void (*on_save)(void *user, int64_t step, const char *ckpt_path);
    /* polled between steps; when it becomes non-zero the run saves a
     * checkpoint and returns with result.interrupted = 1 */
    const volatile sig_atomic_t *stop;
} subq_train_hooks;

typedef struct subq_train_result {
    int64_t step;               /* steps done */
    int interrupted;            /* stopped by hooks->stop */
    int stopped_early;          /* stopped by stop_after */
    double tok_per_s;           /* training throughput (teacher + losses + update) */
    double gflop_per_s;         /* counted work / time (subq_train_step_stats) */
    double train_s, comm_s;     /* training time, and the part of it spent summing over ranks */
    int64_t train_tokens;       /* tokens trained on in this run */
} subq_train_result;

/* How the teacher aggregates query heads: max over heads, or their mean. */
typedef enum subq_teacher_agg { SUBQ_TEACHER_AGG_MAX = 0, SUBQ_TEACHER_AGG_MEAN = 1 } subq_teacher_agg;

typedef struct subq_search_loss_params {
    float tau;        /* InfoNCE temperature (0.07) */
    float tau_kl;     /* KL student temperature (1.0) */
    float alpha;      /* InfoNCE weight (1) */
    float beta;       /* KL weight (1) */
    int k_pos;        /* teacher top-k positives (16) */
    subq_teacher_agg agg;  /* head aggregation of the teacher */
    int n_sink;       /* first keys of each document left out of the retrieval set (4, as served) */
    int n_tail;       /* most recent keys, the query included, left out of it (16, as served) */
} subq_search_loss_params;

typedef struct subq_train_search_params {
    subq_train_params train;         /* 1000 steps, lr 1e-4, wd 0.01, warmup 100, eval/save every 200, eval_tokens 32768 */
    int d_search;               /* 32 (128 is the better choice for d_model >= 1024) */
    /* position in the search space: the last rope_dims of the d_search dims
     * of q_s and k_s rotate by the token's position in its document, at
     * angles pos * rope_scale * rope_base^(-2i/rope_dims), as RoPE does */
    int rope_dims;              /* -1 (default): half of d_search; 0: position-free */
    float rope_base, rope_scale;     /* 10000, 1 */
    /* start from the projections of this file (same width, layers and
     * rotation; e.g. trained at a shorter --seq) instead of random ones;
     * NULL: random. A resumed run takes its checkpoint's weights. */
    const char *init_from;
    subq_search_loss_params loss;    /* tau .07, tau_kl 1, alpha 1, beta 1, k_pos 16, max, n_sink 4, n_tail 16;
                                 * n_sink / n_tail also restrict the evaluation's key set */
    float init_std;             /* 0.02 */
    int eval_k[SUBQ_SEARCH_EVAL_MAX_K];
    int n_eval_k;               /* 8, 16, 32, 64 */
} subq_train_search_params;

typedef struct subq_phi_loss_params {
    int n_sink, n_tail;          /* 4, 16 */
    double tau;                  /* 1 */
    double l_kl;                 /* 0.99 */
    double l_top, l_fp, l_z;     /* 1, 2, 4 */
    double band;                 /* Delta: 8 */
    double huber;                /* delta: 1 */
} subq_phi_loss_params;

#define SUBQ_PHI_MAX_DIM 1024 /* largest d_emb, d_hidden, d_phi (and head_dim) of completion maps */

/* The parts of the completion-map loss, as they appear in the stats' part[]. */
enum { SUBQ_PHI_PART_KL, SUBQ_PHI_PART_TOP, SUBQ_PHI_PART_FP, SUBQ_PHI_PART_Z, SUBQ_PHI_PART_LSE, SUBQ_PHI_N_PARTS };

typedef struct subq_train_phi_params {
    subq_train_params train;         /* 500 steps, lr 1e-3, wd 0, warmup 50, eval/save every 100, eval_tokens 16384 */
    int d_emb, d_hidden, d_phi; /* 32, 64, 32 */
    subq_phi_loss_params loss;       /* the defaults above */
    float wo_std;               /* 0.5: Wo ~ N(0, wo_std^2 / d_emb) */
} subq_train_phi_params;

typedef struct subq_complete_diag_cell {
    int64_t n;
    double hmid, err_sel[SUBQ_PHI_DIAG_MAX_K], err_hyb[SUBQ_PHI_DIAG_MAX_K], share[SUBQ_PHI_DIAG_MAX_K];
    double win[SUBQ_PHI_DIAG_MAX_K];  /* fraction of records where hybrid < selection-only */
    double harm[SUBQ_PHI_DIAG_MAX_K]; /* mean of max(0, err_hyb - err_sel): what completion costs where it hurts */
    double err_sweep[SUBQ_PHI_DIAG_MAX_K];
} subq_complete_diag_cell;

typedef struct subq_complete_diag_options {
    const char *maps_path;       /* the maps to measure */
    int windows;                 /* at most this many held-out windows (32) */
    int ks[SUBQ_PHI_DIAG_MAX_K];      /* hybrid vs selection-only (8, 16, 32) */
    int n_k;
    int sel_ks[SUBQ_PHI_DIAG_MAX_K];  /* selection-only sweep (8, 16, 24, 32, 48, 64, 96, 128, 192) */
    int n_sel_k;
    int n_sink, n_tail;          /* 4, 16 */
    int ppl;                     /* also perplexities */
    int annotate;                /* store each head's mean H_mid in the maps file */
    int n_threads;               /* <= 0: all cores */
} subq_complete_diag_options;

typedef struct subq_complete_diag_report {
    int d_phi, head_dim, n_head, n_sel;
    int *layers;                 /* [n_sel] */
    int n_windows;
    int64_t n_tokens, n_records;
    int min_mid;
    double fetch_tokens;         /* the cache's one-time fetch in token-equivalent KV reads */
    int fetch_k;                 /* ceil(fetch_tokens) */
    double seconds;
    subq_complete_diag_cell all, quartile[4];
    double quartile_bounds[5];   /* H_mid quartile bins: [-inf, q1, q2, q3, +inf] */
    subq_complete_diag_cell *heads;        /* [n_sel][n_head] */
    /* the smallest swept K' whose mean selection-only error is <= the
     * hybrid's at ks[i]; -1 when none is */
    int match_k[SUBQ_PHI_DIAG_MAX_K];
    /* perplexity (ppl): full, then per K selection-only, hybrid, selection-only
     * at K + fetch_k (the same reads when the fetch is paid every step: the
     * pessimistic matched budget) and the hybrid's mean completion share */
    int64_t n_scored;
    double ppl_full, ppl_sel[SUBQ_PHI_DIAG_MAX_K], ppl_hyb[SUBQ_PHI_DIAG_MAX_K], ppl_match[SUBQ_PHI_DIAG_MAX_K];
    double share[SUBQ_PHI_DIAG_MAX_K];
} subq_complete_diag_report;

typedef struct subq_complete_diag_hooks {
    void *user;
    void (*on_stage)(void *user, const char *name, int64_t total);
    void (*on_progress)(void *user, int64_t done);
} subq_complete_diag_hooks;


/* "max" / "mean"; parse: -1 for anything else. */
const char *subq_teacher_agg_name(subq_teacher_agg a);
int subq_teacher_agg_parse(const char *s);

/* Defaults as listed in each struct (layers, steps and out_path to set). */
subq_train_search_params subq_train_search_default_params(void);
subq_train_phi_params subq_train_phi_default_params(void);

/* Learn search projections (W_Qs, W_Ks of params->train.layers) by
 * distillation from the frozen model's attention (InfoNCE over the teacher's
 * top keys + KL), AdamW, evaluation on the held-out split; OUT and OUT.ckpt
 * (resumable bit for bit) written atomically. hooks may be NULL. */
subq_status subq_train_search(subq_model *m, const subq_corpus *data, const subq_train_search_params *p,
                              const subq_train_hooks *hooks, subq_train_result *res, subq_error *err);
/* Learn completion maps the same way (distillation of the attention logits). */
subq_status subq_train_phi(subq_model *m, const subq_corpus *data, const subq_train_phi_params *p,
                           const subq_train_hooks *hooks, subq_train_result *res, subq_error *err);
/* Testing aids for the numpy references: the first training sequence's
 * teacher (search) or features, losses and gradient (phi), as a GGUF. */
subq_status subq_train_search_dump(subq_model *m, const subq_corpus *data, const subq_train_search_params *p,
                                   const char *path, subq_error *err);
subq_status subq_train_phi_dump(subq_model *m, const subq_corpus *data, const subq_train_phi_params *p,
                                const char *path, subq_error *err);

/* Measure completion maps on the held-out windows of a corpus: attention
 * error of the hybrid vs selection only per K, layer and head, mid-region
 * entropies, optionally perplexities; with `annotate` store each head's mean
 * entropy in the maps file (for complete_min_entropy). hooks may be NULL. */
subq_status subq_complete_diagnose(subq_model *m, const subq_corpus *data, const subq_complete_diag_options *o,
                                   const subq_complete_diag_hooks *hooks, subq_complete_diag_report *out,
                                   subq_error *err);
void subq_complete_diag_report_free(subq_complete_diag_report *r);

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
/* The same from a context that already holds exactly the prompt and its
 * last logits (after subq_decode of it, or subq_context_copy from one that
 * did): one dense prefill answered under several plans. */
subq_status subq_recall_continue(subq_context *c, const subq_recall_prompt *pr, int max_new, char *answer,
                                 size_t cap, double *score, subq_error *err);
/* 1 when two answers state the same first n numbers (maximal digit runs)
 * in the same order, n being the values the prompt asks for (what follows
 * them does not count): agreement between a method's answer and full
 * attention's. */
int subq_recall_same_answer(const char *a, const char *b, int n);

/* A grid of recall prompts (lengths x depths x trials) answered by several
 * methods side by side, every method on the same prompts. */
typedef struct subq_recall_method {
    char name[48];            /* "full", "exact@64", "hnsw@32+phi" */
    int full;                 /* 1: full attention (the fields below unused) */
    subq_attn_plan plan;      /* its sparse_prefill is the grid's */
    const subq_search *search;
    const subq_complete *complete;
} subq_recall_method;

/* "full" or SELECTOR@K[+phi] -> out->name, full, plan.selector, plan.top_k
 * and *complete (1 for +phi); the rest of out is left as it was.
 * SUBQ_ERR_ARG for anything else, SUBQ_ERR_UNSUPPORTED for a selector this
 * build lacks. */
subq_status subq_recall_method_parse(const char *name, subq_recall_method *out, int *complete, subq_error *err);

typedef struct subq_recall_grid_params {
    const int *lengths;       /* prompt lengths in tokens */
    int n_lengths;
    const double *depths;     /* needle depths in [0, 1] */
    int n_depths;
    int trials;               /* prompts per cell */
    int max_new;              /* answer tokens at most */
    int sparse_prefill;       /* 1: each method prefills each prompt under its plan;
                                 0: one dense prefill per prompt, copied into every method's context */
    const char *prefill_kv_file; /* with the dense prefill: NULL, its KV cache in memory; else in this
                                    file (subq_context_params.kv_file), which must not exist: it is
                                    created for the grid and removed at its end */
    const subq_recall_method *methods;
    int n_methods;
    /* called after each answer (progress, logs); may be NULL */
    void (*on_answer)(void *user, int method, int length_i, int depth_i, int trial, const subq_recall_prompt *pr,
                      const char *answer, double score);
    void *user;
} subq_recall_grid_params;

/* Per method and cell (length-major: cell = length_i * n_depths + depth_i),
 * sums over the trials. */
typedef struct subq_recall_grid {
    int n_methods, n_cells;
    int full_method;          /* index of full attention among the methods; -1: none */
    double *score;            /* [n_methods * n_cells] scores (subq_recall_score) */
    int *exact;               /* trials with every value recalled */
    int *agree;               /* trials answered with full attention's numbers (NULL without full) */
} subq_recall_grid;

/* Run the grid in context c (its plan is replaced for each method; it must
 * hold the longest prompt and max_new more tokens; its threads, batch and KV
 * type serve the dense prefill too). Full attention answers each prompt
 * first, so every other method's answer can be compared with it. */
subq_status subq_recall_run_grid(subq_context *c, const subq_recall *r, const subq_recall_grid_params *p,
                                 subq_recall_grid *out, subq_error *err);
void subq_recall_grid_free(subq_recall_grid *g);

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

/* For a model file of an architecture subq runs: the RoPE it would run it
 * with (scaling, frequency factors), or "cannot run: REASON", into buf;
 * returns 1. Other files (projections, maps, sessions): 0, buf untouched. */
int subq_gguf_describe_rope(const subq_gguf *f, char *buf, size_t cap);
/* The same for its layers' attention: scale, sliding windows and global
 * layers, layers without RoPE, soft caps ("26 layers at scale 0.0625, 22
 * sliding over 512 keys (RoPE base 10000, no scaling), 4 global (5, 11, 17, 23)"). */
int subq_gguf_describe_attention(const subq_gguf *f, char *buf, size_t cap);

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

/* Read a whole file into a malloc'd, NUL-terminated buffer (*len excludes
 * the NUL): a regular file by its size, which must be at most `limit` bytes
 * (0: half the memory available now); a stream (pipe, FIFO, character
 * device) up to min(limit, SUBQ_READ_STREAM_MAX) bytes, waiting at most
 * SUBQ_READ_IDLE_S seconds (the environment variable of that name, when
 * set) for each piece of data, so a FIFO nobody writes to is an error
 * rather than a hang. Larger inputs are SUBQ_ERR_RANGE, a
 * directory SUBQ_ERR_ARG, read errors SUBQ_ERR_IO; all name the path. */
#define SUBQ_READ_STREAM_MAX ((size_t)1 << 30)
#define SUBQ_READ_IDLE_S 60
subq_status subq_read_file(const char *path, size_t limit, char **out, size_t *len, subq_error *err);
/* Write len bytes to path atomically (a temporary file beside it, fsync,
 * rename), as every file the library writes: readers see the old file or
 * the whole new one. An existing regular file or symbolic link is replaced
 * (a link itself: nothing is written through it); a device, FIFO or
 * directory is refused (SUBQ_ERR_ARG). */
subq_status subq_write_file(const char *path, const void *data, size_t len, subq_error *err);
/* Read a file, or every file under a directory (name order, hidden names
 * skipped, 16 levels at most), as subq_read_file does, into one text with
 * the files apart by a blank line (a recall haystack, say). */
subq_status subq_read_texts(const char *path, char **out, size_t *len, subq_error *err);

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif
