/* source.c - the block source (see source.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "source.h"
#include "remote.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#define STEP (4u << 20) /* pread size: large enough to run at the disk's sequential rate */

/* ---- the fetch-ahead (CXS_SRC_AHEAD of a streamed dataset) ----------------
 *
 * One thread, with a stream user of its own (its locks its own), takes the
 * ranges cxs_src_want queues, in order, and fetches what the cache lacks
 * of each: fetched, not held, so that the limit and the other readers see
 * it as any block no one reads now (its use stamps make it the last to be
 * evicted).  Its failures are the next hold's to meet and say. */
typedef struct cxs_src_ahead {
    pthread_t th;
    int running;
    pid_t pid;               /* the process whose thread it is */
    int stop;                /* under mu; the fetch reads it unlocked */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    cxs_src_range *q;        /* queued: q[head .. n) */
    size_t head, n, cap;
    struct cxs_stream_user *su;
} cxs_src_ahead;

static void *ahead_main(void *arg) {
    cxs_src_ahead *a = arg;
    pthread_mutex_lock(&a->mu);
    while (!a->stop) {
        if (a->head == a->n) {
            pthread_cond_wait(&a->cv, &a->mu);
            continue;
        }
        const cxs_src_range r = a->q[a->head++];
        pthread_mutex_unlock(&a->mu);
        cxs_diag d;
        if (!cxs_stream_acquire(a->su, r.shard, r.lo, r.hi, &a->stop, &d))
            cxs_stream_release(a->su, r.shard, r.lo, r.hi, 0);
        pthread_mutex_lock(&a->mu);
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

static int ahead_start(cxs_src_ahead *a) {
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
    a->stop = 0, a->head = a->n = 0;
    cxs_stream_user_cancel(a->su, 0);
    if (pthread_create(&a->th, NULL, ahead_main, a)) return -EAGAIN;
    a->running = 1;
    a->pid = getpid();
    return 0;
}

/* In a forked child, whose copy of the thread's state is the parent's:
 * its queue and its user's locks are forgotten. */
static void ahead_forked(cxs_src_ahead *a) {
    if (!a->running || a->pid == getpid()) return;
    a->running = 0;
    cxs_stream_user_after_fork(a->su);
}

static void ahead_stop(cxs_src_ahead *a) {
    if (!a->running) return;
    pthread_mutex_lock(&a->mu);
    __atomic_store_n(&a->stop, 1, __ATOMIC_RELAXED);
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    cxs_stream_user_cancel(a->su, 1); /* a transfer in flight ends now */
    pthread_join(a->th, NULL);
    a->running = 0;
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->cv);
}

int cxs_src_init(cxs_src *src, const cxs_dataset *ds, unsigned flags) {
    memset(src, 0, sizeof *src);
    src->ds = ds;
    if ((flags & CXS_SRC_FDS) && cxs_shard_fds_init(&src->fds, ds)) return -ENOMEM;
    if (ds->stream && cxs_stream_user_new(ds->stream, &src->su)) return -ENOMEM;
    if ((flags & CXS_SRC_READ) == CXS_SRC_READ) {
        src->scratch = malloc(STEP);
        src->xs = XXH3_createState();
        if (!src->scratch || !src->xs) return -ENOMEM;
    }
    if ((flags & CXS_SRC_AHEAD) && ds->stream) {
        if (!(src->ahead = calloc(1, sizeof *src->ahead)) ||
            cxs_stream_user_new(ds->stream, &src->ahead->su))
            return -ENOMEM;
        return ahead_start(src->ahead);
    }
    return 0;
}

void cxs_src_destroy(cxs_src *src, int forked) {
    /* In a forked child the descriptors that still name their shard are
     * the only ones ours to close (shardfd.h), and the locks stay the
     * parent's. */
    if (forked && src->fds.fds) cxs_shard_fds_after_fork(&src->fds);
    if (forked) cxs_stream_user_after_fork(src->su);
    cxs_shard_fds_free(&src->fds);
    cxs_stream_user_free(src->su);
    src->su = NULL;
    free(src->scratch);
    src->scratch = NULL;
    if (src->xs) XXH3_freeState(src->xs);
    src->xs = NULL;
    if (src->ahead) {
        ahead_forked(src->ahead);
        ahead_stop(src->ahead);
        cxs_stream_user_free(src->ahead->su);
        free(src->ahead->q);
        free(src->ahead);
        src->ahead = NULL;
    }
}

void cxs_src_after_fork(cxs_src *src) {
    if (src->fds.fds) cxs_shard_fds_after_fork(&src->fds);
    cxs_stream_user_after_fork(src->su);
    cxs_src_ahead *a = src->ahead;
    if (a && a->running && a->pid != getpid()) { /* the parent's thread is not the child's */
        ahead_forked(a);
        ahead_start(a); /* (none: nothing is fetched ahead, the holds fetch) */
    }
}

void cxs_src_cancel(cxs_src *src, int on) {
    cxs_stream_user_cancel(src->su, on);
    cxs_src_ahead *a = src->ahead;
    if (!a || !a->running) return;
    if (on) cxs_src_unwant(src);
    cxs_stream_user_cancel(a->su, on);
}

int cxs_src_hold(cxs_src *src, uint32_t s, uint64_t lo, uint64_t hi, const int *stop,
                 cxs_diag *d) {
    return src->su ? cxs_stream_acquire(src->su, s, lo, hi, stop, d) : 0;
}

void cxs_src_release(cxs_src *src, uint32_t s, uint64_t lo, uint64_t hi, int drop) {
    if (src->su && hi > lo) cxs_stream_release(src->su, s, lo, hi, drop);
}

void cxs_src_want(cxs_src *src, uint32_t s, uint64_t off, uint64_t len) {
    cxs_src_ahead *a = src->ahead;
    if (a && a->running && len) {
        pthread_mutex_lock(&a->mu);
        if (a->head == a->n) a->head = a->n = 0;
        if (a->n == a->cap) {
            size_t cap = a->cap ? 2 * a->cap : 64;
            cxs_src_range *q = realloc(a->q, cap * sizeof *q);
            if (q) a->q = q, a->cap = cap;
        }
        if (a->n < a->cap) { /* (else not fetched ahead: the hold fetches it) */
            a->q[a->n++] = (cxs_src_range){s, off, off + len};
            pthread_cond_broadcast(&a->cv);
        }
        pthread_mutex_unlock(&a->mu);
        return;
    }
    int fd = len && src->fds.fds ? cxs_shard_fd(&src->fds, s) : -1;
    if (fd >= 0) posix_fadvise(fd, (off_t)off, (off_t)len, POSIX_FADV_WILLNEED);
}

void cxs_src_unwant(cxs_src *src) {
    cxs_src_ahead *a = src->ahead;
    if (!a || !a->running) return;
    pthread_mutex_lock(&a->mu);
    a->head = a->n = 0;
    pthread_mutex_unlock(&a->mu);
}

uint64_t cxs_src_ahead_room(const cxs_src *src, uint64_t held) {
    const cxs_dataset *ds = src->ds;
    if (!ds->stream) return 0;
    const uint64_t limit = cxs_stream_limit(ds->stream);
    if (!limit) return UINT64_MAX;
    uint64_t meta = 0; /* what is never evicted: all but FEATURES, and a page a file */
    for (uint32_t s = 0; s < ds->meta.num_shards; s++) {
        const cxs_bsum_entry *e = cxs_blocksums_find(&ds->shards[s].bs, CXS_SEC_FEATURES);
        meta += ds->shards[s].size - (e ? e->sec->length : 0) + 2 * CXS_PAGE;
    }
    /* a quarter of what is left: the rest keeps blocks a later round or
     * epoch may read again (a tight cache full of blocks fetched ahead
     * has none: at a half, two epochs through a cache of half the dataset
     * fetched 2.0 times its features, against 1.8 before the fetch-ahead) */
    return limit > meta + held ? (limit - meta - held) / 4 : 0;
}

void cxs_src_evict(cxs_src *src, uint32_t s, uint64_t off, uint64_t len) {
    if (src->fds.fds) cxs_range_drop(&src->fds, s, off, len);
    if (src->su && len) cxs_stream_drop(src->su, s, off, off + len);
}

/* Read in STEP pieces, each pread returning when it is there, with the
 * next AHEAD_STEPS pieces asked for (POSIX_FADV_WILLNEED) so that the
 * disk always has a few requests in flight.  Not the whole range at once:
 * tens of megabytes queued ahead would delay every other read (a first
 * batch's pages) by as long.  A block is hashed once per process: one the
 * bitmap has already is not hashed again, and one that passes is told to
 * it (blocksrc.h). */
#define AHEAD_STEPS 4
int cxs_src_read(cxs_src *src, uint32_t s, uint64_t off, uint64_t len, const int *stop,
                 void (*pace)(void *), void *arg, cxs_diag *d) {
    const cxs_dataset *ds = src->ds;
    int fd = cxs_shard_fd(&src->fds, s);
    if (fd < 0 && src->su) /* nothing may be read unfetched */
        return cxs_diagf(d, fd, "%s: %s", ds->shards[s].path, strerror(-fd));
    if (fd < 0 || !len) return 0;
    const shard *sh = &ds->shards[s];
    const cxs_bsum_entry *e = cxs_blocksums_find(&sh->bs, CXS_SEC_FEATURES);
    /* NULL: nothing to hash (every block checked, a streamed dataset's by
     * its fetch, or the check off in a test build's benchmark) */
    cxs_bcheck *bc = sh->bc_feat;
    if (bc && __atomic_load_n(&bc->all, __ATOMIC_ACQUIRE)) bc = NULL;
    uint64_t lo = off, hi = off + len, j = 0, base = 0, bend = 0;
    int known = 0; /* block j checked already: not hashed */
    if (e) { /* whole sum blocks: [lo, hi) from block j's start */
        const uint64_t B = 1ull << e->shift;
        base = e->sec->offset;
        j = (lo - base) >> e->shift;
        lo = base + (j << e->shift);
        uint64_t rel = (hi - base + B - 1) & ~(B - 1);
        hi = base + (rel < e->sec->length ? rel : e->sec->length);
        XXH3_64bits_reset(src->xs);
        uint64_t s0;
        cxs_bsum_block(e, j, &s0, &bend);
        bend += base;
        known = !bc || cxs_bsrc_has(bc, j);
    }
    /* a streamed dataset: what the cache lacks, fetched and checked first */
    int rc = cxs_src_hold(src, s, lo, hi, stop, d);
    if (rc) return rc;
    uint64_t asked = lo; /* asked for up to here */
    for (uint64_t at = lo; at < hi;) {
        if (__atomic_load_n(stop, __ATOMIC_RELAXED)) return 0; /* the caller is going */
        uint64_t want = at + (uint64_t)(AHEAD_STEPS + 1) * STEP;
        if (want > hi) want = hi;
        if (asked < want) {
            posix_fadvise(fd, (off_t)asked, (off_t)(want - asked), POSIX_FADV_WILLNEED);
            asked = want;
        }
        if (pace) pace(arg);
        size_t n = hi - at < STEP ? (size_t)(hi - at) : STEP;
        ssize_t got = pread(fd, src->scratch, n, (off_t)at);
        if (got <= 0) return 0;
        for (uint64_t p = at, end = at + (uint64_t)got; e && p < end;) {
            uint64_t take = (bend < end ? bend : end) - p;
            if (!known) XXH3_64bits_update(src->xs, src->scratch + (p - at), (size_t)take);
            p += take;
            if (p < bend) break;
            if (!known) {
                if (cxs_checksum_differs(XXH3_64bits_digest(src->xs), cxs_bsum_of(&sh->bs, e, j))) {
                    rc = cxs_block_failed(ds, s, e, j, d);
                    cxs_src_release(src, s, lo, hi, 1); /* (a failure holds nothing) */
                    return rc;
                }
                cxs_bsrc_mark(bc, j);
            }
            XXH3_64bits_reset(src->xs);
            uint64_t s0;
            if (++j < e->num_blocks)
                cxs_bsum_block(e, j, &s0, &bend), bend += base, known = !bc || cxs_bsrc_has(bc, j);
        }
        at += (uint64_t)got;
    }
    return 0;
}

static int by_place(const void *a, const void *b) {
    const cxs_src_range *x = a, *y = b;
    if (x->shard != y->shard) return x->shard < y->shard ? -1 : 1;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

int cxs_src_batch_hold(cxs_src *src, cxs_src_batch *h, const uint64_t *utts, size_t n,
                       const int *stop, cxs_diag *d) {
    const cxs_dataset *ds = src->ds;
    h->n = 0;
    if (!src->su || !n) return 0;
    if (h->cap < n) {
        cxs_src_range *r = realloc(h->r, n * sizeof *r);
        if (!r) return cxs_diagf(d, -ENOMEM, "%s: out of memory", ds->url);
        h->r = r, h->cap = n;
    }
    for (size_t i = 0; i < n; i++) {
        cxs_uloc ul;
        int rc = cxs_utt_loc_safe(ds, utts[i], &ul, d);
        if (rc) return rc;
        const uint64_t off = (uint64_t)(cxs_loc_row_ptr(ds, &ul, 0) - ds->shards[ul.shard].map);
        h->r[i] = (cxs_src_range){ul.shard, off, off + ul.T * ds->row_bytes};
    }
    qsort(h->r, n, sizeof *h->r, by_place);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (h->r[i].lo == h->r[i].hi) continue; /* (no frames: nothing to hold) */
        if (m && h->r[m - 1].shard == h->r[i].shard && h->r[i].lo <= h->r[m - 1].hi) {
            if (h->r[i].hi > h->r[m - 1].hi) h->r[m - 1].hi = h->r[i].hi;
        } else {
            h->r[m++] = h->r[i];
        }
    }
    for (size_t i = 0; i < m; i++) {
        int rc = cxs_src_hold(src, h->r[i].shard, h->r[i].lo, h->r[i].hi, stop, d);
        if (rc) {
            h->n = i;
            cxs_src_batch_release(src, h);
            return rc;
        }
    }
    h->n = m;
    return 0;
}

void cxs_src_batch_release(cxs_src *src, cxs_src_batch *h) {
    for (size_t i = 0; i < h->n; i++) cxs_src_release(src, h->r[i].shard, h->r[i].lo, h->r[i].hi, 0);
    h->n = 0;
}

void cxs_src_batch_free(cxs_src_batch *h) {
    free(h->r);
    h->r = NULL, h->n = h->cap = 0;
}
