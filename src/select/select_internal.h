/* Shared pieces of the selectors: constructors of each kind, eligible-slot
 * ranges, a bounded top-k heap, L2 normalisation and the exact scans used
 * by exact (and by the ANN selectors' small-set fallback).
 * Internal to src/select. */
#ifndef SUBQ_SELECT_INTERNAL_H
#define SUBQ_SELECT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/scan_codes.h"
#include "select/hnsw_shim.h" /* select_filter_fn */
#include "select/selector.h"

/* One constructor per kind; each allocates a struct whose first member is
 * the `selector` base and fills ops. params and env are already validated. */
subq_status select_exact_new(const selector_params *p, const selector_env *env, selector **out, subq_error *err);
subq_status select_hnsw_new(const selector_params *p, const selector_env *env, selector **out, subq_error *err);
subq_status select_faiss_new(const selector_params *p, const selector_env *env, selector **out, subq_error *err);
subq_status select_quest_new(const selector_params *p, const selector_env *env, selector **out, subq_error *err);
subq_status select_oracle_new(const selector_params *p, const selector_env *env, selector **out, subq_error *err);
subq_status select_window_new(const selector_params *p, const selector_env *env, selector **out, subq_error *err);
/* Per-head search over params.search_heads selectors of params.plan.selector (select_heads.c). */
subq_status select_heads_new(const selector_params *p, const selector_env *env, selector **out, subq_error *err);

/* Every selector takes keys strictly in slot order: slot0 must equal the
 * number of slots appended since the last reset (so internal ids, ANN labels
 * and cache slots coincide). */
subq_status select_check_append(const selector *s, int count, int n, int slot0, subq_error *err);
/* A truncation keeps at most the `count` slots the selector holds. */
subq_status select_check_truncate(const selector *s, int count, int n_keep, subq_error *err);
/* Truncation of a selector whose slots are rows in order (or live in the KV
 * cache): check, then *count = n_keep. */
subq_status select_truncate_count(const selector *s, int *count, int n_keep, subq_error *err);
/* Truncation by rebuilding (index kinds without deletion): the kept
 * stored keys through ops->get_keys, ops->reset, ops->put_keys. */
subq_status select_truncate_rebuild(selector *s, int count, int n_keep, subq_error *err);
/* Copy n stored search keys (rows of d f32, or f16 when f16, `stride`
 * elements apart) into dst [n][d] as f32, after checking n against the
 * `count` held. */
subq_status select_copy_keys(const selector *s, int count, const void *base, size_t stride, int d, int f16, int n,
                             float *dst, subq_error *err);

/* Number of eligible slots below n (the segment test costs one int compare
 * per slot of the ranges; without segments it is O(1)). */
int select_mask_count(const select_mask *m, int n);

/* Bounded heap of the k best (score, slot) pairs seen so far. The root is
 * the worst kept pair, so a new pair costs one compare unless it enters.
 * Order: higher score first, equal scores -> lower slot first. */
typedef struct select_heap {
    float *score;
    int32_t *slot;
    int n, k;
} select_heap;

void select_heap_push(select_heap *h, float score, int32_t slot);
/* Heap-sort the kept pairs best-first into out (and scores, if not NULL);
 * returns the count. The heap is empty afterwards. */
int select_heap_take(select_heap *h, int32_t *out, float *scores);

/* The k best (score, slot) pairs offered to a scan, in a buffer of 2k
 * pairs: a pair enters only if it beats the worst pair kept at the last
 * cut, and a full buffer is cut to its k best by quickselect. Amortised
 * O(1) per pair, where a size-k heap pays O(log k) per pair that enters: the
 * compressed scans keep select_rerank_pool(K) pairs, and on Gaussian keys a heap
 * of 1024 took four times as long as the int8 dot products. A pair is held
 * as one integer key that orders as the heap does (higher score first,
 * equal scores -> lower slot first), so the cut compares and swaps single
 * words without branches. */
typedef struct topk_buf {
    uint64_t *key;
    int n, k;
    uint64_t thr;     /* the worst key kept at the last cut (0 before) */
} topk_buf;
/* Keep t's k best keys (quickselect, select_topk.c). */
void select_topk_cut(topk_buf *t, int k);
/* select_topk_cut, then the worst key kept (t must hold one). */
uint64_t select_topk_cut_worst(topk_buf *t, int k);
float select_key_score(uint64_t key);
/* Inline below: the scans offer every eligible slot to them. */
/* Floats map to unsigned integers in their order: the sign bit set for
 * positives, every bit inverted for negatives. */
