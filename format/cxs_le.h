/* cxs_le.h - little-endian loads and stores.  Every integer and float read
 * from a file goes through these; file bytes are never cast to structs. */
#ifndef CXS_LE_H
#define CXS_LE_H

#include <stdint.h>
#include <string.h>

static inline uint16_t cxs_ld16(const uint8_t *p) {
    return (uint16_t)(p[0] | (p[1] << 8));
}
static inline uint32_t cxs_ld32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
           ((uint32_t)p[3] << 24);
}
static inline uint64_t cxs_ld64(const uint8_t *p) {
    return (uint64_t)cxs_ld32(p) | ((uint64_t)cxs_ld32(p + 4) << 32);
}
static inline double cxs_ldf64(const uint8_t *p) {
    uint64_t u = cxs_ld64(p);
    double d;
    memcpy(&d, &u, 8);
    return d;
}
static inline void cxs_st16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static inline void cxs_st32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void cxs_st64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void cxs_stf64(uint8_t *p, double d) {
    uint64_t u;
    memcpy(&u, &d, 8);
    cxs_st64(p, u);
}

/* Whether this host stores integers little-endian, so that mapped arrays
 * can be handed out as native pointers. */
static inline int cxs_host_is_le(void) {
    const uint16_t one = 1;
    uint8_t b;
    memcpy(&b, &one, 1);
    return b == 1;
}

#endif
