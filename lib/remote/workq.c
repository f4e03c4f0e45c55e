/* workq.c - cxs_workq_run (workq.h). */
#include "workq.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "cxs_format.h"

typedef struct run {
    const cxs_workq *q;
    _Atomic uint32_t next;
    _Atomic int stop;
    unsigned running; /* under mu */
    pthread_mutex_t mu;
    pthread_cond_t done; /* running reached 0 */
    int rc;
    cxs_diag d;
} run;

static void *worker(void *p) {
    run *r = p;
    cxs_diag d;
    while (!atomic_load(&r->stop)) {
        uint32_t i = atomic_fetch_add(&r->next, 1);
        if (i >= r->q->n) break;
        int rc = r->q->one(r->q->ctx, i, &d);
        if (rc) {
            pthread_mutex_lock(&r->mu);
            if (!r->rc) {
                r->rc = rc;
                r->d = d;
            }
            pthread_mutex_unlock(&r->mu);
            atomic_store(&r->stop, 1);
        }
    }
    pthread_mutex_lock(&r->mu);
    if (!--r->running) pthread_cond_signal(&r->done);
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

#define MAX_THREADS 16u

int cxs_workq_run(const cxs_workq *q, unsigned threads, const char *what, cxs_diag *d) {
    run r = {.q = q};
    atomic_init(&r.next, 0);
    atomic_init(&r.stop, 0);
    pthread_mutex_init(&r.mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r.done, &ca);
    pthread_condattr_destroy(&ca);
    unsigned nt = threads > MAX_THREADS ? MAX_THREADS : threads ? threads : 1;
    if (nt > q->n) nt = q->n ? q->n : 1;
    pthread_t th[MAX_THREADS];
    int started[MAX_THREADS] = {0};
    unsigned n_started = 0;
    for (unsigned t = 0; t < nt; t++) {
        pthread_mutex_lock(&r.mu);
        r.running++;
        pthread_mutex_unlock(&r.mu);
        if ((started[t] = pthread_create(&th[t], NULL, worker, &r) == 0)) {
            n_started++;
        } else {
            pthread_mutex_lock(&r.mu);
            r.running--;
            pthread_mutex_unlock(&r.mu);
        }
    }
    if (!n_started) { /* this thread alone: no progress until it is done */
        r.running = 1;
        worker(&r);
    }
    /* Progress every 100 ms, but the end is met when it comes: a poll of
     * 100 ms made each fetch of a streamed block last at least that long
     * (one range request every 100 ms, whatever the link). */
    struct timespec tick;
    clock_gettime(CLOCK_MONOTONIC, &tick);
    pthread_mutex_lock(&r.mu);
    while (r.running) {
        if ((tick.tv_nsec += 100 * 1000000L) >= 1000000000L)
            tick.tv_sec++, tick.tv_nsec -= 1000000000L;
        for (int w = 0; r.running && w != ETIMEDOUT;)
            w = pthread_cond_timedwait(&r.done, &r.mu, &tick);
        if (!r.running) break;
        pthread_mutex_unlock(&r.mu);
        uint64_t done = q->base + (q->count ? atomic_load(q->count) : 0);
        if (q->progress && q->progress(q->user, done < q->total ? done : q->total, q->total)) {
            if (q->cancel) atomic_store(q->cancel, 1);
            atomic_store(&r.stop, 1);
        }
        pthread_mutex_lock(&r.mu);
    }
    pthread_mutex_unlock(&r.mu);
    for (unsigned t = 0; t < nt; t++)
        if (started[t]) pthread_join(th[t], NULL);
    pthread_mutex_destroy(&r.mu);
    pthread_cond_destroy(&r.done);
    if (r.rc) {
        if (d) *d = r.d;
        return r.rc;
    }
    if (q->cancel && atomic_load(q->cancel))
        return cxs_diagf(d, -ECANCELED, "%s stopped", what);
    return 0;
}
