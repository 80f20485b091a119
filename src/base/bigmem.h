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

/* `bytes` of uninitialised memory (NULL when out of memory); buffers of
 * 2 MiB or more are 2 MiB-aligned and advised MADV_HUGEPAGE. Free with free(). */
void *bigmem_alloc(size_t bytes);

/* The same advice for a buffer that grows by realloc (the search keys of a
 * selector): the whole 2 MiB pages inside [p, p + bytes). */
void bigmem_advise(void *p, size_t bytes);

/* Memory the kernel could give this process now without swapping:
 * MemAvailable from /proc/meminfo, else free + buffer RAM from sysinfo;
 * UINT64_MAX when unknown. *source names which. */
uint64_t bigmem_available(const char **source);

#endif
