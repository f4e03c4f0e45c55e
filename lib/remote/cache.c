/* cache.c - the node-local cache of datasets fetched from URLs (remote.h)
 * and its management (cxs_cache_list, cxs_cache_prune, cxs_cache_clear).
 *
 * Layout: ROOT/KEY/ holds a dataset's files as its URL serves them, plus
 * `source` (the URL) and, once the opener has verified every checksum,
 * `complete`; ROOT/KEY.lock is its lock; `used` in the entry is touched at
 * every open (least recently used goes first).  KEY is two 64-bit hashes:
 * of the URL and of the manifest's bytes, so that a dataset packed again
 * at the same URL (another manifest: other checksums) is another entry and
 * never mixed with the old one's shards.
 *
 * Locks (flock): a fetch holds its entry's lock exclusively while it
 * downloads and the opener verifies, so that the processes of a node
 * download each file once (the others wait, then find it complete); an
 * open dataset holds it shared, so that no eviction removes what a
 * process has open.  Lock files are never removed (a process waiting on
 * one would otherwise hold a lock nobody else sees).  ROOT/.evict
 * serialises evictions. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#include "cxs_format.h"
#include "cxs_le.h"
#include "http.h"
#include "remote.h"
#include "size.h"
#include "workq.h"

#define MANIFEST_CAP (256ull << 20) /* a manifest larger than this is not one */
#define FETCH_THREADS 4u            /* files downloaded at once */

int cxs_url_is_remote(const char *p) {
    return p && (!strncmp(p, "http://", 7) || !strncmp(p, "https://", 8) ||
                 !strncmp(p, "s3://", 5));
}

static int mkdir_p(const char *path) {
    char tmp[4096];
    size_t n = strlen(path);
    if (n >= sizeof tmp) return -ENAMETOOLONG;
    memcpy(tmp, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (tmp[i] != '/' && tmp[i] != 0) continue;
        char c = tmp[i];
        tmp[i] = 0;
        if (mkdir(tmp, 0755) && errno != EEXIST) return -errno;
        tmp[i] = c;
    }
    return 0;
}

int cxs_cache_dir(const char *given, char *out, size_t cap) {
    const char *e;
    int n;
    if (given && *given) n = snprintf(out, cap, "%s", given);
    else if ((e = getenv("CTXSHARD_CACHE")) && *e) n = snprintf(out, cap, "%s", e);
    else if ((e = getenv("XDG_CACHE_HOME")) && *e) n = snprintf(out, cap, "%s/ctxshard", e);
    else if ((e = getenv("HOME")) && *e) n = snprintf(out, cap, "%s/.cache/ctxshard", e);
    else n = snprintf(out, cap, "/tmp/ctxshard-cache-%ld", (long)getuid());
    if (n < 0 || (size_t)n >= cap) return -ENAMETOOLONG;
    while (n > 1 && out[n - 1] == '/') out[--n] = 0;
    return 0;
}

/* The cache directory, made if missing; messages name it. */
static int root_of(const char *given, char *root, size_t cap, cxs_diag *d) {
    int rc = cxs_cache_dir(given, root, cap);
    if (rc) return cxs_diagf(d, rc, "cache directory: path too long");
    if ((rc = mkdir_p(root)))
        return cxs_diagf(d, rc, "%s: cannot make the cache directory: %s (give another with "
                         "--cache DIR, cache=, or CTXSHARD_CACHE)", root, strerror(-rc));
    /* The last resort (no HOME) is in /tmp, where another user could have
     * made it first, to serve this one data of their choosing: it must be
     * this user's own directory, writable by no one else. */
    char tmp[64];
    snprintf(tmp, sizeof tmp, "/tmp/ctxshard-cache-%ld", (long)getuid());
    struct stat st;
    if (!strcmp(root, tmp) &&
        (lstat(root, &st) || !S_ISDIR(st.st_mode) || st.st_uid != getuid() ||
         (st.st_mode & 022)))
        return cxs_diagf(d, -EPERM, "%s: not a directory of this user's that only it may write "
                         "(another user may have made it): give a cache directory with --cache "
                         "DIR, cache=, or CTXSHARD_CACHE", root);
    return 0;
}

static int limit_of(uint64_t given, uint64_t *out, cxs_diag *d) {
    *out = given;
    const char *e = getenv("CTXSHARD_CACHE_LIMIT");
    if (!given && e && *e && cxs_size_parse(e, out))
        return cxs_diagf(d, CXS_E_INVALID, "CTXSHARD_CACHE_LIMIT: '%s' is not a size (bytes, or "
                         "with K, M, G, T)", e);
    return 0;
}

/* Bytes of the regular files in dir (not below). */
uint64_t cxs_cache_dir_bytes(const char *dir) {
    DIR *dp = opendir(dir);
    if (!dp) return 0;
    uint64_t n = 0;
    struct dirent *de;
    char p[4400];
    while ((de = readdir(dp))) {
        if (de->d_name[0] == '.') continue;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        struct stat st;
        if (!stat(p, &st) && S_ISREG(st.st_mode)) n += (uint64_t)st.st_blocks * 512u;
    }
    closedir(dp);
    return n;
}

/* Remove dir's files and dir (an entry holds no folders), its `complete`
 * marker first: an eviction cut short never leaves an entry that says it
 * is whole. */
static int remove_entry(const char *dir) {
    char c[4400];
    snprintf(c, sizeof c, "%s/complete", dir);
    if (unlink(c) && errno != ENOENT) return -errno;
    DIR *dp = opendir(dir);
    if (!dp) return errno == ENOENT ? 0 : -errno;
    struct dirent *de;
    char p[4400];
    int rc = 0;
    while ((de = readdir(dp))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        if (unlink(p) && errno != ENOENT) rc = -errno;
    }
    closedir(dp);
    if (rmdir(dir) && errno != ENOENT) rc = -errno;
    return rc;
}

static int exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

static void touch(const char *p) {
    int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) {
        futimens(fd, NULL);
        close(fd);
    }
}

