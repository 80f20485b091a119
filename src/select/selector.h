/* Selector: picks the top-K candidate cache slots for one query of one
 * substituted layer. One selector per layer per sequence; it grows as keys
 * are appended (prefill and decode) and is never rebuilt.
 *
 * Attention code never knows which selector it has: exact (a scan in the
 * learned search space, by cosine or inner product, optionally over
 * compressed keys), hnsw / faiss (ANN indexes over the same space),
 * quest (page min/max bounds on native keys), oracle (exact top-K of the
 * native q.k), window (nothing retrieved: sinks + tail only).
 *
 * Per-head kinds (quest by default, oracle per-head) pick one slot set per
 * query head instead of one per query (selector_per_head); the attention
 * then attends each head over its own set. */
#ifndef SUBQ_SELECTOR_H
#define SUBQ_SELECTOR_H

#include <stdint.h>

#include "attn/attn_far.h"
#include "base/pool.h"
#include "kv/kv_cache.h"
#include "subq.h"

/* The kinds, scores, scans and oracles are the public plan's enums
 * (subq.h). The compressed scans keep the stored keys too: they pick the
 * best select_rerank_pool(K) slots by the codes (kernels/scan_codes.h: an
 * f32 scale per row) and re-rank those on the stored keys, so with every
 * true top-K slot in that pool the result is the full scan's.
 * K + min(3K, SELECT_RERANK_EXTRA): 4K for the usual K, less past K = 512,
 * where the slots a code's rounding moves across the K-th score are a
 * smaller share of K (bench/bench_select.c, int4, 128K Gaussian keys:
 * recall@2048 0.996 with K + 1536, 0.9997 with 4K, at half the time;
 * recall@128 0.989 with 2K, so not less there). */
#define SELECT_RERANK_EXTRA 1536
static inline int64_t select_rerank_pool(int k) {
    return (int64_t)k + (3 * (int64_t)k < SELECT_RERANK_EXTRA ? 3 * (int64_t)k : SELECT_RERANK_EXTRA);
}

/* What the oracle ranks (select_oracle.c):
 *   HEADMEAN_DOT     the head-mean of the native logits, (1/H) sum_h q_h . k_{kvh(h)}
 *   HEADMEAN_COSINE  the cosine of the head-mean q and the head-mean k
 *                    (ann-sparseattention's raw-QK oracle, compare_retrieval.py)
 *   PER_HEAD         each query head its own exact top-K of q_h . k_{kvh(h)}
 *   PER_KV_HEAD      each KV head g one exact top-K of the group's mean logit,
 *                    (1/G) sum_{h in g} q_h . k_g, shared by the group's heads
 * "headmean-dot" -> SUBQ_ORACLE_HEADMEAN_DOT ...; -1 if unknown. */
int oracle_kind_parse(const char *name);
const char *oracle_kind_name(subq_oracle_kind k);

/* A selector's settings: the public plan as the caller gave it (its
 * selector kind, score, scan, search_f16, HNSW, Quest and oracle
 * settings, the block scan's, probe_check, seed: subq_attn_plan in subq.h
 * says what each does; the layer lists are not a selector's and are NULL
 * here), and what the engine adds for one layer. */
typedef struct selector_params {
    subq_attn_plan plan;
    int d_search;              /* width of search vectors (exact/hnsw/faiss): of one search head */
    /* per-head search (select_heads.c): a key row holds search_heads heads
     * of d_search, a query row search_qheads; each query head gets its own
     * set (query_heads). 0 or 1 each: one shared set (search vectors of
     * d_search) */
    int search_heads, search_qheads;
    int n_threads;             /* exact: threads for long scans (default 1) */
    /* exact, hnsw, faiss: slots below a query's mask.far_hi (keys farther
     * than a far scheme's distance, attn/attn_far.h) are scored without the
     * last far_rot dims of the search space, the ones that rotate by
     * position (search_rope.h): their distances lie past what the search
     * was trained on, where the rotated part is noise. 0: no split */
    int far_rot;
    /* oracle (headmean-dot, per-head): slots below mask.far_hi are scored
     * as attended at distance far_from (a far scheme's `from`: the native
     * key turned by the layer's RoPE, env.rope), not at their own. 0: at
     * their own */
    int far_from;
} selector_params;

