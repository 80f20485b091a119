/* Decode attention alone against the machine's memory read bandwidth.
 *
 * One layer of a KV cache of CTX tokens (H KV heads of HD values, G query
 * heads per KV head, random rows) in each KV type; one query token attends
 * to all of it through the full-attention stage, as a decode step does. The
 * layer is far larger than the last-level cache at long contexts, so every
 * step streams its keys and values from DRAM. Reports the KV bytes read
 * per second and the fraction of the read bandwidth measured between the
 * passes (best of each: other processes share the cores), over 2 MiB
 * pages like the cache's (bench.c).
 *
 * Build by hand after `make build` (not part of the CMake build):
 *   gcc -O2 -std=c11 -fopenmp -D_GNU_SOURCE -I. -Isrc -Iinclude bench/bench_attn.c tools/subq/bench.c \
 *       build/libsubq_internal.a -lopenblas -lpcre2-8 -lstdc++ -lm -o /tmp/bench_attn
 *   /tmp/bench_attn [-t THREADS] [--ctx 32768,131072] [--kv f16,q8_0] [-p PASSES] [--heads 8] [-g 2] [--hd 128]
 *                   [--bw 0: no bandwidth passes, for profiling]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/pool.h"
#include "attn/attn.h"
#include "base/rng.h"
#include "base/timer.h"
#include "tools/subq/bench.h"

/* Comma-separated values of `s` into out (at most 8); returns the count. */
static int split(const char *s, char out[8][16]) {
    int n = 0;
    while (*s && n < 8) {
        size_t len = strcspn(s, ",");
        snprintf(out[n++], 16, "%.*s", (int)len, s);
        s += len + (s[len] == ',');
    }
    return n;
}

int main(int argc, char **argv) {
    int n_threads = 2, passes = 5, H = 8, g = 2, hd = 128, bw_on = 1;
    char ctxs[8][16] = {"32768", "131072"}, kvs[8][16] = {"f16", "q8_0"};
    int n_ctx = 2, n_kv = 2;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-t")) n_threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-p")) passes = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--heads")) H = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-g")) g = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--hd")) hd = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--bw")) bw_on = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--ctx")) n_ctx = split(argv[i + 1], ctxs);
        else if (!strcmp(argv[i], "--kv")) n_kv = split(argv[i + 1], kvs);
        else {
            fprintf(stderr, "unknown option %s\n", argv[i]);
            return 1;
        }
    }
    pool *attn_pool = NULL; /* the decode path's threads */
    subq_error pool_err;
    if (pool_new(n_threads, &attn_pool, &pool_err)) return fprintf(stderr, "%s\n", pool_err.msg), 1;
    printf("%d threads, %d KV heads x %d query heads, head width %d, best of %d passes\n", n_threads, H, g, hd, passes);
    printf("%8s %6s %10s %9s %9s %9s %7s\n", "ctx", "kv", "MiB", "ms", "GB/s", "bw GB/s", "of bw");
    for (int ci = 0; ci < n_ctx; ci++)
        for (int ki = 0; ki < n_kv; ki++) {
            const int n = atoi(ctxs[ci]), type = subq_kv_type_parse(kvs[ki]);
            if (n < 1 || type < 0) {
                fprintf(stderr, "bad context %s or KV type %s\n", ctxs[ci], kvs[ki]);
                return 1;
            }
            kv_cache kv;
            subq_error err;
            if (kv_cache_init(&kv, 1, H, hd, n, (subq_kv_type)type, &err)) {
                fprintf(stderr, "%s\n", err.msg);
                return 1;
            }
            float *k = malloc((size_t)H * hd * sizeof(float)), *v = malloc((size_t)H * hd * sizeof(float));
            float *q = malloc((size_t)H * g * hd * sizeof(float)), *out = malloc((size_t)H * g * hd * sizeof(float));
            /* rows drawn from a pool of normals at random offsets: filling
             * 131072 tokens with fresh ones took most of the run */
            enum { POOL = 1 << 16 };
            static float pool[POOL];
            uint64_t rng = rng_seed(1);
            for (int i = 0; i < POOL; i++) pool[i] = rng_normal(&rng);
            for (int t = 0; t < n; t++) {
                const uint64_t ok = rng_next_u64(&rng), ov = rng_next_u64(&rng);
                for (int i = 0; i < H * hd; i++) k[i] = pool[(ok + i) % POOL], v[i] = pool[(ov + i) % POOL];
                kv_cache_store(&kv, 0, t, 1, k, v, NULL);
                kv.pos[t] = t;
                kv.seg[t] = 0;
            }
            kv.n_used = n;
            for (int i = 0; i < H * g * hd; i++) q[i] = 0.1f * rng_normal(&rng);
            attn_step st = {.layer = 0, .n_tokens = 1, .slot0 = n - 1, .n_head = H * g, .n_head_kv = H,
                            .head_dim = hd, .scale = 0.0884f, .q = q, .out = out, .n_threads = n_threads, .pool = attn_pool};
            attn_stage *full = attn_full_stage();
            double best_t = 1e30, best_bw = 0;
            for (int p = 0; p < passes; p++) {
                double bw = bw_on ? bench_read_bandwidth((size_t)1 << 30, n_threads, 1) : 1;
                best_bw = bw > best_bw ? bw : best_bw;
                double t0 = time_now_s();
                if (full->forward(full, &st, &kv, &err)) {
                    fprintf(stderr, "%s\n", err.msg);
                    return 1;
                }
                double el = time_now_s() - t0;
                best_t = el < best_t ? el : best_t;
            }
            const double bytes = 2.0 * H * (double)n * kv.row_bytes;
            printf("%8d %6s %10.1f %9.2f %9.2f %9.2f %6.0f%%\n", n, kvs[ki], bytes / 1048576.0, 1e3 * best_t,
                   bytes / best_t / 1e9, best_bw, 100 * bytes / best_t / 1e9 / best_bw);
            free(k), free(v), free(q), free(out);
            kv_cache_free(&kv);
        }
    return 0;
}
