/* CRC-32C with the SSE4.2 crc32 instruction (crc32c.h). */
#include "base/crc32c.h"

#include <nmmintrin.h>
#include <string.h>

/* The reflected CRC with polynomial 0x1EDC6F41, pre- and post-inverted
 * (iSCSI, ext4): what _mm_crc32_* compute per step, bytes in order. */
__attribute__((target("sse4.2"))) uint32_t crc32c(uint32_t crc, const void *data, size_t n) {
    const unsigned char *p = data;
    uint64_t c = ~crc;
    for (; n >= 8; p += 8, n -= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = _mm_crc32_u64(c, w);
    }
    uint32_t c32 = (uint32_t)c;
    for (; n > 0; p++, n--) c32 = _mm_crc32_u8(c32, *p);
    return ~c32;
}
