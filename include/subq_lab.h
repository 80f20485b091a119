/* subq's lab: what is built on the engine (subq.h) to measure and train
 * it: perplexity, evaluation of sparse against full attention, training
 * of search projections and completion maps, recall grids, benchmark
 * probes of a context, GGUF inspection, synthetic models. A program that
 * only runs models needs subq.h alone. */
#ifndef SUBQ_LAB_H
#define SUBQ_LAB_H

#include "subq.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility push(default)
#endif

/* ---- benchmark probes of a context ------------------------------------ */

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
 * in the KV cache (4096 random slots per layer, repeated), and search keys
 * in every sparse layer's index drawn around 256 random centres, as trained
 * search keys lie in clusters. A scan's speed does not depend on the values;
 * a graph index's does (on i.i.d. Gaussian keys an HNSW search reads 5-6x
 * what it reads over real keys, these cost it about 2x, and it finds more
 * of the exact top-K over them than over a real prompt's rotated keys far
 * past the trained window: 0.98 against 0.52 at 32K). A real prefill of
 * a long context takes far longer than a speed measurement (benchmarks
 * only). */
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

/* Called after each chunk with the running result; nonzero stops the run
 * there (SUBQ_ERR_CANCELLED, *res holding the chunks done). */
typedef int (*subq_ppl_callback)(void *user, int chunk, int n_chunks, const subq_ppl_result *running);

/* `tokens` is the whole text tokenised with BOS. Chunks of n_ctx tokens
 * (at most max_chunks; <= 0 for all) have their first token replaced by BOS
 * and the second half of each chunk is scored. With window (even, dividing
 * n_ctx; <= 0: n_ctx) below n_ctx, the same tokens are scored through
 * windows of `window` tokens half a window apart, each with its first token
 * replaced by BOS and its second half scored: so contexts of different
 * lengths are compared on the same tokens (-c 16384 against windows of
 * 4096). If `nll_out` is not NULL it receives the per-token NLLs in order
 * (n_chunks * (n_ctx - 1 - n_ctx/2)). */
subq_status subq_perplexity(subq_context *c, const int32_t *tokens, size_t n_tokens, int n_ctx, int window,
                            int max_chunks, subq_ppl_callback cb, void *user, subq_ppl_result *res, float *nll_out,
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
    /* KV rows a query read per layer and KV head, measured: sinks + tail +
     * the union of its query heads' sets (per-head selectors gather each
     * row once); NAN where not measured */
    double kv_rows;
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

/* Called after each forward pass over a window: done of total; nonzero
 * stops the run there (SUBQ_ERR_CANCELLED, nothing returned). */
typedef int (*subq_eval_progress_fn)(void *user, int64_t done, int64_t total);

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
     * "native": the model's own W_q / W_k (search_native.h); NULL: random.
     * A resumed run takes its checkpoint's weights. */
    const char *init_from;
    subq_search_loss_params loss;    /* tau .07, tau_kl 1, alpha 1, beta 1, k_pos 16, max, n_sink 4, n_tail 16;
                                 * n_sink / n_tail also restrict the evaluation's key set */
    float init_std;             /* 0.02 */
    int eval_k[SUBQ_SEARCH_EVAL_MAX_K];
    int n_eval_k;               /* 8, 16, 32, 64 */
    /* one set a layer (SUBQ_SEARCH_LAYER, default), per KV head or per query
     * head: d_search is then each search head's width, and each search head
     * is taught by its own heads' attention (the group's for KV_HEAD) */
    subq_search_granularity granularity;
} subq_train_search_params;

typedef struct subq_phi_loss_params {
    int n_sink, n_tail;          /* 4, 16 */
    double tau;                  /* 1 */
    double l_kl;                 /* 0.99 */
    double l_top, l_fp, l_z;     /* 1, 2, 4 */
    double band;                 /* Delta: 8 */
    double huber;                /* delta: 1 */
} subq_phi_loss_params;

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
    const char *haystack;     /* filler text (UTF-8), repeated to length (copied); NULL: the pass-key
                                 test's "The grass is green. The sky is blue. ..." */
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
 * SUBQ_ERR_ARG when the needles and the question do not fit in `length`.
 * A length past the model's trained context is the caller's to allow (read
 * through far keys at trained distances, subq_far_pos). */
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
    char name[48];            /* "full", "exact@64", "hnsw@32+phi", "exact@64:window" */
    int full;                 /* 1: full attention (the fields below unused) */
    int far_pos;              /* the name's ":SCHEME" (a subq_far_pos); -1: none given */
    subq_attn_plan plan;      /* its sparse_prefill is the grid's */
    const subq_search *search;
    const subq_complete *complete;
} subq_recall_method;

/* "full" or SELECTOR@K[+phi][:FAR] -> out->name, full, plan.selector,
 * plan.top_k, far_pos (FAR a far-key scheme name, subq_far_parse; -1
 * without) and *complete (1 for +phi); the rest of out is left as it was.
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
