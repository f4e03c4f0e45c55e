/* gpu_stream.c - the GPU loader's stream mode (ctxshard_gpu.h): the CPU
 * loader's workers gather windows into a ring of pinned staging buffers; a
 * feeder thread uploads each batch on the copy stream into a device slot
 * of the ring and gives the staging buffer back once its copy is done.
 *
 * Slots: the feeder fills any slot neither held by the consumer nor
 * queued, marks it queued and puts it at the end of st.fifo; the consumer
 * takes them in that order and holds each until it gives it back (at
 * its next call, or with CXS_GPU_HOLD through cxs_gpu_loader_release).
 * When the consumer holds every slot it makes another (gpu_slot_grow).  A
 * slot with n = 0 marks the end of the epoch and stays at the head of the
 * queue for later calls.  The flags, the queue, frc and fdone are under
 * st.mu. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu_internal.h"

/* The feeder failed (gpu_fail wrote its message): tell the consumer.  It
 * fails once, then stops. */
static void feed_failed(cxs_gpu_loader *l, int rc) {
    pthread_mutex_lock(&l->st.mu);
    if (!l->st.frc) l->st.frc = rc;
    pthread_cond_broadcast(&l->st.cv);
    pthread_mutex_unlock(&l->st.mu);
}

/* A slot the feeder may fill (under st.mu), or NULL. */
static gslot *free_slot(cxs_gpu_loader *l) {
    for (uint32_t i = 0; i < l->nslot; i++)
        if (!l->slot[i].held && !l->slot[i].queued) return &l->slot[i];
    return NULL;
}

/* s is filled: the consumer's next (under st.mu). */
static void enqueue(cxs_gpu_loader *l, gslot *s) {
    gpu_stream *st = &l->st;
    st->fifo[(st->fq_head + st->fq_len++) % NSLOT_MAX] = (uint32_t)(s - l->slot);
    pthread_cond_broadcast(&st->cv);
}

/* The feeder thread: takes the CPU loader's batches (filled by its workers
 * into pinned staging buffers), uploads each on the copy stream into a free
 * device slot, and gives a staging buffer back once its copy is done. */
static void *feeder_main(void *arg) {
    cxs_gpu_loader *l = arg;
    const gpu_backend *be = l->be;
    int pend = -1; /* staging buffer of the last copy, not yet given back */
    void *pend_ev = NULL;
    be->set_device(l->dev);
    for (;;) {
        const cxs_batch *b;
        int rc = cxs_loader_next(l->st.cl, &b), e = 0;
        if (rc) { /* the CPU loader's message: the shard, utterance, chunk */
            const cxs_diag *why = cxs_loader_error(l->st.cl);
            feed_failed(l, gpu_fail_from(l, rc, "", why));
            break;
        }
        gslot *s;
        pthread_mutex_lock(&l->st.mu);
        while (!l->st.fstop && !(s = free_slot(l))) pthread_cond_wait(&l->st.cv, &l->st.mu);
        int stop = l->st.fstop;
        if (!stop) s->queued = 1;
        pthread_mutex_unlock(&l->st.mu);
        if (stop) break;
        if (!b) {
            s->n = 0;
            pthread_mutex_lock(&l->st.mu);
            enqueue(l, s);
            pthread_mutex_unlock(&l->st.mu);
            break;
        }
        int h = -1;
        for (uint32_t i = 0; i < l->st.nstage; i++)
            if (l->st.h_x[i] == b->x) h = (int)i;
        if (h < 0) {
            feed_failed(l, gpu_fail(l, CXS_E_CORRUPT, "loader handed out a buffer it was not given"));
            break;
        }
        const char *what = "stream_wait";
        if ((!s->used || !(e = be->stream_wait(l->copy, s->ev_consumed))) &&
            (what = "copy of x", !(e = be->copy_h2d(s->d_x, b->x, b->n * l->W * 4, l->copy))) &&
            (what = "copy of y", !b->y || !(e = be->copy_h2d(s->d_y, b->y, b->n * 8, l->copy))))
            what = "event_record", e = be->event_record(s->ev_ready, l->copy);
        if (e) {
            feed_failed(l, gpu_fail(l, CXS_E_DEVICE, "%s: %s failed: %s", be->name, what, be->error_string(e)));
            break;
        }
        memcpy(s->frames, b->frames, b->n * 8);
        s->n = b->n, s->index = b->index, s->position = b->position;
        s->used = 1;
        __atomic_add_fetch(&l->uploaded, b->n * (l->W * 4 + (b->y ? 8 : 0)),
                           __ATOMIC_RELAXED);
        pthread_mutex_lock(&l->st.mu);
        enqueue(l, s);
        pthread_mutex_unlock(&l->st.mu);
        /* The copy before this one has had the time of this one's setup;
         * wait for it (rarely a wait) and give its staging back. */
        if (pend >= 0) {
            if ((e = be->event_sync(pend_ev))) {
                feed_failed(l, gpu_fail(l, CXS_E_DEVICE, "%s: event_sync failed: %s", be->name, be->error_string(e)));
                break;
            }
            if ((rc = cxs_loader_provide(l->st.cl, l->st.h_x[pend], l->st.h_y ? l->st.h_y[pend] : NULL))) {
                feed_failed(l, gpu_fail(l, rc, "loader: %s", cxs_strerror(rc)));
                break;
            }
        }
        pend = h, pend_ev = s->ev_ready;
    }
    pthread_mutex_lock(&l->st.mu);
    l->st.fdone = 1;
    pthread_cond_broadcast(&l->st.cv);
    pthread_mutex_unlock(&l->st.mu);
    return NULL;
}

