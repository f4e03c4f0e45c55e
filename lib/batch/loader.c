/* loader.c - worker threads fill a ring of batch buffers ahead of the
 * consumer.
 *
 * Batch b of the epoch always lives in slot b % ring.  A worker may claim b
 * once that slot is free (its previous batch was handed back), fills it
 * without holding the lock, and marks it ready; the consumer takes batches
 * strictly in order.  A reset or a fork bumps `generation`, so a worker that
 * was filling for the old position stops early and throws its batch away
 * (as every worker does when the loader is freed).
 *
 * The first batch of a start is the one the caller waits for with nothing
 * ready before it: every worker fills a part of it (`share`), and only then
 * goes on to batches of its own. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "blocks.h"
#include "dataset_internal.h"
#include "gather.h"
#include "hooks.h"
#include "readahead.h"
#include "samplers.h"

enum { RING_FREE, RING_FILLING, RING_READY, RING_HELD };

typedef struct slot {
    int state;
    int rc;
    cxs_diag diag; /* what rc means, naming the shard and utterance */
    uint64_t batch;
    float *x;
    int64_t *y;
    uint64_t *frames;
    cxs_batch pub;
} slot;

/* The first batch of a start, filled in parts by all the workers: the
 * worker that claims it prepares it (its frames, its read-ahead) and
 * publishes it here; each worker takes the next part; the one that
 * finishes the last part finishes the batch. */
#define SHARE_MIN 128 /* windows per part, at least */

typedef struct share {
    slot *s; /* the batch, or NULL when none is being shared */
    uint64_t b, pos, gen;
    size_t n;
    uint32_t parts, next, done;
    int rc, first;
    cxs_ra_batch rb;
} share;

typedef struct watch {
    const struct cxs_loader *l;
    uint64_t gen;
} watch;

/* A worker's own, kept from batch to batch: its watch, and its gather
 * context (for compressed data, a decoder and buffers made once).  They
 * live in the loader, not on the workers' stacks, so that a forked child
 * (which has none of the parent's threads) can free what they held. */
typedef struct worker_ctx {
    watch w;
    cxs_gather_ctx g;
} worker_ctx;

struct cxs_loader {
    const cxs_dataset *ds;
    const cxs_sampler *sampler;
    cxs_loader_opts o;
    size_t window; /* floats per sample */
    double *norm;  /* normalisation constants (means, then scales), or NULL */
    uint64_t epoch, start, nbatches, length;
    slot *ring;
    uint64_t next_claim, next_take, generation;
    int held; /* slot handed to the consumer, or -1 */
    /* External mode: buffers the caller provided, not yet filled (FIFO). */
    struct {
        float *x;
        int64_t *y;
    } *pool;
    uint32_t pool_head, pool_count;
    int stop;
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_ready;
    pthread_t *threads;
    worker_ctx *wctx; /* o.threads of them, one per worker */
    uint32_t nthreads;
    pid_t pid;
    share sh;         /* under mu */
    int sh_pending;   /* under mu: batch 0 claimed, its share being prepared */
    cxs_readahead ra; /* the helper thread; see readahead.h */
};

static void *worker(void *arg);
static int abandoned(void *arg);

static void pool_push(cxs_loader *l, float *x, int64_t *y) {
    uint32_t at = (l->pool_head + l->pool_count++) % l->o.ring;
    l->pool[at].x = x;
    l->pool[at].y = y;
}

/* Give a slot's buffers back to the pool (external mode) when its batch is
 * thrown away. */
static void slot_discard(cxs_loader *l, slot *s) {
    if (l->o.external && s->x) {
        pool_push(l, s->x, s->y);
        s->x = NULL;
        s->y = NULL;
    }
    s->state = RING_FREE;
}

static uint64_t batches_for(const cxs_loader *l) {
    uint64_t left = l->length - l->start, B = l->o.batch_size;
    return l->o.drop_last ? left / B : left / B + (left % B != 0);
}

static void stop_threads(cxs_loader *l);

/* The workers and the read-ahead helper; at least one worker, or none of
 * them left running and -EAGAIN. */
