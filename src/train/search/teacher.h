/* The teacher: the frozen model's own attention distribution at one layer,
 * rebuilt in fp32 from captured post-RoPE q and k under the block-causal
 * mask and aggregated over query heads. This is what the search space is
 * trained to reproduce.
 *
 * Eligibility (as the model's attention): key j is eligible for query t iff
 * seg[j] == seg[t] and j <= t. Segments are contiguous runs with
 * non-decreasing ids (packed documents), so the eligible keys of t are the
 * range [start[t], t].
 *
 * Retrieval-eligible keys: the sparse runtime always attends the first
 * n_sink keys of the document and the n_tail most recent keys (the query
 * included), and retrieves candidates only among the rest, the "mid" range
 * [start[t] + n_sink, t - n_tail]. Training and evaluation can restrict
 * themselves to that range (teacher_row_mid): the teacher is still the
 * model's attention over all of [start[t], t], renormalised over the mid
 * keys, i.e. the conditional distribution of attention given that it falls
 * on a key the retriever must find. n_sink = n_tail = 0 is the whole range. */
#ifndef SUBQ_TRAIN_TEACHER_H
#define SUBQ_TRAIN_TEACHER_H

#include <stdint.h>

#include "subq_lab.h"

/* "max" / "mean"; parse returns -1 for anything else. */
const char *teacher_agg_name(subq_teacher_agg a);
int teacher_agg_parse(const char *s);

/* Native attention geometry of one layer (GQA: query head h reads kv head
 * h / (n_head / n_head_kv)). q rows are n_head*head_dim, k rows
 * n_head_kv*head_dim floats. */
typedef struct attn_shape {
    int n_head, n_head_kv, head_dim;
    float scale; /* of q . k (the layers' layer_attn.scale) */
} attn_shape;

/* start[t] = first index of t's segment. SUBQ_ERR_ARG when ids decrease
 * (a segment that is not one contiguous run). */
subq_status segment_starts(const int32_t *seg, int T, int *start, subq_error *err);

/* kt[r][j] = k[j][r]: keys transposed to [n_head_kv*head_dim][T] so that a
 * query's scores against a run of keys are contiguous, vectorisable loops. */
void teacher_keys_transpose(const float *k, int T, const attn_shape *sh, float *kt);

/* Teacher distribution of query t over its eligible keys j = s..t:
 *   p_h(j) = softmax_j( scale q_h(t) . k_{h/g}(j) )   per query head h
 *            (scale: sh->scale; no soft cap)
 *   mean:  p(j) = (1/n_head) sum_h p_h(j)
 *   max:   p(j) = max_h p_h(j) / sum_j' max_h p_h(j')
 * q_t: the query's row; kt: the sequence's keys from teacher_keys_transpose
 * (T columns). Writes p[j - s] for the t - s + 1 keys; `scratch` holds
 * t - s + 1 floats. */
void teacher_row(const float *q_t, const float *kt, int T, const attn_shape *sh, int s, int t, subq_teacher_agg agg,
                 float *scratch, float *p);

/* The same teacher restricted to the keys j = lo..hi (s <= lo <= hi <= t)
 * and renormalised over them:
 *   p_mid(j) = p(j) / sum_{j' = lo..hi} p(j')
 * with p as in teacher_row (head softmaxes over all of s..t, then
 * aggregated). Writes p[j - lo] for the hi - lo + 1 keys; `scratch` holds
 * t - s + 1 floats. teacher_row is the case lo = s, hi = t (bit for bit).
 * When every head puts less than FLT_MIN on the whole range in fp32 (all
 * underflow), the row is recomputed in the log domain, so the result is
 * always a distribution. */
void teacher_row_mid(const float *q_t, const float *kt, int T, const attn_shape *sh, int s, int t, int lo, int hi,
                     subq_teacher_agg agg, float *scratch, float *p);

/* teacher_row_mid for a block of queries t0 .. t1-1 at once (start[] as
 * from segment_starts, so kb = start[t0] is the block's first key): query
 * t's row over its retrieval-eligible keys j in [start[t] + n_sink,
 * t - n_tail] into P[(t - t0) * ldp + j - kb]; its other entries in
 * [kb, t1) and rows with no such key are zero. Per KV head one sgemm gives
 * the logits of the block's g query heads against keys kb .. t1-1 (q, k:
 * the captured rows, [T][n_head*head_dim] and [T][n_head_kv*head_dim]); kt
 * (teacher_keys_transpose) serves the rare log-domain rows. Equal to
 * teacher_row_mid row by row up to float rounding. scratch holds
 * teacher_block_scratch(t1 - t0, t1 - kb, sh) floats. With v and out
 * (else NULL), the same softmax gives the block's attention output:
 * out[t][h*hd..] = sum_j softmax_h(t)_j v_kh(j) over all of t's keys
 * start[t]..t (v as k, out [T][n_head*head_dim]). */
size_t teacher_block_scratch(int n_rows, int n_keys, const attn_shape *sh);
void teacher_block(const float *q, const float *k, const float *kt, int T, const attn_shape *sh, const int *start,
                   int t0, int t1, int n_sink, int n_tail, subq_teacher_agg agg, float *scratch, float *P, int ldp,
                   const float *v, float *out);

#endif
