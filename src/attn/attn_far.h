/* Far keys at trained distances (subq_attn_plan.far_pos).
 *
 * A RoPE model scores query t against a key stored at position p through
 * their distance t - p; past the context it was trained on, the distances
 * are new to it and attention breaks. A retrieving layer attends a few
 * keys, so each key beyond `from` can instead be attended at a distance
 * the model knows. Keys are stored as computed, post-RoPE at their own
 * position p; turning a stored key by R(s) (the layer's RoPE as a pure
 * rotation, without its magnitude factor) gives the key at position p + s,
 * so a moved key is scored as
 *
 *   s_j = scale q . R(shift_j) k_j,   shift_j = d_j - d'_j,
 *
 * d_j = t - p_j its distance, d'_j the one it is attended at. The keys a
 * scheme places are a query's sinks and retrieved keys, never its local
 * window (the tail, or a prompt batch's part: distances 0 .. base - 1):
 *   window  d' = from for every far key (d > from)    all at one distance (InfLLM)
 *   order   d' = base + (m - 1 - r) for every placed key, once one is far:
 *           m placed keys, r the key's rank, farthest first: contiguous, in
 *           their order, just beyond the local window (ReAttention)
 *   group   d' = from + ceil((d - from) / G) for every far key, with
 *           G = ceil((d_max - from) / (limit - from)): far distances divided
 *           by the group that brings the farthest placed key to `limit`
 *           (Self-Extend's grouped positions, the group chosen per query)
 * A query without far keys attends exactly as with the scheme off. Values
 * carry no position and are read as stored. */
#ifndef SUBQ_ATTN_FAR_H
#define SUBQ_ATTN_FAR_H

#include <stdint.h>

#include "kv/kv_cache.h"

/* The schemes are the public plan's (subq_far_pos of subq.h).
 * "none", "window", "order", "group"; -1 if unknown. */
int attn_far_parse(const char *name);
const char *attn_far_name(subq_far_pos s);

typedef struct attn_far {
    subq_far_pos scheme;
    int from;   /* keys farther than this are far (>= 1) */
    int limit;  /* group: the farthest distance a far key may take (the trained context - 1) */
} attn_far;

/* A layer's RoPE as a pure rotation: pair i turns by p * freq[i], pairs
 * adjacent (x[2i], x[2i+1]) or, with neox, split (x[i], x[i + n_rot/2]). */
typedef struct attn_rope {
    int n_rot, neox;
    const double *freq;  /* [n_rot / 2] */
    const double *turns; /* freq's turn tables (attn_rope_turns_fill), or NULL: cos and sin computed */
} attn_rope;

/* x <- R(shift) x: the first n_rot dims of one head's vector turned as if
 * it stood shift positions later (shift may be negative). */
void attn_rope_rotate(const attn_rope *r, float *x, int32_t shift);

/* Turn tables: the cos and sin of every pair's angle d 256^l freq[i] for
 * digits d < 256 of levels l < 4, so that a turn by any 32-bit shift is
 * the product of at most four table rotations (angle addition) instead of
 * n_rot / 2 cos and sin calls: ~0.8 us a key, most of the far keys' cost
 * in a long prompt (bench/notes/2026-12-03-prefill-1m.md). Doubles
 * [4][256][2][half]; attn_rope_turns_size counts them. */
enum { ATTN_TURN_LEVELS = 4, ATTN_TURN_DIGITS = 256 };
size_t attn_rope_turns_size(int half);
void attn_rope_turns_fill(const double *freq, int half, double *turns);

/* shift[j] = d_j - d'_j for the n keys a scheme places (a query's sinks
 * and retrieved keys), at distances dist[j], beyond a local window of base
 * keys; 0 for the keys that stay, and for every key when the scheme is
 * none. Returns how many are far. scratch: n entries (order only; else
 * may be NULL). */
int attn_far_shifts(const attn_far *f, const int32_t *dist, int n, int base, int32_t *shift, int64_t *scratch);

/* The slots' distances from the query in slot q_slot (kv->pos), into dist. */
void attn_far_distances(const kv_cache *kv, int q_slot, const int *slots, int n, int32_t *dist);

/* Scores of the far keys among slots[0..n) of KV head kh for its g query
 * heads (q: g adjacent heads): s[i * ld + j] = scale q_i . R(shift[j]) k_j
 * for every j with shift[j] != 0; the other scores are left as they are. */
void attn_far_rescore(const attn_rope *r, const kv_cache *kv, int layer, int kh, int g, const float *q, float scale,
                      const int *slots, const int32_t *shift, int n, float *s, int ld);

#endif
