#define _DEFAULT_SOURCE /* madvise, MADV_HUGEPAGE */
#include "base/bigmem.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sysinfo.h>

void *bigmem_alloc(size_t bytes) {
    if (bytes < BIGMEM_HUGE_PAGE) return malloc(bytes ? bytes : 1);
    if (bytes > SIZE_MAX - BIGMEM_HUGE_PAGE) return NULL;
    const size_t rounded = (bytes + BIGMEM_HUGE_PAGE - 1) & ~(BIGMEM_HUGE_PAGE - 1);
    void *p = aligned_alloc(BIGMEM_HUGE_PAGE, rounded);
#ifdef MADV_HUGEPAGE
    if (p) (void)madvise(p, rounded, MADV_HUGEPAGE); /* advice only: failure leaves 4 KiB pages */
#endif
    return p;
}

void bigmem_advise(void *p, size_t bytes) {
#ifdef MADV_HUGEPAGE
    const uintptr_t lo = ((uintptr_t)p + BIGMEM_HUGE_PAGE - 1) & ~(uintptr_t)(BIGMEM_HUGE_PAGE - 1);
    const uintptr_t hi = ((uintptr_t)p + bytes) & ~(uintptr_t)(BIGMEM_HUGE_PAGE - 1);
    if (p && hi > lo) (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
#else
    (void)p;
    (void)bytes;
#endif
}

void *bigmem_grow(void *p, size_t used, size_t bytes) {
    void *q = bigmem_alloc(bytes);
    if (!q) return NULL;
    if (p && used) memcpy(q, p, used < bytes ? used : bytes);
    free(p);
    return q;
}

uint64_t bigmem_available(const char **source) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[256];
        unsigned long long kib;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1) {
                fclose(f);
                *source = "MemAvailable in /proc/meminfo";
                return (uint64_t)kib * 1024;
            }
        fclose(f);
    }
    struct sysinfo si;
    *source = "free RAM from sysinfo";
    if (sysinfo(&si) == 0) return ((uint64_t)si.freeram + si.bufferram) * si.mem_unit;
    return UINT64_MAX; /* unknown: let the allocation decide */
}

