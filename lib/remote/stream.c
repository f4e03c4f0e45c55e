/* stream.c - a dataset at a URL read in block order through a cache that
 * need not hold it whole (remote.h, "streaming").
 *
 * The entry's shard files are sparse, of the shards' sizes: everything but
 * FEATURES came at open (cache.c, stream_setup); FEATURES arrives sum
 * block by sum block (BLOCKSUMS, format 1.3) as a loader's helper asks for
 * the blocks of its schedule.  NAME.have, beside each shard file, holds a
 * byte per sum block, 1 once the block is in the file and has matched its
 * sum; every process of the node maps it shared.
 *
 * Locks are fcntl open-file-description locks on the entry's stream.locks
 * (an empty file), at offsets lock_at(shard, kind, j): sum block j of a
 * shard has a use lock and a fetch lock.
 *   - A reader takes the use locks of a range shared before it looks at
 *     the have bytes and keeps them while it may read the bytes.
 *   - A block not there is fetched under its fetch lock, taken
 *     exclusively in ascending order, so that one process of the node
 *     downloads it and the others, waiting, then find it there.  No one
 *     waits for a lock while holding a fetch lock above it, and readers'
 *     shared locks never wait on each other: no cycle.
 *   - A block is evicted (have byte cleared, hole punched) only under its
 *     use lock exclusive, taken without waiting: never under a reader.
 * Locks of one description do not exclude each other, so each user (a
 * loader's helper) opens its own, and counts its holds per block: a block
 * at the edge of two of its ranges is held once. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#include "cxs_format.h"
#include "cxs_le.h"
#include "http.h"
#include "remote.h"
#include "workq.h"

#define USE 0u
#define FETCH 1u
#define BLOCK_BITS 28 /* sum blocks a shard may have: 2^28 (16 TiB of 64 KiB blocks) */
#define PIECE (8u << 20) /* bytes of one range request */
#define PIECES_AT_ONCE 4u
#define CONNS_KEPT 16u /* a loader's helper, its fetch-ahead and workers: 4 requests each */

typedef struct sshard {
    char name[64];
    uint64_t off, len;    /* FEATURES in the file */
    uint32_t shift;
    const uint8_t *sums;  /* nsum u64 LE */
    uint64_t nsum;
    _Atomic uint8_t *have; /* the shared map of NAME.have (nsum bytes), or NULL */
    _Atomic uint32_t *used; /* this process's: when each block was last held (clock) */
    _Atomic uint64_t from;  /* this process's: blocks below this were there when looked at */
} sshard;

struct cxs_stream {
    char url[2048], dir[4096], root[4096], key[40];
    uint64_t limit;
    uint32_t n;
    sshard *sh;
    _Atomic uint64_t fetched;
    _Atomic uint32_t clock; /* counts holds: the blocks' use stamps (sshard.used) */
    struct cxs_http_conns *conns; /* every user's requests' connections, kept */
};

struct cxs_stream_user {
    cxs_stream *st;
    int fd;         /* this user's own description of stream.locks, or -1 */
    uint16_t **ref; /* per shard: holds per sum block, or NULL */
    cxs_origin o;   /* its own: its transfers' cancel flag */
    _Atomic int cancel;
};

int cxs_stream_new(const char *url, const cxs_fetch *f, uint32_t n, cxs_stream **out,
                   cxs_diag *d) {
    cxs_stream *st = calloc(1, sizeof *st);
    if (!st || !(st->sh = calloc(n ? n : 1, sizeof *st->sh))) {
        free(st);
        return cxs_diagf(d, -ENOMEM, "%s: out of memory", url);
    }
    snprintf(st->url, sizeof st->url, "%s", url);
    snprintf(st->dir, sizeof st->dir, "%s", f->local);
    snprintf(st->root, sizeof st->root, "%s", f->root);
    snprintf(st->key, sizeof st->key, "%s", f->key);
    st->limit = f->limit;
    st->n = n;
    atomic_init(&st->fetched, 0);
    atomic_init(&st->clock, 0);
    st->conns = cxs_http_conns_new(CONNS_KEPT); /* (NULL: a connection a request) */
    *out = st;
    return 0;
}

