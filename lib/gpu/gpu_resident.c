/* gpu_resident.c - the GPU loader's resident mode (ctxshard_gpu.h): the
 * feature sections, the utterance tables and the labels uploaded once (through
 * GPUDirect Storage, from the registered mapping, or staged), then each
 * batch sends its frame numbers and the kernel expands the windows. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/types.h>
#include <unistd.h>

#include "gpu_internal.h"

#define REG_PIECE (256ull << 20) /* one copy from a registered mapping */

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

/* CUfileDrvProps_t: its first members (nvfs), then what the loader
 * leaves unread; the library writes the whole of it. */
typedef struct gds_props {
    struct {
        unsigned major_version, minor_version;
        size_t poll_thresh_size, max_direct_io_size;
        unsigned dstatusflags, dcontrolflags;
    } nvfs;
    unsigned fflags, max_device_cache_size, per_buffer_cache_size, max_device_pinned_mem_size,
        max_batch_io_size, max_batch_io_timeout_msecs;
} gds_props;
#define GDS_ALLOW_COMPAT_MODE 1u /* CU_FILE_ALLOW_COMPAT_MODE, a bit of dcontrolflags */
#define GDS_PARAM_FORCE_COMPAT_MODE 2 /* CUFILE_PARAM_FORCE_COMPAT_MODE (CUFileBoolConfigParameter_t) */

typedef struct gds_lib {
    void *so;
    gds_error (*driver_open)(void);
    gds_error (*driver_close)(void);
    gds_error (*handle_register)(void **fh, gds_descr *d);
    void (*handle_deregister)(void *fh);
    ssize_t (*read)(void *fh, void *base, size_t size, off_t file_off, off_t buf_off);
    gds_error (*buf_register)(const void *base, size_t size, int flags); /* optional */
    gds_error (*buf_deregister)(const void *base);
    gds_error (*get_properties)(gds_props *p);          /* optional */
    gds_error (*get_param_bool)(int param, _Bool *value); /* optional (cuFile 1.14, CUDA 12.8) */
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
    *(void **)&g->buf_register = dlsym(g->so, "cuFileBufRegister");
    *(void **)&g->buf_deregister = dlsym(g->so, "cuFileBufDeregister");
    *(void **)&g->get_properties = dlsym(g->so, "cuFileDriverGetProperties");
    *(void **)&g->get_param_bool = dlsym(g->so, "cuFileGetParameterBool");
    if (!g->driver_open || !g->driver_close || !g->handle_register || !g->handle_deregister ||
        !g->read) {
        dlclose(g->so);
        g->so = NULL;
        return -1;
    }
    return 0;
}

/* The library is loaded and its driver opened once per process, and
 * neither is ever closed: cuFileDriverClose and dlclose would pull them
 * from under every other user in the process (another loader, the
 * application's own cuFile use). */
static gds_lib gds;
static int gds_loaded, gds_opened, gds_compat;
static pthread_once_t gds_once = PTHREAD_ONCE_INIT, gds_open_once = PTHREAD_ONCE_INIT;

static void gds_load_once(void) { gds_loaded = gds_load(&gds) == 0; }

#ifdef CXS_HAVE_CUDA
/* cuFile reads through host memory (its compatibility mode: POSIX reads,
 * then copies by the CUDA driver) when told to (force_compat_mode, or
 * CUFILE_FORCE_COMPAT_MODE for a library without cuFileGetParameterBool),
 * or when the nvidia-fs kernel driver is not loaded (its version reads 0)
 * and cufile.json (CUFILE_ENV_PATH_JSON, else /etc/cufile.json) allows the
 * mode, as it does by default.  cuFile may still fall back file by file
 * (a file system it does not support): what it reports is the most this
 * process can know without its statistics. */
