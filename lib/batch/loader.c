/* loader.c - the frame loader: worker threads gather batches of windows
 * into the batch ring (ring.h) ahead of the consumer, with the read-ahead
 * helper (readahead.h) reading or advising the pages they will need.
 *
 * The first batch of a start is the one the caller waits for with nothing
 * ready before it: every worker fills a part of it (`share`), and only then
 * goes on to batches of its own.
 *
 * External mode (cxs_loader_opts.external): the batch buffers are the
 * caller's, given with cxs_loader_provide and kept in a FIFO pool; a slot
 * is claimed only with a buffer from it, a batch thrown away gives its
 * buffer back, and a batch handed out is the caller's. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "abi.h"
#include "blocks.h"
#include "dataset_internal.h"
#include "gather.h"
#include "readahead.h"
#include "position.h"
#include "ring.h"
#include "samplers.h"

/* A slot's buffers and the batch handed out from them; its state, code
 * and message are the ring's (ring.slot[i]). */
typedef struct slot {
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
    uint32_t i; /* the batch's slot */
    int active; /* 0 when no batch is being shared */
    uint64_t b, pos, gen;
    size_t n;
    uint32_t parts, next, done;
    int rc, first;
    cxs_ra_batch rb;
} share;

/* A worker's own, kept from batch to batch: what it claimed (under the
 * lock) for its fill, and its gather context (for compressed data, a
 * decoder and buffers made once).  They live in the loader, not on the
 * workers' stacks, so that a forked child (which has none of the parent's
 * threads) can free what they held. */
typedef struct worker_ctx {
    struct cxs_loader *l;
    uint64_t epoch, pos; /* of the claimed batch */
    uint32_t parts;           /* > 1: it is shared */
    uint64_t fill_gen;        /* the generation its gather serves (abandoned) */
    cxs_gather_ctx g;
} worker_ctx;

struct cxs_loader {
    const cxs_dataset *ds;
    const cxs_sampler *sampler;
    cxs_loader_opts o;
    size_t window; /* floats per sample */
    double *norm;  /* normalisation constants (means, then scales), or NULL */
    uint64_t epoch, start, length; /* under ring.mu */
    cxs_ring ring;
    slot *slots; /* o.ring of them, beside ring.slot */
    /* External mode: buffers the caller provided, not yet filled (FIFO). */
    struct {
        float *x;
        int64_t *y;
    } *pool;
    uint32_t pool_head, pool_count;
    worker_ctx *wctx; /* o.threads of them, one per worker */
    share sh;         /* under ring.mu */
    int sh_pending;   /* under ring.mu: batch 0 claimed, its share being prepared */
    cxs_readahead ra; /* the helper thread; see readahead.h */
};

static void pool_push(cxs_loader *l, float *x, int64_t *y) {
    uint32_t at = (l->pool_head + l->pool_count++) % l->o.ring;
    l->pool[at].x = x;
    l->pool[at].y = y;
}

static uint64_t batches_for(const cxs_loader *l) {
    uint64_t left = l->length - l->start, B = l->o.batch_size;
    return l->o.drop_last ? left / B : left / B + (left % B != 0);
}

/* Whether the batch a worker fills is no longer wanted (a reset, or the
 * loader is being freed): asked, without the lock, every few dozen
 * windows, so that neither waits for whole batches. */
static int abandoned(void *arg) {
    const worker_ctx *wc = arg;
    return cxs_ring_abandoned(&wc->l->ring, wc->fill_gen);
}

static size_t batch_length(const cxs_loader *l, uint64_t pos) {
    return (size_t)(l->length - pos < l->o.batch_size ? l->length - pos : l->o.batch_size);
}

/* The frames of batch b (at pos, epoch) into s->frames, and its
 * read-ahead.  Returns the sampler's code. */
static int fill_begin(cxs_loader *l, uint32_t i, uint64_t b, uint64_t epoch, uint64_t pos,
                      uint64_t gen, cxs_ra_batch *rb, int *first) {
    slot *s = &l->slots[i];
    size_t n = batch_length(l, pos);
    int rc = l->ra.kind == CXS_RA_BLOCKS
                 ? cxs_ra_batch_frames(&l->ra, l->sampler, epoch, pos, n, s->frames, gen, rb,
                                       &l->ring.slot[i].diag)
                 : cxs_sampler_get(l->sampler, epoch, pos, n, s->frames);
    *first = !rc && l->ra.kind == CXS_RA_PAGES ? cxs_ra_batch_pages(&l->ra, b, gen, s->frames, n) : 0;
    return rc;
}

