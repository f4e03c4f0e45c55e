/* warm.c - cxs_memory_probe() and cxs_dataset_warm(): how much memory the
 * page cache may use here, and pulling a dataset into it sequentially, in
 * the calling thread or in one of its own (cxs_warm_start). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#include "ctxshard.h"
#include "dataset_internal.h"
#include "hooks.h"
#include "size.h"

/* pread in blocks of 64 MiB.  bench/warm_methods.c on a cold 906 MB
 * dataset (median of 3, page cache dropped before each run): pread 239 MB/s
 * at 1 MiB, 375 at 8 MiB, 522 at 64 MiB.  readahead(2) and MADV_WILLNEED
 * return before the kernel has read (0.3-52% resident when they return), so
 * their progress is not bytes read and their errors are lost; pread's are
 * neither.  The buffer is freed when warming ends. */
#define WARM_BLOCK (64u << 20)

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Value of "Key:   123 kB" in /proc/meminfo, in bytes; 0 when absent. */
static int meminfo_available(uint64_t *out) {
    FILE *f = fopen("/proc/meminfo", "re");
    if (!f) return -errno;
    char line[256];
    int rc = -ENOENT;
    while (fgets(line, sizeof line, f)) {
        unsigned long long kb;
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
            *out = (uint64_t)kb * 1024;
            rc = 0;
            break;
        }
    }
    fclose(f);
    return rc;
}

/* First unsigned number of a file ("max" and unreadable files: -1). */
static int read_u64_file(const char *path, uint64_t *out) {
    FILE *f = fopen(path, "re");
    if (!f) return -1;
    unsigned long long v;
    int ok = fscanf(f, "%llu", &v) == 1;
    fclose(f);
    if (!ok) return -1;
    *out = v;
    return 0;
}

/* "key value" in a memory.stat file. */
static uint64_t stat_field(const char *path, const char *key) {
    FILE *f = fopen(path, "re");
    if (!f) return 0;
    char name[128];
    unsigned long long v;
    uint64_t r = 0;
    while (fscanf(f, "%127s %llu", name, &v) == 2)
        if (!strcmp(name, key)) {
            r = v;
            break;
        }
    fclose(f);
    return r;
}

/* The tightest limit of the memory cgroup this process is in and of its
 * ancestors (limits nest), and what is left under it: the limit minus the
 * memory in use that is not page cache (the cache is reclaimed first, so it
 * is room a dataset can take).  v2: /sys/fs/cgroup/<path>/memory.max; v1:
 * /sys/fs/cgroup/memory/<path>/memory.limit_in_bytes.  *limit stays 0 when
 * there is no limit (or no cgroup file system). */
static void cgroup_memory(uint64_t *limit, uint64_t *avail) {
    FILE *f = fopen("/proc/self/cgroup", "re");
    if (!f) return;
    char line[4096], v2[4096] = "", v1[4096] = "";
    int have_v2 = 0, have_v1 = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        *c1 = *c2 = 0;
        if (!strcmp(line, "0") && c1[1] == 0) {
            snprintf(v2, sizeof v2, "%s", c2 + 1);
            have_v2 = 1;
        } else {
            /* v1: a comma-separated controller list containing "memory". */
            for (char *tok = c1 + 1; tok && *tok;) {
                char *comma = strchr(tok, ',');
                size_t len = comma ? (size_t)(comma - tok) : strlen(tok);
                if (len == 6 && !strncmp(tok, "memory", 6)) {
                    snprintf(v1, sizeof v1, "%s", c2 + 1);
                    have_v1 = 1;
                }
                tok = comma ? comma + 1 : NULL;
            }
        }
    }
    fclose(f);
    const char *root = have_v1 ? "/sys/fs/cgroup/memory" : "/sys/fs/cgroup";
    char *dir = have_v1 ? v1 : v2;
    if (!have_v1 && !have_v2) return;
    char path[4200];
    /* Walk from the process's own cgroup up to the root. */
    for (;;) {
        uint64_t lim, usage, cache;
        snprintf(path, sizeof path, "%s%s/%s", root, dir,
                 have_v1 ? "memory.limit_in_bytes" : "memory.max");
        /* v1 writes "no limit" as a huge page-rounded number. */
        if (!read_u64_file(path, &lim) && lim < (1ull << 60)) {
            snprintf(path, sizeof path, "%s%s/%s", root, dir,
                     have_v1 ? "memory.usage_in_bytes" : "memory.current");
            if (read_u64_file(path, &usage)) usage = 0;
            snprintf(path, sizeof path, "%s%s/memory.stat", root, dir);
            cache = stat_field(path, have_v1 ? "total_cache" : "file");
            uint64_t used = usage > cache ? usage - cache : 0;
            uint64_t left = lim > used ? lim - used : 0;
            if (!*limit || lim < *limit) *limit = lim;
            if (!*avail || left < *avail) *avail = left;
        }
        char *slash = strrchr(dir, '/');
        if (!slash || !dir[0] || (slash == dir && !dir[1])) break;
        *slash = 0;
        if (!dir[0]) {
            /* The root cgroup itself has no limit files worth reading. */
            break;
        }
    }
}