static int gds_compat_mode(void) {
    _Bool force = 0;
    if (gds.get_param_bool) {
        if (gds.get_param_bool(GDS_PARAM_FORCE_COMPAT_MODE, &force).err == 0 && force) return 1;
    } else {
        const char *e = getenv("CUFILE_FORCE_COMPAT_MODE");
        if (e && !strcasecmp(e, "true")) return 1;
    }
    gds_props p;
    memset(&p, 0, sizeof p);
    if (!gds.get_properties || gds.get_properties(&p).err) return 0;
    return p.nvfs.major_version == 0 && (p.nvfs.dcontrolflags & (1u << GDS_ALLOW_COMPAT_MODE));
}

static void gds_open_driver(void) {
    gds_opened = gds.driver_open().err == 0;
    if (gds_opened) gds_compat = gds_compat_mode();
}
#endif

int gpu_gds_present(void) {
    pthread_once(&gds_once, gds_load_once);
    return gds_loaded;
}

/* What cuFile uploaded and how, after the mode's reason: GPUDirect
 * Storage, or its compatibility mode, which is a host read and a copy
 * (no faster than the other paths) and must not pass for the other. */
static void gds_describe(cxs_gpu_loader *l, uint32_t shards, uint64_t rows) {
    char *r = l->info.reason;
    size_t n = strlen(r);
    snprintf(r + n, sizeof l->info.reason - n, "; %u shards%s through %s", shards,
             rows ? " and part of the next" : "",
             gds_compat ? "cuFile compatibility mode (POSIX reads through the CUDA driver)"
                        : "GPUDirect Storage");
}

/* Whole FEATURES sections straight from the files into device memory
 * through cuFile (GPUDirect Storage, or its compatibility mode where the
 * platform lacks it: cuFile decides).  Returns the shard it stopped in
 * (all of them: done) and in *row the rows of that shard it uploaded
 * before a read failed; the other paths upload the rest from there,
 * never again what this one did. */
static uint32_t gds_upload(cxs_gpu_loader *l, const uint64_t *srow, uint64_t *row) {
#ifdef CXS_HAVE_CUDA
    const cxs_dataset *ds = l->ds;
    *row = 0;
    if (cxs_compressed(ds) || l->be != &cxs_gpu_cuda || !gpu_gds_present()) return 0;
    pthread_once(&gds_open_once, gds_open_driver);
    if (!gds_opened) return 0;
    const gds_lib *gp = &gds, g = *gp;
    const uint64_t total = srow[ds->meta.num_shards] * ds->row_bytes;
    /* the device buffer registered: cuFile reads into it directly rather
     * than through its own bounce buffers */
    int breg = g.buf_register && g.buf_deregister &&
               g.buf_register(l->rs.d_feat, (size_t)(total ? total : 1), 0).err == 0;
    gds_error e;
    uint32_t whole = 0;
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
        uint64_t off = (uint64_t)(sh->features - sh->map), len = gpu_shard_rows(sh) * rb, done = 0;
        while (done < len) {
            size_t m = len - done < (1ull << 30) ? (size_t)(len - done) : (1u << 30);
            ssize_t r = g.read(fh, l->rs.d_feat, m, (off_t)(off + done), (off_t)(srow[s] * rb + done));
            if (r <= 0) {
                ok = 0;
                break;
            }
            done += (uint64_t)r;
        }
        __atomic_add_fetch(&l->uploaded, done, __ATOMIC_RELAXED);
        g.handle_deregister(fh);
        close(fd);
        if (ok) whole = s + 1;
        else *row = done / rb; /* whole rows arrived: the rest goes on from the next */
    }
    if (breg) g.buf_deregister(l->rs.d_feat);
    return whole;
#else
    (void)l, (void)srow;
    *row = 0;
    return 0;
#endif
}

/* Copy every shard's FEATURES section from the mapping itself, pinned in
 * place (read-only): no staging copy on the CPU.  Registered in pieces of
 * REG_SPAN, at most REG_LIVE at a time: registering a piece faults its
 * pages in from the disk while the copy engine sends the piece before,
 * and the whole dataset is never locked in memory at once.  A piece is
 * unregistered once its copies are done (its event).  -1 when the device
 * or the mapping does not allow it (nothing left registered): the staged
 * path uploads the rest, from row *rrow of shard *rs on (what was copied
 * before the refusal is not sent again, but for the part of one row a
 * piece's page-aligned end may cut).  A registration is refused when
 * another holds part of the range (cudaErrorHostMemoryAlreadyRegistered:
 * the program pinned a view of the mapping itself), or for lack of
 * lockable memory, at any piece. */
