/* zpool.c - ordered parallel compression of chunks (zpool.h).
 *
 * A ring of 2 x threads slots, counted by three monotonic sequence
 * numbers: head (the oldest chunk not yet given to the sink), next (the
 * next chunk a worker takes) and tail (the next slot the caller fills):
 * head <= next <= tail <= head + slots.  Slots in [head, next) are being
 * compressed or done; [next, tail) wait for a worker.  Only the caller's
 * thread moves head and tail; workers move next. */
#include "zpool.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "cxs_zchunk.h"

typedef struct zslot {
    uint8_t *in, *scratch, *z;
    size_t n, zn;
    int done;
} zslot;

struct cxs_zpool {
    pthread_mutex_t mu;
    pthread_cond_t work, finished;
    zslot *s;
    unsigned ns;
    uint64_t head, next, tail;
    int stop, err;
    pthread_t *th;
    unsigned nth;
    int level;
    uint32_t filter;
    size_t esize, cap, zcap;
};

static void *worker(void *arg) {
    cxs_zpool *p = arg;
    ZSTD_CCtx *cc = ZSTD_createCCtx();
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->next == p->tail) pthread_cond_wait(&p->work, &p->mu);
        if (p->stop) break;
        zslot *s = &p->s[p->next % p->ns];
        p->next++;
        pthread_mutex_unlock(&p->mu);
        size_t zn = cc ? cxs_zchunk_encode(cc, p->level, p->filter, p->esize, s->in, s->n,
                                           s->scratch, s->z, p->zcap)
                       : 0;
        pthread_mutex_lock(&p->mu);
        s->zn = zn;
        s->done = 1;
        pthread_cond_broadcast(&p->finished);
    }
    pthread_mutex_unlock(&p->mu);
    ZSTD_freeCCtx(cc);
    return NULL;
}

int cxs_zpool_create(unsigned threads, size_t cap, int level, uint32_t filter, size_t esize,
                     cxs_zpool **out) {
    if (threads < 2 || cap == 0 || esize == 0) return -EINVAL;
    cxs_zpool *p = calloc(1, sizeof *p);
    if (!p) return -ENOMEM;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->finished, NULL);
    p->ns = 2 * threads;
    p->level = level;
    p->filter = filter;
    p->esize = esize;
    p->cap = cap;
    p->zcap = cxs_zchunk_bound(cap);
    p->s = calloc(p->ns, sizeof *p->s);
    p->th = calloc(threads, sizeof *p->th);
    int rc = p->s && p->th ? 0 : -ENOMEM;
    for (unsigned i = 0; i < p->ns && !rc; i++) {
        p->s[i].in = malloc(cap);
        p->s[i].scratch = malloc(cap);
        p->s[i].z = malloc(p->zcap);
        if (!p->s[i].in || !p->s[i].scratch || !p->s[i].z) rc = -ENOMEM;
    }
    for (unsigned t = 0; t < threads && !rc; t++) {
        if (pthread_create(&p->th[t], NULL, worker, p) != 0) break;
        p->nth++;
    }
    if (!rc && p->nth == 0) rc = -EAGAIN;
    if (rc) {
        cxs_zpool_free(p);
        return rc;
    }
    *out = p;
    return 0;
}

/* Give the oldest chunk to the sink, waiting for it when wait says so.
 * Returns 1 when one was given, 0 when none was ready, or an error. */
static int sink_oldest(cxs_zpool *p, int wait, cxs_zpool_sink sink, void *user) {
    pthread_mutex_lock(&p->mu);
    zslot *s = &p->s[p->head % p->ns];
    while (wait && !s->done) pthread_cond_wait(&p->finished, &p->mu);
    int ready = s->done;
    pthread_mutex_unlock(&p->mu);
    if (!ready) return 0;
    /* The slot is the caller's again: no worker touches a done slot. */
    int rc = s->zn ? sink(user, s->z, s->zn) : -EIO;
    s->done = 0;
    p->head++;
    return rc ? rc : 1;
}

int cxs_zpool_put(cxs_zpool *p, const uint8_t *data, size_t n, cxs_zpool_sink sink, void *user) {
    if (p->err) return p->err;
    if (n == 0 || n > p->cap) return -EINVAL;
    int rc;
    /* Pass on what is finished, and wait for a free slot when all are busy. */
    while (p->head < p->tail) {
        int full = p->tail - p->head == p->ns;
        rc = sink_oldest(p, full, sink, user);
        if (rc < 0) return p->err = rc;
        if (rc == 0) break;
    }
    zslot *s = &p->s[p->tail % p->ns];
    memcpy(s->in, data, n);
    s->n = n;
    pthread_mutex_lock(&p->mu);
    p->tail++;
    pthread_cond_signal(&p->work);
    pthread_mutex_unlock(&p->mu);
    return 0;
}

int cxs_zpool_drain(cxs_zpool *p, cxs_zpool_sink sink, void *user) {
    if (p->err) return p->err;
    while (p->head < p->tail) {
        int rc = sink_oldest(p, 1, sink, user);
        if (rc < 0) return p->err = rc;
    }
    return 0;
}

void cxs_zpool_free(cxs_zpool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    for (unsigned t = 0; t < p->nth; t++) pthread_join(p->th[t], NULL);
    if (p->s)
        for (unsigned i = 0; i < p->ns; i++) {
            free(p->s[i].in);
            free(p->s[i].scratch);
            free(p->s[i].z);
        }
    free(p->s);
    free(p->th);
    pthread_cond_destroy(&p->work);
    pthread_cond_destroy(&p->finished);
    pthread_mutex_destroy(&p->mu);
    free(p);
}
