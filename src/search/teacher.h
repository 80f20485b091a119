/* The teacher: the frozen model's own attention distribution at one layer,
 * rebuilt in fp32 from captured post-RoPE q and k under the block-causal
 * mask and aggregated over query heads. This is what the search space is
 * trained to reproduce.
 *
 * Eligibility (as the model's attention): key j is eligible for query t iff
 * seg[j] == seg[t] and j <= t. Segments are contiguous runs with
 * non-decreasing ids (packed documents), so the eligible keys of t are the
 * range [start[t], t]. */
#ifndef SUBQ_SEARCH_TEACHER_H
#define SUBQ_SEARCH_TEACHER_H

#include <stdint.h>

#include "subq.h"

typedef enum teacher_agg { TEACHER_AGG_MAX = 0, TEACHER_AGG_MEAN = 1 } teacher_agg;

/* "max" / "mean"; parse returns -1 for anything else. */
const char *teacher_agg_name(teacher_agg a);
int teacher_agg_parse(const char *s);

/* Native attention geometry of one layer (GQA: query head h reads kv head
 * h / (n_head / n_head_kv)). q rows are n_head*head_dim, k rows
 * n_head_kv*head_dim floats. */
typedef struct attn_shape {
    int n_head, n_head_kv, head_dim;
} attn_shape;

/* start[t] = first index of t's segment. SUBQ_ERR_ARG when ids decrease
 * (a segment that is not one contiguous run). */
subq_status segment_starts(const int32_t *seg, int T, int *start, subq_error *err);

/* kt[r][j] = k[j][r]: keys transposed to [n_head_kv*head_dim][T] so that a
 * query's scores against a run of keys are contiguous, vectorisable loops. */
void teacher_keys_transpose(const float *k, int T, const attn_shape *sh, float *kt);

/* Teacher distribution of query t over its eligible keys j = s..t:
 *   p_h(j) = softmax_j( q_h(t) . k_{h/g}(j) / sqrt(head_dim) )   per query head h
 *   mean:  p(j) = (1/n_head) sum_h p_h(j)
 *   max:   p(j) = max_h p_h(j) / sum_j' max_h p_h(j')
 * q_t: the query's row; kt: the sequence's keys from teacher_keys_transpose
 * (T columns). Writes p[j - s] for the t - s + 1 keys; `scratch` holds
 * t - s + 1 floats. */
void teacher_row(const float *q_t, const float *kt, int T, const attn_shape *sh, int s, int t, teacher_agg agg,
                 float *scratch, float *p);

/* Raw-QK oracle scores: o(j) = (1/n_head) sum_h q_h(t) . k_{h/g}(j) for
 * j = s..t (head-mean native scores; the exact-top-K baseline). `qsum`
 * is scratch of n_head_kv*head_dim floats. */
void oracle_scores(const float *q_t, const float *kt, int T, const attn_shape *sh, int s, int t, float *qsum,
                   float *o);

#endif
