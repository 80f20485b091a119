/* Completion feature maps (Hoshi, Miyashita, Deguchi 2026): per chosen layer,
 * a learned positive feature map phi_q per query head and phi_k per KV head,
 * R^head_dim -> R^d_phi, applied to post-RoPE vectors, such that
 *   z(q, k) = <phi_q(q), phi_k(k)>  ~  exp(scale q.k)  (the layer's scale).
 * One map:
 *   g0 = Ws x + bs                                  (stem, width d_emb)
 *   g1 = g0 + alpha (W2 GELU(W1 g0 + b1) + b2)      (ReZero block, width d_hidden inside,
 *                                                    alpha learned, initialised to 0)
 *   log phi(x) = Wo g1 + bo                         (d_phi; phi = exp of it, never formed)
 * GELU is the tanh approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
 * everywhere (library, trainer, numpy oracle).
 *
 * Parameters live in one float block, layer by layer (ascending), each layer
 * [q maps][k maps], each group tensor-major: tensor t of all heads of the
 * group back to back (head h at h * size(t)), in the order ws, bs, w1, b1,
 * w2, b2, alpha, wo, bo. Every gradient / optimiser array shares the layout.
 *
 * File (GGUF, general.architecture = "subq-phi"): per layer i and group
 * g in {phi_q, phi_k}, f32, heads stacked as the outermost dimension and
 * weights in llama.cpp orientation (ne[0] = input width):
 *   blk.{i}.{g}.ws.weight  ne {head_dim, d_emb, n}     blk.{i}.{g}.ws.bias  ne {d_emb, n}
 *   blk.{i}.{g}.w1.weight  ne {d_emb, d_hidden, n}     blk.{i}.{g}.w1.bias  ne {d_hidden, n}
 *   blk.{i}.{g}.w2.weight  ne {d_hidden, d_emb, n}     blk.{i}.{g}.w2.bias  ne {d_emb, n}
 *   blk.{i}.{g}.alpha      ne {1, n}
 *   blk.{i}.{g}.wo.weight  ne {d_emb, d_phi, n}        blk.{i}.{g}.wo.bias  ne {d_phi, n}
 * with n = n_head for phi_q and n_head_kv for phi_k. Metadata subq.phi.*:
 * d_phi, d_emb, d_hidden, head_dim, n_head, n_head_kv (u32), layers (i32
 * array), model_fingerprint (16 hex digits of model_fingerprint()),
 * model_n_layer (u32), gelu ("tanh"), n_sink, n_tail (u32: the partition
 * the maps were trained for), plus what the trainer adds. */
#ifndef SUBQ_PHI_MAPS_H
#define SUBQ_PHI_MAPS_H

#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "subq.h"

#define PHI_ARCH "subq-phi"
#define PHI_MAX_DIM SUBQ_PHI_MAX_DIM /* d_emb, d_hidden, d_phi, head_dim */

enum { PHI_Q = 0, PHI_K = 1 };
enum { PHI_WS, PHI_BS, PHI_W1, PHI_B1, PHI_W2, PHI_B2, PHI_ALPHA, PHI_WO, PHI_BO, PHI_N_TENSORS };

typedef struct phi_dims {
    int head_dim, d_emb, d_hidden, d_phi;
    int n_head, n_head_kv;
} phi_dims;

typedef struct phi_maps {
    phi_dims dims;
    int n_layer;                 /* layers of the model */
    uint64_t model_fingerprint;
    int n_sel;                   /* layers with maps ... */
    int *layers;                 /* ... ascending: [n_sel] */
    int *sel_of_layer;           /* [n_layer]: index into layers, -1 where absent (in layers' allocation) */
    int n_sink, n_tail;          /* partition used in training (informative) */
    float *h_mid;                /* [n_sel][n_head] mean normalised mid-region entropy per
                                    query head (subq.phi.h_mid, written by train-phi
                                    --diagnose --annotate), NULL when absent */
    size_t layer_size;           /* floats per layer block */
    float *data;                 /* [n_sel][layer_size] */
} phi_maps;

