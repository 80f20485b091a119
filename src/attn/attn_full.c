/* Full (dense) causal attention: the reference every sparse stage is
 * measured against. Small batches (decode) stream each KV head's keys and
 * values once for all the query heads that share it (GQA), in chunks of
 * positions that every thread takes its share of, whatever the number of
 * heads and tokens (flash-decoding: a softmax partial per chunk, merged at
 * the end); large batches (prefill) use sgemm for Q K^T and P V per KV head
 * and block of queries, each block scoring only the keys up to its last
 * query (attn_batch). */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "attn/attn.h"
#include "base/blas.h"
#include "base/error.h"
#include "kernels/kernels.h"

/* Batches at least this large go through sgemm. */
#define GEMM_MIN_TOKENS 16
/* Queries per block of the sgemm path (x the heads of a KV head: rows)... */
#define QUERY_BLOCK 64
/* threads the query blocks of a batch are cut for (attn_batch) */
#define BATCH_THREADS 4
/* ... fewer when a block's scores would pass this many floats (16 MiB). */
#define SCORE_BLOCK_FLOATS (4 << 20)
/* Keys per decode work item, between these bounds: long runs of rows are
 * what lets a core read near the bandwidth limit (each new run restarts
 * the prefetchers: 1024-key items read 20-30% slower than 8192-key ones at
 * 32K-128K, bench/bench_attn.c), while every thread still gets several
 * items to balance (decode_chunk). The g x chunk scores stay in L2 between
 * the score, exp and accumulation passes. */
#define DECODE_CHUNK_MIN 1024
#define DECODE_CHUNK_MAX 8192
/* work items per thread the chunk size aims at */
#define ITEMS_PER_THREAD 4
/* Rows of a gathered set asked for ahead of their use (attn_group_over_slots):
 * a usual set (sinks + K + tail) whole; a bounded window, so that a
 * K = 2048 set does not evict its own rows (256 f16 rows of 128 are 64 KiB,
 * well inside L2). */
#define GATHER_WINDOW 256

/* Gathered rows copied side by side (attn_group_over_slots), on the stack:
 * at least two rows of the widest head. */
typedef struct gather_rows {
    _Alignas(64) unsigned char bytes[32768];
} gather_rows;
_Static_assert(sizeof(gather_rows) >= 2 * KV_MAX_HEAD_DIM * sizeof(float), "gather scratch holds two rows");

/* max of x[0..n) (-inf for n = 0); eight running maxima, not one chain of
 * dependent compares (a visible share of a decode step otherwise) */
static float max_of(const float *x, int n) {
    float m[8] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    int j = 0;
    for (; j + 8 <= n; j += 8)
        for (int u = 0; u < 8; u++) m[u] = x[j + u] > m[u] ? x[j + u] : m[u];
    for (; j < n; j++) m[0] = x[j] > m[0] ? x[j] : m[0];
    for (int u = 1; u < 8; u++) m[0] = m[u] > m[0] ? m[u] : m[0];
    return m[0];
}

/* p_j = exp(s_j - max) / sum exp(s - max) in place; -INFINITY entries get 0;
 * a row with nothing eligible becomes all zeros. */
static void softmax_inplace(float *s, int n) {
    const float mx = max_of(s, n);
    if (mx == -INFINITY) {
        memset(s, 0, (size_t)n * sizeof(float));
        return;
    }
    float inv = 1.0f / kernels_get()->exp_shift_sum(s, n, mx);
    for (int j = 0; j < n; j++) s[j] *= inv;
}

/* s <- c tanh(s / c) for the n scores of a soft-capped layer (gemma2);
 * c = 0: unchanged. -inf (a masked key) stays -inf. */
static void softcap(float *s, int n, float c) {
    if (c > 0.0f && n > 0) kernels_get()->softcap(s, (size_t)n, c);
}

/* the cache lines of one row */
static void prefetch_row(const void *row, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch((const char *)row + o, 0, 3);
}

/* Rows slots[j0 .. j0 + nb) of n side by side into dst, each asking for the
 * row GATHER_WINDOW further on (the first window: gather_start) */
static void gather_block(const kv_cache *kv, int layer, int kv_head, int values, const int *slots, int j0, int nb,
                         int n, unsigned char *dst) {
    const size_t rb = kv->row_bytes;
    for (int j = j0; j < j0 + nb; j++) {
        if (j + GATHER_WINDOW < n) prefetch_row(kv_cache_row(kv, layer, kv_head, values, slots[j + GATHER_WINDOW]), rb);
        memcpy(dst + (size_t)(j - j0) * rb, kv_cache_row(kv, layer, kv_head, values, slots[j]), rb);
    }
}

/* asks for the first GATHER_WINDOW rows of a set */
static void gather_start(const kv_cache *kv, int layer, int kv_head, int values, const int *slots, int n) {
    for (int j = 0; j < n && j < GATHER_WINDOW; j++)
        prefetch_row(kv_cache_row(kv, layer, kv_head, values, slots[j]), kv->row_bytes);
}

