#include "base/fingerprint.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

uint64_t fnv1a(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001B3ull;
    return h;
}

int fingerprint_skips_tensor(const char *name) {
    if (strncmp(name, "blk.", 4)) return 0;
    const char *p = name + 4;
    if (*p < '0' || *p > '9') return 0;
    while (*p >= '0' && *p <= '9') p++;
    return !strncmp(p, ".indexer.", 9);
}

void fingerprint_hex(uint64_t fp, char *buf) { snprintf(buf, 17, "%016" PRIx64, fp); }

int fingerprint_parse(const char *s, uint64_t *out) {
    uint64_t v = 0;
    int n = 0;
    for (; s[n]; n++) {
        char c = s[n];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0 || n >= 16) return 0;
        v = v << 4 | (uint64_t)d;
    }
    if (n != 16) return 0;
    *out = v;
    return 1;
}
