/* import_ring.c - the read-ahead ring of an importer (import_ring.h). */
#include "import_ring.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "cxs_format.h"

struct import_ring {
    import_load_fn load;
    void *user;
    size_t nslots, next, consumed, end;
    unsigned char *ready; /* by slot */
    int stop;
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_ready;
    pthread_t *threads;
    unsigned nthreads;
};

size_t import_ring_slots(unsigned threads) { return threads <= 1 ? 1 : 2 * (size_t)threads + 2; }

static void *worker(void *arg) {
    import_ring *r = arg;
    pthread_mutex_lock(&r->mu);
    while (!r->stop && r->next < r->end) {
        /* the item that would reuse a slot still held waits for it */
        if (r->next >= r->consumed + r->nslots) {
            pthread_cond_wait(&r->cv_work, &r->mu);
            continue;
        }
        size_t i = r->next++, s = i % r->nslots;
        pthread_mutex_unlock(&r->mu);
        r->load(r->user, i, s);
        pthread_mutex_lock(&r->mu);
        r->ready[s] = 1;
        pthread_cond_broadcast(&r->cv_ready);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

int import_ring_start(import_ring **rp, unsigned threads, size_t begin, size_t end,
                      import_load_fn load, void *user) {
    import_ring *r = calloc(1, sizeof *r);
    if (!r) return -ENOMEM;
    r->load = load;
    r->user = user;
    r->nslots = import_ring_slots(threads);
    r->next = r->consumed = begin;
    r->end = end;
    if (!(r->ready = calloc(r->nslots, 1))) {
        free(r);
        return -ENOMEM;
    }
    if (threads > 1) {
        if (!(r->threads = calloc(threads, sizeof *r->threads))) {
            free(r->ready);
            free(r);
            return -ENOMEM;
        }
        pthread_mutex_init(&r->mu, NULL);
        pthread_cond_init(&r->cv_work, NULL);
        pthread_cond_init(&r->cv_ready, NULL);
        for (unsigned t = 0; t < threads; t++) {
            if (pthread_create(&r->threads[t], NULL, worker, r) != 0) break;
            r->nthreads++;
        }
        if (!r->nthreads) {
            import_ring_stop(r);
            return -EAGAIN;
        }
    }
    *rp = r;
    return 0;
}

size_t import_ring_get(import_ring *r, size_t i) {
    size_t s = i % r->nslots;
    if (!r->threads) {
        r->load(r->user, i, s);
        return s;
    }
    pthread_mutex_lock(&r->mu);
    while (!r->ready[s]) pthread_cond_wait(&r->cv_ready, &r->mu);
    pthread_mutex_unlock(&r->mu);
    return s;
}

void import_ring_release(import_ring *r, size_t i) {
    if (!r || !r->threads) return;
    pthread_mutex_lock(&r->mu);
    r->ready[i % r->nslots] = 0;
    r->consumed = i + 1;
    pthread_cond_broadcast(&r->cv_work);
    pthread_mutex_unlock(&r->mu);
}

int import_step(import_ring *r, size_t i, size_t begin, size_t end, cxs_progress_fn progress,
                void *user, const char *where, const char *verb, cxs_diag *d) {
    import_ring_release(r, i);
    if (progress && progress(user, i + 1 - begin, end - begin))
        return cxs_diagf(d, -ECANCELED, "%s: %s stopped", where, verb);
    return 0;
}

void import_ring_stop(import_ring *r) {
    if (!r) return;
    if (r->threads) {
        pthread_mutex_lock(&r->mu);
        r->stop = 1;
        pthread_cond_broadcast(&r->cv_work);
        pthread_mutex_unlock(&r->mu);
        for (unsigned t = 0; t < r->nthreads; t++) pthread_join(r->threads[t], NULL);
        pthread_mutex_destroy(&r->mu);
        pthread_cond_destroy(&r->cv_work);
        pthread_cond_destroy(&r->cv_ready);
        free(r->threads);
    }
    free(r->ready);
    free(r);
}

int import_commit(cxs_writer **w, int may_be_empty, const char *src, const char *verb,
                  cxs_import_info *res, cxs_import_info *info, cxs_diag *d) {
    cxs_writer_info wi;
    cxs_writer_info_get(*w, &wi);
    if (wi.num_utterances == 0 && !may_be_empty)
        return cxs_diagf(d, CXS_E_INPUT, "%s: no valid utterance to %s (%llu skipped)", src, verb,
                         (unsigned long long)wi.num_skipped);
    int rc = cxs_writer_commit(*w, &res->w, d);
    *w = NULL;
    if (!rc && info) *info = *res;
    return rc;
}
