/* SVG heat maps for the CLI's grids (recall: prompt length x needle depth). */
#ifndef SUBQ_CLI_SVG_H
#define SUBQ_CLI_SVG_H

#include "subq.h"

/* values[r * n_cols + c] in [0, 1], one row per `rows` label (ints) and one
 * column per `cols` label (fractions); cells coloured from red (0) through
 * yellow to green (1), each with its value printed. Written atomically. */
subq_status cli_svg_heatmap(const char *path, const char *title, const char *x_label, const char *y_label,
                            const int *rows, int n_rows, const double *cols, int n_cols, const double *values,
                            subq_error *err);

#endif