#define REG_SPAN (1ull << 30)
#define REG_LIVE 2

typedef struct reg_piece {
    void *base;
    void *ev;
} reg_piece;

static int reg_retire(cxs_gpu_loader *l, reg_piece *p) {
    int e = p->base ? l->be->event_sync(p->ev) : 0;
    if (p->base) l->be->host_unregister(p->base);
    p->base = NULL;
    return e ? GPU_DEVICE_FAIL(l, "", e, "event_sync") : 0;
}

static int registered_upload(cxs_gpu_loader *l, const uint64_t *srow, uint32_t s0, uint64_t r0,
                             uint32_t *rs, uint64_t *rrow) {
    const cxs_dataset *ds = l->ds;
    int yes = 0;
    if (cxs_compressed(ds) || (l->o.paths & CXS_GPU_NO_REGISTER) ||
        l->be->register_supported(l->dev, &yes) || !yes)
        return -1;
    const uint32_t S = ds->meta.num_shards;
    const uint64_t rb = ds->row_bytes, page = (uint64_t)sysconf(_SC_PAGESIZE);
    *rs = s0, *rrow = r0;
    reg_piece live[REG_LIVE];
    memset(live, 0, sizeof live);
    int rc = 0;
    for (int i = 0; i < REG_LIVE && !rc; i++)
        if (l->be->event_create(&live[i].ev, GPU_EVENT_BLOCKING)) rc = -1;
    unsigned next = 0;
    for (uint32_t s = s0; s < S && !rc; s++) {
        const shard *sh = &ds->shards[s];
        const uint64_t a = (uint64_t)(sh->features - sh->map), len = gpu_shard_rows(sh) * rb;
        for (uint64_t off = s == s0 ? r0 * rb : 0; off < len && !rc;) {
            /* the piece [off, end) of the section, its pages [p0, p1) */
            uint64_t end = a + off + REG_SPAN;
            end = end - end % page;
            if (end <= a + off || end > a + len) end = a + len;
            const uint64_t p0 = (a + off) - (a + off) % page, p1 = (end + page - 1) / page * page;
            reg_piece *p = &live[next];
            if ((rc = reg_retire(l, p))) break; /* its copies are done: pages free again */
            if (l->be->host_register((void *)(sh->map + p0), (size_t)(p1 - p0))) {
                /* refused: the staged path goes on from here */
                *rs = s, *rrow = off / rb;
                rc = -1;
                break;
            }
            p->base = (void *)(sh->map + p0);
            for (uint64_t d = off; d < end - a && !rc; d += REG_PIECE) {
                size_t m = end - a - d < REG_PIECE ? (size_t)(end - a - d) : (size_t)REG_PIECE;
                int e = l->be->copy_h2d(l->rs.d_feat + srow[s] * rb + d, sh->features + d, m,
                                        l->copy);
                if (e) rc = GPU_DEVICE_FAIL(l, "", e, "copy from the registered mapping");
                else __atomic_add_fetch(&l->uploaded, m, __ATOMIC_RELAXED);
            }
            int e = rc ? 0 : l->be->event_record(p->ev, l->copy);
            if (e) rc = GPU_DEVICE_FAIL(l, "", e, "event_record");
            off = end - a;
            next = (next + 1) % REG_LIVE;
        }
    }
    if (!rc || rc == -1) {
        /* (a refusal: what was copied must have run before its pieces
         * are unregistered below) */
        int e = l->be->stream_sync(l->copy);
        if (e) rc = GPU_DEVICE_FAIL(l, "", e, "stream_sync");
    } else {
        l->be->stream_sync(l->copy); /* nothing queued may read a piece unregistered below */
    }
    for (int i = 0; i < REG_LIVE; i++) {
        if (live[i].base && live[i].ev) {
            int e = reg_retire(l, &live[i]);
            if (e && !rc) rc = e;
        }
        if (live[i].ev) l->be->event_destroy(live[i].ev);
    }
    return rc;
}

