/* ring.c - the batch ring under both loaders (ring.h). */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "hooks.h"
#include "cxs_format.h"
#include "ring.h"

static void init_locks(cxs_ring *r) {
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv_work, NULL);
    /* the consumer's timed waits count on the monotonic clock */
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r->cv_ready, &ca);
    pthread_condattr_destroy(&ca);
}

int cxs_ring_init(cxs_ring *r, const cxs_ring_ops *ops, void *owner, uint32_t nslots,
                  uint32_t nworkers, uint64_t nbatches) {
    *r = (cxs_ring){.ops = ops, .owner = owner, .nslots = nslots, .nworkers = nworkers,
                    .nbatches = nbatches, .held = -1, .pid = getpid()};
    r->err.offset = CXS_NO_OFFSET;
    init_locks(r);
    r->slot = calloc(nslots, sizeof *r->slot);
    r->threads = calloc(nworkers, sizeof *r->threads);
    r->wk = calloc(nworkers, sizeof *r->wk);
    if (!r->slot || !r->threads || !r->wk) return -ENOMEM;
    for (uint32_t w = 0; w < nworkers; w++) r->wk[w] = (cxs_ring_worker){r, w};
    return 0;
}

static void *worker_main(void *arg) {
    const cxs_ring_worker *wk = arg;
    cxs_ring *r = wk->r;
    const cxs_ring_ops *o = r->ops;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        if (o->other_work && o->other_work(r->owner, wk->w)) continue;
        if (r->stop) break;
        uint64_t b = r->next_claim;
        uint32_t i = (uint32_t)(b % r->nslots);
        cxs_ring_slot *s = &r->slot[i];
        if (b >= r->nbatches || s->state != CXS_SLOT_FREE ||
            (o->can_claim && !o->can_claim(r->owner, i))) {
            pthread_cond_wait(&r->cv_work, &r->mu);
            continue;
        }
        s->state = CXS_SLOT_FILLING;
        s->batch = b;
        r->next_claim++;
        uint64_t gen = r->generation;
        o->claim(r->owner, wk->w, i, b, gen);
        pthread_mutex_unlock(&r->mu);
        int rc = o->fill(r->owner, wk->w, i, b, gen);
        pthread_mutex_lock(&r->mu);
        if (rc != CXS_RING_LATER) cxs_ring_publish_locked(r, i, gen, rc);
    }
    pthread_mutex_unlock(&r->mu);
    if (o->worker_exit) o->worker_exit(r->owner, wk->w);
    return NULL;
}

int cxs_ring_start(cxs_ring *r) {
    r->nthreads = 0;
    for (uint32_t w = 0; w < r->nworkers; w++) {
        if (r->ops->worker_init) r->ops->worker_init(r->owner, w);
        /* (threads[] is filled in order: a failed start ends the loop) */
        if (cxs_hook_thread_fails() ||
            pthread_create(&r->threads[w], NULL, worker_main, &r->wk[w]) != 0)
            break;
        r->nthreads++;
    }
    return r->nthreads ? 0 : -EAGAIN;
}

void cxs_ring_stop(cxs_ring *r) {
    pthread_mutex_lock(&r->mu);
    __atomic_store_n(&r->stop, 1, __ATOMIC_RELAXED); /* also read by cxs_ring_abandoned */
    pthread_cond_broadcast(&r->cv_work);
    if (r->ops->wake) r->ops->wake(r->owner);
    if (r->ops->cancel) r->ops->cancel(r->owner, 1); /* (a worker's transfer ends now) */
    pthread_mutex_unlock(&r->mu);
    for (uint32_t t = 0; t < r->nthreads; t++) pthread_join(r->threads[t], NULL);
    r->nthreads = 0;
}

void cxs_ring_destroy(cxs_ring *r) {
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv_work);
    pthread_cond_destroy(&r->cv_ready);
    free(r->slot);
    free(r->threads);
    free(r->wk);
    r->slot = NULL, r->threads = NULL, r->wk = NULL;
}

/* Under the lock: slot i's batch goes, unused. */
static void discard(cxs_ring *r, uint32_t i) {
    if (r->ops->discard) r->ops->discard(r->owner, i);
    r->slot[i].state = CXS_SLOT_FREE;
}

/* Under the lock: the consumer's slot goes back. */
static void release_held(cxs_ring *r) {
    if (r->held < 0) return;
    if (r->ops->release) r->ops->release(r->owner, (uint32_t)r->held);
    r->slot[r->held].state = CXS_SLOT_FREE;
    r->held = -1;
}

/* Under the lock, the consumer's call after a cancel: what was filled
 * since is thrown away (fills cut short by the cancel, a stream's fetches
 * ended), and the workers go on from the consumer's batch. */
