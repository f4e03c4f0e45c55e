/* gpu_internal.h - the GPU loader's parts (never installed).
 *
 * gpu.c holds what every mode shares: the API of ctxshard_gpu.h, the
 * choice of mode, the batch ring of device slots, the staged uploads, the
 * error message.  Each mode is one file behind a table of operations
 * (gpu_mode): gpu_stream.c (the CPU loader's batches uploaded through
 * pinned staging buffers), gpu_resident.c (the features uploaded once,
 * windows expanded on the device), gpu_pool.c (blocks of utterances
 * refreshed in a device pool) and gpu_utt.c (whole-utterance batches
 * padded on the device from the resident data).  Every file is written against the backend
 * table of gpu_backend.h, so the host emulation runs all of it. */
#ifndef CXS_GPU_INTERNAL_H
#define CXS_GPU_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "blocks.h"
#include "ctxshard_gpu.h"
#include "cxs_qcodec.h"
#include "dataset_internal.h"
#include "abi.h"
#include "gather.h"
#include "gpu_backend.h"
#include "samplers.h"

#define NSLOT 3              /* device batch slots made at create: filling, in use, being released */
#define NSLOT_SOFT 16        /* while the caller holds batches (CXS_GPU_HOLD): this many
                                whatever the budget, more within it */
#define NSLOT_MAX 64         /* at most */
#define UP_CHUNK (16u << 20) /* staged upload chunk */
#define MAX_UP 16            /* staged upload chunks in flight, at most */

/* One device batch slot of the ring. */
typedef struct gslot {
    void *d_x;
    int64_t *d_y;
    void *d_in;       /* resident: frames; pool: descriptors */
    void *h_in;       /* pinned staging of d_in */
    uint64_t *frames; /* host: what the batch serves */
    size_t n;
    uint64_t index, position;
    void *ev_ready, *ev_consumed;
    int used;
    /* Handed out and not given back: never refilled.  hstream is the stream
     * it was handed to, where its consumption fence goes when it is given
     * back without one (the next call without CXS_GPU_HOLD, reset, free).
     * queued: stream mode, filled (or being filled) and not yet taken.
     * held and queued are written under gpu_ring_lock. */
    int held, queued;
    void *hstream;
} gslot;

/* Chunked, overlapped upload through pinned staging buffers: the host fills
 * buffer i while the copy engine sends i-1.  Used by one thread at a time
 * (resident: the creating thread; pool: the refresher). */
typedef struct uploader {
    void *stream;
    unsigned n, cur;
    size_t bytes, fill;
    uint8_t *buf[MAX_UP];
    void *ev[MAX_UP];
    int busy[MAX_UP];
    uint8_t *dst;    /* device address of buf[cur]'s first byte */
    const char *ctx; /* put before its messages ("" or "pool refresh: ") */
} uploader;

/* Stream mode (gpu_stream.c): a CPU loader fills pinned staging buffers, a
 * feeder thread uploads them into the ring; over a coded dtype the feeder
 * fills each slot's pinned inputs itself (descriptors and codes) and the
 * kernel decodes.  mu/cv guard the counters. */
typedef struct gpu_stream {
    int coded;
    size_t in_bytes; /* coded: a slot's inputs, B descriptors and their rows' codes */
    uint64_t pos, index; /* coded: the feeder's next batch */
    zreader zr;      /* coded: the feeder's, for compressed shards */
    cxs_loader *cl;
    uint32_t nstage;
    float **h_x;
    int64_t **h_y;
    pthread_t feeder;
    int feeding;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* the filled slots in the order the consumer takes them */
    uint32_t fifo[NSLOT_MAX], fq_head, fq_len;
    int fstop, frc, fdone;
} gpu_stream;

/* Resident mode (gpu_resident.c): the dataset in device memory. */
typedef struct gpu_resident {
    uint8_t *d_feat;
    uint64_t *d_cum, *d_urow;
    uint16_t *d_lab;
    uint8_t *d_qh; /* a coded dtype: every utterance's header, in the dataset's numbering */
} gpu_resident;

/* Pool mode (gpu_pool.c; its states and transitions are described there):
 * one segment of the device pool and the block it holds. */
typedef struct pseg {
    uint64_t row_base; /* device row of the segment's first row */
    uint64_t block;    /* the block of the epoch's plan it holds */
    void *ev_loaded, *ev_freed;
    int freed_once;
} pseg;

