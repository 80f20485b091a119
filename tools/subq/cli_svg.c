#include "cli_svg.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static void put_text(FILE *f, const char *s) {
    for (; s && *s; s++) {
        if (*s == '&') fputs("&amp;", f);
        else if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else fputc(*s, f);
    }
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
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        snprintf(err->msg, sizeof err->msg, "cannot write %.400s: %s", tmp, strerror(errno));
        return err->code = SUBQ_ERR_IO;
    }
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
    int bad = ferror(f);
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
        remove(tmp);
        snprintf(err->msg, sizeof err->msg, "cannot write %.400s", path);
        return err->code = SUBQ_ERR_IO;
    }
    return SUBQ_OK;
}