static inline uint64_t select_pair_key(float score, int32_t slot) {
    uint32_t u;
    memcpy(&u, &score, sizeof u);
    u = u & 0x80000000u ? ~u : u | 0x80000000u;
    return (uint64_t)u << 32 | (uint32_t)~(uint32_t)slot;
}

/* Offer a pair; a full buffer is cut to its k best and the threshold raised. */
static inline void select_topk_push(topk_buf *t, float score, int32_t slot) {
    const uint64_t key = select_pair_key(score, slot);
    if (key <= t->thr) return;
    t->key[t->n] = key;
    if (++t->n < 2 * t->k) return;
    t->thr = select_topk_cut_worst(t, t->k);
}

/* The kept slots (best first when sorted) and scores; returns the count. */
int select_topk_take(topk_buf *t, int sorted, int32_t *out, float *scores);

/* Every allocation a query makes goes through here: realloc, or NULL while
 * the selector's test hook s->fail_alloc is set. */
void *select_query_realloc(const selector *s, void *p, size_t bytes);

/* Growable scratch owned by a selector and grown by its queries. */
typedef struct select_scratch {
    float *f;
    int32_t *i;
    uint64_t *u;
    size_t cap_f, cap_i, cap_u;
} select_scratch;

int select_scratch_f(const selector *s, select_scratch *sc, size_t n); /* 0 on failure */
int select_scratch_i(const selector *s, select_scratch *sc, size_t n);
int select_scratch_u(const selector *s, select_scratch *sc, size_t n);
void select_scratch_free(select_scratch *sc);

/* dst = src / ||src|| (zero vectors stay zero). */
void select_normalize(float *dst, const float *src, int d);
/* The stored form of a search vector: normalised for cosine, copied for dot. */
void select_prepare(float *dst, const float *src, int d, subq_score score);

/* The rows a scan scores, with the query: float rows (dot: q . row over rows
 * of d f32 / f16 values `stride` elements apart from base), packed one after
 * the other (stride == d), or the exact selector's compressed codes
 * (code_scores: rows of codes `stride` bytes apart, their scales in
 * code_scale, the query coded in cq). `scores`, the decode kernel for
 * contiguous rows (kernels_kv_decode_get), scores a whole scan of
 * consecutive float rows: several rows per horizontal sum and no slot list;
 * `dot` scores the slots of a list (re-ranks; required for float rows).
 * row_bytes is what scoring one row reads (stats.bytes_read). */
typedef struct select_rows {
    const void *base;
    size_t stride;
    int d;
    const float *q;
    kernels_gather_dot_fn dot;
    kernels_kv_scores_fn scores;
    const scan_query *cq;
    const float *code_scale;
    scan_codes_fn code_scores;
    size_t row_bytes;
    /* rows below far_hi are scored with q_far / cq_far instead (the query
     * without its rotated dims: selector_params.far_rot); far_hi 0: none */
    int far_hi;
    const float *q_far;
    const scan_query *cq_far;
} select_rows;

/* q_far: q (d values) with its last far_rot zeroed. */
void select_far_query(float *q_far, const float *q, int d, int far_rot);
/* s[i * ld + j] -= qn_i[rot] . u_j[rot] over the last far_rot dims, for
 * the n queries (rows of qn [n][d]) and the units j0 + j, j < nu (U: their
 * rows, ldu apart, from unit j0's) below the query's far boundary
 * (unit_hi[i]: units below it are far): their scores without the rotated
 * dims, after an sgemm gave them with. R: n x nu scratch. */
void select_far_correct(int n, const float *qn, int d, int far_rot, const float *U, int ldu, int j0, int nu,
                        const int *unit_hi, float *s, int ld, float *R, int n_threads);

/* Scores of the n consecutive rows from slot j0 into out (rows with a
 * contiguous kernel only). */
void select_score_run(const select_rows *r, int j0, int n, float *out);
/* Scores of the n listed slots into out (r->dot; far slots with q_far). */
void select_score_slots(const select_rows *r, const int32_t *slots, int n, float *out);
/* Score the n consecutive rows from slot j0 (rows with a contiguous
 * kernel: `scores` or `code_scores`) into dots and offer those of the
 * query's segment that reach t's threshold to t (idx: scratch of n). */
void select_offer_run(const select_rows *r, const select_mask *m, int j0, int n, float *dots, int32_t *idx,
                      topk_buf *t);

