/* mix.h - what the mixture samplers share (mix.c, mixutt.c; never
 * installed). */
#ifndef CXS_MIX_H
#define CXS_MIX_H

#include <stdint.h>

#include "ctxshard.h"

/* The most samples an epoch of a frame mixture may hold (2^62: the
 * quotas' arithmetic in doubles and 64 bits stays exact enough and
 * bounded), and of an utterance mixture, whose plan is built whole
 * (2^40). */
#define CXS_MIX_MAX_EPOCH (1ull << 62)
#define CXS_MIX_UTT_MAX_EPOCH (1ull << 40)

/* The shares share[0..n-1] (weights wt, or with wt NULL the sizes, or
 * size^(1/T) with a temperature T other than 0 and 1) and the quotas
 * quota[0..n-1] of an epoch of E samples: E * share rounded by largest
 * remainder (they sum to E; ties to the lower source).  unit names what
 * size counts ("frames", "utterances") in a message.  Returns 0,
 * CXS_E_INVALID or -ENOMEM with d (may be NULL) saying why. */
int cxs_mix_apportion(uint32_t n, const cxs_dataset *const *ds, const uint64_t *size,
                      const double *wt, double T, uint64_t E, const char *unit, double *share,
                      uint64_t *quota, cxs_diag *d);

/* The items of this rank's batch at pos of epoch: per source the first's
 * place in the source's endless stream (epoch * quota + the epoch-local
 * item; stream item s is item s % frames of pass s / frames) and their
 * count.  0 or CXS_E_RANGE. */
int cxs_mix_spans(const cxs_mix *m, uint64_t epoch, uint64_t pos, unsigned __int128 *start,
                  uint64_t *count);
/* Source i's order of a pass (its sampler: shuffle or block), or NULL
 * (storage order, or a source the epoch never takes). */
const cxs_sampler *cxs_mix_order(const cxs_mix *m, uint32_t i);

/* An utterance mixture in block order (memory_bytes): an epoch is cut into
 * windows that follow every source's groups of blocks (each source's
 * items of window k are its items k*q/K .. (k+1)*q/K - 1, about half a
 * group), batches never cross a window and the windows come in order.
 * A group: the blocks of source src that windows first .. last read, its
 * byte ranges (blocks of uncompressed shards only) rng[r0 .. r1). */
typedef struct cxs_mix_urange {
    uint32_t shard;
    uint64_t off, len;
} cxs_mix_urange;
typedef struct cxs_mix_ugroup {
    uint32_t src;
    uint64_t first, last; /* windows */
    uint64_t r0, r1;
} cxs_mix_ugroup;
typedef struct cxs_mix_ublocks {
    uint64_t nw;         /* windows */
    const uint64_t *wb;  /* [nw + 1]: window k's global batches are wb[k] .. wb[k+1]-1 */
    const cxs_mix_ugroup *grp;
    uint64_t ngrp;       /* in each source's order, sources one after the other */
    const cxs_mix_urange *rng;
    void *ref;           /* the epoch's plan, held */
} cxs_mix_ublocks;

/* Whether m reads in block order. */
int cxs_mix_utt_block(const cxs_mix_utt *m);
/* Epoch's windows and groups, its plan held (built when it is not kept)
 * until cxs_mix_utt_blocks_put.  0, -ENOMEM, or CXS_E_INVALID (no block
 * order). */
int cxs_mix_utt_blocks_get(const cxs_mix_utt *m, uint64_t epoch, cxs_mix_ublocks *out);
void cxs_mix_utt_blocks_put(const cxs_mix_utt *m, cxs_mix_ublocks *b);
/* This rank's batch pos of b's epoch: its global batch and whether it is
 * a repeat (the final round's padding).  0 or CXS_E_RANGE. */
int cxs_mix_ublocks_place(const cxs_mix_utt *m, const cxs_mix_ublocks *b, uint64_t pos,
                          uint64_t *global, int *repeat);
/* The window of global batch g (< the epoch's batches). */
uint64_t cxs_mix_ublocks_window(const cxs_mix_ublocks *b, uint64_t g);

/* splitmix64's finaliser */
static inline uint64_t cxs_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

#endif