static int64_t mtime_of(const char *p) {
    struct stat st;
    return stat(p, &st) ? 0 : (int64_t)st.st_mtime;
}

/* An entry's name: KEY (hex hex), not starting with '.'. */
static int is_entry(const char *name) {
    return strlen(name) == 33 && name[16] == '-' && strspn(name, "0123456789abcdef-") == 33;
}

/* flock, again after a signal: never on without the lock.  0 or -errno. */
static int lock_wait(int fd, int op) {
    while (flock(fd, op)) {
        if (errno != EINTR) return -errno;
    }
    return 0;
}

/* lock_wait for an entry's lock, which another process may hold for a
 * whole download: progress (may be NULL) is called every 100 ms while it
 * waits, with 0 of total, and a non-zero return stops the wait
 * (-ECANCELED): a Ctrl-C in a process waiting for another's download. */
static int lock_entry(int fd, int op, cxs_progress_fn progress, void *user, uint64_t total) {
    if (!progress) return lock_wait(fd, op);
    for (;;) {
        if (!flock(fd, op | LOCK_NB)) return 0;
        if (errno != EWOULDBLOCK && errno != EINTR) return -errno;
        if (progress(user, 0, total)) return -ECANCELED;
        struct timespec ts = {0, 100 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

static int open_lock(const char *root, const char *key) {
    char p[4200];
    snprintf(p, sizeof p, "%s/%s.lock", root, key);
    return open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
}

/* ---- eviction ----------------------------------------------------------- */

typedef struct victim {
    char key[40];
    int64_t used;
    uint64_t bytes;
} victim;

static int by_use(const void *a, const void *b) {
    const victim *x = a, *y = b;
    return x->used < y->used ? -1 : x->used > y->used;
}

/* The entries of root but `keep`, least recently used first. */
static int list_entries(const char *root, const char *keep, victim **out, size_t *n) {
    *out = NULL;
    *n = 0;
    DIR *dp = opendir(root);
    if (!dp) return -errno;
    size_t cap = 0;
    struct dirent *de;
    char p[4400];
    while ((de = readdir(dp))) {
        if (!is_entry(de->d_name) || (keep && !strcmp(de->d_name, keep))) continue;
        snprintf(p, sizeof p, "%s/%s", root, de->d_name);
        struct stat st;
        if (stat(p, &st) || !S_ISDIR(st.st_mode)) continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            victim *nv = realloc(*out, cap * sizeof *nv);
            if (!nv) {
                closedir(dp);
                return -ENOMEM;
            }
            *out = nv;
        }
        victim *v = &(*out)[(*n)++];
        snprintf(v->key, sizeof v->key, "%s", de->d_name);
        snprintf(p, sizeof p, "%s/%s/used", root, de->d_name);
        v->used = exists(p) ? mtime_of(p) : (int64_t)st.st_mtime;
        snprintf(p, sizeof p, "%s/%s", root, de->d_name);
        v->bytes = cxs_cache_dir_bytes(p);
        /* one being fetched counts at the size it will reach */
        snprintf(p, sizeof p, "%s/%s/reserved", root, de->d_name);
        FILE *fp = fopen(p, "r");
        unsigned long long r = 0;
        if (fp) {
            if (fscanf(fp, "%llu", &r) == 1 && r > v->bytes) v->bytes = r;
            fclose(fp);
        }
    }
    closedir(dp);
    if (*n) qsort(*out, *n, sizeof **out, by_use); /* (qsort of NULL is undefined) */
    return 0;
}

static int resv_open(const char *root);
static uint64_t resv_sum(int fd, int reclaim);

/* The cache's eviction lock (ROOT/.evict), taken exclusively: its
 * descriptor, or a negative code with the path in d. */
static int evict_lock(const char *root, cxs_diag *d) {
    char p[4200];
    snprintf(p, sizeof p, "%s/.evict", root);
    int efd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (efd < 0) return cxs_diagf(d, -errno, "%s: %s", p, strerror(errno));
    int rc = lock_wait(efd, LOCK_EX);
    if (rc) {
        close(efd);
        return cxs_diagf(d, rc, "%s: %s", p, strerror(-rc));
    }
    return efd;
}

/* Evict least recently used entries (not `keep`, none open or being
 * fetched) until `more` bytes fit under limit, counting every entry (one
 * being fetched whole at the size it will reach) and every process's live
 * reservations (the streams' fetches in flight), the rule
 * cxs_cache_reserve applies.  *freed: bytes removed; *inflight (may be
 * NULL): the live reservations, when they alone keep `more` out (the
 * room is there once they land, unless they take it), else 0. */
static int make_room(const char *root, const char *keep, uint64_t have, uint64_t more,
                     uint64_t limit, uint64_t *freed, uint64_t *inflight, cxs_diag *d) {
    *freed = 0;
    if (inflight) *inflight = 0;
    int efd = evict_lock(root, d);
    if (efd < 0) return efd;
    char p[4200];
    victim *v;
    size_t n;
    int rc = list_entries(root, keep, &v, &n);
    if (rc) {
        close(efd);
        return cxs_diagf(d, rc, "%s: %s", root, strerror(-rc));
    }
    uint64_t total = have;
    for (size_t i = 0; i < n; i++) total += v[i].bytes;
    /* the streams' fetches in flight, every process's: what they are about
     * to write counts as if it were on disk (ROOT/.reservations) */
    const int rfd = resv_open(root);
    const uint64_t resv = resv_sum(rfd, 1);
    if (rfd >= 0) close(rfd);
    total += resv;
    uint64_t busy = 0;
    for (size_t i = 0; i < n && total + more > limit; i++) {
        int lfd = open_lock(root, v[i].key);
        if (lfd < 0) continue;
        if (flock(lfd, LOCK_EX | LOCK_NB)) { /* open somewhere, or being fetched */
            busy += v[i].bytes;
            close(lfd);
            continue;
        }
        snprintf(p, sizeof p, "%s/%s", root, v[i].key);
        if (!remove_entry(p)) {
            total -= v[i].bytes;
            *freed += v[i].bytes;
        }
        close(lfd);
    }
    free(v);
    if (inflight && total + more > limit && total - resv + more <= limit) *inflight = resv;
    if (keep && total + more <= limit) {
        /* reserve what the fetch will hold, before another fetch counts */
        snprintf(p, sizeof p, "%s/%s", root, keep);
        if (!mkdir_p(p)) {
            snprintf(p, sizeof p, "%s/%s/reserved", root, keep);
            FILE *fp = fopen(p, "w");
            if (fp) {
                fprintf(fp, "%llu\n", (unsigned long long)(have + more));
                fclose(fp);
            }
        }
    }
    close(efd);
    if (total + more > limit && !more)
        return cxs_diagf(d, -EBUSY, "%s: %llu bytes remain above %llu: datasets open now (or "
                         "being fetched) are never evicted", root, (unsigned long long)total,
                         (unsigned long long)limit);
    if (total + more > limit)
        return cxs_diagf(d, -ENOSPC, "%s: the cache limit is %llu bytes; %llu more are needed and "
                         "%llu are held by datasets open now (or being fetched) that cannot be "
                         "evicted: give a larger --cache-limit / cache_limit= / "
                         "CTXSHARD_CACHE_LIMIT, or close them", root, (unsigned long long)limit,
                         (unsigned long long)more, (unsigned long long)(busy + have + resv));
    return 0;
}

int cxs_cache_make_room(const char *root, const char *keep, uint64_t have, uint64_t more,
                        uint64_t limit, uint64_t *freed, cxs_diag *d) {
    return make_room(root, keep, have, more, limit, freed, NULL, d);
}

/* make_room for a fetch (keep: its entry), which waits while what keeps
 * it out is only other fetches in flight (the streams' reservations: they
 * land within a download's time, and the room is counted again then), as
 * a stream's fetch does (stream.c); progress, every 100 ms of the wait
 * with (have, have + more), may stop it (-ECANCELED). */
static int make_room_wait(const char *root, const char *keep, uint64_t have, uint64_t more,
                          uint64_t limit, cxs_progress_fn progress, void *user, const char *url,
                          cxs_diag *d) {
    for (unsigned k = 1;; k++) {
        uint64_t freed, inflight;
        int rc = make_room(root, keep, have, more, limit, &freed, &inflight, d);
        if (rc != -ENOSPC || !inflight) return rc;
        if (progress && k % 20 == 0 && progress(user, have, have + more))
            return cxs_diagf(d, -ECANCELED, "%s: download stopped", url);
        struct timespec ts = {0, 5 * 1000000L}; /* (another's fetch: a download's time) */
        nanosleep(&ts, NULL);
    }
}

/* Bytes of every entry of root (entries being fetched whole at the size
 * they will reach), without the streams' reservations. */
static uint64_t entries_total(const char *root) {
    victim *v;
    size_t n;
    if (list_entries(root, NULL, &v, &n)) return 0;
    uint64_t t = 0;
    for (size_t i = 0; i < n; i++) t += v[i].bytes;
    free(v);
    return t;
}

/* ---- reservations --------------------------------------------------------
 *
 * ROOT/.reservations holds the bytes that the streams' fetches in flight
 * (stream.c) are about to write, so that every process of the node counts
 * every other's before it starts one: slot i is the u64 LE at 8*i, and it
 * is live while a description of the file holds an fcntl open-file-
 * description lock on those 8 bytes (the reservation's own, taken with
 * it).  A process that dies lets go of its locks, so its slots count no
 * more; the next reservation zeroes them.  Reservations are made under
 * ROOT/.evict's flock, after the entries and the live reservations are
 * counted, so that two never both take the last room. */

static int resv_open(const char *root) {
    char p[4200];
    snprintf(p, sizeof p, "%s/.reservations", root);
    return open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
}

/* Whether slot i has a holder (any description but fd's). */
static int resv_live(int fd, uint64_t i) {
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = (off_t)(8 * i),
                       .l_len = 8};
    if (fcntl(fd, F_OFD_GETLK, &fl)) return 1; /* (unknown: counted) */
    return fl.l_type != F_UNLCK;
}

#define RESV_SLOTS_MAX (1u << 16)

/* The live reservations' bytes; reclaim (under .evict's lock): the slots
 * of holders gone are zeroed. */
static uint64_t resv_sum(int fd, int reclaim) {
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) || sb.st_size < 8) return 0;
    uint64_t n = (uint64_t)sb.st_size / 8, sum = 0;
    if (n > RESV_SLOTS_MAX) n = RESV_SLOTS_MAX;
    uint8_t b[8 * 256];
    for (uint64_t i0 = 0; i0 < n; i0 += 256) {
        uint64_t k = n - i0 < 256 ? n - i0 : 256;
        ssize_t r = pread(fd, b, (size_t)(8 * k), (off_t)(8 * i0));
        if (r <= 0) break;
        k = (uint64_t)r / 8;
        for (uint64_t i = 0; i < k; i++) {
            uint64_t v = cxs_ld64(b + 8 * i);
            if (!v) continue;
            if (resv_live(fd, i0 + i)) {
                sum += v;
            } else if (reclaim) {
                static const uint8_t zero[8];
                if (pwrite(fd, zero, 8, (off_t)(8 * (i0 + i))) != 8) {
                    /* (a slot left as it was is reclaimed next time) */
                }
            }
        }
    }
    return sum;
}