/* Exact top-k over the eligible slots below n (the exact selector, and the
 * ANN selectors when few slots are eligible). Writes up to k slots, best
 * first when sorted (else in any order: a pool to re-rank), and returns the
 * count (-1 when out of memory); adds the rows scored to
 * s->stats.n_visited and their bytes to bytes_read. */
#define SELECT_BLOCK 256
int select_scan_topk(selector *s, const select_rows *rows, int n, const select_mask *m, int k, int sorted,
                     select_scratch *sc, int32_t *out);
/* The same over the eligible slots of [from, to) of the n only, with their
 * scores in `scores` (in out's order) when it is not NULL. */
int select_scan_topk_range(selector *s, const select_rows *rows, int n, int from, int to, const select_mask *m, int k,
                           int sorted, select_scratch *sc, int32_t *out, float *scores);

/* Whether a scan of n rows is split across threads: with more than one,
 * from 8192 rows that read 2 MiB or more, keys or codes. Shorter scans cost
 * more split than whole (the 4K fixture's decode, every layer sparse, int4
 * codes of 64 values, 2 threads: at 32K keys, 1.2 MB a scan, level; at 64K,
 * 2.4 MB, 1.05-1.67 ms of selection a step split against 1.22-2.13 whole.
 * The Qwen3-0.6B shape at 32K, 2.2 MB of codes of 128 values for 512
 * slots: 3.5-4.8 ms split against 4.2-6.7 whole in 5 pairs). */
int select_scan_split(const selector *s, const select_rows *rows, int n);

/* select_scan_topk over contiguous parts of the slots on the pool's
 * threads, each into its own buffer, merged by the calling thread (the
 * same result; sc: its scratch, for a part scanned again). */
int select_scan_topk_parallel(selector *s, const select_rows *rows, int n, const select_mask *m, int k, int sorted,
                              select_scratch *sc, int32_t *out);

/* select_scan_topk for g <= SELECT_GROUP_MAX queries under one mask (the
 * rows of rows->q, rows->d apart, and below rows->far_hi those of
 * rows->q_far; over codes rows->cq[i] and rows->cq_far[i]; rows with a
 * contiguous kernel): each run of rows read once for the g, split across
 * threads as select_scan_topk_parallel splits one query's (select_scan_split).
 * Query i's slots to out + i * k, its count to got[i]; returns 0, or -1
 * when out of memory. */
#define SELECT_GROUP_MAX 8
int select_scan_topk_group(selector *s, const select_rows *rows, int n, const select_mask *m, int k, int g, int sorted,
                           int32_t *out, int *got);

/* The top k of the n given slots (a re-rank: they are eligible already), as
 * select_scan_topk. */
int select_rank_slots(selector *s, const select_rows *rows, const int32_t *slots, int n, int k, select_scratch *sc,
                      int32_t *out);

/* select_scan_topk for n queries at once (unit rows qn [n][d]) over rows
 * stored f32 or f16 (`f16`): the scores of a block of keys for every query
 * come from one sgemm, then each query offers the eligible slots of the
 * block to its own 2k buffer (memory: n x a block of keys and n x 2k
 * pairs, never n x count). Writes up to k slots per query to out + i * k
 * (best first when sorted, else in any order) and the counts to got;
 * returns 0, or -1 when out of memory. */
int select_scan_topk_batch(selector *s, int n, const float *qn, const void *base, size_t stride, int d, int f16,
                           int count, const select_mask *m, int k, int sorted, int32_t *out, int *got, int n_threads);

/* The coarse-to-fine block scan's summaries (select_blocks.c): the mean
 * stored key of every full block of `block` slots, and, where group > 0,
 * of every full group of `group` blocks. */
typedef struct select_block_index {
    const float *sums;  /* [count / block][d] */
    const float *gsums; /* [count / (block * group)][d] */
    int block, nprobe;
    int group, gprobe, group_from; /* 0: blocks ranked in one level */
    const float *reps;  /* [count / block][n_reps][d]: each block's keys farthest from its mean */
    const float *greps; /* [count / (block * group)][n_reps][d]: each group's, among its blocks' */
    int n_reps;         /* 0: blocks and groups ranked by their mean alone */
} select_block_index;

