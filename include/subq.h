/* subq: sub-quadratic attention for frozen LLMs. Public C API: the engine
 * (models, tokenizers, contexts and their KV caches, attention plans,
 * sampling, generation). What is built on it to measure and train it
 * (perplexity, evaluation, training, recall, benchmark probes, GGUF
 * inspection, synthetic models) is in subq_lab.h.
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
#define SUBQ_VERSION_MINOR 50
#define SUBQ_VERSION_PATCH 0
#define SUBQ_VERSION "0.50.0"

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
    SUBQ_ERR_CANCELLED,   /* the caller stopped it (a callback's nonzero return) */
} subq_status;

#define SUBQ_ERROR_MSG_MAX 512
typedef struct subq_error {
    subq_status code;
    char msg[SUBQ_ERROR_MSG_MAX];
} subq_error;

/* SUBQ_VERSION of the library linked in ("0.50.0"). */
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
    int kv_recover;     /* a kv_file whose newest header slot is damaged: 1 continues from the
                           older slot (subq_context_kv_file_info says what that lost); 0 refuses
                           the file (SUBQ_ERR_FORMAT) */
} subq_context_params;

subq_context_params subq_context_default_params(void);
/* Bytes of the KV cache a context made with p would hold in memory (rows,
 * positions, documents); SIZE_MAX-like huge when the KV type cannot hold
 * this model's heads. */
uint64_t subq_kv_cache_bytes(const subq_model *m, const subq_context_params *p);
subq_status subq_context_new(subq_model *m, const subq_context_params *p, subq_context **out,
                             subq_error *err);
/* With a KV file: commits what the context holds and writes its HNSW
 * graphs to FILE.hnsw (atomically; on failure the next resume rebuilds). */
void subq_context_free(subq_context *c);
/* Forget all cached tokens (and every sparse layer's index). */
void subq_context_reset(subq_context *c);
/* Number of tokens in the KV cache. */
int subq_context_n_past(const subq_context *c);
/* With a KV file: take up the tokens it has committed, as the last run
 * left them (KV rows in place, indexes rebuilt from the stored search keys,
 * last logits when stored; HNSW graphs read from FILE.hnsw beside it as far
 * as they cover, when they check out). Set the attention plan the file was
 * written with first (another is SUBQ_ERR_MISMATCH). A context without a
 * file, or a new file, resumes nothing. */
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
    int header_damaged;         /* the newest header slot is damaged: the fields above are the
                                   older slot's */
    int n_committed_newest;     /* header_damaged: the tokens the damaged slot counts as it
                                   reads (-1: not a count) */
    long writer_pid;            /* a process wrote the file as it was read: its pid (-1: unknown);
                                   0: none */
    int n_head_major_layers;    /* layers laid out head-major (those its plan ran dense, read
                                   whole); the others slot-major */
    int n_graph_layers;         /* FILE.hnsw beside it (README, "KV files"): the layers whose HNSW
                                   graphs it holds and the tokens they cover, as it says (a resume
                                   checks them); 0: none */
    int n_graph_tokens;
} subq_kv_file_info;
/* Read a KV file's header without a model. It takes no lock: beside a
 * process that writes the file it reads the header that process last
 * committed (writer_pid says so), and never holds the writer up. With
 * verify, also check every committed slot: its checksum, and that its key,
 * value and search rows and the last logits are finite (SUBQ_ERR_FORMAT
 * naming the first bad slot); a damaged newest header slot is then
 * SUBQ_ERR_FORMAT too (saying how many committed tokens the older slot
 * loses), and a slot the writer changed as it was read SUBQ_ERR_BUSY. A
 * resume checks the latest slots only (up to 1 GiB of them). */
subq_status subq_kv_file_inspect(const char *path, int verify, subq_kv_file_info *info, subq_error *err);
/* The same for a context's own KV file (SUBQ_ERR_ARG without one), as
 * subq_context_new opened it: what its header counts before a resume, and
 * whether it was read from the older slot (subq_context_params.kv_recover);
 * file_bytes, verify_s and writer_pid are 0. */
subq_status subq_context_kv_file_info(const subq_context *c, subq_kv_file_info *info, subq_error *err);

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
 * the sparse layers' search keys, their HNSW graphs and the last logits
 * when known. */
subq_status subq_context_save(const subq_context *c, const char *path, subq_error *err);
/* Replace what c holds by a session file's tokens. A file of another
 * model, KV type or attention plan, or (Phi-3's LongRoPE) saved from a
 * context whose size took the other factors, is SUBQ_ERR_MISMATCH; more tokens than
 * the context holds SUBQ_ERR_RANGE. HNSW graphs are read back (a graph
 * that does not check out is rebuilt) and the other indexes rebuilt from
 * the stored keys, so decoding continues as it would have in the saved
 * context. On failure c is empty. */