uint64_t cxs_cache_reserved(const char *root) {
    int fd = resv_open(root);
    uint64_t sum = resv_sum(fd, 0);
    if (fd >= 0) close(fd);
    return sum;
}

uint64_t cxs_cache_total(const char *root) {
    return entries_total(root) + cxs_cache_reserved(root);
}

int cxs_cache_reserve(const char *root, uint64_t more, uint64_t limit, cxs_cache_resv *r,
                      uint64_t *total, cxs_diag *d) {
    r->fd = -1;
    int efd = evict_lock(root, d);
    if (efd < 0) return efd;
    int rc;
    int fd = resv_open(root);
    if (fd < 0) {
        rc = -errno;
        close(efd);
        return cxs_diagf(d, rc, "%s/.reservations: %s", root, strerror(-rc));
    }
    *total = entries_total(root) + resv_sum(fd, 1);
    if (*total + more > limit) {
        close(fd);
        close(efd);
        return 0;
    }
    uint64_t i = 0;
    for (;; i++) { /* the first slot no one holds */
        struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = (off_t)(8 * i),
                           .l_len = 8};
        if (!fcntl(fd, F_OFD_SETLK, &fl)) break;
        if ((errno != EAGAIN && errno != EACCES) || i >= RESV_SLOTS_MAX) {
            rc = errno == EAGAIN || errno == EACCES ? -EMFILE : -errno;
            close(fd);
            close(efd);
            return cxs_diagf(d, rc, "%s/.reservations: %s", root, strerror(-rc));
        }
    }
    uint8_t b[8];
    cxs_st64(b, more);
    if (pwrite(fd, b, 8, (off_t)(8 * i)) != 8) {
        rc = -errno;
        close(fd);
        close(efd);
        return cxs_diagf(d, rc ? rc : -EIO, "%s/.reservations: %s", root,
                         strerror(rc ? -rc : EIO));
    }
    r->fd = fd, r->slot = i, r->bytes = more;
    close(efd);
    return 1;
}

