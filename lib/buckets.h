/* buckets.h - the utterance sampler's epoch orders, for the utterance
 * loader (internal, never installed). */
#ifndef CXS_BUCKETS_H
#define CXS_BUCKETS_H

#include <stdint.h>

#include "ctxshard.h"

/* One epoch's global batch order: batch b holds utts[bstart[b] ..
 * bstart[b+1]). */
typedef struct cxs_utt_plan {
    uint64_t epoch;
    uint64_t nbatches;
    uint64_t *bstart; /* nbatches + 1 */
    uint64_t *utts;   /* every utterance once */
    int refs;         /* under the samplers' lock; < 0: evicted, -refs users left */
} cxs_utt_plan;

/* The plan of `epoch` with a reference (give it back with
 * cxs_utt_plan_put).  Returns 0 or -ENOMEM. */
int cxs_utt_plan_get(const cxs_utt_sampler *s, uint64_t epoch, cxs_utt_plan **out);
void cxs_utt_plan_put(const cxs_utt_sampler *s, cxs_utt_plan *p);

/* This rank's batches in plan p (0 when origin is past the end). */
uint64_t cxs_utt_plan_length(const cxs_utt_sampler *s, const cxs_utt_plan *p);
/* The global batch of this rank's position pos (< length). */
uint64_t cxs_utt_plan_global(const cxs_utt_sampler *s, const cxs_utt_plan *p, uint64_t pos);

#endif