/* The device's utterance tables from the shards' INDEX, read in place (an
 * O(#utterances) pass over the mapping, run in a recovery region) and
 * written straight into the staging buffers: d_cum gets every utterance's
 * first frame and the frame count (U + 1 entries), d_urow every
 * utterance's device row of its frame 0 (U entries), with no table of the
 * host's own. */
typedef struct tables_arg {
    cxs_gpu_loader *l;
    uploader *up;
    const uint64_t *srow;
} tables_arg;

/* Entries lu .. nu-1 of shard s's table into d (the whole dataset's),
 * rows: the utterances' rows, else their first frames. */
static int stream_table(tables_arg *a, uint64_t *d, uint32_t s, int rows) {
    const cxs_dataset *ds = a->l->ds;
    const shard *sh = &ds->shards[s];
    const uint64_t nu = sh->meta.num_utterances, G = ds->meta.guard;
    for (uint64_t lu = 0; lu < nu;) {
        uint8_t *p;
        size_t avail;
        int rc = gpu_up_space(a->l, a->up, (uint8_t *)(d + sh->u_start + lu), &p, &avail);
        if (rc) return rc;
        uint64_t m = avail / 8 < nu - lu ? avail / 8 : nu - lu;
        if (!m) {
            if ((rc = gpu_up_flush(a->l, a->up))) return rc;
            continue;
        }
        for (uint64_t j = 0; j < m; j++) {
            const uint64_t x = cxs_index_at(sh, lu + j);
            const uint64_t v = rows ? a->srow[s] + G * (lu + j + 1) + x : sh->f_start + x;
            memcpy(p + 8 * j, &v, 8);
        }
        gpu_up_commit(a->up, (size_t)m * 8);
        lu += m;
    }
    return 0;
}

static int upload_tables(void *arg) {
    tables_arg *a = arg;
    cxs_gpu_loader *l = a->l;
    const cxs_dataset *ds = l->ds;
    int rc;
    for (uint32_t s = 0; s < ds->meta.num_shards; s++)
        if ((rc = stream_table(a, l->rs.d_cum, s, 0))) return rc;
    const uint64_t F = ds->meta.num_frames;
    if ((rc = gpu_up_write(l, a->up, (uint8_t *)(l->rs.d_cum + ds->meta.num_utterances), &F, 8)))
        return rc;
    for (uint32_t s = 0; s < ds->meta.num_shards; s++)
        if ((rc = stream_table(a, l->rs.d_urow, s, 1))) return rc;
    return 0;
}

/* Every frame's label, widened to 16 bits, through the staging buffers:
 * reads LABELS from the mapping, run in a recovery region. */
typedef struct labels_arg {
    cxs_gpu_loader *l;
    uploader *up;
} labels_arg;

static int upload_labels(void *arg) {
    labels_arg *a = arg;
    cxs_gpu_loader *l = a->l;
    const cxs_dataset *ds = l->ds;
    int rc;
    for (uint32_t s = 0; s < ds->meta.num_shards; s++) {
        const shard *sh = &ds->shards[s];
        const uint64_t n = sh->meta.num_frames;
        uint8_t *dst = (uint8_t *)(l->rs.d_lab + sh->f_start);
        for (uint64_t i = 0; i < n;) {
            uint8_t *p;
            size_t avail;
            if ((rc = gpu_up_space(l, a->up, dst + i * 2, &p, &avail))) return rc;
            uint64_t m = avail / 2 < n - i ? avail / 2 : n - i;
            if (!m) {
                if ((rc = gpu_up_flush(l, a->up))) return rc;
                continue;
            }
            uint16_t *q = (uint16_t *)(void *)p;
            for (uint64_t j = 0; j < m; j++)
                q[j] = cxs_shard_label(sh, i + j);
            gpu_up_commit(a->up, (size_t)m * 2);
            i += m;
        }
    }
    return 0;
}