static int stream_start(cxs_gpu_loader *l) {
    cxs_loader_opts lo;
    memset(&lo, 0, sizeof lo);
    lo.k = l->o.k, lo.batch_size = l->o.batch_size, lo.threads = l->o.threads;
    lo.ring = l->st.nstage, lo.flags = l->o.flags & ~CXS_GPU_HOLD, lo.drop_last = l->o.drop_last;
    lo.labels = l->o.labels, lo.external = 1;
    lo.norm = l->o.norm;
    cxs_diag diag = {0};
    int rc = cxs_loader_create_ex(l->ds, l->sampler, &lo, l->epoch, l->pos, &l->st.cl, &diag);
    if (rc)
        return gpu_fail_from(l, rc, "CPU loader: ", &diag);
    for (uint32_t i = 0; i < l->st.nstage; i++)
        if ((rc = cxs_loader_provide(l->st.cl, l->st.h_x[i], l->st.h_y ? l->st.h_y[i] : NULL)))
            return gpu_fail(l, rc, "CPU loader: %s", cxs_strerror(rc));
    /* what the last epoch queued is free again; slots held stay held */
    l->st.fq_head = l->st.fq_len = 0;
    for (uint32_t i = 0; i < l->nslot; i++) l->slot[i].queued = 0;
    l->st.fstop = l->st.frc = l->st.fdone = 0;
    if (pthread_create(&l->st.feeder, NULL, feeder_main, l))
        return gpu_fail(l, -EAGAIN, "cannot start the upload thread");
    l->st.feeding = 1;
    return 0;
}

static void stream_stop(cxs_gpu_loader *l) {
    if (l->st.feeding) {
        pthread_mutex_lock(&l->st.mu);
        l->st.fstop = 1;
        pthread_cond_broadcast(&l->st.cv);
        pthread_mutex_unlock(&l->st.mu);
        pthread_join(l->st.feeder, NULL);
        l->st.feeding = 0;
    }
    cxs_loader_free(l->st.cl); /* joins its workers: no staging buffer is written after this */
    l->st.cl = NULL;
    if (l->copy) l->be->stream_sync(l->copy); /* nor read */
}

static int stream_slot_new(cxs_gpu_loader *l, gslot *s) {
    const size_t B = l->o.batch_size;
    BE(l, l->be->dev_alloc(&s->d_x, B * l->W * 4));
    if (l->o.labels) BE(l, l->be->dev_alloc((void **)&s->d_y, B * 8));
    if (!(s->frames = malloc(B * 8))) return gpu_fail(l, -ENOMEM, "out of memory");
    BE(l, l->be->event_create(&s->ev_ready, GPU_EVENT_BLOCKING));
    BE(l, l->be->event_create(&s->ev_consumed, GPU_EVENT_BLOCKING));
    return 0;
}

static uint64_t stream_slot_bytes(const cxs_gpu_loader *l) {
    const uint64_t B = l->o.batch_size;
    return B * l->W * 4 + (l->o.labels ? B * 8 : 0);
}

