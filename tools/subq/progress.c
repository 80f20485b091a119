#define _POSIX_C_SOURCE 200809L
#include "progress.h"

#include <stdio.h>
#include <unistd.h>

#include "cli.h"

void progress_begin(progress *p, const char *label, int64_t total) {
    p->label = label;
    p->total = total > 0 ? total : 1;
    p->enabled = isatty(fileno(stderr));
    p->t_start = cli_now_s();
    p->t_last_draw = 0;
}

void progress_update(progress *p, int64_t done, const char *extra) {
    if (!p->enabled) return;
    double now = cli_now_s();
    if (done < p->total && now - p->t_last_draw < 0.1) return; /* redraw at most 10x/s */
    p->t_last_draw = now;
    const int width = 30;
    int filled = (int)(width * (double)done / (double)p->total);
    if (filled > width) filled = width;
    char bar[64];
    for (int i = 0; i < width; i++) bar[i] = i < filled ? '#' : '.';
    bar[width] = '\0';
    double el = now - p->t_start;
    double eta = done > 0 ? el * (double)(p->total - done) / (double)done : 0;
    fprintf(stderr, "\r%s [%s] %lld/%lld %.0fs eta %.0fs %s\033[K", p->label, bar, (long long)done,
            (long long)p->total, el, eta, extra ? extra : "");
    fflush(stderr);
}

void progress_end(progress *p) {
    if (!p->enabled) return;
    fprintf(stderr, "\n");
}