/* The block scan for n queries (unit rows qn [n][d]; qf: the same without
 * their rotated dims, for keys below each mask's far_hi, or NULL) over
 * `rows` (float rows with a contiguous kernel and `dot`; rows.q is set per
 * query). Each
 * query ranks the full blocks below its n_slots that hold eligible slots
 * by q . mean (one sgemm per chunk of blocks for the batch), scans the
 * eligible slots of its `nprobe` best and of its last, partial block, and
 * keeps its k best: out + i * k (in any order), counts in got. Once a
 * query sees group_from keys, it ranks the groups first (one sgemm per
 * chunk), and then only the blocks of its gprobe best groups and of its
 * last, partial group. With `codes` (the compressed rows of the same
 * slots; codes.cq holds the n queries coded, one each), the scan reads the
 * codes and keeps select_rerank_pool(k) slots, which the float rows then
 * rank. Returns 0, or -1 when out of memory. */
int select_block_topk_batch(selector *s, int n, const float *qn, const float *qf, const select_rows *rows,
                            const select_rows *codes,
                            const select_block_index *ix, int count, const select_mask *m, int k,
                            int32_t *out, int *got, int n_threads);

/* The prompt tokens in every check-th slot among n queries (out + i * k,
 * got[i]: what a coarse scan answered; a prompt token's slot is the last
 * of its excluded tail, m[i].ex1_hi - 1)
 * also answered by select_scan_topk over rows, the overlap counted in
 * s->stats.n_check_keys / n_check_found (the full scan's own work is not
 * counted). Returns 0, or -1 when out of memory. */
int select_check_recall(selector *s, int n, const float *qn, const float *qf, const select_rows *rows, int count,
                        const select_mask *m, int k, int check, const int32_t *out, const int *got);

/* Content clusters of the far keys' first dc = d - far_rot dims, an
 * inverted file (select_clusters.c): n_lists centroids, each with the
 * keys nearest to it as q8_0 codes of those dims, in slot order. */
typedef struct select_clusters {
    int n_lists;      /* 0: not trained */
    int dc, f16;      /* dims clustered; the stored keys are f16 (else f32) */
    int dq;           /* dc rounded up to q8_0's blocks of 32 (codes zero-padded) */
    size_t code_bytes; /* one row's q8_0 blocks */
    int count;        /* slots [0, count) are in the lists */
    float *cent;      /* [n_lists][dc] */
    float *half_norm; /* [n_lists] |c|^2 / 2 */
    int32_t *len, *cap;
    void **rows;      /* [n_lists] -> [cap] rows of code_bytes */
    int32_t **slots;  /* [n_lists] -> [cap] increasing */
    size_t bytes;     /* the lists' allocations */
} select_clusters;

/* The lists for count keys: min(clusters, count / SELECT_CLUSTER_KEYS),
 * so that k-means has keys enough for each centroid; 0 for too few. */
#define SELECT_CLUSTER_KEYS 16
int select_clusters_lists(int clusters, int count);
/* k-means of the first dc dims of the count stored keys (rows of d, f16 or
 * f32) into n_lists centroids, lists empty, on the threads of pl (NULL:
 * the caller's); 0 (untrained when there are fewer keys than lists), or -1
 * when out of memory. */
int select_clusters_train(select_clusters *c, int n_lists, int dc, int f16, const void *keys, int d, int count,
                          pool *pl);
/* Add slots [c->count, to) of keys to their nearest lists (untrained: none);
 * 0, or -1 when out of memory (the lists then hold what they held). */
int select_clusters_add(select_clusters *c, const void *keys, int d, int to);
void select_clusters_truncate(select_clusters *c, int n_keep);
void select_clusters_free(select_clusters *c);
size_t select_clusters_bytes(const select_clusters *c);
/* The k best for each of n queries (unit rows qn [n][d]): the far keys
 * (slots below m[i].far_hi) of its nprobe lists with the best q . centroid,
 * scored on their first dc dims (by the codes, then the best 2k of them
 * again on the stored rows), and its eligible near keys scored whole from
 * rows; out + i * k in any order, counts in got. Returns 0, or -1 when out
 * of memory. */
int select_cluster_topk_batch(selector *s, const select_clusters *c, int nprobe, int n, const float *qn,
                              const select_rows *rows, int count, const select_mask *m, int k, int32_t *out, int *got,
                              int n_threads);

/* The query side of the graph-index selectors (hnsw, faiss), over an index
 * behind two functions: the query is normalised for cosine; when few slots
 * are eligible they are scored directly (select_scan_topk over the index's
 * stored vectors), else a filtered graph search of width select_filtered_ef
 * runs, with one wider retry when it comes back short, and every returned
 * slot is checked again. */
