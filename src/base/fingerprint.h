/* The text form of a 64-bit model fingerprint (model_fingerprint()) as
 * stored in the metadata of files derived from a model: 16 hex digits. */
#ifndef SUBQ_BASE_FINGERPRINT_H
#define SUBQ_BASE_FINGERPRINT_H

#include <stdint.h>

/* "%016llx" of fp into buf (>= 17 bytes). */
void fingerprint_hex(uint64_t fp, char *buf);
/* The inverse: exactly 16 hex digits -> *fp; 0 on malformed input. */
int fingerprint_parse(const char *s, uint64_t *fp);

#endif
