/* qdecode.c - coded features decoded where they are served (qdecode.h). */
#include "qdecode.h"

#include <errno.h>
#include <stdlib.h>

#include "cxs_qcodec.h"

/* The decoding loops are written so that the compiler vectorises them:
 * every column's constants loaded unconditionally, the piece chosen by
 * selects, not branches.  On x86-64 they are also built for AVX2 and the
 * wider one chosen at load time where the CPU has it (an ifunc); neither
 * build contracts a product and a sum into a fused multiply-add (ISO C
 * mode: -ffp-contract=off, and AVX2 alone has no FMA instructions). */
#if defined(__x86_64__) && defined(__has_attribute)
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
}

/* Kaldi's CharToFloat for every code: p + (slope * n) * m, the product
 * (slope * n) a float, then a double product and sum rounded once to float
 * (m: 1/64.0, 1/128.0 or 1/63.0 as doubles), exactly cxs_q8_value. */
CXS_WIDE static void q8_rows(const float *restrict k, uint32_t D, const uint8_t *restrict src,
                             size_t rows, float *restrict dst) {
    const float *b0 = k, *b1 = k + D, *b2 = k + 2 * (size_t)D;
    const float *s0 = k + 3 * (size_t)D, *s1 = k + 4 * (size_t)D, *s2 = k + 5 * (size_t)D;
    for (size_t r = 0; r < rows; r++, src += D, dst += D)
        for (uint32_t d = 0; d < D; d++) {
            const int32_t c = src[d];
            const float x1 = b1[d], x2 = b2[d], y1 = s1[d], y2 = s2[d];
            float b = b0[d], sl = s0[d];
            int32_t n = c;
            double m = 1.0 / 64.0;
            if (c > 64) b = x1, sl = y1, n = c - 64, m = 1.0 / 128.0;
            if (c > 192) b = x2, sl = y2, n = c - 192, m = 1.0 / 63.0;
            dst[d] = (float)((double)b + (double)(sl * (float)n) * m);
        }
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
    if (q->dtype == CXS_DTYPE_Q8) q8_rows(q->k, q->dim, src, rows, dst);
    else q16_rows(q->min, q->inc, src, rows * q->dim, dst);
}
