/* gpu_stream.c - the GPU loader's stream mode (ctxshard_gpu.h): the CPU
 * loader's workers gather windows into a ring of pinned staging buffers; a
 * feeder thread uploads each batch on the copy stream into a device slot
 * of the ring and gives the staging buffer back once its copy is done.
 * Over a coded dtype (q8, q16) the windows are not made on the CPU: the
 * feeder copies the codes of the rows a batch's windows cover into the
 * slot's pinned inputs, uploads them, and the window kernel decodes them
 * with the headers uploaded at the start (a quarter or half of float32's
 * bytes cross the bus).
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

/* ---- coded features: codes uploaded, decoded by the kernel --------------- */

typedef struct fill_arg {
    cxs_gpu_loader *l;
    gslot *s;
    size_t n;
    size_t bytes; /* out: the inputs' bytes */
} fill_arg;

/* Rows [r0, r0 + n) of shard s's FEATURES, as stored, into dst. */
static int copy_rows(cxs_gpu_loader *l, uint32_t s, uint64_t r0, uint64_t n, uint8_t *dst) {
    const cxs_dataset *ds = l->ds;
    const shard *sh = &ds->shards[s];
    cxs_diag d;
    int rc = cxs_bsrc_rows(ds, s, r0, n, &d);
    if (rc) return gpu_fail_from(l, rc, "", &d);
    if (!cxs_compressed(ds)) {
        memcpy(dst, sh->serve_features + r0 * ds->row_bytes, (size_t)(n * ds->row_bytes));
        return 0;
    }
    if ((rc = cxs_read_rows(ds, &l->st.zr, s, r0, n, dst)))
        return gpu_fail(l, rc, "%s: cannot decode features: %s", sh->path, cxs_strerror(rc));
    return 0;
}

/* Slot s's pinned inputs for its n frames: n descriptors, then the codes
 * of the rows their windows cover, a run of rows per sample -- or, when
 * a sample's window starts inside the run before it (same utterance: a
 * sequential order), the rows that run lacks, appended to it.  Each
 * descriptor describes its run as if it were the utterance (row0 its
 * first row, T its length, t the frame's offset in it): a window row
 * outside the run is outside the utterance, so the kernel zero-pads as
 * it would on the whole utterance.  Reads the mapping: in a recovery
 * region. */
static int fill_codes(void *arg) {
    fill_arg *a = arg;
    cxs_gpu_loader *l = a->l;
    const cxs_dataset *ds = l->ds;
    const uint64_t rb = ds->row_bytes, k = l->o.k;
    cxs_x_desc *desc = a->s->h_in;
    uint8_t *codes = (uint8_t *)(desc + a->n);
    uint64_t rows = 0, ru = UINT64_MAX, rlo = 0, rhi = 0, rbase = 0; /* the run: utterance, frames, row */
    for (size_t i = 0; i < a->n; i++) {
        const uint64_t f = a->s->frames[i];
        cxs_uloc ul;
        cxs_diag d;
        int rc = cxs_find_utt_loc(ds, f, &ul, &d);
        if (rc) return gpu_fail_from(l, rc, "", &d);
        const shard *sh = &ds->shards[ul.shard];
        const uint64_t u = sh->u_start + ul.lu, t = f - ul.f0;
        const uint64_t lo = t > k ? t - k : 0, hi = ul.T - t > k ? t + k + 1 : ul.T;
        if (u != ru || lo < rlo || lo > rhi) ru = u, rlo = rhi = lo, rbase = rows;
        if (hi > rhi) {
            if ((rc = copy_rows(l, ul.shard, ul.row + rhi, hi - rhi, codes + rows * rb))) return rc;
            rows += hi - rhi;
            rhi = hi;
        }
        int32_t label = 0;
        if (l->o.labels) {
            const uint64_t lf = f - sh->f_start;
            if ((rc = cxs_bsrc_labels(ds, ul.shard, lf, 1, &d))) return gpu_fail_from(l, rc, "", &d);
            label = (int32_t)cxs_served_label(sh, lf);
        }
        desc[i] = (cxs_x_desc){rbase, (uint32_t)(rhi - rlo), (uint32_t)(t - rlo), (uint32_t)u, label};
    }
    a->bytes = a->n * sizeof *desc + (size_t)(rows * rb);
    return 0;
}

/* The batch of n samples at the feeder's position into slot s: its inputs
 * filled and uploaded, its windows expanded, all on the copy stream (the
 * slot's earlier expansion, which read its inputs, is ahead of them). */
static int codes_launch(cxs_gpu_loader *l, gslot *s, size_t n) {
    gpu_stream *st = &l->st;
    if (s->used) BE(l, l->be->event_sync(s->ev_ready)); /* h_in's last copy is done */
    int rc = cxs_sampler_get(l->sampler, l->epoch, st->pos, n, s->frames);
    if (rc) return gpu_fail(l, rc, "sampler: %s", cxs_strerror(rc));
    fill_arg fa = {l, s, n, 0};
    if ((rc = gpu_mapped(l, "stream", fill_codes, &fa))) return rc;
    if (s->used) BE(l, l->be->stream_wait(l->copy, s->ev_consumed));
    BE(l, l->be->copy_h2d(s->d_in, s->h_in, fa.bytes, l->copy));
    s->n = n;
    gpu_expand_args a;
    gpu_expand_init(l, s, &a);
    a.desc = s->d_in;
    a.feat = (const cxs_x_desc *)s->d_in + n;
    a.qh = l->rs.d_qh, a.hbytes = gpu_header_bytes(l->ds), a.num_utts = l->ds->meta.num_utterances;
    BE(l, gpu_launch_expand(l, &a, l->copy));
    BE(l, l->be->event_record(s->ev_ready, l->copy));
    __atomic_add_fetch(&l->uploaded, fa.bytes, __ATOMIC_RELAXED);
    s->used = 1;
    s->index = st->index++, s->position = st->pos;
    st->pos += n;
    return 0;
}