/* One pass over the rows slots[0..n) of KV head kh, copied side by side in
 * blocks for the decode kernels, which convert each row once for the g
 * heads: values = 0: s[i*ld + j] = scale q_i . k_j; values = 1:
 * out_i += sum_j s[i*ld + j] v_j. The caller asks for the first window of
 * rows (gather_start), as early as it can. */
static void slots_pass(const kv_cache *kv, const kernels_kv_decode *ops, int layer, int kh, int values, int g,
                       const float *q, float scale, const int *slots, int n, float *s, int ld, float *out) {
    gather_rows rows;
    const int block = (int)(sizeof rows.bytes / kv->row_bytes);
    for (int j0 = 0; j0 < n; j0 += block) {
        const int nb = n - j0 < block ? n - j0 : block;
        gather_block(kv, layer, kh, values, slots, j0, nb, n, rows.bytes);
        if (values) ops->accum(s + j0, g, ld, rows.bytes, nb, kv->head_dim, out);
        else ops->scores(q, g, rows.bytes, nb, kv->head_dim, scale, s + j0, ld);
    }
}

void attn_group_over_slots(const kv_cache *kv, int layer, int kv_head, int g, const float *q, float scale, float cap,
                           const int *slots, int n, const attn_rope *rope, const int32_t *shift, float *scores,
                           float *out) {
    const kernels_kv_decode ops = kernels_kv_decode_get(kv->type);
    /* Each key row is asked for GATHER_WINDOW rows before its use, so for
     * a usual set all of them before the first, and the value rows likewise
     * before the softmax: scattered rows wait on DRAM and often a page walk,
     * which only many requests in flight hide (24 layers x 8 KV heads of 148
     * rows at 32K: 7-9 ms per step asked 16 rows ahead, 3.2-5.4 ms so).
     * Blocks of rows are then copied side by side for the decode kernels,
     * which convert each row once for the g heads in wide registers (one
     * dot and one axpy call per row and head measured 1 ms a step more). */
    gather_start(kv, layer, kv_head, 0, slots, n);
    slots_pass(kv, &ops, layer, kv_head, 0, g, q, scale, slots, n, scores, n, NULL); /* s_ij = scale q_i . k_j */
    if (shift) attn_far_rescore(rope, kv, layer, kv_head, g, q, scale, slots, shift, n, scores, n);
    gather_start(kv, layer, kv_head, 1, slots, n);
    softcap(scores, g * n, cap);
    for (int i = 0; i < g; i++) softmax_inplace(scores + (size_t)i * n, n);
    memset(out, 0, (size_t)g * kv->head_dim * sizeof(float));
    slots_pass(kv, &ops, layer, kv_head, 1, g, NULL, 0.0f, slots, n, scores, n, out); /* out_i = sum_j p_ij v_j */
}

/* chunk_partial's scores (values = 0) or accumulation (values = 1) over
 * slots [j0, j0 + n) whose runs of rows split off a multiple of
 * KV_RUN_ALIGN: a run that wraps around a sliding layer's ring (once a
 * step). The decode kernels take adjacent rows, so blocks are copied side
 * by side first, as the gathered path does. Kept out of line so that the
 * in-memory path's frame does not carry the scratch. */
__attribute__((noinline)) static void strided_pass(const kernels_kv_decode *ops, const kv_cache *kv, int layer, int kh,
                                                   int values, int g, const float *q, float scale, int j0, int n,
                                                   float *scores, float *o) {
    gather_rows rows;
    const int block = (int)(sizeof rows.bytes / kv->row_bytes);
    for (int b0 = 0; b0 < n; b0 += block) {
        const int nb = n - b0 < block ? n - b0 : block;
        kv_cache_read_rows(kv, layer, kh, values, j0 + b0, nb, rows.bytes);
        if (values) ops->accum(scores + b0, g, n, rows.bytes, nb, kv->head_dim, o);
        else ops->scores(q, g, rows.bytes, nb, kv->head_dim, scale, scores + b0, n);
    }
}

/* A partial's softmax statistics over the g x n scores of keys [j0, j0 + n),
 * which become the weights e^(s_ij - m_i) in place:
 *   s_ij = -inf outside the query's document (segment seg),
 *   m_i = max_j s_ij,  l_i = sum_j e^(s_ij - m_i). */
static void partial_weights(const kernels *K, const kv_cache *kv, int g, int j0, int n, int seg, float cap,
                            float *scores, float *m, float *l) {
    softcap(scores, g * n, cap);
    /* documents are runs of slots: keys that start and end in the query's
     * lie wholly in it */
    if (kv->seg[j0] != seg || kv->seg[j0 + n - 1] != seg)
        for (int j = 0; j < n; j++)
            if (kv->seg[j0 + j] != seg)
                for (int i = 0; i < g; i++) scores[(size_t)i * n + j] = -INFINITY;
    for (int i = 0; i < g; i++) {
        float *row = scores + (size_t)i * n, mx = max_of(row, n);
        m[i] = mx;
        if (mx == -INFINITY) { /* nothing eligible: no weight */
            memset(row, 0, (size_t)n * sizeof(float));
            l[i] = 0.0f;
        } else {
            l[i] = K->exp_shift_sum(row, n, mx);
        }
    }
}