/* Windows a..e of the batch in slot i; a failure's message into d. */
static int fill_part(cxs_loader *l, uint32_t i, size_t a, size_t e, uint64_t gen,
                     worker_ctx *wc, cxs_diag *d) {
    slot *s = &l->slots[i];
    wc->fill_gen = gen;
    const size_t W = l->window;
    return cxs_gather_impl(l->ds, s->frames + a, e - a, l->o.k, l->norm,
                           l->norm ? l->norm + l->ds->meta.dim : NULL, 1, s->x + a * W,
                           l->o.labels ? s->y + a : NULL, &wc->g, d);
}

static void fill_end(cxs_loader *l, uint32_t i, uint64_t b, uint64_t pos, cxs_ra_batch *rb,
                     int first) {
    slot *s = &l->slots[i];
    if (l->ra.kind == CXS_RA_BLOCKS) cxs_ra_batch_done(&l->ra, rb);
    cxs_ra_batch_pages_done(&l->ra, first);
    s->pub = (cxs_batch){s->x, l->o.labels ? s->y : NULL, s->frames, batch_length(l, pos), b, pos};
}

/* ---- the ring's callbacks (ring.h) ------------------------------------ */

static int can_claim(void *owner, uint32_t i) {
    const cxs_loader *l = owner;
    (void)i;
    return !l->o.external || l->pool_count;
}

static void claim(void *owner, uint32_t w, uint32_t i, uint64_t b, uint64_t gen) {
    cxs_loader *l = owner;
    worker_ctx *wc = &l->wctx[w];
    if (l->o.external) {
        l->slots[i].x = l->pool[l->pool_head].x;
        l->slots[i].y = l->pool[l->pool_head].y;
        l->pool_head = (l->pool_head + 1) % l->o.ring;
        l->pool_count--;
    }
    (void)gen;
    wc->epoch = l->epoch, wc->pos = l->start + b * l->o.batch_size;
    size_t n = batch_length(l, wc->pos);
    uint32_t parts = b == 0 && !l->sh.active ? (uint32_t)(n / SHARE_MIN) : 0;
    if (parts > l->o.threads) parts = l->o.threads;
    wc->parts = parts;
    if (parts > 1) l->sh_pending = 1; /* the others wait for its parts */
}

static int fill(void *owner, uint32_t w, uint32_t i, uint64_t b, uint64_t gen) {
    cxs_loader *l = owner;
    worker_ctx *wc = &l->wctx[w];
    cxs_ring_slot *rs = &l->ring.slot[i];
    const uint64_t pos = wc->pos;
    const uint32_t parts = wc->parts;
    cxs_ra_claimed(&l->ra);
    cxs_ra_batch rb;
    rb.plan = NULL;
    rs->diag.message[0] = 0;
    int first, rc = fill_begin(l, i, b, wc->epoch, pos, gen, &rb, &first);
    if (parts > 1) {
        pthread_mutex_lock(&l->ring.mu);
        l->sh_pending = 0;
        pthread_cond_broadcast(&l->ring.cv_work);
        if (!rc) {
            l->sh = (share){.i = i, .active = 1, .b = b, .pos = pos, .gen = gen,
                            .n = batch_length(l, pos), .parts = parts, .first = first, .rb = rb};
            pthread_mutex_unlock(&l->ring.mu);
            return CXS_RING_LATER; /* the parts publish it */
        }
        pthread_mutex_unlock(&l->ring.mu);
    }
    if (!rc) rc = fill_part(l, i, 0, batch_length(l, pos), gen, wc, &rs->diag);
    fill_end(l, i, b, pos, &rb, first);
    return rc;
}

/* Under the lock (released meanwhile): fill the next part of the shared
 * batch; the worker that completes it finishes and publishes the batch. */
static void fill_shared_part(cxs_loader *l, worker_ctx *wc) {
    share *h = &l->sh;
    uint32_t i = h->i;
    uint32_t p = h->next++;
    size_t a = h->n * p / h->parts, e = h->n * (p + 1) / h->parts;
    uint64_t gen = h->gen;
    pthread_mutex_unlock(&l->ring.mu);
    cxs_diag pd;
    pd.message[0] = 0;
    int rc = fill_part(l, i, a, e, gen, wc, &pd);
    pthread_mutex_lock(&l->ring.mu);
    if (rc && !h->rc) {
        h->rc = rc;
        cxs_diag_copy(&l->ring.slot[i].diag, rc, &pd);
    }
    if (++h->done < h->parts) return;
    share d = *h;
    h->active = 0;
    pthread_mutex_unlock(&l->ring.mu);
    fill_end(l, d.i, d.b, d.pos, &d.rb, d.first);
    pthread_mutex_lock(&l->ring.mu);
    cxs_ring_publish_locked(&l->ring, d.i, d.gen, d.rc);
}

