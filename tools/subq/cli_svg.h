/* SVG charts of the CLI: line charts for sweeps (K on x, a metric on y, one
 * line per series) and heat maps for grids (recall: length x depth). Both
 * are written atomically (subq_write_file), replacing an existing chart: the
 * commands check their outputs (--force) before any work. */
#ifndef SUBQ_CLI_SVG_H
#define SUBQ_CLI_SVG_H

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
    int log_y;                 /* log10 y axis (times over lengths: slopes are exponents) */
    int n_series;
    svg_series series[SVG_MAX_SERIES];
} svg_chart;


subq_status svg_write_line_chart(const svg_chart *c, const char *path, subq_error *err);

/* values[r * n_cols + c] in [0, 1], one row per `rows` label (ints) and one
 * column per `cols` label (fractions); cells coloured from red (0) through
 * yellow to green (1), each with its value printed. Written atomically. */
subq_status cli_svg_heatmap(const char *path, const char *title, const char *x_label, const char *y_label,
                            const int *rows, int n_rows, const double *cols, int n_cols, const double *values,
                            subq_error *err);

#endif
