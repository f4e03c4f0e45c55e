/* gpu.c - batches of windows in device memory (ctxshard_gpu.h): the API,
 * the choice of mode, the batch ring of device slots and the staged
 * uploads every mode shares.  The modes are gpu_stream.c, gpu_resident.c
 * and gpu_pool.c, behind the table of gpu_internal.h; everything is
 * written against the backend table of gpu_backend.h (CUDA, or the host
 * emulation the CPU tests run). */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cxs_le.h"
#include "fault.h"
#include "gpu_internal.h"
#include "source.h"

int gpu_fail(cxs_gpu_loader *l, int rc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&l->errs->mu);
    cxs_vdiag_at(&l->errs->err, rc, NULL, CXS_NO_OFFSET, fmt, ap);
    pthread_mutex_unlock(&l->errs->mu);
    va_end(ap);
    return rc;
}

int gpu_fail_from(cxs_gpu_loader *l, int rc, const char *prefix, const cxs_diag *src) {
    pthread_mutex_lock(&l->errs->mu);
    cxs_diag_at(&l->errs->err, rc, src->file, src->offset, "%s%s", prefix,
                src->message[0] ? src->message : cxs_strerror(rc));
    pthread_mutex_unlock(&l->errs->mu);
    return rc;
}

int gpu_error_copy(cxs_gpu_loader *l, int rc, cxs_diag *d) {
    pthread_mutex_lock(&l->errs->mu);
    cxs_diag_copy(d, rc, &l->errs->err);
    pthread_mutex_unlock(&l->errs->mu);
    return rc;
}

double gpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- the caller's current device ------------------------------------------ */

int gpu_device_enter(const gpu_backend *be, int dev) {
    int prev;
    if (be->get_device(&prev)) prev = -1; /* no device yet: nothing to put back */
    if (dev >= 0 && prev != dev) be->set_device(dev);
    return prev;
}

void gpu_device_leave(const gpu_backend *be, int dev, int prev) {
    int now;
    if (prev >= 0 && (dev != prev || (!be->get_device(&now) && now != prev))) be->set_device(prev);
}

/* ---- probe ------------------------------------------------------------ */

int cxs_gpu_probe(int32_t device, cxs_gpu_probe_info *info) {
    if (!info) return CXS_E_INVALID;
    memset(info, 0, sizeof *info);
#ifdef CXS_HAVE_CUDA
    info->built_with_cuda = 1;
#endif
    info->gds = gpu_gds_present();
    if (!cxs_host_is_le()) {
        snprintf(info->reason, sizeof info->reason, "the GPU path needs a little-endian host");
        return CXS_E_UNSUPPORTED;
    }
    if (device < 0) {
        if (device < CXS_GPU_EMULATE_DEVICE(CXS_GPU_EMU_DEVICES - 1)) {
            snprintf(info->reason, sizeof info->reason, "no emulated device %d (there are %d)",
                     (int)(-1 - device), CXS_GPU_EMU_DEVICES);
            return CXS_E_UNSUPPORTED;
        }
        snprintf(info->name, sizeof info->name, "%s", cxs_gpu_emu.name);
        info->device_count = CXS_GPU_EMU_DEVICES;
        info->register_read_only = 1;
        cxs_gpu_emu.mem_info(&info->free_bytes, &info->total_bytes);
        info->usable = 1;
        return 0;
    }
#ifdef CXS_HAVE_CUDA
    /* the probe selects the device to ask it: the caller's is put back */
    int prev = gpu_device_enter(&cxs_gpu_cuda, -1);
    int rc = cxs_gpu_cuda_probe(device, info);
    gpu_device_leave(&cxs_gpu_cuda, -1, prev);
    info->usable = rc == 0;
    return rc;
#else
    snprintf(info->reason, sizeof info->reason,
             "libctxshard was built without CUDA (no nvcc at build time, or -Dcuda=disabled)");
    return CXS_E_UNSUPPORTED;
#endif
}

/* ---- staged uploads ----------------------------------------------------- */

