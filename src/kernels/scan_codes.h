/* Search keys as row-scaled integer codes, for the exact selector's
 * compressed scans: a scan reads 1 (int8) or 1/2 (int4) byte per value plus
 * one f32 scale per row, against 2 or 4 for f16 / f32 keys, and scores a row
 * with a few integer multiply-adds (AVX-512 VNNI: one vpdpbusd per 64 codes,
 * sixteen rows per horizontal sum). The scan only shortlists: its best few
 * hundred slots are re-ranked on the stored keys (select_exact.c).
 *
 * A row x of d values is stored as codes k_c with one scale s:
 *   int8: s = max|x| / 127, k_c = round(x_c / s) (ties to even), dp = d
 *         rounded up to 32, row = dp signed bytes (zeros past d);
 *   int4: s = max|x| / 7,   k_c = round(x_c / s) in [-7, 7], dp = d rounded
 *         up to 64, row = dp / 2 bytes: the values of group g = [64g, 64g+64)
 *         at bytes [32g, 32g + 32), byte 32g + j holding k_{64g+j} + 8 in its
 *         low nibble and k_{64g+32+j} + 8 in its high one.
 * (all-zero rows: s = 0 and zero codes). The query is coded as int8 the same
 * way (scan_query), and a row scores
 *   out = (float)(sum_c q_c k_c) * (s_row * s_q)
 * with the integer sum exact (|sum| < 2^24 for dp <= SCAN_CODES_MAX_D), so
 * every instruction set returns the same bits. */
#ifndef SUBQ_SCAN_CODES_H
#define SUBQ_SCAN_CODES_H

#include <stddef.h>
#include <stdint.h>

#define SCAN_CODES_MAX_D 1024

/* Values per row once padded (dp), and bytes per row of codes; 0 for bits
 * other than 8 and 4 or d outside [1, SCAN_CODES_MAX_D]. */
int scan_codes_width(int bits, int d);
size_t scan_codes_row_bytes(int bits, int d);

/* Codes of the row x[0..d) into row (scan_codes_row_bytes bytes); returns
 * its scale. */
float scan_codes_encode(int bits, const float *x, int d, uint8_t *row);

/* A query coded for a scan: int8 codes of its dp values (zeros past d), its
 * scale, and the sum of its codes (the unsigned forms' offset term). */
typedef struct scan_query {
    int bits, dp;
    int8_t code[SCAN_CODES_MAX_D];
    float scale;
    int32_t sum;
} scan_query;

void scan_codes_query(int bits, const float *q, int d, scan_query *out);

/* out[j] = score of row j of n rows of codes (row_bytes apart from rows,
 * scales in row_scale[j]) against q. */
typedef void (*scan_codes_fn)(const scan_query *q, const uint8_t *rows, const float *row_scale, int n, float *out);

/* The fastest form on this CPU (AVX-512 VNNI, AVX2, portable C), and each
 * form by name for the tests ("avx512", "avx2", "scalar"; NULL where the CPU
 * or the build lacks it). */
scan_codes_fn scan_codes_scores(void);
scan_codes_fn scan_codes_scores_named(const char *name);

#endif
