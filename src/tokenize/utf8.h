/* Strict UTF-8 decoding (RFC 3629): no overlong forms, no surrogates
 * (U+D800..U+DFFF), nothing above U+10FFFF. Shared by the tokenizers. */
#ifndef SUBQ_TOKENIZE_UTF8_H
#define SUBQ_TOKENIZE_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Decode one character from s[0..n). Returns its length in bytes (1..4) and
 * stores the code point in *cp (may be NULL), or 0 if the bytes at s do not
 * start a valid character (including a sequence truncated by n). n must be > 0. */
int utf8_decode(const uint8_t *s, size_t n, uint32_t *cp);

/* Offset of the first byte that does not start a valid character, or n if
 * all of s[0..n) is valid UTF-8. */
size_t utf8_validate(const char *s, size_t n);

#endif