static int start_threads(cxs_loader *l) {
    l->nthreads = 0;
    if (cxs_ra_start(&l->ra)) return -EAGAIN;
    for (uint32_t t = 0; t < l->o.threads; t++) {
        worker_ctx *wc = &l->wctx[t];
        cxs_gather_ctx_free(&wc->g); /* in a forked child: what a parent thread held */
        *wc = (worker_ctx){.w = {.l = l}, .g = {.cancelled = abandoned, .arg = &wc->w}};
        if (cxs_hook_thread_fails() || pthread_create(&l->threads[t], NULL, worker, wc) != 0) break;
        l->nthreads++;
    }
    if (l->nthreads) return 0;
    stop_threads(l); /* the helper: a retry starts it again */
    __atomic_store_n(&l->stop, 0, __ATOMIC_RELAXED);
    return -EAGAIN;
}

/* Whether the batch a worker fills for generation gen is no longer wanted
 * (a reset, or the loader is being freed): asked, without the lock, every
 * few dozen windows, so that neither waits for whole batches. */
static int abandoned(void *arg) {
    const watch *w = arg;
    return __atomic_load_n(&w->l->stop, __ATOMIC_RELAXED) ||
           __atomic_load_n(&w->l->generation, __ATOMIC_RELAXED) != w->gen;
}

static size_t batch_length(const cxs_loader *l, uint64_t pos) {
    return (size_t)(l->length - pos < l->o.batch_size ? l->length - pos : l->o.batch_size);
}

/* The frames of batch b (at pos, epoch; read under the lock, as a reset may
 * change them) into s->frames, and its read-ahead.  Returns the sampler's
 * code. */
static int fill_begin(cxs_loader *l, slot *s, uint64_t b, uint64_t epoch, uint64_t pos,
                      uint64_t gen, cxs_ra_batch *rb, int *first) {
    size_t n = batch_length(l, pos);
    int rc = l->ra.kind == CXS_RA_BLOCKS
                 ? cxs_ra_batch_frames(&l->ra, l->sampler, epoch, pos, n, s->frames, gen, rb,
                                       &s->diag)
                 : cxs_sampler_get(l->sampler, epoch, pos, n, s->frames);
    *first = !rc && l->ra.kind == CXS_RA_PAGES ? cxs_ra_batch_pages(&l->ra, b, gen, s->frames, n) : 0;
    return rc;
}

/* Windows a..e of the batch in s; a failure's message into d. */
static int fill_part(cxs_loader *l, slot *s, size_t a, size_t e, uint64_t gen, worker_ctx *wc,
                     cxs_diag *d) {
    wc->w.gen = gen;
    const size_t W = l->window;
    return cxs_gather_impl(l->ds, s->frames + a, e - a, l->o.k, l->norm,
                           l->norm ? l->norm + l->ds->meta.dim : NULL, 1, s->x + a * W,
                           l->o.labels ? s->y + a : NULL, &wc->g, d);
}

static void fill_end(cxs_loader *l, slot *s, uint64_t b, uint64_t pos, cxs_ra_batch *rb,
                     int first, int rc) {
    if (l->ra.kind == CXS_RA_BLOCKS) cxs_ra_batch_done(&l->ra, rb);
    cxs_ra_batch_pages_done(&l->ra, first);
    s->rc = rc;
    s->pub = (cxs_batch){s->x, l->o.labels ? s->y : NULL, s->frames, batch_length(l, pos), b, pos};
}

/* Under mu: a filled slot is ready, or thrown away when a reset came
 * meanwhile. */
static void publish(cxs_loader *l, slot *s, uint64_t gen) {
    if (gen == l->generation) {
        s->state = RING_READY;
    } else {
        slot_discard(l, s);
        pthread_cond_broadcast(&l->cv_work);
    }
    pthread_cond_broadcast(&l->cv_ready);
}

/* Under mu (released meanwhile): fill the next part of the shared batch;
 * the worker that completes it finishes and publishes the batch. */