/* The coded feeder: a batch at a time into any slot free to fill. */
static void *codes_main(void *arg) {
    cxs_gpu_loader *l = arg;
    gpu_stream *st = &l->st;
    const uint64_t len = cxs_sampler_length(l->sampler), B = l->o.batch_size;
    l->be->set_device(l->dev);
    for (;;) {
        gslot *s;
        pthread_mutex_lock(&st->mu);
        while (!st->fstop && !(s = free_slot(l))) pthread_cond_wait(&st->cv, &st->mu);
        int stop = st->fstop;
        if (!stop) s->queued = 1;
        pthread_mutex_unlock(&st->mu);
        if (stop) break;
        uint64_t n = st->pos < len ? len - st->pos : 0;
        if (n > B) n = B;
        if (n < B && l->o.drop_last) n = 0;
        int rc = n ? codes_launch(l, s, (size_t)n) : 0;
        if (rc) {
            feed_failed(l, rc);
            break;
        }
        s->n = (size_t)n;
        pthread_mutex_lock(&st->mu);
        enqueue(l, s);
        pthread_mutex_unlock(&st->mu);
        if (!n) break; /* the end marker */
    }
    pthread_mutex_lock(&st->mu);
    st->fdone = 1;
    pthread_cond_broadcast(&st->cv);
    pthread_mutex_unlock(&st->mu);
    return NULL;
}

/* What the last epoch queued is free again (slots held stay held), and
 * the feeder starts. */
static int feeder_start(cxs_gpu_loader *l, void *(*fn)(void *)) {
    l->st.fq_head = l->st.fq_len = 0;
    for (uint32_t i = 0; i < l->nslot; i++) l->slot[i].queued = 0;
    l->st.fstop = l->st.frc = l->st.fdone = 0;
    if (pthread_create(&l->st.feeder, NULL, fn, l))
        return gpu_fail(l, -EAGAIN, "cannot start the upload thread");
    l->st.feeding = 1;
    return 0;
}

static int stream_start(cxs_gpu_loader *l) {
    if (l->st.coded) {
        l->st.pos = l->pos, l->st.index = 0;
        return feeder_start(l, codes_main);
    }
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
    return feeder_start(l, feeder_main);
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
    BE(l, l->be->dev_alloc(&s->d_x, B * l->W * l->xelem));
    if (l->o.labels) BE(l, l->be->dev_alloc((void **)&s->d_y, B * 8));
    if (l->st.coded) {
        BE(l, l->be->dev_alloc(&s->d_in, l->st.in_bytes));
        int rc = gpu_pinned(l, &s->h_in, l->st.in_bytes, "a batch's codes");
        if (rc) return rc;
    }
    if (!(s->frames = malloc(B * 8))) return gpu_fail(l, -ENOMEM, "out of memory");
    BE(l, l->be->event_create(&s->ev_ready, GPU_EVENT_BLOCKING));
    BE(l, l->be->event_create(&s->ev_consumed, GPU_EVENT_BLOCKING));
    return 0;
}

static uint64_t stream_slot_bytes(const cxs_gpu_loader *l) {
    const uint64_t B = l->o.batch_size;
    return B * l->W * l->xelem + (l->o.labels ? B * 8 : 0) + l->st.in_bytes;
}

/* The slots and the headers; the feeder fills the slots' inputs. */
static int codes_setup(cxs_gpu_loader *l) {
    const cxs_dataset *ds = l->ds;
    const uint64_t win = 2 * (uint64_t)l->o.k + 1;
    /* at most a window's rows a sample, and never more than its utterance's */
    const uint64_t rows = win < ds->max_len ? win : ds->max_len;
    l->st.in_bytes = (size_t)(l->o.batch_size * (sizeof(cxs_x_desc) + rows * ds->row_bytes));
    int rc = gpu_headers_setup(l);
    for (int i = 0; i < NSLOT && !rc; i++) {
        rc = stream_slot_new(l, &l->slot[i]);
        l->nslot = i + 1; /* made in part: freed with the rest */
    }
    if (rc) return rc;
    l->info.device_bytes += NSLOT * stream_slot_bytes(l);
    return stream_start(l);
}

static int stream_setup(cxs_gpu_loader *l) {
    pthread_mutex_init(&l->st.mu, NULL);
    pthread_cond_init(&l->st.cv, NULL);
    if ((l->st.coded = cxs_dtype_coded(l->dtype))) return codes_setup(l);
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
    cxs_zreader_free(&st->zr);
    gpu_headers_release(l);
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