#define SELECT_MAX_BLOCK_KEYS 4096
#define SELECT_MAX_REPS 64
#define SELECT_MAX_CLUSTERS 65536

/* What a selector may read besides the vectors it is given: the layer's
 * native keys in the KV cache (quest, oracle). */
typedef struct selector_env {
    const kv_cache *kv;
    int layer;
    int n_head, n_head_kv, head_dim;
    pool *pool;                /* the context's decode threads (long scans), or NULL */
    attn_rope rope;            /* the layer's RoPE as a rotation (n_rot 0: none; params.far_from) */
} selector_env;

/* Eligibility of cache slots for one query: slot j may be returned iff
 * j < n_slots, (seg == NULL or seg[j] == query_seg), and j lies outside
 * both excluded ranges [ex0_lo, ex0_hi) and [ex1_lo, ex1_hi) (the sinks and
 * the recent tail, which attention keeps anyway). Slots below far_hi are
 * far from the query (selector_params.far_rot, far_from; 0: none). */
typedef struct select_mask {
    int n_slots;
    const int32_t *seg;
    int32_t query_seg;
    int ex0_lo, ex0_hi;
    int ex1_lo, ex1_hi;
    int far_hi;
    int32_t far_at;    /* the position far keys are attended at (params.far_from) */
} select_mask;

/* [0, min(n, m->n_slots)) minus the two excluded ranges of m, as at most 3
 * sorted, disjoint, non-empty ranges [lo[i], hi[i]). Returns the count.
 * Slots inside them are eligible iff the segment test also passes. */
int select_mask_ranges(const select_mask *m, int n, int lo[3], int hi[3]);

static inline int select_mask_allows(const select_mask *m, int j) {
    if (j < 0 || j >= m->n_slots) return 0;
    if (m->seg && m->seg[j] != m->query_seg) return 0;
    if (j >= m->ex0_lo && j < m->ex0_hi) return 0;
    if (j >= m->ex1_lo && j < m->ex1_hi) return 0;
    return 1;
}

typedef struct selector_stats {
    int64_t n_queries;
    int64_t n_returned;        /* slots returned over all queries */
    int64_t n_filler;          /* requested - returned, summed */
    int64_t n_visited;         /* distance computations / nodes visited */
    uint64_t bytes_read;       /* bytes the queries read, summed (the selector's share of
                                  a decode step's memory traffic): exact the search keys
                                  or codes it scans and the rows it re-ranks; hnsw /
                                  faiss the vectors scored and link lists read; quest
                                  page bounds + keys of ranked pages; oracle the native
                                  keys it scores */
    int64_t n_appended;
    int64_t n_linked_ahead;    /* appends whose insert-time search ran ahead (ops->prepare_append) */
    int64_t n_linked_saved;    /* keys put_index linked from a saved index, not inserted */
    double t_append_s, t_query_s;
    size_t bytes;              /* memory held by the selector */
    int64_t n_check_keys;      /* params.probe_check: slots the full scan returned for the checked queries */
    int64_t n_check_found;     /* ... of which the block scan returned too */
} selector_stats;