static void fill_shared_part(cxs_loader *l, worker_ctx *wc) {
    share *h = &l->sh;
    slot *s = h->s;
    uint32_t p = h->next++;
    size_t a = h->n * p / h->parts, e = h->n * (p + 1) / h->parts;
    uint64_t gen = h->gen;
    pthread_mutex_unlock(&l->mu);
    cxs_diag pd;
    pd.message[0] = 0;
    int rc = fill_part(l, s, a, e, gen, wc, &pd);
    pthread_mutex_lock(&l->mu);
    if (rc && !h->rc) {
        h->rc = rc;
        memcpy(s->diag.message, pd.message, sizeof pd.message);
    }
    if (++h->done < h->parts) return;
    share d = *h;
    h->s = NULL;
    pthread_mutex_unlock(&l->mu);
    fill_end(l, d.s, d.b, d.pos, &d.rb, d.first, d.rc);
    pthread_mutex_lock(&l->mu);
    publish(l, d.s, d.gen);
}

static void *worker(void *arg) {
    worker_ctx *wc = arg;
    cxs_loader *l = (cxs_loader *)wc->w.l;
    pthread_mutex_lock(&l->mu);
    /* Stopping, a worker still helps finish a shared batch (its parts end
     * at once, cancelled): its read-ahead is then given back. */
    while (!l->stop || (l->sh.s && l->sh.next < l->sh.parts)) {
        if (l->sh.s && l->sh.next < l->sh.parts) {
            fill_shared_part(l, wc);
            continue;
        }
        if (l->sh_pending) { /* batch 0 is about to be shared: help with it first */
            pthread_cond_wait(&l->cv_work, &l->mu);
            continue;
        }
        uint64_t b = l->next_claim;
        slot *s = b < l->nbatches ? &l->ring[b % l->o.ring] : NULL;
        if (!s || s->state != RING_FREE || (l->o.external && !l->pool_count)) {
            pthread_cond_wait(&l->cv_work, &l->mu);
            continue;
        }
        if (l->o.external) {
            s->x = l->pool[l->pool_head].x;
            s->y = l->pool[l->pool_head].y;
            l->pool_head = (l->pool_head + 1) % l->o.ring;
            l->pool_count--;
        }
        s->state = RING_FILLING;
        s->batch = b;
        l->next_claim++;
        uint64_t gen = l->generation, epoch = l->epoch, pos = l->start + b * l->o.batch_size;
        size_t n = batch_length(l, pos);
        uint32_t parts = b == 0 && !l->sh.s ? (uint32_t)(n / SHARE_MIN) : 0;
        if (parts > l->o.threads) parts = l->o.threads;
        if (parts > 1) l->sh_pending = 1; /* the others wait for its parts */
        pthread_mutex_unlock(&l->mu);
        cxs_ra_claimed(&l->ra);
        cxs_ra_batch rb;
        rb.plan = NULL;
        s->diag.message[0] = 0;
        int first, rc = fill_begin(l, s, b, epoch, pos, gen, &rb, &first);
        if (parts > 1) {
            pthread_mutex_lock(&l->mu);
            l->sh_pending = 0;
            pthread_cond_broadcast(&l->cv_work);
            if (!rc) {
                l->sh = (share){.s = s, .b = b, .pos = pos, .gen = gen, .n = n, .parts = parts,
                                .first = first, .rb = rb};
                continue; /* with the lock: take the first part */
            }
            pthread_mutex_unlock(&l->mu);
        }
        if (!rc) rc = fill_part(l, s, 0, n, gen, wc, &s->diag);
        fill_end(l, s, b, pos, &rb, first, rc);
        pthread_mutex_lock(&l->mu);
        publish(l, s, gen);
    }
    pthread_mutex_unlock(&l->mu);
    cxs_gather_ctx_free(&wc->g);
    return NULL;
}

static void stop_threads(cxs_loader *l) {
    pthread_mutex_lock(&l->mu);
    __atomic_store_n(&l->stop, 1, __ATOMIC_RELAXED); /* also read by abandoned() */
    pthread_cond_broadcast(&l->cv_work);
    cxs_ra_wake(&l->ra);
    pthread_mutex_unlock(&l->mu);
    for (uint32_t t = 0; t < l->nthreads; t++) pthread_join(l->threads[t], NULL);
    l->nthreads = 0;
    cxs_ra_stop(&l->ra);
}