int cxs_stream_shard(cxs_stream *st, uint32_t s, const char *name, uint64_t off, uint64_t len,
                     uint32_t shift, const uint8_t *sums, uint64_t nsum, cxs_diag *d) {
    sshard *h = &st->sh[s];
    snprintf(h->name, sizeof h->name, "%s", name);
    h->off = off, h->len = len, h->shift = shift, h->sums = sums, h->nsum = nsum;
    atomic_init(&h->from, 0);
    if (nsum >> BLOCK_BITS)
        return cxs_diagf(d, CXS_E_UNSUPPORTED, "%s: shard %s has %llu block sums, more than "
                         "streaming locks (2^%d): open it without streaming", st->url, name,
                         (unsigned long long)nsum, BLOCK_BITS);
    if (!nsum) return 0;
    char p[4200];
    snprintf(p, sizeof p, "%s/%s.have", st->dir, name);
    int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb)) {
        int e = errno;
        if (fd >= 0) close(fd);
        return cxs_diagf(d, -e, "%s: %s", p, strerror(e));
    }
    /* (made at the first open; a longer one is not this shard's) */
    if ((uint64_t)sb.st_size != nsum && ftruncate(fd, (off_t)nsum)) {
        int e = errno;
        close(fd);
        return cxs_diagf(d, -e, "%s: %s", p, strerror(e));
    }
    void *m = mmap(NULL, (size_t)nsum, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) return cxs_diagf(d, -errno, "%s: %s", p, strerror(errno));
    h->have = m;
    if (!(h->used = calloc(nsum, sizeof *h->used)))
        return cxs_diagf(d, -ENOMEM, "%s: out of memory", st->url);
    return 0;
}

void cxs_stream_free(cxs_stream *st) {
    if (!st) return;
    for (uint32_t s = 0; s < st->n; s++)
        if (st->sh[s].have) munmap((void *)st->sh[s].have, (size_t)st->sh[s].nsum);
    for (uint32_t s = 0; s < st->n; s++) free((void *)st->sh[s].used);
    cxs_http_conns_free(st->conns);
    free(st->sh);
    free(st);
}

uint64_t cxs_stream_fetched(const cxs_stream *st) {
    return st ? atomic_load(&((cxs_stream *)st)->fetched) : 0;
}

uint64_t cxs_stream_limit(const cxs_stream *st) { return st->limit; }

/* ---- a user ---------------------------------------------------------------- */

int cxs_stream_user_new(cxs_stream *st, cxs_stream_user **out) {
    cxs_stream_user *u = calloc(1, sizeof *u);
    if (!u) return -ENOMEM;
    u->st = st;
    u->fd = -1;
    u->ref = calloc(st->n ? st->n : 1, sizeof *u->ref);
    if (!u->ref || cxs_origin_parse(st->url, &u->o, NULL)) {
        cxs_stream_user_free(u);
        return -ENOMEM;
    }
    atomic_init(&u->cancel, 0);
    cxs_origin_track(&u->o, NULL, &u->cancel);
    u->o.conns = st->conns;
    *out = u;
    return 0;
}

void cxs_stream_user_free(cxs_stream_user *u) {
    if (!u) return;
    if (u->fd >= 0) close(u->fd); /* (its locks go with it) */
    for (uint32_t s = 0; u->ref && s < u->st->n; s++) free(u->ref[s]);
    free(u->ref);
    free(u);
}

void cxs_stream_user_after_fork(cxs_stream_user *u) {
    if (!u) return;
    /* The descriptions are shared with the parent, and its locks with
     * them: closing ours would not release them (the parent still has the
     * description), and a lock of ours on them would be the parent's too.
     * The child opens its own when it needs them. */
    if (u->fd >= 0) close(u->fd);
    u->fd = -1;
    for (uint32_t s = 0; s < u->st->n; s++)
        if (u->ref[s]) memset(u->ref[s], 0, u->st->sh[s].nsum * sizeof **u->ref);
    atomic_store(&u->cancel, 0);
}

void cxs_stream_user_cancel(cxs_stream_user *u, int on) {
    if (u) atomic_store(&u->cancel, on);
}

