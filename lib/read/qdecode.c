/* qdecode.c - coded features decoded where they are served (qdecode.h). */
#include "qdecode.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cxs_qcodec.h"

/* The decoding loops are written so that the compiler vectorises them:
 * every column's constants loaded unconditionally, the piece chosen by
 * selects, not branches.  On x86-64 they are also built for AVX2 and the
 * wider one chosen at load time where the CPU has it (an ifunc); neither
 * build contracts a product and a sum into a fused multiply-add (ISO C
 * mode: -ffp-contract=off, and AVX2 alone has no FMA instructions).
 * CXS_QDEC_BASELINE builds the default alone: the unit test proves that
 * build exact on a machine whose CPU would choose AVX2. */
#if defined(__x86_64__) && defined(__has_attribute) && !defined(CXS_QDEC_BASELINE)
#if __has_attribute(target_clones)
#define CXS_WIDE __attribute__((target_clones("avx2", "default")))
#endif
#endif
#ifndef CXS_WIDE
#define CXS_WIDE
#endif

int cxs_qdec_init(cxs_qdec *q, uint32_t dtype, uint32_t D) {
    if (!cxs_dtype_coded(dtype) || (q->dtype == dtype && q->dim == D)) return 0;
    cxs_qdec_free(q);
    if (dtype == CXS_DTYPE_Q8 && !(q->k = malloc(6 * (size_t)D * sizeof *q->k))) return -ENOMEM;
    q->dtype = dtype, q->dim = D;
    return 0;
}

void cxs_qdec_free(cxs_qdec *q) {
    free(q->k);
    *q = (cxs_qdec){0};
}

/* Kaldi's CharToFloat for every code: p + (slope * n) * m, the product
 * (slope * n) a float d, then a double product and sum rounded once to
 * float (m: 1/64.0, 1/128.0 or 1/63.0 as doubles), exactly cxs_q8_value.
 *
 * Codes 0..192 are done in float, 8 values a vector under AVX2 rather than
 * 4: there m is a power of two, so d * m is exact in float as in double
 * (q8_float_exact rules out the one exception, a product below float's
 * normal range), and the double sum of two floats rounded to float is
 * their float sum (a double rounding through binary64 is innocuous for an
 * addition of binary32 operands: 53 >= 2 * 24 + 2, Figueroa 1995; a sum
 * in float's subnormal range is exact in both; an overflow is infinite in
 * both, binary64 holding every value near float's limit that a sum of two
 * floats can take).  Codes 193..255 (m = 1/63.0, not a power of two) keep
 * the double product and sum; both are computed for every value and the
 * piece selected, so that the loop stays branch-free and vectorised. */
CXS_WIDE static void q8_rows(const float *restrict k, uint32_t D, const uint8_t *restrict src,
                             size_t rows, float *restrict dst) {
    const float *b0 = k, *b1 = k + D, *b2 = k + 2 * (size_t)D;
    const float *s0 = k + 3 * (size_t)D, *s1 = k + 4 * (size_t)D, *s2 = k + 5 * (size_t)D;
    for (size_t r = 0; r < rows; r++, src += D, dst += D)
        for (uint32_t d = 0; d < D; d++) {
            const int32_t c = src[d];
            const float x1 = b1[d], y1 = s1[d], y2 = s2[d];
            float b = b0[d], sl = s0[d], m = 1.0f / 64;
            int32_t n = c;
            if (c > 64) b = x1, sl = y1, n = c - 64, m = 1.0f / 128;
            if (c > 192) sl = y2, n = c - 192;
            const float e = sl * (float)n;
            const float lo = b + e * m;
            const float hi = (float)((double)b2[d] + (double)e * (1.0 / 63.0));
            /* chosen on the bits: GCC leaves a float select of hi, whose
             * conversion could raise an exception, as a branch, and the
             * loop then is not vectorised */
            uint32_t lb, hb;
            const uint32_t top = -(uint32_t)(c > 192);
            memcpy(&lb, &lo, 4), memcpy(&hb, &hi, 4);
            lb = (lb & ~top) | (hb & top);
            memcpy(&dst[d], &lb, 4);
        }
}

/* Every code in double, as cxs_q8_value: for an utterance whose slopes
 * q8_float_exact refuses (never the case for real features). */
static void q8_rows_double(const float *k, uint32_t D, const uint8_t *src, size_t rows,
                           float *dst) {
    for (size_t r = 0; r < rows; r++, src += D, dst += D)
        for (uint32_t d = 0; d < D; d++) {
            const int32_t c = src[d];
            const int p = (c > 64) + (c > 192);
            static const double m[3] = {1.0 / 64.0, 1.0 / 128.0, 1.0 / 63.0};
            static const int32_t base[3] = {0, 64, 192};
            const float e = k[(3 + p) * (size_t)D + d] * (float)(c - base[p]);
            dst[d] = (float)((double)k[p * (size_t)D + d] + (double)e * m[p]);
        }
}

/* Whether q8_rows's float pieces are exact for these slopes: (slope * n) *
 * m, n >= 1, m >= 2^-7, stays a normal float (or zero) when |slope| >=
 * 2^-119 or slope is 0 (|slope * n| >= |slope| for n >= 1); infinite and
 * NaN slopes give the same infinities and NaNs in float as in double. */
static int q8_float_exact(const float *k, uint32_t D) {
    for (size_t i = 3 * (size_t)D; i < 5 * (size_t)D; i++)
        if (k[i] != 0 && fabsf(k[i]) < 0x1p-119f) return 0;
    return 1;
}

void cxs_qdec_prepare(cxs_qdec *q, const uint8_t *h) {
    if (q->dtype == CXS_DTYPE_Q16) {
        float range;
        cxs_q_header_minrange(h, &q->min, &range);
        q->inc = cxs_q16_increment(range);
        return;
    }
    const uint32_t D = q->dim;
    float min, range;
    cxs_q_header_minrange(h, &min, &range);
    for (uint32_t c = 0; c < D; c++) {
        const cxs_q8_col k = cxs_q8_col_make(min, range, h + CXS_Q8_HEAD + 8 * (size_t)c);
        q->k[c] = k.p0, q->k[D + c] = k.p25, q->k[2 * D + c] = k.p75;
        /* Kaldi's (p25 - p0): a float difference, as CharToFloat takes it */
        q->k[3 * D + c] = k.p25 - k.p0;
        q->k[4 * D + c] = k.p75 - k.p25;
        q->k[5 * D + c] = k.p100 - k.p75;
    }
    q->exact_f = q8_float_exact(q->k, D);
}

/* Kaldi's kTwoByte CopyToMat: min + (float)v * increment, in float. */
CXS_WIDE static void q16_rows(float min, float inc, const uint8_t *restrict src, size_t n,
                              float *restrict dst) {
    for (size_t i = 0; i < n; i++) {
        const uint16_t v = (uint16_t)(src[2 * i] | src[2 * i + 1] << 8);
        dst[i] = cxs_q16_value(min, inc, v);
    }
}

void cxs_qdec_rows(const cxs_qdec *q, const uint8_t *src, size_t rows, float *dst) {
    if (q->dtype == CXS_DTYPE_Q8 && q->exact_f) q8_rows(q->k, q->dim, src, rows, dst);
    else if (q->dtype == CXS_DTYPE_Q8) q8_rows_double(q->k, q->dim, src, rows, dst);
    else q16_rows(q->min, q->inc, src, rows * q->dim, dst);
}
