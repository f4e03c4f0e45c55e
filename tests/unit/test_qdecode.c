/* test_qdecode.c - the vectorised decoder of coded features
 * (lib/read/qdecode.c) against the codec's scalar reference
 * (cxs_q_decode_rows), bit for bit: every code of every column of random
 * q8 headers (min and range of every magnitude and sign, percentiles
 * sorted, equal, at 0 and 65535), every q16 code of random headers.
 * Built twice (tests/unit/meson.build): as the library is, and with
 * CXS_QDEC_BASELINE, the default build of the loops alone, so that both
 * are proven on a machine that has AVX2. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cxs_le.h"
#include "cxs_qcodec.h"
#include "cxs_test.h"
#include "qdecode.h"

static uint64_t rng = 0x243f6a8885a308d3ull;
static uint64_t next(void) {
    rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
    return rng * 0x2545f4914f6cdd1dull;
}

/* A float of random sign and magnitude (exponents -40..40 of ten), or an
 * edge value; range > 0: tiny ranges make slopes below 2^-119 (the
 * decoder's double fallback) or subnormal, huge ones infinite pieces. */
static float any_float(int positive) {
    switch (next() % 10) {
    case 0: return positive ? 1e-30f : -0.0f;
    case 1: return positive ? 3e38f : 0.0f;
    case 2: return positive ? 0x1p-100f : 1e-36f;
    case 3: return positive ? 0x1p-149f * (float)(1 + next() % 1000) : -3e38f;
    default: {
        double m = (double)(next() >> 11) / 9007199254740992.0;
        double v = m * pow(10.0, (double)((int)(next() % 81) - 40));
        return (float)(positive || next() % 2 ? v + 1e-38 : -v);
    }
    }
}

static void random_header(uint32_t dtype, uint32_t D, uint8_t *h) {
    float min = any_float(0), range = any_float(1);
    uint32_t b;
    memcpy(&b, &min, 4);
    cxs_st32(h, b);
    memcpy(&b, &range, 4);
    cxs_st32(h + 4, b);
    if (dtype != CXS_DTYPE_Q8) return;
    for (uint32_t c = 0; c < D; c++) {
        uint16_t p[4];
        for (int i = 0; i < 4; i++) {
            uint64_t r = next();
            p[i] = r % 5 == 0 ? 0 : r % 5 == 1 ? 65535 : (uint16_t)(r >> 16);
        }
        if (next() % 4 == 0) p[1] = p[0]; /* equal percentiles: zero slopes */
        if (next() % 4 == 0) p[2] = p[3];
        for (int i = 1; i < 4; i++) /* sorted */
            for (int j = i; j > 0 && p[j - 1] > p[j]; j--) {
                uint16_t t = p[j];
                p[j] = p[j - 1], p[j - 1] = t;
            }
        for (int i = 0; i < 4; i++) cxs_st16(h + CXS_Q8_HEAD + 8 * c + 2 * i, p[i]);
    }
}

static void same_bits(const float *a, const float *b, size_t n, const char *what) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], 4))
            ck_abort_msg("%s: element %zu: %a (vectorised) != %a (reference)", what, i, a[i], b[i]);
}

TEST(q8_every_code_of_every_column) {
    static const uint32_t dims[] = {1, 3, 13, 40, 80, 257};
    for (size_t di = 0; di < sizeof dims / sizeof *dims; di++) {
        const uint32_t D = dims[di];
        uint8_t *h = malloc(cxs_q_header_size(CXS_DTYPE_Q8, D)), *codes = malloc(256 * D);
        float *out = malloc(256 * D * sizeof *out), *ref = malloc(256 * D * sizeof *ref);
        cxs_qdec q = {0};
        EXPECT_INT(cxs_qdec_init(&q, CXS_DTYPE_Q8, D), 0);
        for (uint32_t r = 0; r < 256; r++) /* column c sees every code, shifted */
            for (uint32_t c = 0; c < D; c++) codes[r * D + c] = (uint8_t)(r + 7 * c);
        for (int it = 0; it < 300; it++) {
            random_header(CXS_DTYPE_Q8, D, h);
            cxs_qdec_prepare(&q, h);
            /* rows one at a time and all at once: the loop's tails and bodies */
            cxs_qdec_rows(&q, codes, 256, out);
            cxs_q_decode_rows(CXS_DTYPE_Q8, h, D, codes, 256, ref);
            same_bits(out, ref, 256 * (size_t)D, "q8");
            for (uint32_t r = 0; r < 256; r += 37) cxs_qdec_rows(&q, codes + r * D, 1, out + r * D);
            same_bits(out, ref, 256 * (size_t)D, "q8 row by row");
        }
        cxs_qdec_free(&q);
        free(h), free(codes), free(out), free(ref);
    }
}
END_TEST_

TEST(q16_every_code) {
    const uint32_t D = 16;
    uint8_t h[CXS_Q16_HEADER], *codes = malloc(2 * 65536);
    float *out = malloc(65536 * sizeof *out), *ref = malloc(65536 * sizeof *ref);
    for (uint32_t v = 0; v < 65536; v++) cxs_st16(codes + 2 * v, (uint16_t)v);
    cxs_qdec q = {0};
    EXPECT_INT(cxs_qdec_init(&q, CXS_DTYPE_Q16, D), 0);
    for (int it = 0; it < 200; it++) {
        random_header(CXS_DTYPE_Q16, D, h);
        cxs_qdec_prepare(&q, h);
        cxs_qdec_rows(&q, codes, 65536 / D, out);
        cxs_q_decode_rows(CXS_DTYPE_Q16, h, D, codes, 65536 / D, ref);
        same_bits(out, ref, 65536, "q16");
    }
    cxs_qdec_free(&q);
    free(codes), free(out), free(ref);
}
END_TEST_

int main(void) {
    const TTest *t[] = {q8_every_code_of_every_column, q16_every_code};
    const cxs_group g[] = {{"qdecode", 300, NULL, NULL, t, CXS_N(t), NULL}};
    return cxs_run_groups("qdecode", g, CXS_N(g), 0) ? 1 : 0;
}
