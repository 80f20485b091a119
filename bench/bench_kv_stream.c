/* One core's decode kernels streaming f16 KV rows from DRAM, against a
 * plain sum of the same bytes measured around each pass: the fraction of
 * what the core can read that the scores and accumulation passes reach.
 * 256 MiB of rows (128 values, two query heads, as Qwen3-0.6B) on 2 MiB
 * pages, walked in work items of 8192 rows as full_forward_rows does; the
 * median of 15 passes each (the host's bandwidth moves between minutes, a
 * ratio taken within a pass does not). Also the same kernels on 1024 rows
 * resident in L2, in GB/s: a kernel both slower than the core's share of
 * the bandwidth and unable to overlap its arithmetic with the reads shows
 * up in the ratio, not in these.
 *
 * Build by hand after `make build` (not part of the CMake build):
 *   gcc -O2 -std=c11 -fopenmp -D_GNU_SOURCE -I. -Isrc -Iinclude bench/bench_kv_stream.c tools/subq/bench.c \
 *       build/libsubq_internal.a -lopenblas -lm -o /tmp/bench_kv_stream
 *   /tmp/bench_kv_stream
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "base/timer.h"
#include "tools/subq/bench.h"
#include "kernels/kernels.h"

enum { HD = 128, G = 2, ITEM = 8192, PASSES = 15, L2_ROWS = 1024 };

static int by_value(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *x, int n) {
    qsort(x, (size_t)n, sizeof *x, by_value);
    return x[n / 2];
}

int main(void) {
    const size_t rows = (size_t)1 << 20, bytes = rows * HD * sizeof(uint16_t);
    uint16_t *kv = aligned_alloc((size_t)2 << 20, bytes);
    float *s = malloc(sizeof(float) * G * ITEM), q[G * HD], out[G * HD] = {0};
    if (!kv || !s) return 1;
    (void)madvise(kv, bytes, MADV_HUGEPAGE);
    for (size_t i = 0; i < rows * HD; i++) kv[i] = (uint16_t)(0x3c00 ^ (i & 0x3ff)); /* finite halves near 1 */
    for (int i = 0; i < G * HD; i++) q[i] = 0.01f * (float)(i % 7);
    for (int i = 0; i < G * ITEM; i++) s[i] = 1e-4f;
    const kernels_kv_decode ops = kernels_kv_decode_get(SUBQ_KV_F16);
    double scores_ratio[PASSES], accum_ratio[PASSES], scores_l2[PASSES], accum_l2[PASSES];
    uint64_t check = 0;
    for (int r = 0; r < PASSES; r++) {
        double t[6];
        t[0] = time_now_s();
        check += bench_sum_words((const uint64_t *)kv, bytes / 8);
        t[1] = time_now_s();
        for (size_t j = 0; j < rows; j += ITEM) ops.scores(q, G, kv + j * HD, ITEM, HD, 0.1f, s, ITEM);
        t[2] = time_now_s();
        check += bench_sum_words((const uint64_t *)kv, bytes / 8);
        t[3] = time_now_s();
        for (int i = 0; i < G * ITEM; i++) s[i] = 1e-4f;
        for (size_t j = 0; j < rows; j += ITEM) ops.accum(s, G, ITEM, kv + j * HD, ITEM, HD, out);
        t[4] = time_now_s();
        check += bench_sum_words((const uint64_t *)kv, bytes / 8);
        t[5] = time_now_s();
        /* each pass against the mean rate of the sums either side of it */
        scores_ratio[r] = ((t[1] - t[0]) + (t[3] - t[2])) / 2 / (t[2] - t[1]);
        accum_ratio[r] = ((t[3] - t[2]) + (t[5] - t[4])) / 2 / (t[4] - t[3]);
        const double l2_bytes = 64.0 * L2_ROWS * HD * sizeof(uint16_t);
        const double c0 = time_now_s();
        for (int x = 0; x < 64; x++) ops.scores(q, G, kv, L2_ROWS, HD, 0.1f, s, L2_ROWS);
        const double c1 = time_now_s();
        for (int x = 0; x < 64; x++) ops.accum(s, G, L2_ROWS, kv, L2_ROWS, HD, out);
        const double c2 = time_now_s();
        scores_l2[r] = l2_bytes / (c1 - c0) / 1e9;
        accum_l2[r] = l2_bytes / (c2 - c1) / 1e9;
    }
    printf("f16 rows of %d values, %d query heads, items of %d rows, median of %d passes (one core)\n", HD, G, ITEM,
           PASSES);
    printf("from DRAM, of a plain sum's rate: scores %.3f, accum %.3f\n", median(scores_ratio, PASSES),
           median(accum_ratio, PASSES));
    printf("from L2 (%d rows): scores %.1f GB/s, accum %.1f GB/s\n", L2_ROWS, median(scores_l2, PASSES),
           median(accum_l2, PASSES));
    printf("(checksum %g)\n", (double)(check & 0xff) + out[0]);
    free(kv);
    free(s);
    return 0;
}
