/* bench_clock.h - what every benchmark here measures with: the monotonic
 * clock in seconds and the median of a run of figures (sorted in place).
 * Header-only: include it in one benchmark program. */
#ifndef CXS_BENCH_CLOCK_H
#define CXS_BENCH_CLOCK_H

#include <stdlib.h>
#include <time.h>

static inline double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static inline int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static inline double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

#endif