void cxs_loader_free(cxs_loader *l) {
    if (!l) return;
    /* In a forked child the parent's workers do not exist: nothing to join. */
    if (l->pid == getpid()) stop_threads(l);
    cxs_ra_destroy(&l->ra);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv_work);
    pthread_cond_destroy(&l->cv_ready);
    for (uint32_t i = 0; l->ring && i < l->o.ring; i++) {
        if (!l->o.external) { /* external buffers belong to the caller */
            free(l->ring[i].x);
            free(l->ring[i].y);
        }
        free(l->ring[i].frames);
    }
    free(l->ring);
    free(l->pool);
    free(l->threads);
    for (uint32_t t = 0; l->wctx && t < l->o.threads; t++) cxs_gather_ctx_free(&l->wctx[t].g);
    free(l->wctx);
    free(l->norm);
    free(l);
}

/* The options cxs_loader_create refuses, each with its reason. */
static int check_opts(const cxs_dataset *ds, const cxs_sampler *sampler,
                      const cxs_loader_opts *o, uint64_t start, cxs_diag *d) {
    if (o->batch_size == 0) return cxs_diagf(d, CXS_E_INVALID, "loader: batch_size must be at least 1");
    if (o->k > 1000000)
        return cxs_diagf(d, CXS_E_INVALID, "loader: context k=%u is above 1,000,000", o->k);
    if (o->threads > 256)
        return cxs_diagf(d, CXS_E_INVALID, "loader: threads %u is above 256", o->threads);
    if (o->ring > 1024)
        return cxs_diagf(d, CXS_E_INVALID, "loader: ring %u is above 1024 buffers", o->ring);
    if (o->flags & ~CXS_GATHER_NORMALIZE)
        return cxs_diagf(d, CXS_E_INVALID, "loader: unknown flags 0x%x", o->flags);
    if (o->external > 1) return cxs_diagf(d, CXS_E_INVALID, "loader: external must be 0 or 1");
    if (o->readahead > CXS_READAHEAD_OFF)
        return cxs_diagf(d, CXS_E_INVALID,
                         "loader: unknown readahead %u (0: auto, %u: off)", o->readahead,
                         CXS_READAHEAD_OFF);
    if ((o->flags & CXS_GATHER_NORMALIZE) && !ds->norm_mean && !o->norm)
        return cxs_diagf(d, CXS_E_INVALID,
                         "loader: normalisation asked of a dataset without statistics (give "
                         "the training split's, norm)");
    if (start > cxs_sampler_length(sampler))
        return cxs_diagf(d, CXS_E_INVALID, "loader: start %llu is past the epoch's %llu samples",
                         (unsigned long long)start,
                         (unsigned long long)cxs_sampler_length(sampler));
    if (o->labels && !ds->meta.label_width)
        return cxs_diagf(d, CXS_E_NO_LABELS,
                         "loader: labels asked of a dataset that has none (features only, like "
                         "a test split): set labels to 0");
    return 0;
}

int cxs_loader_create(const cxs_dataset *ds, const cxs_sampler *sampler,
                      const cxs_loader_opts *opts, uint64_t epoch, uint64_t start,
                      cxs_loader **out) {
    return cxs_loader_create_ex(ds, sampler, opts, epoch, start, out, NULL);
}

