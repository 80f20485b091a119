/* Learned search projections: per chosen layer i, W_Qs^i and W_Ks^i
 * (d_search x d_model) map the normed hidden state h entering attention to a
 * search space, q_s = W_Qs h and k_s = W_Ks h, where a query's nearest keys
 * should be the keys the frozen model attends to.
 *
 * File format (GGUF, general.architecture = "subq-search"), tensors in the
 * orientation llama.cpp uses for weights (ne = {d_model, d_search}: d_search
 * rows of d_model floats), f32, so they can be merged into a model GGUF:
 *   blk.{i}.indexer.proj.weight    W_Qs
 *   blk.{i}.indexer.attn_k.weight  W_Ks
 * metadata: subq.search.d_search (u32), subq.search.layers (i32 array),
 * subq.search.model_fingerprint (16 hex digits of model_fingerprint()),
 * subq.search.model_n_embd, subq.search.model_n_layer (u32), the rotary part
 * subq.search.rope_dims (u32), subq.search.rope_base and .rope_scale (f32;
 * search_rope.h; a file without them rotates nothing), plus whatever the
 * trainer adds (step, loss.*, config.*).
 *
 * Per-head search (subq_search_granularity): W_Qs holds n_qhead heads of
 * d_search rows (ne = {d_model, n_qhead * d_search}), W_Ks n_khead heads,
 * head a's rows at a * d_search; query head a ranks with key head
 * a / (n_qhead / n_khead), each rotating its own last rope_dims dims.
 * subq.search.granularity ("kv-head" | "head"), subq.search.query_heads and
 * .key_heads (u32) say so; files without them are one head ("layer").
 *
 * The same tensors merged into a model GGUF (any type subq dequantises), with the
 * metadata of ann-sparseattention's llama.cpp runtime, are read from the
 * model file itself (search_merge.c holds that layout). */
#ifndef SUBQ_SEARCH_PROJ_H
#define SUBQ_SEARCH_PROJ_H

#include <stdint.h>

#include "gguf/gguf.h"
#include "search/search_rope.h"
#include "subq.h"

#define SEARCH_PROJ_ARCH "subq-search"
#define SEARCH_PROJ_MAX_D SUBQ_SEARCH_MAX_D

typedef struct search_proj {
    int n_layer;                 /* layers of the model it belongs to */
    int n_embd;                  /* d_model */
    int d_search;                /* width of one search head */
    subq_search_granularity gran;
    int n_qhead, n_khead;        /* search heads of W_Qs / W_Ks (1 / 1 for SUBQ_SEARCH_LAYER) */
    search_rope rope;            /* the last rope.n_rot dims rotate by position (0: none) */
    uint64_t model_fingerprint;
    int n_sel;                   /* layers that have projections ... */
    int *layers;                 /* ... ascending: [n_sel] */
    float **wq, **wk;            /* [n_layer]: [n_qhead (n_khead) * d_search][n_embd] row-major, NULL where absent
                                    (wk: the second half of wq's allocation) */
    float *data;                 /* one block holding every matrix */
    int merged;                  /* read from a model file (model_fingerprint not stored) */
    int top_k;                   /* the runtime's {arch}.attention.indexer.top_k; 0 when absent */
    char origin[256];            /* subq.search.origin: where converted projections come from ("" none) */
} search_proj;

/* Zero projections of width d_search (no rotation) for `layers` (n_sel distinct indices
 * in [0, n_layer), any order) of a model with n_embd and fingerprint fp. */
subq_status search_proj_new(int n_layer, int n_embd, int d_search, const int *layers, int n_sel, uint64_t fp,
                            search_proj **out, subq_error *err);
/* The same with n_qhead / n_khead search heads of width d_search each
 * (granularity gran; LAYER takes 1 / 1). */
subq_status search_proj_new_heads(int n_layer, int n_embd, int d_search, subq_search_granularity gran, int n_qhead,
                                  int n_khead, const int *layers, int n_sel, uint64_t fp, search_proj **out,
                                  subq_error *err);
void search_proj_free(search_proj *p);

/* Search heads of a model with n_head query and n_head_kv KV heads at
 * granularity g: *n_qhead, *n_khead. */
void search_heads_of(subq_search_granularity g, int n_head, int n_head_kv, int *n_qhead, int *n_khead);
/* "layer" | "kv-head" | "head"; parse gives -1 for anything else. */
const char *search_granularity_name(subq_search_granularity g);
int search_granularity_parse(const char *name);

