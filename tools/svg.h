/* svg.h - small standalone SVG charts (axes, ticks, labels) for reports. */
#ifndef CXS_TOOL_SVG_H
#define CXS_TOOL_SVG_H

#include <stddef.h>

typedef struct sbuf {
    char *p;
    size_t n, cap;
} sbuf;

void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Append text escaped for XML/HTML. */
void sb_escape(sbuf *b, const char *s, size_t n);
void sb_free(sbuf *b);

/* One data series of a chart. */
typedef struct series {
    const char *name;
    const double *y;   /* n values */
    const double *err; /* n error half-widths, or NULL */
    const char *color;
} series;

/*
 * A bar chart of n categories (category names under the x axis, rotated
 * when many) with one or more series side by side; y axis from 0 (or from
 * the data's minimum when negative values exist), nice ticks, titles.
 */
void svg_bars(sbuf *b, const char *title, const char *xlabel, const char *ylabel, size_t n,
              const char *const *names, const series *s, size_t ns, int percent);

/*
 * A histogram: nb bins of equal width from x0 to x1 (numeric x axis), one
 * or more series drawn as overlaid outlines/bars.
 */
void svg_histogram(sbuf *b, const char *title, const char *xlabel, const char *ylabel, double x0,
                   double x1, size_t nb, const series *s, size_t ns);

/*
 * A heatmap of rows x cols values (row-major, time along x), colour scale
 * from lo to hi (blue - white - red), with a label strip under it: labels
 * per column (segment names written where a run is wide enough).
 */
void svg_heatmap(sbuf *b, const char *title, const float *v, size_t rows, size_t cols, double lo,
                 double hi, const char *const *col_labels, const char *xlabel, const char *ylabel);

#endif
