/* Search projections that start at the model's own attention scores.
 *
 * A search head as wide as the model's heads, rotating as many dims as the
 * model's RoPE and at its frequencies, can hold the model's own W_q and W_k,
 * rows reordered to the search's pair layout: then
 * R(t) W_Qs h_t . R(j) W_Ks h_j = q_t . k_j, and ranking by inner product
 * (--score dot) picks each head's exact top-K, the per-head oracle (per KV
 * head: the group-mean one, since the mean of linear maps is one). Training
 * from there (`train-search --init native`) starts where random projections
 * are trying to get to. Models whose q . k is not bilinear in h (q/k norms,
 * biases) or whose RoPE frequencies are not scale * base^(-2i/n) are
 * refused. */
#ifndef SUBQ_SEARCH_NATIVE_H
#define SUBQ_SEARCH_NATIVE_H

#include "search/search_proj.h"

/* The search rotation matching the RoPE of the given layers of m for
 * search heads d_search wide, or an error naming why there is none
 * (SUBQ_ERR_ARG: d_search is not the head width; SUBQ_ERR_UNSUPPORTED). */
subq_status search_native_rope(const subq_model *m, const int *layers, int n_sel, int d_search, search_rope *out,
                               subq_error *err);

/* Fill p (m's projections: d_search = head_dim, p->rope = search_native_rope)
 * with W_Qs[a] = the mean of W_q over query search head a's model heads and
 * W_Ks[b] = W_k of KV head b, dequantised, rows in the search's pair order. */
subq_status search_proj_init_native(search_proj *p, const subq_model *m, subq_error *err);

#endif
