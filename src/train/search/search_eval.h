/* Retrieval quality of a search space against the teacher, per layer:
 *   recall@K = |top-K by score  ∩  teacher top-K| / K
 *   mass@K   = teacher probability on the top-K by score
 * for two scorers over the eligible keys of each query:
 *   learned  cos(q_s(t), k_s(j))                      (the runtime search score: the
 *                                                      selectors compare L2-normalised
 *                                                      vectors, as InfoNCE trains them)
 *   oracle   (1/n_head) sum_h q_h(t) . k_{h/g}(j)     (raw-QK, head-mean native scores)
 * and, as a positional baseline, the recency window: the K most recent
 * eligible keys (t-K+1 .. t).
 * A query counts for K only when it has more than K eligible keys (with K or
 * fewer every scorer retrieves everything: recall = mass = 1).
 *
 * With n_sink / n_tail > 0 the eligible keys are the retrieval-eligible ones,
 * [start + n_sink, t - n_tail] (the keys the sparse runtime retrieves among;
 * it attends sinks and tail anyway), and the teacher is renormalised over
 * them (teacher_row_mid): mass@K is then the share of the attention that
 * falls outside sinks and tail which the top-K captures, and the window is
 * the K most recent keys before the tail. */
#ifndef SUBQ_TRAIN_SEARCH_EVAL_H
#define SUBQ_TRAIN_SEARCH_EVAL_H

#include <stdint.h>

#include "train/search/search_loss.h"

/* Zero an accumulator for the given K values (at most SUBQ_SEARCH_EVAL_MAX_K). */
void search_eval_init(subq_retrieval_eval *acc, const int *ks, int n_k);

/* Add one layer of one sequence (sums; divide by n_queries for means).
 * n_sink = n_tail = 0: every causal (block-causal) key is eligible. */
subq_status search_eval_layer(const search_layer_data *x, const float *wq, const float *wk, int d_search,
                              const search_rope *rope, subq_teacher_agg agg, int n_sink, int n_tail, subq_retrieval_eval *acc, pool *p,
                              subq_error *err);

#endif
