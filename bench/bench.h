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

#endif
