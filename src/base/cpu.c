#include "base/cpu.h"

#include <cpuid.h>

int cpu_has_avx2(void) {
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
