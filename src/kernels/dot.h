/* The f32 dot product of each instruction set, header-only: the kernel sets
 * take their dot_f32 from here, and the C++ index shims (hnsw_shim.cpp,
 * faiss_shim.cpp in src/select) inline it into the distance functions of
 * their graph searches, which call it once per node visited. With it, the
 * AVX2 pieces every dense dot product of kernels_avx2.c is built from, and
 * the prefetch and horizontal sums that the decode attention kernels of
 * kernels_avx2.c and kv_avx512.c share. */
#ifndef SUBQ_KERNELS_DOT_H
#define SUBQ_KERNELS_DOT_H

#include <stdint.h>
#include <string.h>

/* Four partial sums break the add dependency chain and halve rounding growth. */
static inline float kernels_dot_f32_scalar(const float *a, const float *b, int64_t n) {
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += a[i] * b[i];
        s1 += a[i + 1] * b[i + 1];
        s2 += a[i + 2] * b[i + 2];
        s3 += a[i + 3] * b[i + 3];
    }
    for (; i < n; i++) s0 += a[i] * b[i];
    return (s0 + s1) + (s2 + s3);
}

/* x86 with a compiler that has target attributes: AVX2 kernels are built
 * (whatever -march says) and chosen at run time. */
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define KERNELS_HAVE_AVX2 1

#include <immintrin.h>

#define KERNELS_AVX2 __attribute__((target("avx2,fma,f16c")))
#define KERNELS_AVX2_INLINE KERNELS_AVX2 static inline __attribute__((always_inline))
/* The AVX-512 kernels (gemm_avx512.c, kv_avx512.c, scan_codes.c): the
 * features cpu_has_avx512vnni checks */
#define KERNELS_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))
#define KERNELS_AVX512_INLINE KERNELS_AVX512 static inline __attribute__((always_inline))

/* sum of the 8 lanes */
KERNELS_AVX2_INLINE float kernels_hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* NAME(x, w, n) = sum_i x_i w_i for w of element type T, read 8 at a time
 * as floats by LOAD and one at a time by SCALAR; four accumulators (FMA
 * latency 4, two per cycle). */
#define KERNELS_DOT_DENSE(NAME, T, LOAD, SCALAR)                                                          \
    KERNELS_AVX2 static inline float NAME(const float *x, const T *w, int64_t n) {                        \
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;                                       \
        int64_t i = 0;                                                                                    \
        for (; i + 32 <= n; i += 32) {                                                                    \
            a0 = _mm256_fmadd_ps(LOAD(w + i), _mm256_loadu_ps(x + i), a0);                                \
            a1 = _mm256_fmadd_ps(LOAD(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);                        \
            a2 = _mm256_fmadd_ps(LOAD(w + i + 16), _mm256_loadu_ps(x + i + 16), a2);                      \
            a3 = _mm256_fmadd_ps(LOAD(w + i + 24), _mm256_loadu_ps(x + i + 24), a3);                      \
        }                                                                                                 \
        for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(LOAD(w + i), _mm256_loadu_ps(x + i), a0);         \
        float s = kernels_hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));             \
        for (; i < n; i++) s += SCALAR(w[i]) * x[i];                                                      \
        return s;                                                                                         \
    }

KERNELS_DOT_DENSE(kernels_dot_f32_avx2, float, _mm256_loadu_ps, )

/* Rows read where an index points (a gather), and by the AVX2 set's decode
 * attention and code scans, are asked for line by line, the latter PF_ROWS
 * rows ahead (its loops read rows in strided column passes, which the
 * hardware prefetcher does not follow: asked a page at a time, as below,
 * they ran at 0.72-0.87x). A prefetch never faults, so bytes past the end
 * of a call's range may be asked for too; the address is formed as an
 * integer, as it may lie outside the array. */
#define PF_ROWS 64
KERNELS_AVX2_INLINE void prefetch_at(const void *base, size_t off) {
    _mm_prefetch((const char *)((uintptr_t)base + off), _MM_HINT_T0);
}
/* the lines of bytes [off, off + len) from base */
KERNELS_AVX2_INLINE void prefetch_span(const void *base, size_t off, size_t len) {
    for (size_t o = off & ~(size_t)63; o < off + len; o += 64) prefetch_at(base, o);
}

/* Rows read front to back (decode attention over a KV head's rows, a scan
 * of search keys or codes, GEMV weights) are asked for a page at a time:
 * the hardware prefetcher streams within a 4 KiB page but stops at its
 * end, where the loop then waits on DRAM (and on a page walk). The loops
 * call this with the span [off, off + len) they read now; it asks for the
 * first line of each page that the span moved PF_PAGE_BYTES ahead enters,
 * which starts the walk and the stream there early. Two cores scored f16
 * rows at 53-57 GB/s so, 36-39 asking for every line 64 rows ahead
 * (bench_attn at 128K, Zen 5 VM; bench/notes/2026-12-04-page-prefetch.md). */
#define PF_PAGE_BYTES 16384
KERNELS_AVX2_INLINE void prefetch_page_ahead(const void *base, size_t off, size_t len) {
    const uintptr_t a = (uintptr_t)base + off + PF_PAGE_BYTES, b = a + len;
    for (uintptr_t p = ((a - 1) | 4095) + 1; p < b; p += 4096) _mm_prefetch((const char *)p, _MM_HINT_T0);
}

/* The 8 d * sc_s and dmin * m_s of a Q4_K / Q5_K super-block (float
 * products as in the scalar code). The 6-bit fields are unpacked four at a
 * time in 32-bit words (see k4_scale_min): with a, b, c the three words of
 * `scales`, sc[0..3] = a & 63, m[0..3] = b & 63, and sc[4..7] / m[4..7]
 * take the low / high nibbles of c plus bits 6..7 of a / b moved to bits
 * 4..5. */
KERNELS_AVX2_INLINE void kernels_k4_scales(const uint8_t *scales, float d, float dmin, __m256 *ds, __m256 *dm) {
    uint32_t a, b, c;
    memcpy(&a, scales, 4);
    memcpy(&b, scales + 4, 4);
    memcpy(&c, scales + 8, 4);
    const uint32_t sc_lo = a & 0x3F3F3F3Fu, m_lo = b & 0x3F3F3F3Fu;
    const uint32_t sc_hi = (c & 0x0F0F0F0Fu) | ((a >> 2) & 0x30303030u);
    const uint32_t m_hi = ((c >> 4) & 0x0F0F0F0Fu) | ((b >> 2) & 0x30303030u);
    const __m256 sc = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_set_epi32(0, 0, (int)sc_hi, (int)sc_lo)));
    const __m256 m = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_set_epi32(0, 0, (int)m_hi, (int)m_lo)));
    *ds = _mm256_mul_ps(_mm256_set1_ps(d), sc);
    *dm = _mm256_mul_ps(_mm256_set1_ps(dmin), m);
}

/* [sum a, sum b, sum c, sum d] of four 8-lane vectors */
KERNELS_AVX2_INLINE __m128 hsum4(__m256 a, __m256 b, __m256 c, __m256 d) {
    __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
    return _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}

#endif

#endif