subq_status subq_context_load(subq_context *c, const char *path, subq_error *err);
/* Replace what dst holds by src's cached tokens, KV rows and last logits,
 * with dst's own attention plan: its indexes are rebuilt over those rows
 * (a layer whose plan is src's takes src's HNSW graph as it is),
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
 * K + min(3K, 1536) slots are re-ranked on the stored keys. AUTO (the
 * default) reads the keys while a scan's keys come to less than 2 MiB and
 * int4 codes from there, where they are faster (recall@K against the full
 * scan >= 0.999 on clustered keys; search vectors wider than 1024: the keys). */
typedef enum subq_scan {
    SUBQ_SCAN_FULL = 0, SUBQ_SCAN_INT8, SUBQ_SCAN_INT4, SUBQ_SCAN_AUTO, SUBQ_SCAN_COUNT
} subq_scan;
/* "cosine" / "dot", "full" / "int8" / "int4" / "auto" -> the value; -1 when unknown. */
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
 *                    each head attends its own keys
 *   PER_KV_HEAD      each KV head one exact top-K of its group's mean
 *                    logit, attended by the group's query heads */
typedef enum subq_oracle_kind {
    SUBQ_ORACLE_HEADMEAN_DOT = 0,
    SUBQ_ORACLE_HEADMEAN_COSINE,
    SUBQ_ORACLE_PER_HEAD,
    SUBQ_ORACLE_PER_KV_HEAD,
    SUBQ_ORACLE_COUNT
} subq_oracle_kind;

/* "headmean-dot", "headmean-cosine", "per-head", "per-kv-head" -> kind; -1 when unknown. */
int subq_oracle_parse(const char *name);
const char *subq_oracle_name(subq_oracle_kind k);

/* subq_attn_plan.far_pos: where a query attends the keys farther than
 * far_from (sinks and retrieved keys; the tail never is), so that a model
 * reads past the context it was trained on at distances it knows. Keys stay
 * stored as computed; a far key is turned by the layer's RoPE at attend
 * time. With d the key's distance and F = far_from:
 *   NONE    at d (no change)
 *   WINDOW  at F, every far key (InfLLM)
 *   ORDER   at F - r, r its rank among the query's far keys, farthest
 *           first: contiguous, in their order (ReAttention)
 *   GROUP   at F + ceil((d - F) / G), G = ceil((d_max - F) / (L - F)), d_max
 *           the query's farthest attended key, L the trained context - 1
 *           (Self-Extend's grouped positions, the group chosen per query)
 * Layers the plan keeps dense attend the sinks and the keys within F once
 * there are farther ones (the sinks placed as the scheme places them); the
 * search scores far keys without its rotated dims (subq_search_get_rope).
 * A query with no key beyond F attends exactly as with NONE. */
typedef enum subq_far_pos {
    SUBQ_FAR_NONE = 0,
    SUBQ_FAR_WINDOW,
    SUBQ_FAR_ORDER,
    SUBQ_FAR_GROUP,
    SUBQ_FAR_COUNT
} subq_far_pos;

/* "none", "window", "order", "group" -> scheme; -1 when unknown. */
int subq_far_parse(const char *name);
const char *subq_far_name(subq_far_pos s);

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
    subq_scan scan;                /* exact: what the scan reads (auto) */
    /* exact, sparse prefill past probe_from visible keys: the coarse-to-fine
     * block scan. Keys are grouped in blocks of block_keys consecutive
     * slots, each ranked by its mean key; a prompt token scans exactly the
     * keys of its nprobe best blocks (and of the last, partial one) instead
     * of every earlier key: prefill selection grows as N^2 / block_keys, not
     * N^2. nprobe 0: every key. Decode and TOKENWISE always scan every key.
     * (64, 64, 8192) */
    int block_keys, nprobe, probe_from;
    /* ... and once a prompt token sees group_from keys, the blocks are
     * ranked in two levels: groups of group_blocks consecutive blocks by
     * their mean key first, then only the blocks of the group_probe best
     * groups (and of the last, partial group): the summaries' term grows
     * as N^2 / (block_keys * group_blocks). group_blocks 0: one level.
     * (16, 32, 131072) */
    int group_blocks, group_probe, group_from;
    /* ... and each block and group is also ranked by its block_reps keys
     * farthest from its mean, its score the best of the mean's and
     * theirs: a lone strong key among weak ones stays visible at any
     * length (0: the mean alone) */
    int block_reps;
    int probe_check;               /* every probe_check-th prompt token of the block scan is also
                                      answered by the full scan, and the overlap counted
                                      (subq_context_stats; costs time) (0: none) */
    uint64_t seed;                 /* index randomness (1) */
    /* with completion maps: complete only query heads whose mid-region
     * entropy, stored in the maps file, is at least this; < 0: every head (-1) */
    float complete_min_entropy;
    /* far keys at trained distances (subq_far_pos above; NONE); keys farther
     * than far_from are far (0: the model's trained context less n_tail) */
    subq_far_pos far_pos;
    int far_from;
    /* exact, sparse prefill with far keys (far_pos not NONE): once a prompt
     * token sees cluster_from keys, its far keys are found through content
     * clusters instead of the block scan, an inverted file as FAISS's
     * IndexIVFFlat: k-means trains `clusters` centroids on the search keys
     * held then, without their rotated dims, every key joins its nearest
     * centroid's list, and a token scans the far keys of its cluster_probe
     * best lists (by q . centroid) and its near keys in full. Without far
     * keys they are not used. Until the keys number 16 a list, there are
     * fewer lists, trained again as the keys double, and as many of them
     * probed, in proportion. 0: the block scan. (2048, 96, 8192) */
    int clusters, cluster_probe, cluster_from;
} subq_attn_plan;