/* The user's lock descriptor, and its holds of shard s: 0 or an error. */
static int lock_fd(cxs_stream_user *u, uint32_t s, cxs_diag *d) {
    char p[4200];
    snprintf(p, sizeof p, "%s/stream.locks", u->st->dir);
    if (u->fd < 0 && (u->fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644)) < 0)
        return cxs_diagf(d, -errno, "%s: %s", p, strerror(errno));
    if (!u->ref[s] && !(u->ref[s] = calloc(u->st->sh[s].nsum, sizeof **u->ref)))
        return cxs_diagf(d, -ENOMEM, "%s: out of memory", p);
    return 0;
}

/* Where sum block j of shard s has its lock of kind USE or FETCH. */
static uint64_t lock_at(uint32_t s, unsigned kind, uint64_t j) {
    return ((uint64_t)s << (BLOCK_BITS + 1)) | ((uint64_t)kind << BLOCK_BITS) | j;
}

/* fcntl lock of n offsets at `at`: type F_RDLCK, F_WRLCK or F_UNLCK; wait
 * or not.  0 or -errno (-EAGAIN: held, not waited for).  A wait polls
 * (0.1 ms, doubling to 10 ms) rather than F_OFD_SETLKW: the waits are for
 * another's download of a block or a moment's eviction, and valgrind
 * (3.19) holds its one running thread in a blocked F_OFD_SETLKW, so the
 * holder could never let go. */
static int lk_or_cancel(int fd, short type, uint64_t at, uint64_t n, int wait,
                        _Atomic int *cancel) {
    if (fd < 0) return -EBADF;
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = (off_t)at,
                       .l_len = (off_t)n};
    for (long ns = 100000;;) {
        if (!fcntl(fd, F_OFD_SETLK, &fl)) return 0;
        if (errno == EINTR) continue;
        if (errno != EACCES && errno != EAGAIN) return -errno;
        if (!wait) return -EAGAIN;
        /* a wait for another process's download ends at a cancel too */
        if (cancel && atomic_load_explicit(cancel, memory_order_relaxed)) return -ECANCELED;
        struct timespec ts = {0, ns};
        nanosleep(&ts, NULL);
        if (ns < 10000000) ns *= 2;
    }
}

static int lk(int fd, short type, uint64_t at, uint64_t n, int wait) {
    return lk_or_cancel(fd, type, at, n, wait, NULL);
}

/* Sum blocks [*j0, *j1) holding file bytes [lo, hi) of FEATURES. */
static void blocks_of(const sshard *h, uint64_t lo, uint64_t hi, uint64_t *j0, uint64_t *j1) {
    if (lo < h->off) lo = h->off;
    if (hi > h->off + h->len) hi = h->off + h->len;
    if (hi <= lo) {
        *j0 = *j1 = 0;
        return;
    }
    *j0 = (lo - h->off) >> h->shift;
    *j1 = ((hi - h->off - 1) >> h->shift) + 1;
    if (*j1 > h->nsum) *j1 = h->nsum;
}

static uint64_t block_bytes(const sshard *h, uint64_t j) {
    uint64_t B = 1ull << h->shift, a = j << h->shift;
    return h->len - a < B ? h->len - a : B;
}

/* What sum block j takes on disk: its bytes in whole pages (FEATURES
 * starts on a page, and every sum block but the last is pages long). */
static uint64_t block_disk(const sshard *h, uint64_t j) {
    return (block_bytes(h, j) + CXS_PAGE - 1) & ~(uint64_t)(CXS_PAGE - 1);
}

/* Whether the entry was made a complete copy (promote): then it is never
 * evicted block by block, for a process may have it open whole. */
static int promoted(const cxs_stream *st) {
    char p[4200];
    snprintf(p, sizeof p, "%s/complete", st->dir);
    return access(p, F_OK) == 0;
}

/* After a fetch: when every block of every shard is there, the entry is
 * a complete copy (cache.c's `complete`: a later open of the URL, whole or
 * streamed, opens it as it is and fetches nothing).  Its metadata was
 * checked by the streamed open and each block against its sum as it came,
 * what a whole fetch's verification checks.  Each shard is looked at from
 * the first block not there when last looked (sshard.from; an eviction
 * moves it back), so that an epoch's fetches look at each block about
 * once. */