/* A coded dtype's headers (QHEADERS of every shard, in order), each
 * checked as the CPU checks it at its first use (cxs_qheaders_check),
 * since the kernel decodes what it is given: reads the mapping, run in a
 * recovery region. */
static int upload_headers(void *arg) {
    labels_arg *a = arg;
    cxs_gpu_loader *l = a->l;
    const cxs_dataset *ds = l->ds;
    const uint64_t H = gpu_header_bytes(ds);
    int rc;
    for (uint32_t s = 0; s < ds->meta.num_shards; s++) {
        const shard *sh = &ds->shards[s];
        cxs_diag hd;
        if ((rc = cxs_qheaders_check(ds, s, &hd))) return gpu_fail_from(l, rc, "", &hd);
        if ((rc = gpu_up_write(l, a->up, l->rs.d_qh + sh->u_start * H, sh->qheaders,
                               (size_t)(sh->meta.num_utterances * H))))
            return rc;
    }
    return 0;
}

int gpu_headers_setup(cxs_gpu_loader *l) {
    const cxs_dataset *ds = l->ds;
    const uint64_t H = gpu_header_bytes(ds), U = ds->meta.num_utterances;
    if (!H) return 0;
    int e = l->be->dev_alloc((void **)&l->rs.d_qh, (size_t)(U ? U * H : 1));
    if (e) return GPU_DEVICE_FAIL(l, "", e, "device allocation of the headers");
    l->info.device_bytes += U * H;
    uploader up;
    /* the fewest staging buffers: the table is small next to the features */
    int rc = gpu_up_init(l, &up, l->copy, 2, (size_t)H);
    labels_arg ha = {l, &up};
    if (!rc) rc = gpu_mapped(l, "headers upload", upload_headers, &ha);
    if (!rc) rc = gpu_up_finish(l, &up);
    gpu_up_free(l, &up);
    return rc;
}

void gpu_headers_release(cxs_gpu_loader *l) {
    if (l->rs.d_qh) l->be->dev_free(l->rs.d_qh);
    l->rs.d_qh = NULL;
}

