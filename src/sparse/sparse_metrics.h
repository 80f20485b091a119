/* Retrieval metrics of a sparse stage (subq eval): how much of full
 * attention's softmax mass the attended keys hold, and how many of the
 * teacher's top-K keys the selector found. Measured for a whole batch of
 * queries at once after the stage has attended them, with the teacher's
 * scores as sgemm blocks (Q K^T per KV head and block of queries), so that
 * measuring costs about a dense prefill rather than one dot product per
 * query, head and key. */
#ifndef SUBQ_ATTN_SPARSE_METRICS_H
#define SUBQ_ATTN_SPARSE_METRICS_H

#include <stdint.h>

#include "sparse/attn_sparse.h"
#include "kv/kv_cache.h"
#include "select/selector.h"

/* A batch of queries to measure: token t is cache slot slot0 + t, whose
 * document starts at doc0[t]; it attended the slots mask[t] excludes from
 * retrieval inside its document (sinks, tail) plus its candidates, and the
 * keys mask[t] allows are the retrieval-eligible ones. Candidates: n_sets =
 * n_head sets of top_k per token (per-head selectors) or one, -1 = filler. */
typedef struct sparse_measure {
    int layer, n_tokens, slot0;
    int n_head, n_head_kv, head_dim, top_k;
    float scale;                /* of q . k (the layer's layer_attn.scale) */
    int per_head;
    const float *q;             /* [n_tokens][n_head][head_dim], post-RoPE */
    const int *doc0;            /* [n_tokens] */
    const select_mask *mask;    /* [n_tokens] */
    const int32_t *cand;        /* [n_tokens][n_sets][top_k] */
    pool *pool;                 /* the threads (NULL: the caller's) */
} sparse_measure;

/* Adds the batch's mass, recall, seed mass and recall and query counts to
 * acc (see sparse_metrics; filler and ANN recall are counted by the stage).
 * The sums run in token order, whatever the thread count. */
subq_status sparse_metrics_measure(const sparse_measure *b, const kv_cache *kv, sparse_metrics *acc,
                                   subq_error *err);

/* The metrics side of a sparse stage, off until attn_stage_enable_metrics:
 * the totals, and for the batch being attended each query's document start,
 * mask and (per-head selectors) every head's candidates, measured once the
 * batch is attended. Beside an ANN selector, a shadow exact selector over
 * the same keys gives the ANN recall. */
typedef struct sparse_probe {
    int on;
    sparse_metrics totals;
    int *doc0;                  /* [cap] */
    select_mask *mask;          /* [cap] */
    int32_t *hcand;             /* [cap][n_head][top_k] (per-head selectors) */
    int32_t *exact;             /* the shadow's set for one query */
    int32_t *rows;              /* [n_head][top_k]: a KV head's candidates, for their union */
    int cap;
    selector *shadow;           /* NULL unless the selector is approximate */
} sparse_probe;

/* Turn the probe on; sel/env are the stage's selector's (a shadow exact
 * selector by the same score is made when sel is approximate). */
subq_status sparse_probe_enable(sparse_probe *p, const selector_params *sel, const selector_env *env, int d_search,
                                subq_error *err);
/* Room to note a batch of n queries. */
subq_status sparse_probe_reserve(sparse_probe *p, int n, int n_head, int top_k, int per_head, subq_error *err);
/* One query as attended: the filler (top_k - got) and, with a shadow, the
 * recall of cand[0..got) against the exact set under the same mask. */
subq_status sparse_probe_count(sparse_probe *p, const float *q_s, const float *q_native, const select_mask *m,
                               int top_k, const int32_t *cand, int got, int layer, subq_error *err);
/* Per-head selectors: query t's heads' candidates, -1 filled, and filler. */
void sparse_probe_heads(sparse_probe *p, int t, int n_head, int top_k, const int32_t *hcand, const int *hgot);
/* The KV rows one query reads per KV head (sparse_metrics.rows_sum): n_fixed
 * (sinks + tail) + the distinct slots of the KV head's query heads' sets. */
void sparse_probe_rows(sparse_probe *p, int n_head, int n_head_kv, int top_k, const int32_t *hcand, const int *hgot,
                       int n_fixed);
void sparse_probe_free(sparse_probe *p);

#endif