typedef struct selector selector;
typedef struct selector_ops {
    /* Search keys (rows of d_search floats; NULL for selectors that use native
     * keys) of cache slots slot0 .. slot0+n-1, appended in slot order. The
     * native keys of those slots are already in env->kv. */
    subq_status (*append)(selector *s, const float *k_search, int n, int slot0, subq_error *err);
    /* Up to k eligible slots (best first) into out; returns the count, or
     * -1 when the query could not run (out of memory): a failed query must
     * never pass for one that found nothing. The query has a search vector
     * (may be NULL when unused) and its native post-RoPE q for all heads
     * [n_head*head_dim]. */
    int (*query)(selector *s, const float *q_search, const float *q_native, int k, const select_mask *m,
                 int32_t *out);
    void (*reset)(selector *s);   /* forget all keys (new sequence) */
    void (*free)(selector *s);
    /* Forget slots n_keep.. (n_keep <= the slots appended): afterwards the
     * selector answers as one that was only given slots 0 .. n_keep-1.
     * Native-key kinds read the kept slots' keys back from env->kv. */
    subq_status (*truncate)(selector *s, int n_keep, subq_error *err);
    /* Search-space kinds (NULL for the others): the stored form of the
     * search keys of slots 0 .. n-1 as f32 rows [n][d_search] (unit vectors
     * for cosine, as given for dot; f16 storage widens exactly), and
     * appending keys in that stored form as they are (no normalisation), so
     * that get_keys + reset + put_keys
     * rebuilds an index that answers as the original does. */
    subq_status (*get_keys)(const selector *s, int n, float *dst, subq_error *err);
    subq_status (*put_keys)(selector *s, const float *keys, int n, int slot0, subq_error *err);
    /* Per-head kinds (NULL for the others): up to k eligible slots for each
     * query head h, best first, into out[h*k ..], their count into n_out[h];
     * returns 0, or -1 when out of memory. q_search: the query's search row
     * (every search head's; NULL for native-key kinds). */
    int (*query_heads)(selector *s, const float *q_search, const float *q_native, int k, const select_mask *m,
                       int32_t *out, int *n_out);
    /* Optional (NULL: one query call each): n queries at once (a prefill
     * batch), answered as n calls of query would answer them up to float
     * rounding: query i has search vector q_search + i * d_search (NULL when
     * unused), native q q_native + i * q_stride and mask m[i]; up to k slots
     * go to out + i * k and their count to got[i]. May use n_threads
     * threads. Returns 0, or -1 when out of memory. */
    int (*query_batch)(selector *s, int n, const float *q_search, const float *q_native, size_t q_stride, int k,
                       const select_mask *m, int32_t *out, int *got, int n_threads);
    /* Optional (NULL: query_batch): the same for a prefill batch, whose
     * answers may differ from query's (the exact selector's block scan: its
     * recall against the full scan is what it gives up) and come in any
     * order (attention needs the set, not the ranking: sorting 2048 slots
     * per query was 3% of a 64K prefill). Every query must
     * still see only keys its mask allows, and its answer may not depend on
     * keys at or past its n_slots. */
    int (*query_prefill)(selector *s, int n, const float *q_search, const float *q_native, size_t q_stride, int k,
                         const select_mask *m, int32_t *out, int *got, int n_threads);
    /* Per-head kinds, optional (NULL: query_heads, one query at a time):
     * query_heads for a prefill batch, under query_prefill's rules: query
     * i's search row q_search + i * (its search heads x d_search), mask
     * m[i]; head h's slots to out + (i * n_head + h) * k, their count to
     * n_out[i * n_head + h]. Returns 0, or -1 when out of memory. */
    int (*query_heads_prefill)(selector *s, int n, const float *q_search, const float *q_native, size_t q_stride,
                               int k, const select_mask *m, int32_t *out, int *n_out, int n_threads);
    /* Optional (NULL: g query calls): g search queries under one mask (a
     * KV head's query search heads), answered as g calls of query would
     * answer them: query i's search vector q_search + i * d_search, its
     * slots to out + i * k, their count to got[i]. Returns 0, or -1 when
     * out of memory. */
    int (*query_group)(selector *s, int g, const float *q_search, const float *q_native, int k, const select_mask *m,
                       int32_t *out, int *got);
    /* Optional (graph indexes: NULL for the rest): the read-only part of
     * appending the search key of `slot` next (hnsw: the insert-time
     * search), safe beside a query on another thread; the append of that
     * slot and key then only links it. The index it builds is the same as
     * without it; a failure leaves the work to the append. */
    void (*prepare_append)(selector *s, const float *k_search, int slot);
    /* Optional (graph indexes, with prepare_append): query, on the two
     * threads of p (NULL or one thread: on the caller's), with fn(ctx) run
     * once beside it (selector_query_ahead's preparation). hnsw's content
     * graph splits its query: the graph search on one thread, fn and the
     * near scan on the other. The query's own time, what it takes without
     * fn, into *t_query. */
    int (*query_beside)(selector *s, const float *q_search, const float *q_native, int k, const select_mask *m,
                        int32_t *out, void (*fn)(void *ctx), void *ctx, pool *p, double *t_query);
    /* Optional (indexes worth saving: hnsw's graph, NULL for the rest):
     * the index over the keys so far as bytes (malloc'd into *index; NULL
     * when there is none yet), and put_keys of slots 0 .. n-1 into an empty
     * selector that links the first ones by such bytes (checked whole:
     * they may come from a file) and appends the rest, giving the index
     * put_keys alone would. */
    subq_status (*get_index)(const selector *s, void **index, size_t *bytes, subq_error *err);
    subq_status (*put_index)(selector *s, const float *keys, int n, const void *index, size_t bytes,
                             subq_error *err);
} selector_ops;

