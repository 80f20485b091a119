/* Inside the training driver (trainer.h): the state it holds, the
 * interface a task implements, and the one checkpoint format.
 *
 * A task owns its weights (one flat float array, laid out as its file
 * format wants) and knows how to initialise them, compute the loss sums and
 * gradient of one captured sequence, and write / read its weight file. The
 * driver owns everything else: model context, capture, data order, Adam
 * moments, schedule, evaluation loop, checkpoints, resume and hooks.
 *
 * Checkpoint format (PREFIX = "subq.search" / "subq.phi"):
 *   OUT       the task's weight file + PREFIX.config.<option> for every option
 *             that shapes the result, PREFIX.data_fingerprint,
 *             PREFIX.data_train_tokens, PREFIX.step, PREFIX.loss.train and
 *             PREFIX.loss.train_<part> (PREFIX.loss.eval* once evaluated)
 *   OUT.ckpt  the same plus Adam moments as tensors "<block>.adam_m" /
 *             "<block>.adam_v" (one per block of the task's weights),
 *             subq.train.cursor (sequences consumed) and subq.train.rng.
 * A resume must use the same options and data (refused otherwise, naming
 * the option). */
#ifndef SUBQ_TRAIN_TASK_H
#define SUBQ_TRAIN_TASK_H

#include "gguf/gguf.h"
#include "model/context.h"
#include "train/capture.h"
#include "data/corpus.h"
#include "train/trainer.h"

typedef struct trainer trainer;

/* Loss sums of one layer (not averaged). */
typedef struct train_sums {
    double loss, part[SUBQ_TRAIN_MAX_PARTS];
    int64_t n_queries;          /* loss terms: the objective divides by their count */
    double flops;               /* the task's counted work (0: not counted) */
} train_sums;

/* An option recorded in the output and checked on resume. */
typedef enum train_opt_type { TRAIN_OPT_U64, TRAIN_OPT_F32, TRAIN_OPT_STR } train_opt_type;
typedef struct train_option {
    const char *key;            /* PREFIX.config.<key> */
    train_opt_type type;
    uint64_t u;
    float f;
    const char *s;
    /* files written before the option existed lack the key and were trained
     * with `absent`: a missing key matches that value (and only it) */
    int has_absent;
    uint64_t absent;
} train_option;

#define TRAIN_MAX_OPTIONS 48

static inline train_option train_opt_u64(const char *key, uint64_t v) {
    return (train_option){.key = key, .type = TRAIN_OPT_U64, .u = v};
}
static inline train_option train_opt_f32(const char *key, double v) {
    return (train_option){.key = key, .type = TRAIN_OPT_F32, .f = (float)v};
}
static inline train_option train_opt_str(const char *key, const char *v) {
    return (train_option){.key = key, .type = TRAIN_OPT_STR, .s = v};
}
static inline train_option train_opt_u64_since(const char *key, uint64_t v, uint64_t absent) {
    return (train_option){.key = key, .type = TRAIN_OPT_U64, .u = v, .has_absent = 1, .absent = absent};
}

/* A block of the weights with its own Adam moment tensors. */
typedef struct train_block {
    char name[128];             /* the moments are "<name>.adam_m" / "<name>.adam_v" */
    size_t offset, count;       /* in the flat weight array */
    uint32_t n_dims;
    uint64_t ne[3];
} train_block;