/* Stopping, a worker still helps finish a shared batch (its parts end at
 * once, cancelled): its read-ahead is then given back. */
static int other_work(void *owner, uint32_t w) {
    cxs_loader *l = owner;
    if (l->sh.active && l->sh.next < l->sh.parts) {
        fill_shared_part(l, &l->wctx[w]);
        return 1;
    }
    if (l->sh_pending && !l->ring.stop) { /* batch 0 is about to be shared: help with it first */
        pthread_cond_wait(&l->ring.cv_work, &l->ring.mu);
        return 1;
    }
    return 0;
}

/* A batch thrown away gives its buffers back to the pool (external mode). */
static void discard(void *owner, uint32_t i) {
    cxs_loader *l = owner;
    slot *s = &l->slots[i];
    if (l->o.external && s->x) {
        pool_push(l, s->x, s->y);
        s->x = NULL;
        s->y = NULL;
    }
}

/* A batch handed out: in external mode its buffers are the caller's now. */
static void release(void *owner, uint32_t i) {
    cxs_loader *l = owner;
    if (l->o.external) l->slots[i].x = NULL, l->slots[i].y = NULL;
}

/* External mode without a buffer for this batch: nothing would ever fill
 * it, unless a buffer is still on its way back from a batch a reset threw
 * away (a slot still filling). */
static int stalled(void *owner, uint32_t i) {
    const cxs_loader *l = owner;
    if (!l->o.external || l->ring.slot[i].state != CXS_SLOT_FREE || l->pool_count) return 0;
    for (uint32_t j = 0; j < l->o.ring; j++)
        if (l->ring.slot[j].state == CXS_SLOT_FILLING) return 0;
    return CXS_E_INVALID;
}

static void worker_init(void *owner, uint32_t w) {
    cxs_loader *l = owner;
    worker_ctx *wc = &l->wctx[w];
    cxs_gather_ctx_free(&wc->g); /* in a forked child: what a parent thread held */
    *wc = (worker_ctx){.l = l, .g = {.cancelled = abandoned, .arg = wc}};
}

static void worker_exit(void *owner, uint32_t w) {
    cxs_loader *l = owner;
    cxs_gather_ctx_free(&l->wctx[w].g);
}

static void wake(void *owner) {
    cxs_loader *l = owner;
    cxs_ra_wake(&l->ra);
}

/* A streamed dataset's fetch in flight ends at a cancel (readahead.h). */
static void cancel(void *owner, int on) {
    cxs_loader *l = owner;
    cxs_src_cancel(&l->ra.src, on);
}

static const cxs_ring_ops loader_ring = {
    .claim = claim, .fill = fill, .can_claim = can_claim, .other_work = other_work,
    .discard = discard, .release = release, .stalled = stalled,
    .worker_init = worker_init, .worker_exit = worker_exit, .wake = wake, .cancel = cancel,
};

/* ---- threads ------------------------------------------------------------ */

/* The workers and the read-ahead helper; at least one worker, or none of
 * them left running and -EAGAIN. */
static int start_threads(cxs_loader *l) {
    if (cxs_ra_start(&l->ra)) return -EAGAIN;
    if (!cxs_ring_start(&l->ring)) return 0;
    cxs_ring_stop(&l->ring); /* the helper too: a retry starts it again */
    cxs_ra_stop(&l->ra);
    __atomic_store_n(&l->ring.stop, 0, __ATOMIC_RELAXED);
    return -EAGAIN;
}

static void stop_threads(cxs_loader *l) {
    cxs_ring_stop(&l->ring); /* wakes the helper too */
    cxs_ra_stop(&l->ra);
}

