/* gpu.c - batches of windows in device memory: the stream, resident and
 * pool modes of ctxshard_gpu.h, written against the backend table of
 * gpu_backend.h (CUDA, or the host emulation the CPU tests run). */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "blocks.h"
#include "ctxshard_gpu.h"
#include "cxs_le.h"
#include "dataset_internal.h"
#include "gpu_backend.h"

#define NSLOT 3                 /* device batch slots: filling, in use, being released */
#define UP_CHUNK (16u << 20)    /* staged upload chunk */
#define REG_PIECE (256ull << 20) /* one copy from a registered mapping */
#define MAX_UP 16

/* ---- GPUDirect Storage, loaded at run time ---------------------------- */

/* The few declarations of cufile.h the loader uses (its ABI is stable);
 * the library is dlopen'ed so that nothing links against it. */
typedef struct gds_error {
    int err;
    int cu_err;
} gds_error;
typedef struct gds_descr {
    int type; /* 1: a Linux file descriptor */
    union {
        int fd;
        void *handle;
    } handle;
    const void *fs_ops;
} gds_descr;

typedef struct gds_lib {
    void *so;
    gds_error (*driver_open)(void);
    gds_error (*driver_close)(void);
    gds_error (*handle_register)(void **fh, gds_descr *d);
    void (*handle_deregister)(void *fh);
    ssize_t (*read)(void *fh, void *base, size_t size, off_t file_off, off_t buf_off);
} gds_lib;

/* CXS_CUFILE names the library file when it is not on the loader's path
 * (pip's nvidia-cufile keeps it in site-packages/nvidia/cufile/lib). */
static int gds_load(gds_lib *g) {
    memset(g, 0, sizeof *g);
    const char *env = getenv("CXS_CUFILE");
    if (!(env && *env && (g->so = dlopen(env, RTLD_NOW | RTLD_LOCAL))) &&
        !(g->so = dlopen("libcufile.so.0", RTLD_NOW | RTLD_LOCAL)) &&
        !(g->so = dlopen("libcufile.so", RTLD_NOW | RTLD_LOCAL)))
        return -1;
    *(void **)&g->driver_open = dlsym(g->so, "cuFileDriverOpen");
    *(void **)&g->driver_close = dlsym(g->so, "cuFileDriverClose");
    *(void **)&g->handle_register = dlsym(g->so, "cuFileHandleRegister");
    *(void **)&g->handle_deregister = dlsym(g->so, "cuFileHandleDeregister");
    *(void **)&g->read = dlsym(g->so, "cuFileRead");
    if (!g->driver_open || !g->driver_close || !g->handle_register || !g->handle_deregister ||
        !g->read) {
        dlclose(g->so);
        g->so = NULL;
        return -1;
    }
    return 0;
}

/* ---- the loader ------------------------------------------------------- */

typedef struct gslot {
    void *d_x;
    int64_t *d_y;
    void *d_in;      /* resident: frames; pool: descriptors */
    void *h_in;      /* pinned staging of d_in */
    uint64_t *frames; /* host: what the batch serves */
    size_t n;
    uint64_t index, position;
    void *ev_ready, *ev_consumed;
    int used;
} gslot;

/* Chunked, overlapped upload through pinned staging buffers: the host fills
 * buffer i while the copy engine sends i-1. */
typedef struct uploader {
    void *stream;
    unsigned n, cur;
    size_t bytes, fill;
    uint8_t *buf[MAX_UP];
    void *ev[MAX_UP];
    int busy[MAX_UP];
    uint8_t *dst; /* device address of buf[cur]'s first byte */
    char *err;    /* where its messages go: the thread that uses it owns it */
    size_t errlen;
} uploader;

/* Pool mode: one segment of the device pool and the block it holds. */
typedef struct pseg {
    uint64_t row_base;  /* device row of the segment's first row */
    uint64_t block;     /* the block of the epoch's plan it holds */
    void *ev_loaded, *ev_freed;
    int freed_once;
} pseg;

/* The pool is the device side of the block schedule (blocks.h): blocks of
 * at most seg_rows rows (no guard rows: the kernel pads at utterance
 * borders), R = S - 1 drawn from at a time, one more loading.  The order
 * is the schedule's, so it is stateless: any position of any epoch. */
typedef struct pool {
    uint32_t S;
    uint64_t seg_rows;
    uint8_t *d_pool;
    pseg *seg;
    cxs_block_sched bs;
    cxs_block_plan *plan;       /* the epoch's; read-only, shared with the refresher */
    uint64_t base, stride, len; /* position i is the schedule's base + i * stride; len of them */
    /* the refresher thread and what it shares with the consumer */
    pthread_t th;
    int running;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop, rc;
    char err[256];
    uint64_t next_block;
    uint32_t *freeq, fq_head, fq_len;  /* segments free to load, FIFO */
    uint32_t *loadq, lq_head, lq_len;  /* loaded, not yet joined, FIFO (block order) */
    /* consumer side */
    uint32_t *res;                     /* blocks [lo, hi) resident: block j in res[j % S] */
    uint64_t lo, hi;
    uint64_t t;                        /* the round entered (UINT64_MAX: none yet) */
    uploader up;
    void *copy;
} pool;

struct cxs_gpu_loader {
    const gpu_backend *be;
    const cxs_dataset *ds;
    const cxs_sampler *sampler;
    cxs_gpu_opts o;
    int dev;
    uint32_t mode, dtype, D;
    size_t W, xelem;
    uint64_t epoch, pos, index;
    int rc;
    char err[512];
    cxs_gpu_loader_info info;
    uint64_t uploaded;           /* atomic: the feeder and refresher add to it */
    cxs_gpu_batch batch;
    void *work, *copy;           /* the loader's streams */
    double *d_mean, *d_scale;
    /* The statistics opts->norm gave, copied (means, then variances) so that
     * the stream mode's CPU loader can be restarted after create. */
    double *norm_mv;
    cxs_norm norm;
    /* resident / pool batch ring */
    gslot slot[NSLOT];
    uint64_t cur;
    int primed;
    gslot *handed;
    void *last_stream;           /* the consumer's stream of the last next() */
    /* resident */
    uint8_t *d_feat;
    uint64_t *d_cum, *d_urow;
    uint16_t *d_lab;
    /* stream */
    cxs_loader *cl;
    uint32_t nstage;
    float **h_x;
    int64_t **h_y;
    pthread_t feeder;
    int feeding;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t filled, taken, released;
    int fstop, frc, fdone;
    char ferr[256];
    /* pool */
    pool p;
};

static int lfail(cxs_gpu_loader *l, int rc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(l->err, sizeof l->err, fmt, ap);
    va_end(ap);
    return rc;
}

/* A backend call that failed: CXS_E_DEVICE with the runtime's words. */
static int dfail(cxs_gpu_loader *l, int err, const char *what) {
    return lfail(l, CXS_E_DEVICE, "%s: %s failed: %s", l->be->name, what,
                 l->be->error_string(err));
}