int cxs_memory_probe(cxs_memory *out, cxs_diag *d) {
    if (!out) return CXS_E_INVALID;
    cxs_memory m;
    memset(&m, 0, sizeof m);
    const char *env = getenv("CTXSHARD_MEMORY_AVAILABLE");
    if (env && *env) {
        if (cxs_size_parse(env, &m.available))
            return cxs_diagf(d, CXS_E_INVALID,
                             "CTXSHARD_MEMORY_AVAILABLE: '%s' is not a size (bytes, or with "
                             "a K, M, G or T suffix)", env);
        m.from_env = 1;
        *out = m;
        return 0;
    }
    int rc = meminfo_available(&m.mem_available);
    if (rc) return cxs_diagf(d, rc, "/proc/meminfo: no MemAvailable (%s)", cxs_strerror(rc));
    cgroup_memory(&m.cgroup_limit, &m.cgroup_available);
    m.available = m.mem_available;
    if (m.cgroup_limit && m.cgroup_available < m.available) m.available = m.cgroup_available;
    *out = m;
    return 0;
}

/* Bytes of the dataset's files already in the page cache (mincore over the
 * mappings open made; no page is touched). */
static uint64_t resident_bytes(const cxs_dataset *ds) {
    long pg = sysconf(_SC_PAGESIZE);
    size_t page = pg > 0 ? (size_t)pg : 4096;
    enum { VEC = 1u << 16 };
    unsigned char *vec = malloc(VEC);
    if (!vec) return 0;
    uint64_t total = 0;
    uint32_t n = ds->single_shard ? 1 : ds->meta.num_shards;
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *map = ds->shards[i].map;
        uint64_t size = ds->shards[i].size;
        for (uint64_t off = 0; off < size; off += (uint64_t)VEC * page) {
            uint64_t len = size - off < (uint64_t)VEC * page ? size - off : (uint64_t)VEC * page;
            size_t pages = (size_t)((len + page - 1) / page);
            if (mincore((void *)(map + off), (size_t)len, vec)) break;
            for (size_t p = 0; p < pages; p++)
                if (vec[p] & 1) total += p + 1 == pages ? len - (uint64_t)p * page : page;
        }
    }
    free(vec);
    return total;
}

/* Whether every page of [p, p+len) is in the page cache. */
static int all_resident(const uint8_t *p, size_t len) {
    long pg = sysconf(_SC_PAGESIZE);
    size_t page = pg > 0 ? (size_t)pg : 4096;
    uintptr_t a = (uintptr_t)p & ~(uintptr_t)(page - 1); /* mincore wants it aligned */
    size_t pages = (size_t)(((uintptr_t)p + len - a + page - 1) / page);
    unsigned char small[4096], *vec = pages <= sizeof small ? small : malloc(pages);
    if (!vec) return 0;
    int all = !mincore((void *)a, pages * page, vec);
    for (size_t i = 0; all && i < pages; i++) all = vec[i] & 1;
    if (vec != small) free(vec);
    return all;
}