static void resume_locked(cxs_ring *r) {
    r->resume = 0;
    __atomic_add_fetch(&r->generation, 1, __ATOMIC_RELAXED); /* also read by cxs_ring_abandoned */
    for (uint32_t i = 0; i < r->nslots; i++)
        if (r->slot[i].state == CXS_SLOT_READY) discard(r, i);
    r->next_claim = r->next_take;
    if (r->ops->cancel) r->ops->cancel(r->owner, 0);
    pthread_cond_broadcast(&r->cv_work);
    if (r->ops->wake) r->ops->wake(r->owner);
}

void cxs_ring_cancel(cxs_ring *r) {
    pthread_mutex_lock(&r->mu);
    r->cancel = 1;
    if (r->ops->cancel) r->ops->cancel(r->owner, 1);
    pthread_cond_broadcast(&r->cv_ready);
    pthread_mutex_unlock(&r->mu);
}

int cxs_ring_next_timed(cxs_ring *r, uint32_t *slot, uint32_t timeout_ms) {
    struct timespec until = {0, 0};
    if (timeout_ms != CXS_RING_FOREVER) {
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += (time_t)(timeout_ms / 1000);
        until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&r->mu);
    if (r->held >= 0) {
        release_held(r);
        pthread_cond_broadcast(&r->cv_work);
    }
    if (r->resume && !r->cancel) resume_locked(r);
    uint32_t i = (uint32_t)(r->next_take % r->nslots);
    cxs_ring_slot *s = &r->slot[i];
    for (int timed_out = 0;;) {
        if (r->cancel) { /* before anything else: the caller asked to stop */
            r->cancel = 0;
            r->resume = 1;
            pthread_mutex_unlock(&r->mu);
            return -ECANCELED;
        }
        if (r->next_take >= r->nbatches) {
            pthread_mutex_unlock(&r->mu);
            return 1;
        }
        if (s->state == CXS_SLOT_READY && s->batch == r->next_take) break;
        int rc = r->ops->stalled ? r->ops->stalled(r->owner, i) : 0;
        if (!rc && timed_out) rc = -ETIMEDOUT;
        if (rc) {
            pthread_mutex_unlock(&r->mu);
            return rc;
        }
        if (timeout_ms == CXS_RING_FOREVER)
            pthread_cond_wait(&r->cv_ready, &r->mu);
        else if (pthread_cond_timedwait(&r->cv_ready, &r->mu, &until) == ETIMEDOUT)
            timed_out = 1; /* (looked at once more: it may have come as the time ran out) */
    }
    s->state = CXS_SLOT_HELD;
    r->held = (int)i;
    r->next_take++;
    pthread_mutex_unlock(&r->mu);
    *slot = i;
    return 0;
}

void cxs_ring_restart_locked(cxs_ring *r, uint64_t nbatches) {
    __atomic_add_fetch(&r->generation, 1, __ATOMIC_RELAXED); /* also read by cxs_ring_abandoned */
    r->cancel = r->resume = 0; /* (a new start: nothing to go on from) */
    if (r->ops->cancel) r->ops->cancel(r->owner, 0);
    release_held(r);
    for (uint32_t i = 0; i < r->nslots; i++)
        if (r->slot[i].state == CXS_SLOT_READY) discard(r, i);
    r->nbatches = nbatches;
    r->next_claim = r->next_take = 0;
    pthread_cond_broadcast(&r->cv_work);
    if (r->ops->wake) r->ops->wake(r->owner);
}

void cxs_ring_publish_locked(cxs_ring *r, uint32_t i, uint64_t gen, int rc) {
    cxs_ring_slot *s = &r->slot[i];
    s->rc = rc;
    if (gen == r->generation) {
        s->state = CXS_SLOT_READY;
    } else {
        discard(r, i);
        pthread_cond_broadcast(&r->cv_work);
    }
    pthread_cond_broadcast(&r->cv_ready);
}

int cxs_ring_outcome(cxs_ring *r, int rc, cxs_diag *d) {
    if (!rc) {
        r->err.code = 0;
        r->err.message[0] = 0;
        r->err.file[0] = 0;
        r->err.offset = CXS_NO_OFFSET;
        return 0;
    }
    return cxs_diag_copy(d, rc, &r->err);
}

void cxs_ring_after_fork(cxs_ring *r, int drop_held) {
    init_locks(r);
    const int held = r->held;
    if (drop_held) {
        /* the consumer's batch goes back as after next(): released (in
         * external mode its buffers are the caller's), not discarded */
        release_held(r);
        r->next_take = 0;
    }
    __atomic_add_fetch(&r->generation, 1, __ATOMIC_RELAXED);
    __atomic_store_n(&r->stop, 0, __ATOMIC_RELAXED);
    r->nthreads = 0; /* the parent's */
    for (uint32_t i = 0; i < r->nslots; i++)
        if ((int)i != held) discard(r, i);
    r->next_claim = r->next_take;
}
