#include "cxs_xsum.h"

#include <math.h>

void cxs_xsum_add(cxs_xsum *s, double x) {
    int i = 0;
    for (int j = 0; j < s->n; j++) {
        double y = s->p[j];
        if (fabs(x) < fabs(y)) {
            double t = x;
            x = y;
            y = t;
        }
        double hi = x + y;
        double lo = y - (hi - x);
        if (lo != 0.0) s->p[i++] = lo;
        x = hi;
    }
    s->p[i++] = x;
    s->n = i;
}

double cxs_xsum_value(const cxs_xsum *s) {
    int n = s->n;
    if (n == 0) return 0.0;
    double hi = s->p[--n], lo = 0.0;
    while (n > 0) {
        double x = hi, y = s->p[--n];
        hi = x + y;
        double yr = hi - x;
        lo = y - yr;
        if (lo != 0.0) break;
    }
    /* Round half-way cases correctly using the sign of the next partial. */
    if (n > 0 && ((lo < 0 && s->p[n - 1] < 0) || (lo > 0 && s->p[n - 1] > 0))) {
        double y = lo * 2;
        double x = hi + y;
        if (y == x - hi) hi = x;
    }
    return hi;
}