#define BE(l, call)                                     \
    do {                                                \
        int be_err_ = (call);                           \
        if (be_err_) return dfail((l), be_err_, #call); \
    } while (0)

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- probe ------------------------------------------------------------ */

int cxs_gpu_probe(int32_t device, cxs_gpu_probe_info *info) {
    if (!info) return CXS_E_INVALID;
    memset(info, 0, sizeof *info);
#ifdef CXS_HAVE_CUDA
    info->built_with_cuda = 1;
#endif
    gds_lib g;
    if (gds_load(&g) == 0) {
        info->gds = 1;
        dlclose(g.so);
    }
    if (!cxs_host_is_le()) {
        snprintf(info->reason, sizeof info->reason, "the GPU path needs a little-endian host");
        return CXS_E_UNSUPPORTED;
    }
    if (device == CXS_GPU_EMULATE) {
        snprintf(info->name, sizeof info->name, "%s", cxs_gpu_emu.name);
        info->device_count = 1;
        info->register_read_only = 1;
        cxs_gpu_emu.mem_info(&info->free_bytes, &info->total_bytes);
        info->usable = 1;
        return 0;
    }
#ifdef CXS_HAVE_CUDA
    int rc = cxs_gpu_cuda_probe(device, info);
    info->usable = rc == 0;
    return rc;
#else
    snprintf(info->reason, sizeof info->reason,
             "libctxshard was built without CUDA (no nvcc at build time, or -Dcuda=disabled)");
    return CXS_E_UNSUPPORTED;
#endif
}

/* ---- staged uploads ----------------------------------------------------- */

static int ufail(const cxs_gpu_loader *l, uploader *u, int err, const char *what) {
    snprintf(u->err, u->errlen, "%s: %s failed: %s", l->be->name, what, l->be->error_string(err));
    return CXS_E_DEVICE;
}

#define UBE(l, u, call)                                     \
    do {                                                    \
        int be_err_ = (call);                               \
        if (be_err_) return ufail((l), (u), be_err_, #call); \
    } while (0)

static int up_init(cxs_gpu_loader *l, uploader *u, void *stream, unsigned n, size_t row_bytes,
                   char *err, size_t errlen) {
    memset(u, 0, sizeof *u);
    u->stream = stream;
    u->err = err, u->errlen = errlen;
    u->n = n < 2 ? 2 : (n > MAX_UP ? MAX_UP : n);
    /* whole rows per buffer, at least one */
    u->bytes = UP_CHUNK < row_bytes ? row_bytes : UP_CHUNK - UP_CHUNK % row_bytes;
    for (unsigned i = 0; i < u->n; i++) {
        UBE(l, u, l->be->host_alloc((void **)&u->buf[i], u->bytes));
        UBE(l, u, l->be->event_create(&u->ev[i]));
    }
    return 0;
}

static void up_free(cxs_gpu_loader *l, uploader *u) {
    for (unsigned i = 0; i < MAX_UP; i++) {
        if (u->buf[i]) l->be->host_free(u->buf[i]);
        if (u->ev[i]) l->be->event_destroy(u->ev[i]);
    }
    memset(u, 0, sizeof *u);
}

static int up_flush(cxs_gpu_loader *l, uploader *u) {
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
static int up_space(cxs_gpu_loader *l, uploader *u, uint8_t *dst, uint8_t **p, size_t *avail) {
    int rc;
    if (u->fill && (u->dst + u->fill != dst || u->fill == u->bytes) && (rc = up_flush(l, u)))
        return rc;
    if (!u->fill) u->dst = dst;
    *p = u->buf[u->cur] + u->fill;
    *avail = u->bytes - u->fill;
    return 0;
}

static void up_commit(uploader *u, size_t n) { u->fill += n; }

/* Send host bytes src[n] to dst through the staging buffers. */
static int up_write(cxs_gpu_loader *l, uploader *u, uint8_t *dst, const void *src, size_t n) {
    const uint8_t *s = src;
    while (n) {
        uint8_t *p;
        size_t avail;
        int rc = up_space(l, u, dst, &p, &avail);
        if (rc) return rc;
        size_t m = n < avail ? n : avail;
        memcpy(p, s, m);
        up_commit(u, m);
        s += m, dst += m, n -= m;
    }
    return 0;
}

/* Stored rows r0 .. r0+n-1 of shard s's FEATURES layout to dst. */
static int up_rows(cxs_gpu_loader *l, uploader *u, zreader *zr, uint32_t s, uint64_t r0,
                   uint64_t n, uint8_t *dst) {
    const cxs_dataset *ds = l->ds;
    const uint64_t rb = ds->row_bytes;
    if (!ds->compressed)
        return up_write(l, u, dst, ds->shards[s].features + r0 * rb, (size_t)(n * rb));
    while (n) {
        uint8_t *p;
        size_t avail;
        int rc = up_space(l, u, dst, &p, &avail);
        if (rc) return rc;
        uint64_t m = avail / rb;
        if (!m) { /* the pending run left less than a row: start a new chunk */
            if ((rc = up_flush(l, u))) return rc;
            continue;
        }
        if (m > n) m = n;
        if ((rc = cxs_read_rows(ds, zr, s, r0, m, p))) {
            snprintf(u->err, u->errlen, "%s: cannot decode features: %s", ds->shards[s].path,
                     cxs_strerror(rc));
            return rc;
        }
        up_commit(u, (size_t)(m * rb));
        r0 += m, n -= m, dst += m * rb;
    }
    return 0;
}

static int up_finish(cxs_gpu_loader *l, uploader *u) {
    int rc = up_flush(l, u);
    if (rc) return rc;
    UBE(l, u, l->be->stream_sync(u->stream));
    for (unsigned i = 0; i < u->n; i++) u->busy[i] = 0;
    return 0;
}

/* ---- planning ----------------------------------------------------------- */

static uint64_t shard_rows(const shard *sh) {
    return sh->meta.num_frames + (sh->meta.num_utterances + 1) * (uint64_t)sh->meta.guard;
}

/* Device bytes of the batch ring (x, y, inputs) of resident/pool mode. */
static uint64_t ring_bytes(const cxs_gpu_loader *l, size_t in_size) {
    uint64_t B = l->o.batch_size;
    return NSLOT * (B * l->xelem * l->W + B * 8 + B * in_size);
}

static uint64_t resident_bytes(const cxs_gpu_loader *l) {
    const cxs_dataset *ds = l->ds;
    uint64_t rows = 0, U = ds->meta.num_utterances;
    for (uint32_t s = 0; s < ds->meta.num_shards; s++) rows += shard_rows(&ds->shards[s]);
    return rows * ds->row_bytes + (2 * U + 1) * 8 +
           (l->o.labels ? ds->meta.num_frames * 2 : 0) + ring_bytes(l, 8);
}

/* Choose the mode: what AUTO becomes, and whether the one asked fits. */
static int plan_mode(cxs_gpu_loader *l, uint64_t budget) {
    const cxs_dataset *ds = l->ds;
    uint64_t need = resident_bytes(l);
    uint32_t m = l->o.mode;
    char *why = l->info.reason;
    size_t wn = sizeof l->info.reason;
    if (m == CXS_GPU_AUTO) {
        m = need <= budget ? CXS_GPU_RESIDENT : CXS_GPU_STREAM;
        snprintf(why, wn, "auto: the resident features and tables take %llu bytes, %s the budget of %llu",
                 (unsigned long long)need, need <= budget ? "within" : "more than",
                 (unsigned long long)budget);
    } else if (m == CXS_GPU_RESIDENT) {
        if (need > budget)
            return lfail(l, CXS_E_RANGE,
                         "resident mode needs %llu bytes of device memory; the budget is %llu "
                         "(use pool or stream mode, or a larger budget)",
                         (unsigned long long)need, (unsigned long long)budget);
        snprintf(why, wn, "resident: %llu bytes of %llu", (unsigned long long)need,
                 (unsigned long long)budget);
    } else if (m == CXS_GPU_POOL) {
        uint32_t S = l->o.pool_segments ? l->o.pool_segments : 4;
        uint64_t ring = ring_bytes(l, sizeof(cxs_x_desc));
        uint64_t seg_rows = budget > ring ? (budget - ring) / S / ds->row_bytes : 0;
        if (seg_rows > UINT32_MAX) seg_rows = UINT32_MAX; /* local rows are 32-bit */
        if (seg_rows < ds->max_len || !seg_rows)
            return lfail(l, CXS_E_RANGE,
                         "pool mode: a segment of the budget (%llu bytes / %u segments) holds %llu "
                         "rows, less than the longest utterance (%llu frames)",
                         (unsigned long long)budget, S, (unsigned long long)seg_rows,
                         (unsigned long long)ds->max_len);
        l->p.S = S;
        l->p.seg_rows = seg_rows;
        snprintf(why, wn, "pool: %u segments of %llu rows", S, (unsigned long long)seg_rows);
    } else {
        snprintf(why, wn, "stream: asked for");
    }
    l->mode = m;
    return 0;
}

/* ---- the batch ring (resident and pool) ----------------------------------- */

static int ring_alloc(cxs_gpu_loader *l, size_t in_size) {
    const size_t B = l->o.batch_size;
    for (int i = 0; i < NSLOT; i++) {
        gslot *s = &l->slot[i];
        BE(l, l->be->dev_alloc(&s->d_x, B * l->W * l->xelem));
        if (l->o.labels) BE(l, l->be->dev_alloc((void **)&s->d_y, B * 8));
        BE(l, l->be->dev_alloc(&s->d_in, B * in_size));
        BE(l, l->be->host_alloc(&s->h_in, B * in_size));
        if (l->mode == CXS_GPU_POOL) {
            if (!(s->frames = malloc(B * 8))) return lfail(l, -ENOMEM, "out of memory");
        } else {
            s->frames = s->h_in;
        }
        BE(l, l->be->event_create(&s->ev_ready));
        BE(l, l->be->event_create(&s->ev_consumed));
    }
    return 0;
}

static void ring_free(cxs_gpu_loader *l) {
    for (int i = 0; i < NSLOT; i++) {
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
}

static void expand_args(cxs_gpu_loader *l, gslot *s, gpu_expand_args *a) {
    memset(a, 0, sizeof *a);
    a->dtype = l->dtype, a->D = l->D, a->k = l->o.k;
    a->out_bf16 = l->o.out_dtype == CXS_GPU_OUT_BF16;
    a->mean = l->d_mean, a->scale = l->d_scale;
    a->n = s->n;
    a->out = s->d_x;
    a->y = s->d_y;
}

/* ---- resident mode ------------------------------------------------------ */

/* Whole FEATURES sections straight from the files into device memory
 * through GPUDirect Storage.  0 when every shard went this way; -1 to fall
 * back silently (the path is optional and often absent). */
static int gds_upload(cxs_gpu_loader *l, const uint64_t *srow) {
#ifdef CXS_HAVE_CUDA
    const cxs_dataset *ds = l->ds;
    gds_lib g;
    if (ds->compressed || l->be != &cxs_gpu_cuda || gds_load(&g)) return -1;
    gds_error e = g.driver_open();
    if (e.err) {
        dlclose(g.so);
        return -1;
    }
    int ok = 1;
    const uint64_t rb = ds->row_bytes;
    for (uint32_t s = 0; s < ds->meta.num_shards && ok; s++) {
        const shard *sh = &ds->shards[s];
        int fd = open(sh->path, O_RDONLY | O_DIRECT | O_CLOEXEC);
        if (fd < 0) {
            ok = 0;
            break;
        }
        gds_descr d;
        memset(&d, 0, sizeof d);
        d.type = 1;
        d.handle.fd = fd;
        void *fh = NULL;
        e = g.handle_register(&fh, &d);
        if (e.err) {
            close(fd);
            ok = 0;
            break;
        }
        uint64_t off = (uint64_t)(sh->features - sh->map), len = shard_rows(sh) * rb, done = 0;
        while (done < len) {
            size_t m = len - done < (1ull << 30) ? (size_t)(len - done) : (1u << 30);
            ssize_t r = g.read(fh, l->d_feat, m, (off_t)(off + done), (off_t)(srow[s] * rb + done));
            if (r <= 0) {
                ok = 0;
                break;
            }
            done += (uint64_t)r;
        }
        __atomic_add_fetch(&l->uploaded, done, __ATOMIC_RELAXED);
        g.handle_deregister(fh);
        close(fd);
    }
    g.driver_close();
    dlclose(g.so);
    return ok ? 0 : -1;
#else
    return -1;
#endif
}

/* Pin every shard's FEATURES section in place (read-only) and copy from
 * the mapping itself: no staging copy on the CPU.  -1 when the device or
 * the mapping does not allow it (nothing left registered). */
static int registered_upload(cxs_gpu_loader *l, const uint64_t *srow) {
    const cxs_dataset *ds = l->ds;
    int yes = 0;
    if (ds->compressed || (l->o.paths & CXS_GPU_NO_REGISTER) ||
        l->be->register_supported(l->dev, &yes) || !yes)
        return -1;
    const uint32_t S = ds->meta.num_shards;
    const uint64_t rb = ds->row_bytes, page = (uint64_t)sysconf(_SC_PAGESIZE);
    void **reg = calloc(S ? S : 1, sizeof *reg);
    if (!reg) return -1;
    int rc = 0;
    uint32_t s;
    for (s = 0; s < S; s++) {
        const shard *sh = &ds->shards[s];
        uint64_t a = (uint64_t)(sh->features - sh->map), b = a + shard_rows(sh) * rb;
        uint64_t a0 = a - a % page, b0 = (b + page - 1) / page * page;
        if (l->be->host_register((void *)(sh->map + a0), (size_t)(b0 - a0))) break;
        reg[s] = (void *)(sh->map + a0);
    }
    if (s < S) {
        rc = -1;
    } else {
        for (s = 0; s < S && !rc; s++) {
            const shard *sh = &ds->shards[s];
            uint64_t len = shard_rows(sh) * rb;
            for (uint64_t done = 0; done < len && !rc; done += REG_PIECE) {
                size_t m = len - done < REG_PIECE ? (size_t)(len - done) : (size_t)REG_PIECE;
                int e = l->be->copy_h2d(l->d_feat + srow[s] * rb + done, sh->features + done, m,
                                        l->copy);
                if (e) rc = dfail(l, e, "copy from the registered mapping");
                else __atomic_add_fetch(&l->uploaded, m, __ATOMIC_RELAXED);
            }
        }
        if (!rc) {
            int e = l->be->stream_sync(l->copy);
            if (e) rc = dfail(l, e, "stream_sync");
        }
    }
    for (s = 0; s < S; s++)
        if (reg[s]) l->be->host_unregister(reg[s]);
    free(reg);
    return rc;
}

static int resident_setup(cxs_gpu_loader *l) {
    const cxs_dataset *ds = l->ds;
    const uint32_t S = ds->meta.num_shards;
    const uint64_t U = ds->meta.num_utterances, F = ds->meta.num_frames, rb = ds->row_bytes;
    uint64_t *srow = malloc((S + 1) * sizeof *srow), *urow = malloc((U ? U : 1) * sizeof *urow);
    zreader zr = {0};
    uploader up;
    memset(&up, 0, sizeof up);
    int rc = 0;
    if (!srow || !urow) {
        rc = lfail(l, -ENOMEM, "out of memory");
        goto out;
    }
    srow[0] = 0;
    for (uint32_t s = 0; s < S; s++) srow[s + 1] = srow[s] + shard_rows(&ds->shards[s]);
    for (uint64_t u = 0; u < U; u++) urow[u] = srow[ds->utt_shard[u]] + ds->row[u];
    int e;
    if ((e = l->be->dev_alloc((void **)&l->d_feat, (size_t)(srow[S] * rb))) ||
        (e = l->be->dev_alloc((void **)&l->d_cum, (size_t)(U + 1) * 8)) ||
        (e = l->be->dev_alloc((void **)&l->d_urow, (size_t)(U ? U : 1) * 8)) ||
        (l->o.labels && (e = l->be->dev_alloc((void **)&l->d_lab, (size_t)(F ? F : 1) * 2)))) {
        rc = dfail(l, e, "device allocation of the resident dataset");
        goto out;
    }
    l->info.device_bytes += srow[S] * rb + (2 * U + 1) * 8 + (l->o.labels ? F * 2 : 0);
    double t0 = now_s();
    if ((rc = up_init(l, &up, l->copy, l->o.slots, rb, l->err, sizeof l->err))) goto out;
    if ((l->o.paths & CXS_GPU_GDS) && gds_upload(l, srow) == 0) {
        l->info.upload_path = 2;
    } else if ((rc = registered_upload(l, srow)) == 0) {
        l->info.upload_path = 1;
    } else if (rc != -1) {
        goto out;
    } else {
        rc = 0;
        l->info.upload_path = 0;
        for (uint32_t s = 0; s < S && !rc; s++)
            rc = up_rows(l, &up, &zr, s, 0, shard_rows(&ds->shards[s]), l->d_feat + srow[s] * rb);
        if (rc) goto out;
    }
    if ((rc = up_write(l, &up, (uint8_t *)l->d_cum, ds->cum, (size_t)(U + 1) * 8)) ||
        (rc = up_write(l, &up, (uint8_t *)l->d_urow, urow, (size_t)U * 8)))
        goto out;
    if (l->o.labels) {
        for (uint32_t s = 0; s < S; s++) {
            const shard *sh = &ds->shards[s];
            const uint64_t n = sh->meta.num_frames;
            uint8_t *dst = (uint8_t *)(l->d_lab + sh->f_start);
            for (uint64_t i = 0; i < n;) {
                uint8_t *p;
                size_t avail;
                if ((rc = up_space(l, &up, dst + i * 2, &p, &avail))) goto out;
                uint64_t m = avail / 2 < n - i ? avail / 2 : n - i;
                if (!m) {
                    if ((rc = up_flush(l, &up))) goto out;
                    continue;
                }
                uint16_t *q = (uint16_t *)(void *)p;
                for (uint64_t j = 0; j < m; j++)
                    q[j] = cxs_shard_label(sh, i + j);
                up_commit(&up, (size_t)m * 2);
                i += m;
            }
        }
    }
    if ((rc = up_finish(l, &up))) goto out;
    l->info.upload_seconds = now_s() - t0;
out:
    up_free(l, &up);
    cxs_zreader_free(&zr);
    free(srow);
    free(urow);
    return rc;
}

/* Enqueue the batch at the loader's position into slot s (one batch ahead
 * of the consumer), or mark the end of the epoch (n = 0). */
static int resident_launch(cxs_gpu_loader *l, gslot *s) {
    uint64_t len = cxs_sampler_length(l->sampler), B = l->o.batch_size;
    uint64_t n = l->pos < len ? len - l->pos : 0;
    if (n > B) n = B;
    if (n < B && l->o.drop_last) n = 0;
    if (s->used) BE(l, l->be->event_sync(s->ev_ready)); /* h_in's last copy is done */
    s->n = (size_t)n, s->index = l->index, s->position = l->pos;
    if (!n) return 0;
    int rc = cxs_sampler_get(l->sampler, l->epoch, l->pos, (size_t)n, s->h_in);
    if (rc) return lfail(l, rc, "sampler: %s", cxs_strerror(rc));
    if (s->used) BE(l, l->be->stream_wait(l->work, s->ev_consumed));
    BE(l, l->be->copy_h2d(s->d_in, s->h_in, (size_t)n * 8, l->work));
    gpu_expand_args a;
    expand_args(l, s, &a);
    a.frames = s->d_in;
    a.feat = l->d_feat;
    a.cum = l->d_cum, a.urow = l->d_urow, a.num_utts = l->ds->meta.num_utterances;
    a.lab = l->d_lab;
    BE(l, l->be->expand(&a, l->work));
    BE(l, l->be->event_record(s->ev_ready, l->work));
    s->used = 1;
    l->pos += n;
    l->index++;
    return 0;
}

/* ---- pool mode ------------------------------------------------------------ */

/* Samples each rank serves: the remainder of the epoch from the sampler's
 * origin, cut to a multiple of world_size so that every rank takes the
 * same number of steps (no wrap-around padding: the padding's frames come
 * from the first blocks, long gone from the pool). */
static uint64_t pool_length(const cxs_dataset *ds, const cxs_sampler_opts *so) {
    const uint64_t n = ds->meta.num_frames, w = so->world_size ? so->world_size : 1;
    return n > so->origin ? (n - so->origin) / w : 0;
}

static int pfail(pool *p, int rc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err, sizeof p->err, fmt, ap);
    va_end(ap);
    return rc;
}

/* Ask the kernel for a block's bytes (and the next block's) before the
 * refresher copies them: one sequential read in flight per block, whatever
 * access pattern another user of the mapping asked for (a CPU loader marks
 * it MADV_RANDOM). */
static void pool_hint(const cxs_gpu_loader *l, uint64_t j) {
    const cxs_block_plan *pl = l->p.plan;
    const uintptr_t P = (uintptr_t)sysconf(_SC_PAGESIZE);
    for (uint64_t i = j; i < pl->nblocks && i < j + 2; i++) {
        const cxs_block *b = &pl->blk[i];
        const shard *sh = &l->ds->shards[b->shard];
        if (!sh->features || !b->len) continue;
        uintptr_t a = ((uintptr_t)sh->map + b->off) & ~(P - 1), e = (uintptr_t)sh->map + b->off + b->len;
        posix_madvise((void *)a, e - a, POSIX_MADV_WILLNEED);
    }
}

/* Refresher: load block j of the epoch's plan into segment g, its
 * utterances' rows one after the other (the block is a run of utterances
 * of one shard, in storage order), through the pool's own copy stream. */
static int pool_load(cxs_gpu_loader *l, uint32_t g, uint64_t j, zreader *zr) {
    const cxs_dataset *ds = l->ds;
    pool *p = &l->p;
    pseg *sg = &p->seg[g];
    const cxs_block *b = &p->plan->blk[j];
    sg->block = j;
    pool_hint(l, j);
    int e;
    if (sg->freed_once && (e = l->be->stream_wait(p->copy, sg->ev_freed)))
        return pfail(p, CXS_E_DEVICE, "%s: stream_wait: %s", l->be->name, l->be->error_string(e));
    uint8_t *base = p->d_pool + sg->row_base * ds->row_bytes;
    for (uint64_t u = b->u0; u < b->u1; u++) {
        int rc = up_rows(l, &p->up, zr, b->shard, ds->row[u], ds->cum[u + 1] - ds->cum[u],
                         base + (ds->cum[u] - b->f0) * ds->row_bytes);
        if (rc) return rc; /* the message is in p->err */
    }
    int rc = up_flush(l, &p->up);
    if (rc) return rc;
    if ((e = l->be->event_record(sg->ev_loaded, p->copy)))
        return pfail(p, CXS_E_DEVICE, "%s: event_record: %s", l->be->name, l->be->error_string(e));
    return 0;
}

static void *refresher_main(void *arg) {
    cxs_gpu_loader *l = arg;
    pool *p = &l->p;
    zreader zr = {0};
    l->be->set_device(l->dev);
    for (;;) {
        pthread_mutex_lock(&p->mu);
        while (!p->stop && p->next_block < p->plan->nblocks && !p->fq_len)
            pthread_cond_wait(&p->cv, &p->mu);
        if (p->stop || p->next_block >= p->plan->nblocks) {
            pthread_mutex_unlock(&p->mu);
            break;
        }
        uint32_t g = p->freeq[p->fq_head];
        p->fq_head = (p->fq_head + 1) % p->S;
        p->fq_len--;
        uint64_t j = p->next_block++;
        pthread_mutex_unlock(&p->mu);
        int rc = pool_load(l, g, j, &zr);
        pthread_mutex_lock(&p->mu);
        if (rc) {
            p->rc = rc;
        } else {
            p->loadq[(p->lq_head + p->lq_len) % p->S] = g;
            p->lq_len++;
        }
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        if (rc) break;
    }
    cxs_zreader_free(&zr);
    return NULL;
}

static void pool_stop(cxs_gpu_loader *l) {
    pool *p = &l->p;
    if (!p->running) return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->th, NULL);
    p->running = 0;
    l->be->stream_sync(p->copy);
}

/* Start the epoch l->epoch at position l->pos: the refresher begins with
 * the first block that position's round draws from (the blocks of earlier
 * rounds are drained: nothing of them is read). */
static int pool_start(cxs_gpu_loader *l) {
    pool *p = &l->p;
    const cxs_sampler_opts *so = cxs_sampler_options(l->sampler);
    if (p->plan && p->plan->epoch != l->epoch) {
        cxs_block_plan_put(&p->bs, p->plan);
        p->plan = NULL;
    }
    if (!p->plan && cxs_block_plan_get(&p->bs, l->epoch, &p->plan))
        return lfail(l, -ENOMEM, "out of memory");
    p->base = so->origin + so->rank;
    p->stride = so->world_size ? so->world_size : 1;
    p->len = pool_length(l->ds, so);
    uint64_t t0 = p->plan->nblocks;
    if (l->pos < p->len) t0 = cxs_block_plan_round(p->plan, p->base + l->pos * p->stride);
    p->stop = 0, p->rc = 0, p->err[0] = 0;
    const uint64_t b0 = t0 < p->plan->nblocks ? cxs_block_plan_first(p->plan, t0) : t0;
    p->next_block = b0;
    p->lo = p->hi = b0;
    p->t = UINT64_MAX;
    p->fq_head = 0, p->fq_len = p->S;
    for (uint32_t g = 0; g < p->S; g++) p->freeq[g] = g;
    p->lq_head = 0, p->lq_len = 0;
    if (pthread_create(&p->th, NULL, refresher_main, l))
        return lfail(l, -EAGAIN, "cannot start the pool's refresher thread");
    p->running = 1;
    return 0;
}

static int pool_setup(cxs_gpu_loader *l) {
    pool *p = &l->p;
    const uint64_t rb = l->ds->row_bytes;
    cxs_diag d;
    int e, rc = cxs_block_sched_init(&p->bs, l->ds, cxs_sampler_options(l->sampler)->seed,
                                     p->seg_rows, 0, p->S - 1, &d);
    if (rc) return lfail(l, rc, "pool mode: %s", d.message);
    if ((e = l->be->dev_alloc((void **)&p->d_pool, (size_t)(p->S * p->seg_rows * rb))))
        return dfail(l, e, "device allocation of the pool");
    l->info.device_bytes += p->S * p->seg_rows * rb;
    if (!(p->seg = calloc(p->S, sizeof *p->seg)) || !(p->freeq = calloc(p->S, 4)) ||
        !(p->loadq = calloc(p->S, 4)) || !(p->res = calloc(p->S, 4)))
        return lfail(l, -ENOMEM, "out of memory");
    for (uint32_t g = 0; g < p->S; g++) {
        pseg *sg = &p->seg[g];
        sg->row_base = g * p->seg_rows;
        BE(l, l->be->event_create(&sg->ev_loaded));
        BE(l, l->be->event_create(&sg->ev_freed));
    }
    if ((rc = up_init(l, &p->up, l->copy, l->o.slots, rb, l->err, sizeof l->err))) return rc;
    p->up.err = p->err, p->up.errlen = sizeof p->err; /* from now on the refresher's */
    p->copy = l->copy;
    return pool_start(l);
}

static void pool_free(cxs_gpu_loader *l) {
    pool *p = &l->p;
    pool_stop(l);
    for (uint32_t g = 0; p->seg && g < p->S; g++) {
        pseg *sg = &p->seg[g];
        if (sg->ev_loaded) l->be->event_destroy(sg->ev_loaded);
        if (sg->ev_freed) l->be->event_destroy(sg->ev_freed);
    }
    up_free(l, &p->up);
    if (p->d_pool) l->be->dev_free(p->d_pool);
    if (p->plan) cxs_block_plan_put(&p->bs, p->plan);
    cxs_block_sched_destroy(&p->bs);
    free(p->seg);
    free(p->freeq);
    free(p->loadq);
    free(p->res);
    p->d_pool = NULL, p->seg = NULL, p->plan = NULL;
    p->freeq = p->loadq = p->res = NULL;
}

/* Give segment g back to the refresher once the kernels enqueued so far
 * (which may read it) are done. */
static int pool_release(cxs_gpu_loader *l, uint32_t g) {
    pool *p = &l->p;
    BE(l, l->be->event_record(p->seg[g].ev_freed, l->work));
    p->seg[g].freed_once = 1;
    pthread_mutex_lock(&p->mu);
    p->freeq[(p->fq_head + p->fq_len) % p->S] = g;
    p->fq_len++;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return 0;
}

/* Enter round t: the blocks before its first (cxs_block_plan_first) are
 * drained (the schedule never draws on them again) and go back to the
 * refresher; blocks up to t+R-1 are joined, in block order, waiting for
 * their uploads when needed
 * (which blocks are resident depends on the position only, never on
 * timing).  At most R = S-1 are resident: one segment is always free or
 * loading, so the refresher can make progress while we wait.  The caller
 * has enqueued every kernel that reads the blocks given back. */
static int pool_enter(cxs_gpu_loader *l, uint64_t t) {
    pool *p = &l->p;
    const uint32_t R = p->S - 1;
    const uint64_t first = cxs_block_plan_first(p->plan, t);
    int rc;
    for (; p->lo < first && p->lo < p->hi; p->lo++)
        if ((rc = pool_release(l, p->res[p->lo % p->S]))) return rc;
    const uint64_t end = t + R < p->plan->nblocks ? t + R : p->plan->nblocks;
    while (p->hi < end) {
        pthread_mutex_lock(&p->mu);
        while (!p->lq_len && !p->rc) pthread_cond_wait(&p->cv, &p->mu);
        if (!p->lq_len) { /* the refresher failed */
            rc = lfail(l, p->rc, "pool refresh: %s", p->err);
            pthread_mutex_unlock(&p->mu);
            return rc;
        }
        uint32_t g = p->loadq[p->lq_head];
        p->lq_head = (p->lq_head + 1) % p->S;
        p->lq_len--;
        pthread_mutex_unlock(&p->mu);
        if (p->hi < first) { /* a round this rank has no position in: never read */
            if ((rc = pool_release(l, g))) return rc;
        } else {
            BE(l, l->be->stream_wait(l->work, p->seg[g].ev_loaded));
            p->res[p->hi % p->S] = g;
        }
        p->hi++;
    }
    if (p->lo < first) p->lo = first;
    p->t = t;
    return 0;
}

/* Expand samples a .. b-1 of slot s (their descriptors are drawn). */
static int pool_expand(cxs_gpu_loader *l, gslot *s, size_t a, size_t b) {
    if (a == b) return 0;
    BE(l, l->be->copy_h2d((cxs_x_desc *)s->d_in + a, (cxs_x_desc *)s->h_in + a,
                          (b - a) * sizeof(cxs_x_desc), l->work));
    gpu_expand_args x;
    expand_args(l, s, &x);
    x.n = b - a;
    x.desc = (const cxs_x_desc *)s->d_in + a;
    x.feat = l->p.d_pool;
    x.out = (uint8_t *)s->d_x + a * l->W * l->xelem;
    x.y = s->d_y ? s->d_y + a : NULL;
    BE(l, l->be->expand(&x, l->work));
    return 0;
}

/* Draw the batch at the loader's position into slot s and enqueue its
 * expansion.  When a round ends inside the batch, the samples drawn so
 * far are expanded first, so that the drained blocks can be given back
 * before the next round's are joined. */
static int pool_launch(cxs_gpu_loader *l, gslot *s) {
    const cxs_dataset *ds = l->ds;
    pool *p = &l->p;
    const cxs_block_plan *pl = p->plan;
    cxs_x_desc *desc = s->h_in;
    const size_t want = l->o.batch_size;
    if (s->used) {
        BE(l, l->be->event_sync(s->ev_ready)); /* h_in's last copies are done */
        BE(l, l->be->stream_wait(l->work, s->ev_consumed)); /* and its buffers free */
    }
    s->index = l->index, s->position = l->pos;
    size_t n = 0, done = 0;
    int rc;
    while (n < want && l->pos < p->len) {
        const uint64_t g = p->base + l->pos * p->stride, t = cxs_block_plan_round(pl, g);
        if (t != p->t) { /* a new round (or the first) */
            if ((rc = pool_expand(l, s, done, n))) return rc;
            done = n;
            if ((rc = pool_enter(l, t))) return rc;
        }
        uint64_t j;
        const uint64_t f = cxs_block_plan_frame(pl, g, &j);
        const cxs_block *b = &pl->blk[j];
        /* the utterance holding f: last u in the block with cum[u] <= f */
        uint64_t lo = b->u0, hi = b->u1;
        while (hi - lo > 1) {
            uint64_t mid = lo + (hi - lo) / 2;
            if (ds->cum[mid] <= f) lo = mid;
            else hi = mid;
        }
        const uint64_t u = lo;
        desc[n].row0 = p->seg[p->res[j % p->S]].row_base + (ds->cum[u] - b->f0);
        desc[n].T = (uint32_t)(ds->cum[u + 1] - ds->cum[u]);
        desc[n].t = (uint32_t)(f - ds->cum[u]);
        desc[n].label = 0;
        if (l->o.labels) {
            const shard *sh = &ds->shards[b->shard];
            uint64_t li = f - sh->f_start;
            desc[n].label = cxs_shard_label(sh, li);
        }
        s->frames[n] = f;
        n++;
        l->pos++;
    }
    if ((rc = pool_expand(l, s, done, n))) return rc;
    /* the end, or a short last batch dropped (what it expanded is unused) */
    s->n = n < want && l->o.drop_last ? 0 : n;
    BE(l, l->be->event_record(s->ev_ready, l->work));
    s->used = 1;
    if (s->n) l->index++;
    return 0;
}

/* ---- stream mode ------------------------------------------------------------ */

static void feed_fail(cxs_gpu_loader *l, int rc, const char *fmt, ...) {
    pthread_mutex_lock(&l->mu);
    if (!l->frc) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(l->ferr, sizeof l->ferr, fmt, ap);
        va_end(ap);
        l->frc = rc;
    }
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
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
        int rc = cxs_loader_next(l->cl, &b), e = 0;
        if (rc) {
            feed_fail(l, rc, "loader: %s", cxs_strerror(rc));
            break;
        }
        pthread_mutex_lock(&l->mu);
        while (!l->fstop && l->filled - l->released >= NSLOT) pthread_cond_wait(&l->cv, &l->mu);
        int stop = l->fstop;
        pthread_mutex_unlock(&l->mu);
        if (stop) break;
        gslot *s = &l->slot[l->filled % NSLOT];
        if (!b) {
            s->n = 0;
            pthread_mutex_lock(&l->mu);
            l->filled++;
            pthread_cond_broadcast(&l->cv);
            pthread_mutex_unlock(&l->mu);
            break;
        }
        int h = -1;
        for (uint32_t i = 0; i < l->nstage; i++)
            if (l->h_x[i] == b->x) h = (int)i;
        if (h < 0) {
            feed_fail(l, CXS_E_CORRUPT, "loader handed out a buffer it was not given");
            break;
        }
        const char *what = "stream_wait";
        if ((!s->used || !(e = be->stream_wait(l->copy, s->ev_consumed))) &&
            (what = "copy of x", !(e = be->copy_h2d(s->d_x, b->x, b->n * l->W * 4, l->copy))) &&
            (what = "copy of y", !b->y || !(e = be->copy_h2d(s->d_y, b->y, b->n * 8, l->copy))))
            what = "event_record", e = be->event_record(s->ev_ready, l->copy);
        if (e) {
            feed_fail(l, CXS_E_DEVICE, "%s: %s failed: %s", be->name, what, be->error_string(e));
            break;
        }
        memcpy(s->frames, b->frames, b->n * 8);
        s->n = b->n, s->index = b->index, s->position = b->position;
        s->used = 1;
        __atomic_add_fetch(&l->uploaded, b->n * (l->W * 4 + (b->y ? 8 : 0)),
                           __ATOMIC_RELAXED);
        pthread_mutex_lock(&l->mu);
        l->filled++;
        pthread_cond_broadcast(&l->cv);
        pthread_mutex_unlock(&l->mu);
        /* The copy before this one has had the time of this one's setup;
         * wait for it (rarely a wait) and give its staging back. */
        if (pend >= 0) {
            if ((e = be->event_sync(pend_ev))) {
                feed_fail(l, CXS_E_DEVICE, "%s: event_sync failed: %s", be->name, be->error_string(e));
                break;
            }
            if ((rc = cxs_loader_provide(l->cl, l->h_x[pend], l->h_y ? l->h_y[pend] : NULL))) {
                feed_fail(l, rc, "loader: %s", cxs_strerror(rc));
                break;
            }
        }
        pend = h, pend_ev = s->ev_ready;
    }
    pthread_mutex_lock(&l->mu);
    l->fdone = 1;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

static int stream_start(cxs_gpu_loader *l) {
    cxs_loader_opts lo;
    memset(&lo, 0, sizeof lo);
    lo.k = l->o.k, lo.batch_size = l->o.batch_size, lo.threads = l->o.threads;
    lo.ring = l->nstage, lo.flags = l->o.flags, lo.drop_last = l->o.drop_last;
    lo.labels = l->o.labels, lo.external = 1;
    lo.norm = l->o.norm;
    int rc = cxs_loader_create(l->ds, l->sampler, &lo, l->epoch, l->pos, &l->cl);
    if (rc) return lfail(l, rc, "CPU loader: %s", cxs_strerror(rc));
    for (uint32_t i = 0; i < l->nstage; i++)
        if ((rc = cxs_loader_provide(l->cl, l->h_x[i], l->h_y ? l->h_y[i] : NULL)))
            return lfail(l, rc, "CPU loader: %s", cxs_strerror(rc));
    l->filled = l->taken = l->released = 0;
    l->fstop = l->frc = l->fdone = 0;
    l->ferr[0] = 0;
    if (pthread_create(&l->feeder, NULL, feeder_main, l))
        return lfail(l, -EAGAIN, "cannot start the upload thread");
    l->feeding = 1;
    return 0;
}

static void stream_stop(cxs_gpu_loader *l) {
    if (l->feeding) {
        pthread_mutex_lock(&l->mu);
        l->fstop = 1;
        pthread_cond_broadcast(&l->cv);
        pthread_mutex_unlock(&l->mu);
        pthread_join(l->feeder, NULL);
        l->feeding = 0;
    }
    cxs_loader_free(l->cl); /* joins its workers: no staging buffer is written after this */
    l->cl = NULL;
    if (l->copy) l->be->stream_sync(l->copy); /* nor read */
}

static int stream_setup(cxs_gpu_loader *l) {
    const size_t B = l->o.batch_size;
    uint32_t threads = l->o.threads;
    if (!threads) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        threads = c < 1 ? 1 : (c > 4 ? 4 : (uint32_t)c);
    }
    l->o.threads = threads;
    l->nstage = l->o.slots ? l->o.slots : threads + 2;
    if (l->nstage < 3) l->nstage = 3;
    if (!(l->h_x = calloc(l->nstage, sizeof *l->h_x)) ||
        (l->o.labels && !(l->h_y = calloc(l->nstage, sizeof *l->h_y))))
        return lfail(l, -ENOMEM, "out of memory");
    for (uint32_t i = 0; i < l->nstage; i++) {
        BE(l, l->be->host_alloc((void **)&l->h_x[i], B * l->W * 4));
        if (l->h_y) BE(l, l->be->host_alloc((void **)&l->h_y[i], B * 8));
    }
    for (int i = 0; i < NSLOT; i++) {
        gslot *s = &l->slot[i];
        BE(l, l->be->dev_alloc(&s->d_x, B * l->W * 4));
        if (l->o.labels) BE(l, l->be->dev_alloc((void **)&s->d_y, B * 8));
        if (!(s->frames = malloc(B * 8))) return lfail(l, -ENOMEM, "out of memory");
        BE(l, l->be->event_create(&s->ev_ready));
        BE(l, l->be->event_create(&s->ev_consumed));
    }
    l->info.device_bytes += NSLOT * (B * l->W * 4 + (l->o.labels ? B * 8 : 0));
    return stream_start(l);
}

