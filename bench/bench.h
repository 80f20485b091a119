/* Benchmark drivers behind `subq bench`: machine limits (memory read
 * bandwidth, sgemm rate) and model speed (prefill, decode at a context). */
#ifndef SUBQ_BENCH_H
#define SUBQ_BENCH_H

#include <stddef.h>
#include <stdint.h>

#include "subq.h"

/* The sum of the n 64-bit words at p (32-byte aligned), by the loop the
 * bandwidth probe times: load-bound, so its rate is the read bandwidth. */
uint64_t bench_sum_words(const uint64_t *p, size_t n);

/* Read bandwidth in GB/s: n_threads threads summing a buffer of `bytes`
 * (>> last-level cache), best of `reps` passes. */
double bench_read_bandwidth(size_t bytes, int n_threads, int reps);

/* OpenBLAS sgemm rate in GFLOP/s for C[m][n] = A[m][k] B[n][k]^T (the
 * prefill shape), best of `reps`. */
double bench_sgemm_gflops(int m, int n, int k, int n_threads, int reps);

/* A competing load: n threads that spin on the CPU (each as busy as an
 * unrelated process on that core) until bench_contend_stop. NULL when a
 * thread cannot start. */
typedef struct bench_contend bench_contend;
bench_contend *bench_contend_start(int n);
void bench_contend_stop(bench_contend *c);

#endif