static void human(uint64_t b, char *buf, size_t n) {
    if (b >= (1ull << 30)) snprintf(buf, n, "%.2f GiB", (double)b / (1ull << 30));
    else snprintf(buf, n, "%.1f MiB", (double)b / (1ull << 20));
}

/* Format 1.3: the block sums of one shard, checked on the bytes warm
 * reads (its buffer, not the mapping: warming maps no page into this
 * process, so what it read stays evictable).  Per covered section, the
 * block being hashed (j) and whether its hash began at the block's start
 * (a range skipped as cached leaves the blocks it touches unchecked). */
typedef struct warm_sums {
    uint32_t n;
    XXH3_state_t *st[CXS_BLOCKSUMS_MAX];
    uint64_t j[CXS_BLOCKSUMS_MAX];
    int whole[CXS_BLOCKSUMS_MAX];
} warm_sums;

static void sums_free(warm_sums *w) {
    for (uint32_t k = 0; k < w->n; k++) XXH3_freeState(w->st[k]);
    w->n = 0;
}

static int sums_init(warm_sums *w, const shard *sh) {
    memset(w, 0, sizeof *w);
    for (uint32_t k = 0; k < sh->bs.n; k++) {
        if (!(w->st[k] = XXH3_createState())) return sums_free(w), -ENOMEM;
        w->n++;
        w->j[k] = UINT64_MAX;
    }
    return 0;
}

/* Bytes [off, off + len) of shard s's file: buf, or NULL when skipped. */
static int sums_feed(warm_sums *w, const cxs_dataset *ds, uint32_t s, uint64_t off,
                     const uint8_t *buf, uint64_t len, cxs_diag *d) {
    const shard *sh = &ds->shards[s];
    for (uint32_t k = 0; k < w->n; k++) {
        const cxs_bsum_entry *e = &sh->bs.e[k];
        const uint64_t so = e->sec->offset, se = so + e->sec->length;
        uint64_t a = off > so ? off : so, b = off + len < se ? off + len : se;
        if (!buf) {
            if (a < b) w->j[k] = UINT64_MAX; /* the block here goes unchecked */
            continue;
        }
        while (a < b) {
            const uint64_t blk = (a - so) >> e->shift;
            uint64_t bs, be;
            cxs_bsum_block(e, blk, &bs, &be);
            if (blk != w->j[k]) { /* a new block: whole when it starts here */
                w->j[k] = blk;
                w->whole[k] = a == so + bs;
                XXH3_64bits_reset(w->st[k]);
            }
            const uint64_t end = so + be < b ? so + be : b;
            if (w->whole[k]) XXH3_64bits_update(w->st[k], buf + (a - off), (size_t)(end - a));
            a = end;
            if (a == so + be) {
                if (w->whole[k] &&
                    cxs_checksum_differs(XXH3_64bits_digest(w->st[k]), cxs_bsum_of(&sh->bs, e, blk)))
                    return cxs_block_failed(ds, s, e, blk, d);
                /* the block source need not hash it again (blocksrc.h) */
                if (w->whole[k] && sh->bc) cxs_bsrc_mark(&sh->bc[k], blk);
                w->j[k] = UINT64_MAX;
            }
        }
    }
    return 0;
}

int cxs_dataset_warm(const cxs_dataset *ds, uint32_t flags, cxs_progress_fn progress, void *user,
                     cxs_warm_result *result, cxs_diag *d) {
    if (!ds || (flags & ~(CXS_WARM_FORCE | CXS_WARM_SKIP_CACHED))) return CXS_E_INVALID;
    if (ds->stream) return cxs_streamed_refuse(ds, "warm", d);
    return cxs_warm_impl(ds, flags, 1, progress, user, result, d);
}