static int stream_next(cxs_gpu_loader *l, void *stream, gslot **out) {
    if (l->handed) {
        BE(l, l->be->event_record(l->handed->ev_consumed, stream));
        l->handed = NULL;
        pthread_mutex_lock(&l->mu);
        l->released++;
        pthread_cond_broadcast(&l->cv);
        pthread_mutex_unlock(&l->mu);
    }
    pthread_mutex_lock(&l->mu);
    while (l->taken == l->filled && !l->fdone) pthread_cond_wait(&l->cv, &l->mu);
    if (l->taken == l->filled) { /* the feeder stopped without a batch: an error */
        int rc = l->frc ? l->frc : CXS_E_DEVICE;
        snprintf(l->err, sizeof l->err, "%s", l->frc ? l->ferr : "upload thread stopped");
        pthread_mutex_unlock(&l->mu);
        return rc;
    }
    gslot *s = &l->slot[l->taken % NSLOT];
    if (s->n) l->taken++; /* the end marker stays: later calls see it again */
    pthread_mutex_unlock(&l->mu);
    *out = s;
    return 0;
}

/* ---- the API -------------------------------------------------------------- */

/* Stop the threads and let the loader's own work finish before anything
 * it reads is freed. */
static void loader_release(cxs_gpu_loader *l) {
    if (l->mode == CXS_GPU_STREAM) stream_stop(l);
    pool_stop(l);
    if (l->work) l->be->stream_sync(l->work);
    pool_free(l);
}

