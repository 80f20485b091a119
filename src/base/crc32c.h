/* CRC-32C (Castagnoli), the checksum of KV file rows: the SSE4.2 crc32
 * instruction hashes 8 bytes a step (x86-64 machines this project runs on
 * all have it), several GB/s, so a commit checks its rows for little. */
#ifndef SUBQ_BASE_CRC32C_H
#define SUBQ_BASE_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Continue a CRC-32C: start from 0; crc32c(crc32c(0, a), b) is the CRC of
 * a followed by b. */
uint32_t crc32c(uint32_t crc, const void *data, size_t n);

#endif
