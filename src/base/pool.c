#include "base/pool.h"

#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
static inline void cpu_relax(void) { _mm_pause(); }
#else
static inline void cpu_relax(void) {}
#endif

/* Pauses an idle thread spins for the next call before it sleeps: tens of
 * microseconds, longer than the gaps between a decode step's calls and
 * short next to a time slice, so a competing process loses little. */
#define SPIN_PAUSES 4096

/* The claim word of a call: generation (24 bits) | chunks (20) | next (20). */
#define CLAIM_BITS 20
#define CLAIM_MASK ((1u << CLAIM_BITS) - 1)
#define GEN_MASK 0xffffffu

/* A worker's pool and its thread number. */
struct worker_arg {
    struct pool *p;
    int thread;
};

struct pool {
    int n_threads;
    pthread_t *workers;
    struct worker_arg *args;
    int n_started;
    _Atomic uint64_t claim;
    _Atomic uint32_t gen;            /* futex word of idle workers: one more per call */
    _Atomic uint32_t done;           /* chunks of this call finished: futex word of the caller */
    _Atomic uint32_t caller_waiting; /* the caller sleeps on done */
    _Atomic uint32_t sleepers;       /* workers asleep on gen */
    _Atomic int stop;
    /* the call: written before its claim word is published, read by a
     * thread only once it holds one of the call's chunks */
    pool_fn fn;
    void *ctx;
};

static void futex_wait(_Atomic uint32_t *word, uint32_t expected) {
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *word, int n) {
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

static uint64_t claim_word(uint32_t gen, uint32_t n, uint32_t next) {
    return (uint64_t)(gen & GEN_MASK) << (2 * CLAIM_BITS) | (uint64_t)n << CLAIM_BITS | next;
}

/* Claim and run chunks of call `gen` until none is left. Holding chunk i of
 * the call keeps the call open (done < n), so fn and ctx stay its own. */
static void run_chunks(pool *p, uint32_t gen, int thread) {
    uint64_t c = atomic_load(&p->claim);
    for (;;) {
        const uint32_t n = (uint32_t)(c >> CLAIM_BITS) & CLAIM_MASK, next = (uint32_t)c & CLAIM_MASK;
        if ((uint32_t)(c >> (2 * CLAIM_BITS)) != (gen & GEN_MASK) || next >= n) return;
        if (!atomic_compare_exchange_weak(&p->claim, &c, c + 1)) continue; /* c reloaded */
        p->fn(p->ctx, (int)next, thread);
        if (atomic_fetch_add(&p->done, 1) + 1 == n && atomic_load(&p->caller_waiting)) futex_wake(&p->done, 1);
        c = atomic_load(&p->claim);
    }
}

static void *worker_main(void *arg) {
    pool *p = ((struct worker_arg *)arg)->p;
    const int thread = ((struct worker_arg *)arg)->thread;
    uint32_t seen = 0;
    for (;;) {
        uint32_t g;
        for (int spins = 0; (g = atomic_load(&p->gen)) == seen;) {
            if (++spins < SPIN_PAUSES) {
                cpu_relax();
                continue;
            }
            /* registered before the check inside futex_wait: a caller that
             * publishes after this either sees us or changes gen first */
            atomic_fetch_add(&p->sleepers, 1);
            futex_wait(&p->gen, seen);
            atomic_fetch_sub(&p->sleepers, 1);
            spins = 0;
        }
        seen = g;
        if (atomic_load(&p->stop)) return NULL;
        run_chunks(p, g, thread);
    }
}

subq_status pool_new(int n_threads, pool **out, subq_error *err) {
    *out = NULL;
    if (n_threads < 1) return subq_fail(err, SUBQ_ERR_ARG, "a pool needs at least one thread, got %d", n_threads);
    pool *p = calloc(1, sizeof *p);
    if (!p) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    p->n_threads = n_threads;
    if (n_threads > 1 && (!(p->workers = calloc((size_t)n_threads - 1, sizeof(pthread_t))) ||
                          !(p->args = calloc((size_t)n_threads - 1, sizeof *p->args)))) {
        free(p->workers);
        free(p);
        return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < n_threads - 1; i++) {
        p->args[i] = (struct worker_arg){.p = p, .thread = i + 1};
        if (pthread_create(&p->workers[i], NULL, worker_main, &p->args[i]) != 0) {
            pool_free(p);
            return subq_fail(err, SUBQ_ERR_NOMEM, "cannot start thread %d of %d", i + 2, n_threads);
        }
        p->n_started++;
    }
    *out = p;
    return SUBQ_OK;
}

void pool_free(pool *p) {
    if (!p) return;
    atomic_store(&p->stop, 1);
    atomic_fetch_add(&p->gen, 1);
    futex_wake(&p->gen, INT_MAX);
    for (int i = 0; i < p->n_started; i++) pthread_join(p->workers[i], NULL);
    free(p->workers);
    free(p->args);
    free(p);
}

int pool_threads(const pool *p) { return p ? p->n_threads : 1; }

void pool_run(pool *p, int n_chunks, pool_fn fn, void *ctx) {
    if (!p || p->n_threads <= 1 || n_chunks <= 1 || (uint32_t)n_chunks > CLAIM_MASK) {
        for (int i = 0; i < n_chunks; i++) fn(ctx, i, 0);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    atomic_store(&p->done, 0);
    const uint32_t g = atomic_load(&p->gen) + 1;
    atomic_store(&p->claim, claim_word(g, (uint32_t)n_chunks, 0));
    atomic_store(&p->gen, g);
    if (atomic_load(&p->sleepers)) futex_wake(&p->gen, INT_MAX);
    run_chunks(p, g, 0);
    /* chunks other threads hold: spin briefly, then sleep until the last is done */
    for (int spins = 0; atomic_load(&p->done) < (uint32_t)n_chunks;) {
        if (++spins < SPIN_PAUSES) {
            cpu_relax();
            continue;
        }
        atomic_store(&p->caller_waiting, 1);
        const uint32_t d = atomic_load(&p->done);
        if (d < (uint32_t)n_chunks) futex_wait(&p->done, d);
        atomic_store(&p->caller_waiting, 0);
    }
}

int pool_chunks(const pool *p, int64_t work, int64_t min_work) {
    enum { PER_THREAD = 4 };
    int64_t n = (int64_t)pool_threads(p) * PER_THREAD;
    if (min_work > 0 && work / n < min_work) n = work / min_work;
    if (n > (int64_t)CLAIM_MASK) n = CLAIM_MASK;
    return n < 1 ? 1 : (int)n;
}