int cxs_warm_impl(const cxs_dataset *ds, uint32_t flags, int sums, cxs_progress_fn progress,
                  void *user, cxs_warm_result *result, cxs_diag *d) {
    cxs_warm_result r;
    memset(&r, 0, sizeof r);
    double t0 = now_s();
    r.total_bytes = ds->total_bytes;
    r.cached_before = resident_bytes(ds);
    int rc = cxs_memory_probe(&r.memory, d);
    if (rc) return rc;
    uint64_t need = r.total_bytes - (r.cached_before < r.total_bytes ? r.cached_before : r.total_bytes);
    if (need > r.memory.available) {
        r.fits = 0;
        if (!(flags & CXS_WARM_FORCE)) {
            char a[32], b[32], c[32];
            human(r.total_bytes, a, sizeof a);
            human(r.memory.available, b, sizeof b);
            human(r.memory.cgroup_limit, c, sizeof c);
            return cxs_diagf(d, -ENOMEM,
                             "%s: the dataset (%s, %s of it not cached) does not fit in the "
                             "memory available (%s%s%s%s): warming it would evict what it "
                             "read first.  Read it with the block sampler instead, which "
                             "keeps only a memory budget's worth of it in the cache "
                             "(Loader(shuffle=\"block\", memory=...), bench-read --sampler "
                             "block --memory SIZE)",
                             ds->manifest_path, a,
                             need == r.total_bytes ? "all" : "part",
                             b, r.memory.from_env ? ", CTXSHARD_MEMORY_AVAILABLE" : "",
                             r.memory.cgroup_limit && !r.memory.from_env
                                 ? ", memory cgroup limit " : "",
                             r.memory.cgroup_limit && !r.memory.from_env ? c : "");
        }
    } else {
        r.fits = 1;
    }
    uint8_t *buf = malloc(WARM_BLOCK);
    if (!buf) return -ENOMEM;
    uint64_t done = 0, nread = 0; /* covered (progress), read */
    uint32_t n = ds->single_shard ? 1 : ds->meta.num_shards;
    /* Each shard from start to end, then the manifest (small). */
    for (uint32_t i = 0; i <= n && !rc; i++) {
        const char *path = i == n ? ds->manifest_path : ds->shards[i].path;
        if (i == n && ds->single_shard) break;
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            int e = errno;
            rc = cxs_diagf(d, -e, "%s: %s", path, strerror(e));
            break;
        }
        /* Tell the kernel the whole file is read in order: a larger
         * read-ahead window keeps the disk busy between two preads. */
        (void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
        uint64_t size = i == n ? ds->size : ds->shards[i].size;
        warm_sums ws = {0};
        if (sums && i < n && ds->shards[i].bs.n && (rc = sums_init(&ws, &ds->shards[i]))) {
            close(fd);
            break;
        }
        for (uint64_t off = 0; off < size;) {
            size_t want = size - off < WARM_BLOCK ? (size_t)(size - off) : WARM_BLOCK;
            const uint8_t *map = i < n ? ds->shards[i].map : ds->map;
            if ((flags & CXS_WARM_SKIP_CACHED) && all_resident(map + off, want)) {
                sums_feed(&ws, ds, i, off, NULL, want, d);
                off += want;
                done += want;
                if (progress && progress(user, done, r.total_bytes)) {
                    rc = -ECANCELED;
                    break;
                }
                continue;
            }
            ssize_t got = pread(fd, buf, want, (off_t)off);
            if (got < 0 && errno == EINTR) continue;
            if (got <= 0) {
                int e = got < 0 ? errno : EIO;
                rc = cxs_diagf(d, got < 0 ? -e : CXS_E_TRUNCATED, "%s: read at offset %" PRIu64
                               " failed: %s", path, off, got < 0 ? strerror(e) : "file shrank");
                break;
            }
            if (ws.n && i < n && (rc = sums_feed(&ws, ds, i, off, buf, (uint64_t)got, d))) break;
            off += (uint64_t)got;
            done += (uint64_t)got;
            nread += (uint64_t)got;
            if (progress && progress(user, done, r.total_bytes)) {
                rc = -ECANCELED;
                break;
            }
        }
        sums_free(&ws);
        close(fd);
    }
    free(buf);
    r.bytes_read = nread;
    r.seconds = now_s() - t0;
    if (rc == -ECANCELED) return rc;
    if (rc) return rc;
    if (result) *result = r;
    return 0;
}

/* ---- a warm-up in a thread of its own --------------------------------- */