int gpu_resident_upload(cxs_gpu_loader *l) {
    const cxs_dataset *ds = l->ds;
    const uint32_t S = ds->meta.num_shards;
    const uint64_t U = ds->meta.num_utterances, F = ds->meta.num_frames, rb = ds->row_bytes;
    const uint64_t H = gpu_header_bytes(ds);
    /* the device gets the utterances' first frames and rows (U + 1 and U
     * entries), made from the shards' INDEX, checked whole first */
    uint64_t *srow = malloc((S + 1) * sizeof *srow);
    zreader zr = {0};
    uploader up;
    memset(&up, 0, sizeof up);
    int rc = 0;
    if (!srow) {
        rc = gpu_fail(l, -ENOMEM, "out of memory");
        goto out;
    }
    cxs_diag id;
    /* every block about to be copied checked against its sum (blocksrc.h) */
    if ((rc = cxs_index_check_all(ds, &id)) || (rc = cxs_bsrc_all(ds, l->o.labels, &id))) {
        rc = gpu_fail_from(l, rc, "", &id);
        goto out;
    }
    srow[0] = 0;
    for (uint32_t s = 0; s < S; s++) srow[s + 1] = srow[s] + gpu_shard_rows(&ds->shards[s]);
    int e;
    if ((e = l->be->dev_alloc((void **)&l->rs.d_feat, (size_t)(srow[S] * rb))) ||
        (e = l->be->dev_alloc((void **)&l->rs.d_cum, (size_t)(U + 1) * 8)) ||
        (e = l->be->dev_alloc((void **)&l->rs.d_urow, (size_t)(U ? U : 1) * 8)) ||
        (l->o.labels && (e = l->be->dev_alloc((void **)&l->rs.d_lab, (size_t)(F ? F : 1) * 2))) ||
        (H && (e = l->be->dev_alloc((void **)&l->rs.d_qh, (size_t)(U ? U * H : 1))))) {
        rc = GPU_DEVICE_FAIL(l, "", e, "device allocation of the resident dataset");
        goto out;
    }
    l->info.device_bytes += srow[S] * rb + (2 * U + 1) * 8 + U * H + (l->o.labels ? F * 2 : 0);
    double t0 = gpu_now();
    if ((rc = gpu_up_init(l, &up, l->copy, l->o.slots, rb))) goto out;
    /* the tables first: a shard truncated since open is met here, in
     * INDEX at its end, before any copy from its mapping */
    tables_arg ta = {l, &up, srow};
    if ((rc = gpu_mapped(l, "resident upload", upload_tables, &ta))) goto out;
    /* cuFile first when asked; what it did not upload whole, the other paths */
    uint64_t g0 = 0;
    const uint32_t s0 = (l->o.paths & CXS_GPU_GDS) ? gds_upload(l, srow, &g0) : 0;
    uint32_t rs = s0;
    uint64_t rrow = g0;
    if (s0 || g0) gds_describe(l, s0, g0);
    if (s0 == S && S) {
        l->info.upload_path = 2;
    } else if ((rc = registered_upload(l, srow, s0, g0, &rs, &rrow)) == 0) {
        l->info.upload_path = 1;
    } else if (rc != -1) {
        goto out;
    } else {
        /* the staged path, for what the registered one did not upload */
        rc = 0;
        l->info.upload_path = 0;
        for (uint32_t s = rs; s < S && !rc; s++) {
            const uint64_t r0 = s == rs ? rrow : 0;
            rc = gpu_up_rows(l, &up, &zr, s, r0, gpu_shard_rows(&ds->shards[s]) - r0,
                             l->rs.d_feat + (srow[s] + r0) * rb);
        }
        if (rc) goto out;
    }
    if (l->o.labels) {
        labels_arg la = {l, &up};
        if ((rc = gpu_mapped(l, "resident upload", upload_labels, &la))) goto out;
    }
    if (H) {
        labels_arg ha = {l, &up};
        if ((rc = gpu_mapped(l, "resident upload", upload_headers, &ha))) goto out;
    }
    if ((rc = gpu_up_finish(l, &up))) goto out;
    l->info.upload_seconds = gpu_now() - t0;
out:
    gpu_up_free(l, &up);
    cxs_zreader_free(&zr);
    free(srow);
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
    if (rc) return gpu_fail(l, rc, "sampler: %s", cxs_strerror(rc));
    if (s->used) BE(l, l->be->stream_wait(l->work, s->ev_consumed));
    BE(l, l->be->copy_h2d(s->d_in, s->h_in, (size_t)n * 8, l->work));
    gpu_expand_args a;
    gpu_expand_init(l, s, &a);
    a.frames = s->d_in;
    a.feat = l->rs.d_feat;
    a.cum = l->rs.d_cum, a.urow = l->rs.d_urow, a.num_utts = l->ds->meta.num_utterances;
    a.lab = l->rs.d_lab;
    a.qh = l->rs.d_qh, a.hbytes = gpu_header_bytes(l->ds);
    BE(l, gpu_launch_expand(l, &a, l->work));
    BE(l, l->be->event_record(s->ev_ready, l->work));
    s->used = 1;
    l->pos += n;
    l->index++;
    return 0;
}

static int resident_setup(cxs_gpu_loader *l) {
    int rc = gpu_ring_alloc(l, 8);
    if (!rc) rc = gpu_resident_upload(l);
    l->info.device_bytes += gpu_ring_bytes(l, 8);
    return rc;
}

void gpu_resident_release(cxs_gpu_loader *l) {
    void *dev[] = {l->rs.d_feat, l->rs.d_cum, l->rs.d_urow, l->rs.d_lab, l->rs.d_qh};
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++)
        if (dev[i]) l->be->dev_free(dev[i]);
    memset(&l->rs, 0, sizeof l->rs);
}

const gpu_mode cxs_gpu_resident_mode = {
    .setup = resident_setup,
    .next = gpu_ring_next,
    .slot_new = gpu_ring_slot_new,
    .slot_bytes = gpu_ring_slot_bytes,
    .launch = resident_launch,
    .start = gpu_ring_restart,
    .release = gpu_resident_release,
};
