/* The one JSON task training data needs: pull the top-level "text" string out
 * of a JSON-lines record ({"text": "...", ...}), with every JSON escape
 * decoded to UTF-8. Other members are skipped whatever their type. */
#ifndef SUBQ_DATA_JSONL_H
#define SUBQ_DATA_JSONL_H

#include <stddef.h>

#include "subq.h"

/* Parse one line holding a JSON object. On success *out is a malloc'd
 * NUL-terminated UTF-8 string (or NULL with *found = 0 when the object has no
 * "text" member). Malformed JSON or a non-string "text" gives
 * SUBQ_ERR_FORMAT with the byte column. */
subq_status jsonl_text(const char *line, size_t len, char **out, size_t *out_len, int *found, subq_error *err);

#endif
