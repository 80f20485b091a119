/* Inference context: KV cache, per-layer attention stages, work buffers. */
#ifndef SUBQ_CONTEXT_H
#define SUBQ_CONTEXT_H

#include "attn/attn.h"
#include "gguf/gguf.h"
#include "kv/kv_cache.h"
#include "model/matmul.h"
#include "model/model.h"

/* Called at the attention seam of every layer after RoPE (training capture):
 * h_norm [n][n_embd], q [n][n_head*head_dim], k and v [n][n_head_kv*head_dim]
 * for the n tokens in cache slots slot0 .. slot0+n-1. */
typedef void (*capture_fn)(void *user, int layer, int n, int slot0, const float *h_norm, const float *q,
                           const float *k, const float *v);

/* With a KV file, a forward that read from the disk (32 KiB or more of
 * ru_inblock: not major faults, which also count the zero pages of the
 * slots a decode step made small) makes the next KV_PREFETCH_STEPS prefetch
 * the rows they attend. Not just the next one: toggling at every step
 * halved 1M-token decode. */
#define KV_PREFETCH_STEPS 32

struct subq_context {
    subq_model *model;
    kv_cache kv;
    int n_threads;
    pool *pool;                  /* n_threads threads for the products and attention */
    int n_batch;                 /* max tokens per forward step */
    attn_stage **stages;         /* [n_layer]; full attention by default */
    double t_attn_s;             /* time spent in attention stages (benchmarks) */
    double t_fill_kv_s;          /* synthetic fills: writing keys and values (benchmarks) */
    double t_late_wall_s;        /* the forward's late index inserts (forward.c): wall clock, */
    double t_late_sum_s;         /* and summed over the threads that ran them */
    capture_fn capture;
    void *capture_user;
    int capture_last;            /* with a capture: stop each forward after capturing this layer
                                    (nothing past it is needed; -1: run every layer) */
    /* work buffers, n_batch rows each: one allocation at x, the others inside it */
    float *x, *xn, *q, *k, *v, *att, *proj, *gate, *up;
    int32_t *posbuf;             /* positions of the current chunk */
    const double *rope_freq;     /* hp.rope's frequencies for this context's size (rope_freq_for:
                                    Phi-3's LongRoPE takes the long factors past the original context) */
    float *rope_cs;              /* [n_batch][n_rot]: its RoPE cos, sin pairs */
    float *rope_cs_local;        /* the same for hp.rope_local (gemma3's sliding layers), else NULL */
    matmul_scratch mm;           /* batched products */
    int32_t *tok;                /* [n_ctx]: token id of each cache slot (-1: synthetic) */
    float *logits_last;          /* [n_vocab]: logits of the last cached token ... */
    int logits_at;               /* ... when logits_at == kv.n_used (else unknown, -1) */
    double commit_at;            /* with a KV file: when it last committed */
    int file_dirty;              /* with a KV file: rows or the token count changed since */
    int prefetch_left;           /* with a KV file: forwards that still prefetch their rows (context_forward) */
    int file_writable;           /* with a KV file: its search-key table is the plan's (else its
                                    committed tokens were made under another plan: no writes) */
};

/* With a KV file: commit when something changed (file_dirty) and it is
 * forced or a second has passed since the last commit. A context that
 * only read the file (or was reset without writing) leaves it as it was.
 * Forced, the last commit is on disk on return; else its flushes may still
 * run beside the next steps (kv_file_commit). */
subq_status context_commit(subq_context *c, int force, subq_error *err);
/* Empty the context (tokens, indexes) without touching a KV file's header
 * (subq_context_reset also makes the file forget its tokens). */
void context_forget(subq_context *c);
/* An empty cache in memory laid out for the context's plan: head-major
 * where it reads a layer in runs, slot-major where it retrieves rows
 * (kv_cache_set_layout); a cache that holds tokens, or a file, keeps its
 * layout (a file's follows the plan in context_file_plan). */
void context_lay_out(subq_context *c);
/* With a KV file: the search keys the context's plan stores (d[layer],
 * made_by[layer]; NULL for none): file_writable says whether the file now
 * takes them (see kv_file_set_search). */
subq_status context_file_plan(subq_context *c, const int *d, const uint64_t *made_by, subq_error *err);

/* Saved indexes (context_indexes.c): each sparse layer's index (hnsw's
 * graph) as tensor index.L of w, their count into *n_added; layer l's in
 * f, or NULL; those of c's KV file FILE in FILE.hnsw, written (when any
 * layer has one) and opened (NULL when there is none to read). */
subq_status context_add_indexes(gguf_writer *w, const subq_context *c, int *n_added, subq_error *err);
const gguf_tensor *context_find_index(const gguf_file *f, int l);
subq_status context_save_indexes(const subq_context *c, subq_error *err);
gguf_file *context_open_indexes(const subq_context *c);
/* What FILE.hnsw beside KV file kv_path says it holds (0, 0: none). */
void context_indexes_info(const char *kv_path, int *n_layers, int *n_tokens);

/* Forward n tokens with explicit positions and segment (document) ids
 * (either may be NULL: positions continue from the cache, segment 0).
 * Positions drive RoPE; segments make attention block-causal. Segment ids
 * may not decrease, from the cache's last slot on (SUBQ_ERR_ARG). */
subq_status context_forward(subq_context *c, const int32_t *tokens, int n, const int32_t *pos,
                            const int32_t *seg, float *logits, int all_logits, subq_error *err);

#endif