static int stream_setup(cxs_gpu_loader *l) {
    pthread_mutex_init(&l->st.mu, NULL);
    pthread_cond_init(&l->st.cv, NULL);
    const size_t B = l->o.batch_size;
    uint32_t threads = l->o.threads;
    if (!threads) threads = cxs_default_threads();
    l->o.threads = threads;
    l->st.nstage = l->o.slots ? l->o.slots : threads + 2;
    if (l->st.nstage < 3) l->st.nstage = 3;
    if (!(l->st.h_x = calloc(l->st.nstage, sizeof *l->st.h_x)) ||
        (l->o.labels && !(l->st.h_y = calloc(l->st.nstage, sizeof *l->st.h_y))))
        return gpu_fail(l, -ENOMEM, "out of memory");
    for (uint32_t i = 0; i < l->st.nstage; i++) {
        int rc = gpu_pinned(l, (void **)&l->st.h_x[i], B * l->W * 4,
                            "the stream mode's staging ring (windows)");
        if (!rc && l->st.h_y)
            rc = gpu_pinned(l, (void **)&l->st.h_y[i], B * 8, "the stream mode's staging ring (labels)");
        if (rc) return rc;
    }
    for (int i = 0; i < NSLOT; i++) {
        int rc = stream_slot_new(l, &l->slot[i]);
        l->nslot = i + 1; /* made in part: freed with the rest */
        if (rc) return rc;
    }
    l->info.device_bytes += NSLOT * stream_slot_bytes(l);
    return stream_start(l);
}

static int stream_next(cxs_gpu_loader *l, void *stream, gslot **out) {
    gpu_stream *st = &l->st;
    pthread_mutex_lock(&st->mu);
    if (!l->hold && l->handed) {
        int rc = gpu_slot_give_back(l, l->handed, l->handed->hstream);
        pthread_cond_broadcast(&st->cv);
        if (rc) {
            pthread_mutex_unlock(&st->mu);
            return rc;
        }
        l->handed = NULL;
    }
    while (!st->fq_len && !st->fdone) {
        int all_held = 1;
        for (uint32_t i = 0; i < l->nslot && all_held; i++) all_held = l->slot[i].held;
        if (all_held) { /* the feeder has no slot to fill: make one, or say why not */
            pthread_mutex_unlock(&st->mu);
            gslot *g;
            int rc = gpu_slot_grow(l, &g);
            if (rc) return rc;
            pthread_mutex_lock(&st->mu);
            continue;
        }
        pthread_cond_wait(&st->cv, &st->mu);
    }
    if (!st->fq_len) { /* the feeder stopped without a batch: an error */
        int rc = st->frc ? st->frc : CXS_E_DEVICE;
        if (!st->frc) gpu_fail(l, rc, "upload thread stopped"); /* else the feeder's message */
        pthread_mutex_unlock(&st->mu);
        return rc;
    }
    gslot *s = &l->slot[st->fifo[st->fq_head]];
    if (s->n) { /* the end marker stays: later calls see it again */
        st->fq_head = (st->fq_head + 1) % NSLOT_MAX;
        st->fq_len--;
        s->queued = 0;
        s->held = 1;
        s->hstream = stream;
    }
    pthread_mutex_unlock(&st->mu);
    *out = s;
    return 0;
}

static void stream_release(cxs_gpu_loader *l) {
    gpu_stream *st = &l->st;
    if (st->h_x)
        for (uint32_t i = 0; i < st->nstage; i++)
            if (st->h_x[i]) l->be->host_free(st->h_x[i]);
    if (st->h_y)
        for (uint32_t i = 0; i < st->nstage; i++)
            if (st->h_y[i]) l->be->host_free(st->h_y[i]);
    free(st->h_x);
    free(st->h_y);
    pthread_mutex_destroy(&st->mu);
    pthread_cond_destroy(&st->cv);
    memset(st, 0, sizeof *st);
}

const gpu_mode cxs_gpu_stream_mode = {
    .setup = stream_setup,
    .next = stream_next,
    .slot_new = stream_slot_new,
    .slot_bytes = stream_slot_bytes,
    .stop = stream_stop,
    .start = stream_start,
    .release = stream_release,
};
