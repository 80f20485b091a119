/* GEMV kernels against the machine's memory read bandwidth.
 *
 * For each weight type: COPIES distinct ROWS x COLS matrices (far larger than
 * the last-level cache), y = W x over each in turn with row-parallel OpenMP,
 * as the decode step does. Reports weight bytes read per second and the
 * fraction of a measured read bandwidth (a T-thread AVX2 sum over a 1 GiB
 * array). Best of several passes: other processes share the cores.
 *
 * Build by hand (not part of the CMake build; -O3 as the Release library):
 *   gcc -O3 -std=c11 -fopenmp -Isrc -Iinclude bench/bench_gemv.c src/quant/[a-z]*.c src/base/cpu.c -lm -o /tmp/bench_gemv
 *   /tmp/bench_gemv [-t THREADS] [-r ROWS] [-c COLS] [-p PASSES] [-m MB per type] [--type NAME]
 * Columns: "dot_row" is one dot_row call per row inside `omp parallel for`
 * (what src/model/matmul.c does); "dot_rows" is one dot_rows call per
 * thread on its slice of rows (x's sub-block sums computed once: faster for
 * q4_K / q5_K).
 */
#define _POSIX_C_SOURCE 200809L
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/kernels.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Sum of n floats with 8 independent vector accumulators (load bound). */
__attribute__((target("avx2"))) static float sum_avx2(const float *a, size_t n) {
    __m256 s[8];
    for (int k = 0; k < 8; k++) s[k] = _mm256_setzero_ps();
    for (size_t i = 0; i + 64 <= n; i += 64)
        for (int k = 0; k < 8; k++) s[k] = _mm256_add_ps(s[k], _mm256_loadu_ps(a + i + 8 * k));
    for (int k = 1; k < 8; k++) s[0] = _mm256_add_ps(s[0], s[k]);
    float out[8];
    _mm256_storeu_ps(out, s[0]);
    return out[0] + out[1] + out[2] + out[3] + out[4] + out[5] + out[6] + out[7];
}

/* Best-of-`passes` read bandwidth in GB/s over a 1 GiB array split across threads. */
static double read_bandwidth(int threads, int passes) {
    const size_t n = (size_t)1 << 28; /* 1 GiB of floats */
    float *a = malloc(n * sizeof(float));
    if (!a) return 0;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (size_t i = 0; i < n; i++) a[i] = (float)(i & 7); /* first touch on the reading thread */
    double best = 0;
    volatile float sink = 0;
    for (int p = 0; p < passes; p++) {
        double t0 = now();
        float tot = 0;
#pragma omp parallel num_threads(threads) reduction(+ : tot)
        {
            int id = omp_get_thread_num(), nt = omp_get_num_threads();
            size_t lo = n / nt * id, hi = id == nt - 1 ? n : n / nt * (id + 1);
            tot += sum_avx2(a + lo, hi - lo);
        }
        double t = now() - t0;
        sink += tot;
        double gbs = n * sizeof(float) / t / 1e9;
        if (gbs > best) best = gbs;
    }
    (void)sink;
    free(a);
    return best;
}

int main(int argc, char **argv) {
    int threads = 2, rows = 3072, cols = 1024, passes = 5, mb = 400;
    const char *only = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-t")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-r")) rows = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-c")) cols = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-p")) passes = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-m")) mb = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--type")) only = argv[i + 1];
    }
    const kernels *k = kernels_get();
    double bw = read_bandwidth(threads, passes);
    printf("kernels %s, %d threads, %d x %d matrices, read bandwidth %.2f GB/s\n", k->name, threads, rows, cols, bw);
    printf("%-6s %8s %8s | %-16s | %-16s\n", "type", "MB/mat", "copies", "dot_row GB/s", "dot_rows GB/s");

    const uint32_t types[] = {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q8_0,
                              GGML_TYPE_Q4_0, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K};
    float *x = malloc((size_t)cols * sizeof(float)), *y = malloc((size_t)rows * sizeof(float));
    float *src = malloc((size_t)cols * sizeof(float));
    uint64_t s = 88172645463325252ull;
    for (int i = 0; i < cols; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        x[i] = (float)((s >> 40) & 0xFFFF) / 65536.0f - 0.5f;
    }
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const uint32_t type = types[t];
        const char *name = ggml_type_get(type)->name;
        if (only && strcmp(only, name)) continue;
        const size_t rb = ggml_row_size(type, (uint64_t)cols), mat = rb * (size_t)rows;
        int copies = (int)((size_t)mb * 1000000 / mat);
        if (copies < 4) copies = 4;
        char *w = malloc(mat * copies);
        if (!w) {
            printf("%-6s out of memory\n", name);
            continue;
        }
        /* one quantised random row pattern per matrix row, written by the thread that will read it */
#pragma omp parallel for num_threads(threads) schedule(static)
        for (long r = 0; r < (long)rows * copies; r++) {
            float row[8192];
            uint64_t z = 0x9E3779B97F4A7C15ull * (uint64_t)(r + 1);
            for (int i = 0; i < cols && i < 8192; i++) {
                z ^= z << 13, z ^= z >> 7, z ^= z << 17;
                row[i] = (float)((z >> 40) & 0xFFFF) / 32768.0f - 1.0f;
            }
            quantize_row(type, row, w + (size_t)r * rb, cols);
        }
        double best[2] = {0, 0};
        for (int mode = 0; mode < 2; mode++)
            for (int p = 0; p < passes; p++) {
                double t0 = now();
                for (int c = 0; c < copies; c++) {
                    const char *m = w + (size_t)c * mat;
                    if (mode == 0) {
#pragma omp parallel for num_threads(threads) schedule(static)
                        for (int r = 0; r < rows; r++) y[r] = dot_row(type, m + (size_t)r * rb, x, cols);
                    } else {
                        /* each thread one dot_rows call on a contiguous slice */
#pragma omp parallel num_threads(threads)
                        {
                            int id = omp_get_thread_num(), nt = omp_get_num_threads();
                            int lo = (int)((long)rows * id / nt), hi = (int)((long)rows * (id + 1) / nt);
                            dot_rows(type, m + (size_t)lo * rb, rb, hi - lo, x, cols, y + lo);
                        }
                    }
                }
                double gbs = (double)mat * copies / (now() - t0) / 1e9;
                if (gbs > best[mode]) best[mode] = gbs;
            }
        printf("%-6s %8.2f %8d | %6.2f (%5.1f%%) | %6.2f (%5.1f%%)\n", name, mat / 1e6, copies, best[0],
               100 * best[0] / bw, best[1], 100 * best[1] / bw);
        fflush(stdout);
        free(w);
    }
    free(x), free(y), free(src);
    return 0;
}