/* A backend call of the uploader: its messages carry its context. */
#define UBE(l, u, call)                                                    \
    do {                                                                   \
        int be_err_ = (call);                                              \
        if (be_err_) return GPU_DEVICE_FAIL((l), (u)->ctx, be_err_, #call); \
    } while (0)

int gpu_pinned(cxs_gpu_loader *l, void **p, size_t n, const char *what) {
    int e = l->be->host_alloc(p, n);
    if (!e) {
        l->pinned += n;
        return 0;
    }
    return gpu_fail(l, CXS_E_DEVICE,
                    "%s: pinned host memory for %s (%zu bytes, after %llu bytes pinned by this "
                    "loader so far) could not be allocated: %s; the limit on page-locked host memory "
                    "is reached (ulimit -l, a container's memlock limit, or the system's "
                    "memory): lower batch_size or slots, or raise the limit",
                    l->be->name, what, n, (unsigned long long)l->pinned, l->be->error_string(e));
}

int gpu_up_init(cxs_gpu_loader *l, uploader *u, void *stream, unsigned n, size_t row_bytes) {
    memset(u, 0, sizeof *u);
    u->stream = stream;
    u->ctx = "";
    u->n = n < 2 ? 2 : (n > MAX_UP ? MAX_UP : n);
    /* whole rows per buffer, at least one */
    u->bytes = UP_CHUNK < row_bytes ? row_bytes : UP_CHUNK - UP_CHUNK % row_bytes;
    for (unsigned i = 0; i < u->n; i++) {
        int rc = gpu_pinned(l, (void **)&u->buf[i], u->bytes, "an upload's staging buffer");
        if (rc) return rc;
        UBE(l, u, l->be->event_create(&u->ev[i], GPU_EVENT_BLOCKING));
    }
    return 0;
}

void gpu_up_free(cxs_gpu_loader *l, uploader *u) {
    for (unsigned i = 0; i < MAX_UP; i++) {
        if (u->buf[i]) l->be->host_free(u->buf[i]);
        if (u->ev[i]) l->be->event_destroy(u->ev[i]);
    }
    memset(u, 0, sizeof *u);
}

int gpu_up_flush(cxs_gpu_loader *l, uploader *u) {
    if (!u->fill) return 0;
    unsigned c = u->cur;
    UBE(l, u, l->be->copy_h2d(u->dst, u->buf[c], u->fill, u->stream));
    UBE(l, u, l->be->event_record(u->ev[c], u->stream));
    __atomic_add_fetch(&l->uploaded, u->fill, __ATOMIC_RELAXED);
    u->busy[c] = 1;
    u->cur = (c + 1) % u->n;
    u->fill = 0;
    u->dst = NULL;
    if (u->busy[u->cur]) { /* the copy engine still reads the buffer we fill next */
        UBE(l, u, l->be->event_sync(u->ev[u->cur]));
        u->busy[u->cur] = 0;
    }
    return 0;
}

/* A pinned window for bytes bound for device address dst: *p, *avail
 * bytes (> 0, whole rows when the caller asks rows).  Bytes that do not
 * continue the pending run go in a new chunk. */
int gpu_up_space(cxs_gpu_loader *l, uploader *u, uint8_t *dst, uint8_t **p, size_t *avail) {
    int rc;
    if (u->fill && (u->dst + u->fill != dst || u->fill == u->bytes) && (rc = gpu_up_flush(l, u)))
        return rc;
    if (!u->fill) u->dst = dst;
    *p = u->buf[u->cur] + u->fill;
    *avail = u->bytes - u->fill;
    return 0;
}

void gpu_up_commit(uploader *u, size_t n) { u->fill += n; }

/* Send host bytes src[n] to dst through the staging buffers. */
int gpu_up_write(cxs_gpu_loader *l, uploader *u, uint8_t *dst, const void *src, size_t n) {
    const uint8_t *s = src;
    while (n) {
        uint8_t *p;
        size_t avail;
        int rc = gpu_up_space(l, u, dst, &p, &avail);
        if (rc) return rc;
        size_t m = n < avail ? n : avail;
        memcpy(p, s, m);
        gpu_up_commit(u, m);
        s += m, dst += m, n -= m;
    }
    return 0;
}

typedef struct up_job {
    cxs_gpu_loader *l;
    uploader *u;
    uint8_t *dst;
    const uint8_t *src;
    size_t n;
} up_job;

static int up_job_run(void *arg) {
    up_job *j = arg;
    return gpu_up_write(j->l, j->u, j->dst, j->src, j->n);
}

int gpu_mapped(cxs_gpu_loader *l, const char *what, int (*fn)(void *), void *arg) {
    cxs_fault f = {UINT32_MAX, 0}; /* set only by a fault: fn may return the code itself */
    int rc = cxs_fault_run(l->ds, fn, arg, &f);
    if (rc == CXS_E_TRUNCATED && f.shard != UINT32_MAX) {
        cxs_where w = CXS_WHERE_NONE;
        w.shard = f.shard;
        w.offset = f.offset;
        cxs_diag d;
        cxs_where_diag(l->ds, rc, &w, &d);
        char prefix[128];
        snprintf(prefix, sizeof prefix, "%s: ", what);
        return gpu_fail_from(l, rc, prefix, &d);
    }
    return rc;
}

/* Stored rows r0 .. r0+n-1 of shard s's FEATURES layout to dst. */
int gpu_up_rows(cxs_gpu_loader *l, uploader *u, zreader *zr, uint32_t s, uint64_t r0, uint64_t n,
                uint8_t *dst) {
    const cxs_dataset *ds = l->ds;
    const uint64_t rb = ds->row_bytes;
    if (!cxs_compressed(ds)) {
        /* the mapping is read in a recovery region: a shard truncated
         * since open ends the upload in an error naming it, not in SIGBUS */
        up_job j = {l, u, dst, ds->shards[s].features + r0 * rb, (size_t)(n * rb)};
        cxs_fault w;
        int rc = cxs_fault_run(ds, up_job_run, &j, &w);
        if (rc == CXS_E_TRUNCATED)
            return gpu_fail(l, rc,
                            "%s%s: the shard changed since the dataset was opened: truncated "
                            "(byte %llu can no longer be read); replace a dataset by renaming "
                            "a new one into place, never by rewriting its files",
                            u->ctx, ds->shards[w.shard].path, (unsigned long long)w.offset);
        return rc;
    }
    while (n) {
        uint8_t *p;
        size_t avail;
        int rc = gpu_up_space(l, u, dst, &p, &avail);
        if (rc) return rc;
        uint64_t m = avail / rb;
        if (!m) { /* the pending run left less than a row: start a new chunk */
            if ((rc = gpu_up_flush(l, u))) return rc;
            continue;
        }
        if (m > n) m = n;
        if ((rc = cxs_read_rows(ds, zr, s, r0, m, p)))
            return gpu_fail(l, rc, "%s%s: cannot decode features: %s", u->ctx, ds->shards[s].path,
                            cxs_strerror(rc));
        gpu_up_commit(u, (size_t)(m * rb));
        r0 += m, n -= m, dst += m * rb;
    }
    return 0;
}

int gpu_up_finish(cxs_gpu_loader *l, uploader *u) {
    int rc = gpu_up_flush(l, u);
    if (rc) return rc;
    UBE(l, u, l->be->stream_sync(u->stream));
    for (unsigned i = 0; i < u->n; i++) u->busy[i] = 0;
    return 0;
}

/* ---- planning ----------------------------------------------------------- */

uint64_t gpu_shard_rows(const shard *sh) {
    return sh->meta.num_frames + (sh->meta.num_utterances + 1) * (uint64_t)sh->meta.guard;
}

uint64_t gpu_ring_bytes(const cxs_gpu_loader *l, size_t in_size) {
    uint64_t B = l->o.batch_size;
    return NSLOT * (B * l->xelem * l->W + B * 8 + B * in_size);
}

uint64_t gpu_resident_bytes(const cxs_gpu_loader *l) {
    const cxs_dataset *ds = l->ds;
    uint64_t rows = 0, U = ds->meta.num_utterances;
    for (uint32_t s = 0; s < ds->meta.num_shards; s++) rows += gpu_shard_rows(&ds->shards[s]);
    return rows * ds->row_bytes + (2 * U + 1) * 8 + U * gpu_header_bytes(ds) +
           (l->o.labels ? ds->meta.num_frames * 2 : 0);
}

/* Choose the mode: what AUTO becomes, and whether the one asked fits. */
static int plan_mode(cxs_gpu_loader *l, uint64_t budget) {
    const cxs_dataset *ds = l->ds;
    uint64_t need = gpu_resident_bytes(l) + gpu_ring_bytes(l, 8);
    uint32_t m = l->o.mode;
    char *why = l->info.reason;
    size_t wn = sizeof l->info.reason;
    if (m == CXS_GPU_AUTO) {
        m = need <= budget ? CXS_GPU_RESIDENT : CXS_GPU_STREAM;
        snprintf(why, wn, "auto: the resident features and tables take %llu bytes, %s the budget of %llu%s",
                 (unsigned long long)need, need <= budget ? "within" : "more than",
                 (unsigned long long)budget, l->budget_why);
    } else if (m == CXS_GPU_RESIDENT) {
        if (need > budget)
            return gpu_fail(l, CXS_E_RANGE,
                            "resident mode needs %llu bytes of device memory; the budget is %llu%s "
                            "(use pool or stream mode, or a larger budget)",
                            (unsigned long long)need, (unsigned long long)budget, l->budget_why);
        snprintf(why, wn, "resident: %llu bytes of %llu%s", (unsigned long long)need,
                 (unsigned long long)budget, l->budget_why);
    } else if (m == CXS_GPU_POOL) {
        uint32_t S = l->o.pool_segments ? l->o.pool_segments : 4;
        /* a coded dtype's segments hold codes (row_bytes is what is
         * stored), and every header is on the device beside them */
        uint64_t fixed = gpu_ring_bytes(l, sizeof(cxs_x_desc)) +
                         ds->meta.num_utterances * gpu_header_bytes(ds);
        uint64_t seg_rows = budget > fixed ? (budget - fixed) / S / ds->row_bytes : 0;
        if (!l->o.budget_bytes) {
            /* The pool takes its whole budget, and its layout fixes the
             * block order a resume must find again: the default follows the
             * device's total memory and the dataset, never what happens to
             * be free.  Segments larger than S - 1 of them holding every
             * frame would only take memory from training. */
            uint64_t whole = (ds->meta.num_frames + S - 2) / (S - 1);
            if (whole < ds->max_len) whole = ds->max_len;
            if (whole < seg_rows) {
                seg_rows = whole;
                budget = fixed + S * seg_rows * ds->row_bytes;
                snprintf(l->budget_why, sizeof l->budget_why,
                         " (the default: what %u segments need to hold the dataset, less than "
                         "half the device's total of %llu bytes)",
                         S - 1, (unsigned long long)l->dev_total);
            }
            if (budget > l->dev_free)
                return gpu_fail(l, CXS_E_RANGE,
                                "pool mode: the default budget of %llu bytes%s is more than the "
                                "%llu bytes free on the device: give a budget",
                                (unsigned long long)budget, l->budget_why,
                                (unsigned long long)l->dev_free);
            l->budget = budget;
        }
        if (seg_rows > UINT32_MAX) seg_rows = UINT32_MAX; /* local rows are 32-bit */
        if (seg_rows < ds->max_len || !seg_rows)
            return gpu_fail(l, CXS_E_RANGE,
                            "pool mode: a segment of the budget (%llu bytes / %u segments) holds %llu "
                            "rows, less than the longest utterance (%llu frames)",
                            (unsigned long long)budget, S, (unsigned long long)seg_rows,
                            (unsigned long long)ds->max_len);
        l->p.S = S;
        l->p.seg_rows = seg_rows;
        /* the layout before ';' is what a resume compares (ctxshard.torch) */
        snprintf(why, wn, "pool: %u segments of %llu rows; budget %llu%s", S,
                 (unsigned long long)seg_rows, (unsigned long long)budget, l->budget_why);
    } else {
        snprintf(why, wn, "stream: asked for");
    }
    l->mode = m;
    return 0;
}

/* ---- the batch ring (resident and pool) ----------------------------------- */

/* One slot of resident/pool mode: x, y, the inputs on the device and
 * their pinned staging (the frames served, or the pool's descriptors). */
int gpu_ring_slot_new(cxs_gpu_loader *l, gslot *s) {
    const size_t B = l->o.batch_size, in_size = l->in_size;
    BE(l, l->be->dev_alloc(&s->d_x, B * l->W * l->xelem));
    if (l->o.labels) BE(l, l->be->dev_alloc((void **)&s->d_y, B * 8));
    BE(l, l->be->dev_alloc(&s->d_in, B * in_size));
    int rc = gpu_pinned(l, &s->h_in, B * in_size, "a batch's inputs");
    if (rc) return rc;
    if (l->mode == CXS_GPU_POOL) {
        if (!(s->frames = malloc(B * 8))) return gpu_fail(l, -ENOMEM, "out of memory");
    } else {
        s->frames = s->h_in;
    }
    BE(l, l->be->event_create(&s->ev_ready, GPU_EVENT_BLOCKING));
    BE(l, l->be->event_create(&s->ev_consumed, GPU_EVENT_BLOCKING));
    return 0;
}

uint64_t gpu_ring_slot_bytes(const cxs_gpu_loader *l) {
    return gpu_ring_bytes(l, l->in_size) / NSLOT;
}

int gpu_ring_alloc(cxs_gpu_loader *l, size_t in_size) {
    l->in_size = in_size;
    for (int i = 0; i < NSLOT; i++) {
        int rc = gpu_ring_slot_new(l, &l->slot[i]);
        l->nslot = i + 1; /* made in part: freed with the rest */
        if (rc) return rc;
    }
    return 0;
}

static void ring_free(cxs_gpu_loader *l) {
    for (int i = 0; i < NSLOT_MAX; i++) {
        gslot *s = &l->slot[i];
        if (s->d_x) l->be->dev_free(s->d_x);
        if (s->d_y) l->be->dev_free(s->d_y);
        if (s->d_in) l->be->dev_free(s->d_in);
        if (s->frames && s->frames != s->h_in) free(s->frames);
        if (s->h_in) l->be->host_free(s->h_in);
        if (s->ev_ready) l->be->event_destroy(s->ev_ready);
        if (s->ev_consumed) l->be->event_destroy(s->ev_consumed);
        memset(s, 0, sizeof *s);
    }
    l->nslot = 0;
}

void gpu_expand_init(const cxs_gpu_loader *l, const gslot *s, gpu_expand_args *a) {
    memset(a, 0, sizeof *a);
    a->dtype = l->dtype, a->D = l->D, a->k = l->o.k;
    a->out_bf16 = l->o.out_dtype == CXS_GPU_OUT_BF16;
    a->mean = l->d_mean, a->scale = l->d_scale;
    a->n = s->n;
    a->out = s->d_x;
    a->y = s->d_y;
}

pthread_mutex_t *gpu_ring_lock(cxs_gpu_loader *l) {
    return l->ops == &cxs_gpu_stream_mode ? &l->st.mu : &l->ring_mu;
}

int gpu_slot_give_back(cxs_gpu_loader *l, gslot *s, void *stream) {
    /* on the stream the batch was handed to (or the one the caller names):
     * the work queued there on the batch is what its reuse must follow */
    int e = l->be->event_record(s->ev_consumed, stream);
    if (e) return GPU_DEVICE_FAIL(l, "", e, "event_record");
    s->held = 0;
    s->hstream = NULL;
    return 0;
}

/* Room for one more slot: within the budget, or (a pool takes its whole
 * budget by design) up to NSLOT_SOFT slots whatever the budget. */
static int slot_room(const cxs_gpu_loader *l) {
    return l->nslot < NSLOT_MAX &&
           (l->nslot < NSLOT_SOFT || l->info.device_bytes + l->ops->slot_bytes(l) <= l->budget);
}

int gpu_slot_grow(cxs_gpu_loader *l, gslot **out) {
    const uint64_t sb = l->ops->slot_bytes(l);
    const uint32_t n = l->nslot;
    if (!slot_room(l))
        return gpu_fail(l, -EBUSY,
                        "the caller holds all %u batch buffers (%llu bytes each) and the budget "
                        "of %llu bytes (%llu taken) has no room for another: give batches back "
                        "(drop the tensors you no longer need, or clone() what you keep), or "
                        "give a larger budget",
                        n, (unsigned long long)sb, (unsigned long long)l->budget,
                        (unsigned long long)l->info.device_bytes);
    gslot *s = &l->slot[n];
    int rc = l->ops->slot_new(l, s);
    if (rc) return rc; /* a slot made in part is freed with the ring (ring_free) */
    /* visible to the feeder (stream mode) once made */
    pthread_mutex_t *mu = gpu_ring_lock(l);
    pthread_mutex_lock(mu);
    l->nslot = n + 1;
    l->info.device_bytes += sb;
    if (l->ops == &cxs_gpu_stream_mode) pthread_cond_broadcast(&l->st.cv);
    pthread_mutex_unlock(mu);
    *out = s;
    return 0;
}

/* A slot neither held nor launched ahead, or a new one within the budget
 * (grow 1: else -EBUSY; 2: else *out NULL); NULL when grow is 0 and none is
 * free. */
static int ring_free_slot(cxs_gpu_loader *l, int grow, gslot **out) {
    gslot *f = NULL;
    pthread_mutex_lock(&l->ring_mu);
    for (uint32_t i = 0; i < l->nslot && !f; i++)
        if (!l->slot[i].held && &l->slot[i] != l->ready) f = &l->slot[i];
    pthread_mutex_unlock(&l->ring_mu);
    *out = f;
    if (f || !grow || (grow == 2 && !slot_room(l))) return 0;
    return gpu_slot_grow(l, out);
}

/* Ring modes' next(): the slot launched one batch ago, and the batch after
 * it launched before it is handed out, into a slot the caller does not
 * hold. */
int gpu_ring_next(cxs_gpu_loader *l, void *stream, gslot **out) {
    int rc;
    if (!l->hold && l->handed) {
        pthread_mutex_lock(&l->ring_mu);
        rc = gpu_slot_give_back(l, l->handed, l->handed->hstream);
        pthread_mutex_unlock(&l->ring_mu);
        if (rc) return rc;
        l->handed = NULL;
    }
    if (!l->ready) { /* the first batch, or none was launched ahead */
        gslot *f;
        if ((rc = ring_free_slot(l, 1, &f))) return rc;
        if ((rc = l->ops->launch(l, f))) return rc;
        l->ready = f;
    }
    gslot *c = l->ready;
    if (c->n) { /* the end marker stays ready: later calls see it again */
        pthread_mutex_lock(&l->ring_mu);
        l->ready = NULL;
        c->held = 1;
        c->hstream = stream;
        pthread_mutex_unlock(&l->ring_mu);
        /* the next batch is enqueued before this one is handed out, so
         * its expansion overlaps the caller's work on this one; when the
         * caller holds every slot and the budget has no room, it is
         * launched at the next call instead */
        gslot *f;
        if ((rc = ring_free_slot(l, 2, &f))) return rc;
        if (f) {
            if ((rc = l->ops->launch(l, f))) return rc;
            l->ready = f;
        }
    }
    *out = c;
    return 0;
}

/* Ring modes' start(): nothing of the old epoch may still run when slots
 * are refilled.  Slots the caller holds stay held. */
int gpu_ring_restart(cxs_gpu_loader *l) {
    int e = l->be->stream_sync(l->work);
    if (e) return GPU_DEVICE_FAIL(l, "", e, "stream_sync");
    l->ready = NULL;
    return 0;
}

/* ---- the API -------------------------------------------------------------- */

void cxs_gpu_loader_free(cxs_gpu_loader *l) {
    if (!l) return;
    /* A forked child's copy: its threads, streams and device memory are the
     * parent's (joining or freeing them here would wait forever or fail);
     * the child's copy of the host memory goes with the process. */
    if ((long)getpid() != l->pid) return;
    const gpu_backend *be = l->be;
    const int dev = l->dev, prev = gpu_device_enter(be, dev);
    /* Stop the threads and let the loader's own work finish before anything
     * it reads is freed. */
    if (l->ops && l->ops->stop) l->ops->stop(l);
    if (l->work) l->be->stream_sync(l->work);
    /* and the consumer's work on the batches handed out and not given back:
     * what it queued on their streams before this call still reads them */
    for (uint32_t i = 0; i < l->nslot; i++)
        if (l->slot[i].held && l->slot[i].ev_consumed)
            gpu_slot_give_back(l, &l->slot[i], l->slot[i].hstream);
    for (int i = 0; i < NSLOT_MAX; i++)
        if (l->slot[i].ev_consumed) l->be->event_sync(l->slot[i].ev_consumed);
    if (l->ops && l->ops->release) l->ops->release(l);
    ring_free(l);
    if (l->d_mean) l->be->dev_free(l->d_mean);
    if (l->d_scale) l->be->dev_free(l->d_scale);
    if (l->work) l->be->stream_destroy(l->work);
    if (l->copy) l->be->stream_destroy(l->copy);
    if (l->errs) pthread_mutex_destroy(&l->errs->mu);
    pthread_mutex_destroy(&l->ring_mu);
    free(l->errs);
    free(l->norm_mv);
    free(l);
    gpu_device_leave(be, dev, prev);
}

int gpu_check_norm(const cxs_dataset *ds, uint32_t flags, const cxs_norm *norm, const char *what,
                   cxs_diag *d) {
    if (!(flags & CXS_GATHER_NORMALIZE)) return 0;
    if (!ds->norm_mean && !norm)
        return cxs_diagf(d, CXS_E_INVALID,
                         "%s: normalisation (CXS_GATHER_NORMALIZE) asked of a dataset without "
                         "statistics (give the training split's: norm)",
                         what);
    if (!norm) return 0;
    double *c;
    cxs_diag nd;
    int rc = cxs_norm_constants(ds, norm, &c, &nd);
    if (rc) return cxs_diagf(d, rc, "%s: %s", what, nd.message);
    free(c);
    return 0;
}

static int check_opts(const cxs_dataset *ds, const cxs_sampler *sampler, const cxs_gpu_opts *o,
                      uint64_t start, cxs_diag *diag) {
    if (o->mode > CXS_GPU_POOL) return cxs_diagf(diag, CXS_E_INVALID, "unknown GPU mode %u", o->mode);
    if (!o->batch_size) return cxs_diagf(diag, CXS_E_INVALID, "batch_size must be at least 1");
    if (o->k > 1000000) return cxs_diagf(diag, CXS_E_INVALID, "context k=%u is above 1,000,000", o->k);
    if (o->out_dtype > CXS_GPU_OUT_BF16)
        return cxs_diagf(diag, CXS_E_INVALID, "unknown output type %u", o->out_dtype);
    if (o->flags & ~(CXS_GATHER_NORMALIZE | CXS_GPU_HOLD))
        return cxs_diagf(diag, CXS_E_INVALID, "unknown flags 0x%x", o->flags);
    int nrc = gpu_check_norm(ds, o->flags, o->norm, "GPU loader", diag);
    if (nrc) return nrc;
    if (o->labels && !ds->meta.label_width)
        return cxs_diagf(diag, CXS_E_NO_LABELS,
                         "labels asked of a dataset that has none (features only, like a test "
                         "split): set labels to 0");
    if (o->drop_last > 1 || o->labels > 1)
        return cxs_diagf(diag, CXS_E_INVALID, "drop_last and labels are 0 or 1");
    if (o->pool_segments && o->pool_segments < 3)
        return cxs_diagf(diag, CXS_E_INVALID, "pool_segments must be at least 3");
    if (o->slots > MAX_UP && o->mode != CXS_GPU_STREAM)
        return cxs_diagf(diag, CXS_E_INVALID, "slots: at most %d upload chunks", MAX_UP);
    if (o->slots && o->slots < 3)
        return cxs_diagf(diag, CXS_E_INVALID, "slots must be at least 3");
    if (ds->max_len > UINT32_MAX)
        return cxs_diagf(diag, CXS_E_UNSUPPORTED, "an utterance of more than 2^32 frames");
    /* a descriptor names a coded sample's header by a 32-bit number */
    if (cxs_dtype_coded(ds->meta.dtype) && ds->meta.num_utterances > UINT32_MAX &&
        o->mode != CXS_GPU_RESIDENT)
        return cxs_diagf(diag, CXS_E_UNSUPPORTED,
                         "GPU loader: pool and stream mode over a %s dataset of more than 2^32 "
                         "utterances",
                         cxs_dtype_name(ds->meta.dtype));
    if (o->mode == CXS_GPU_POOL) {
        const cxs_sampler_opts *so = cxs_sampler_options(sampler);
        if (so->kind != CXS_SAMPLER_SHUFFLE)
            return cxs_diagf(diag, CXS_E_INVALID, "pool mode serves the block order: it needs a shuffle sampler");
        if (start > gpu_pool_length(ds, so))
            return cxs_diagf(diag, CXS_E_INVALID, "pool mode: start %llu is past this rank's %llu samples",
                             (unsigned long long)start, (unsigned long long)gpu_pool_length(ds, so));
    }
    if (o->mode == CXS_GPU_STREAM && o->out_dtype != CXS_GPU_OUT_F32 &&
        !cxs_dtype_coded(ds->meta.dtype))
        return cxs_diagf(diag, CXS_E_INVALID,
                         "stream mode delivers float32 only from float features (bfloat16 output "
                         "needs resident or pool mode, or a q8/q16 dataset)");
    return 0;
}


int gpu_loader_new(const cxs_dataset *ds, const cxs_gpu_opts *opts, cxs_gpu_loader **out,
                   uint64_t *budget, int *prev, cxs_diag *diag) {
    cxs_gpu_probe_info pi;
    int rc;
    if ((rc = cxs_gpu_probe(opts->device, &pi))) return cxs_diagf(diag, rc, "%s", pi.reason);
    const gpu_backend *be = &cxs_gpu_emu;
#ifdef CXS_HAVE_CUDA
    if (opts->device >= 0) be = &cxs_gpu_cuda;
#endif
    cxs_gpu_loader *l = calloc(1, sizeof *l);
    if (!l) return cxs_diagf(diag, -ENOMEM, "out of memory");
    l->be = be;
    l->pid = (long)getpid();
    if (!(l->errs = calloc(1, sizeof *l->errs))) {
        free(l);
        return cxs_diagf(diag, -ENOMEM, "out of memory");
    }
    pthread_mutex_init(&l->errs->mu, NULL);
    pthread_mutex_init(&l->ring_mu, NULL);
    l->ds = ds, l->o = *opts;
    l->hold = (opts->flags & CXS_GPU_HOLD) != 0;
    l->dev = opts->device < 0 ? -1 - opts->device : opts->device;
    l->dtype = ds->meta.dtype, l->D = ds->meta.dim;
    l->W = (2 * (size_t)opts->k + 1) * ds->meta.dim;
    l->xelem = opts->out_dtype == CXS_GPU_OUT_BF16 ? 2 : 4;
    l->o.norm = NULL;
    if ((opts->flags & CXS_GATHER_NORMALIZE) && opts->norm) {
        size_t D = ds->meta.dim;
        if (!(l->norm_mv = malloc(2 * D * sizeof *l->norm_mv))) {
            cxs_gpu_loader_free(l);
            return cxs_diagf(diag, -ENOMEM, "out of memory");
        }
        memcpy(l->norm_mv, opts->norm->mean, D * sizeof *l->norm_mv);
        memcpy(l->norm_mv + D, opts->norm->var, D * sizeof *l->norm_mv);
        l->norm = (cxs_norm){(uint32_t)D, l->norm_mv, l->norm_mv + D};
        l->o.norm = &l->norm;
    }
    l->dev_total = pi.total_bytes, l->dev_free = pi.free_bytes;
    if (opts->budget_bytes) {
        *budget = opts->budget_bytes;
    } else if (opts->mode == CXS_GPU_POOL) {
        /* half the device: plan_mode bounds it by the dataset */
        *budget = pi.total_bytes / 2;
        snprintf(l->budget_why, sizeof l->budget_why,
                 " (the default: half the device's total of %llu bytes)",
                 (unsigned long long)pi.total_bytes);
    } else {
        /* Taken when the loader is made, before the model's optimizer state
         * and activations exist: never more than half the device, so that
         * training keeps room, nor more than 80% of what is free now. */
        const uint64_t half = pi.total_bytes / 2, room = pi.free_bytes / 5 * 4;
        *budget = half < room ? half : room;
        snprintf(l->budget_why, sizeof l->budget_why,
                 " (the default: %s of %llu bytes)",
                 half < room ? "half the device's total" : "80% of the free",
                 (unsigned long long)(half < room ? pi.total_bytes : pi.free_bytes));
    }
    l->budget = *budget;
    int e;
    if (be->get_device(prev)) *prev = -1; /* no device yet: nothing to put back */
    if ((e = be->set_device(l->dev))) {
        rc = GPU_DEVICE_FAIL(l, "", e, "set_device");
        gpu_error_copy(l, rc, diag);
        cxs_gpu_loader_free(l);
        gpu_device_leave(be, -1, *prev);
        return rc;
    }
    *out = l;
    return 0;
}

int gpu_loader_streams(cxs_gpu_loader *l) {
    const gpu_backend *be = l->be;
    int e, rc;
    if ((e = be->stream_create(&l->work)) || (e = be->stream_create(&l->copy)))
        return GPU_DEVICE_FAIL(l, "", e, "stream_create");
    /* (stream mode over float features normalises in the CPU loader) */
    if ((l->o.flags & CXS_GATHER_NORMALIZE) &&
        (l->mode != CXS_GPU_STREAM || cxs_dtype_coded(l->dtype))) {
        const size_t nb = (size_t)l->D * sizeof(double);
        double *c;
        if ((rc = cxs_norm_constants(l->ds, l->o.norm, &c, NULL)))
            return gpu_fail(l, rc, "normalisation constants: %s", cxs_strerror(rc));
        if ((e = be->dev_alloc((void **)&l->d_mean, nb)) ||
            (e = be->dev_alloc((void **)&l->d_scale, nb)) ||
            (e = be->copy_h2d(l->d_mean, c, nb, l->work)) ||
            (e = be->copy_h2d(l->d_scale, c + l->D, nb, l->work)) ||
            (e = be->stream_sync(l->work))) {
            free(c);
            return GPU_DEVICE_FAIL(l, "", e, "upload of the normalisation constants");
        }
        free(c);
    }
    return 0;
}

void cxs_gpu_opts_init(cxs_gpu_opts *o) { memset(o, 0, sizeof *o); }

int cxs_gpu_loader_create(const cxs_dataset *ds, const cxs_sampler *sampler,
                          const cxs_gpu_opts *opts, uint64_t epoch, uint64_t start,
                          cxs_gpu_loader **out, cxs_diag *diag) {
    if (!ds || !sampler || !opts || !out) return cxs_diagf(diag, CXS_E_INVALID, "NULL argument");
    if (cxs_src_streamed(ds)) return cxs_streamed_refuse(ds, "the GPU loader", diag);
    int rc = CXS_OPTS_CHECK(opts, "cxs_gpu_opts", diag);
    if (rc) return rc;
    rc = check_opts(ds, sampler, opts, start, diag);
    if (rc) return rc;
    cxs_gpu_loader *l;
    uint64_t budget;
    int prev;
    if ((rc = gpu_loader_new(ds, opts, &l, &budget, &prev, diag))) return rc;
    const gpu_backend *be = l->be;
    const int dev = l->dev;
    l->sampler = sampler;
    l->epoch = epoch, l->pos = l->next = start;
    if ((rc = plan_mode(l, budget))) goto fail;
    l->info.mode = l->mode;
    if ((rc = gpu_loader_streams(l))) goto fail;
    /* from here on free() undoes what the mode's setup made */
    l->ops = l->mode == CXS_GPU_STREAM     ? &cxs_gpu_stream_mode
             : l->mode == CXS_GPU_RESIDENT ? &cxs_gpu_resident_mode
                                           : &cxs_gpu_pool_mode;
    if ((rc = l->ops->setup(l))) goto fail;
    *out = l;
    gpu_device_leave(be, dev, prev);
    return 0;
fail:
    gpu_error_copy(l, rc, diag);
    cxs_gpu_loader_free(l);
    gpu_device_leave(be, dev, prev);
    return rc;
}

static int loader_next(cxs_gpu_loader *l, void *stream, const cxs_gpu_batch **batch) {
    if (l->rc) return l->rc;
    gslot *c = NULL;
    int rc = l->ops->next(l, stream, &c);
    if (rc == -EBUSY) return rc; /* every slot held: the caller may give some back */
    if (rc) return l->rc = rc;
    if (!c->n) {
        *batch = NULL;
        return 0;
    }
    int e = l->be->stream_wait(stream, c->ev_ready);
    if (e) return l->rc = GPU_DEVICE_FAIL(l, "", e, "stream_wait");
    l->handed = c;
    l->next = c->position + (l->ops == &cxs_gpu_utt_mode ? 1 : c->n); /* (a batch: 1) */
    l->batch.x = c->d_x;
    l->batch.y = c->d_y;
    l->batch.frames = c->frames;
    l->batch.n = c->n;
    l->batch.index = c->index;
    l->batch.position = c->position;
    *batch = &l->batch;
    return 0;
}

/* The public entry points run on the loader's device (the CUDA runtime's
 * current device is per thread: the caller's thread may not be the one
 * that created the loader) and give the caller's back. */
int cxs_gpu_loader_next(cxs_gpu_loader *l, void *stream, const cxs_gpu_batch **batch) {
    if (!l || !batch) return CXS_E_INVALID;
    /* A CUDA context does not survive fork(): in the child every call of
     * the runtime fails (cudaErrorInitializationError) and the loader's
     * threads are gone.  Said plainly rather than as the first failed call. */
    if ((long)getpid() != l->pid)
        return l->rc = gpu_fail(l, CXS_E_DEVICE,
                                "the GPU loader was created in process %ld and used in process "
                                "%ld, a child forked after the device was used: a CUDA device "
                                "cannot be used across fork(); create the loader in the child "
                                "(DataLoader workers: the 'spawn' start method, or load on the "
                                "CPU there)",
                                l->pid, (long)getpid());
    const int prev = gpu_device_enter(l->be, l->dev);
    int rc = loader_next(l, stream, batch);
    gpu_device_leave(l->be, l->dev, prev);
    return rc;
}

int cxs_gpu_loader_next_ex(cxs_gpu_loader *l, void *stream, const cxs_gpu_batch **batch,
                           cxs_diag *diag) {
    if (!l || !batch)
        return cxs_diagf(diag, CXS_E_INVALID, "cxs_gpu_loader_next_ex: NULL loader or batch");
    int rc = cxs_gpu_loader_next(l, stream, batch);
    return rc ? gpu_error_copy(l, rc, diag) : 0;
}

static int loader_reset(cxs_gpu_loader *l, uint64_t epoch, uint64_t start) {
    l->rc = 0;
    l->epoch = epoch, l->pos = l->next = start, l->index = 0;
    if (!l->hold && l->handed) { /* the caller's work on it may still be queued */
        pthread_mutex_t *mu = gpu_ring_lock(l);
        pthread_mutex_lock(mu);
        int rc = gpu_slot_give_back(l, l->handed, l->handed->hstream);
        pthread_mutex_unlock(mu);
        if (rc) return l->rc = rc;
    }
    l->handed = NULL;
    if (l->ops->stop) l->ops->stop(l);
    cxs_diagf(&l->errs->err, 0, "%s", ""); /* the mode's thread is joined: nothing else writes it */
    int rc = l->ops->start(l);
    return rc ? (l->rc = rc) : 0;
}

int cxs_gpu_loader_reset(cxs_gpu_loader *l, uint64_t epoch, uint64_t start) {
    if (!l) return CXS_E_INVALID;
    if (l->ops->check_start && l->ops->check_start(l, start))
        return gpu_fail(l, CXS_E_INVALID, "reset: start %llu is past the end of the epoch",
                        (unsigned long long)start);
    const int prev = gpu_device_enter(l->be, l->dev);
    int rc = loader_reset(l, epoch, start);
    gpu_device_leave(l->be, l->dev, prev);
    return rc;
}

void cxs_gpu_loader_describe(const cxs_gpu_loader *l, cxs_gpu_loader_info *info) {
    if (!l || !info) return;
    *info = l->info;
    info->uploaded_bytes = __atomic_load_n(&l->uploaded, __ATOMIC_RELAXED);
    if (l->ops->describe) l->ops->describe(l, info);
}

int cxs_gpu_loader_download(cxs_gpu_loader *l, void *stream, const void *src, void *dst,
                            size_t n) {
    if (!l || (n && (!src || !dst))) return CXS_E_INVALID;
    const int prev = gpu_device_enter(l->be, l->dev);
    int e = l->be->copy_d2h_sync(dst, src, n, stream);
    gpu_device_leave(l->be, l->dev, prev);
    return e ? GPU_DEVICE_FAIL(l, "", e, "download") : 0;
}

int cxs_gpu_loader_release(cxs_gpu_loader *l, const void *x, void *stream) {
    if (!l || !x) return CXS_E_INVALID;
    if (!l->hold) return gpu_fail(l, CXS_E_INVALID, "release: the loader was made without CXS_GPU_HOLD");
    pthread_mutex_t *mu = gpu_ring_lock(l);
    int rc = CXS_E_INVALID;
    const int prev = gpu_device_enter(l->be, l->dev);
    pthread_mutex_lock(mu);
    for (uint32_t i = 0; i < l->nslot; i++) {
        gslot *s = &l->slot[i];
        if (s->held && s->d_x == x) {
            rc = gpu_slot_give_back(l, s, stream);
            if (l->ops == &cxs_gpu_stream_mode) pthread_cond_broadcast(&l->st.cv);
            break;
        }
    }
    pthread_mutex_unlock(mu);
    gpu_device_leave(l->be, l->dev, prev);
    if (rc == CXS_E_INVALID)
        return gpu_fail(l, rc, "release: %p is not the x of a batch held", x);
    return rc;
}

const cxs_diag *cxs_gpu_loader_error(const cxs_gpu_loader *l) {
    if (!l) return NULL;
    /* A snapshot taken under the lock: a background thread (feeder,
     * refresher) may still write err after the consumer's own failure. */
    gpu_err *e = l->errs;
    pthread_mutex_lock(&e->mu);
    e->shown = e->err;
    pthread_mutex_unlock(&e->mu);
    return &e->shown;
}
