#include "cxs_convert.h"

uint32_t cxs_round_bits(double x, int ebits, int mbits) {
    uint64_t b;
    memcpy(&b, &x, 8);
    uint32_t sign = (uint32_t)(b >> 63) << (ebits + mbits);
    int e = (int)((b >> 52) & 0x7ff);
    uint64_t m = b & ((1ull << 52) - 1);
    uint32_t emax = (1u << ebits) - 1;
    int bias = (1 << (ebits - 1)) - 1;
    if (e == 0x7ff) {
        if (!m) return sign | (emax << mbits);
        /* NaN: keep the payload's top bits and force the quiet bit so the
         * result cannot turn into infinity. */
        uint32_t pay = (uint32_t)(m >> (52 - mbits)) | (1u << (mbits - 1));
        return sign | (emax << mbits) | pay;
    }
    if (e == 0) return sign; /* below 2^-1022: zero in every narrower format */
    int E = e - 1023;
    uint64_t sig = (1ull << 52) | m;
    int shift;
    int normal = E >= 1 - bias;
    if (normal)
        shift = 52 - mbits;
    else
        shift = 52 - mbits + (1 - bias - E);
    if (shift >= 64) return sign;
    uint64_t q = sig >> shift, rem = sig & ((1ull << shift) - 1), half = 1ull << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) q++;
    if (!normal) return sign | (uint32_t)q; /* carry into the exponent is right */
    int field = E + bias;
    if (q == (1ull << (mbits + 1))) {
        q >>= 1;
        field++;
    }
    if (field >= (int)emax) return sign | (emax << mbits);
    return sign | ((uint32_t)field << mbits) | (uint32_t)(q & ((1ull << mbits) - 1));
}

float cxs_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31;
    uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff, b;
    if (e == 0x1f) {
        b = sign | 0x7f800000u | (m << 13);
    } else if (e == 0) {
        if (!m) {
            b = sign;
        } else { /* subnormal: normalise */
            int s = 0;
            while (!(m & 0x400)) {
                m <<= 1;
                s++;
            }
            b = sign | ((uint32_t)(127 - 15 + 1 - s) << 23) | ((m & 0x3ff) << 13);
        }
    } else {
        b = sign | ((e + 127 - 15) << 23) | (m << 13);
    }
    float f;
    memcpy(&f, &b, 4);
    return f;
}