/* One decode work item: keys [j0, j1) of one KV head for the g query heads
 * that share it (q and the partial hold g adjacent heads; scores is g x
 * (j1 - j0) scratch). Each key and value row is loaded once for the g heads:
 *   s_ij = scale q_i.k_j (-inf outside the query's document)
 *   m_i = max_j s_ij,  l_i = sum_j e^(s_ij - m_i),  o_i = sum_j e^(s_ij - m_i) v_j
 * part = [o (g x hd) | m (g) | l (g)]. */
static void chunk_partial(const kernels *K, const kernels_kv_decode *ops, const kv_cache *kv, int layer, int kh, int g,
                          const float *q, float scale, float cap, int j0, int j1, int seg, float *scores, float *part) {
    const int hd = kv->head_dim, n = j1 - j0;
    /* runs of rows (a ring wraps, a file's stage holds the latest slots)
     * read in place where each run ends KV_RUN_ALIGN rows into the chunk:
     * the kernels score rows in groups within that and accumulate values
     * row after row, so the runs give the bits of one pass over the chunk */
    int in_runs = kv_cache_rows_adjacent(kv, layer);
    for (int j = 0, r; in_runs && j < n; j += r) {
        r = kv_cache_run(kv, layer, j0 + j, n - j);
        in_runs = j + r == n || (j + r) % KV_RUN_ALIGN == 0;
    }
    float *o = part, *m = part + (size_t)g * hd, *l = m + g;
    for (int j = 0, r; in_runs && j < n; j += r) {
        r = kv_cache_run(kv, layer, j0 + j, n - j);
        ops->scores(q, g, kv_cache_key(kv, layer, kh, j0 + j), r, hd, scale, scores + j, n);
    }
    if (!in_runs) strided_pass(ops, kv, layer, kh, 0, g, q, scale, j0, n, scores, NULL);
    partial_weights(K, kv, g, j0, n, seg, cap, scores, m, l);
    memset(o, 0, (size_t)g * hd * sizeof(float));
    for (int j = 0, r; in_runs && j < n; j += r) {
        r = kv_cache_run(kv, layer, j0 + j, n - j);
        ops->accum(scores + j, g, n, kv_cache_value(kv, layer, kh, j0 + j), r, hd, o);
    }
    if (!in_runs) strided_pass(ops, kv, layer, kh, 1, g, NULL, 0.0f, j0, n, scores, o);
}

/* Head 0's rows [slot0, slot0 + n) of a slot-major cache side by side into
 * dst, asking for the rows of every head (span bytes a slot) AHEAD_SLOTS
 * slots further on, below slot end: the hardware does not follow a stride
 * across 4 KiB pages, and the other heads then read what this brought. */
#define AHEAD_SLOTS 8
static void read_rows_ahead(const kv_cache *kv, int layer, int values, int slot0, int n, int end, size_t span,
                            unsigned char *dst) {
    for (int j = 0; j < n; j++) {
        const int ahead = slot0 + j + AHEAD_SLOTS;
        if (ahead < end) prefetch_row(kv_cache_row(kv, layer, 0, values, ahead), span);
        memcpy(dst + (size_t)j * kv->row_bytes, kv_cache_row(kv, layer, 0, values, slot0 + j), kv->row_bytes);
    }
}

/* chunk_partial for all H KV heads of a slot-major cache (a file), where a
 * slot's rows of every head lie side by side: each block of slots is copied
 * for every head in turn while its pages are hot. A pass per head over the
 * whole chunk read 1 byte in 2H and walked its pages 2H times: 0.3x the
 * in-memory rate at 128K on a VM (4 KiB page-cache pages), 0.4x so. The
 * blocks are those a per-head pass would take, in the same order: the
 * same bits. q: the token's n_head
 * queries; scores: H x g x (j1 - j0) scratch; head kh's partial at
 * part + kh * part_stride. */