typedef struct gpu_pool {
    uint32_t S;
    uint64_t seg_rows;
    uint8_t *d_pool;
    pseg *seg;
    cxs_block_sched bs;
    cxs_block_plan *plan;       /* the epoch's; read-only, shared with the refresher */
    uint64_t base, stride, len; /* position i is the schedule's base + i * stride; len of them */
    /* the refresher thread and what it shares with the consumer (under mu) */
    pthread_t th;
    int running;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop, rc;
    uint64_t next_block;
    uint32_t *freeq, fq_head, fq_len; /* segments free to load, FIFO */
    uint32_t *loadq, lq_head, lq_len; /* loaded, not yet joined, FIFO (block order) */
    /* consumer side */
    uint32_t *res; /* blocks [lo, hi) resident: block j in res[j % S] */
    uint64_t lo, hi;
    uint64_t t;    /* the round entered (UINT64_MAX: none yet) */
    uploader up;
    void *copy;
} gpu_pool;

/* What a mode does; gpu.c calls these.  NULL entries do nothing. */
typedef struct gpu_mode {
    /* Allocate what the mode needs and start at (l->epoch, l->pos).  On
     * failure the error is in l->errs (gpu_fail); release() frees what was made. */
    int (*setup)(cxs_gpu_loader *l);
    /* The next slot to hand out (n = 0: the end), after recording that the
     * caller's stream is done with the one handed out before. */
    int (*next)(cxs_gpu_loader *l, void *stream, gslot **out);
    /* Ring modes: fill slot s with the batch at l->pos (gpu_ring_next). */
    int (*launch)(cxs_gpu_loader *l, gslot *s);
    /* Allocate one more slot of the ring (its buffers and events), and the
     * device bytes one takes. */
    int (*slot_new)(cxs_gpu_loader *l, gslot *s);
    uint64_t (*slot_bytes)(const cxs_gpu_loader *l);
    /* 0 when the epoch can start at `start`, else CXS_E_INVALID. */
    int (*check_start)(const cxs_gpu_loader *l, uint64_t start);
    /* Join the mode's thread: no background work or message after this. */
    void (*stop)(cxs_gpu_loader *l);
    /* Start again at (l->epoch, l->pos), after stop(). */
    int (*start)(cxs_gpu_loader *l);
    /* Free the mode's memory, after stop() and the loader's work is done. */
    void (*release)(cxs_gpu_loader *l);
    void (*describe)(const cxs_gpu_loader *l, cxs_gpu_loader_info *info);
} gpu_mode;

/* Whole-utterance batches (gpu_utt.c): the resident data, and per slot of
 * the ring what the host keeps of its batch.  The slot's d_in/h_in hold
 * the descriptors [cap], lengths [cap], target lengths [cap] and targets
 * [cap][seq_max], in that order. */
typedef struct utt_meta {
    uint64_t *utts;
    uint64_t tmax, lmax, frames, global;
} utt_meta;

typedef struct gpu_utt {
    const cxs_utt_sampler *sampler;
    uint32_t cap, targets;
    uint64_t max_frames, len;
    uint64_t *urow; /* host: device row of every utterance's frame 0 */
    utt_meta meta[NSLOT_MAX];
} gpu_utt;

extern const gpu_mode cxs_gpu_stream_mode, cxs_gpu_resident_mode, cxs_gpu_pool_mode,
    cxs_gpu_utt_mode;

/* A loader's last error and the copy cxs_gpu_loader_error hands out. */
typedef struct gpu_err {
    pthread_mutex_t mu;
    cxs_diag err, shown;
} gpu_err;

