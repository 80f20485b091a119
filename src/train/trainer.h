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

/* Defaults shared by the tasks (layers, lr, weight decay, warm-up, steps,
 * evaluation and output left for the task to set). */
subq_train_params train_default_config(void);

#endif