void cxs_gpu_loader_free(cxs_gpu_loader *l) {
    if (!l) return;
    l->be->set_device(l->dev);
    loader_release(l);
    ring_free(l);
    if (l->h_x)
        for (uint32_t i = 0; i < l->nstage; i++)
            if (l->h_x[i]) l->be->host_free(l->h_x[i]);
    if (l->h_y)
        for (uint32_t i = 0; i < l->nstage; i++)
            if (l->h_y[i]) l->be->host_free(l->h_y[i]);
    free(l->h_x);
    free(l->h_y);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
    pthread_mutex_destroy(&l->p.mu);
    pthread_cond_destroy(&l->p.cv);
    void *dev[] = {l->d_feat, l->d_cum, l->d_urow, l->d_lab, l->d_mean, l->d_scale};
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++)
        if (dev[i]) l->be->dev_free(dev[i]);
    if (l->work) l->be->stream_destroy(l->work);
    if (l->copy) l->be->stream_destroy(l->copy);
    free(l->norm_mv);
    free(l);
}

static int check_opts(const cxs_dataset *ds, const cxs_sampler *sampler, const cxs_gpu_opts *o,
                      uint64_t start, cxs_diag *diag) {
    if (o->mode > CXS_GPU_POOL) return cxs_diagf(diag, CXS_E_INVALID, "unknown GPU mode %u", o->mode);
    if (!o->batch_size) return cxs_diagf(diag, CXS_E_INVALID, "batch_size must be at least 1");
    if (o->k > 1000000) return cxs_diagf(diag, CXS_E_INVALID, "context k=%u is above 1,000,000", o->k);
    if (o->out_dtype > CXS_GPU_OUT_BF16)
        return cxs_diagf(diag, CXS_E_INVALID, "unknown output type %u", o->out_dtype);
    if (o->flags & ~CXS_GATHER_NORMALIZE)
        return cxs_diagf(diag, CXS_E_INVALID, "unknown flags 0x%x", o->flags);
    if ((o->flags & CXS_GATHER_NORMALIZE) && !ds->norm_mean && !o->norm)
        return cxs_diagf(diag, CXS_E_INVALID, "normalisation asked of a dataset without statistics");
    if ((o->flags & CXS_GATHER_NORMALIZE) && o->norm) {
        double *c;
        int rc = cxs_norm_constants(ds, o->norm, &c);
        if (rc)
            return cxs_diagf(diag, rc,
                             "normalisation statistics: dim %u (the dataset's is %u), or a mean "
                             "or variance missing, not finite or negative",
                             o->norm->dim, ds->meta.dim);
        free(c);
    }
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
    if (o->mode == CXS_GPU_POOL) {
        const cxs_sampler_opts *so = cxs_sampler_options(sampler);
        if (so->kind != CXS_SAMPLER_SHUFFLE)
            return cxs_diagf(diag, CXS_E_INVALID, "pool mode serves the block order: it needs a shuffle sampler");
        if (start > pool_length(ds, so))
            return cxs_diagf(diag, CXS_E_INVALID, "pool mode: start %llu is past this rank's %llu samples",
                             (unsigned long long)start, (unsigned long long)pool_length(ds, so));
    }
    if (o->mode == CXS_GPU_STREAM && o->out_dtype != CXS_GPU_OUT_F32)
        return cxs_diagf(diag, CXS_E_INVALID, "stream mode delivers float32 only (bfloat16 output needs resident or pool mode)");
    return 0;
}

