#include "bench.h"

#include <cblas.h>
#include <immintrin.h>
#include <omp.h>
#include <stdint.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

double bench_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Sum 64-bit words: the loop is load-bound, so the rate is the read bandwidth. */
__attribute__((target("avx2"))) static uint64_t sum_avx2(const uint64_t *p, size_t n) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = _mm256_add_epi64(a0, _mm256_load_si256((const __m256i *)(p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_load_si256((const __m256i *)(p + i + 4)));
        a2 = _mm256_add_epi64(a2, _mm256_load_si256((const __m256i *)(p + i + 8)));
        a3 = _mm256_add_epi64(a3, _mm256_load_si256((const __m256i *)(p + i + 12)));
    }
    a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    uint64_t t[4];
    _mm256_storeu_si256((__m256i *)t, a0);
    uint64_t s = t[0] + t[1] + t[2] + t[3];
    for (; i < n; i++) s += p[i];
    return s;
}

static uint64_t sum_scalar(const uint64_t *p, size_t n) {
    uint64_t s = 0;
    for (size_t i = 0; i < n; i++) s += p[i];
    return s;
}

uint64_t bench_sum_words(const uint64_t *p, size_t n) {
    return __builtin_cpu_supports("avx2") ? sum_avx2(p, n) : sum_scalar(p, n);
}

double bench_read_bandwidth(size_t bytes, int n_threads, int reps) {
    /* 2 MiB pages, as the KV cache has (src/base/bigmem.c): with 4 KiB pages
     * two cores read up to 30% less, and whether a plain buffer got huge
     * pages varied from run to run */
    const size_t huge = (size_t)2 << 20;
    bytes = (bytes + huge - 1) & ~(huge - 1);
    size_t n = bytes / sizeof(uint64_t);
    uint64_t *buf = aligned_alloc(huge, bytes);
    if (!buf) return 0.0;
#ifdef MADV_HUGEPAGE
    (void)madvise(buf, bytes, MADV_HUGEPAGE);
#endif
    /* first touch by the threads that will read, so pages are placed near them */
#pragma omp parallel for num_threads(n_threads) schedule(static)
    for (size_t i = 0; i < n; i++) buf[i] = i;
    double best = 0.0;
    uint64_t check = 0;
    for (int r = 0; r < reps; r++) {
        uint64_t total = 0;
        double t0 = bench_now_s();
        /* each thread sums one contiguous slice (multiple of 16 words) */
#pragma omp parallel num_threads(n_threads) reduction(+ : total)
        {
            int nt = omp_get_num_threads(), id = omp_get_thread_num();
            size_t per = (n / (size_t)nt) & ~(size_t)15, lo = per * (size_t)id, hi = id == nt - 1 ? n : lo + per;
            total += bench_sum_words(buf + lo, hi - lo);
        }
        double el = bench_now_s() - t0;
        check += total;
        double gbs = (double)n * sizeof(uint64_t) / el / 1e9;
        if (gbs > best) best = gbs;
    }
    free(buf);
    /* the sum of 0..n-1 per pass proves every word was read */
    return check == (uint64_t)reps * ((uint64_t)n * (uint64_t)(n - 1) / 2) ? best : 0.0;
}

double bench_sgemm_gflops(int m, int n, int k, int n_threads, int reps) {
    float *A = malloc((size_t)m * k * sizeof(float)), *B = malloc((size_t)n * k * sizeof(float)),
          *C = malloc((size_t)m * n * sizeof(float));
    double best = 0.0;
    if (A && B && C) {
        for (size_t i = 0; i < (size_t)m * k; i++) A[i] = (float)(i % 7) * 0.1f;
        for (size_t i = 0; i < (size_t)n * k; i++) B[i] = (float)(i % 5) * 0.1f;
        omp_set_num_threads(n_threads); /* OpenBLAS (OpenMP build) uses the caller's thread count */
        /* the first run warms up the thread pool; small shapes repeat for a
         * quarter second at least, so that one slow moment of a shared host
         * does not set the bound */
        double start = bench_now_s();
        for (int r = 0; r < reps + 1 || bench_now_s() - start < 0.25; r++) {
            double t0 = bench_now_s();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, A, k, B, k, 0.0f, C, n);
            double el = bench_now_s() - t0, gf = 2.0 * m * n * k / el / 1e9;
            if (r > 0 && gf > best) best = gf;
        }
    }
    free(A);
    free(B);
    free(C);
    return best;
}