struct selector {
    const selector_ops *ops;
    selector_params params;
    selector_env env;
    selector_stats stats;
    int fail_alloc; /* test hook: while set, every allocation a query makes fails */
};

/* Create a selector of params->plan.selector for one layer. SUBQ_ERR_UNSUPPORTED when
 * the kind is not built in (faiss without libfaiss). */
subq_status selector_new(const selector_params *params, const selector_env *env, selector **out, subq_error *err);
void selector_free(selector *s);

/* Timed, counted calls through ops (these keep stats up to date; the ops
 * themselves add n_visited). selector_query returns the count, or -1 when
 * the selector ran out of memory (the caller reports SUBQ_ERR_NOMEM). */
subq_status selector_append(selector *s, const float *k_search, int n, int slot0, subq_error *err);
int selector_query(selector *s, const float *q_search, const float *q_native, int k, const select_mask *m,
                   int32_t *out);
/* selector_query beside ops->prepare_append of the key k_next of `slot`
 * (ops->query_beside: one-token decode of a graph index, whose insert-time
 * search, which would otherwise run after the step, overlaps the query).
 * Without those ops or k_next: as selector_query. The query is timed as
 * selector_query; the wall time the preparation adds past it counts as
 * append time. */
int selector_query_ahead(selector *s, const float *q_search, const float *q_native, int k, const select_mask *m,
                         int32_t *out, const float *k_next, int slot, pool *p);
/* n queries at once (ops->query_batch above, or one query call each);
 * counted and timed as n queries. Returns 0, or -1 when out of memory. */
int selector_query_batch(selector *s, int n, const float *q_search, const float *q_native, size_t q_stride, int k,
                         const select_mask *m, int32_t *out, int *got, int n_threads);
/* n queries of a prefill batch (ops->query_prefill, else as
 * selector_query_batch), counted and timed the same way. */
int selector_query_prefill(selector *s, int n, const float *q_search, const float *q_native, size_t q_stride, int k,
                           const select_mask *m, int32_t *out, int *got, int n_threads);
void selector_reset(selector *s);
/* 1 if s picks one slot set per query head (ops->query_heads); its query op
 * still answers one set per query (the head-mean ranking). */
int selector_per_head(const selector *s);
/* 1 if a per-head selector gives the g query heads of a KV head one set
 * (kv-head search heads, the per-KV-head oracle): attention then reads the
 * group's rows once for its g heads. */