static void chunk_partials_slot_major(const kernels *K, const kernels_kv_decode *ops, const kv_cache *kv, int layer,
                                      int H, int g, const float *q, float scale, float cap, int j0, int j1, int seg,
                                      float *scores, float *part, size_t part_stride) {
    const int hd = kv->head_dim, n = j1 - j0;
    gather_rows rows;
    const int block = (int)(sizeof rows.bytes / kv->row_bytes);
    const size_t span = (size_t)H * kv->row_bytes; /* a slot's keys (values) of every head */
    for (int b0 = 0; b0 < n; b0 += block) {
        const int nb = n - b0 < block ? n - b0 : block;
        for (int kh = 0; kh < H; kh++) {
            if (kh == 0) read_rows_ahead(kv, layer, 0, j0 + b0, nb, j1, span, rows.bytes);
            else kv_cache_read_rows(kv, layer, kh, 0, j0 + b0, nb, rows.bytes);
            ops->scores(q + (size_t)kh * g * hd, g, rows.bytes, nb, hd, scale, scores + (size_t)kh * g * n + b0, n);
        }
    }
    for (int kh = 0; kh < H; kh++) {
        float *o = part + kh * part_stride, *m = o + (size_t)g * hd;
        partial_weights(K, kv, g, j0, n, seg, cap, scores + (size_t)kh * g * n, m, m + g);
        memset(o, 0, (size_t)g * hd * sizeof(float));
    }
    for (int b0 = 0; b0 < n; b0 += block) {
        const int nb = n - b0 < block ? n - b0 : block;
        for (int kh = 0; kh < H; kh++) {
            if (kh == 0) read_rows_ahead(kv, layer, 1, j0 + b0, nb, j1, span, rows.bytes);
            else kv_cache_read_rows(kv, layer, kh, 1, j0 + b0, nb, rows.bytes);
            ops->accum(scores + (size_t)kh * g * n + b0, g, n, rows.bytes, nb, hd, part + kh * part_stride);
        }
    }
}

/* out_i = sum_c e^(m_ci - M_i) o_ci / sum_c e^(m_ci - M_i) l_ci over the
 * nc partials of one (query, KV head), M_i = max_c m_ci (zeros when no key
 * was eligible). */
static void merge_partials(const float *parts, int nc, int g, int hd, float *out) {
    const size_t stride = (size_t)g * (hd + 2);
    for (int i = 0; i < g; i++) {
        float M = -INFINITY, L = 0.0f, *oi = out + (size_t)i * hd;
        for (int c = 0; c < nc; c++) {
            const float mc = parts[c * stride + (size_t)g * hd + i];
            M = mc > M ? mc : M;
        }
        memset(oi, 0, (size_t)hd * sizeof(float));
        if (M == -INFINITY) continue;
        for (int c = 0; c < nc; c++) {
            const float *p = parts + c * stride, mc = p[(size_t)g * hd + i];
            if (mc == -INFINITY) continue;
            const float w = expf(mc - M);
            L += w * p[(size_t)g * hd + g + i];
            for (int d = 0; d < hd; d++) oi[d] += w * p[(size_t)i * hd + d];
        }
        const float inv = 1.0f / L;
        for (int d = 0; d < hd; d++) oi[d] *= inv;
    }
}

/* Keys per work item for n keys of H KV heads: the largest multiple of
 * DECODE_CHUNK_MIN that leaves ITEMS_PER_THREAD items to each of
 * DECODE_THREADS threads, within the bounds. A fixed thread count, not the
 * pool's: the chunks set where partial softmaxes merge, so results stay
 * bit-identical whatever -t is (README: reproducibility). */
#define DECODE_THREADS 16
static int decode_chunk(int n, int H) {
    int64_t c = (int64_t)n * H / ((int64_t)DECODE_THREADS * ITEMS_PER_THREAD) / DECODE_CHUNK_MIN * DECODE_CHUNK_MIN;
    return c < DECODE_CHUNK_MIN ? DECODE_CHUNK_MIN : c > DECODE_CHUNK_MAX ? DECODE_CHUNK_MAX : (int)c;
}

/* Work items (token t, KV head, chunk c) in that order; token t sees keys
 * [lo[t], slot0 + t] (lo 0, or its sliding window's first slot) in
 * nc[t] = ceil((slot0 + t + 1 - lo[t]) / chunk) chunks per KV head, its
 * first item at first[t]. Pool chunks take runs of items, then (token, KV
 * head) merges. */
typedef struct rows_job {
    const attn_step *st;
    const kv_cache *kv;
    const kernels *K;
    kernels_kv_decode ops;
    int chunk, n_items, n_runs, H, g;
    int all_heads; /* an item is (token t, chunk c) for every KV head (chunk_partials_slot_major) */
    const int *nc, *first, *lo;
    float *parts;
    size_t part_floats;
    _Atomic int failed;
} rows_job;

