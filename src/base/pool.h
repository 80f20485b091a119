/* A thread pool for the decode path, built for shared cores. A call hands
 * out numbered chunks of work that the calling thread and the pool's workers
 * claim one at a time; it returns when every chunk is done, whichever
 * threads did them. A worker the OS has not scheduled (another process has
 * its core) therefore never holds a call up: the others take its share, and
 * when it wakes it finds nothing left. Idle workers spin briefly for the
 * next call (decode issues hundreds a token), then sleep on a futex, so a
 * competing process gets the cores back. OpenMP's fork-join regions need
 * every thread of the team to arrive at their closing barrier: one thread
 * descheduled for a time slice stalls the whole region, which made decode
 * under a competing load many times slower than one thread. */
#ifndef SUBQ_BASE_POOL_H
#define SUBQ_BASE_POOL_H

#include "subq.h"

typedef struct pool pool;

/* n_threads threads in all: the caller of pool_run and n_threads - 1 workers. */
subq_status pool_new(int n_threads, pool **out, subq_error *err);
void pool_free(pool *p);
int pool_threads(const pool *p);

/* fn(ctx, i, thread) once for every chunk i in [0, n_chunks), each on one
 * of the threads; `thread` in [0, pool_threads) names the thread running it
 * (0: the caller), for per-thread scratch. Returns once all have returned.
 * p NULL, one thread or more than 2^20 - 1 chunks (pool_chunks never asks
 * for more): every chunk on the calling thread, in order. Not reentrant:
 * one call at a time per pool (a context and its pool serve one thread). */
typedef void (*pool_fn)(void *ctx, int chunk, int thread);
void pool_run(pool *p, int n_chunks, pool_fn fn, void *ctx);

/* Chunks for `work` units split across the pool: enough that threads can
 * even out (several per thread), none smaller than min_work units. */
int pool_chunks(const pool *p, int64_t work, int64_t min_work);

#endif
