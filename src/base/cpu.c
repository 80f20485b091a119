#include "base/cpu.h"

#include <cpuid.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* SUBQ_ISA=scalar|avx2|avx512 caps the kernel level (to measure or test a
 * lower one on a machine that has more); it never raises it. Unset or
 * another value: no cap (subq_isa_name says what runs). */
static int isa_cap(void) {
    const char *e = getenv("SUBQ_ISA");
    if (!e) return 2;
    if (!strcmp(e, "scalar")) return 0;
    if (!strcmp(e, "avx2")) return 1;
    return 2;
}

static int detect_avx2(void) {
#if defined(__x86_64__) || defined(__i386__)
    /* __builtin_cpu_supports also checks that the OS saves AVX state; clang 14
     * does not know "f16c" there, so that bit is read from cpuid leaf 1. */
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    int f16c = (c >> 29) & 1;
    return isa_cap() >= 1 && f16c && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return 0;
#endif
}

static int detect_avx512vnni(void) {
#if defined(__x86_64__) || defined(__i386__)
    /* libgcc sets the AVX-512 bits only when XCR0 enables the ZMM state */
    return isa_cap() >= 2 && detect_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vnni");
#else
    return 0;
#endif
}

/* cpuid traps to the hypervisor in a VM (about 2.5 us here) and kernel
 * lookups sit on per-row paths, so each answer is read once. The caches are
 * write-once globals: every thread computes the same value, so a race only
 * repeats the detection. */
static int cached(atomic_int *c, int (*detect)(void)) {
    int v = atomic_load_explicit(c, memory_order_relaxed);
    if (v < 0) {
        v = detect();
        atomic_store_explicit(c, v, memory_order_relaxed);
    }
    return v;
}

int cpu_has_avx2(void) {
    static atomic_int c = -1;
    return cached(&c, detect_avx2);
}

int cpu_has_avx512vnni(void) {
    static atomic_int c = -1;
    return cached(&c, detect_avx512vnni);
}