static void rows_items(void *ctx, int run, int thread) {
    rows_job *j = ctx;
    const attn_step *st = j->st;
    const int hd = st->head_dim, i0 = j->n_items * run / j->n_runs, i1 = j->n_items * (run + 1) / j->n_runs;
    const int per = j->all_heads ? j->H : 1; /* parts per item */
    float *scores = malloc((size_t)per * j->g * j->chunk * sizeof(float));
    if (!scores) {
        j->failed = 1;
        return;
    }
    for (int it = i0, t = 0; it < i1; it++) {
        while (it >= j->first[t + 1] / per) t++;
        const int r = it - j->first[t] / per, slot = st->slot0 + t;
        const int kh = j->all_heads ? 0 : r / j->nc[t], c = j->all_heads ? r : r % j->nc[t];
        const int j0 = j->lo[t] + c * j->chunk, j1 = j0 + j->chunk < slot + 1 ? j0 + j->chunk : slot + 1;
        const float *q = st->q + (size_t)t * st->n_head * hd + (size_t)kh * j->g * hd;
        /* partials in (token, KV head, chunk) order, as rows_merge reads them */
        float *part = j->parts + ((size_t)j->first[t] + (size_t)kh * j->nc[t] + c) * j->part_floats;
        if (j->all_heads)
            chunk_partials_slot_major(j->K, &j->ops, j->kv, st->layer, j->H, j->g, q, st->scale, st->softcap, j0, j1,
                                      j->kv->seg[slot], scores, part, (size_t)j->nc[t] * j->part_floats);
        else
            chunk_partial(j->K, &j->ops, j->kv, st->layer, kh, j->g, q, st->scale, st->softcap, j0, j1,
                          j->kv->seg[slot], scores, part);
    }
    free(scores);
}

static void rows_merge(void *ctx, int th, int thread) {
    rows_job *j = ctx;
    const attn_step *st = j->st;
    const int t = th / j->H, kh = th % j->H, hd = st->head_dim;
    merge_partials(j->parts + ((size_t)j->first[t] + (size_t)kh * j->nc[t]) * j->part_floats, j->nc[t], j->g, hd,
                   st->out + (size_t)t * st->n_head * hd + (size_t)kh * j->g * hd);
}

static subq_status full_forward_rows(const attn_step *st, const kv_cache *kv, subq_error *err) {
    enum { MAX_T = GEMM_MIN_TOKENS };
    const int g = st->n_head / st->n_head_kv, hd = st->head_dim, T = st->n_tokens, H = st->n_head_kv;
    const int n_seen = st->window > 0 && st->window < st->slot0 + T ? st->window : st->slot0 + T;
    const int chunk = decode_chunk(n_seen, H);
    int nc[MAX_T], first[MAX_T + 1], lo[MAX_T];
    first[0] = 0;
    for (int t = 0; t < T; t++) {
        const int slot = st->slot0 + t;
        lo[t] = st->window > 0 && slot + 1 > st->window ? slot + 1 - st->window : 0;
        nc[t] = (slot - lo[t] + chunk) / chunk;
        first[t + 1] = first[t] + H * nc[t];
    }
    const int all_heads = !kv_cache_rows_adjacent(kv, st->layer);
    rows_job j = {.st = st, .kv = kv, .K = kernels_get(), .ops = kernels_kv_decode_get(kv->type), .chunk = chunk,
                  .n_items = first[T] / (all_heads ? H : 1), .H = H, .g = g, .all_heads = all_heads, .nc = nc,
                  .first = first, .lo = lo, .part_floats = (size_t)g * (hd + 2)};
    j.parts = malloc((size_t)first[T] * j.part_floats * sizeof(float));
    if (!j.parts) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory for attention partials (%d items)", first[T]);
    /* threads only pay off once there is real work (items x keys x dims) */
    const int64_t work = (int64_t)H * T * g * n_seen * hd;
    j.n_runs = work >= (1 << 16) ? j.n_items : 1;
    pool_run(st->pool, j.n_runs, rows_items, &j);
    pool_run(work >= (1 << 16) ? st->pool : NULL, T * H, rows_merge, &j);
    free(j.parts);
    return j.failed ? subq_fail(err, SUBQ_ERR_NOMEM, "attention scratch allocation failed") : SUBQ_OK;
}

/* First slot of the document of each query of the batch (segments are
 * contiguous runs of slots). */
static void doc_starts(const kv_cache *kv, int slot0, int n, int32_t *first) {
    int d = kv_cache_doc_start(kv, slot0);
    for (int t = 0; t < n; t++) {
        int slot = slot0 + t;
        if (t > 0 && kv->seg[slot] != kv->seg[slot - 1]) d = slot;
        first[t] = d;
    }
}

/* One block of queries: tokens [t0, t1) of one KV head, rows r = (t - t0) g
 * + i for its g query heads, keys from the block's earliest document start
 * to slot0 + t1 (K, V: f32 rows from k_lo <= that start). S = scale Q K^T
 * by sgemm, each row masked to its own slots, the extra slots scored beside
 * it (E), one softmax over both, O = S V + E V_extra, scaled by 1 / sum at
 * the end. */
/* A thread's scratch, one allocation at q. */
typedef struct batch_scratch {
    float *q, *s, *o, *e, *inv;
} batch_scratch;

/* Token t's extra slots for query head i of KV head kh (of H): list t (eh
 * 1: one list a token, for every head), t * eh + kh (eh H: one a KV head,
 * for its g heads) or t * eh + kh g + i (eh n_head: one a head). */
