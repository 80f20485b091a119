/* Benchmark drivers behind `subq bench`: machine limits (memory read
 * bandwidth, sgemm rate) and model speed (prefill, decode at a context). */
#ifndef SUBQ_BENCH_H
#define SUBQ_BENCH_H

#include <stddef.h>

#include "subq.h"

/* Read bandwidth in GB/s: n_threads threads summing a buffer of `bytes`
 * (>> last-level cache), best of `reps` passes. */
double bench_read_bandwidth(size_t bytes, int n_threads, int reps);

/* OpenBLAS sgemm rate in GFLOP/s for C[m][n] = A[m][k] B[n][k]^T (the
 * prefill shape), best of `reps`. */
double bench_sgemm_gflops(int m, int n, int k, int n_threads, int reps);

/* Fill the context's KV cache with n_past synthetic tokens (random keys and
 * values, positions 0..n_past-1): decode speed does not depend on the values,
 * and a real prefill of long contexts takes far longer than the measurement. */
subq_status bench_fill_kv(subq_context *c, int n_past, unsigned long long seed, subq_error *err);

/* Append n_past synthetic search keys (Gaussian, width d_search of each
 * stage) to the selector of every sparse stage of c, as a real prefill
 * would have; call after bench_fill_kv. */
subq_status bench_fill_selectors(subq_context *c, int n_past, unsigned long long seed, subq_error *err);

#endif
