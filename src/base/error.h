/* Error reporting helpers: every failing call fills a subq_error. */
#ifndef SUBQ_BASE_ERROR_H
#define SUBQ_BASE_ERROR_H

#include <stddef.h>

#include "subq.h"

#if defined(__GNUC__)
#define SUBQ_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define SUBQ_PRINTF(a, b)
#endif

/* Record `code` and a printf-style message in `err` (if not NULL); returns code. */
subq_status subq_fail(subq_error *err, subq_status code, const char *fmt, ...) SUBQ_PRINTF(3, 4);

/* Copy the n bytes at s into dst (cap bytes with the NUL) as printable
 * UTF-8: each control byte (below 0x20, 0x7f), byte of a C1 control
 * (U+0080..U+009F) and byte outside a valid UTF-8 sequence becomes the four
 * characters \xNN. Stops before a character or escape that does not fit
 * (dst is always terminated when cap > 0). Returns the bytes of s copied:
 * n when all of it fit. */
size_t text_escape(char *dst, size_t cap, const char *s, size_t n);


#endif
