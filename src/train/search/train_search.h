/* Learning search projections by distillation from the frozen model's own
 * attention (the library call behind `subq train-search`), a task of the
 * training driver (train/trainer.h).
 *
 * Per sequence, the capture keeps h, q, k of the target layers; the loss
 * (search_loss.h) and its gradient are computed per layer; the objective is
 * the mean over layers and queries. Evaluation on the held-out split reports
 * the losses and mass@K / recall@K of the learned space, of the raw-QK oracle
 * and of the recency window (search_eval.h).
 *
 * loss.n_sink / loss.n_tail (default 4 / 16, the sparse runtime's defaults)
 * align training with the runtime, which always attends the first n_sink
 * keys of a document and the n_tail most recent ones and retrieves only
 * among the rest: both losses, the teacher they use and the evaluation then
 * see only those retrieval-eligible keys (search_loss.h, search_eval.h);
 * 0 / 0 trains over every causal key.
 *
 * Output: OUT is a projection file (search_proj.h) with the training
 * metadata subq.search.step, subq.search.loss.{train,eval}{,_nce,_kl},
 * subq.search.config.*, subq.search.data_fingerprint; OUT.ckpt adds the Adam
 * moments blk.{i}.indexer.{proj,attn_k}.adam_{m,v} (train/task.h). */
#ifndef SUBQ_TRAIN_SEARCH_H
#define SUBQ_TRAIN_SEARCH_H

#include "search/search_proj.h"
#include "data/corpus.h"
#include "train/search/search_eval.h"
#include "train/search/search_loss.h"
#include "train/trainer.h"

/* The defaults listed above; 1000 steps (layers and out_path left empty). */
subq_train_search_params train_search_default_config(void);

subq_status train_search_run(subq_model *m, const subq_corpus *data, const subq_train_search_params *cfg,
                             const subq_train_hooks *hooks, subq_train_result *res, subq_error *err);

/* Testing aid: the teacher forward on the first training sequence, written
 * as a GGUF for the numpy reference (tests/ref/check_train_teacher.py):
 * tokens/pos/seg, per target layer h, q, k, the dense teacher matrix
 * [T][T], the initial W_Qs / W_Ks, and the losses and retrieval metrics
 * the library computes for them. */
subq_status train_search_dump_teacher(subq_model *m, const subq_corpus *data, const subq_train_search_params *cfg,
                                      const char *path, subq_error *err);

#endif
