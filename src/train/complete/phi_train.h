/* Learning the completion maps by distillation from the frozen model's own
 * attention logits (the library call behind `subq train-phi`), a task of
 * the training driver (train/trainer.h).
 *
 * Per sequence, the capture keeps the post-RoPE q, k of the target layers;
 * phi_loss_layer gives the loss over every (query head, query) with a
 * non-empty mid region and its gradient (double, by hand); the objective is
 * the mean over layers, heads and queries. Evaluation on the held-out split
 * reports the same losses per layer.
 *
 * Output: OUT is a completion map file (phi_maps.h) with subq.phi.step,
 * subq.phi.loss.{train,eval}{,_kl,_top,_fp,_z,_lse_err}, subq.phi.config.*,
 * subq.phi.data_fingerprint; OUT.ckpt adds the Adam moments as tensors
 * "<weight name>.adam_m" / ".adam_v" (train/task.h). */
#ifndef SUBQ_TRAIN_PHI_TRAIN_H
#define SUBQ_TRAIN_PHI_TRAIN_H

#include "train/complete/phi_loss.h"
#include "data/corpus.h"
#include "train/trainer.h"

subq_train_phi_params phi_train_default_config(void);

subq_status phi_train_run(subq_model *m, const subq_corpus *data, const subq_train_phi_params *cfg,
                          const subq_train_hooks *hooks, subq_train_result *res, subq_error *err);

/* Testing aid (tests/ref/check_phi_train.py): for the first training
 * sequence and the initial maps, write to `path` the maps (as in OUT), the
 * sequence (f32 tensors tokens, pos, seg), per target layer l the captured
 * q, k (cap.{l}.q / cap.{l}.k), the float log features of every head
 * (feat.{l}.q [T][n_head][d_phi], feat.{l}.k), the double loss sums
 * (metadata subq.phi.dump.{l}.sums: f64 [loss, kl, top, fp, z, lse, n]) and
 * the gradient of the summed loss (grad.{l}, flat, phi_maps layout). */
subq_status phi_train_dump(subq_model *m, const subq_corpus *data, const subq_train_phi_params *cfg, const char *path,
                           subq_error *err);

#endif