static void promote(cxs_stream *st) {
    for (uint32_t s = 0; s < st->n; s++) {
        sshard *h = &st->sh[s];
        uint64_t j = atomic_load(&h->from);
        while (j < h->nsum && atomic_load(&h->have[j])) j++;
        atomic_store(&h->from, j);
        if (j < h->nsum) return;
    }
    char p[4200];
    snprintf(p, sizeof p, "%s/complete", st->dir);
    int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) close(fd);
}

/* Take sum block j of shard s for eviction when no reader holds it: its
 * use lock exclusive (taken without waiting: never under a reader), its
 * have byte cleared.  1 taken (the lock held until punch()). */
static int take(cxs_stream_user *u, uint32_t s, uint64_t j) {
    sshard *h = &u->st->sh[s];
    if (!atomic_load(&h->have[j]) || u->ref[s][j]) return 0;
    if (lk(u->fd, F_WRLCK, lock_at(s, USE, j), 1, 0)) return 0; /* someone reads it */
    if (!atomic_load(&h->have[j])) { /* (evicted by another meanwhile) */
        lk(u->fd, F_UNLCK, lock_at(s, USE, j), 1, 0);
        return 0;
    }
    atomic_store(&h->have[j], 0);
    for (uint64_t f = atomic_load(&h->from); f > j && !atomic_compare_exchange_weak(&h->from, &f, j);) {
    }
    return 1;
}

/* The taken blocks [j0, j1) of shard s: their holes punched at once (one
 * fallocate for a run of neighbours, not one a block; *ffd, the shard
 * file, opened at the first), and their locks let go.  The bytes freed. */
static uint64_t punch(cxs_stream_user *u, uint32_t s, uint64_t j0, uint64_t j1, int *ffd) {
    sshard *h = &u->st->sh[s];
    if (*ffd < 0) {
        char p[4200];
        snprintf(p, sizeof p, "%s/%s", u->st->dir, h->name);
        *ffd = open(p, O_RDWR | O_CLOEXEC);
    }
    char c[4200]; /* (made by a promote that raced the take: no longer so) */
    snprintf(c, sizeof c, "%s/complete", u->st->dir);
    unlink(c);
    /* (to the last page's end: past FEATURES is its padding, never data) */
    const uint64_t a = h->off + (j0 << h->shift);
    const uint64_t e = h->off + ((j1 - 1) << h->shift) + block_disk(h, j1 - 1);
    if (*ffd >= 0)
        fallocate(*ffd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)a, (off_t)(e - a));
    lk(u->fd, F_UNLCK, lock_at(s, USE, j0), j1 - j0, 0);
    return e - a;
}

/* Evict the sum blocks of [j0, j1) of shard s that no reader holds.  The
 * bytes freed. */
static uint64_t evict_run(cxs_stream_user *u, uint32_t s, uint64_t j0, uint64_t j1) {
    int ffd = -1;
    uint64_t freed = 0;
    if (promoted(u->st)) return 0;
    for (uint64_t j = j0; j < j1; j++) {
        uint64_t k = j;
        while (k < j1 && take(u, s, k)) k++;
        if (k > j) freed += punch(u, s, j, k, &ffd);
        j = k;
    }
    if (ffd >= 0) close(ffd);
    return freed;
}

/* A block that may be evicted: (when it was last held, shard, block). */
typedef struct lru {
    uint32_t used, s;
    uint64_t j;
} lru;

static int by_use(const void *a, const void *b) {
    const lru *x = a, *y = b;
    if (x->used != y->used) return x->used < y->used ? -1 : 1;
    if (x->s != y->s) return x->s < y->s ? -1 : 1;
    return x->j < y->j ? -1 : x->j > y->j;
}

static int by_place(const void *a, const void *b) {
    const lru *x = a, *y = b;
    if (x->s != y->s) return x->s < y->s ? -1 : 1;
    return x->j < y->j ? -1 : x->j > y->j;
}

/* Evict this entry's blocks that no reader holds, least recently held
 * first (by this process: its use stamps; before, the lowest shard and
 * block first, which could be the next round's, fetched ahead), until
 * `want` bytes are freed: the chosen blocks are evicted in runs of
 * neighbours (evict_run).  The bytes freed. */
