/* The decode thread pool (src/base/pool.c): every chunk of every call runs
 * exactly once, whatever the thread count and chunk count, over many calls
 * in a row (workers that spin, sleep and wake late must never run a chunk
 * twice, run one of a finished call, or let a call return early); the
 * thread index a chunk gets is in range and never held by two chunks at
 * once (per-thread scratch is safe); chunk counts from pool_chunks. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/pool.h"
#include "test_util.h"

typedef struct call {
    _Atomic int *hits;
    int call_id;
    _Atomic int *last_call;   /* per chunk: the call that last ran it */
    int slow;                 /* sleep a little in chunk 0 (a thread held up mid-call) */
    int n_threads;
    _Atomic int *busy;        /* per thread index: a chunk is running on it */
    _Atomic int *bad_thread;
} call;

static void count(void *ctx, int i, int thread) {
    call *c = ctx;
    if (c->busy && (thread < 0 || thread >= c->n_threads || atomic_exchange(&c->busy[thread], 1)))
        atomic_store(c->bad_thread, 1);
    if (c->slow && i == 0) usleep(2000);
    atomic_fetch_add(&c->hits[i], 1);
    atomic_store(&c->last_call[i], c->call_id);
    if (c->busy && thread >= 0 && thread < c->n_threads) atomic_store(&c->busy[thread], 0);
}

static void run_many(int n_threads) {
    enum { MAX_CHUNKS = 300, CALLS = 3000 };
    pool *p = NULL;
    subq_error err;
    CHECK(pool_new(n_threads, &p, &err) == SUBQ_OK, "pool_new(%d): %s", n_threads, err.msg);
    if (!p) return;
    CHECK(pool_threads(p) == n_threads, "pool_threads %d", pool_threads(p));
    _Atomic int *hits = calloc(MAX_CHUNKS, sizeof *hits), *last = calloc(MAX_CHUNKS, sizeof *last);
    _Atomic int *busy = calloc((size_t)n_threads, sizeof *busy), bad_thread = 0;
    int bad = 0;
    for (int k = 0; k < CALLS && !bad; k++) {
        const int n = 1 + (k * 37) % MAX_CHUNKS;
        for (int i = 0; i < n; i++) atomic_store(&hits[i], 0);
        call c = {.hits = hits, .call_id = k + 1, .last_call = last, .slow = k % 500 == 7, .n_threads = n_threads,
                  .busy = busy, .bad_thread = &bad_thread};
        if (k % 100 == 50) usleep(3000); /* idle long enough for the workers to sleep */
        pool_run(p, n, count, &c);
        for (int i = 0; i < n && !bad; i++)
            if (atomic_load(&hits[i]) != 1 || atomic_load(&last[i]) != k + 1) {
                bad = 1;
                CHECK(0, "%d threads, call %d: chunk %d of %d ran %d times", n_threads, k, i, n, atomic_load(&hits[i]));
            }
    }
    CHECK(!bad, "%d threads: %d calls, every chunk exactly once", n_threads, CALLS);
    CHECK(!atomic_load(&bad_thread), "%d threads: thread indices in range and never shared by running chunks",
          n_threads);
    /* nothing runs after a call returned: the hit counts stay */
    usleep(5000);
    int late = 0;
    for (int i = 0; i < MAX_CHUNKS; i++) late += atomic_load(&hits[i]) > 1;
    CHECK(late == 0, "%d threads: %d chunks ran after their call returned", n_threads, late);
    pool_free(p);
    free(hits);
    free(last);
    free(busy);
}

int main(void) {
    for (int nt = 1; nt <= 5; nt++) run_many(nt);
    run_many(16); /* more threads than cores: most are descheduled at any time */
    _Atomic int hits[3] = {0}, last[3] = {0};
    pool_run(NULL, 3, count, &(call){.hits = hits, .call_id = 9, .last_call = last});
    CHECK(hits[0] == 1 && hits[1] == 1 && hits[2] == 1, "no pool: every chunk on the caller");
    pool *p = NULL;
    subq_error err;
    CHECK(pool_new(0, &p, &err) == SUBQ_ERR_ARG && !p, "a pool of no threads is refused");
    CHECK(pool_new(4, &p, &err) == SUBQ_OK, "pool_new(4)");
    CHECK(pool_chunks(p, 1000000, 1000) == 16 && pool_chunks(p, 5000, 1000) == 5 && pool_chunks(p, 10, 1000) == 1 &&
              pool_chunks(NULL, 1 << 20, 0) == 4,
          "pool_chunks: %d %d %d %d", pool_chunks(p, 1000000, 1000), pool_chunks(p, 5000, 1000),
          pool_chunks(p, 10, 1000), pool_chunks(NULL, 1 << 20, 0));
    pool_free(p);
    return test_summary();
}