/* The integer unit's peak, on the instructions the GEMM of each kernel level
 * is built on: AVX-512 VNNI, vpdpbusd (64 u8 x s8 products summed into 16
 * lanes: 128 ops); AVX2, vpmaddubsw + vpmaddwd + vpaddd (32 products: 64
 * ops in three instructions). Eight independent accumulators hide the
 * latency; nothing touches memory. The empty asm makes the compiler take
 * the operands as changed each round, so nothing is hoisted out. */
enum { PEAK_ACC = 8 };

__attribute__((target("avx512f,avx512bw,avx512vnni"))) static int64_t peak_vnni512(long rounds) {
    __m512i a[PEAK_ACC], x = _mm512_set1_epi8(1), w = _mm512_set1_epi8(3);
    for (int k = 0; k < PEAK_ACC; k++) a[k] = _mm512_set1_epi32(k);
    for (long i = 0; i < rounds; i++) {
        __asm__ volatile("" : "+v"(x), "+v"(w));
        for (int k = 0; k < PEAK_ACC; k++) a[k] = _mm512_dpbusd_epi32(a[k], x, w);
    }
    int64_t s = 0;
    for (int k = 0; k < PEAK_ACC; k++) s += _mm512_reduce_add_epi32(a[k]);
    return s;
}

__attribute__((target("avx2"))) static int64_t peak_avx2(long rounds) {
    __m256i a[PEAK_ACC], x = _mm256_set1_epi8(1), w = _mm256_set1_epi8(3), one = _mm256_set1_epi16(1);
    for (int k = 0; k < PEAK_ACC; k++) a[k] = _mm256_set1_epi32(k);
    for (long i = 0; i < rounds; i++) {
        __asm__ volatile("" : "+x"(x), "+x"(w));
        for (int k = 0; k < PEAK_ACC; k++)
            a[k] = _mm256_add_epi32(a[k], _mm256_madd_epi16(_mm256_maddubs_epi16(x, w), one));
    }
    int32_t t[8];
    int64_t s = 0;
    for (int k = 0; k < PEAK_ACC; k++) {
        _mm256_storeu_si256((__m256i *)t, a[k]);
        for (int j = 0; j < 8; j++) s += t[j];
    }
    return s;
}

double bench_int8_peak_gops(const char *isa, int n_threads, int reps) {
    const int vnni = !strcmp(isa, "avx512-vnni");
    if (!vnni && strcmp(isa, "avx2")) return 0.0;
    const long rounds = 1L << 22;
    const double ops = (double)n_threads * rounds * PEAK_ACC * (vnni ? 128 : 64);
    double best = 0.0;
    int64_t sink = 0;
    for (int r = 0; r < reps + 1; r++) { /* the first run starts the threads and clocks */
        const double t0 = bench_now_s();
#pragma omp parallel num_threads(n_threads) reduction(+ : sink)
        sink += vnni ? peak_vnni512(rounds) : peak_avx2(rounds);
        const double g = ops / (bench_now_s() - t0) / 1e9;
        if (r > 0 && g > best) best = g;
    }
    volatile int64_t used = sink; /* the sums are used: the loops cannot be dropped */
    (void)used;
    return best;
}

struct bench_contend {
    int n;
    atomic_int stop;
    pthread_t *threads;
};

static void *spin_main(void *arg) {
    bench_contend *c = arg;
    volatile uint64_t x = 1;
    while (!atomic_load_explicit(&c->stop, memory_order_relaxed))
        for (int i = 0; i < 100000; i++) x = x * 6364136223846793005ull + 1;
    return NULL;
}

bench_contend *bench_contend_start(int n) {
    bench_contend *c = calloc(1, sizeof *c);
    if (!c || !(c->threads = calloc((size_t)(n > 0 ? n : 1), sizeof(pthread_t)))) {
        free(c);
        return NULL;
    }
    for (; c->n < n; c->n++)
        if (pthread_create(&c->threads[c->n], NULL, spin_main, c) != 0) {
            bench_contend_stop(c);
            return NULL;
        }
    return c;
}

void bench_contend_stop(bench_contend *c) {
    if (!c) return;
    atomic_store(&c->stop, 1);
    for (int i = 0; i < c->n; i++) pthread_join(c->threads[i], NULL);
    free(c->threads);
    free(c);
}