int cxs_gpu_loader_create(const cxs_dataset *ds, const cxs_sampler *sampler,
                          const cxs_gpu_opts *opts, uint64_t epoch, uint64_t start,
                          cxs_gpu_loader **out, cxs_diag *diag) {
    if (!ds || !sampler || !opts || !out) return cxs_diagf(diag, CXS_E_INVALID, "NULL argument");
    int rc = check_opts(ds, sampler, opts, start, diag);
    if (rc) return rc;
    cxs_gpu_probe_info pi;
    if ((rc = cxs_gpu_probe(opts->device, &pi))) return cxs_diagf(diag, rc, "%s", pi.reason);
    const gpu_backend *be = &cxs_gpu_emu;
#ifdef CXS_HAVE_CUDA
    if (opts->device != CXS_GPU_EMULATE) be = &cxs_gpu_cuda;
#endif
    cxs_gpu_loader *l = calloc(1, sizeof *l);
    if (!l) return cxs_diagf(diag, -ENOMEM, "out of memory");
    l->be = be;
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    pthread_mutex_init(&l->p.mu, NULL);
    pthread_cond_init(&l->p.cv, NULL);
    l->ds = ds, l->sampler = sampler, l->o = *opts;
    l->dev = opts->device == CXS_GPU_EMULATE ? 0 : opts->device;
    l->dtype = ds->meta.dtype, l->D = ds->meta.dim;
    l->W = (2 * (size_t)opts->k + 1) * ds->meta.dim;
    l->xelem = opts->out_dtype == CXS_GPU_OUT_BF16 ? 2 : 4;
    l->epoch = epoch, l->pos = start;
    l->mode = CXS_GPU_STREAM; /* until planned: what free() must undo */
    l->o.norm = NULL;
    if ((opts->flags & CXS_GATHER_NORMALIZE) && opts->norm) {
        size_t D = ds->meta.dim;
        if (!(l->norm_mv = malloc(2 * D * sizeof *l->norm_mv))) {
            rc = lfail(l, -ENOMEM, "out of memory");
            goto fail;
        }
        memcpy(l->norm_mv, opts->norm->mean, D * sizeof *l->norm_mv);
        memcpy(l->norm_mv + D, opts->norm->var, D * sizeof *l->norm_mv);
        l->norm = (cxs_norm){(uint32_t)D, l->norm_mv, l->norm_mv + D};
        l->o.norm = &l->norm;
    }
    uint64_t budget = opts->budget_bytes ? opts->budget_bytes : pi.free_bytes / 5 * 4;
    int e;
    if ((e = be->set_device(l->dev))) {
        rc = dfail(l, e, "set_device");
        goto fail;
    }
    if ((rc = plan_mode(l, budget))) goto fail;
    l->info.mode = l->mode;
    if ((e = be->stream_create(&l->work)) || (e = be->stream_create(&l->copy))) {
        rc = dfail(l, e, "stream_create");
        goto fail;
    }
    if ((opts->flags & CXS_GATHER_NORMALIZE) && l->mode != CXS_GPU_STREAM) {
        const size_t nb = (size_t)l->D * sizeof(double);
        double *c;
        if ((rc = cxs_norm_constants(ds, l->o.norm, &c))) {
            rc = lfail(l, rc, "normalisation constants: %s", cxs_strerror(rc));
            goto fail;
        }
        if ((e = be->dev_alloc((void **)&l->d_mean, nb)) ||
            (e = be->dev_alloc((void **)&l->d_scale, nb)) ||
            (e = be->copy_h2d(l->d_mean, c, nb, l->work)) ||
            (e = be->copy_h2d(l->d_scale, c + l->D, nb, l->work)) ||
            (e = be->stream_sync(l->work))) {
            free(c);
            rc = dfail(l, e, "upload of the normalisation constants");
            goto fail;
        }
        free(c);
    }
    if (l->mode == CXS_GPU_STREAM) {
        rc = stream_setup(l);
    } else if (l->mode == CXS_GPU_RESIDENT) {
        if (!(rc = ring_alloc(l, 8))) rc = resident_setup(l);
        l->info.device_bytes += ring_bytes(l, 8);
    } else {
        if (!(rc = ring_alloc(l, sizeof(cxs_x_desc)))) rc = pool_setup(l);
        l->info.device_bytes += ring_bytes(l, sizeof(cxs_x_desc));
    }
    if (rc) goto fail;
    *out = l;
    return 0;
fail:
    cxs_diagf(diag, rc, "%s", l->err);
    cxs_gpu_loader_free(l);
    return rc;
}

