/* Decode attention kernels alone, per KV type: the bytes of KV rows that
 * one core's scores and accumulation passes process per second of its own
 * CPU time, on a chunk of rows resident in L2 (1024 rows of 128 values, two
 * query heads per KV head, as Qwen3-0.6B). CPU time, not wall time, so the
 * figure holds on a shared machine. A kernel whose rate is below the
 * memory read bandwidth per core cannot stream the cache at the bandwidth.
 * The AVX2 set's kernels, and the AVX-512 ones where the CPU has them.
 *
 * Build by hand after `make build` (not part of the CMake build):
 *   gcc -O2 -std=c11 -fopenmp -D_GNU_SOURCE -I. -Isrc -Iinclude bench/bench_kv_kernels.c \
 *       build/libsubq_internal.a -lopenblas -lpcre2-8 -lstdc++ -lm -o /tmp/bench_kv_kernels
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "kernels/kernels.h"

static double cpu_now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(void) {
    enum { HD = 128, G = 2, N = 1024, REPS = 2000 };
    float *x = malloc(sizeof(float) * N * HD), *q = malloc(sizeof(float) * G * HD);
    float *s = malloc(sizeof(float) * G * N), *o = calloc(G * HD, sizeof(float));
    for (int i = 0; i < N * HD; i++) x[i] = (float)rand() / RAND_MAX - 0.5f;
    for (int i = 0; i < G * HD; i++) q[i] = 0.1f;
    printf("%d rows of %d values, %d query heads\n", N, HD, G);
    /* the set's kernels, then the AVX-512 ones where the CPU has them */
    const kernels *K = kernels_get();
    const kernels_kv_decode *wide = kernels_kv_decode_avx512();
    for (int v = 0; v < (wide ? 2 : 1); v++)
        for (int t = 0; t < SUBQ_KV_TYPE_COUNT; t++) {
            const kernels_kv_decode ops = v ? wide[t] : (kernels_kv_decode){K->kv[t].scores, K->kv[t].accum};
            const size_t rb = kernels_kv_row_bytes((subq_kv_type)t, HD);
            char *rows = malloc(rb * N);
            for (int j = 0; j < N; j++) kernels_kv_from_f32((subq_kv_type)t, x + (size_t)j * HD, rows + j * rb, HD);
            double t0 = cpu_now_s();
            for (int r = 0; r < REPS; r++) ops.scores(q, G, rows, N, HD, 0.1f, s, N);
            double t1 = cpu_now_s();
            for (int r = 0; r < REPS; r++) ops.accum(s, G, N, rows, N, HD, o);
            double t2 = cpu_now_s();
            const double bytes = (double)rb * N * REPS;
            printf("%-6s %-5s %3zu B/row: scores %6.2f GB per CPU-second, accum %6.2f\n", v ? "avx512" : K->name,
                   subq_kv_type_name((subq_kv_type)t), rb, bytes / (t1 - t0) / 1e9, bytes / (t2 - t1) / 1e9);
            free(rows);
        }
    printf("(checksum %g)\n", (double)(o[0] + s[0]));
    free(x), free(q), free(s), free(o);
    return 0;
}