int selector_group_set(const selector *s);
/* g queries under one mask (ops->query_group, or g selector_query calls),
 * timed and counted as g queries. Returns 0, or -1 when out of memory. */
int selector_query_group(selector *s, int g, const float *q_search, const float *q_native, int k, const select_mask *m,
                         int32_t *out, int *got);
/* ops->query_heads, timed and counted as selector_query (n_head sets). */
int selector_query_heads(selector *s, const float *q_search, const float *q_native, int k, const select_mask *m,
                         int32_t *out, int *n_out);
/* The same for n queries of a prefill batch (ops->query_heads_prefill, or
 * query_heads each): out [n][n_head][k], n_out [n][n_head]. */
int selector_query_heads_prefill(selector *s, int n, const float *q_search, const float *q_native, size_t q_stride,
                                 int k, const select_mask *m, int32_t *out, int *n_out, int n_threads);
/* Search heads of a key row and of a query row (1 and 1 for one shared set). */
int selector_key_heads(const selector_params *p);
int selector_query_heads_of(const selector_params *p);
/* Truncate to n_keep slots; export / import the stored search keys (ops
 * above). For kinds without a search space get_keys writes nothing and
 * put_keys appends the slots (their native keys are already in env->kv). */
subq_status selector_truncate(selector *s, int n_keep, subq_error *err);
subq_status selector_get_keys(const selector *s, int n, float *dst, subq_error *err);
/* A search key row in the stored form get_keys gives and put_keys takes
 * (each head normalised for cosine; f32), from the form append takes. */
void selector_stored_form(const selector *s, const float *src, float *dst);
subq_status selector_put_keys(selector *s, const float *keys, int n, int slot0, subq_error *err);
/* get_index / put_index (ops above); without them, or without an index, no
 * index (NULL) and put_keys. */
subq_status selector_get_index(const selector *s, void **index, size_t *bytes, subq_error *err);
subq_status selector_put_index(selector *s, const float *keys, int n, const void *index, size_t bytes,
                               subq_error *err);

/* "cosine" / "dot", "full" / "int8" / "int4" / "auto"; -1 if unknown. */
int select_score_parse(const char *name);
const char *select_score_name(subq_score s);
int select_scan_parse(const char *name);
const char *select_scan_name(subq_scan s);

/* "exact" -> SUBQ_SELECT_EXACT ...; -1 if unknown. */
int selector_kind_parse(const char *name);
const char *selector_kind_name(subq_selector_kind k);
/* 1 if the kind is available in this build. */
int selector_kind_available(subq_selector_kind k);
/* 1 if the kind ranks search vectors (exact, hnsw, faiss): it needs search
 * projections and d_search. */
int selector_kind_needs_search(subq_selector_kind k);
/* 1 if the kind is an approximate index over the search space (hnsw,
 * faiss), whose recall is measured against exact. */
int selector_kind_is_ann(subq_selector_kind k);
/* The exact scan over SELECT_AUTO_CODE_BYTES of stored keys or more
 * reads codes under SUBQ_SCAN_AUTO. */
#define SELECT_AUTO_CODE_BYTES ((int64_t)2 << 20)
/* How many keys the exact scan reads codes from (then re-ranks on the
 * keys): 0 for int8 / int4, from SELECT_AUTO_CODE_BYTES of keys for auto
 * (search vectors of at most SCAN_CODES_MAX_D values), INT64_MAX for full
 * and for other kinds. */
int64_t selector_scan_codes_from(const selector_params *p);
/* 1 if a selector of these parameters may answer otherwise than the full
 * f32 scan by the same score (its recall is measured against that) over at
 * most n_keys keys: the ANN kinds, and exact over f16 keys or codes. */
int selector_params_approximate(const selector_params *p, int64_t n_keys);
void selector_params_default(selector_params *p, subq_selector_kind kind, int d_search);

#endif
