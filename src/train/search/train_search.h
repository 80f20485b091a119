/* Learning search projections by distillation from the frozen model's own
 * attention (the library call behind `subq train-search`).
 *
 * Each step: `batch` sequences from the corpus go through the model with
 * full attention; the capture keeps h, q, k of the target layers; the loss
 * (search_loss.h) and its gradient are computed per layer and averaged over
 * layers and queries; the global gradient norm is clipped; AdamW updates
 * W_Qs, W_Ks with a warm-up + cosine learning rate. Evaluation on the
 * held-out split reports the losses and mass@K / recall@K of the learned
 * space and of the raw-QK oracle (search_eval.h).
 *
 * loss.n_sink / loss.n_tail (default 0 / 0) align training with the sparse
 * runtime, which always attends the first n_sink keys of a document and the
 * n_tail most recent ones and retrieves only among the rest: both losses,
 * the teacher they use and the evaluation then see only those
 * retrieval-eligible keys (search_loss.h, search_eval.h).
 *
 * Checkpoints (OUT.ckpt: weights, Adam moments, step, data cursor, rng) are
 * written atomically; a resumed run ends with the same weights, bit for bit,
 * as an uninterrupted one with the same thread count. */
#ifndef SUBQ_TRAIN_SEARCH_H
#define SUBQ_TRAIN_SEARCH_H

#include <signal.h>
#include <stdint.h>

#include "train/search/search_eval.h"
#include "train/search/search_loss.h"
#include "search/search_proj.h"
#include "train/corpus.h"

typedef struct train_search_config {
    const int *layers;          /* target layers (distinct, any order) */
    int n_layers;
    int d_search;               /* 32 */
    int batch;                  /* sequences per step (1) */
    search_loss_params loss;    /* tau .07, tau_kl 1, alpha 1, beta 1, k_pos 16, max, n_sink 0, n_tail 0;
                                 * n_sink / n_tail also restrict the evaluation's key set */
    float lr;                   /* 1e-4 */
    float weight_decay;         /* 0.01 */
    float beta1, beta2, eps;    /* 0.9, 0.999, 1e-8 */
    float grad_clip;            /* 1.0 (<= 0: off) */
    float init_std;             /* 0.02 */
    int warmup;                 /* 100 steps */
    int64_t steps;              /* total steps (the schedule spans them) */
    int64_t stop_after;         /* > 0: stop (with a checkpoint) once this step is reached */
    uint64_t seed;              /* init and data order */
    int eval_every;             /* evaluate before step 1 and every N steps (0: only at the end) */
    int eval_k[SEARCH_EVAL_MAX_K];
    int n_eval_k;               /* 8, 16, 32, 64 */
    int64_t eval_tokens;        /* held-out tokens per evaluation (<= 0: all) */
    int save_every;             /* steps between checkpoints (0: only at the end) */
    const char *out_path;       /* projections; the checkpoint is out_path + ".ckpt" */
    int resume;                 /* continue from the checkpoint */
    int n_threads;              /* <= 0: all cores */
} train_search_config;

/* The defaults listed above (layers, steps and out_path left empty). */
train_search_config train_search_default_config(void);

typedef struct train_step_stats {
    int64_t step, steps;        /* steps done after this one, total */
    float lr;
    double loss, nce, kl;       /* this step's objective and its parts (means over queries and layers) */
    double grad_norm;           /* before clipping */
    int64_t tokens;             /* tokens in this step */
    double tok_per_s;           /* training throughput of this run so far */
    double elapsed_s;
} train_step_stats;

typedef struct train_eval_layer {
    int layer;
    double nce, kl;             /* mean over held-out queries */
    int64_t n_queries;
    search_eval_acc acc;        /* sums: divide by acc.n_queries[k] */
} train_eval_layer;

typedef struct train_eval_stats {
    int64_t step;
    int n_layers;
    const train_eval_layer *layers;
    int n_seq;
    int64_t n_tokens;
    double nce, kl, loss;       /* means over layers */
    double seconds;
} train_eval_stats;

typedef struct train_start_info {
    int64_t start_step;         /* > 0 when resumed */
    int resumed;
    int n_train_seq, n_eval_seq;
    int64_t train_tokens, eval_tokens;
    int n_threads;
} train_start_info;

typedef struct train_search_hooks {
    void *user;
    void (*on_start)(void *user, const train_start_info *info);
    void (*on_step)(void *user, const train_step_stats *s);
    void (*on_eval)(void *user, const train_eval_stats *e);
    void (*on_save)(void *user, int64_t step, const char *ckpt_path);
    /* polled between steps; when it becomes non-zero the run saves a
     * checkpoint and returns with result.interrupted = 1 */
    const volatile sig_atomic_t *stop;
} train_search_hooks;

typedef struct train_search_result {
    int64_t step;               /* steps done */
    int interrupted;            /* stopped by hooks->stop */
    int stopped_early;          /* stopped by stop_after */
    double tok_per_s;           /* training throughput (teacher + losses + update) */
    int64_t train_tokens;       /* tokens trained on in this run */
} train_search_result;

subq_status train_search_run(subq_model *m, const train_corpus *data, const train_search_config *cfg,
                             const train_search_hooks *hooks, train_search_result *res, subq_error *err);

/* Testing aid: the teacher forward on the first training sequence, written
 * as a GGUF for the numpy reference (tests/ref/check_train_teacher.py):
 * tokens/pos/seg, per target layer h, q, k, the dense teacher matrix
 * [T][T], the initial W_Qs / W_Ks, and the losses and retrieval metrics
 * the library computes for them. */
subq_status train_search_dump_teacher(subq_model *m, const train_corpus *data, const train_search_config *cfg,
                                      const char *path, subq_error *err);

#endif
