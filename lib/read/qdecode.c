/* qdecode.c - coded features decoded where they are served (qdecode.h). */
#include "qdecode.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cxs_qcodec.h"

/* The decoding loops are vectorised (q16's by the compiler, q8's written
 * in GCC's vector types): every column's constants loaded
 * unconditionally, the piece chosen by selects, not branches.  On x86-64 they are also built for AVX2 and the
 * wider one chosen at load time where the CPU has it (an ifunc); neither
 * build contracts a product and a sum into a fused multiply-add (ISO C
 * mode: -ffp-contract=off, and AVX2 alone has no FMA instructions).
 * CXS_QDEC_BASELINE builds the default alone: the unit test proves that
 * build exact on a machine whose CPU would choose AVX2.  Under
 * ThreadSanitizer the default alone too: the ifunc's resolver runs while
 * the dynamic loader relocates the library, before the sanitizer's runtime
 * is set up, and its instrumented code crashes every program at start. */
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CXS_QDEC_NO_IFUNC
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define CXS_QDEC_NO_IFUNC
#endif
#if defined(__x86_64__) && defined(__has_attribute) && !defined(CXS_QDEC_BASELINE) && \
    !defined(CXS_QDEC_NO_IFUNC)
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
    /* q8: 6 * D floats, then p75 again as D doubles (24 * D bytes: aligned) */
    if (dtype == CXS_DTYPE_Q8 && !(q->k = malloc(6 * (size_t)D * sizeof *q->k + D * sizeof(double))))
        return -ENOMEM;
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
 * the double product and sum.  q8_rows computes both for every value and
 * selects (branch-free, vectorised); q8_one, for a row's last D % 8
 * columns, branches. */
static inline float q8_one(const float *k, size_t D, size_t d, int32_t c) {
    const int32_t up = c > 64, top = c > 192;
    const float e = k[(3 + up + top) * D + d] * (float)(c - (up ? top ? 192 : 64 : 0));
    if (top) return (float)((double)k[2 * D + d] + (double)e * (1.0 / 63.0));
    return k[up * D + d] + e * (up ? 1.0f / 128 : 1.0f / 64);
}

/* Eight columns a step in GCC's vector types (an AVX2 register each, two
 * SSE2 registers in the default build): written out rather than left to
 * the vectoriser, which widens the loop to 32 codes (the byte's lanes),
 * spills and stays several times slower. */
typedef float f8 __attribute__((vector_size(32), aligned(4), may_alias));
typedef int32_t i8 __attribute__((vector_size(32)));
typedef double d8 __attribute__((vector_size(64)));
typedef double d8u __attribute__((vector_size(64), aligned(8), may_alias));
typedef uint32_t u32x8 __attribute__((vector_size(32)));

/* macros, not functions: a function returning a vector would be built for
 * the default target and called from the AVX2 clone, vectors in memory */
#define LD8(p) (*(const f8 *)(const void *)(p))
#define SEL8(mask, yes, no) ((f8)(((i8)(yes) & (mask)) | ((i8)(no) & ~(mask))))

CXS_WIDE static void q8_rows(const float *restrict k, uint32_t D, const uint8_t *restrict src,
                             size_t rows, float *restrict dst) {
    const size_t W = D - D % 8;
    const f8 m1 = {0}, m64 = m1 + 1.0f / 64, m128 = m1 + 1.0f / 128;
    /* p75 as doubles (cxs_qdec_prepare): two conversions fewer a step */
    const double *k75 = (const double *)(const void *)(k + 6 * (size_t)D);
    for (size_t r = 0; r < rows; r++, src += D, dst += D) {
        for (size_t d = 0; d < W; d += 8) {
            /* the eight codes by shifts of two broadcast words (AVX2's
             * vpsrlvd): GCC converts a byte vector lane by lane */
            uint32_t w[2];
            memcpy(w, src + d, sizeof w);
            const i8 sh = {0, 8, 16, 24, 0, 8, 16, 24};
            const i8 c = (i8)((u32x8){w[0], w[0], w[0], w[0], w[1], w[1], w[1], w[1]} >> (u32x8)sh) & 255;
            const i8 up = c > 64, top = c > 192; /* -1 where true */
            const f8 b = SEL8(up, LD8(k + D + d), LD8(k + d));
            const f8 sl = SEL8(top, LD8(k + 5 * (size_t)D + d),
                               SEL8(up, LD8(k + 4 * (size_t)D + d), LD8(k + 3 * (size_t)D + d)));
            const f8 e = sl * __builtin_convertvector(c - ((up & 64) + (top & 128)), f8);
            const f8 lo = b + e * SEL8(up, m128, m64);
            const d8 x2 = *(const d8u *)(const void *)(k75 + d);
            const f8 hi = __builtin_convertvector(x2 + __builtin_convertvector(e, d8) * (1.0 / 63.0), f8);
            const f8 v = SEL8(top, hi, lo);
            *(f8 *)(void *)(dst + d) = v;
        }
        for (size_t d = W; d < D; d++) dst[d] = q8_one(k, D, d, src[d]);
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
    const size_t D = q->dim;
    float mn, rg;
    cxs_q_header_minrange(h, &mn, &rg);
    const float min = mn, range = rg;
    /* This runs at every window that starts an utterance (in a shuffled
     * epoch, nearly every window): cxs_q8_col_make inline, and restrict
     * so that a store of a constant does not reload the header (a byte
     * pointer may alias anything) */
    float *restrict k = q->k;
    const uint8_t *restrict pct = h + CXS_Q8_HEAD;
    for (size_t c = 0; c < D; c++) {
        const cxs_q8_col x = cxs_q8_col_make(min, range, pct + 8 * c);
        k[c] = x.p0, k[D + c] = x.p25, k[2 * D + c] = x.p75;
        /* Kaldi's (p25 - p0): a float difference, as CharToFloat takes it */
        k[3 * D + c] = x.p25 - x.p0;
        k[4 * D + c] = x.p75 - x.p25;
        k[5 * D + c] = x.p100 - x.p75;
        ((double *)(void *)(k + 6 * D))[c] = x.p75;
    }
    q->exact_f = q8_float_exact(k, q->dim);
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