/* Floats of tensor t of one map, of one whole map, of one layer block. */
size_t phi_tensor_size(const phi_dims *d, int t);
size_t phi_map_size(const phi_dims *d);
size_t phi_layer_size(const phi_dims *d);
/* Offset of tensor t of head h of group `which` inside a layer block. */
size_t phi_param_offset(const phi_dims *d, int which, int t, int head);
/* Heads of a group. */
static inline int phi_n_maps(const phi_dims *d, int which) { return which == PHI_Q ? d->n_head : d->n_head_kv; }
/* GGUF shape of the stacked tensor t of a group (all its heads): {cols,
 * rows, n} for matrices, {cols, n} for vectors; returns the dimension count. */
int phi_tensor_gguf_shape(const phi_dims *d, int which, int t, uint64_t ne[3]);
/* "ws.weight", "ws.bias", ..., "alpha", ... */
const char *phi_tensor_suffix(int t);
/* "blk.{layer}.phi_{q|k}.{suffix}" into buf. */
void phi_tensor_name(int layer, int which, int t, char *buf, size_t cap);

/* Validate dims (SUBQ_ERR_ARG naming the bad value). */
subq_status phi_dims_check(const phi_dims *d, subq_error *err);

/* Zero maps for `layers` (distinct, in [0, n_layer), any order). */
subq_status phi_maps_new(const phi_dims *d, int n_layer, const int *layers, int n_sel, uint64_t fp,
                         phi_maps **out, subq_error *err);
void phi_maps_free(phi_maps *p);

/* Initial weights from the caller's rng, layer by layer, q group then k
 * group, tensor by tensor in layout order:
 *   Ws ~ N(0, 1/head_dim), W1 ~ N(0, 1/d_emb), W2 ~ N(0, 1/d_hidden),
 *   Wo ~ N(0, wo_std^2 / d_emb), biases 0 except bo = -log(d_phi) / 2, alpha 0
 * (so z(q, k) starts near 1 whatever q and k; the trainer then moves bo to
 * the teacher's level). */
void phi_maps_init(phi_maps *p, float wo_std, uint64_t *rng_state);

/* Parameter block of model layer `layer` (NULL when it has no maps). */
float *phi_layer_params(const phi_maps *p, int layer);

/* log phi(x) of map (which, head) of model layer `layer` for one post-RoPE
 * vector x [head_dim] into logphi [d_phi] (float, straight-line; the result
 * is a log-feature and is never exponentiated here). A layer without maps
 * gives -INFINITY everywhere (phi = 0: no completion). */
void phi_log_features(const phi_maps *p, int layer, int which, int head, const float *x, float *logphi);

/* ---- file I/O ---------------------------------------------------------- */

/* Load a map file for model m: SUBQ_ERR_MISMATCH (one line naming both
 * fingerprints) when it was trained for another model or the head shape
 * differs; FORMAT / SHAPE / UNSUPPORTED for malformed files. */
subq_status phi_maps_load(const char *path, const subq_model *m, phi_maps **out, subq_error *err);
/* Read the maps of an open file without checking them against a model. */
subq_status phi_maps_read(const gguf_file *f, const char *path, phi_maps **out, subq_error *err);
/* Tensors (referenced, keep p alive until the write) and core metadata. */
subq_status phi_maps_to_writer(const phi_maps *p, gguf_writer *w, subq_error *err);
/* Store per-head mid-region entropies h_mid [n_sel][n_head] in the map file
 * at `path` (rewritten atomically; its other metadata and tensors kept). */
subq_status phi_maps_annotate_entropy(const char *path, const float *h_mid, subq_error *err);
/* Write a file with the core metadata (atomic). */
subq_status phi_maps_save(const phi_maps *p, const char *path, subq_error *err);

#endif