typedef struct select_ann {
    void *ix; /* the index (NULL: none yet) */
    /* the shim's filtered search (count, or -1 on failure) and its stored
     * vectors (row i at base + i * stride) */
    int (*search)(void *ix, const float *q, int k, int ef, select_filter_fn filter, void *ctx, int64_t *labels,
                  float *sims, int64_t *n_dist, uint64_t *n_bytes);
    const void *(*vectors)(const void *ix, size_t *stride);
    int d, count;           /* search width; keys in the index */
    /* the index ranks by the first d_graph elements of its vectors: the
     * key's d, or under a far scheme (hnsw) `lead` leading elements and the
     * d - far_rot dims that do not rotate, the key after the lead */
    int d_graph, lead;
    /* under a far scheme (hnsw): the latest stored keys again, rows of d one
     * after another, slots [recent_lo, recent_lo + recent_n) of recent_cap,
     * which the near scan reads at a contiguous kernel's rate (in the
     * index a key lies among its links, 400-530 bytes apart); else NULL */
    void *recent;
    int recent_lo, recent_n, recent_cap, recent_max; /* rows: held, allocated, at most (0: none kept) */
    subq_score score;     /* cosine: the query is normalised */
    int f16;                /* the index stores f16 rows */
    float *qn;              /* the query in stored form, its far form, its graph form (3 d + 2) */
    int64_t *labels;        /* search results */
    float *sims;
    int res_cap;
    select_scratch sc;
} select_ann;

/* 0 when out of memory (then select_ann_free). */
int select_ann_init(select_ann *a, const selector_params *p);
/* The first stored key (after the lead) and the distance in elements
 * between consecutive ones. */
const void *select_ann_keys(const select_ann *a, size_t *stride);
void select_ann_free(select_ann *a); /* not the index: its owner frees it */
/* Keep the latest keys for the near scan (a->recent): at least far_from + 1
 * of them and a prompt batch more. */
void select_ann_recent_init(select_ann *a, int far_from);
/* The next key in slot order (a->recent_lo + recent_n), its vector as the
 * index stores it (a->lead elements, then d, f16 or f32), kept without the
 * leading elements; once the buffer holds its most, its older half is
 * dropped first. Out of memory, the recent keys are dropped (the near scan
 * then reads the index's). */
void select_ann_recent_push(select_ann *a, const void *stored);
int select_ann_query(selector *s, select_ann *a, const float *q_search, int k, const select_mask *m, int32_t *out);
/* What a query runs beside it (selector_query_ahead): fn(ctx), on one of
 * the two threads of pool; ran once it has; t_query: the query's own time
 * (what it takes without fn). */
typedef struct ann_beside {
    void (*fn)(void *ctx);
    void *ctx;
    pool *pool;
    int ran;
    double t_query;
} ann_beside;
/* select_ann_query on b->pool's threads with b->fn run once beside it: the
 * content graph's search and its near scan on one thread each, fn before
 * the scan (a decode step's near scan reads about 4K rows, as long as the
 * graph search); otherwise the query on one thread, fn on the other. */
int select_ann_query_beside(selector *s, select_ann *a, const float *q_search, int k, const select_mask *m,
                            int32_t *out, ann_beside *b);
/* n of those in parallel (the index's search only reads it; each thread
 * queries with its own scratch and counters); as ops->query_batch. */
int select_ann_query_batch(selector *s, select_ann *a, int n, const float *q_search, int k, const select_mask *m,
                           int32_t *out, int *got, int n_threads);

/* Beam width of a filtered ANN search: ef when every indexed slot is
 * eligible, widened by n / n_elig (at most 8x) otherwise. Accepted nodes are
 * met at that rate along the walk, and with the stock width the search stops
 * before it reaches the eligible neighbours that lie in the next cluster
 * (measured: recall@64 0.92 -> 0.99 on a one-third document mask). */
static inline int select_filtered_ef(int ef, int n, int n_elig) {
    double w = n_elig > 0 ? (double)ef * n / n_elig : ef;
    return w > 8.0 * ef ? 8 * ef : (int)w;
}

/* Quest's upper bound of the head-mean q.k over the keys of `page`, from its
 * stored bounds (tests check it against every key of the page). s must be a
 * quest selector. */
float select_quest_page_score(selector *s, const float *q_native, int page);

#endif