struct cxs_gpu_loader {
    const gpu_backend *be;
    const gpu_mode *ops; /* set once the mode is chosen, before its setup */
    const cxs_dataset *ds;
    const cxs_sampler *sampler;
    cxs_gpu_opts o;
    int dev;
    uint32_t mode, dtype, D;
    size_t W, xelem;
    uint64_t epoch, pos, index;
    /* the consumer's place: the start of the batch after the last one
     * handed out (create, reset: the start); gpu_position.c reads it */
    uint64_t next;
    int rc;
    /* The one error, a cxs_diag like every handle's.  Written through
     * gpu_fail (under its lock: the feeder and the refresher write it too,
     * once, when they fail; the consumer learns of it through the mode's
     * rc under the mode's lock).  Apart from the loader so that
     * cxs_gpu_loader_error, which takes a const loader, can lock it and
     * copy it out. */
    gpu_err *errs;
    cxs_gpu_loader_info info;
    uint64_t uploaded; /* atomic: the feeder and refresher add to it */
    uint64_t pinned;   /* pinned host bytes allocated (gpu_pinned), at create */
    long pid;          /* the process that created it (a forked child may not use it) */
    cxs_gpu_batch batch;
    void *work, *copy; /* the loader's streams */
    double *d_mean, *d_scale;
    /* The statistics opts->norm gave, copied (means, then variances) so that
     * the stream mode's CPU loader can be restarted after create. */
    double *norm_mv;
    cxs_norm norm;
    /* the batch ring: nslot slots made (NSLOT at create, more while the
     * caller holds batches, within budget), the one launched ahead and not
     * yet handed out (ready), the last handed out.  ring_mu guards the
     * slots' held flags in ring modes (stream mode: st.mu), which
     * cxs_gpu_loader_release changes from any thread. */
    gslot slot[NSLOT_MAX];
    uint32_t nslot;
    int hold;           /* CXS_GPU_HOLD */
    uint64_t budget;    /* device bytes the loader may take */
    char budget_why[160]; /* how the default budget was chosen ("" when given) */
    uint64_t dev_total, dev_free; /* the device's memory when the loader was made */
    size_t in_size;     /* resident/pool: per-sample input bytes of a slot */
    gslot *ready;
    gslot *handed;
    pthread_mutex_t ring_mu;
    /* the state of each mode (only the one in use is set up) */
    gpu_stream st;
    gpu_resident rs;
    gpu_pool p;
    gpu_utt ut;
};

/* The failure helpers: write the loader's error (code rc, the message),
 * return rc.  gpu_fail_from keeps src's file and offset and puts prefix
 * before its message. */
