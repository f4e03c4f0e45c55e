/* blocks.h - the block schedule: one order of frames for data larger than
 * memory, shared by the block sampler (page cache) and usable by any loader
 * that holds a few blocks at a time (internal, never installed).
 *
 * An epoch's plan cuts the utterances, in storage order, into blocks of at
 * most block_rows rows (guard_rows counted per utterance, since they are
 * in the bytes read), permutes the blocks, and makes the epoch a sequence
 * of rounds: round t draws a random order of one share of each of the
 * blocks cxs_block_plan_first(t) .. t+R-1 -- blocks t .. t+R-1, except
 * that the last R blocks are drawn on until the final round -- so a
 * consumer at round t needs those blocks and never an earlier one again,
 * and no round draws on more than R.
 *
 * A plan holds per-block state only (a cxs_block and a round start, 64
 * bytes a block): utterance boundaries are read from INDEX in place when
 * the plan is cut, so its memory does not grow with the utterance count. */
#ifndef CXS_BLOCKS_H
#define CXS_BLOCKS_H

#include <pthread.h>
#include <stdint.h>

#include "dataset_internal.h"
#include "plancache.h"

typedef struct cxs_block {
    uint64_t u0, u1;   /* utterances [u0, u1) */
    uint64_t f0, nf;   /* first global frame and frame count (contiguous) */
    uint32_t shard;
    uint64_t off, len; /* bytes of its FEATURES rows in the shard file, guards included */
} cxs_block;

typedef struct cxs_block_plan {
    uint64_t epoch;
    uint32_t R;
    uint64_t nblocks, frames;
    cxs_block *blk;  /* in the epoch's order */
    uint64_t *rstart; /* first position of each round, nblocks + 1 */
    uint64_t key;     /* the epoch's key */
    int refs;         /* under the schedule's lock (plancache.h) */
} cxs_block_plan;

typedef struct cxs_block_sched {
    const cxs_dataset *ds;
    uint64_t seed, block_rows;
    uint32_t R, guard_rows;
    pthread_mutex_t mu;
    cxs_plan_cache cache; /* the last epochs asked */
    struct cxs_block_sched *next, *prev; /* every schedule, for fork */
} cxs_block_sched;

/* Set up a schedule of blocks of at most block_rows rows, rounds drawing
 * from R blocks.  Returns 0, or CXS_E_RANGE (with d) when the longest
 * utterance does not fit a block. */
int cxs_block_sched_init(cxs_block_sched *bs, const cxs_dataset *ds, uint64_t seed,
                         uint64_t block_rows, uint32_t guard_rows, uint32_t R, cxs_diag *d);
void cxs_block_sched_destroy(cxs_block_sched *bs);

/* The plan of `epoch`, built or taken from the cache, with a reference the
 * caller gives back with cxs_block_plan_put.  Returns 0, -ENOMEM, or
 * CXS_E_TRUNCATED when a shard lost part of its INDEX since open. */
int cxs_block_plan_get(cxs_block_sched *bs, uint64_t epoch, cxs_block_plan **out);
void cxs_block_plan_put(cxs_block_sched *bs, cxs_block_plan *p);

/* Position g (< p->frames) of the epoch: its frame and its block (index
 * into p->blk); block may be NULL. */
uint64_t cxs_block_plan_frame(const cxs_block_plan *p, uint64_t g, uint64_t *block);

/* The round of position g (< p->frames). */
uint64_t cxs_block_plan_round(const cxs_block_plan *p, uint64_t g);

/* The first block round t draws on: t, or max(0, nblocks - R) in the last
 * R - 1 rounds; the last is min(t + R, nblocks) - 1. */
uint64_t cxs_block_plan_first(const cxs_block_plan *p, uint64_t t);

#endif
