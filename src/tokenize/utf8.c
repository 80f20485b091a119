#include "tokenize/utf8.h"

#include "subq.h"

int utf8_decode(const uint8_t *s, size_t n, uint32_t *cp) {
    uint8_t c = s[0];
    uint32_t v;
    int len;
    uint32_t min; /* smallest code point that needs `len` bytes: rejects overlongs */
    if (c < 0x80) {
        if (cp) *cp = c;
        return 1;
    } else if (c >= 0xC2 && c <= 0xDF) { /* C0, C1 would only give overlongs */
        len = 2, v = c & 0x1F, min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3, v = c & 0x0F, min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) { /* F5.. would exceed U+10FFFF */
        len = 4, v = c & 0x07, min = 0x10000;
    } else {
        return 0; /* continuation byte without a lead, or C0/C1/F5..FF */
    }
    if ((size_t)len > n) return 0;
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    if (cp) *cp = v;
    return len;
}

size_t utf8_validate(const char *s, size_t n) {
    const uint8_t *u = (const uint8_t *)s;
    size_t i = 0;
    while (i < n) {
        if (u[i] < 0x80) { /* ASCII fast path: most text is mostly ASCII */
            i++;
            continue;
        }
        int len = utf8_decode(u + i, n - i, NULL);
        if (len == 0) return i;
        i += (size_t)len;
    }
    return n;
}

int subq_utf8_len(const char *s, size_t n) { return n > 0 ? utf8_decode((const uint8_t *)s, n, NULL) : 0; }
