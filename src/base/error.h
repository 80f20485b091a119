/* Error reporting helpers: every failing call fills a subq_error. */
#ifndef SUBQ_BASE_ERROR_H
#define SUBQ_BASE_ERROR_H

#include "subq.h"

#if defined(__GNUC__)
#define SUBQ_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define SUBQ_PRINTF(a, b)
#endif

/* Record `code` and a printf-style message in `err` (if not NULL); returns code. */
subq_status subq_fail(subq_error *err, subq_status code, const char *fmt, ...) SUBQ_PRINTF(3, 4);

/* Clear an error record. */
void subq_error_clear(subq_error *err);

#endif