void cxs_cache_unreserve(cxs_cache_resv *r) {
    if (r->fd < 0) return;
    /* (the bytes are on disk now, or were not written: counted there, or
     * nowhere; a reader that sees a part of the zeroing sees less than the
     * reservation, never more) */
    static const uint8_t zero[8];
    if (pwrite(r->fd, zero, 8, (off_t)(8 * r->slot)) != 8) {
        /* (reclaimed once the lock goes with the descriptor) */
    }
    close(r->fd);
    r->fd = -1;
}

#ifdef CXS_TEST_HOOKS
void cxs_cache_audit(const char *root) {
    const char *e = getenv("CXS_CACHE_AUDIT");
    if (!e || !*e) return;
    uint64_t disk = 0;
    DIR *dp = opendir(root);
    for (struct dirent *de; dp && (de = readdir(dp));) {
        char p[4400];
        snprintf(p, sizeof p, "%s/%s", root, de->d_name);
        if (de->d_name[0] != '.') disk += cxs_cache_dir_bytes(p); /* (a file: 0) */
    }
    if (dp) closedir(dp);
    char line[32];
    int n = snprintf(line, sizeof line, "%llu\n", (unsigned long long)disk);
    int fd = open(e, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return;
    if (write(fd, line, (size_t)n) != n) {
        /* (a test that reads a line short fails on it) */
    }
    close(fd);
}
#else
void cxs_cache_audit(const char *root) { (void)root; }
#endif

/* ---- the fetch ----------------------------------------------------------- */

typedef struct job {
    const cxs_origin *o;
    const char *root, *dir;
    const uint64_t *sizes;
    _Atomic uint64_t fetched;
} job;

/* Shard i into dir, resuming a .part left by an earlier attempt. */
static int fetch_shard(void *ctx, uint32_t i, cxs_diag *d) {
    job *j = ctx;
    char name[64], path[4200], part[4300];
    snprintf(name, sizeof name, CXS_SHARD_NAME_FMT, i);
    snprintf(path, sizeof path, "%s/%s", j->dir, name);
    struct stat st;
    if (!stat(path, &st) && (uint64_t)st.st_size == j->sizes[i]) return 0;
    snprintf(part, sizeof part, "%s.part", path);
    int fd = open(part, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return cxs_diagf(d, -errno, "%s: %s", part, strerror(errno));
    uint64_t have = 0;
    if (!fstat(fd, &st)) have = (uint64_t)st.st_size;
    if (have > j->sizes[i] && ftruncate(fd, 0) == 0) have = 0;
    int rc = 0;
    if (have < j->sizes[i]) {
        cxs_sink s = {.fd = fd, .at = have};
        uint64_t got = 0;
        rc = cxs_http_get(j->o, name, have, j->sizes[i] - have, &s, &got, d);
        atomic_fetch_add(&j->fetched, got);
    }
    if (!rc && fsync(fd)) rc = cxs_diagf(d, -errno, "%s: %s", part, strerror(errno));
    close(fd);
    if (rc == CXS_E_CORRUPT) unlink(part); /* bytes of doubt are not resumed from */
    if (!rc && rename(part, path)) rc = cxs_diagf(d, -errno, "%s: %s", path, strerror(errno));
    cxs_cache_audit(j->root);
    return rc;
}

static int write_file(const char *path, const void *p, size_t n) {
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.part", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return -errno;
    const uint8_t *b = p;
    for (size_t done = 0; done < n;) {
        ssize_t w = write(fd, b + done, n - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            int e = w < 0 ? errno : EIO;
            close(fd);
            return -e;
        }
        done += (size_t)w;
    }
    if (fsync(fd)) {
        int e = errno;
        close(fd);
        return -e;
    }
    close(fd);
    return rename(tmp, path) ? -errno : 0;
}

/* An entry's directory, with `source` (its URL, for cache ls). */
static int start_entry(const char *dir, const char *url, cxs_diag *d) {
    int rc = mkdir_p(dir);
    if (rc) return cxs_diagf(d, rc, "%s: %s", dir, strerror(-rc));
    char p[4400], line[2100];
    snprintf(p, sizeof p, "%s/source", dir);
    int ll = snprintf(line, sizeof line, "%s\n", url);
    if ((rc = write_file(p, line, (size_t)ll))) return cxs_diagf(d, rc, "%s: %s", p, strerror(-rc));
    return 0;
}

/* ---- a stream's set-up ------------------------------------------------------ */

/* Every shard's bytes but its FEATURES, for streaming: phase 0 reads each
 * header page (whether the shard can be streamed), phase 1 writes each
 * shard's sparse file with everything around FEATURES. */
typedef struct meta_job {
    const cxs_origin *o;
    const char *dir;
    const uint64_t *sizes;
    uint8_t *heads;        /* n header pages */
    uint64_t *foff, *flen; /* each shard's FEATURES */
    int *why;              /* 0: can be streamed; 1: compressed; 2: no BLOCKSUMS */
    int phase;
    _Atomic uint64_t fetched;
} meta_job;

static int pwrite_all(int fd, const uint8_t *p, size_t n, uint64_t at) {
    for (size_t done = 0; done < n;) {
        ssize_t w = pwrite(fd, p + done, n - done, (off_t)(at + done));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return w < 0 ? -errno : -EIO;
        done += (size_t)w;
    }
    return 0;
}

static int meta_one(void *ctx, uint32_t i, cxs_diag *d) {
    meta_job *j = ctx;
    char name[64], where[2200];
    snprintf(name, sizeof name, CXS_SHARD_NAME_FMT, i);
    snprintf(where, sizeof where, "%s/%s", j->o->shown, name);
    uint8_t *page = j->heads + (size_t)i * CXS_PAGE;
    uint64_t got = 0;
    int rc = 0;
    if (j->phase == 0) {
        if (j->sizes[i] < CXS_PAGE)
            return cxs_diagf(d, CXS_E_CORRUPT, "%s: the manifest gives it %llu bytes, less than "
                             "its header page", where, (unsigned long long)j->sizes[i]);
        cxs_sink s = {.fd = -1, .cap = CXS_PAGE};
        rc = cxs_http_get(j->o, name, 0, CXS_PAGE, &s, &got, d);
        atomic_fetch_add(&j->fetched, got);
        if (!rc && s.len != CXS_PAGE)
            rc = cxs_diagf(d, CXS_E_TRUNCATED, "%s: %llu bytes of its header page arrived",
                           where, (unsigned long long)s.len);
        if (!rc) memcpy(page, s.buf, CXS_PAGE);
        free(s.buf);
        cxs_container c;
        if (rc || (rc = cxs_container_parse(page, j->sizes[i], CXS_KIND_SHARD, &c, where, d)))
            return rc;
        const cxs_section *fs = cxs_container_find(&c, CXS_SEC_FEATURES);
        if (!fs) j->why[i] = 1;
        else if (!cxs_container_find(&c, CXS_SEC_BLOCKSUMS)) j->why[i] = 2;
        else j->foff[i] = fs->offset, j->flen[i] = fs->length;
        return 0;
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", j->dir, name);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return cxs_diagf(d, -errno, "%s: %s", path, strerror(errno));
    if (ftruncate(fd, (off_t)j->sizes[i]) || (rc = pwrite_all(fd, page, CXS_PAGE, 0)))
        rc = cxs_diagf(d, rc ? rc : -errno, "%s: %s", path, strerror(rc ? -rc : errno));
    /* around FEATURES: from the header page to it, and from its end
     * (page-aligned: the padding is zeros, a hole) to the file's */
    const uint64_t a[2] = {CXS_PAGE, cxs_align_page(j->foff[i] + j->flen[i])};
    const uint64_t b[2] = {j->foff[i], j->sizes[i]};
    for (int r = 0; r < 2 && !rc; r++) {
        if (b[r] <= a[r]) continue;
        cxs_sink s = {.fd = fd, .at = a[r]};
        got = 0;
        rc = cxs_http_get(j->o, name, a[r], b[r] - a[r], &s, &got, d);
        atomic_fetch_add(&j->fetched, got);
    }
    if (!rc && fsync(fd)) rc = cxs_diagf(d, -errno, "%s: %s", path, strerror(errno));
    close(fd);
    return rc;
}

/* Set up a streamed entry under the exclusive lock: 0 done (f filled), 1
 * when a shard cannot be streamed and the dataset fits the limit (the
 * caller fetches it whole), or an error. */
static int stream_setup(const cxs_origin *o, const char *url, const char *root, const char *key,
                        const char *dir, const cxs_sink *man, const uint64_t *sizes, uint32_t n,
                        uint64_t limit, cxs_progress_fn progress, void *user, cxs_fetch *f,
                        cxs_diag *d) {
    const size_t N = n ? n : 1;
    meta_job j = {.o = o, .dir = dir, .sizes = sizes, .heads = malloc(N * CXS_PAGE),
                  .foff = calloc(N, sizeof(uint64_t)), .flen = calloc(N, sizeof(uint64_t)),
                  .why = calloc(N, sizeof(int))};
    atomic_init(&j.fetched, 0);
    int rc = 0;
    char p[4400], what[2200];
    snprintf(what, sizeof what, "%s: the shards' headers", url);
    if (!j.heads || !j.foff || !j.flen || !j.why) {
        rc = cxs_diagf(d, -ENOMEM, "%s: out of memory", url);
        goto out;
    }
    const cxs_workq q0 = {.one = meta_one, .ctx = &j, .n = n};
    if ((rc = cxs_workq_run(&q0, FETCH_THREADS, what, d))) goto out;
    uint64_t meta = man->len;
    for (uint32_t i = 0; i < n; i++) {
        if (j.why[i]) {
            if (!limit || f->dataset_bytes <= limit) {
                rc = 1;
                goto out;
            }
            rc = cxs_diagf(d, -ENOSPC, "%s/" CXS_SHARD_NAME_FMT " %s, so the dataset cannot be "
                           "streamed, and it is %llu bytes, more than the cache limit of %llu "
                           "bytes (--cache-limit, cache_limit=, CTXSHARD_CACHE_LIMIT): give a "
                           "limit of at least its size", url, i,
                           j.why[i] == 1 ? "is compressed"
                                         : "has no block sums (format 1.3's BLOCKSUMS: pack it "
                                           "again without --block-sums off)",
                           (unsigned long long)f->dataset_bytes, (unsigned long long)limit);
            goto out;
        }
        meta += sizes[i] - j.flen[i];
    }
    if (limit && meta > limit) {
        rc = cxs_diagf(d, -ENOSPC, "%s: the shards' metadata (all but the features) is %llu "
                       "bytes, more than the cache limit of %llu bytes (--cache-limit, "
                       "cache_limit=, CTXSHARD_CACHE_LIMIT)", url, (unsigned long long)meta,
                       (unsigned long long)limit);
        goto out;
    }
    if (limit && (rc = make_room_wait(root, key, 0, meta, limit, progress, user, url, d)))
        goto out;
    if ((rc = start_entry(dir, url, d))) goto out;
    /* (`reserved`, the metadata's size, stays: the entry counts at least
     * that while its metadata arrives, and never less once it is there,
     * for the metadata is never evicted) */
    snprintf(p, sizeof p, "%s/stream", dir); /* before any shard file: see fetch_impl */
    touch(p);
    j.phase = 1;
    _Atomic uint64_t received;
    _Atomic int cancel;
    cxs_origin_track((cxs_origin *)o, &received, &cancel);
    snprintf(what, sizeof what, "%s: the shards' metadata", url);
    const cxs_workq q1 = {.one = meta_one, .ctx = &j, .n = n, .progress = progress, .user = user,
                          .count = &received, .cancel = &cancel, .total = meta};
    rc = cxs_workq_run(&q1, FETCH_THREADS, what, d);
    cxs_origin_track((cxs_origin *)o, NULL, NULL);
    if (rc) goto out;
    snprintf(p, sizeof p, "%s/%s", dir, CXS_MANIFEST_NAME);
    if ((rc = write_file(p, man->buf, (size_t)man->len))) {
        rc = cxs_diagf(d, rc, "%s: %s", p, strerror(-rc));
        goto out;
    }
    snprintf(p, sizeof p, "%s/streamed", dir);
    touch(p);
    snprintf(p, sizeof p, "%s/used", dir);
    touch(p);
    f->fresh = 1;
    f->streamed = 1;
out:
    f->bytes_fetched = atomic_load(&j.fetched) + man->len;
    free(j.heads);
    free(j.foff);
    free(j.flen);
    free(j.why);
    return rc;
}

/* The server cannot be reached (why: its failure, in d): the cache's copy
 * of url, the entry of its URL (KEY's first half) used last that is
 * complete, or, to stream, that has the metadata; opened as it is, its lock
 * shared, and said so (f->offline).  Without one, the refusal names the URL
 * and the failure. */
static int open_offline(const cxs_origin *o, const char *url, const char *root, uint64_t limit,
                        int stream, cxs_fetch *f, cxs_diag *d) {
    char why[sizeof d->message];
    snprintf(why, sizeof why, "%s", d->message);
    char prefix[20];
    snprintf(prefix, sizeof prefix, "%016llx-",
             (unsigned long long)XXH3_64bits(o->base, strlen(o->base)));
    victim *v;
    size_t n;
    int rc = list_entries(root, NULL, &v, &n);
    for (size_t i = n; !rc && i-- > 0;) { /* (most recently used last) */
        if (strncmp(v[i].key, prefix, 17)) continue;
        char dir[4200], p[4400];
        snprintf(dir, sizeof dir, "%s/%s", root, v[i].key);
        if ((f->lock_fd = open_lock(root, v[i].key)) < 0) continue;
        snprintf(p, sizeof p, "%s/complete", dir);
        int complete = !lock_wait(f->lock_fd, LOCK_SH) && exists(p);
        snprintf(p, sizeof p, "%s/streamed", dir);
        if ((complete || (stream && exists(p))) &&
            (size_t)snprintf(f->local, sizeof f->local, "%s", dir) < sizeof f->local) {
            snprintf(f->root, sizeof f->root, "%s", root);
            snprintf(f->key, sizeof f->key, "%s", v[i].key);
            f->limit = limit;
            f->streamed = !complete;
            f->offline = 1;
            f->dataset_bytes = v[i].bytes;
            snprintf(p, sizeof p, "%s/used", dir);
            touch(p);
            free(v);
            return 0;
        }
        close(f->lock_fd);
        f->lock_fd = -1;
    }
    if (!rc) free(v);
    return cxs_diagf(d, -EIO, "%s (and the cache %s holds no copy of %s to open instead: "
                     "%s)", why, root, url,
                     stream ? "none complete or streamed with its metadata" : "none complete");
}

static int fetch_impl(const char *url, const char *cache_dir, uint64_t limit_given, int stream,
                      cxs_progress_fn progress, void *user, cxs_fetch *f, cxs_diag *d) {
    memset(f, 0, sizeof *f);
    f->lock_fd = -1;
    cxs_origin *o = malloc(sizeof *o);
    if (!o) return cxs_diagf(d, -ENOMEM, "%s: out of memory", url);
    int rc = cxs_origin_parse(url, o, d);
    if (!rc) o->conns = cxs_http_conns_new(FETCH_THREADS); /* (NULL: a connection a request) */
    char root[4096];
    uint64_t limit = 0;
    cxs_sink man = {.fd = -1, .cap = MANIFEST_CAP};
    uint64_t *sizes = NULL;
    if (rc || (rc = root_of(cache_dir, root, sizeof root, d)) || (rc = limit_of(limit_given, &limit, d)))
        goto out;
    /* The manifest, every time: what it says fixes the entry; when the
     * server cannot be reached (-EIO after the retries, not a refusal),
     * the cache's copy as it is. */
    if ((rc = cxs_http_get(o, CXS_MANIFEST_NAME, 0, UINT64_MAX, &man, NULL, d))) {
        if (rc == -EIO) rc = open_offline(o, url, root, limit, stream, f, d);
        goto out;
    }
    char where[2200];
    snprintf(where, sizeof where, "%s/%s", url, CXS_MANIFEST_NAME);
    cxs_container mc;
    if ((rc = cxs_container_parse(man.buf, man.len, CXS_KIND_MANIFEST, &mc, where, d))) goto out;
    const cxs_section *sm = cxs_container_find(&mc, CXS_SEC_DATASET_META);
    const cxs_section *st = cxs_container_find(&mc, CXS_SEC_SHARD_TABLE);
    cxs_dataset_meta m;
    if (!sm || !st || sm->offset + sm->length > man.len || st->offset + st->length > man.len) {
        rc = cxs_diagf(d, CXS_E_CORRUPT, "%s: no DATASET_META or SHARD_TABLE within the file",
                       where);
        goto out;
    }
    if ((rc = cxs_dataset_meta_load(man.buf + sm->offset, sm->length, &m, where, d))) goto out;
    if (st->length != (uint64_t)m.num_shards * CXS_SHARD_ENTRY_SIZE) {
        rc = cxs_diagf(d, CXS_E_CORRUPT, "%s: SHARD_TABLE holds %llu bytes for %u shards", where,
                       (unsigned long long)st->length, m.num_shards);
        goto out;
    }
    sizes = calloc(m.num_shards ? m.num_shards : 1, sizeof *sizes);
    if (!sizes) {
        rc = cxs_diagf(d, -ENOMEM, "%s: out of memory", url);
        goto out;
    }
    uint64_t need = man.len;
    for (uint32_t i = 0; i < m.num_shards; i++) {
        cxs_shard_entry se;
        cxs_shard_entry_load(man.buf + st->offset + (uint64_t)i * CXS_SHARD_ENTRY_SIZE, &se);
        sizes[i] = se.file_size;
        need += se.file_size;
    }
    f->dataset_bytes = need;
    char key[40];
    snprintf(key, sizeof key, "%016llx-%016llx",
             (unsigned long long)XXH3_64bits(o->base, strlen(o->base)),
             (unsigned long long)XXH3_64bits(man.buf, (size_t)man.len));
    char dir[4200], p[4400];
    snprintf(dir, sizeof dir, "%s/%s", root, key);
    snprintf(f->root, sizeof f->root, "%s", root);
    snprintf(f->key, sizeof f->key, "%s", key);
    f->limit = limit;
    if ((size_t)snprintf(f->local, sizeof f->local, "%s", dir) >= sizeof f->local) {
        rc = cxs_diagf(d, -ENAMETOOLONG, "%s: path too long", dir);
        goto out;
    }
    if ((f->lock_fd = open_lock(root, key)) < 0) {
        rc = cxs_diagf(d, -errno, "%s/%s.lock: %s (the cache must be writable: give another with "
                       "--cache DIR, cache=, or CTXSHARD_CACHE)", root, key, strerror(errno));
        goto out;
    }
    /* Shared first: a complete entry is opened beside every process (and
     * handle) that has it open.  Else exclusive, to fetch it, which waits
     * for another process of the node fetching it, and may then find it
     * complete. */
    snprintf(p, sizeof p, "%s/complete", dir);
    for (int op = LOCK_SH;; op = LOCK_EX) {
        snprintf(p, sizeof p, "%s/streamed", dir);
        if (op == LOCK_EX && !stream && exists(p) && flock(f->lock_fd, LOCK_EX | LOCK_NB)) {
            /* open to stream here or in another process of the node: a
             * whole fetch would wait for every one of them to close */
            rc = cxs_diagf(d, -EBUSY, "%s: open to stream (its features fetched as a block "
                           "loader reads them) by a process of this node: open it the same way "
                           "(a block-order loader, stream=True, CXS_OPEN_STREAM), or once they "
                           "have closed it", url);
            goto out;
        }
        snprintf(p, sizeof p, "%s/complete", dir);
        if ((rc = lock_entry(f->lock_fd, op, progress, user, need))) {
            rc = rc == -ECANCELED
                     ? cxs_diagf(d, rc, "%s: stopped while another process of the node fetches "
                                 "it (%s/%s.lock)", url, root, key)
                     : cxs_diagf(d, rc, "%s/%s.lock: %s", root, key, strerror(-rc));
            goto out;
        }
        if (exists(p)) { /* fetched and verified before */
            f->bytes_fetched = man.len;
            snprintf(p, sizeof p, "%s/used", dir);
            touch(p);
            goto out;
        }
        snprintf(p, sizeof p, "%s/streamed", dir);
        if (stream && exists(p)) { /* its metadata is here: the features come later */
            f->bytes_fetched = man.len;
            f->streamed = 1;
            snprintf(p, sizeof p, "%s/used", dir);
            touch(p);
            goto out;
        }
        snprintf(p, sizeof p, "%s/complete", dir);
        if (op == LOCK_EX) break;
        flock(f->lock_fd, LOCK_UN);
    }
    if (stream) {
        snprintf(p, sizeof p, "%s/stream", dir); /* a set-up cut short starts again */
        if (exists(p) && (rc = remove_entry(dir))) {
            rc = cxs_diagf(d, rc, "%s: %s", dir, strerror(-rc));
            goto out;
        }
        rc = stream_setup(o, url, root, key, dir, &man, sizes, m.num_shards, limit, progress,
                          user, f, d);
        if (rc != 1) goto out; /* set up (0), or refused */
        rc = 0;                /* cannot be streamed, fits: fetched whole */
    }
    if (limit && need > limit) {
        rc = cxs_diagf(d, -ENOSPC, "%s: the dataset is %llu bytes, more than the cache limit of "
                       "%llu bytes (--cache-limit, cache_limit=, CTXSHARD_CACHE_LIMIT): read "
                       "whole, a remote dataset is kept whole in the cache; give a limit of at "
                       "least its size, or read it in block order, which streams it (a Loader "
                       "with shuffle=\"block\", bench-read --sampler block, CXS_OPEN_STREAM)", url, (unsigned long long)need, (unsigned long long)limit);
        goto out;
    }
    /* Exclusive: a streamed entry (or a stream's set-up cut short) that is
     * to be fetched whole, or set up again, starts empty: its sparse
     * shard files are not a download to resume. */
    snprintf(p, sizeof p, "%s/stream", dir);
    if (exists(p) && (rc = remove_entry(dir))) {
        rc = cxs_diagf(d, rc, "%s: %s", dir, strerror(-rc));
        goto out;
    }
    uint64_t have = cxs_cache_dir_bytes(dir);
    if (limit && (rc = make_room_wait(root, key, have, need > have ? need - have : 0, limit,
                                      progress, user, url, d)))
        goto out;
    if ((rc = start_entry(dir, url, d))) goto out;
    job j = {.o = o, .root = root, .dir = dir, .sizes = sizes};
    atomic_init(&j.fetched, 0);
    _Atomic uint64_t received;
    _Atomic int cancel;
    cxs_origin_track(o, &received, &cancel);
    char what[2200];
    snprintf(what, sizeof what, "%s: download", url);
    const cxs_workq q = {.one = fetch_shard, .ctx = &j, .n = m.num_shards, .progress = progress,
                         .user = user, .count = &received, .cancel = &cancel, .base = have,
                         .total = need};
    rc = cxs_workq_run(&q, FETCH_THREADS, what, d);
    cxs_origin_track(o, NULL, NULL);
    f->bytes_fetched = atomic_load(&j.fetched) + man.len;
    if (rc) goto out;
    /* the manifest last: a directory with it has every shard */
    snprintf(p, sizeof p, "%s/%s", dir, CXS_MANIFEST_NAME);
    if ((rc = write_file(p, man.buf, (size_t)man.len))) {
        rc = cxs_diagf(d, rc, "%s: %s", p, strerror(-rc));
        goto out;
    }
    snprintf(p, sizeof p, "%s/used", dir);
    touch(p);
    f->fresh = 1;
out:
    if (rc && f->lock_fd >= 0) {
        close(f->lock_fd);
        f->lock_fd = -1;
    }
    free(sizes);
    free(man.buf);
    cxs_http_conns_free(o->conns);
    free(o);
    return rc;
}

int cxs_fetch_dataset(const char *url, const char *cache_dir, uint64_t limit,
                      cxs_progress_fn progress, void *user, cxs_fetch *f, cxs_diag *d) {
    return fetch_impl(url, cache_dir, limit, 0, progress, user, f, d);
}

int cxs_fetch_stream(const char *url, const char *cache_dir, uint64_t limit,
                     cxs_progress_fn progress, void *user, cxs_fetch *f, cxs_diag *d) {
    return fetch_impl(url, cache_dir, limit, 1, progress, user, f, d);
}

int cxs_fetch_done(cxs_fetch *f, int ok) {
    int fd = f->lock_fd;
    f->lock_fd = -1;
    if (fd < 0) return -1;
    char p[4200];
    if (ok && f->fresh) {
        snprintf(p, sizeof p, "%s/reserved", f->local);
        unlink(p);
        snprintf(p, sizeof p, "%s/complete", f->local);
        if (!f->streamed) touch(p); /* (a streamed entry never is) */
    } else if (!ok && f->fresh) {
        /* what failed its checks is not kept: the next open fetches again */
        remove_entry(f->local);
    }
    if (!ok) {
        close(fd);
        return -1;
    }
    if (lock_wait(fd, LOCK_SH)) { /* (a downgrade does not wait) */
        close(fd);
        return -1;
    }
    return fd;
}

int cxs_fetch_invalidate(cxs_fetch *f) {
    /* a complete entry that cannot be opened (a file gone): exclusive, then
     * removed, so that the next fetch downloads it again */
    int fd = f->lock_fd;
    f->lock_fd = -1;
    if (fd < 0) return 0;
    flock(fd, LOCK_UN);
    int rc = lock_wait(fd, LOCK_EX);
    if (!rc) rc = remove_entry(f->local);
    close(fd);
    return rc;
}

/* ---- management ---------------------------------------------------------- */

int cxs_cache_list(const char *cache_dir, cxs_cache_fn fn, void *user, cxs_diag *d) {
    char root[4096];
    int rc = cxs_cache_dir(cache_dir, root, sizeof root);
    if (rc) return cxs_diagf(d, rc, "cache directory: path too long");
    if (!exists(root)) return 0;
    victim *v;
    size_t n;
    if ((rc = list_entries(root, NULL, &v, &n))) return cxs_diagf(d, rc, "%s: %s", root, strerror(-rc));
    for (size_t i = 0; i < n && !rc; i++) {
        char dir[4200], p[4400], url[2100] = "";
        snprintf(dir, sizeof dir, "%s/%s", root, v[i].key);
        snprintf(p, sizeof p, "%s/source", dir);
        FILE *fp = fopen(p, "r");
        if (fp) {
            if (fgets(url, sizeof url, fp)) url[strcspn(url, "\n")] = 0;
            fclose(fp);
        }
        snprintf(p, sizeof p, "%s/complete", dir);
        cxs_cache_entry e = {.url = url, .dir = dir, .bytes = v[i].bytes, .last_used = v[i].used,
                             .complete = exists(p)};
        snprintf(p, sizeof p, "%s/streamed", dir);
        e.streamed = !e.complete && exists(p);
        int lfd = open_lock(root, v[i].key);
        if (lfd >= 0) {
            e.in_use = flock(lfd, LOCK_EX | LOCK_NB) != 0;
            close(lfd);
        }
        rc = fn ? fn(user, &e) : 0;
    }
    free(v);
    return rc > 0 ? 0 : rc;
}

int cxs_cache_prune(const char *cache_dir, uint64_t limit, uint64_t *freed, cxs_diag *d) {
    uint64_t f = 0;
    if (freed) *freed = 0;
    char root[4096];
    int rc = cxs_cache_dir(cache_dir, root, sizeof root);
    if (rc) return cxs_diagf(d, rc, "cache directory: path too long");
    if (!exists(root)) return 0;
    rc = cxs_cache_make_room(root, NULL, 0, 0, limit, &f, d);
    if (freed) *freed = f;
    return rc;
}

int cxs_cache_clear(const char *cache_dir, uint64_t *freed, cxs_diag *d) {
    return cxs_cache_prune(cache_dir, 0, freed, d);
}
