#include "train/capture.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

void train_capture_free(train_capture *c) {
    if (!c) return;
    for (int i = 0; c->h && i < c->n_sel; i++) free(c->h[i]); /* and q[i], k[i], v[i] */
    free(c->h);
    free(c->q);
    free(c->k);
    free(c->v);
    free(c->layers); /* and sel_of_layer */
    free(c->saved_stages);
    free(c);
}

subq_status train_capture_new(const subq_model *m, const int *layers, int n_sel, int cap_rows, train_capture **out,
                              subq_error *err) {
    *out = NULL;
    const model_hparams *hp = &m->hp;
    train_capture *c = calloc(1, sizeof *c);
    if (!c) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    c->n_layer = hp->n_layer;
    c->n_sel = n_sel;
    c->cap_rows = cap_rows;
    c->d = hp->n_embd;
    c->dq = hp->n_head * hp->head_dim;
    c->dk = hp->n_head_kv * hp->head_dim;
    c->shape = (attn_shape){hp->n_head, hp->n_head_kv, hp->head_dim, hp->layer[n_sel > 0 ? layers[0] : 0].scale};
    c->layers = malloc(((size_t)n_sel + hp->n_layer) * sizeof(int));
    c->h = calloc((size_t)n_sel, sizeof(float *));
    c->q = calloc((size_t)n_sel, sizeof(float *));
    c->k = calloc((size_t)n_sel, sizeof(float *));
    c->v = calloc((size_t)n_sel, sizeof(float *));
    c->saved_stages = calloc((size_t)hp->n_layer, sizeof(attn_stage *));
    int ok = c->layers && c->h && c->q && c->k && c->v && c->saved_stages;
    if (ok) {
        c->sel_of_layer = c->layers + n_sel;
        for (int l = 0; l < hp->n_layer; l++) c->sel_of_layer[l] = -1;
        for (int i = 0; i < n_sel && ok; i++) {
            c->layers[i] = layers[i];
            c->sel_of_layer[layers[i]] = i;
            /* a layer's h, q, k and v rows: one allocation at h[i] */
            c->h[i] = malloc((size_t)cap_rows * (c->d + c->dq + 2 * c->dk) * sizeof(float));
            ok = c->h[i] != NULL;
            if (ok) {
                c->q[i] = c->h[i] + (size_t)cap_rows * c->d;
                c->k[i] = c->q[i] + (size_t)cap_rows * c->dq;
                c->v[i] = c->k[i] + (size_t)cap_rows * c->dk;
            }
        }
    }
    if (!ok) {
        train_capture_free(c);
        return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory for the teacher capture (%d layers x %d rows)", n_sel,
                         cap_rows);
    }
    *out = c;
    return SUBQ_OK;
}

/* capture_fn: copy the rows of a target layer into its buffers at slot0 */
static void capture_hook(void *user, int layer, int n, int slot0, const float *h, const float *q, const float *k,
                         const float *v) {
    train_capture *c = user;
    int i = c->sel_of_layer[layer];
    if (i < 0 || slot0 + n > c->cap_rows) return;
    memcpy(c->h[i] + (size_t)slot0 * c->d, h, (size_t)n * c->d * sizeof(float));
    memcpy(c->q[i] + (size_t)slot0 * c->dq, q, (size_t)n * c->dq * sizeof(float));
    memcpy(c->k[i] + (size_t)slot0 * c->dk, k, (size_t)n * c->dk * sizeof(float));
    memcpy(c->v[i] + (size_t)slot0 * c->dk, v, (size_t)n * c->dk * sizeof(float));
}

/* attn_stage of a target layer: the seam writes its attention output */
static subq_status seam_forward(attn_stage *self, const attn_step *st, const kv_cache *kv, subq_error *err) {
    (void)kv;
    train_capture *c = (train_capture *)((char *)self - offsetof(train_capture, seam_stage));
    return c->seam(c->seam_user, c->sel_of_layer[st->layer], st->out, err);
}

subq_status train_capture_run(train_capture *cap, subq_context *ctx, const int32_t *tok, const int32_t *pos,
                              const int32_t *seg, int n, capture_seam_fn seam, void *seam_user, subq_error *err) {
    if (n > cap->cap_rows)
        return subq_fail(err, SUBQ_ERR_RANGE, "sequence of %d tokens exceeds the capture capacity %d", n, cap->cap_rows);
    subq_context_reset(ctx);
    capture_fn prev = ctx->capture;
    void *prev_user = ctx->capture_user;
    ctx->capture = capture_hook;
    ctx->capture_user = cap;
    int last = -1; /* the forward stops after the last target layer */
    for (int l = 0; l < ctx->model->hp.n_layer; l++)
        if (cap->sel_of_layer[l] >= 0) last = l;
    ctx->capture_last = last;
    cap->n_rows = n; /* for the seam, which reads the rows as they are captured */
    /* one forward batch: the seam stands in for the attention of the target
     * layers before the last */
    const int in_forward = seam && n <= subq_context_n_batch(ctx);
    cap->seam_stage = (attn_stage){.name = "teacher seam", .forward = seam_forward};
    cap->seam = seam;
    cap->seam_user = seam_user;
    cap->n_fused = 0;
    for (int l = 0; in_forward && l < last; l++) {
        cap->saved_stages[l] = ctx->stages[l];
        if (cap->sel_of_layer[l] >= 0) ctx->stages[l] = &cap->seam_stage, cap->n_fused++;
    }
    subq_status s = context_forward(ctx, tok, n, pos, seg, NULL, 0, err);
    for (int l = 0; in_forward && l < last; l++) ctx->stages[l] = cap->saved_stages[l];
    ctx->capture = prev;
    ctx->capture_user = prev_user;
    ctx->capture_last = -1;
    for (int i = 0; !s && seam && i < cap->n_sel; i++)
        if (!in_forward || cap->layers[i] == last) s = seam(seam_user, i, NULL, err);
    cap->n_rows = s ? 0 : n;
    return s;
}

search_layer_data train_capture_layer(const train_capture *cap, int i, const int32_t *pos, const int32_t *seg) {
    search_layer_data x = {.T = cap->n_rows, .pos = pos, .seg = seg, .d_model = cap->d, .h = cap->h[i], .q = cap->q[i],
                           .k = cap->k[i], .v = cap->v[i], .shape = cap->shape};
    return x;
}