static uint64_t evict_lru(cxs_stream_user *u, uint64_t want) {
    cxs_stream *st = u->st;
    cxs_diag ignored;
    if (promoted(st)) return 0;
    size_t n = 0, cap = 0;
    lru *v = NULL;
    for (uint32_t s = 0; s < st->n; s++) {
        sshard *h = &st->sh[s];
        if (!h->have || lock_fd(u, s, &ignored)) continue;
        for (uint64_t j = 0; j < h->nsum; j++) {
            if (!atomic_load(&h->have[j]) || u->ref[s][j]) continue;
            if (n == cap) {
                const size_t c = cap ? 2 * cap : 256;
                lru *nv = realloc(v, c * sizeof *v);
                if (!nv) break; /* (room made from those listed so far) */
                v = nv, cap = c;
            }
            v[n++] = (lru){atomic_load_explicit(&h->used[j], memory_order_relaxed), s, j};
        }
    }
    /* taken in that order (a block another reader holds is passed over)
     * until enough is freed, then punched in runs of neighbours */
    uint64_t chosen = 0;
    size_t m = 0;
    if (n) qsort(v, n, sizeof *v, by_use);
    for (size_t i = 0; i < n && chosen < want; i++)
        if (take(u, v[i].s, v[i].j)) chosen += block_disk(&st->sh[v[i].s], v[i].j), v[m++] = v[i];
    if (m) qsort(v, m, sizeof *v, by_place);
    uint64_t freed = 0;
    int ffd = -1;
    for (size_t i = 0; i < m;) {
        size_t k = i + 1;
        while (k < m && v[k].s == v[i].s && v[k].j == v[k - 1].j + 1) k++;
        freed += punch(u, v[i].s, v[i].j, v[k - 1].j + 1, &ffd);
        if (ffd >= 0 && (k == m || v[k].s != v[i].s)) close(ffd), ffd = -1; /* (the next shard's) */
        i = k;
    }
    free(v);
    return freed;
}

/* Room for `more` bytes under the limit, reserved (r) for the fetch in
 * every process's count of the cache (cache.c, "reservations"): other
 * entries evicted first (least recently used, none open), then blocks of
 * this one no reader holds; while nothing can go but another fetch is in
 * flight (its reservation), its end is waited for (its blocks may then
 * go).  The files' disk use (st_blocks) counts the filesystem's own blocks
 * too: a sparse file in many pieces needs extent blocks (ext4: one per 340
 * pieces beyond 4), so a page per shard file is kept free besides. */
static int make_room(cxs_stream_user *u, uint64_t *morep, cxs_cache_resv *r, cxs_diag *d) {
    cxs_stream *st = u->st;
    r->fd = -1;
    if (!st->limit) return 0;
    uint64_t more = *morep += (uint64_t)st->n * CXS_PAGE;
    uint64_t total = 0;
    cxs_diag ignored;
    for (int pass = 0;; pass++) {
        int rc = cxs_cache_reserve(st->root, more, st->limit, r, &total, d);
        if (rc) return rc < 0 ? rc : 0;
        uint64_t over = total + more - st->limit, freed = 0;
        if (pass == 0) { /* other datasets first, least recently used, none open */
            /* (make_room counts every live reservation itself) */
            cxs_cache_make_room(st->root, st->key, cxs_cache_dir_bytes(st->dir), more,
                                st->limit, &freed, &ignored);
            char p[4400];
            snprintf(p, sizeof p, "%s/reserved", st->dir);
            unlink(p); /* (make_room reserves for a whole fetch; this one counts as it goes) */
            if (freed) continue;
        }
        /* then this one's blocks that no reader holds, least recently used */
        if (evict_lru(u, over)) continue;
        if (!cxs_cache_reserved(st->root)) break; /* nothing more can go */
        if (atomic_load(&u->cancel)) return cxs_diagf(d, -ECANCELED, "%s: download stopped",
                                                      st->url);
        struct timespec ts = {0, 5 * 1000000L}; /* (another's fetch: a download's time) */
        nanosleep(&ts, NULL);
    }
    return cxs_diagf(d, -ENOSPC, "%s: the cache limit of %llu bytes cannot hold the blocks the "
                     "block sampler reads at once (%llu bytes of the cache cannot be evicted now: "
                     "metadata, and blocks held by readers or being fetched; %llu more needed): "
                     "give a larger --cache-limit / cache_limit= / CTXSHARD_CACHE_LIMIT, or a "
                     "smaller memory budget (memory_bytes) or batch", st->url,
                     (unsigned long long)st->limit, (unsigned long long)total,
                     (unsigned long long)more);
}

