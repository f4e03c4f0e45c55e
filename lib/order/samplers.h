/* samplers.h - what the library's other layers ask of a sampler beyond
 * the public API (sampler.c; never installed). */
#ifndef CXS_SAMPLERS_H
#define CXS_SAMPLERS_H

#include <stdint.h>

#include "ctxshard.h"

struct cxs_block_sched;

/* The options a sampler was created with (kind, seed, rank, world size). */
const cxs_sampler_opts *cxs_sampler_options(const cxs_sampler *s);
/* Global position (within the epoch, padding wrapped) of this rank's
 * position pos. */
uint64_t cxs_sampler_global(const cxs_sampler *s, uint64_t pos);
/* The block schedule of a block sampler, NULL for other kinds. */
struct cxs_block_sched *cxs_sampler_blocks(const cxs_sampler *s);

/* A keyed bijection of [0, n) (n > 0): the shuffle sampler's order of an
 * epoch, a pass of a mixture's source. */
typedef struct cxs_perm {
    uint64_t n, keys[4];
    uint32_t half;
} cxs_perm;
void cxs_perm_init(cxs_perm *p, uint64_t n, uint64_t seed, uint64_t epoch);
uint64_t cxs_perm_at(const cxs_perm *p, uint64_t x);

#endif
