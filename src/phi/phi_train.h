/* Learning the completion maps by distillation from the frozen model's own
 * attention logits (the library call behind `subq train-phi`).
 *
 * Each step: `batch` sequences from the corpus go through the model with
 * full attention; the capture keeps the post-RoPE q, k of the target layers;
 * phi_loss_layer gives the loss over every (query head, query) with a
 * non-empty mid region and its gradient (double, by hand); the objective is
 * the mean over layers, heads and queries; the global gradient norm is
 * clipped; AdamW (train/adamw.h) updates the float maps with the warm-up +
 * cosine learning rate. Evaluation on the held-out split reports the same
 * losses per layer.
 *
 * Output: OUT (phi_maps.h format + subq.phi.step, subq.phi.loss.*,
 * subq.phi.config.*, subq.phi.data_fingerprint) and OUT.ckpt (the same plus
 * Adam moments as tensors "<weight name>.adam_m" / ".adam_v", subq.train.cursor
 * and subq.train.rng), both written atomically. A resumed run ends with the
 * same weights, bit for bit, as an uninterrupted one with the same thread
 * count. */
#ifndef SUBQ_PHI_TRAIN_H
#define SUBQ_PHI_TRAIN_H

#include <signal.h>
#include <stdint.h>

#include "complete/phi_maps.h"
#include "phi/phi_loss.h"
#include "train/corpus.h"

typedef struct phi_train_config {
    const int *layers;          /* target layers (distinct, any order) */
    int n_layers;
    int d_emb, d_hidden, d_phi; /* 32, 64, 32 */
    phi_loss_params loss;       /* phi_loss_default_params() */
    int batch;                  /* sequences per step (1) */
    float lr;                   /* 1e-3 */
    float weight_decay;         /* 0 */
    float beta1, beta2, eps;    /* 0.9, 0.999, 1e-8 */
    float grad_clip;            /* 1.0 (<= 0: off) */
    float wo_std;               /* 0.5: Wo ~ N(0, wo_std^2 / d_emb) */
    int warmup;                 /* 50 steps */
    int64_t steps;              /* total steps (the schedule spans them) */
    int64_t stop_after;         /* > 0: stop (with a checkpoint) once this step is reached */
    uint64_t seed;              /* init and data order */
    int eval_every;             /* steps between evaluations (0: only at the end) */
    int64_t eval_tokens;        /* held-out tokens per evaluation (<= 0: all) */
    int save_every;             /* steps between checkpoints (0: only at the end) */
    const char *out_path;       /* maps; the checkpoint is out_path + ".ckpt" */
    int resume;
    int n_threads;              /* <= 0: all cores */
} phi_train_config;

phi_train_config phi_train_default_config(void);

typedef struct phi_step_stats {
    int64_t step, steps;        /* steps done after this one, total */
    float lr;
    double loss;                /* mean over (layer, head, query) */
    double part[PHI_N_PARTS];   /* means of the parts */
    double grad_norm;           /* before clipping */
    int64_t tokens, queries;
    double tok_per_s, elapsed_s;
} phi_step_stats;

typedef struct phi_eval_layer {
    int layer;
    double loss, part[PHI_N_PARTS]; /* means over held-out (head, query) pairs */
    int64_t n_queries;
} phi_eval_layer;

typedef struct phi_eval_stats {
    int64_t step;
    int n_layers;
    const phi_eval_layer *layers;
    int n_seq;
    int64_t n_tokens;
    double loss, part[PHI_N_PARTS]; /* means over layers */
    double seconds;
} phi_eval_stats;

typedef struct phi_start_info {
    int64_t start_step;
    int resumed;
    int n_train_seq, n_eval_seq;
    int64_t train_tokens, eval_tokens;
    int n_threads;
    size_t n_params;
} phi_start_info;

typedef struct phi_train_hooks {
    void *user;
    void (*on_start)(void *user, const phi_start_info *info);
    void (*on_step)(void *user, const phi_step_stats *s);
    void (*on_eval)(void *user, const phi_eval_stats *e);
    void (*on_save)(void *user, int64_t step, const char *ckpt_path);
    /* polled between steps; non-zero: save a checkpoint and return with
     * result.interrupted = 1 */
    const volatile sig_atomic_t *stop;
} phi_train_hooks;

typedef struct phi_train_result {
    int64_t step;
    int interrupted, stopped_early;
    double tok_per_s;
    int64_t train_tokens;
} phi_train_result;

subq_status phi_train_run(subq_model *m, const train_corpus *data, const phi_train_config *cfg,
                          const phi_train_hooks *hooks, phi_train_result *res, subq_error *err);

/* Testing aid (tests/ref/check_phi_train.py): for the first training
 * sequence and the initial maps, write to `path` the maps (as in OUT), the
 * sequence (f32 tensors tokens, pos, seg), per target layer l the captured
 * q, k (cap.{l}.q / cap.{l}.k), the float log features of every head
 * (feat.{l}.q [T][n_head][d_phi], feat.{l}.k), the double loss sums
 * (metadata subq.phi.dump.{l}.sums: f64 [loss, kl, top, fp, z, lse, n]) and
 * the gradient of the summed loss (grad.{l}, flat, phi_maps layout). */
subq_status phi_train_dump(subq_model *m, const train_corpus *data, const phi_train_config *cfg, const char *path,
                           subq_error *err);

/* ---- checkpoints (phi_ckpt.c) ------------------------------------------- */

typedef struct phi_train_state {
    phi_maps *maps;             /* weights: maps->data */
    float *m, *v;               /* Adam moments, same layout */
    size_t n_params;
    int64_t step;
    uint64_t cursor, rng;
    double train_loss, train_part[PHI_N_PARTS];
    int have_eval;
    double eval_loss, eval_part[PHI_N_PARTS];
} phi_train_state;

/* Write cfg->out_path, and cfg->out_path + ".ckpt" when `ckpt`. */
subq_status phi_train_save(const phi_train_state *st, const phi_train_config *cfg, const train_corpus *data, int ckpt,
                           subq_error *err);
/* Restore st (allocated for cfg) from `path`; refuses another model
 * (SUBQ_ERR_MISMATCH), other options or other data (SUBQ_ERR_ARG, naming
 * the option). */
subq_status phi_train_load_checkpoint(const char *path, const subq_model *m, const phi_train_config *cfg,
                                      const train_corpus *data, phi_train_state *st, subq_error *err);

#endif