void cxs_loader_free(cxs_loader *l) {
    if (!l) return;
    /* In a forked child the parent's workers do not exist: nothing to join. */
    const int forked = cxs_ring_forked(&l->ring);
    if (!forked) stop_threads(l);
    cxs_ra_destroy(&l->ra, forked);
    cxs_ring_destroy(&l->ring);
    for (uint32_t i = 0; l->slots && i < l->o.ring; i++) {
        if (!l->o.external) { /* external buffers belong to the caller */
            free(l->slots[i].x);
            free(l->slots[i].y);
        }
        free(l->slots[i].frames);
    }
    free(l->slots);
    free(l->pool);
    for (uint32_t t = 0; l->wctx && t < l->o.threads; t++) cxs_gather_ctx_free(&l->wctx[t].g);
    free(l->wctx);
    free(l->norm);
    free(l);
}

/* The options cxs_loader_create refuses, each with its reason. */
static int check_opts(const cxs_dataset *ds, const cxs_sampler *sampler,
                      const cxs_loader_opts *o, uint64_t start, cxs_diag *d) {
    int rc = CXS_OPTS_CHECK(o, "cxs_loader_opts", d);
    if (rc) return rc;
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
    if (cxs_src_streamed(ds) && (cxs_sampler_options(sampler)->kind != CXS_SAMPLER_BLOCK ||
                       o->readahead == CXS_READAHEAD_OFF))
        return cxs_streamed_refuse(ds, "a frame loader without the block sampler (or with "
                                   "readahead off)", d);
    /* a batch that straddles two rounds draws on one block more than a round */
    if (cxs_src_streamed(ds) && cxs_sampler_options(sampler)->blocks >= CXS_RA_MAX_BLOCKS)
        return cxs_diagf(d, CXS_E_INVALID, "%s: streaming waits for the blocks a batch draws on, "
                         "at most %u (a batch across two rounds draws on blocks + 1): the block "
                         "sampler's blocks is %u (at most %u)", ds->url, CXS_RA_MAX_BLOCKS,
                         cxs_sampler_options(sampler)->blocks, CXS_RA_MAX_BLOCKS - 1);
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

void cxs_loader_opts_init(cxs_loader_opts *o) { memset(o, 0, sizeof *o); }

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
    rc = cxs_ring_init(&l->ring, &loader_ring, l, l->o.ring, l->o.threads, batches_for(l));
    l->slots = calloc(l->o.ring, sizeof *l->slots);
    l->wctx = calloc(l->o.threads, sizeof *l->wctx);
    l->pool = calloc(l->o.ring, sizeof *l->pool);
    if (!rc && !(l->slots && l->wctx && l->pool)) rc = -ENOMEM;
    size_t B = l->o.batch_size;
    if (!rc)
        rc = cxs_ra_init(&l->ra, ds, sampler, l->o.readahead != CXS_READAHEAD_OFF, B, l->o.k,
                         &l->ring.mu, &l->ring.generation, &l->epoch, &l->start,
                         &l->ring.next_claim, &l->ring.nbatches, &l->ring.stop);
    if (!rc && l->window > SIZE_MAX / sizeof(float) / B) rc = CXS_E_INVALID;
    for (uint32_t i = 0; !rc && i < l->o.ring; i++) {
        slot *s = &l->slots[i];
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
 * consumer's position (drop_held: at the start). */
static int respawn(cxs_loader *l, int drop_held) {
    cxs_ra_after_fork(&l->ra);
    /* the parent's workers were filling it: give back its plan reference */
    if (l->sh.active && l->ra.kind == CXS_RA_BLOCKS && l->sh.rb.plan)
        cxs_block_plan_put(cxs_sampler_blocks(l->sampler), l->sh.rb.plan);
    l->sh.active = 0;
    l->sh_pending = 0;
    cxs_ring_after_fork(&l->ring, drop_held);
    int rc = start_threads(l);
    if (!rc) cxs_ring_adopt(&l->ring);
    return rc;
}

const cxs_diag *cxs_loader_error(const cxs_loader *l) { return l ? &l->ring.err : NULL; }

int cxs_loader_next(cxs_loader *l, const cxs_batch **batch) {
    return cxs_loader_next_ex(l, batch, NULL);
}

static int next_batch(cxs_loader *l, const cxs_batch **batch, uint32_t ms, cxs_diag *d);

int cxs_loader_next_ex(cxs_loader *l, const cxs_batch **batch, cxs_diag *d) {
    if (!l || !batch) return cxs_diagf(d, CXS_E_INVALID, "loader: no loader or batch pointer");
    return cxs_ring_outcome(&l->ring, next_batch(l, batch, CXS_RING_FOREVER, &l->ring.err), d);
}

int cxs_loader_next_timed(cxs_loader *l, const cxs_batch **batch, uint32_t timeout_ms,
                          cxs_diag *d) {
    if (!l || !batch) return cxs_diagf(d, CXS_E_INVALID, "loader: no loader or batch pointer");
    if (timeout_ms == CXS_RING_FOREVER) timeout_ms--; /* (a limit, as asked) */
    return cxs_ring_outcome(&l->ring, next_batch(l, batch, timeout_ms, &l->ring.err), d);
}

int cxs_loader_cancel(cxs_loader *l) {
    if (!l) return CXS_E_INVALID;
    cxs_ring_cancel(&l->ring);
    return 0;
}

static int next_batch(cxs_loader *l, const cxs_batch **batch, uint32_t ms, cxs_diag *d) {
    if (cxs_ring_forked(&l->ring)) {
        int rc = respawn(l, 0);
        if (rc)
            return cxs_diagf(d, rc, "loader: no worker thread could start in this process: %s",
                             cxs_strerror(rc));
    }
    uint32_t i;
    int rc = cxs_ring_next_timed(&l->ring, &i, ms);
    if (rc == 1) {
        *batch = NULL;
        return 0;
    }
    if (rc == -ETIMEDOUT)
        return cxs_diagf(d, rc, "loader: batch %llu not ready within %u ms",
                         (unsigned long long)l->ring.next_take, ms);
    if (rc == -ECANCELED) return cxs_diagf(d, rc, "loader: cancelled (cxs_loader_cancel)");
    if (rc)
        return cxs_diagf(d, rc, "loader: no buffer provided for the next batch (cxs_loader_provide)");
    const cxs_ring_slot *s = &l->ring.slot[i];
    if (s->rc) {
        /* the slot is held: no worker writes its message now */
        if (s->diag.message[0]) return cxs_diag_copy(d, s->rc, &s->diag);
        return cxs_diagf(d, s->rc, "loader: batch %llu: %s", (unsigned long long)s->batch,
                         cxs_strerror(s->rc));
    }
    *batch = &l->slots[i].pub;
    return 0;
}

int cxs_loader_reset(cxs_loader *l, uint64_t epoch, uint64_t start) {
    if (!l) return CXS_E_INVALID;
    if (start > l->length)
        return cxs_ring_outcome(&l->ring, cxs_diagf(&l->ring.err, CXS_E_INVALID,
                                    "loader: start %llu is past the epoch's %llu samples",
                                    (unsigned long long)start, (unsigned long long)l->length),
                       NULL);
    if (cxs_ring_forked(&l->ring)) {
        int rc = respawn(l, 1);
        if (rc)
            return cxs_ring_outcome(&l->ring, cxs_diagf(&l->ring.err, rc,
                                        "loader: no worker thread could start in this "
                                        "process: %s",
                                        cxs_strerror(rc)),
                           NULL);
    }
    pthread_mutex_lock(&l->ring.mu);
    l->epoch = epoch;
    l->start = start;
    cxs_ring_restart_locked(&l->ring, batches_for(l)); /* wakes the helper */
    pthread_mutex_unlock(&l->ring.mu);
    return cxs_ring_outcome(&l->ring, 0, NULL);
}

uint32_t cxs_loader_ring(const cxs_loader *l) { return l ? l->o.ring : 0; }

int cxs_loader_provide(cxs_loader *l, float *x, int64_t *y) {
    if (!l || !l->o.external || !x || (l->o.labels && !y)) return CXS_E_INVALID;
    if (cxs_ring_forked(&l->ring)) {
        int rc = respawn(l, 0);
        if (rc) return rc;
    }
    pthread_mutex_lock(&l->ring.mu);
    uint32_t owned = l->pool_count;
    for (uint32_t i = 0; i < l->o.ring; i++)
        owned += l->slots[i].x != NULL && l->ring.slot[i].state != CXS_SLOT_HELD;
    int rc = 0;
    if (owned >= l->o.ring) {
        rc = CXS_E_INVALID; /* every slot already has a buffer */
    } else {
        pool_push(l, x, y);
        pthread_cond_broadcast(&l->ring.cv_work);
    }
    pthread_mutex_unlock(&l->ring.mu);
    return rc;
}

/* For position.c: a batch covers batch_size sampler positions. */
void cxs_loader_place(const cxs_loader *l, cxs_place *w) {
    *w = (cxs_place){l->epoch, l->start, l->o.batch_size, l->ring.next_take, l->ring.nbatches};
}