typedef struct train_task_ops {
    const char *prefix;         /* metadata keys: "subq.search" */
    int n_parts;
    const char *const *part_names;
    int grad_f64;               /* the task adds gradients into t->gd (double), else into t->grad (float) */
    /* Check the task's options and create its weights for t->cfg->layers:
     * set t->w, t->n_params, t->layers, t->n_sel. */
    subq_status (*create)(void *self, trainer *t, subq_error *err);
    /* Initial weight values (from t->rng; may capture training sequences). */
    subq_status (*init)(void *self, trainer *t, subq_error *err);
    /* The weights changed: called before the first sequence of a step or an
     * evaluation (may be NULL). */
    void (*sync)(void *self, trainer *t);
    /* Add the loss sums of the sequence captured last into sums[0..n_sel).
     * train: also add the gradient of their sum; else (evaluation) add the
     * task's own metrics. */
    subq_status (*loss)(void *self, trainer *t, int train, train_sums *sums, subq_error *err);
    /* May be NULL. The part of loss for target layer i, called during the
     * capture as soon as the layer's rows are captured (train_capture_run's
     * seam): with attn_out, also write the layer's attention output there
     * (the forward then skips its own). loss then does the rest. */
    subq_status (*layer_loss)(void *self, trainer *t, int i, int train, train_sums *sums, float *attn_out,
                              subq_error *err);
    /* Evaluation starts: zero the task's metrics and point es at them (may be NULL). */
    void (*eval_begin)(void *self, trainer *t, subq_train_eval_stats *es);
    /* Its metrics as sums to add over data-parallel ranks: pack (to_buf = 1)
     * or unpack the first cap of them; returns how many there are (may be
     * NULL: none). */
    size_t (*eval_sums)(void *self, double *buf, size_t cap, int to_buf);
    /* The task's options (written after the driver's); returns how many. */
    int (*options)(const void *self, train_option *opt);
    /* Weight blocks for the Adam moments, in file order. */
    int (*n_blocks)(const void *self);
    void (*block)(const void *self, int i, train_block *b);
    /* Add the weight file's tensors and metadata to w. */
    subq_status (*write_weights)(const void *self, gguf_writer *w, subq_error *err);
    /* Read the weights of the checkpoint f into t->w, refusing another model
     * (derived_check_model) or another shape. */
    subq_status (*read_weights)(void *self, trainer *t, const gguf_file *f, const char *path, subq_error *err);
    void (*free)(void *self);
} train_task_ops;

typedef struct train_task {
    const train_task_ops *ops;
    void *self;
} train_task;

struct trainer {
    subq_model *model;
    const subq_corpus *data;
    const subq_train_params *cfg;
    train_task task;
    subq_context *ctx;
    train_capture *cap;
    int n_threads;
    char *ckpt_path;            /* cfg->out_path + ".ckpt" */
    /* the sequence captured last: n tokens */
    int32_t *tok, *pos, *seg;
    int n;
    int *perm;                  /* data order of the current epoch */
    uint64_t perm_epoch;
    /* set by the task's create */
    const int *layers;
    int n_sel;
    float *w;                   /* the task's weights */
    size_t n_params;
    /* optimiser state */
    float *m, *v;               /* Adam moments, same layout as w */
    float *grad;                /* the gradient AdamW uses */
    double *gd;                 /* the task's double gradient sums (grad_f64) */
    int64_t step;
    uint64_t cursor, rng;
    int rank, n_ranks;          /* data-parallel (cfg->comm): this process, and all */
    double comm_s;              /* seconds in sums over the ranks (waits for the slowest included) */
    double *reduce;             /* scratch of the sums over ranks */
    train_sums *sums;           /* [n_sel] */
    subq_train_eval_layer *ev;       /* [n_sel] */
    /* latest figures, recorded in the output */
    double train_loss, train_part[SUBQ_TRAIN_MAX_PARTS];
    int have_eval;
    double eval_loss, eval_part[SUBQ_TRAIN_MAX_PARTS];
};

/* Set up a run (no resume): context, the task's weights and their initial
 * values, capture, optimiser state. trainer_free also frees the task. */
subq_status trainer_init(trainer *t, subq_model *m, const subq_corpus *data, const subq_train_params *cfg,
                         const train_task *task, subq_error *err);
void trainer_free(trainer *t);

/* Forward sequence i of split sp through the model, capturing the target
 * layers (t->tok / pos / seg / n), and the task's layer_loss on the way
 * (train: with gradients) into t->sums. */
subq_status trainer_capture(trainer *t, const corpus_split *sp, int i, int train, subq_error *err);
/* The same for the training sequence at data cursor `cursor`, train = 1. */
subq_status trainer_capture_train(trainer *t, uint64_t cursor, subq_error *err);

/* The whole run: init, resume, steps, evaluations, checkpoints, hooks. */
subq_status trainer_run(subq_model *m, const subq_corpus *data, const subq_train_params *cfg, const train_task *task,
                        const subq_train_hooks *hooks, subq_train_result *res, subq_error *err);

/* ---- checkpoints (checkpoint.c) ------------------------------------------- */

/* Write cfg->out_path, and the checkpoint when `ckpt`. */
subq_status train_save(const trainer *t, int ckpt, subq_error *err);
/* "key=value" lines of what shapes the run: the model's and the data's
 * fingerprints, then every option (as recorded in the output); returns the
 * length it needed (as snprintf). */
size_t train_describe(const trainer *t, char *buf, size_t cap);
/* Restore the weights, moments, step, cursor and rng from `path`. */
subq_status train_load(trainer *t, const char *path, subq_error *err);

#endif
