/* Position in the search space: the last n_rot of the d_search dims of
 * q_s = W_Qs h and k_s = W_Ks h rotate by the token's position, as RoPE
 * rotates the model's own q and k (DeepSeek V3.2's indexer carries such a
 * rotary part), so that cos(q_s, k_s) can depend on the distance between
 * query and key and a search space can rank "recent". Keys are rotated once,
 * when they enter an index; queries when they ask: the search stays a
 * nearest-neighbour search over fixed key vectors.
 *
 * Pair i (0 <= i < n_rot/2) is dims (o + 2i, o + 2i + 1), o = d_search - n_rot,
 * rotated at position p by
 *   theta_i(p) = p * scale * base^(-2i / n_rot)
 *   [x0, x1] <- [x0 cos - x1 sin, x0 sin + x1 cos]
 * with the angle, its cosine and sine in double, so that positions of
 * millions of tokens keep their precision. scale < 1 is position
 * interpolation (positions x scale). n_rot = 0 is no rotation: files written
 * before the rotation existed load so and run as they did. */
#ifndef SUBQ_SEARCH_ROPE_H
#define SUBQ_SEARCH_ROPE_H

#include <stdint.h>

#include "base/pool.h"
#include "subq.h"

#define SEARCH_ROPE_MAX_DIMS 4096 /* widest rotated part */

typedef struct search_rope {
    int n_rot;       /* rotated dims, even, at the end of the search vector; 0 = none */
    double base;     /* frequency base (10000) */
    double scale;    /* positions are multiplied by this (1) */
} search_rope;

/* SUBQ_ERR_ARG naming what is wrong unless r fits a search space of width
 * d_search: n_rot even in [0, min(d_search, SEARCH_ROPE_MAX_DIMS)], base > 1
 * and scale > 0 finite. `what` prefixes the message (a file name, a flag). */
subq_status search_rope_check(const search_rope *r, int d_search, const char *what, subq_error *err);

/* Rotate rows a[t] and b[t] (d_search floats each; either may be NULL) of n
 * tokens at positions pos[t]; inverse = 1 applies the transposed rotation
 * (the backward of the forward one). Nothing happens when n_rot = 0. */
void search_rope_rotate(const search_rope *r, int d_search, const int32_t *pos, int n, float *a, float *b,
                        int inverse);

/* The same for tokens whose rows hold several heads: token t's row of a
 * holds heads_a vectors of d_search floats (b: heads_b), each rotated by
 * R(pos[t]) over its own last n_rot dims (per-head search spaces). With
 * one head each it is search_rope_rotate. */
void search_rope_rotate_heads(const search_rope *r, int d_search, const int32_t *pos, int n, float *a, int heads_a,
                              float *b, int heads_b, int inverse);

/* The same over the pool in blocks of rows (one block: on the caller's
 * thread, as for a decode step's row). */
void search_rope_rotate_rows(const search_rope *r, int d_search, const int32_t *pos, int n, float *a, float *b,
                             int inverse, pool *p);

/* 1 when both rotate the same way (the stored keys of one fit the other). */
void search_rope_rotate_rows_heads(const search_rope *r, int d_search, const int32_t *pos, int n, float *a,
                                   int heads_a, float *b, int heads_b, int inverse, pool *p);

int search_rope_same(const search_rope *x, const search_rope *y);

#endif