/* After each piece of a fetch is on disk: the test hook CXS_CACHE_AUDIT
 * (cache.c). */
static void audit(const cxs_stream *st) { cxs_cache_audit(st->root); }

/* One range request of a fetch: sum blocks [j0, j1) of a shard. */
typedef struct piece {
    uint64_t j0, j1;
} piece;

typedef struct fetch_job {
    cxs_stream_user *u;
    uint32_t s;
    int fd;          /* the shard file, for writing */
    const piece *pc;
} fetch_job;

/* Check sum block j of h as it lies in fd. */
static int check_block(const cxs_stream *st, const sshard *h, int fd, uint64_t j, uint8_t *buf,
                       cxs_diag *d) {
    const uint64_t n = block_bytes(h, j), at = h->off + (j << h->shift);
    for (uint64_t done = 0; done < n;) {
        ssize_t r = pread(fd, buf + done, (size_t)(n - done), (off_t)(at + done));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0)
            return cxs_diagf(d, r < 0 ? -errno : CXS_E_TRUNCATED, "%s/%s: reading back bytes "
                             "%llu..%llu: %s", st->dir, h->name, (unsigned long long)at,
                             (unsigned long long)(at + n), r < 0 ? strerror(errno) : "short");
        done += (uint64_t)r;
    }
    if (cxs_checksum_differs(XXH3_64bits(buf, (size_t)n), cxs_ld64(h->sums + 8 * j)))
        return cxs_diagf(d, CXS_E_CHECKSUM, "%s/%s: bytes %llu..%llu (block %llu of FEATURES) "
                         "as downloaded, twice, fail their block sum (the copy at the URL is "
                         "damaged)", st->url, h->name,
                         (unsigned long long)at, (unsigned long long)(at + n),
                         (unsigned long long)j);
    return 0;
}

static int fetch_piece(void *ctx, uint32_t i, cxs_diag *d) {
    fetch_job *fj = ctx;
    cxs_stream_user *u = fj->u;
    const sshard *h = &u->st->sh[fj->s];
    const piece *pc = &fj->pc[i];
    const uint64_t a = h->off + (pc->j0 << h->shift);
    uint64_t b = h->off + (pc->j1 << h->shift);
    if (b > h->off + h->len) b = h->off + h->len;
    uint8_t *buf = malloc((size_t)1 << h->shift); /* a sum block, to check it */
    if (!buf) return cxs_diagf(d, -ENOMEM, "%s/%s: out of memory", u->st->dir, h->name);
    int rc = 0;
    /* A block that arrived damaged is asked for once more before it fails. */
    for (int attempt = 0; attempt < 2; attempt++) {
        cxs_sink sk = {.fd = fj->fd, .at = a};
        uint64_t got = 0;
        rc = cxs_http_get(&u->o, h->name, a, b - a, &sk, &got, d);
        atomic_fetch_add(&u->st->fetched, got);
        for (uint64_t j = pc->j0; j < pc->j1 && !rc; j++)
            rc = check_block(u->st, h, fj->fd, j, buf, d);
        if (rc != CXS_E_CHECKSUM) break;
    }
    free(buf);
    if (rc) /* what arrived of a failed piece is not kept: nothing could evict it */
        fallocate(fj->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)a, (off_t)(b - a));
    else
        audit(u->st);
    return rc;
}

/* Let go of u's holds of [j0, j1): the use locks of the blocks no longer
 * held, a run of neighbours at a time (one fcntl a run, not one a block). */
static void unhold(cxs_stream_user *u, uint32_t s, uint64_t j0, uint64_t j1) {
    uint64_t run = j1; /* the first of a run of blocks let go; j1: none */
    for (uint64_t j = j0; j <= j1; j++) {
        const int gone = j < j1 && u->ref[s][j] && !--u->ref[s][j];
        if (gone && run == j1) run = j;
        if (!gone && run != j1) {
            lk(u->fd, F_UNLCK, lock_at(s, USE, run), j - run, 0);
            run = j1;
        }
    }
}

