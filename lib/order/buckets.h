/* buckets.h - the utterance sampler's epoch orders, for the utterance
 * loader (internal, never installed). */
#ifndef CXS_BUCKETS_H
#define CXS_BUCKETS_H

#include <stdint.h>

#include "ctxshard.h"

/* Bytes [off, off+len) of shard `shard`'s file (its FEATURES rows of a
 * block). */
typedef struct cxs_utt_range {
    uint32_t shard;
    uint64_t off, len;
} cxs_utt_range;

/* One epoch's global batch order: batch b holds the utterances of entries
 * utts[bstart[b] .. bstart[b] + blen[b]) (cxs_utt_plan_batch). */
typedef struct cxs_utt_plan {
    uint64_t epoch;
    uint64_t nbatches;
    uint64_t *bstart; /* nbatches */
    uint32_t *blen;
    void *utts;       /* every utterance once: its number | its length << shift,
                         in entries of esize bytes (4 when both fit in 32 bits) */
    uint64_t nutts;
    uint32_t esize, shift;
    /* Block mode: the epoch's groups of blocks.  Group k holds batches
     * gstart[k] .. gstart[k+1]-1 and reads the byte ranges rng[rstart[k]
     * .. rstart[k+1]) (uncompressed data; none when compressed).  ngroups
     * is 0 otherwise. */
    uint64_t ngroups;
    uint64_t *gstart, *rstart;
    cxs_utt_range *rng;
    int refs;         /* under the samplers' lock (plancache.h) */
} cxs_utt_plan;

/* The plan of `epoch` with a reference (give it back with
 * cxs_utt_plan_put).  Returns 0 or -ENOMEM. */
int cxs_utt_plan_get(const cxs_utt_sampler *s, uint64_t epoch, cxs_utt_plan **out);
void cxs_utt_plan_put(const cxs_utt_sampler *s, cxs_utt_plan *p);

/* The utterances of global batch g into out; their count. */
uint64_t cxs_utt_plan_batch(const cxs_utt_plan *p, uint64_t g, uint64_t *out);
/* This rank's batches in plan p (0 when origin is past the end). */
uint64_t cxs_utt_plan_length(const cxs_utt_sampler *s, const cxs_utt_plan *p);
/* The global batch of this rank's position pos (< length). */
uint64_t cxs_utt_plan_global(const cxs_utt_sampler *s, const cxs_utt_plan *p, uint64_t pos);
/* Block mode: the group of global batch g (p->ngroups > 0). */
uint64_t cxs_utt_plan_group(const cxs_utt_plan *p, uint64_t g);

#endif
