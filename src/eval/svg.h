/* Minimal SVG line charts for sweeps (K on x, a metric on y, one line per
 * series), written atomically. */
#ifndef SUBQ_SVG_H
#define SUBQ_SVG_H

#include "subq.h"

#define SVG_MAX_SERIES 16
#define SVG_MAX_POINTS 64

typedef struct svg_series {
    const char *name;
    int n;
    double x[SVG_MAX_POINTS], y[SVG_MAX_POINTS];
} svg_series;

typedef struct svg_chart {
    const char *title, *x_label, *y_label;
    int log_x;                 /* log2 x axis (K sweeps) */
    int n_series;
    svg_series series[SVG_MAX_SERIES];
} svg_chart;

subq_status svg_write_line_chart(const svg_chart *c, const char *path, subq_error *err);

#endif
