/* float16 / bfloat16 conversions: round to nearest even, edge cases. */
#include <math.h>
#include <string.h>

#include "cxs_convert.h"
#include "cxs_test.h"

static double f16val(uint16_t h) { return cxs_f16_to_f32(h); }

TEST(f16_exact_and_ties) {
    EXPECT_UINT(cxs_to_f16(0.0), 0x0000);
    EXPECT_UINT(cxs_to_f16(-0.0), 0x8000);
    EXPECT_UINT(cxs_to_f16(1.0), 0x3c00);
    EXPECT_UINT(cxs_to_f16(-2.0), 0xc000);
    EXPECT_UINT(cxs_to_f16(65504.0), 0x7bff); /* largest finite */
    /* 1 + 2^-11 is half-way between 1 and 1+2^-10: ties to even (1.0). */
    EXPECT_UINT(cxs_to_f16(1.0 + ldexp(1, -11)), 0x3c00);
    /* 1 + 3*2^-11 is half-way between 1+2^-10 (odd) and 1+2^-9: up. */
    EXPECT_UINT(cxs_to_f16(1.0 + 3 * ldexp(1, -11)), 0x3c02);
    /* Just above half-way rounds up even from an even neighbour. */
    EXPECT_UINT(cxs_to_f16(1.0 + ldexp(1, -11) + ldexp(1, -30)), 0x3c01);
}
END_TEST_

TEST(f16_overflow) {
    /* 65520 is half-way between 65504 and 65536 (=inf): ties to even -> inf. */
    EXPECT_UINT(cxs_to_f16(65520.0), 0x7c00);
    EXPECT_UINT(cxs_to_f16(65519.99), 0x7bff);
    EXPECT_UINT(cxs_to_f16(-1e10), 0xfc00);
    EXPECT_UINT(cxs_to_f16(INFINITY), 0x7c00);
    EXPECT_UINT(cxs_to_f16(-INFINITY), 0xfc00);
}
END_TEST_

TEST(f16_subnormals) {
    EXPECT_UINT(cxs_to_f16(ldexp(1, -24)), 0x0001);          /* smallest subnormal */
    EXPECT_UINT(cxs_to_f16(ldexp(1, -25)), 0x0000);          /* tie -> even (0) */
    EXPECT_UINT(cxs_to_f16(3 * ldexp(1, -25)), 0x0002);      /* tie -> even (2) */
    EXPECT_UINT(cxs_to_f16(ldexp(1, -25) * 1.0001), 0x0001); /* above the tie */
    EXPECT_UINT(cxs_to_f16(-ldexp(1, -24)), 0x8001);
    EXPECT_UINT(cxs_to_f16(ldexp(1023, -24)), 0x03ff); /* largest subnormal */
    /* Rounding the largest subnormal up carries into the smallest normal. */
    EXPECT_UINT(cxs_to_f16(ldexp(1023.5, -24)), 0x0400);
    EXPECT_UINT(cxs_to_f16(1e-300), 0x0000);
    EXPECT_UINT(cxs_to_f16(4.9e-324), 0x0000); /* double subnormal */
}
END_TEST_

TEST(f16_nan_payload) {
    uint64_t b = 0x7ff8000000000000ull | (0x155ull << 42); /* quiet NaN, payload */
    double x;
    memcpy(&x, &b, 8);
    uint16_t h = cxs_to_f16(x);
    EXPECT_UINT(h & 0x7c00, 0x7c00);
    EXPECT(h & 0x3ff);
    EXPECT_UINT(h & 0x3ff, 0x200 | (0x155 & 0x3ff)); /* top payload bits kept */
    /* A signalling NaN whose payload lies below the kept bits stays NaN. */
    b = 0x7ff0000000000001ull;
    memcpy(&x, &b, 8);
    h = cxs_to_f16(x);
    EXPECT((h & 0x7c00) == 0x7c00 && (h & 0x3ff));
    EXPECT(isnan(f16val(h)));
}
END_TEST_

TEST(f16_all_values_round_trip) {
    for (uint32_t h = 0; h < 65536; h++) {
        double v = f16val((uint16_t)h);
        if (isnan(v)) continue;
        EXPECT_UINT(cxs_to_f16(v), h);
    }
}
END_TEST_