/* Fill every matrix with N(0, std^2) from the caller's rng state, layer by
 * layer in ascending order, W_Qs then W_Ks, row-major. */
void search_proj_init_normal(search_proj *p, float std, uint64_t *rng_state);

/* Random (untrained) projections of width d_search for the given layers of
 * model m, N(0, 1/d_model): a baseline and a stand-in for speed tests. */
subq_status search_proj_random(const subq_model *m, const int *layers, int n_sel, int d_search, uint64_t seed,
                               search_proj **out, subq_error *err);
/* The same with search heads at granularity g (search_heads_of m's heads). */
subq_status search_proj_random_heads(const subq_model *m, const int *layers, int n_sel, int d_search,
                                     subq_search_granularity g, uint64_t seed, search_proj **out, subq_error *err);

/* Load a projection file, or the projections merged into a model file, for
 * model m. A file made for another model (for a model file: whose weights
 * are not m's) is refused with SUBQ_ERR_MISMATCH; a malformed one with
 * SUBQ_ERR_FORMAT / SUBQ_ERR_SHAPE / SUBQ_ERR_UNSUPPORTED, naming the file. */
subq_status search_proj_load(const char *path, const subq_model *m, search_proj **out, subq_error *err);

/* Read the projections of an open file (a projection file or a model file
 * with merged projections) without checking them against a model (the
 * caller compares model_fingerprint itself; merged ones carry none). */
subq_status search_proj_read(const gguf_file *f, const char *path, search_proj **out, subq_error *err);

/* ---- merged into model files (search_merge.c) ------------------------ */

/* 1 if f carries merged projections: the runtime's key length key or an
 * indexer tensor. */
int search_merged_present(const gguf_file *f);
/* Read them (p->merged = 1, model_fingerprint 0); see search_merge.c. */
subq_status search_merged_read(const gguf_file *f, const char *path, search_proj **out, subq_error *err);
/* The projections merged into m's own file, with m's fingerprint;
 * SUBQ_ERR_RANGE when it carries none. */
subq_status search_proj_from_model(const subq_model *m, search_proj **out, subq_error *err);

typedef struct search_merge_opts {
    int top_k;         /* written as {arch}.attention.indexer.top_k (> 0) */
    uint32_t type;     /* GGML_TYPE_F32, _F16 or _BF16 */
    const char *source;        /* written as ann_sparse.checkpoint (may be NULL) */
    const gguf_file *extra;    /* its subq.search.* keys are carried along (may be NULL) */
} search_merge_opts;
/* Write m's file (metadata and tensors unchanged, earlier merged projections
 * dropped) with p's projections in the runtime's layout to path, atomically.
 * p must belong to m. */
subq_status search_merge_write(const subq_model *m, const search_proj *p, const search_merge_opts *o,
                               const char *path, subq_error *err);
/* Write the projections merged into m's file as a projection file (with
 * m's fingerprint and the subq.search.* keys the merged file carries). */
subq_status search_split_write(const subq_model *m, const char *path, subq_error *err);

/* What a file carries, for display: SUBQ_ERR_RANGE when no projections. */
typedef struct search_file_info {
    int merged, d_search, n_layers, top_k;
    search_rope rope;  /* n_rot 0 for merged projections */
    subq_search_granularity gran;
    int n_qhead, n_khead;  /* search heads (1 / 1 for merged projections) */
    uint32_t type;     /* of the matrices; GGML_TYPE_COUNT when they differ */
    char layers[256];
    char arch[32];     /* merged: the model's general.architecture */
} search_file_info;
subq_status search_file_info_read(const gguf_file *f, const char *path, search_file_info *out, subq_error *err);

/* Add the tensors and the core subq.search.* metadata to a writer (tensor
 * data is referenced, not copied: keep p alive until the write). */
subq_status search_proj_to_writer(const search_proj *p, gguf_writer *w, subq_error *err);
/* Write a file with just the core metadata (atomic). */
subq_status search_proj_save(const search_proj *p, const char *path, subq_error *err);

/* q_s[t] = W_Qs h[t], k_s[t] = W_Ks h[t] for n rows of h (n x n_embd) at
 * `layer` (which must have projections); either output may be NULL. Rows
 * of q_s hold n_qhead * d_search floats, of k_s n_khead * d_search. */
void search_proj_apply(const search_proj *p, int layer, const float *h, int n, float *q_s, float *k_s,
                       int n_threads);

/* Tensor names of layer i. */
void search_proj_tensor_names(int layer, char *q_name, char *k_name, size_t cap);

#endif