int cxs_loader_create_ex(const cxs_dataset *ds, const cxs_sampler *sampler,
                         const cxs_loader_opts *opts, uint64_t epoch, uint64_t start,
                         cxs_loader **out, cxs_diag *d) {
    if (!ds || !sampler || !opts || !out)
        return cxs_diagf(d, CXS_E_INVALID, "loader: no dataset, sampler, options or result pointer");
    int rc = check_opts(ds, sampler, opts, start, d);
    if (rc) return rc;
    cxs_loader *l = calloc(1, sizeof *l);
    if (!l) return cxs_diagf(d, -ENOMEM, "loader: out of memory");
    l->ds = ds;
    l->sampler = sampler;
    l->o = *opts;
    l->o.norm = NULL; /* copied into l->norm; the caller's may go */
    if ((opts->flags & CXS_GATHER_NORMALIZE)) {
        cxs_diag nd;
        int nrc = cxs_norm_constants(ds, opts->norm, &l->norm, &nd);
        if (nrc) {
            free(l);
            return cxs_diagf(d, nrc, "loader: %s", nd.message);
        }
    }
    if (!l->o.threads) l->o.threads = cxs_default_threads();
    /* One slot filling per worker, one ready ahead, one with the consumer:
     * more only evicts the batches from the cache before they are used. */
    if (!l->o.ring) l->o.ring = l->o.threads + 2;
    if (l->o.ring < 3) l->o.ring = 3;
    l->window = (2 * (size_t)l->o.k + 1) * ds->meta.dim;
    /* a shuffled epoch looks frames up all over INDEX: map it at once
     * rather than page by page in the first batches */
    cxs_index_populate(ds);
    l->epoch = epoch;
    l->start = start;
    l->length = cxs_sampler_length(sampler);
    l->nbatches = batches_for(l);
    l->held = -1;
    l->pid = getpid();
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv_work, NULL);
    pthread_cond_init(&l->cv_ready, NULL);
    l->ring = calloc(l->o.ring, sizeof *l->ring);
    l->threads = calloc(l->o.threads, sizeof *l->threads);
    l->wctx = calloc(l->o.threads, sizeof *l->wctx);
    l->pool = calloc(l->o.ring, sizeof *l->pool);
    rc = l->ring && l->threads && l->wctx && l->pool ? 0 : -ENOMEM;
    size_t B = l->o.batch_size;
    if (!rc)
        rc = cxs_ra_init(&l->ra, ds, sampler, l->o.readahead != CXS_READAHEAD_OFF, B, l->o.k,
                         &l->mu, &l->generation, &l->epoch, &l->start, &l->next_claim,
                         &l->nbatches, &l->stop);
    if (!rc && l->window > SIZE_MAX / sizeof(float) / B) rc = CXS_E_INVALID;
    for (uint32_t i = 0; !rc && i < l->o.ring; i++) {
        slot *s = &l->ring[i];
        s->frames = malloc(B * sizeof *s->frames);
        if (!s->frames) rc = -ENOMEM;
        if (l->o.external) continue;
        size_t bytes = B * l->window * sizeof(float);
        /* 2 MiB-aligned so that the kernel can back the buffer with huge
         * pages: fewer page faults at first use and fewer TLB misses while
         * windows are written all over it. */
        if (posix_memalign((void **)&s->x, bytes >= (2u << 20) ? (2u << 20) : 64, bytes)) s->x = NULL;
#ifdef MADV_HUGEPAGE
        else if (bytes >= (2u << 20)) madvise(s->x, bytes, MADV_HUGEPAGE);
#endif
        s->y = malloc(B * sizeof *s->y);
        if (!s->x || !s->y) rc = -ENOMEM;
    }
    if (!rc) rc = start_threads(l);
    if (rc) {
        cxs_loader_free(l);
        if (rc == CXS_E_INVALID)
            return cxs_diagf(d, rc, "loader: a batch of %u windows of k=%u is too large to address",
                             opts->batch_size, opts->k);
        return cxs_diagf(d, rc, "loader: %s", cxs_strerror(rc));
    }
    *out = l;
    return 0;
}

/* The first call in a forked child: fresh locks and workers, resuming at the
 * consumer's position. */
static int respawn(cxs_loader *l) {
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv_work, NULL);
    pthread_cond_init(&l->cv_ready, NULL);
    cxs_ra_after_fork(&l->ra);
    __atomic_add_fetch(&l->generation, 1, __ATOMIC_RELAXED);
    __atomic_store_n(&l->stop, 0, __ATOMIC_RELAXED);
    /* the parent's workers were filling it: give back its plan reference */
    if (l->sh.s && l->ra.kind == CXS_RA_BLOCKS && l->sh.rb.plan)
        cxs_block_plan_put(cxs_sampler_blocks(l->sampler), l->sh.rb.plan);
    l->sh.s = NULL;
    l->sh_pending = 0;
    for (uint32_t i = 0; i < l->o.ring; i++)
        if ((int)i != l->held) slot_discard(l, &l->ring[i]);
    l->next_claim = l->next_take;
    int rc = start_threads(l);
    /* only once workers run (as the utterance loader does): a failed start
     * is retried by the next call instead of waiting for batches no one
     * fills */
    if (!rc) l->pid = getpid();
    return rc;
}

static int any_filling(const cxs_loader *l) {
    for (uint32_t i = 0; i < l->o.ring; i++)
        if (l->ring[i].state == RING_FILLING) return 1;
    return 0;
}

int cxs_loader_next(cxs_loader *l, const cxs_batch **batch) {
    return cxs_loader_next_ex(l, batch, NULL);
}