static int extra_list(int t, int eh, int H, int kh, int g, int i) {
    return eh == 1 ? t : eh == H ? t * eh + kh : t * eh + kh * g + i;
}
/* Query heads a list serves: one (a list a query head) or the KV head's g. */
static int list_heads(int eh, int H, int g) { return eh > H ? 1 : g; }

static void attn_block(const attn_step *st, const kv_cache *kv, int kh, int t0, int t1, int k_lo, const float *K,
                       const float *V, const int32_t *first, const int *xs, const int *nxs, const int32_t *shift,
                       int n_extra, int eh, batch_scratch *w) {
    const kernels_kv_decode ops = kernels_kv_decode_get(kv->type);
    const int g = st->n_head / st->n_head_kv, hd = st->head_dim, rows = (t1 - t0) * g;
    /* the block's own keys start at its earliest document: in a batch of
     * packed documents the earlier ones are masked for it, not scored */
    int k_blk = first[t0];
    for (int t = t0 + 1; t < t1; t++) k_blk = first[t] < k_blk ? first[t] : k_blk;
    K += (size_t)(k_blk - k_lo) * hd;
    V += (size_t)(k_blk - k_lo) * hd;
    k_lo = k_blk;
    const int n_keys = st->slot0 + t1 - k_lo;
    for (int t = t0; t < t1; t++) {
        float *q = w->q + (size_t)(t - t0) * g * hd;
        memcpy(q, st->q + (size_t)t * st->n_head * hd + (size_t)kh * g * hd, (size_t)g * hd * sizeof(float));
        if (!n_extra) continue;
        /* E = scale q_i . k_j over the token's extra slots, as a decode step
         * scores its rows. One KV head at a time: every head's rows at once
         * measured slower (16K: 37%; 32K, in pieces of 32 slots: attention
         * 116.9 s against 80.7 s), though consecutive tokens share only
         * 10-20% of their 2048 slots (bench/notes/2026-11-28-prefill-serial.md) */
        /* one list for the g heads (a token's or the KV head's), or each head its own (g passes of one head) */
        const int gl = list_heads(eh, st->n_head_kv, g);
        for (int i = 0; i < g; i += gl) {
            const size_t L = (size_t)extra_list(t, eh, st->n_head_kv, kh, g, i);
            float *e = w->e + ((size_t)(t - t0) * g + i) * n_extra;
            gather_start(kv, st->layer, kh, 0, xs + L * n_extra, nxs[L]);
            slots_pass(kv, &ops, st->layer, kh, 0, gl, q + (size_t)i * hd, st->scale, xs + L * n_extra, nxs[L], e,
                       n_extra, NULL);
            if (shift) /* far extra slots at the distance st->far gives them */
                attn_far_rescore(st->rope, kv, st->layer, kh, gl, q + (size_t)i * hd, st->scale, xs + L * n_extra,
                                 shift + L * n_extra, nxs[L], e, n_extra);
        }
    }
    blas_sgemm(1, 0, 1, rows, n_keys, hd, st->scale, w->q, hd, K, hd, 0.0f, w->s, n_keys);
    for (int r = 0; r < rows; r++) {
        const int t = t0 + r / g, a = first[t] - k_lo, b = st->slot0 + t - k_lo; /* valid: [a, b] */
        const int nx = n_extra ? nxs[extra_list(t, eh, st->n_head_kv, kh, g, r % g)] : 0;
        float *row = w->s + (size_t)r * n_keys, *e = w->e + (size_t)r * n_extra;
        softcap(e, nx, st->softcap);
        softcap(row + a, b - a + 1, st->softcap);
        const float mx = kernels_get()->max_f32(row + a, b - a + 1, max_of(e, nx));
        memset(row, 0, (size_t)a * sizeof(float));
        memset(row + b + 1, 0, (size_t)(n_keys - b - 1) * sizeof(float));
        float sum = kernels_get()->exp_shift_sum(row + a, b - a + 1, mx);
        if (nx) sum += kernels_get()->exp_shift_sum(e, nx, mx);
        w->inv[r] = 1.0f / sum; /* sum >= 1: the query sees itself */
    }
    blas_sgemm(1, 0, 0, rows, hd, n_keys, 1.0f, w->s, n_keys, V, hd, 0.0f, w->o, hd);
    for (int t = t0; n_extra && t < t1; t++) { /* O += E V_extra */
        const int gl = list_heads(eh, st->n_head_kv, g);
        for (int i = 0; i < g; i += gl) {
            const size_t L = (size_t)extra_list(t, eh, st->n_head_kv, kh, g, i);
            gather_start(kv, st->layer, kh, 1, xs + L * n_extra, nxs[L]);
            slots_pass(kv, &ops, st->layer, kh, 1, gl, NULL, 0.0f, xs + L * n_extra, nxs[L],
                       w->e + ((size_t)(t - t0) * g + i) * n_extra, n_extra, w->o + ((size_t)(t - t0) * g + i) * hd);
        }
    }
    for (int r = 0; r < rows; r++) {
        const int t = t0 + r / g;
        const float *o = w->o + (size_t)r * hd;
        float *out = st->out + (size_t)t * st->n_head * hd + (size_t)(kh * g + r % g) * hd;
        for (int c = 0; c < hd; c++) out[c] = o[c] * w->inv[r];
    }
}