struct cxs_warm {
    const cxs_dataset *ds;
    uint32_t flags;
    pthread_t th;
    _Atomic int stop;               /* set: the next progress call cancels */
    _Atomic int running;            /* 0 once the thread's call returned */
    _Atomic uint64_t done, total;   /* its progress, for cxs_warm_poll */
    pid_t pid;                      /* the process its thread runs in */
    int rc;                         /* written by the thread before running = 0 */
    cxs_warm_result result;
    cxs_diag diag;
};

static int warm_tick(void *user, uint64_t done, uint64_t total) {
    cxs_warm *w = user;
    atomic_store_explicit(&w->done, done, memory_order_relaxed);
    atomic_store_explicit(&w->total, total, memory_order_relaxed);
    return atomic_load_explicit(&w->stop, memory_order_relaxed);
}

static void *warm_main(void *p) {
    cxs_warm *w = p;
    /* Background work: the loaders' threads go first (on a small machine a
     * warm-up at their priority delays the first batches).  On Linux a
     * thread's nice value is its own; where it is not, nothing changes. */
    (void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 19);
    w->rc = cxs_dataset_warm(w->ds, w->flags, warm_tick, w, &w->result, &w->diag);
    if (w->rc == -ECANCELED)
        cxs_diagf(&w->diag, -ECANCELED, "%s: warming stopped", w->ds->manifest_path);
    atomic_store_explicit(&w->running, 0, memory_order_release);
    return NULL;
}

int cxs_warm_start(const cxs_dataset *ds, uint32_t flags, cxs_warm **out, cxs_diag *d) {
    if (!out) return cxs_diagf(d, CXS_E_INVALID, "cxs_warm_start: out is NULL");
    *out = NULL;
    if (!ds) return cxs_diagf(d, CXS_E_INVALID, "cxs_warm_start: the dataset is NULL");
    if (ds->stream) return cxs_streamed_refuse(ds, "warm", d);
    if (flags & ~(CXS_WARM_FORCE | CXS_WARM_SKIP_CACHED))
        return cxs_diagf(d, CXS_E_INVALID, "cxs_warm_start: unknown flags 0x%x",
                         (unsigned)(flags & ~(CXS_WARM_FORCE | CXS_WARM_SKIP_CACHED)));
    cxs_warm *w = calloc(1, sizeof *w);
    if (!w) return cxs_diagf(d, -ENOMEM, "%s: warm-up: out of memory", ds->manifest_path);
    w->ds = ds;
    w->flags = flags;
    w->pid = getpid();
    atomic_init(&w->stop, 0);
    atomic_init(&w->running, 1);
    atomic_init(&w->done, 0);
    atomic_init(&w->total, ds->total_bytes);
    int e = cxs_hook_thread_fails() ? EAGAIN : pthread_create(&w->th, NULL, warm_main, w);
    if (e) {
        free(w);
        return cxs_diagf(d, -e, "%s: warm-up: cannot start its thread: %s", ds->manifest_path,
                         strerror(e));
    }
    *out = w;
    return 0;
}

int cxs_warm_poll(const cxs_warm *w, uint64_t *done, uint64_t *total) {
    if (!w) return CXS_E_INVALID;
    if (done) *done = atomic_load_explicit(&w->done, memory_order_relaxed);
    if (total) *total = atomic_load_explicit(&w->total, memory_order_relaxed);
    if (w->pid != getpid()) return 0; /* a forked child: its thread is the parent's */
    return atomic_load_explicit(&((cxs_warm *)w)->running, memory_order_acquire);
}

int cxs_warm_finish(cxs_warm *w, int stop, cxs_warm_result *result, cxs_diag *d) {
    if (!w) return 0;
    if (w->pid != getpid()) { /* a forked child: no thread of its own to wait for */
        int rc = cxs_diagf(d, -ECHILD, "%s: this warm-up runs in the parent process (pid %ld), "
                           "not in this forked child", w->ds->manifest_path, (long)w->pid);
        free(w);
        return rc;
    }
    if (stop) atomic_store_explicit(&w->stop, 1, memory_order_relaxed);
    pthread_join(w->th, NULL);
    int rc = w->rc;
    if (rc && d) *d = w->diag;
    if (!rc && result) *result = w->result;
    free(w);
    return rc;
}