/* Cut the longest pieces in two until there are PIECES_AT_ONCE of them
 * (or each is a sum block): a loader's block is often less than one
 * PIECE, and its fetch is then that many requests in flight, not one
 * waited for from its first byte to its last. */
static void split(piece *pcs, uint32_t *np, uint32_t cap) {
    while (*np < PIECES_AT_ONCE && *np < cap) {
        uint32_t w = 0;
        for (uint32_t i = 1; i < *np; i++)
            if (pcs[i].j1 - pcs[i].j0 > pcs[w].j1 - pcs[w].j0) w = i;
        if (!*np || pcs[w].j1 - pcs[w].j0 < 2) return;
        memmove(&pcs[w + 2], &pcs[w + 1], (*np - w - 1) * sizeof *pcs);
        pcs[w + 1] = (piece){pcs[w].j0 + (pcs[w].j1 - pcs[w].j0) / 2, pcs[w].j1};
        pcs[w].j1 = pcs[w + 1].j0;
        ++*np;
    }
}

/* Fetch the missing blocks of [j0, j1) of shard s (held), each under its
 * fetch lock (ascending), unless another process of the node fetched it
 * meanwhile; at most 64 pieces a call (*again: call once more). */
static int fetch_missing(cxs_stream_user *u, uint32_t s, uint64_t j0, uint64_t j1,
                         const int *stop, int *again, cxs_diag *d) {
    cxs_stream *st = u->st;
    sshard *h = &st->sh[s];
    const int fd = u->fd;
    piece pcs[64];
    uint32_t np = 0;
    uint64_t more = 0, locked_lo = j1, locked_hi = j0;
    int rc = 0;
    for (uint64_t j = j0; j < j1 && !rc; j++) {
        if (atomic_load(&h->have[j])) continue;
        if ((rc = lk_or_cancel(fd, F_WRLCK, lock_at(s, FETCH, j), 1, 1, &u->cancel))) {
            rc = rc == -ECANCELED ? cxs_diagf(d, rc, "%s: download stopped", st->url)
                                  : cxs_diagf(d, rc, "%s/stream.locks: %s", st->dir,
                                              strerror(-rc));
            break;
        }
        if (j < locked_lo) locked_lo = j;
        locked_hi = j + 1;
        if (atomic_load(&h->have[j])) { /* fetched by another meanwhile */
            lk(fd, F_UNLCK, lock_at(s, FETCH, j), 1, 0);
            continue;
        }
        if (np && pcs[np - 1].j1 == j && ((j + 1 - pcs[np - 1].j0) << h->shift) <= PIECE) {
            pcs[np - 1].j1 = j + 1;
        } else if (np < sizeof pcs / sizeof *pcs) {
            pcs[np++] = (piece){j, j + 1};
        } else { /* the rest on the next call */
            lk(fd, F_UNLCK, lock_at(s, FETCH, j), 1, 0);
            *again = 1;
            break;
        }
        more += block_disk(h, j);
    }
    split(pcs, &np, sizeof pcs / sizeof *pcs);
    if (!rc && np && (__atomic_load_n(stop, __ATOMIC_RELAXED) || atomic_load(&u->cancel)))
        rc = cxs_diagf(d, -ECANCELED, "%s: download stopped", st->url);
    cxs_cache_resv res = {.fd = -1};
    if (!rc && np) rc = make_room(u, &more, &res, d);
    if (!rc && np) {
        char p[4200];
        snprintf(p, sizeof p, "%s/%s", st->dir, h->name);
        fetch_job fj = {.u = u, .s = s, .pc = pcs, .fd = open(p, O_RDWR | O_CLOEXEC)};
        if (fj.fd < 0) rc = cxs_diagf(d, -errno, "%s: %s", p, strerror(errno));
        char what[2200];
        snprintf(what, sizeof what, "%s/%s: features", st->url, h->name);
        const cxs_workq q = {.one = fetch_piece, .ctx = &fj, .n = np};
        if (!rc) rc = cxs_workq_run(&q, PIECES_AT_ONCE, what, d);
        /* One sync for the fetch's pieces, before any of its blocks counts
         * as there (a crash never leaves a have byte set over bytes that
         * did not reach the disk); not one a piece. */
        if (!rc && fdatasync(fj.fd))
            rc = cxs_diagf(d, -errno, "%s: %s", p, strerror(errno));
        for (uint32_t i = 0; !rc && i < np; i++)
            for (uint64_t j = pcs[i].j0; j < pcs[i].j1; j++) atomic_store(&h->have[j], 1);
        if (!rc) promote(st);
        if (rc) /* (the pieces that landed: not kept, as a failed piece's) */
            for (uint32_t i = 0; i < np; i++)
                fallocate(fj.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                          (off_t)(h->off + (pcs[i].j0 << h->shift)),
                          (off_t)((pcs[i].j1 - pcs[i].j0) << h->shift));
        if (fj.fd >= 0) close(fj.fd);
    }
    cxs_cache_unreserve(&res); /* (on disk now, or not written) */
    /* the fetch locks go (a block that failed stays missing) */
    if (locked_hi > locked_lo)
        lk(fd, F_UNLCK, lock_at(s, FETCH, locked_lo), locked_hi - locked_lo, 0);
    return rc;
}