TEST(bf16_rounding) {
    EXPECT_UINT(cxs_to_bf16(1.0), 0x3f80);
    EXPECT_UINT(cxs_to_bf16(1.0 + ldexp(1, -8)), 0x3f80);     /* tie -> even */
    EXPECT_UINT(cxs_to_bf16(1.0 + 3 * ldexp(1, -8)), 0x3f82); /* tie -> even (up) */
    EXPECT_UINT(cxs_to_bf16(3.4e38), 0x7f80);                 /* rounds past max -> inf */
    EXPECT_UINT(cxs_to_bf16(3.38e38), 0x7f7e);
    EXPECT_UINT(cxs_to_bf16(ldexp(1, -133)), 0x0001); /* smallest subnormal */
    EXPECT_UINT(cxs_to_bf16(ldexp(1, -134)), 0x0000); /* tie -> even */
    EXPECT_UINT(cxs_to_bf16(-INFINITY), 0xff80);
    EXPECT(isnan(cxs_bf16_to_f32(cxs_to_bf16(NAN))));
    for (uint32_t h = 0; h < 65536; h++) {
        float v = cxs_bf16_to_f32((uint16_t)h);
        if (isnan(v)) continue;
        EXPECT_UINT(cxs_to_bf16(v), h);
    }
}
END_TEST_

TEST(no_double_rounding) {
    /* 1 + 2^-8 + 2^-30 is just above a bfloat16 tie; through float32 it
     * would first round to the tie and then to even (1.0). */
    EXPECT_UINT(cxs_to_bf16(1.0 + ldexp(1, -8) + ldexp(1, -30)), 0x3f81);
    float f = cxs_to_f32(1.0 + ldexp(1, -24));
    EXPECT(f == 1.0f);
    EXPECT(cxs_to_f32(1e39) == INFINITY);
}
END_TEST_

/* The conversions on a float's bits (the writer's fast path) give what
 * the conversions from the double give, for finite floats: every 61st bit
 * pattern (all 2^32 were checked once, when this path was written)
 * and every pattern near the boundaries (float16's overflow at 65520, its
 * subnormals below 2^-14, zero, bfloat16's largest). */
static void bits_agree(uint32_t b) {
    if ((b & 0x7f800000u) == 0x7f800000u) return;
    float f;
    memcpy(&f, &b, 4);
    uint16_t h = cxs_f32_bits_to_f16(b);
    EXPECT_LOOP(h == cxs_to_f16((double)f));
    EXPECT_LOOP(cxs_f32_bits_to_bf16(b) == cxs_to_bf16((double)f));
    if ((h & 0x7c00u) != 0x7c00u) {
        float a = cxs_f16_finite_to_f32(h), c = cxs_f16_to_f32(h);
        EXPECT_LOOP(!memcmp(&a, &c, 4));
    }
}

TEST(float_bits_conversions_agree) {
    for (uint64_t i = 0; i < (1ull << 32); i += 61) bits_agree((uint32_t)i);
    const uint32_t edges[] = {0x00000000u, 0x477fe000u, 0x477ff000u, 0x47800000u, 0x38800000u,
                              0x33000000u, 0x33800000u, 0x387fc000u, 0x7f7f8000u, 0x7f7fffffu};
    for (size_t k = 0; k < sizeof edges / sizeof *edges; k++)
        for (uint32_t j = 0; j < 8192; j++) {
            bits_agree(edges[k] + j - 4096);
            bits_agree((edges[k] + j - 4096) | 0x80000000u);
        }
}
END_TEST_

int main(void) {
    const TTest *const quick[] = {f16_exact_and_ties, f16_overflow, f16_subnormals,
                                  f16_nan_payload, f16_all_values_round_trip,
                                  bf16_rounding, no_double_rounding};
    /* 70 million patterns: about 4 s in a plain build, several times that
     * under the sanitizers or on a loaded machine; a watchdog, not a
     * measure of speed */
    const TTest *const sweep[] = {float_bits_conversions_agree};
    const cxs_group g[] = {{"all", 0, NULL, NULL, quick, CXS_N(quick), NULL},
                           {"sweep", 300, NULL, NULL, sweep, CXS_N(sweep), NULL}};
    return cxs_run_groups("convert", g, CXS_N(g), 0) ? EXIT_FAILURE : EXIT_SUCCESS;
}
