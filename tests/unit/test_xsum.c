/* Exact summation: the statistics must not depend on the order of adds. */
#include <math.h>

#include "cxs_test.h"
#include "cxs_xsum.h"

TEST(exact) {
    cxs_xsum s = {0};
    cxs_xsum_add(&s, 1e100);
    cxs_xsum_add(&s, 1.0);
    cxs_xsum_add(&s, -1e100);
    EXPECT(cxs_xsum_value(&s) == 1.0);
    cxs_xsum t = {0};
    for (int i = 0; i < 10; i++) cxs_xsum_add(&t, 0.1);
    EXPECT(cxs_xsum_value(&t) == 1.0); /* naive summation gives 0.9999999999999999 */
}
END_TEST_

TEST(order_independent) {
    double v[1000];
    uint64_t x = 12345;
    for (int i = 0; i < 1000; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        v[i] = ldexp((double)(x >> 11), (int)(x % 80) - 90) * ((x >> 7) & 1 ? -1 : 1);
    }
    cxs_xsum a = {0}, b = {0}, c = {0}, d = {0};
    for (int i = 0; i < 1000; i++) cxs_xsum_add(&a, v[i]);
    for (int i = 999; i >= 0; i--) cxs_xsum_add(&b, v[i]);
    for (int i = 0; i < 1000; i += 2) cxs_xsum_add(&c, v[i]);
    for (int i = 1; i < 1000; i += 2) cxs_xsum_add(&d, v[i]);
    /* merge: c + d's partials */
    for (int i = 0; i < d.n; i++) cxs_xsum_add(&c, d.p[i]);
    EXPECT(cxs_xsum_value(&a) == cxs_xsum_value(&b));
    EXPECT(cxs_xsum_value(&a) == cxs_xsum_value(&c));
}
END_TEST_

TEST(half_way_rounding) {
    cxs_xsum s = {0};
    /* 1 + 2^-53 + 2^-106: above the tie, must round up to 1 + 2^-52. */
    cxs_xsum_add(&s, 1.0);
    cxs_xsum_add(&s, ldexp(1, -53));
    cxs_xsum_add(&s, ldexp(1, -106));
    EXPECT(cxs_xsum_value(&s) == 1.0 + ldexp(1, -52));
}
END_TEST_

RUN_SUITE("cxs_xsum", exact, order_independent, half_way_rounding)
