/* bsum_shim.h - TEMPORARY: the declarations of format 1.3's BLOCKSUMS
 * parser (format/cxs_format.h on main, issue 27) until this branch merges
 * it; this stand-in finds no BLOCKSUMS, so every table is checked at open. */
#ifndef CXS_BSUM_SHIM_H
#define CXS_BSUM_SHIM_H
#include <stdint.h>
#include "cxs_format.h"
#define CXS_BLOCKSUMS_MAX 16u
#define CXS_SEC_BLOCKSUMS 9u
typedef struct cxs_bsum_entry {
    uint32_t type, shift;
    uint64_t num_blocks;
    uint64_t first;
    const cxs_section *sec;
} cxs_bsum_entry;
typedef struct cxs_blocksums {
    uint32_t n;
    cxs_bsum_entry e[CXS_BLOCKSUMS_MAX];
    const uint8_t *sums;
} cxs_blocksums;
static inline int cxs_blocksums_load(const uint8_t *p, uint64_t len, const cxs_container *c,
                                     cxs_blocksums *out, const char *path, cxs_diag *d) {
    (void)p, (void)len, (void)c, (void)path, (void)d;
    out->n = 0;
    return 0;
}
static inline const cxs_bsum_entry *cxs_blocksums_find(const cxs_blocksums *b, uint32_t type) {
    (void)b, (void)type;
    return NULL;
}
static inline void cxs_bsum_block(const cxs_bsum_entry *e, uint64_t j, uint64_t *start,
                                  uint64_t *end) {
    *start = j << e->shift;
    *end = (j + 1) << e->shift;
    if (*end > e->sec->length) *end = e->sec->length;
}
static inline uint64_t cxs_bsum_of(const cxs_blocksums *b, const cxs_bsum_entry *e, uint64_t j) {
    const uint8_t *q = b->sums + 8 * (e->first + j);
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | q[i];
    return v;
}
#endif
