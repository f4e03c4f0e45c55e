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

#endif
