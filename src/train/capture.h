/* Teacher capture: run the frozen model over one sequence (full attention,
 * explicit positions and segments) and keep, for each target layer, what
 * enters attention: the normed hidden state h and the post-RoPE native q, k.
 * Memory is one sequence's worth: n_sel x seq x (d_model + q + k) floats. */
#ifndef SUBQ_TRAIN_CAPTURE_H
#define SUBQ_TRAIN_CAPTURE_H

#include <stdint.h>

#include "model/context.h"
#include "train/search/search_loss.h"

typedef struct train_capture {
    int n_layer, n_sel, cap_rows;
    int d, dq, dk;
    attn_shape shape;
    int *sel_of_layer;   /* [n_layer]: index into the buffers, -1 when not captured (in layers' allocation) */
    int *layers;         /* [n_sel] */
    float **h, **q, **k; /* [n_sel] -> [cap_rows][d | dq | dk]; h[i], q[i], k[i]: one allocation at h[i] */
    int n_rows;          /* rows captured by the last run */
} train_capture;

subq_status train_capture_new(const subq_model *m, const int *layers, int n_sel, int cap_rows, train_capture **out,
                              subq_error *err);
void train_capture_free(train_capture *c);

/* Reset the context and forward n tokens with positions and segments,
 * recording the target layers. */
subq_status train_capture_run(train_capture *cap, subq_context *ctx, const int32_t *tok, const int32_t *pos,
                              const int32_t *seg, int n, subq_error *err);

/* The captured data of target layer index i (0..n_sel-1) for the last run. */
search_layer_data train_capture_layer(const train_capture *cap, int i, const int32_t *seg);

#endif
