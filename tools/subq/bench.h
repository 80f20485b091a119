/* Benchmark drivers behind `subq bench`: machine limits (memory read
 * bandwidth, sgemm rate) and model speed (prefill, decode at a context). */
#ifndef SUBQ_BENCH_H
#define SUBQ_BENCH_H

#include <stddef.h>
#include <stdint.h>

#include "subq_lab.h"

/* Monotonic wall-clock seconds. */
double bench_now_s(void);

/* The sum of the n 64-bit words at p (32-byte aligned), by the loop the
 * bandwidth probe times: load-bound, so its rate is the read bandwidth. */
uint64_t bench_sum_words(const uint64_t *p, size_t n);

/* Read bandwidth in GB/s: n_threads threads summing a buffer of `bytes`
 * (>> last-level cache), best of `reps` passes. */
double bench_read_bandwidth(size_t bytes, int n_threads, int reps);

/* OpenBLAS sgemm rate in GFLOP/s for C[m][n] = A[m][k] B[n][k]^T (the
 * prefill shape), best of `reps` runs and of at least a quarter second. */
double bench_sgemm_gflops(int m, int n, int k, int n_threads, int reps);

/* Peak integer (int8 product) rate in G op/s (2 per product) of the
 * kernel level `isa` (subq_isa_name: "avx512-vnni", "avx2"; 0 for
 * others): n_threads threads running the GEMM's instruction sequence on
 * registers, best of `reps`. */
double bench_int8_peak_gops(const char *isa, int n_threads, int reps);

/* A competing load: n threads that spin on the CPU (each as busy as an
 * unrelated process on that core) until bench_contend_stop. NULL when a
 * thread cannot start. */
typedef struct bench_contend bench_contend;
bench_contend *bench_contend_start(int n);
void bench_contend_stop(bench_contend *c);

/* ---- model speed (bench_model.c) ------------------------------------------ */

/* Token ids for timing: speed does not depend on them (xorshift64*; the
 * state must not be 0). */
int32_t bench_random_token(uint64_t *state, int n_vocab);

/* Where a timed run's time went, from the context's counters: attention
 * (softmax, Q K^T, P V), index queries, index inserts. */
typedef struct bench_split {
    double seconds, attn_s, select_s, insert_s;
} bench_split;

/* Prefill: n tokens decoded into c (empty, under its plan), timed. */
subq_status bench_prefill(subq_context *c, const int32_t *toks, int n, float *logits, bench_split *out,
                          subq_error *err);
/* The floating-point work of a dense prefill of T tokens: every token
 * through the layer matrices, the last through the output matrix, and
 * causal attention 2 * 2 * (T^2/2) * n_head * head_dim per layer. */
double bench_prefill_flops(const subq_model_info *info, int T);

/* Decode: one untimed step (warm caches and threads), then n_steps timed
 * steps of random tokens (cold: with a KV file, its pages dropped from
 * memory before them). tok_s and the split per step; st0/st1 the context's
 * counters around the timed steps. */
subq_status bench_decode_steps(subq_context *c, int n_steps, int cold, uint64_t *rng, float *logits, double *tok_s,
                               bench_split *per_step, subq_context_stats *st0, subq_context_stats *st1,
                               subq_error *err);

/* One decode row at a synthetic context: c (under its plan) filled with
 * ctx tokens of synthetic KV, then bench_decode_steps; what a step reads
 * (KV rows attended, selector reads) and the filled cache's own read rate,
 * the better of before and after the steps (GB/s, NAN when too small to
 * time). */
typedef struct bench_decode_row {
    double tok_s, attn_ms, select_ms, insert_ms, fill_s;
    double sync_s;                  /* with a KV file: the commit after the fill (its writes reaching disk) */
    double kv_fill_s;               /* the part of fill_s that wrote keys and values (not the selectors) */
    double rss_anon;                /* the process's anonymous resident bytes after the steps */
    double cache_bw;
    double kv_bytes, index_bytes;   /* the cache and the indexes, bytes */
    double kv_read, select_read;    /* bytes read per step */
} bench_decode_row;
subq_status bench_decode_at(subq_context *c, int ctx, int n_steps, int cold, uint64_t seed, uint64_t *rng,
                            float *logits, bench_decode_row *out, subq_error *err);
/* The process's anonymous resident memory (RssAnon), bytes; 0 if unknown. */
double bench_rss_anon(void);

#endif