int cxs_loader_next_ex(cxs_loader *l, const cxs_batch **batch, cxs_diag *d) {
    if (!l || !batch) return cxs_diagf(d, CXS_E_INVALID, "loader: no loader or batch pointer");
    if (l->pid != getpid()) {
        int rc = respawn(l);
        if (rc)
            return cxs_diagf(d, rc, "loader: no worker thread could start in this process: %s",
                             cxs_strerror(rc));
    }
    pthread_mutex_lock(&l->mu);
    if (l->held >= 0) {
        slot *h = &l->ring[l->held];
        if (l->o.external) h->x = NULL, h->y = NULL; /* the caller owns them now */
        h->state = RING_FREE;
        l->held = -1;
        pthread_cond_broadcast(&l->cv_work);
    }
    if (l->next_take >= l->nbatches) {
        pthread_mutex_unlock(&l->mu);
        *batch = NULL;
        return 0;
    }
    uint32_t i = (uint32_t)(l->next_take % l->o.ring);
    slot *s = &l->ring[i];
    while (!(s->state == RING_READY && s->batch == l->next_take)) {
        /* External mode without a buffer for this batch: nothing would ever
         * fill it, unless a buffer is still on its way back from a batch a
         * reset threw away (a slot still filling). */
        if (l->o.external && s->state == RING_FREE && !l->pool_count && !any_filling(l)) {
            pthread_mutex_unlock(&l->mu);
            return cxs_diagf(d, CXS_E_INVALID,
                             "loader: no buffer provided for the next batch (cxs_loader_provide)");
        }
        pthread_cond_wait(&l->cv_ready, &l->mu);
    }
    int rc = s->rc;
    s->state = RING_HELD;
    l->held = (int)i;
    l->next_take++;
    pthread_mutex_unlock(&l->mu);
    if (rc) {
        /* the slot is held: no worker writes its message now */
        if (s->diag.message[0]) return cxs_diagf(d, rc, "%s", s->diag.message);
        return cxs_diagf(d, rc, "loader: batch %llu: %s", (unsigned long long)s->batch,
                         cxs_strerror(rc));
    }
    *batch = &s->pub;
    return 0;
}

int cxs_loader_reset(cxs_loader *l, uint64_t epoch, uint64_t start) {
    if (!l || start > l->length) return CXS_E_INVALID;
    if (l->pid != getpid()) {
        l->held = -1;
        l->next_take = 0;
        int rc = respawn(l);
        if (rc) return rc;
    }
    pthread_mutex_lock(&l->mu);
    __atomic_add_fetch(&l->generation, 1, __ATOMIC_RELAXED); /* also read by abandoned() */
    for (uint32_t i = 0; i < l->o.ring; i++) {
        slot *x = &l->ring[i];
        if (x->state == RING_READY) slot_discard(l, x);
        else if (x->state == RING_HELD) {
            if (l->o.external) x->x = NULL, x->y = NULL; /* handed out: the caller's */
            x->state = RING_FREE;
        }
    }
    l->held = -1;
    l->epoch = epoch;
    l->start = start;
    l->nbatches = batches_for(l);
    l->next_claim = l->next_take = 0;
    pthread_cond_broadcast(&l->cv_work);
    cxs_ra_wake(&l->ra);
    pthread_mutex_unlock(&l->mu);
    return 0;
}

uint32_t cxs_loader_ring(const cxs_loader *l) { return l ? l->o.ring : 0; }

int cxs_loader_provide(cxs_loader *l, float *x, int64_t *y) {
    if (!l || !l->o.external || !x || (l->o.labels && !y)) return CXS_E_INVALID;
    if (l->pid != getpid()) {
        int rc = respawn(l);
        if (rc) return rc;
    }
    pthread_mutex_lock(&l->mu);
    uint32_t owned = l->pool_count;
    for (uint32_t i = 0; i < l->o.ring; i++)
        owned += l->ring[i].x != NULL && l->ring[i].state != RING_HELD;
    int rc = 0;
    if (owned >= l->o.ring) {
        rc = CXS_E_INVALID; /* every slot already has a buffer */
    } else {
        pool_push(l, x, y);
        pthread_cond_broadcast(&l->cv_work);
    }
    pthread_mutex_unlock(&l->mu);
    return rc;
}