/* One KV head's query blocks as pool chunks, each thread with its own scratch. */
typedef struct batch_job {
    const attn_step *st;
    const kv_cache *kv;
    int kh, tb, T, k_lo, n_extra, eh;
    const float *K, *V;
    const int32_t *first;
    const int *xs, *nx;       /* [T][eh][n_extra] extra slots (fillers left out, in slot order), [T][eh] their counts */
    const int32_t *shift;     /* [T][eh][n_extra] their turns (attn_far.h), or NULL: none far */
    batch_scratch *w;         /* [threads] */
} batch_job;

static void batch_block(void *ctx, int b, int thread) {
    const batch_job *j = ctx;
    const int t0 = b * j->tb, t1 = t0 + j->tb < j->T ? t0 + j->tb : j->T;
    attn_block(j->st, j->kv, j->kh, t0, t1, j->k_lo, j->K, j->V, j->first, j->xs, j->nx, j->shift, j->n_extra, j->eh,
               &j->w[thread]);
}

/* Each token's extra slots with the fillers (-1) left out, in slot order:
 * a retrieved set lies in runs of nearby slots (the blocks the prompt's
 * selection chose), which in order share pages and cache lines; with a far
 * scheme, their turns (attn_far.h). */
typedef struct extra_slots {
    const int32_t *extra;
    const kv_cache *kv;
    const attn_far *far;        /* NULL: keys at their own distance */
    const int32_t *first;       /* [T] each token's range start: its local window is first[t] .. its slot */
    int n_extra, slot0, eh;     /* eh: lists a token (1, one per KV head or one per query head) */
    int *xs, *nx, *tmp;         /* [T eh][n_extra], [T eh], [T eh][n_extra] */
    int32_t *shift, *dist;      /* [T eh][n_extra] each (far only) */
    int64_t *order;             /* [T eh][n_extra] (far only) */
    _Atomic int n_far;          /* tokens with a far slot */
} extra_slots;

/* x[0..n) (values >= 0) in ascending order: insertion sort for a usual
 * set (sinks + K: a pass of the radix sort below clears and sums 2048
 * buckets, 8% of a per-head prefill's time at 8K on the fixture, one list
 * a query head), else LSD radix sort, 11 bits a pass, through tmp */
