/* cxs_convert.h - float16 and bfloat16 conversions shared by the packer and
 * the reader.  Rounding is to nearest, ties to even, straight from the
 * double value (no double rounding through float32). */
#ifndef CXS_CONVERT_H
#define CXS_CONVERT_H

#include <stdint.h>
#include <string.h>

/* Round x into a binary format with ebits exponent and mbits mantissa bits
 * (IEEE layout, sign on top).  Overflow gives infinity, tiny values
 * subnormals or zero, NaN stays NaN (quiet, payload's top bits kept). */
uint32_t cxs_round_bits(double x, int ebits, int mbits);

static inline uint16_t cxs_to_f16(double x) { return (uint16_t)cxs_round_bits(x, 5, 10); }
static inline uint16_t cxs_to_bf16(double x) { return (uint16_t)cxs_round_bits(x, 8, 7); }
static inline float cxs_to_f32(double x) {
    uint32_t b = cxs_round_bits(x, 8, 23);
    float f;
    memcpy(&f, &b, 4);
    return f;
}

static inline float cxs_bf16_to_f32(uint16_t h) {
    uint32_t b = (uint32_t)h << 16;
    float f;
    memcpy(&f, &b, 4);
    return f;
}

float cxs_f16_to_f32(uint16_t h);

/* The float with bits b rounded to float16, to nearest, ties to even:
 * cxs_to_f16 of the same value for every finite float (a float too large
 * gives infinity; NaN and infinity are not handled: callers check them
 * first).  On the float's bits (F. Giesen's float_to_half_fast3_rtne: the
 * subnormals by one float addition, which rounds to nearest even). */
static inline uint16_t cxs_f32_bits_to_f16(uint32_t b) {
    const uint32_t sign = (b >> 16) & 0x8000u, a = b & 0x7fffffffu;
    /* normal: rebias the exponent (-112 << 23) and round on bit 13 */
    const uint32_t normal = (a + 0xc8000fffu + ((a >> 13) & 1u)) >> 13;
    /* below 2^-14 (a float16 subnormal or zero): adding 0.5 aligns the
     * float16 subnormal's unit, 2^-24, at the float's bit 0 */
    float f;
    memcpy(&f, &a, 4);
    f += 0.5f;
    uint32_t u;
    memcpy(&u, &f, 4);
    const uint32_t sub = u - 0x3f000000u;
    /* selected with masks, not branches: loops over it vectorise */
    const uint32_t big = 0u - (uint32_t)(a >= 0x47800000u), small = 0u - (uint32_t)(a < 0x38800000u);
    const uint32_t r = (big & 0x7c00u) | (~big & ((small & sub) | (~small & normal)));
    return (uint16_t)(sign | r);
}

/* The float with bits b rounded to bfloat16 (finite b; a result past the
 * largest is infinity), ties to even: cxs_to_bf16 of the same value. */
static inline uint16_t cxs_f32_bits_to_bf16(uint32_t b) {
    return (uint16_t)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}

/* cxs_f16_to_f32 of a float16 that is not infinity or NaN. */
static inline float cxs_f16_finite_to_f32(uint16_t h) {
    const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    const float sub = (float)m * 0x1p-24f; /* exact: m < 2^10 */
    uint32_t us;
    memcpy(&us, &sub, 4);
    const uint32_t zero = 0u - (uint32_t)(e == 0);
    const uint32_t u = ((uint32_t)(h & 0x8000u) << 16) | (zero & us) |
                       (~zero & (((e + 112u) << 23) | (m << 13)));
    float f;
    memcpy(&f, &u, 4);
    return f;
}

#endif
