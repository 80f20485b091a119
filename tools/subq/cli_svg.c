#include "subq_lab.h"
#include "cli_svg.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
                                "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};


static void put_text(FILE *f, const char *s) {
    for (; s && *s; s++) {
        if (*s == '&') fputs("&amp;", f);
        else if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else fputc(*s, f);
    }
}

/* A chart is drawn in memory, then written by subq_write_file (atomically,
 * never through a symbolic link): a reader never sees half a chart. */
typedef struct svg_buf {
    char *data;
    size_t len;
} svg_buf;

static FILE *svg_open(svg_buf *b, subq_error *err) {
    b->data = NULL, b->len = 0;
    FILE *f = open_memstream(&b->data, &b->len);
    if (!f) {
        snprintf(err->msg, sizeof err->msg, "out of memory drawing a chart");
        err->code = SUBQ_ERR_NOMEM;
    }
    return f;
}

static subq_status svg_commit(FILE *f, svg_buf *b, const char *path, subq_error *err) {
    int bad = ferror(f);
    bad |= fclose(f) != 0;
    subq_status s = bad ? SUBQ_ERR_NOMEM : subq_write_file(path, b->data, b->len, err);
    if (bad) {
        snprintf(err->msg, sizeof err->msg, "%.400s: out of memory drawing the chart", path);
        err->code = s;
    }
    free(b->data);
    return s;
}

/* red (0) -> yellow (0.5) -> green (1), as in the usual NIAH plots */
static void colour(double v, int rgb[3]) {
    if (!(v >= 0)) v = 0;
    if (v > 1) v = 1;
    if (v < 0.5) {
        double t = v / 0.5;
        rgb[0] = 215, rgb[1] = (int)(48 + t * (220 - 48)), rgb[2] = 39;
    } else {
        double t = (v - 0.5) / 0.5;
        rgb[0] = (int)(215 - t * (215 - 26)), rgb[1] = (int)(220 - t * (220 - 152)), rgb[2] = (int)(39 + t * (80 - 39));
    }
}

subq_status cli_svg_heatmap(const char *path, const char *title, const char *x_label, const char *y_label,
                            const int *rows, int n_rows, const double *cols, int n_cols, const double *values,
                            subq_error *err) {
    const int L = 110, T = 50, R = 20, B = 60, cw = n_cols > 12 ? 40 : 56, ch = 34;
    const int W = L + n_cols * cw + R, H = T + n_rows * ch + B;
    svg_buf b;
    FILE *f = svg_open(&b, err);
    if (!f) return err->code;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\">\n", W, H);
    fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n<text x=\"%d\" y=\"24\" font-size=\"14\">", W, H, L);
    put_text(f, title);
    fprintf(f, "</text>\n");
    for (int r = 0; r < n_rows; r++) {
        int y = T + r * ch;
        fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"12\" text-anchor=\"end\">%d</text>\n", L - 8, y + ch / 2 + 4,
                rows[r]);
        for (int c = 0; c < n_cols; c++) {
            int rgb[3], x = L + c * cw;
            double v = values[r * n_cols + c];
            colour(v, rgb);
            fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"rgb(%d,%d,%d)\" stroke=\"white\"/>\n", x, y,
                    cw, ch, rgb[0], rgb[1], rgb[2]);
            fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"11\" text-anchor=\"middle\">%.2f</text>\n", x + cw / 2,
                    y + ch / 2 + 4, v);
        }
    }
    for (int c = 0; c < n_cols; c++)
        fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"11\" text-anchor=\"middle\">%g</text>\n", L + c * cw + cw / 2,
                T + n_rows * ch + 16, cols[c]);
    fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"12\" text-anchor=\"middle\">", L + n_cols * cw / 2, H - 14);
    put_text(f, x_label);
    fprintf(f, "</text>\n<text x=\"16\" y=\"%d\" font-size=\"12\" text-anchor=\"middle\" transform=\"rotate(-90 16 %d)\">",
            T + n_rows * ch / 2, T + n_rows * ch / 2);
    put_text(f, y_label);
    fprintf(f, "</text>\n</svg>\n");
    return svg_commit(f, &b, path, err);
}

subq_status svg_write_line_chart(const svg_chart *c, const char *path, subq_error *err) {
    const double W = 640, H = 400, L = 70, R = 150, T = 40, B = 50;
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    for (int s = 0; s < c->n_series; s++)
        for (int i = 0; i < c->series[s].n; i++) {
            double x = c->log_x ? log2(c->series[s].x[i]) : c->series[s].x[i];
            double y = c->log_y ? log10(c->series[s].y[i]) : c->series[s].y[i];
            if (!isfinite(x) || !isfinite(y)) continue;
            x0 = fmin(x0, x), x1 = fmax(x1, x), y0 = fmin(y0, y), y1 = fmax(y1, y);
        }
    if (!(x1 >= x0) || !(y1 >= y0)) x0 = 0, x1 = 1, y0 = 0, y1 = 1;
    if (x1 == x0) x1 = x0 + 1;
    if (y1 == y0) y1 = y0 + 1;
    double pad = 0.05 * (y1 - y0);
    y0 -= pad, y1 += pad;
    svg_buf b;
    FILE *f = svg_open(&b, err);
    if (!f) return err->code;
#define PX(x) (L + ((c->log_x ? log2(x) : (x)) - x0) / (x1 - x0) * (W - L - R))
#define PY(y) (H - B - ((c->log_y ? log10(y) : (y)) - y0) / (y1 - y0) * (H - T - B))
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" "
               "font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n", W, H);
    fprintf(f, "<text x=\"%.0f\" y=\"22\" font-size=\"15\">", L);
    put_text(f, c->title);
    fprintf(f, "</text>\n<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n", L, H - B, W - R, H - B);
    fprintf(f, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n", L, T, L, H - B);
    /* y ticks: 5 evenly spaced values */
    for (int i = 0; i <= 4; i++) {
        double y = y0 + (y1 - y0) * i / 4;
        if (c->log_y) y = pow(10, y);
        fprintf(f, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">%.4g</text>\n", L - 6, PY(y) + 4, y);
        fprintf(f, "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", L, PY(y), W - R, PY(y));
    }
    /* x ticks at the first series' points */
    if (c->n_series > 0)
        for (int i = 0; i < c->series[0].n; i++) {
            double x = c->series[0].x[i];
            fprintf(f, "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\">%g</text>\n", PX(x), H - B + 16, x);
        }
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">", (L + W - R) / 2, H - 12);
    put_text(f, c->x_label);
    fprintf(f, "</text>\n<text x=\"16\" y=\"%.0f\" transform=\"rotate(-90 16 %.0f)\" text-anchor=\"middle\">",
            (T + H - B) / 2, (T + H - B) / 2);
    put_text(f, c->y_label);
    fprintf(f, "</text>\n");
    for (int s = 0; s < c->n_series; s++) {
        const svg_series *se = &c->series[s];
        const char *col = palette[s % 10];
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", col);
        for (int i = 0; i < se->n; i++)
            if (isfinite(PY(se->y[i]))) fprintf(f, "%.1f,%.1f ", PX(se->x[i]), PY(se->y[i]));
        fprintf(f, "\"/>\n");
        for (int i = 0; i < se->n; i++)
            if (isfinite(PY(se->y[i])))
                fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", PX(se->x[i]), PY(se->y[i]), col);
        fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" fill=\"%s\">", W - R + 10, T + 16.0 * s + 10, col);
        put_text(f, se->name);
        fprintf(f, "</text>\n");
    }
#undef PX
#undef PY
    fprintf(f, "</svg>\n");
    return svg_commit(f, &b, path, err);
}
