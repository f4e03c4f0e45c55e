/* ring.h - the ring of batch buffers that worker threads fill ahead of a
 * consumer; the one ring under the frame loader (loader.c) and the
 * utterance loader (uttbatch.c), which are its owners (internal).
 *
 * Batch b of a start lives in slot b % nslots.  A worker claims the next
 * batch once its slot is FREE (and the owner agrees: can_claim), fills it
 * without holding the lock, and publishes it READY; the consumer takes
 * batches strictly in order (HELD) and gives the one it held back (FREE)
 * when it asks for the next:
 *
 *     FREE --claim--> FILLING --publish--> READY --next--> HELD --next--> FREE
 *
 * A restart (another epoch or position) or a fork bumps `generation`: a
 * batch published for an older generation is thrown away (discard), and a
 * worker may stop filling one early by asking cxs_ring_abandoned every few
 * dozen windows (as every worker does when the ring stops).
 *
 * A forked child has none of the parent's threads: its owner's first call
 * runs cxs_ring_after_fork (fresh locks, the held slot kept, every other
 * slot thrown away, claims from the consumer's position) and starts the
 * workers again; cxs_ring_adopt then marks the ring as this process's.
 * Only once workers run, so that a failed start is retried by the next
 * call instead of waiting for batches no thread fills.
 *
 * Every field is under mu, except generation and stop, which are also
 * read without it (atomically) by cxs_ring_abandoned. */
#ifndef CXS_RING_H
#define CXS_RING_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>
#include <unistd.h>

#include "ctxshard.h"

enum { CXS_SLOT_FREE, CXS_SLOT_FILLING, CXS_SLOT_READY, CXS_SLOT_HELD };

/* What fill returns when the owner publishes the slot itself, later
 * (cxs_ring_publish_locked): the frame loader's first batch, filled in
 * parts by every worker. */
#define CXS_RING_LATER 1

typedef struct cxs_ring_slot {
    int state;
    int rc;         /* the fill's code, handed to the consumer with the batch */
    uint64_t batch; /* of the current start */
    cxs_diag diag;  /* what rc means (the fill writes it), naming the data */
} cxs_ring_slot;

/* The owner's part.  `w` is the worker's number (0 .. nworkers-1), `i`
 * the slot, `b` the batch, `gen` the generation it was claimed in. */
typedef struct cxs_ring_ops {
    /* Under the lock: slot i was claimed for batch b.  Take what the fill
     * needs of the owner's position, which may change once the lock is
     * released (a restart). */
    void (*claim)(void *owner, uint32_t w, uint32_t i, uint64_t b, uint64_t gen);
    /* Without the lock: fill slot i.  Returns the batch's code (0, or an
     * error with slot->diag written), or CXS_RING_LATER. */
    int (*fill)(void *owner, uint32_t w, uint32_t i, uint64_t b, uint64_t gen);
    /* The rest are optional (NULL). */
    /* Under the lock: whether slot i may be claimed now (a buffer for it). */
    int (*can_claim)(void *owner, uint32_t i);
    /* Under the lock, before each claim and when stopping: other work of
     * the owner's (it may release the lock meanwhile).  Returns 1 when it
     * did some (or waited), 0 to go on. */
    int (*other_work)(void *owner, uint32_t w);
    /* Under the lock: slot i's batch is thrown away (it goes FREE). */
    void (*discard)(void *owner, uint32_t i);
    /* Under the lock: the consumer is done with held slot i (it goes FREE). */
    void (*release)(void *owner, uint32_t i);
    /* Under the lock, while the consumer waits for slot i: a code to end
     * the wait with, when nothing would ever fill it; 0 to wait. */
    int (*stalled)(void *owner, uint32_t i);
    /* Before worker w's thread is started (and in a forked child, before
     * it is started again): its own state, fresh. */
    void (*worker_init)(void *owner, uint32_t w);
    /* In worker w's thread, as it ends. */
    void (*worker_exit)(void *owner, uint32_t w);
    /* Under the lock: the workers were told to stop or to restart (the
     * owner's helper threads should look). */
    void (*wake)(void *owner);
    /* Under the lock, from any thread: on 1, cxs_ring_cancel was called:
     * end what the owner's threads wait on outside the ring (a streamed
     * dataset's transfers) at once; on 0, the ring starts again (a restart,
     * or the consumer's call after a cancel): allow it again.  Only
     * atomic stores: it runs under the ring's lock. */
    void (*cancel)(void *owner, int on);
} cxs_ring_ops;