int cxs_gpu_loader_next(cxs_gpu_loader *l, void *stream, const cxs_gpu_batch **batch) {
    if (!l || !batch) return CXS_E_INVALID;
    if (l->rc) return l->rc;
    /* the CUDA runtime's current device is per thread: the caller's thread
     * may not be the one that created the loader */
    l->be->set_device(l->dev);
    gslot *c = NULL;
    int rc;
    if (l->mode == CXS_GPU_STREAM) {
        if ((rc = stream_next(l, stream, &c))) return l->rc = rc;
    } else {
        if (l->handed) {
            int e = l->be->event_record(l->handed->ev_consumed, stream);
            if (e) return l->rc = dfail(l, e, "event_record");
            l->handed = NULL;
        }
        int (*launch)(cxs_gpu_loader *, gslot *) =
            l->mode == CXS_GPU_RESIDENT ? resident_launch : pool_launch;
        if (!l->primed) {
            if ((rc = launch(l, &l->slot[l->cur % NSLOT]))) return l->rc = rc;
            l->primed = 1;
        }
        c = &l->slot[l->cur % NSLOT];
        if (c->n) {
            /* the next batch is enqueued before this one is handed out, so
             * its expansion overlaps the caller's work on this one */
            l->cur++;
            if ((rc = launch(l, &l->slot[l->cur % NSLOT]))) return l->rc = rc;
        }
    }
    l->last_stream = stream;
    if (!c->n) {
        *batch = NULL;
        return 0;
    }
    int e = l->be->stream_wait(stream, c->ev_ready);
    if (e) return l->rc = dfail(l, e, "stream_wait");
    l->handed = c;
    l->batch.x = c->d_x;
    l->batch.y = c->d_y;
    l->batch.frames = c->frames;
    l->batch.n = c->n;
    l->batch.index = c->index;
    l->batch.position = c->position;
    *batch = &l->batch;
    return 0;
}

