/* GEMV kernels against the machine's memory read bandwidth.
 *
 * For each weight type: COPIES distinct ROWS x COLS matrices (far larger than
 * the last-level cache), y = W x over each in turn with row-parallel OpenMP,
 * as the decode step does. Reports weight bytes read per second and the
 * fraction of a measured read bandwidth (a T-thread AVX2 sum over a 1 GiB
 * array). Weights and the bandwidth probe's array both ask for 2 MiB pages
 * (base/bigmem). Each pass runs every column in turn; best of several
 * passes: other processes share the cores and the memory bus.
 *
 * Build (not part of the default build): cmake --build build --target bench_gemv
 *   build/bench_gemv [-t THREADS] [-r ROWS] [-c COLS] [-p PASSES] [-m MB per type] [--type NAME]
 * bench/gemv_speed.sh runs it on the Qwen3-0.6B shapes with 1 and 2 threads.
 * Columns:
 *   dot_row   one dot_row call per row inside `omp parallel for`;
 *   dot_rows  one dot_rows call per thread on its slice of rows (float
 *             activations: the decode path of types without integer kernels,
 *             and of Q8_0 / Q4_0 before the integer GEMV);
 *   matmul    matmul() with one token: for Q8_0 / Q4_0 the integer GEMV
 *             (quantising x, then gemv_q8 per thread: AVX-512 VNNI where
 *             the CPU has it), else dot_rows;
 *   gemv_avx2 the same with the AVX2 set's quantize_q8 + gemv_q8 (what a CPU
 *             without AVX-512 VNNI runs; Q8_0 / Q4_0 only).
 */
#define _POSIX_C_SOURCE 200809L
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/bigmem.h"
#include "kernels/kernels.h"
#include "base/pool.h"
#include "model/matmul.h"

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
    float *a = bigmem_alloc(n * sizeof(float));
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
    const kernels *k = kernels_get(), *avx2 = kernels_avx2();
    double bw = read_bandwidth(threads, passes);
    printf("kernels %s, %d threads, %d x %d matrices, read bandwidth %.2f GB/s\n", k->name, threads, rows, cols, bw);
    printf("%-6s %8s %8s | %-16s | %-16s | %-16s | %-16s\n", "type", "MB/mat", "copies", "dot_row GB/s", "dot_rows GB/s",
           "matmul GB/s", "gemv_avx2 GB/s");

    const uint32_t types[] = {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q8_0,
                              GGML_TYPE_Q4_0, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K};
    float *x = malloc((size_t)cols * sizeof(float)), *y = malloc((size_t)rows * sizeof(float));
    int8_t *xq = malloc((size_t)cols);
    float *xd = malloc(((size_t)cols / 32 + 1) * sizeof(float));
    matmul_scratch sc;
    pool *mm_pool = NULL; /* matmul's threads */
    subq_error pool_err;
    if (pool_new(threads, &mm_pool, &pool_err)) return fprintf(stderr, "%s\n", pool_err.msg), 1;
    if (!x || !y || !xq || !xd || !matmul_scratch_init(&sc, 1, cols)) {
        printf("out of memory\n");
        return 1;
    }
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
        char *w = bigmem_alloc(mat * copies);
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
        gemv_q8_fn gemv2 = avx2 ? avx2->gemv_q8[type] : NULL;
        double best[4] = {0, 0, 0, 0};
        for (int p = 0; p < passes; p++)
            for (int mode = 0; mode < 4; mode++) {
                if (mode == 3 && !gemv2) continue;
                double t0 = now();
                for (int c = 0; c < copies; c++) {
                    const char *m = w + (size_t)c * mat;
                    if (mode == 0) {
#pragma omp parallel for num_threads(threads) schedule(static)
                        for (int r = 0; r < rows; r++) y[r] = dot_row(type, m + (size_t)r * rb, x, cols);
                    } else if (mode == 1) {
                        /* each thread one dot_rows call on a contiguous slice */
#pragma omp parallel num_threads(threads)
                        {
                            int id = omp_get_thread_num(), nt = omp_get_num_threads();
                            int lo = (int)((long)rows * id / nt), hi = (int)((long)rows * (id + 1) / nt);
                            dot_rows(type, m + (size_t)lo * rb, rb, hi - lo, x, cols, y + lo);
                        }
                    } else if (mode == 2) {
                        const matrix W = {.type = type, .rows = rows, .cols = cols, .row_bytes = rb, .data = m};
                        matmul(y, x, &W, 1, &sc, mm_pool);
                    } else {
                        avx2->quantize_q8(x, cols, xq, xd);
#pragma omp parallel num_threads(threads)
                        {
                            int id = omp_get_thread_num(), nt = omp_get_num_threads();
                            int lo = (int)((long)rows * id / nt), hi = (int)((long)rows * (id + 1) / nt);
                            gemv2(m + (size_t)lo * rb, rb, hi - lo, xq, xd, cols, y + lo);
                        }
                    }
                }
                double gbs = (double)mat * copies / (now() - t0) / 1e9;
                if (gbs > best[mode]) best[mode] = gbs;
            }
        printf("%-6s %8.2f %8d", name, mat / 1e6, copies);
        for (int mode = 0; mode < 4; mode++) {
            if (best[mode] > 0) printf(" | %6.2f (%5.1f%%)", best[mode], 100 * best[mode] / bw);
            else printf(" | %16s", "-");
        }
        printf("\n");
        fflush(stdout);
        free(w);
    }
    matmul_scratch_free(&sc);
    free(x), free(y), free(xq), free(xd);
    return 0;
}