typedef struct cxs_ring_worker {
    struct cxs_ring *r;
    uint32_t w;
} cxs_ring_worker;

typedef struct cxs_ring {
    const cxs_ring_ops *ops;
    void *owner;
    cxs_ring_slot *slot;
    uint32_t nslots, nworkers, nthreads; /* nthreads: running */
    uint64_t nbatches, next_claim, next_take, generation;
    int held; /* slot with the consumer, or -1 */
    int stop;
    int cancel; /* cxs_ring_cancel was called: the consumer's next wait ends */
    int resume; /* the consumer's: a cancel ended its call; its next call
                   throws away what was filled meanwhile and goes on from
                   its batch */
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_ready;
    pthread_t *threads;
    cxs_ring_worker *wk;
    pid_t pid; /* the process whose threads these are */
    cxs_diag err; /* the consumer's: its last call's failure (the owners' *_error()) */
} cxs_ring;

/* Set up nslots slots and room for nworkers workers, none started, for a
 * start of nbatches batches.  Returns 0 or -ENOMEM (then destroy it). */
int cxs_ring_init(cxs_ring *r, const cxs_ring_ops *ops, void *owner, uint32_t nslots,
                  uint32_t nworkers, uint64_t nbatches);
/* Start the workers.  Returns 0 when at least one runs, or -EAGAIN with
 * none running. */
int cxs_ring_start(cxs_ring *r);
/* Tell the workers to stop (stop stays set) and join them. */
void cxs_ring_stop(cxs_ring *r);
/* The locks and the memory (the workers are stopped, or of a parent). */
void cxs_ring_destroy(cxs_ring *r);

/* The consumer's next batch: the slot it held goes back, then it waits
 * for the next batch, at most timeout_ms milliseconds (CXS_RING_FOREVER:
 * no limit).  Returns 0 with *slot set (the batch's own code is slot's
 * rc), 1 past the last batch, what stalled answered, -ETIMEDOUT when the
 * batch was not ready in time (the next call waits for the same batch),
 * or -ECANCELED after cxs_ring_cancel (once: the next call throws away
 * the batches filled since, their fills cut short, and goes on from the
 * same batch). */
#define CXS_RING_FOREVER UINT32_MAX
int cxs_ring_next_timed(cxs_ring *r, uint32_t *slot, uint32_t timeout_ms);
static inline int cxs_ring_next(cxs_ring *r, uint32_t *slot) {
    return cxs_ring_next_timed(r, slot, CXS_RING_FOREVER);
}

/* From any thread: the consumer's wait ends (-ECANCELED), now or, when it
 * is not waiting, at its next call; the owner's cancel op ends what its
 * threads wait on.  A restart clears it. */
void cxs_ring_cancel(cxs_ring *r);

/* Under the lock: the owner's position changed (a start of nbatches
 * batches): a new generation, every ready or held slot FREE, claims from
 * batch 0. */
void cxs_ring_restart_locked(cxs_ring *r, uint64_t nbatches);
/* Under the lock: slot i's batch of generation gen is filled with code
 * rc: READY, or thrown away when a restart came meanwhile. */
void cxs_ring_publish_locked(cxs_ring *r, uint32_t i, uint64_t gen, int rc);

/* The consumer's call ended with rc, its message in r->err when it
 * failed: d (may be NULL) gets a copy, and a success clears r->err (no
 * message, no place).  Returns rc. */
int cxs_ring_outcome(cxs_ring *r, int rc, cxs_diag *d);

/* Whether the ring's workers are another process's (this one forked). */
static inline int cxs_ring_forked(const cxs_ring *r) { return r->pid != getpid(); }
/* In a forked child, before the workers start again: fresh locks, a new
 * generation, every slot but the held one thrown away, claims from the
 * consumer's position (drop_held: from the start, nothing held). */
void cxs_ring_after_fork(cxs_ring *r, int drop_held);
/* The workers of this process run: the ring is its own. */
static inline void cxs_ring_adopt(cxs_ring *r) { r->pid = getpid(); }

/* Whether a batch claimed in generation gen is no longer wanted (a
 * restart, or the ring stops); without the lock. */
static inline int cxs_ring_abandoned(const cxs_ring *r, uint64_t gen) {
    return __atomic_load_n(&r->stop, __ATOMIC_RELAXED) ||
           __atomic_load_n(&r->generation, __ATOMIC_RELAXED) != gen;
}

#endif
