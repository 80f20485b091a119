/* The training driver shared by every distillation task (search
 * projections: train/search/train_search.h; completion maps:
 * train/complete/phi_train.h): options, progress hooks and results.
 *
 * A step: batch x grad_accum training sequences (in data-cursor order, a
 * fresh permutation per epoch) go through the frozen model with full
 * attention; the capture keeps what the task needs at its target layers;
 * the task adds each sequence's loss sums and their gradient. The gradient
 * is divided by the number of (layer, query) loss terms of the whole step,
 * so --grad-accum N at batch B is the same step as batch N x B (sequences
 * are processed one at a time either way: memory grows with neither); its
 * global norm is clipped and AdamW updates the weights with a linear
 * warm-up + cosine learning rate. Evaluation on the held-out split reports
 * the same losses per layer (and task metrics).
 *
 * Output: OUT (the task's weight file + training metadata) and OUT.ckpt (the
 * same plus Adam moments, data cursor and rng), written atomically
 * (train/task.h). A resumed run ends with the same weights, bit for bit, as
 * an uninterrupted one with the same thread count. */
#ifndef SUBQ_TRAIN_TRAINER_H
#define SUBQ_TRAIN_TRAINER_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "subq.h"

#define TRAIN_MAX_PARTS 6

typedef struct train_config {
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
} train_config;

typedef struct train_start_info {
    int64_t start_step;         /* > 0 when resumed */
    int resumed;
    int n_train_seq, n_eval_seq;
    int64_t train_tokens, eval_tokens;
    int n_threads;
    size_t n_params;
    int n_parts;                /* the loss parts of this task, as named in the stats */
    const char *const *part_names;
} train_start_info;

typedef struct train_step_stats {
    int64_t step, steps;        /* steps done after this one, total */
    float lr;
    double loss;                /* the objective: mean over the step's (layer, query) terms */
    double part[TRAIN_MAX_PARTS]; /* means of its parts */
    double grad_norm;           /* before clipping */
    int64_t tokens, queries;    /* in this step */
    double tok_per_s;           /* training throughput of this run so far */
    double elapsed_s;
} train_step_stats;

typedef struct train_eval_layer {
    int layer;
    double loss, part[TRAIN_MAX_PARTS]; /* means over the layer's held-out queries */
    int64_t n_queries;
} train_eval_layer;

struct search_eval_acc;

typedef struct train_eval_stats {
    int64_t step;
    int n_layers;
    const train_eval_layer *layers;
    /* search projections: retrieval metrics per layer (sums, train/search/search_eval.h); else NULL */
    const struct search_eval_acc *retrieval;
    int n_seq;
    int64_t n_tokens;
    double loss, part[TRAIN_MAX_PARTS]; /* means over layers */
    double seconds;
} train_eval_stats;

typedef struct train_hooks {
    void *user;
    /* after the checkpoint (if any) is restored; a non-zero return stops the
     * run before its first step, nothing written (SUBQ_ERR_IO) */
    int (*on_start)(void *user, const train_start_info *info);
    void (*on_step)(void *user, const train_step_stats *s);
    void (*on_eval)(void *user, const train_eval_stats *e);
    void (*on_save)(void *user, int64_t step, const char *ckpt_path);
    /* polled between steps; when it becomes non-zero the run saves a
     * checkpoint and returns with result.interrupted = 1 */
    const volatile sig_atomic_t *stop;
} train_hooks;

typedef struct train_result {
    int64_t step;               /* steps done */
    int interrupted;            /* stopped by hooks->stop */
    int stopped_early;          /* stopped by stop_after */
    double tok_per_s;           /* training throughput (teacher + losses + update) */
    int64_t train_tokens;       /* tokens trained on in this run */
} train_result;

/* Defaults shared by the tasks (layers, lr, weight decay, warm-up, steps,
 * evaluation and output left for the task to set). */
train_config train_default_config(void);

#endif
