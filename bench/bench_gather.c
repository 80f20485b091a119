/* A decode step's sparse attention alone, by KV layout.
 *
 * L layers of a KV cache of CTX slots (H KV heads of HD values, G query
 * heads each, f16, random rows), each laid out head-major or slot-major
 * (kv_cache_set_layout). A step reads W MiB of other data (a decode step's
 * weights, which evict the caches and the address translations between two
 * layers' attention), then for every layer attends one token to S random
 * slots as attend_token does (attn_group_over_slots, a pool item a KV
 * head). The layouts alternate step by step; the median microseconds a
 * layer of each are printed.
 *
 *   cmake --build build --target bench_gather
 *   ./build/bench_gather [-t 2] [--ctx 32768] [-L 24] [-s 148] [-w 16] [-n 40]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/attn.h"
#include "base/pool.h"
#include "base/rng.h"
#include "base/timer.h"

enum { H = 8, G = 2, HD = 128, VARIANTS = 2 };
static const char *const names[VARIANTS] = {"head-major", "slot-major"};

/* attend_token's per-head items: KV head kh over the slots */
typedef struct head_job {
    const kv_cache *kv;
    int layer, n;
    const int *slots;
    const float *q;
    float *scores, *out;
} head_job;

static void head_item(void *ctx, int kh, int thread) {
    (void)thread;
    const head_job *j = ctx;
    attn_group_over_slots(j->kv, j->layer, kh, G, j->q + (size_t)kh * G * HD, 0.088f, 0.0f, j->slots, j->n, NULL, NULL,
                          j->scores + (size_t)kh * G * j->n, j->out + (size_t)kh * G * HD);
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int n_threads = 2, ctx = 32768, L = 24, S = 148, w_mib = 16, steps = 40;
    for (int i = 1; i + 1 < argc; i += 2) {
        const int v = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "-t")) n_threads = v;
        else if (!strcmp(argv[i], "--ctx")) ctx = v;
        else if (!strcmp(argv[i], "-L")) L = v;
        else if (!strcmp(argv[i], "-s")) S = v;
        else if (!strcmp(argv[i], "-w")) w_mib = v;
        else if (!strcmp(argv[i], "-n")) steps = v;
        else return fprintf(stderr, "unknown option %s\n", argv[i]), 1;
    }
    if (S < 1 || S > ctx || L < 1 || steps < 1) return fprintf(stderr, "bad sizes\n"), 1;
    subq_error err = {0};
    pool *p = NULL;
    kv_cache kv[2]; /* head-major, slot-major */
    if (pool_new(n_threads, &p, &err)) return fprintf(stderr, "%s\n", err.msg), 1;
    float *k = malloc((size_t)ctx * H * HD * sizeof(float)), *v = malloc((size_t)ctx * H * HD * sizeof(float));
    unsigned char *head_major = malloc((size_t)L);
    const size_t w_bytes = (size_t)w_mib << 20;
    unsigned char *weights = malloc(w_bytes ? w_bytes : 1);
    if (!k || !v || !head_major || !weights) return fprintf(stderr, "out of memory\n"), 1;
    uint64_t rng = rng_seed(11);
    for (size_t i = 0; i < (size_t)ctx * H * HD; i++) k[i] = rng_uniform(&rng) - 0.5f, v[i] = rng_uniform(&rng) - 0.5f;
    memset(weights, 1, w_bytes);
    for (int c = 0; c < 2; c++) {
        if (kv_cache_init(&kv[c], L, H, HD, ctx, SUBQ_KV_F16, &err)) return fprintf(stderr, "%s\n", err.msg), 1;
        memset(head_major, c == 0, (size_t)L);
        kv_cache_set_layout(&kv[c], head_major);
        for (int l = 0; l < L; l++) kv_cache_store(&kv[c], l, 0, ctx, k, v, NULL);
        for (int t = 0; t < ctx; t++) kv[c].pos[t] = t, kv[c].seg[t] = 0;
        kv[c].n_used = ctx;
    }
    int *slots = malloc((size_t)L * S * sizeof(int));
    float *q = malloc((size_t)H * G * HD * sizeof(float)), *out = malloc((size_t)H * G * HD * sizeof(float));
    float *scratch = malloc((size_t)H * G * S * sizeof(float));
    double *us = malloc((size_t)VARIANTS * steps * sizeof(double));
    if (!slots || !q || !out || !scratch || !us) return fprintf(stderr, "out of memory\n"), 1;
    for (int i = 0; i < H * G * HD; i++) q[i] = (float)rng_normal(&rng);
    uint64_t sink = 0;
    for (int step = 0; step < steps; step++)
        for (int var = 0; var < VARIANTS; var++) {
            const kv_cache *c = &kv[var];
            /* sinks 0..3, the tail (the last 16 slots), random slots between */
            for (int l = 0; l < L; l++)
                for (int j = 0; j < S; j++) {
                    const int far = 4 + (int)(rng_next_u64(&rng) % (uint64_t)(ctx - 20));
                    slots[(size_t)l * S + j] = j < 4 ? j : j >= S - 16 ? ctx - S + j : far;
                }
            double t = 0;
            for (int l = 0; l < L; l++) {
                for (size_t i = 0; i < w_bytes; i += 64) sink += weights[i];
                const double t0 = time_now_s();
                head_job j = {.kv = c, .layer = l, .n = S, .slots = slots + (size_t)l * S, .q = q,
                              .scores = scratch, .out = out};
                pool_run(p, H, head_item, &j);
                t += time_now_s() - t0;
            }
            us[(size_t)var * steps + step] = 1e6 * t / L;
        }
    printf("%d threads, %d layers of %d slots (%d KV heads x %d, f16 rows of %d), %d of %d slots a query, %d MiB read "
           "between layers, %d steps\n", n_threads, L, ctx, H, G, HD, S, ctx, w_mib, steps);
    for (int var = 0; var < VARIANTS; var++) {
        double *u = us + (size_t)var * steps;
        qsort(u, (size_t)steps, sizeof *u, cmp_double);
        printf("  %-10s us a layer: min %7.1f  median %7.1f  max %7.1f\n", names[var], u[0], u[steps / 2],
               u[steps - 1]);
    }
    (void)sink;
    return 0;
}