int gpu_fail(cxs_gpu_loader *l, int rc, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
int gpu_fail_from(cxs_gpu_loader *l, int rc, const char *prefix, const cxs_diag *src);
/* Pinned host memory (host_alloc) for `what`; a refusal is an error that
 * says how much was asked and pinned before, and that the system's limit
 * on page-locked memory is the likely cause. */
int gpu_pinned(cxs_gpu_loader *l, void **p, size_t n, const char *what);
/* The loader's error into d (NULL allowed), with code rc; returns rc. */
int gpu_error_copy(cxs_gpu_loader *l, int rc, cxs_diag *d);

/* A backend call that failed: CXS_E_DEVICE with the runtime's words. */
#define GPU_DEVICE_FAIL(l, ctx, err, what)                                                  \
    gpu_fail((l), CXS_E_DEVICE, "%s%s: %s failed: %s", (ctx), (l)->be->name, (what),       \
             (l)->be->error_string(err))

#define BE(l, call)                                                         \
    do {                                                                    \
        int be_err_ = (call);                                               \
        if (be_err_) return GPU_DEVICE_FAIL((l), "", be_err_, #call);       \
    } while (0)

/* A launch reports its error only through the runtime's last error, which
 * every failed call sets and which stays until read: cleared first, so
 * that a failure met and ignored before (a free, an unregister, a probe's
 * query) is not reported as this launch's. */
static inline int gpu_launch_expand(cxs_gpu_loader *l, const gpu_expand_args *a, void *s) {
    l->be->last_error();
    return l->be->expand(a, s);
}

static inline int gpu_launch_pad(cxs_gpu_loader *l, const gpu_pad_args *a, void *s) {
    l->be->last_error();
    return l->be->pad(a, s);
}

/* cxs_gpu_loader_create's parts that the utterance loader shares: the
 * probe, the loader with its backend and copied statistics (budget: the
 * bytes it may take), and, once the mode is set, the streams and the
 * normalisation constants on the device.  On failure of the second the
 * caller frees l after gpu_error_copy(l, rc, diag). */
int gpu_loader_new(const cxs_dataset *ds, const cxs_gpu_opts *opts, cxs_gpu_loader **out,
                   uint64_t *budget, int *prev, cxs_diag *diag);
/* The calling thread's current device, made dev (when dev >= 0) for a
 * public entry point; gpu_device_leave puts the one returned back. */
int gpu_device_enter(const gpu_backend *be, int dev);
void gpu_device_leave(const gpu_backend *be, int dev, int prev);
int gpu_loader_streams(cxs_gpu_loader *l);
/* Resident mode's upload of the features, tables and (o.labels) labels,
 * and the release of what it holds (gpu_resident.c). */
int gpu_resident_upload(cxs_gpu_loader *l);
void gpu_resident_release(cxs_gpu_loader *l);
/* Pool and stream mode over a coded dtype: every utterance's header in
 * rs.d_qh, in the dataset's numbering, checked (the first use of each:
 * a damaged one fails the loader's creation naming the shard, the
 * utterance and the fault) and uploaded once, as resident mode uploads
 * them with the features; nothing for the other dtypes.  The release
 * frees them. */
int gpu_headers_setup(cxs_gpu_loader *l);
void gpu_headers_release(cxs_gpu_loader *l);
/* Bytes of one utterance's header on the device: a coded dtype's
 * (QHEADERS entry), 0 for the others. */
static inline uint64_t gpu_header_bytes(const cxs_dataset *ds) {
    return cxs_q_header_size(ds->meta.dtype, ds->meta.dim);
}

double gpu_now(void);
uint64_t gpu_shard_rows(const shard *sh);
/* Device bytes of the resident features, tables and labels, as
 * gpu_resident_upload lays them out. */
uint64_t gpu_resident_bytes(const cxs_gpu_loader *l);
/* Device bytes of the batch ring (x, y, inputs) of resident/pool mode. */
uint64_t gpu_ring_bytes(const cxs_gpu_loader *l, size_t in_size);
/* Whether normalisation as flags and norm ask for it can be done on ds:
 * 0, or CXS_E_INVALID with d saying why, prefixed with what. */
int gpu_check_norm(const cxs_dataset *ds, uint32_t flags, const cxs_norm *norm, const char *what,
                   cxs_diag *d);
int gpu_ring_alloc(cxs_gpu_loader *l, size_t in_size);
/* Resident/pool mode's slot_new and slot_bytes. */
int gpu_ring_slot_new(cxs_gpu_loader *l, gslot *s);
uint64_t gpu_ring_slot_bytes(const cxs_gpu_loader *l);
int gpu_ring_next(cxs_gpu_loader *l, void *stream, gslot **out);
/* The lock of the slots' held/queued flags (st.mu in stream mode). */
pthread_mutex_t *gpu_ring_lock(cxs_gpu_loader *l);
/* Give a held slot back, its reuse ordered after the work queued on
 * `stream` so far (under gpu_ring_lock). */
int gpu_slot_give_back(cxs_gpu_loader *l, gslot *s, void *stream);
/* Make one more slot when the budget has room for it (and NSLOT_MAX is
 * not reached): 0 and *out, or -EBUSY with the loader's message saying
 * that the caller holds every slot.  Not under gpu_ring_lock. */
int gpu_slot_grow(cxs_gpu_loader *l, gslot **out);
int gpu_ring_restart(cxs_gpu_loader *l);
void gpu_expand_init(const cxs_gpu_loader *l, const gslot *s, gpu_expand_args *a);

int gpu_up_init(cxs_gpu_loader *l, uploader *u, void *stream, unsigned n, size_t row_bytes);
void gpu_up_free(cxs_gpu_loader *l, uploader *u);
int gpu_up_flush(cxs_gpu_loader *l, uploader *u);
int gpu_up_space(cxs_gpu_loader *l, uploader *u, uint8_t *dst, uint8_t **p, size_t *avail);
void gpu_up_commit(uploader *u, size_t n);
int gpu_up_write(cxs_gpu_loader *l, uploader *u, uint8_t *dst, const void *src, size_t n);
int gpu_up_rows(cxs_gpu_loader *l, uploader *u, zreader *zr, uint32_t s, uint64_t r0, uint64_t n,
                uint8_t *dst);
int gpu_up_finish(cxs_gpu_loader *l, uploader *u);

/* fn(arg), which reads the shards' mapping, in a recovery region (fault.h):
 * a shard truncated since open fails the loader with CXS_E_TRUNCATED and a
 * message "WHAT: SHARD: ... truncated (byte B, in SECTION, ...)" rather
 * than SIGBUS; otherwise fn's return value (fn's own errors, with the
 * message it wrote).  fn holds no lock while it reads the mapping. */
int gpu_mapped(cxs_gpu_loader *l, const char *what, int (*fn)(void *), void *arg);

/* GPUDirect Storage (gpu_resident.c): 1 when libcufile can be loaded. */
int gpu_gds_present(void);
/* Pool mode: the samples each rank serves in an epoch (gpu_pool.c). */
uint64_t gpu_pool_length(const cxs_dataset *ds, const cxs_sampler_opts *so);

#endif
