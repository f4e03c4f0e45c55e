/* cxs_xsum.h - exact summation of doubles (Shewchuk's non-overlapping
 * partials, as in Python's math.fsum).  The rounded result does not depend
 * on the order of the additions, which keeps the stored statistics
 * independent of thread count and of how the input was split. */
#ifndef CXS_XSUM_H
#define CXS_XSUM_H

typedef struct cxs_xsum {
    int n;
    double p[48]; /* 2098 bits of exponent range / 53 bits per partial < 48 */
} cxs_xsum;

void cxs_xsum_add(cxs_xsum *s, double x);
/* The exact sum rounded once to the nearest double. */
double cxs_xsum_value(const cxs_xsum *s);

#endif