int cxs_stream_acquire(cxs_stream_user *u, uint32_t s, uint64_t lo, uint64_t hi,
                       const int *stop, cxs_diag *d) {
    cxs_stream *st = u->st;
    sshard *h = &st->sh[s];
    uint64_t j0, j1;
    blocks_of(h, lo, hi, &j0, &j1);
    if (j0 == j1) return 0;
    int rc = lock_fd(u, s, d);
    if (rc) return rc;
    /* hold them: no eviction from here on; the range's use locks in one
     * fcntl (a shared lock this description holds already on some of them
     * stays as it is), not one a block */
    const uint32_t now = atomic_fetch_add_explicit(&st->clock, 1, memory_order_relaxed) + 1;
    int fresh = 0;
    for (uint64_t j = j0; j < j1; j++) {
        atomic_store_explicit(&h->used[j], now, memory_order_relaxed);
        fresh |= !u->ref[s][j];
    }
    if (fresh && (rc = lk(u->fd, F_RDLCK, lock_at(s, USE, j0), j1 - j0, 1)))
        return cxs_diagf(d, rc, "%s/stream.locks: %s", st->dir, strerror(-rc));
    for (uint64_t j = j0; j < j1; j++) u->ref[s][j]++;
    for (int again = 1; again && !rc;) {
        again = 0;
        rc = fetch_missing(u, s, j0, j1, stop, &again, d);
    }
    if (rc) unhold(u, s, j0, j1);
    return rc;
}

/* cxs_stream_drop of sum blocks [j0, j1) of shard s. */
static void drop_blocks(cxs_stream_user *u, uint32_t s, uint64_t j0, uint64_t j1) {
    cxs_stream *st = u->st;
    sshard *h = &st->sh[s];
    cxs_diag ignored;
    if (j0 >= j1 || !st->limit || lock_fd(u, s, &ignored)) return;
    /* done with for the epoch: the first to go when room is made (a use
     * stamp older than any) */
    for (uint64_t j = j0; j < j1; j++)
        if (!u->ref[s][j]) atomic_store_explicit(&h->used[j], 0, memory_order_relaxed);
    if (cxs_cache_total(st->root) > st->limit) evict_run(u, s, j0, j1);
}

void cxs_stream_drop(cxs_stream_user *u, uint32_t s, uint64_t lo, uint64_t hi) {
    uint64_t j0, j1;
    blocks_of(&u->st->sh[s], lo, hi, &j0, &j1);
    drop_blocks(u, s, j0, j1);
}

void cxs_stream_release(cxs_stream_user *u, uint32_t s, uint64_t lo, uint64_t hi, int drop) {
    const sshard *h = &u->st->sh[s];
    uint64_t j0, j1;
    blocks_of(h, lo, hi, &j0, &j1);
    if (j0 == j1 || !u->ref[s]) return;
    unhold(u, s, j0, j1);
    /* a sum block the range covers in part is shared with the next range
     * (or the one before): maybe fetched ahead for it, not done with */
    if (drop && lo > h->off + (j0 << h->shift)) j0++;
    if (drop && hi < h->off + h->len && hi < h->off + (j1 << h->shift)) j1--;
    if (drop) drop_blocks(u, s, j0, j1);
}