static void sort_slots(int *x, int n, int *tmp) {
    enum { BITS = 11, BUCKETS = 1 << BITS, SMALL = 128 };
    if (n <= SMALL) {
        for (int i = 1; i < n; i++) {
            const int v = x[i];
            int j = i;
            for (; j > 0 && x[j - 1] > v; j--) x[j] = x[j - 1];
            x[j] = v;
        }
        return;
    }
    int mx = 0;
    for (int i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    for (int shift = 0; shift < 31 && (mx >> shift) > 0; shift += BITS) {
        int count[BUCKETS + 1] = {0};
        for (int i = 0; i < n; i++) count[((x[i] >> shift) & (BUCKETS - 1)) + 1]++;
        for (int b = 0; b < BUCKETS; b++) count[b + 1] += count[b];
        for (int i = 0; i < n; i++) tmp[count[(x[i] >> shift) & (BUCKETS - 1)]++] = x[i];
        memcpy(x, tmp, (size_t)n * sizeof(int));
    }
}

/* list L of token L / eh */
static void extra_slots_token(void *ctx, int L, int thread) {
    extra_slots *j = ctx;
    const int t = L / j->eh;
    const int32_t *ex = j->extra + (size_t)L * j->n_extra;
    int *xs = j->xs + (size_t)L * j->n_extra, n = 0;
    for (int x = 0; x < j->n_extra; x++)
        if (ex[x] >= 0) xs[n++] = ex[x];
    sort_slots(xs, n, j->tmp + (size_t)L * j->n_extra);
    j->nx[L] = n;
    if (!j->far) return;
    const size_t o = (size_t)L * j->n_extra;
    attn_far_distances(j->kv, j->slot0 + t, xs, n, j->dist + o);
    if (attn_far_shifts(j->far, j->dist + o, n, j->slot0 + t - j->first[t] + 1, j->shift + o, j->order + o)) j->n_far++;
}

subq_status attn_batch(const attn_step *st, const kv_cache *kv, const int32_t *lo, const int32_t *extra, int n_extra,
                       int extra_heads, subq_error *err) {
    const int g = st->n_head / st->n_head_kv, hd = st->head_dim, T = st->n_tokens, nt = pool_threads(st->pool);
    const int eh = extra_heads == st->n_head_kv || extra_heads == st->n_head ? extra_heads : 1, TL = T * eh;
    int32_t *first = malloc((size_t)T * sizeof(int32_t));
    if (!first) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory for prefill attention");
    if (lo) memcpy(first, lo, (size_t)T * sizeof(int32_t));
    else doc_starts(kv, st->slot0, T, first);
    for (int t = 0; !lo && st->window > 0 && t < T; t++) /* a sliding layer's window */
        if (first[t] < st->slot0 + t + 1 - st->window) first[t] = st->slot0 + t + 1 - st->window;
    int k_lo = st->slot0;
    for (int t = 0; t < T; t++) k_lo = first[t] < k_lo ? first[t] : k_lo;
    const int n_keys = st->slot0 + T - k_lo;
    /* query blocks: enough of them for BATCH_THREADS threads, score blocks
     * bounded. Not the pool's thread count: a block's keys are the sums of
     * its sgemm, whose rounding follows them, so results stay bit-identical
     * whatever -t is (README: reproducibility) */
    int tb = QUERY_BLOCK, per_thread = (T + BATCH_THREADS - 1) / BATCH_THREADS;
    if (tb > per_thread) tb = per_thread;
    while (tb > 1 && (int64_t)g * tb * n_keys > SCORE_BLOCK_FLOATS) tb /= 2;
    const int n_blocks = (T + tb - 1) / tb, need_conv = kv_cache_rows_f32_copied(kv, st->layer);
    float *Kf = need_conv ? malloc((size_t)n_keys * hd * sizeof(float)) : NULL;
    float *Vf = need_conv ? malloc((size_t)n_keys * hd * sizeof(float)) : NULL;
    batch_scratch *w = calloc((size_t)nt, sizeof *w);
    int failed = (need_conv && (!Kf || !Vf)) || !w;
    const size_t rows = (size_t)g * tb;
    for (int i = 0; !failed && i < nt; i++) {
        /* q, o [rows][hd], s [rows][n_keys], inv [rows], e [rows * n_extra + 1] */
        float *q = malloc((rows * (2 * hd + n_keys + 1 + n_extra) + 1) * sizeof(float));
        failed = !q;
        if (q) w[i] = (batch_scratch){.q = q, .o = q + rows * hd, .s = q + 2 * rows * hd,
                                      .inv = q + rows * (2 * hd + n_keys), .e = q + rows * (2 * hd + n_keys + 1)};
    }
    const int far = st->far.scheme != SUBQ_FAR_NONE && st->rope && st->rope->n_rot > 0;
    extra_slots xj = {.extra = extra, .kv = kv, .far = far ? &st->far : NULL, .first = first, .n_extra = n_extra,
                      .slot0 = st->slot0, .eh = eh};
    if (!failed && n_extra > 0) {
        xj.xs = malloc((size_t)TL * (2 * n_extra + 1) * sizeof(int));
        if (far) {
            xj.shift = malloc((size_t)TL * n_extra * 2 * sizeof(int32_t));
            xj.order = malloc((size_t)TL * n_extra * sizeof(int64_t));
            xj.dist = xj.shift ? xj.shift + (size_t)TL * n_extra : NULL;
        }
        if (!(failed = !xj.xs || (far && (!xj.shift || !xj.order)))) {
            xj.nx = xj.xs + (size_t)TL * n_extra;
            xj.tmp = xj.nx + TL;
            pool_run(st->pool, TL, extra_slots_token, &xj);
        }
    }
    for (int kh = 0; kh < st->n_head_kv && !failed; kh++) {
        batch_job j = {.st = st, .kv = kv, .kh = kh, .tb = tb, .T = T, .k_lo = k_lo, .n_extra = n_extra, .eh = eh,
                       .first = first, .xs = xj.xs, .nx = xj.nx, .shift = xj.n_far ? xj.shift : NULL, .w = w};
        j.K = kv_cache_rows_f32(kv, st->layer, kh, 0, k_lo, n_keys, Kf);
        j.V = kv_cache_rows_f32(kv, st->layer, kh, 1, k_lo, n_keys, Vf);
        pool_run(st->pool, n_blocks, batch_block, &j);
    }
    for (int i = 0; w && i < nt; i++) free(w[i].q);
    free(w);
    free(xj.xs);
    free(xj.shift);
    free(xj.order);
    free(first);
    free(Kf);
    free(Vf);
    return failed ? subq_fail(err, SUBQ_ERR_NOMEM, "out of memory for prefill attention (%d x %d scores)", g * tb, n_keys)
                  : SUBQ_OK;
}

static subq_status full_forward(attn_stage *self, const attn_step *st, const kv_cache *kv, subq_error *err) {
    (void)self;
    if (st->n_tokens >= GEMM_MIN_TOKENS) return attn_batch(st, kv, NULL, NULL, 0, 1, err);
    return full_forward_rows(st, kv, err);
}

static attn_stage full_stage = {"full", full_forward, NULL, NULL, NULL, NULL}; /* keeps nothing per slot */

attn_stage *attn_full_stage(void) { return &full_stage; }
