/* Fingerprints: the hash they are made with, and the text form of a 64-bit
 * model fingerprint (model_fingerprint()) as stored in the metadata of
 * files derived from a model: 16 hex digits. */
#ifndef SUBQ_BASE_FINGERPRINT_H
#define SUBQ_BASE_FINGERPRINT_H

#include <stddef.h>
#include <stdint.h>

/* FNV-1a: the hash behind every fingerprint (models, corpora, projections,
 * maps, file headers). Start from FNV_OFFSET; chain calls to hash more. */
#define FNV_OFFSET 0xCBF29CE484222325ull
uint64_t fnv1a(uint64_t h, const void *data, size_t n);

/* 1 for tensors a model file may carry that are not the model's weights:
 * learned search projections merged in (blk.N.indexer.*, see
 * search/search_merge.c). The fingerprint leaves them out, so merging
 * projections into a model keeps its identity. */
int fingerprint_skips_tensor(const char *name);

/* "%016llx" of fp into buf (>= 17 bytes). */
void fingerprint_hex(uint64_t fp, char *buf);
/* The inverse: exactly 16 hex digits -> *fp; 0 on malformed input. */
int fingerprint_parse(const char *s, uint64_t *fp);

#endif
