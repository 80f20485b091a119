#include "base/cpu.h"

#include <cpuid.h>
#include <stdatomic.h>

static int detect_avx2(void) {
#if defined(__x86_64__) || defined(__i386__)
    /* __builtin_cpu_supports also checks that the OS saves AVX state; clang 14
     * does not know "f16c" there, so that bit is read from cpuid leaf 1. */
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    int f16c = (c >> 29) & 1;
    return f16c && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return 0;
#endif
}

/* cpuid traps to the hypervisor in a VM (about 2.5 us here) and kernel
 * lookups sit on per-row paths, so the answer is read once. The cache is
 * the one write-once global: every thread computes the same value, so a
 * race only repeats the detection. */
int cpu_has_avx2(void) {
    static atomic_int cached = -1;
    int v = atomic_load_explicit(&cached, memory_order_relaxed);
    if (v < 0) {
        v = detect_avx2();
        atomic_store_explicit(&cached, v, memory_order_relaxed);
    }
    return v;
}
