/* Writing the trainer's output and checkpoint, and resuming from it.
 *
 * OUT        the projection file (search_proj.h format) + training metadata:
 *            subq.search.step, subq.search.loss.*, subq.search.config.*,
 *            subq.search.data_fingerprint
 * OUT.ckpt   the same plus what resuming needs: Adam moments as tensors
 *            blk.{i}.indexer.{proj,attn_k}.adam_{m,v}, subq.train.cursor
 *            (sequences consumed) and subq.train.rng.
 * Both are written atomically (temp file + fsync + rename). */
#ifndef SUBQ_TRAIN_CHECKPOINT_H
#define SUBQ_TRAIN_CHECKPOINT_H

#include "train/search/train_search.h"

typedef struct train_state {
    search_proj *proj;          /* weights: proj->data */
    float *m, *v;               /* Adam moments, same layout as proj->data */
    size_t n_params;
    int64_t step;
    uint64_t cursor;
    uint64_t rng;
    /* latest figures, recorded in the metadata */
    double train_loss, train_nce, train_kl;
    int have_eval;
    double eval_loss, eval_nce, eval_kl;
} train_state;

/* Write cfg->out_path, and cfg->out_path + ".ckpt" when `ckpt`. */
subq_status train_save(const train_state *st, const train_search_config *cfg, const train_corpus *data, int ckpt,
                       subq_error *err);

/* Restore st (whose proj, m, v are allocated for cfg) from `path`. Refuses a
 * checkpoint of another model (SUBQ_ERR_MISMATCH), other training options
 * or other data (SUBQ_ERR_ARG, naming the option). */
subq_status train_load_checkpoint(const char *path, const subq_model *m, const train_search_config *cfg,
                                  const train_corpus *data, train_state *st, subq_error *err);

#endif