subq_attn_plan subq_attn_plan_default(void);

/* How finely learned search picks keys (train-search --granularity): one
 * set a layer shares across its heads, one set per KV head (the group's
 * query heads share it), or one set per query head. Each search head has
 * its own W_Qs / W_Ks rows of d_search and its own rotated dims; key heads
 * are one per KV head for KV_HEAD and HEAD. */
typedef enum subq_search_granularity {
    SUBQ_SEARCH_LAYER = 0,
    SUBQ_SEARCH_KV_HEAD,
    SUBQ_SEARCH_HEAD,
    SUBQ_SEARCH_GRANULARITY_COUNT
} subq_search_granularity;
/* "layer", "kv-head", "head" -> granularity; -1 when unknown. */
int subq_search_granularity_parse(const char *name);
const char *subq_search_granularity_name(subq_search_granularity g);

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
/* The same with search heads of width d_search at granularity g. */
subq_status subq_search_random_heads(const subq_model *m, const char *layers, int d_search, subq_search_granularity g,
                                     uint64_t seed, subq_search **out, subq_error *err);
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

/* Projections made from matrices (checkpoint converters): for each of the
 * n_layers layers (distinct, in [0, n_layer)), wq[i] and wk[i] are W_Qs and
 * W_Ks, [d_search][n_embd] row-major; one search set a layer, no rotated
 * dims. origin (NULL: none) says where they come from and how they rank,
 * written into files as subq.search.origin. Non-finite values are
 * SUBQ_ERR_ARG. */
subq_status subq_search_from_matrices(const subq_model *m, const int *layers, int n_layers, int d_search,
                                      const float *const *wq, const float *const *wk, const char *origin,
                                      subq_search **out, subq_error *err);
/* Copy layer's W_Qs ([n_query_heads * d_search][n_embd]) into wq and W_Ks
 * ([n_key_heads * d_search][n_embd]) into wk, either may be NULL;
 * SUBQ_ERR_ARG when the layer has none. */
subq_status subq_search_get_matrices(const subq_search *s, int layer, float *wq, float *wk, subq_error *err);
/* Write s as a projection file (what train-search writes), atomically.
 * Merged projections keep no fingerprint: SUBQ_ERR_UNSUPPORTED (split
 * them out of the model file with subq_search_split instead). */
subq_status subq_search_save(const subq_search *s, const char *path, subq_error *err);

/* Layer lists as plans take them ("all", "none", "1,3,5-7", negative from
 * the end: "2--1"): mask[l] = 1 for each listed layer of n_layer. */
subq_status subq_parse_layers(const char *s, int n_layer, unsigned char *mask, subq_error *err);
/* The same for model m, keeping the listed layers where sparse attention
 * applies: those that attend to the whole context, not Gemma's sliding-window
 * ones ("global" lists them all); a list of sliding layers only is refused. */
subq_status subq_model_parse_layers(const subq_model *m, const char *s, unsigned char *mask, subq_error *err);

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
    subq_search_granularity granularity; /* one set a layer, per KV head or per query head */
    int n_query_heads, n_key_heads;      /* search heads of d_search each (1 / 1: one set a layer) */
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
#define SUBQ_PHI_MAX_DIM 1024 /* largest d_emb, d_hidden, d_phi (and head_dim) of completion maps */
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
    double t_append_s;    /* selectors' index inserts (graph inserts, which run side by side
                             after the forward's layers, by the wall clock) */
    uint64_t kv_bytes;    /* KV cache size */
    uint64_t index_bytes; /* memory held by the selectors */
    uint64_t select_bytes_read; /* bytes the selectors' queries read (exact: the search
                                   keys scanned; hnsw/faiss: distances x vector bytes, an
                                   estimate; quest/oracle: page bounds and native keys) */
    double t_fill_kv_s;   /* subq_context_fill_synthetic's writing of the keys and values
                             (its selectors' keys not included) */
    int64_t check_keys;   /* subq_attn_plan.probe_check: keys the full scan picked for the
                             checked prompt tokens, and how many the block scan picked too
                             (recall = check_found / check_keys) */
    int64_t check_found;
    int64_t index_tokens_linked; /* the most tokens a layer's index linked from a saved graph
                                    (subq_context_load, subq_context_resume's FILE.hnsw) rather
                                    than inserting them again; 0: indexes rebuilt, or none */
} subq_context_stats;
void subq_context_get_stats(const subq_context *c, subq_context_stats *st);

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

/* ---- whole files ---------------------------------------------------- */

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

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif
