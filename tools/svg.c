/* svg.c - charts as standalone SVG text.  Every chart has a title, both
 * axes with nice ticks and labels, and (for several series) a legend. */
#include "svg.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sb_printf(sbuf *b, const char *fmt, ...) {
    va_list ap;
    for (;;) {
        size_t room = b->cap - b->n;
        va_start(ap, fmt);
        int w = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? room : 0, fmt, ap);
        va_end(ap);
        if (w < 0) return;
        if (b->p && (size_t)w < room) {
            b->n += (size_t)w;
            return;
        }
        size_t nc = b->cap ? b->cap * 2 : 4096;
        while (nc < b->n + (size_t)w + 1) nc *= 2;
        char *np = realloc(b->p, nc);
        if (!np) return;
        b->p = np;
        b->cap = nc;
    }
}

void sb_escape(sbuf *b, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        switch (s[i]) {
        case '<': sb_printf(b, "&lt;"); break;
        case '>': sb_printf(b, "&gt;"); break;
        case '&': sb_printf(b, "&amp;"); break;
        case '"': sb_printf(b, "&quot;"); break;
        default:
            if ((unsigned char)s[i] >= 0x20) sb_printf(b, "%c", s[i]);
        }
    }
}

void sb_free(sbuf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

/* Tick step: 1, 2 or 5 times a power of ten, about `want` ticks. */
static double nice_step(double span, int want) {
    if (!(span > 0)) return 1;
    double raw = span / want, p = pow(10, floor(log10(raw))), f = raw / p;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * p;
}

static void fmt_num(char *out, size_t n, double v, int percent) {
    if (percent) snprintf(out, n, "%g%%", v * 100);
    else if (fabs(v) >= 1e6) snprintf(out, n, "%.3gM", v / 1e6);
    else if (fabs(v) >= 1e4) snprintf(out, n, "%.3gk", v / 1e3);
    else snprintf(out, n, "%g", v);
}

typedef struct frame {
    double W, H, L, R, T, B; /* size and margins */
    double y0, y1;           /* y range */
} frame;

static double py(const frame *f, double y) {
    return f->T + (f->H - f->T - f->B) * (1 - (y - f->y0) / (f->y1 - f->y0));
}

static void begin(sbuf *b, const frame *f, const char *title) {
    sb_printf(b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
                 "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"11\">\n",
              f->W, f->H, f->W, f->H);
    sb_printf(b, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    sb_printf(b, "<text class=\"title\" x=\"%.0f\" y=\"18\" text-anchor=\"middle\" "
                 "font-size=\"14\" font-weight=\"bold\">",
              f->W / 2);
    sb_escape(b, title, strlen(title));
    sb_printf(b, "</text>\n");
}

/* Y axis with grid lines and ticks, x axis line, axis titles. */
static void axes(sbuf *b, const frame *f, const char *xlabel, const char *ylabel, int percent) {
    double step = nice_step(f->y1 - f->y0, 6);
    double x0 = f->L, x1 = f->W - f->R;
    for (double t = ceil(f->y0 / step) * step; t <= f->y1 + step * 1e-9; t += step) {
        char s[32];
        fmt_num(s, sizeof s, fabs(t) < step * 1e-9 ? 0 : t, percent);
        double y = py(f, t);
        sb_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e0e0e0\"/>\n",
                  x0, y, x1, y);
        sb_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n",
                  x0 - 4, y, x0, y);
        sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", x0 - 6, y + 4, s);
    }
    sb_printf(b, "<line class=\"axis\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                 "stroke=\"black\"/>\n",
              x0, f->T, x0, f->H - f->B);
    double ybase = py(f, f->y0 < 0 && f->y1 > 0 ? 0 : f->y0);
    sb_printf(b, "<line class=\"axis\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                 "stroke=\"black\"/>\n",
              x0, ybase, x1, ybase);
    sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"12\">",
              (x0 + x1) / 2, f->H - 6);
    sb_escape(b, xlabel, strlen(xlabel));
    sb_printf(b, "</text>\n<text transform=\"translate(14,%.1f) rotate(-90)\" "
                 "text-anchor=\"middle\" font-size=\"12\">",
              (f->T + f->H - f->B) / 2);
    sb_escape(b, ylabel, strlen(ylabel));
    sb_printf(b, "</text>\n");
}

static void legend(sbuf *b, const frame *f, const series *s, size_t ns) {
    if (ns < 2) return;
    for (size_t i = 0; i < ns; i++) {
        double x = f->W - f->R - 150, y = f->T + 4 + 16 * (double)i;
        sb_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"10\" fill=\"%s\"/>\n", x, y,
                  s[i].color);
        sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\">", x + 16, y + 9);
        sb_escape(b, s[i].name, strlen(s[i].name));
        sb_printf(b, "</text>\n");
    }
}

static void yrange(frame *f, size_t n, const series *s, size_t ns) {
    double lo = 0, hi = 0;
    for (size_t k = 0; k < ns; k++)
        for (size_t i = 0; i < n; i++) {
            double e = s[k].err ? s[k].err[i] : 0;
            if (s[k].y[i] + e > hi) hi = s[k].y[i] + e;
            if (s[k].y[i] - e < lo) lo = s[k].y[i] - e;
        }
    if (hi <= lo) hi = lo + 1;
    double step = nice_step(hi - lo, 6);
    f->y0 = lo < 0 ? floor(lo / step) * step : 0;
    f->y1 = ceil(hi / step) * step;
}

void svg_bars(sbuf *b, const char *title, const char *xlabel, const char *ylabel, size_t n,
              const char *const *names, const series *s, size_t ns, int percent) {
    double slot = n > 30 ? 16 : 24;
    frame f = {fmax(420, 70 + slot * (double)n + 20), 340, 64, 20, 30, 80, 0, 1};
    yrange(&f, n, s, ns);
    begin(b, &f, title);
    axes(b, &f, xlabel, ylabel, percent);
    double bw = slot * 0.8 / (double)ns;
    for (size_t i = 0; i < n; i++) {
        double xc = f.L + slot * ((double)i + 0.5);
        for (size_t k = 0; k < ns; k++) {
            double v = s[k].y[i], x = xc - slot * 0.4 + bw * (double)k;
            double ya = py(&f, v > 0 ? v : 0), yb = py(&f, v > 0 ? 0 : v);
            if (f.y0 < 0 && v > 0) yb = py(&f, 0);
            sb_printf(b, "<rect class=\"bar\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                         "fill=\"%s\"><title>",
                      x, ya, bw, fmax(yb - ya, 0.5), s[k].color);
            sb_escape(b, names[i], strlen(names[i]));
            sb_printf(b, " %s: %g</title></rect>\n", s[k].name ? s[k].name : "", v);
            if (s[k].err) {
                double e = s[k].err[i], xm = x + bw / 2;
                sb_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>\n",
                          xm, py(&f, v - e), xm, py(&f, v + e));
            }
        }
        double ty = f.H - f.B + 12;
        sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" transform=\"rotate(-60 %.1f "
                     "%.1f)\">",
                  xc + 3, ty, xc + 3, ty);
        sb_escape(b, names[i], strlen(names[i]));
        sb_printf(b, "</text>\n");
    }
    legend(b, &f, s, ns);
    sb_printf(b, "</svg>\n");
}

void svg_histogram(sbuf *b, const char *title, const char *xlabel, const char *ylabel, double x0,
                   double x1, size_t nb, const series *s, size_t ns) {
    frame f = {640, 320, 64, 20, 30, 50, 0, 1};
    yrange(&f, nb, s, ns);
    begin(b, &f, title);
    axes(b, &f, xlabel, ylabel, 0);
    double pw = f.W - f.L - f.R, bw = pw / (double)nb;
    /* numeric x ticks */
    double step = nice_step(x1 - x0, 8);
    for (double t = ceil(x0 / step) * step; t <= x1 + 1e-9; t += step) {
        double x = f.L + pw * (t - x0) / (x1 - x0);
        sb_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n", x,
                  f.H - f.B, x, f.H - f.B + 4);
        sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n", x,
                  f.H - f.B + 16, t);
    }
    for (size_t k = 0; k < ns; k++)
        for (size_t i = 0; i < nb; i++) {
            double ya = py(&f, s[k].y[i]);
            sb_printf(b, "<rect class=\"bar\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                         "fill=\"%s\" fill-opacity=\"%s\"><title>%g..%g: %g</title></rect>\n",
                      f.L + bw * (double)i, ya, fmax(bw - 1, 0.5), fmax(py(&f, 0) - ya, 0),
                      s[k].color, ns > 1 ? "0.5" : "1", x0 + (x1 - x0) * (double)i / (double)nb,
                      x0 + (x1 - x0) * (double)(i + 1) / (double)nb, s[k].y[i]);
        }
    legend(b, &f, s, ns);
    sb_printf(b, "</svg>\n");
}

static void colour(double t, char *out, size_t n) { /* t in [-1, 1]: blue - white - red */
    if (t > 1) t = 1;
    if (t < -1) t = -1;
    int r, g, bl;
    if (t >= 0) {
        r = 255;
        g = bl = (int)(255 * (1 - t));
    } else {
        bl = 255;
        r = g = (int)(255 * (1 + t));
    }
    snprintf(out, n, "#%02x%02x%02x", r, g, bl);
}

void svg_heatmap(sbuf *b, const char *title, const float *v, size_t rows, size_t cols, double lo,
                 double hi, const char *const *col_labels, const char *xlabel, const char *ylabel) {
    double cw = cols > 600 ? 1 : cols > 300 ? 2 : 3, rh = 8;
    frame f = {fmax(360, 64 + cw * (double)cols + 30), 30 + rh * (double)rows + 90, 64, 30, 30, 90,
               0, (double)rows};
    begin(b, &f, title);
    double mid = (lo + hi) / 2, half = (hi - lo) / 2 > 0 ? (hi - lo) / 2 : 1;
    char c[16];
    sb_printf(b, "<g class=\"heat\">\n");
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < cols; j++) {
            colour((v[j * rows + r] - mid) / half, c, sizeof c);
            sb_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"/>\n",
                      f.L + cw * (double)j, f.T + rh * (double)r, cw, rh, c);
        }
    sb_printf(b, "</g>\n");
    /* axes: dimension ticks every 4 rows, time ticks every 50 frames */
    for (size_t r = 0; r < rows; r += 4)
        sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" font-size=\"9\">%zu</text>\n",
                  f.L - 4, f.T + rh * ((double)r + 0.8), r);
    double ybot = f.T + rh * (double)rows;
    for (size_t j = 0; j <= cols; j += 50)
        sb_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>"
                     "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"9\">%zu</text>\n",
                  f.L + cw * (double)j, ybot, f.L + cw * (double)j, ybot + 4, f.L + cw * (double)j,
                  ybot + 14, j);
    /* label strip: alternating shades per phoneme run, names where they fit */
    double ys = ybot + 20;
    size_t start = 0;
    int shade = 0;
    for (size_t j = 1; j <= cols; j++) {
        if (j < cols && strcmp(col_labels[j], col_labels[start]) == 0) continue;
        double x = f.L + cw * (double)start, w = cw * (double)(j - start);
        sb_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"14\" fill=\"%s\"><title>",
                  x, ys, w, shade ? "#dde7f3" : "#f3e7dd");
        sb_escape(b, col_labels[start], strlen(col_labels[start]));
        sb_printf(b, " (frames %zu..%zu)</title></rect>\n", start, j - 1);
        if (w >= 7.0 * (double)strlen(col_labels[start])) {
            sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"9\">",
                      x + w / 2, ys + 10);
            sb_escape(b, col_labels[start], strlen(col_labels[start]));
            sb_printf(b, "</text>\n");
        }
        shade ^= 1;
        start = j;
    }
    sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"12\">",
              f.L + cw * (double)cols / 2, f.H - 30);
    sb_escape(b, xlabel, strlen(xlabel));
    sb_printf(b, "</text>\n<text transform=\"translate(14,%.1f) rotate(-90)\" "
                 "text-anchor=\"middle\" font-size=\"12\">",
              f.T + rh * (double)rows / 2);
    sb_escape(b, ylabel, strlen(ylabel));
    sb_printf(b, "</text>\n");
    /* colour scale */
    double lx = f.L, ly = f.H - 22;
    for (int i = 0; i < 50; i++) {
        colour(-1 + 2.0 * i / 49, c, sizeof c);
        sb_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"3\" height=\"8\" fill=\"%s\"/>", lx + 3 * i,
                  ly, c);
    }
    sb_printf(b, "\n<text x=\"%.1f\" y=\"%.1f\" font-size=\"9\">%.3g</text><text x=\"%.1f\" "
                 "y=\"%.1f\" font-size=\"9\" text-anchor=\"end\">%.3g</text>\n",
              lx, ly + 18, lo, lx + 150, ly + 18, hi);
    sb_printf(b, "</svg>\n");
}