int cxs_gpu_loader_reset(cxs_gpu_loader *l, uint64_t epoch, uint64_t start) {
    if (!l) return CXS_E_INVALID;
    if (l->mode == CXS_GPU_POOL && start > pool_length(l->ds, cxs_sampler_options(l->sampler)))
        return CXS_E_INVALID;
    l->be->set_device(l->dev);
    l->rc = 0;
    l->err[0] = 0;
    l->epoch = epoch, l->pos = start, l->index = 0;
    if (l->handed) { /* the caller's work on it may still be queued */
        int e = l->be->event_record(l->handed->ev_consumed, l->last_stream);
        if (e) return l->rc = dfail(l, e, "event_record");
        l->handed = NULL;
    }
    if (l->mode == CXS_GPU_STREAM) {
        stream_stop(l);
        int rc = stream_start(l);
        return rc ? (l->rc = rc) : 0;
    }
    /* nothing of the old epoch may still run when slots are refilled */
    int e = l->be->stream_sync(l->work);
    if (e) return l->rc = dfail(l, e, "stream_sync");
    l->cur = 0, l->primed = 0;
    if (l->mode == CXS_GPU_POOL) {
        pool_stop(l);
        int rc = pool_start(l);
        if (rc) return l->rc = rc;
    }
    return 0;
}

void cxs_gpu_loader_describe(const cxs_gpu_loader *l, cxs_gpu_loader_info *info) {
    if (!l || !info) return;
    *info = l->info;
    info->uploaded_bytes = __atomic_load_n(&l->uploaded, __ATOMIC_RELAXED);
    if (l->mode == CXS_GPU_POOL && l->p.plan && l->p.plan->nblocks)
        info->pool_utterances = l->ds->meta.num_utterances / l->p.plan->nblocks;
}

int cxs_gpu_loader_download(cxs_gpu_loader *l, void *stream, const void *src, void *dst,
                            size_t n) {
    if (!l || (n && (!src || !dst))) return CXS_E_INVALID;
    int e = l->be->copy_d2h_sync(dst, src, n, stream);
    return e ? dfail(l, e, "download") : 0;
}

const char *cxs_gpu_loader_error(const cxs_gpu_loader *l) { return l ? l->err : ""; }
