/* readahead.h - the loader's helper thread: reading ahead of the workers
 * and letting go of what they are done with (internal).
 *
 * Block sampler (CXS_RA_BLOCKS): the helper reads blocks sequentially into
 * the page cache, in the epoch's block order, up to one block past those
 * the next batch to claim draws from, and drops every block that neither
 * that window nor a batch being filled needs.  A worker registers the
 * blocks of its batch and waits until they are read, so a cold epoch never
 * faults page by page; only the first CXS_RA_FIRST_BATCHES batches of a
 * start ask for their windows' pages instead of waiting (a fast first
 * batch rather than R whole blocks read first).  Which blocks are read never changes the order:
 * the frames come from the sampler alone.  In shards with block sums
 * (format 1.3) the helper checks every 64 KiB block of FEATURES it reads
 * against its sum (the edges of a block read whole); a block that fails is
 * BAD, never READ, and a batch waiting for it ends in CXS_E_CHECKSUM naming
 * the damaged block's utterances.
 *
 * The reading, checking and holding of a block is the block source's
 * (source.h, cxs_src_read); the helper decides which blocks and when.
 * A streamed dataset (CXS_OPEN_STREAM): before it reads a block the block
 * source fetches what the cache lacks of it (the sum blocks, several
 * requests at once, each checked against its sum) and holds it until the
 * helper drops the block; a failure (the server gone after the retries,
 * the cache limit) makes the block BAD with its reason.  Every batch waits
 * for all its blocks, the first ones too: no byte is read from a hole.
 *
 * Other samplers (CXS_RA_PAGES): the feature mapping is marked MADV_RANDOM
 * and the helper asks (MADV_WILLNEED) for the pages of the windows and
 * labels of the next CXS_READAHEAD_BATCHES batches to claim, so that many
 * reads are in flight while the workers copy; a worker that claims a batch
 * the helper has not reached asks for it itself before copying.  Batches
 * whose sampled pages are cached are skipped (warm data costs no advice).
 * Once the first batches are filled, a dataset that fits in memory
 * (cxs_dataset_warm's test) and is not cached is read sequentially by the
 * helper instead (while it reads, only the first batches ask for pages).
 *
 * Every field the helper shares with the workers lives under the loader's
 * lock (mu), which the helper borrows; the loader's own fields it reads are
 * passed as pointers. */
#ifndef CXS_READAHEAD_H
#define CXS_READAHEAD_H

#include <pthread.h>
#include <stdint.h>

#include "blocks.h"
#include "dataset_internal.h"
#include "source.h"

enum { CXS_RA_NONE, CXS_RA_BLOCKS, CXS_RA_PAGES };

#define CXS_RA_MAX_BLOCKS 64 /* blocks one batch waits for; more are faulted in */
#define CXS_RA_FIRST_BATCHES 2 /* batches of a start that do not wait for whole blocks */

typedef struct cxs_readahead {
    int kind;
    const cxs_dataset *ds;
    const cxs_sampler *sampler;
    size_t batch;
    uint32_t k;
    /* the loader's, under *mu */
    pthread_mutex_t *mu;
    const uint64_t *generation, *epoch, *start, *next_claim, *nbatches;
    const int *stop;
    /* the helper's */
    pthread_cond_t cv; /* the helper waits for work, workers for blocks */
    pthread_t th;
    int running;
    cxs_src src;       /* blocks: the helper's view of the block source (its
                          descriptors, which the workers' drop_plan uses too,
                          and a streamed dataset's holds: only the helper
                          takes and lets go of them; a worker that drops a
                          plan leaves the releases in pend) */
    uint64_t *frames;  /* pages: one batch's frames */
    uint64_t gen;      /* generation the state below belongs to */
    uint64_t advised;  /* pages: batches below this were asked for */
    cxs_block_plan *plan; /* blocks: the epoch's plan, or NULL */
    uint8_t *state;       /* per block: ABSENT, READING, READ, BAD */
    cxs_diag **bad;       /* per block: why it is BAD (malloc'd), or NULL */
    uint32_t *need;       /* per block: batches being filled that draw on it */
    uint32_t direct;      /* first batches being filled (blocks: without waiting
                             for them; atomic: read_block looks without the lock) */
    uint32_t first_filled; /* pages: first batches filled */
    int warming;          /* pages: the helper is warming the dataset (atomic) */
    int held;             /* blocks of a streamed dataset: read blocks are held */
    int keep;             /* blocks: the plan's blocks all fit the memory budget,
                             read blocks stay in the page cache (drop_block) */
    uint64_t wanted;      /* held: blocks below this were asked of the fetch-ahead */
    cxs_block *pend;      /* under *mu: blocks whose holds the helper is to let go */
    size_t npend, cpend;
} cxs_readahead;

/* One batch's blocks, between cxs_ra_batch_frames and cxs_ra_batch_done. */
typedef struct cxs_ra_batch {
    cxs_block_plan *plan;
    uint64_t gen;
    uint32_t nj;
    int direct;        /* one of the first batches: did not wait */
    uint64_t j[CXS_RA_MAX_BLOCKS];
} cxs_ra_batch;

/* Choose the kind (none when !on, compressed, or sequential) and set up;
 * nothing starts yet.  Returns 0 or -ENOMEM. */
int cxs_ra_init(cxs_readahead *ra, const cxs_dataset *ds, const cxs_sampler *s, int on,
                size_t batch, uint32_t k, pthread_mutex_t *mu, const uint64_t *generation,
                const uint64_t *epoch, const uint64_t *start, const uint64_t *next_claim,
                const uint64_t *nbatches, const int *stop);
int cxs_ra_start(cxs_readahead *ra);   /* the thread; 0 or -EAGAIN */
void cxs_ra_stop(cxs_readahead *ra);   /* join it (the loader set *stop and woke it) */
/* The helper's memory and descriptors (forked: in a child that inherited
 * the loader, which leaves the parent's blocks in the page cache). */
void cxs_ra_destroy(cxs_readahead *ra, int forked);
void cxs_ra_after_fork(cxs_readahead *ra);
void cxs_ra_wake(cxs_readahead *ra);   /* under mu */
void cxs_ra_claimed(cxs_readahead *ra); /* a batch was claimed */

/* Block sampler: the frames of this rank's positions pos .. pos+n-1 of
 * epoch, then wait (not under mu) until their blocks are read, unless the
 * loader moved on (gen) or stops.  Returns 0, -ENOMEM, or CXS_E_CHECKSUM
 * when a block the batch waited for failed its block sums (d says which
 * shard, block and utterances). */
int cxs_ra_batch_frames(cxs_readahead *ra, const cxs_sampler *s, uint64_t epoch, uint64_t pos,
                        size_t n, uint64_t *frames, uint64_t gen, cxs_ra_batch *rb, cxs_diag *d);
void cxs_ra_batch_done(cxs_readahead *ra, cxs_ra_batch *rb);

/* Other samplers: batch b (of generation gen) holds these frames; when
 * the helper has not asked for its pages yet, ask now, before the worker
 * faults them in one by one (the first batches of a cold start).  Returns
 * what the worker passes to cxs_ra_batch_pages_done once it has copied. */
int cxs_ra_batch_pages(cxs_readahead *ra, uint64_t b, uint64_t gen, const uint64_t *frames,
                       size_t n);
void cxs_ra_batch_pages_done(cxs_readahead *ra, int first);

#endif
