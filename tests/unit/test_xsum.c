/* Exact summation: the statistics must not depend on the order of adds. */
#include <math.h>

#include "cxs_test.h"
#include "xsum.h"

TEST(exact) {
    xsum s = {0};
    xsum_add(&s, 1e100);
    xsum_add(&s, 1.0);
    xsum_add(&s, -1e100);
    EXPECT(xsum_value(&s) == 1.0);
    xsum t = {0};
    for (int i = 0; i < 10; i++) xsum_add(&t, 0.1);
    EXPECT(xsum_value(&t) == 1.0); /* naive summation gives 0.9999999999999999 */
}
END_TEST_

TEST(order_independent) {
    double v[1000];
    uint64_t x = 12345;
    for (int i = 0; i < 1000; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        v[i] = ldexp((double)(x >> 11), (int)(x % 80) - 90) * ((x >> 7) & 1 ? -1 : 1);
    }
    xsum a = {0}, b = {0}, c = {0}, d = {0};
    for (int i = 0; i < 1000; i++) xsum_add(&a, v[i]);
    for (int i = 999; i >= 0; i--) xsum_add(&b, v[i]);
    for (int i = 0; i < 1000; i += 2) xsum_add(&c, v[i]);
    for (int i = 1; i < 1000; i += 2) xsum_add(&d, v[i]);
    /* merge: c + d's partials */
    for (int i = 0; i < d.n; i++) xsum_add(&c, d.p[i]);
    EXPECT(xsum_value(&a) == xsum_value(&b));
    EXPECT(xsum_value(&a) == xsum_value(&c));
}
END_TEST_

TEST(half_way_rounding) {
    xsum s = {0};
    /* 1 + 2^-53 + 2^-106: above the tie, must round up to 1 + 2^-52. */
    xsum_add(&s, 1.0);
    xsum_add(&s, ldexp(1, -53));
    xsum_add(&s, ldexp(1, -106));
    EXPECT(xsum_value(&s) == 1.0 + ldexp(1, -52));
}
END_TEST_

RUN_SUITE("xsum", exact, order_independent, half_way_rounding)
