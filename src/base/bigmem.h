/* Large buffers that are streamed every decode step (the KV cache, search
 * keys, model weights read into memory) asked to be backed by 2 MiB pages. With 4 KiB
 * pages a stream of a few GB misses the TLB on every page, and two cores
 * read ~30% slower than from huge pages on the machines we measure (kernels
 * with transparent huge pages in "madvise" mode, the Debian default, give
 * them only to regions that ask). The advice is best-effort: where the
 * kernel has no huge pages the memory is ordinary. */
#ifndef SUBQ_BASE_BIGMEM_H
#define SUBQ_BASE_BIGMEM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The transparent huge page of x86-64 (a PMD's span). */
#define BIGMEM_HUGE_PAGE ((size_t)2 << 20)

/* `bytes` of uninitialised memory (NULL when out of memory); buffers of
 * 2 MiB or more are 2 MiB-aligned and advised MADV_HUGEPAGE. Free with free(). */
void *bigmem_alloc(size_t bytes);

/* Grow a bigmem_alloc buffer (or NULL) to `bytes`: a new buffer with the
 * first `used` bytes copied, the old one freed; NULL (the old one kept) when
 * out of memory. Not realloc: that moves large blocks by mremap to addresses
 * that split their 2 MiB pages, or copies small ones into the 4 KiB-paged
 * heap, and the rows gathered at random every step (a selector's re-rank)
 * then miss the TLB on each one. */
void *bigmem_grow(void *p, size_t used, size_t bytes);

/* The same advice for a large buffer another library allocated (hnswlib's
 * vectors and links): the whole 2 MiB pages inside [p, p + bytes). */
void bigmem_advise(void *p, size_t bytes);

/* Memory the kernel could give this process now without swapping:
 * MemAvailable from /proc/meminfo, else free + buffer RAM from sysinfo;
 * UINT64_MAX when unknown. *source names which. */
uint64_t bigmem_available(const char **source);

#ifdef __cplusplus
}
#endif

#endif
