/* Teacher capture: run the frozen model over one sequence (full attention,
 * explicit positions and segments) and keep, for each target layer, what
 * enters attention: the normed hidden state h and the post-RoPE native q, k
 * and the values v. Memory is one sequence's worth: n_sel x seq x (d_model +
 * q + 2 k) floats.
 *
 * A seam callback, when given, is called once per target layer with that
 * layer's rows captured. Where the sequence is one forward batch, every
 * target layer but the last calls it from the forward itself, in place of
 * the layer's attention: it must write the layer's attention output (the
 * softmax over each query's document, [n][n_head*head_dim]), so that a
 * teacher that computes those logits anyway saves the forward computing them
 * again. Otherwise (the last layer, or a sequence split into batches) it is
 * called after the forward with out = NULL. */
#ifndef SUBQ_TRAIN_CAPTURE_H
#define SUBQ_TRAIN_CAPTURE_H

#include <stdint.h>

#include "attn/attn.h"
#include "model/context.h"
#include "train/search/search_loss.h"

typedef subq_status (*capture_seam_fn)(void *user, int i, float *attn_out, subq_error *err);

typedef struct train_capture {
    int n_layer, n_sel, cap_rows;
    int d, dq, dk;
    attn_shape shape;
    int *sel_of_layer;   /* [n_layer]: index into the buffers, -1 when not captured (in layers' allocation) */
    int *layers;         /* [n_sel] */
    float **h, **q, **k, **v; /* [n_sel] -> [cap_rows][d | dq | dk | dk]; one allocation at h[i] */
    int n_rows;          /* rows captured by the last run */
    int n_fused;         /* target layers whose attention the seam gave in the last run */
    /* the stage standing in for a target layer's attention (seam_forward) */
    attn_stage seam_stage;
    attn_stage **saved_stages; /* [n_layer]: the context's, while the seam stands in */
    capture_seam_fn seam;
    void *seam_user;
} train_capture;

subq_status train_capture_new(const subq_model *m, const int *layers, int n_sel, int cap_rows, train_capture **out,
                              subq_error *err);
void train_capture_free(train_capture *c);

/* Reset the context and forward n tokens with positions and segments,
 * recording the target layers; seam (may be NULL) as above. */
subq_status train_capture_run(train_capture *cap, subq_context *ctx, const int32_t *tok, const int32_t *pos,
                              const int32_t *seg, int n, capture_seam_fn seam, void *seam_user, subq_error *err);

/* The captured data of target layer index i (0..n_sel-1) for the last run. */
search_layer_data train_capture_layer(const train_capture *cap, int i, const int32_t *pos, const int32_t *seg);

#endif
