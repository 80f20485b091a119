/* Progress bar on stderr, drawn only when stderr is a terminal. */
#ifndef SUBQ_CLI_PROGRESS_H
#define SUBQ_CLI_PROGRESS_H

#include <stdint.h>

typedef struct progress {
    const char *label;
    int64_t total;
    int enabled;
    double t_start, t_last_draw;
} progress;

void progress_begin(progress *p, const char *label, int64_t total);
/* `extra` (may be NULL) is printed after the bar, e.g. "ppl 12.3". */
void progress_update(progress *p, int64_t done, const char *extra);
void progress_end(progress *p);

#endif
