/* writer_out.c - where a writer's output goes: OUT's state, the temporary
 * directory beside it, the removal of what killed writers left, and the
 * atomic commit (fsync, rename or RENAME_EXCHANGE, fsync of the parent).
 * Also the fault-injection hook the crash-safety tests drive (compiled
 * in only by -Dtest_hooks=true), and the byte output every file of a
 * writer goes through. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cxs_le.h"
#include "writer_internal.h"

/* CXS_PACK_FAULT, read when a writer is created, lets the crash-safety
 * tests stop a writer at exact points: "kill:PHASE:N" sends SIGKILL to the
 * process the N-th time (from 0) it reaches PHASE (shard-begin, utt,
 * shard-end, manifest, rename, after-rename; a merge reaches shard-end
 * after each shard it places), "stall:PHASE:N" sleeps there
 * (for a test to send a signal meanwhile); "enospc:BYTES" makes every
 * write fail with ENOSPC once BYTES have been written (a merge counts the
 * shards it copies).  Only in test builds (CXS_TEST_HOOKS, meson
 * -Dtest_hooks=true): a library users install reads no such variable and
 * its writers never fail on purpose. */
void cxs_wfault_init(cxs_wfault *f) {
    memset(f, 0, sizeof *f);
    f->n = -1;
#ifdef CXS_TEST_HOOKS
    const char *e = getenv("CXS_PACK_FAULT");
    if (!e) return;
    unsigned long long b;
    if (sscanf(e, "enospc:%llu", &b) == 1) f->enospc_after = b ? b : 1;
    else if (sscanf(e, "%7[a-z]:%31[a-z-]:%ld", f->action, f->phase, &f->n) != 3)
        f->n = -1;
#endif
}

void cxs_wfault_point(cxs_wfault *f, const char *phase) {
#ifdef CXS_TEST_HOOKS
    if (f->n < 0 || strcmp(phase, f->phase) != 0 || f->n-- != 0) return;
    if (strcmp(f->action, "kill") == 0) raise(SIGKILL);
    if (strcmp(f->action, "stall") == 0) sleep(10); /* a signal ends it early */
#else
    (void)f;
    (void)phase;
#endif
}

char *cxs_path_join(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    char *p = malloc(la + lb + 2);
    if (!p) return NULL;
    memcpy(p, a, la);
    size_t o = la;
    if (!la || a[la - 1] != '/') p[o++] = '/'; /* "RAW/" + "mfcc": one slash */
    memcpy(p + o, b, lb + 1);
    return p;
}

int cxs_write_all(int fd, const void *buf, size_t n) {
    const uint8_t *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int fsync_path(const char *path, int is_dir) {
    int fd = open(path, (is_dir ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
    if (fd < 0) return -errno;
    int rc = fsync(fd) ? -errno : 0;
    close(fd);
    return rc;
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st;
    (void)ftw;
    return flag == FTW_DP ? rmdir(p) : unlink(p);
}

int cxs_remove_tree(const char *path) {
    if (nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS) != 0) return -errno;
    return 0;
}

int cxs_out_state(const char *out, const char *marker, int *replace) {
    struct stat st;
    *replace = 0;
    if (lstat(out, &st) != 0) return errno == ENOENT ? 0 : -errno;
    if (!S_ISDIR(st.st_mode)) return 1;
    char *m = cxs_path_join(out, marker);
    if (!m) return -ENOMEM;
    int has = access(m, F_OK) == 0;
    free(m);
    if (has) {
        *replace = 1;
        return 0;
    }
    if (rmdir(out) == 0) return 0; /* an empty directory: take its place */
    return 1;
}

/* Split OUT into its parent directory and base name (trailing slashes
 * ignored); both malloc'd. */
static int split_out(const char *out, char **parent, char **base) {
    char *copy = strdup(out);
    if (!copy) return -1;
    size_t n = strlen(copy);
    while (n > 1 && copy[n - 1] == '/') copy[--n] = 0;
    char *slash = strrchr(copy, '/');
    *base = strdup(slash ? slash + 1 : copy);
    if (slash) *slash = 0;
    *parent = strdup(slash ? (slash == copy ? "/" : copy) : ".");
    free(copy);
    return *base && *parent ? 0 : -1;
}

int cxs_make_parents(const char *out, char **made, char **bad) {
    char *parent, *base;
    *made = *bad = NULL;
    if (split_out(out, &parent, &base)) return -ENOMEM;
    free(base);
    struct stat st;
    int rc = 0;
    if (stat(parent, &st) == 0) {
        if (!S_ISDIR(st.st_mode)) {
            *bad = parent;
            return -ENOTDIR;
        }
        free(parent);
        return 0;
    }
    /* Each prefix in turn, from the root down: what exists is passed. */
    size_t n = strlen(parent);
    for (size_t i = 1; i <= n && !rc; i++) {
        if (i < n && parent[i] != '/') continue;
        if (i < n && parent[i - 1] == '/') continue; /* "a//b" */
        char c = parent[i];
        parent[i] = 0;
        if (mkdir(parent, 0777) == 0) {
            if (!*made && !(*made = strdup(parent))) rc = -ENOMEM;
        } else if (errno != EEXIST) {
            rc = -errno;
        } else if (stat(parent, &st) != 0 || !S_ISDIR(st.st_mode)) {
            rc = -ENOTDIR;
        }
        if (rc && rc != -ENOMEM) *bad = strdup(parent);
        parent[i] = c;
    }
    free(parent);
    if (rc && *made) {
        cxs_remove_parents(out, *made);
        free(*made);
        *made = NULL;
    }
    return rc;
}

void cxs_remove_parents(const char *out, const char *made) {
    char *parent, *base;
    if (!made || split_out(out, &parent, &base)) return;
    free(base);
    size_t top = strlen(made);
    for (;;) {
        size_t n = strlen(parent);
        if (n < top || rmdir(parent) != 0 || n == top) break;
        char *slash = strrchr(parent, '/');
        if (!slash) break;
        while (slash > parent && slash[-1] == '/') slash--;
        *slash = 0;
    }
    free(parent);
}

/* The temporary directory's name carries this host and process, so that a
 * later writer can tell what a killed one left from what a running one is
 * writing: ".OUT.tmp-HOST-PID-XXXXXX". */
static void host_tag(char *buf, size_t n) {
    char h[256] = "host";
    gethostname(h, sizeof h - 1);
    size_t j = 0;
    for (size_t i = 0; h[i] && j + 1 < n && j < 32; i++)
        if ((h[i] >= 'a' && h[i] <= 'z') || (h[i] >= 'A' && h[i] <= 'Z') || (h[i] >= '0' && h[i] <= '9'))
            buf[j++] = h[i];
    buf[j] = 0;
}

char *cxs_make_tmpdir(const char *out) {
    char *parent, *base, host[40];
    if (split_out(out, &parent, &base)) return NULL;
    host_tag(host, sizeof host);
    size_t l = strlen(parent) + strlen(base) + 96;
    char *t = malloc(l);
    if (t) {
        snprintf(t, l, "%s/.%s.tmp-%s-%ld-XXXXXX", parent, base, host, (long)getpid());
        if (!mkdtemp(t)) {
            free(t);
            t = NULL;
        } else {
            /* mkdtemp makes it 0700; the dataset gets the usual mode. */
            mode_t um = umask(0);
            umask(um);
            chmod(t, 0777 & ~um);
        }
    }
    free(parent);
    free(base);
    return t;
}

uint32_t cxs_remove_stale(const char *out) {
    char *parent, *base, host[40];
    uint32_t removed = 0;
    if (split_out(out, &parent, &base)) return 0;
    host_tag(host, sizeof host);
    size_t pl = strlen(base) + strlen(host) + 16;
    char *prefix = malloc(pl);
    DIR *d = prefix ? opendir(parent) : NULL;
    if (d) {
        snprintf(prefix, pl, ".%s.tmp-%s-", base, host);
        size_t n = strlen(prefix);
        struct dirent *e;
        while ((e = readdir(d))) {
            if (strncmp(e->d_name, prefix, n) != 0) continue;
            char *end;
            long pid = strtol(e->d_name + n, &end, 10);
            if (end == e->d_name + n || *end != '-' || pid <= 0 || pid == (long)getpid()) continue;
            if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* alive, or unknown */
            char *p = cxs_path_join(parent, e->d_name);
            if (p && cxs_remove_tree(p) == 0) removed++;
            free(p);
        }
        closedir(d);
    }
    free(prefix);
    free(parent);
    free(base);
    return removed;
}

static int parent_fsync(const char *out) {
    char *copy = strdup(out);
    if (!copy) return -ENOMEM;
    size_t n = strlen(copy);
    while (n > 1 && copy[n - 1] == '/') copy[--n] = 0;
    char *slash = strrchr(copy, '/');
    int rc;
    if (!slash) rc = fsync_path(".", 1);
    else if (slash == copy) rc = fsync_path("/", 1);
    else {
        *slash = 0;
        rc = fsync_path(copy, 1);
    }
    free(copy);
    return rc;
}

static int holds_marker(const char *dir, const char *marker) {
    char *m = cxs_path_join(dir, marker);
    struct stat st;
    int has = m && lstat(m, &st) == 0 && S_ISREG(st.st_mode);
    free(m);
    return has;
}

int cxs_commit_output(cxs_wfault *f, const char *tmp, const char *out, const char *marker) {
    int rc = fsync_path(tmp, 1);
    if (rc) return rc;
    cxs_wfault_point(f, "rename");
    /* OUT as it is now: it may have changed since the writer was created */
    int replace, st = cxs_out_state(out, marker, &replace);
    if (st < 0) return st;
    if (st > 0) return -EEXIST;
    if (replace) {
        if (renameat2(AT_FDCWD, tmp, AT_FDCWD, out, RENAME_EXCHANGE) == 0) {
            /* tmp now holds the previous output; if it was swapped for
             * something else after the check above, put that back */
            if (!holds_marker(tmp, marker)) {
                if (renameat2(AT_FDCWD, tmp, AT_FDCWD, out, RENAME_EXCHANGE) != 0) return -errno;
                return -EEXIST;
            }
            parent_fsync(out);
            cxs_wfault_point(f, "after-rename");
            cxs_remove_tree(tmp);
            return 0;
        }
        if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP) return -errno;
        /* No atomic exchange on this filesystem: move the old dataset aside
         * first.  A crash in between leaves it complete under the .old name. */
        size_t l = strlen(tmp) + 8;
        char *old = malloc(l);
        if (!old) return -ENOMEM;
        snprintf(old, l, "%s.old", tmp);
        if (rename(out, old) != 0) {
            int e = errno;
            free(old);
            return -e;
        }
        if (!holds_marker(old, marker)) { /* swapped after the check: not ours */
            int e = rename(old, out) != 0 ? errno : EEXIST;
            free(old);
            return -e;
        }
        if (rename(tmp, out) != 0) {
            int e = errno;
            rename(old, out);
            free(old);
            return -e;
        }
        parent_fsync(out);
        cxs_remove_tree(old);
        free(old);
        return 0;
    }
    if (rename(tmp, out) != 0) return -errno;
    rc = parent_fsync(out);
    cxs_wfault_point(f, "after-rename");
    return rc;
}

/* ---- bytes out ------------------------------------------------------- */

int cxs_bytes_put(bytes *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        size_t nc = b->cap ? b->cap : 4096;
        while (nc < b->n + n) nc *= 2;
        uint8_t *np = realloc(b->p, nc);
        if (!np) return -ENOMEM;
        b->p = np;
        b->cap = nc;
    }
    if (n) memcpy(b->p + b->n, src, n);
    b->n += n;
    return 0;
}

int cxs_bytes_put64(bytes *b, uint64_t v) {
    uint8_t t[8];
    cxs_st64(t, v);
    return cxs_bytes_put(b, t, 8);
}

/* Start the disk's writeback of every WRITEBACK_STEP bytes written, so
 * that it overlaps the rest of the file and the fsync at its end waits
 * for the last few megabytes only, not for the whole shard (the kernel
 * alone starts only at its dirty threshold, gigabytes away). */
#define WRITEBACK_STEP (8ull << 20)

static int w_out(swriter *w, const void *p, size_t n) {
    const uint64_t from = w->flushed;
    int rc = cxs_write_all(w->fd, p, n);
    if (rc) return rc;
    w->flushed += n;
#ifdef SYNC_FILE_RANGE_WRITE
    if (w->flushed / WRITEBACK_STEP != from / WRITEBACK_STEP) {
        uint64_t a = from / WRITEBACK_STEP * WRITEBACK_STEP;
        uint64_t b = w->flushed / WRITEBACK_STEP * WRITEBACK_STEP;
        (void)sync_file_range(w->fd, (off64_t)a, (off64_t)(b - a), SYNC_FILE_RANGE_WRITE);
    }
#endif
    return 0;
}

int cxs_w_flush(swriter *w) {
    if (!w->bn) return 0;
    size_t n = w->bn;
    w->bn = 0;
    return w_out(w, w->buf, n);
}

int cxs_w_write(cxs_writer *k, swriter *w, const void *p, size_t n) {
    cxs_wfault *f = &k->fault;
    /* The injected budget counts the bytes the writer writes, buffered or
     * not: the same call fails whatever the buffer holds. */
    if (f->enospc_after && f->written + n > f->enospc_after) return -ENOSPC;
    f->written += n;
    w->pos += n;
    if (!w->buf) return w_out(w, p, n);
    const uint8_t *s = p;
    while (n) {
        if (w->bn == 0 && n >= CXS_WBUF_SIZE) {
            /* whole buffers' worth straight from the caller: no copy */
            size_t whole = n / CXS_WBUF_SIZE * CXS_WBUF_SIZE;
            int rc = w_out(w, s, whole);
            if (rc) return rc;
            s += whole;
            n -= whole;
            continue;
        }
        size_t take = CXS_WBUF_SIZE - w->bn < n ? CXS_WBUF_SIZE - w->bn : n;
        memcpy(w->buf + w->bn, s, take);
        w->bn += take;
        s += take;
        n -= take;
        if (w->bn == CXS_WBUF_SIZE) {
            int rc = cxs_w_flush(w);
            if (rc) return rc;
        }
    }
    return 0;
}

int cxs_w_pad(cxs_writer *k, swriter *w) {
    static const uint8_t zeros[CXS_PAGE];
    size_t pad = (size_t)(cxs_align_page(w->pos) - w->pos);
    return pad ? cxs_w_write(k, w, zeros, pad) : 0;
}

int cxs_put_section(cxs_writer *k, swriter *w, cxs_section *s, uint32_t type, const void *p,
                    size_t n) {
    int rc = cxs_w_pad(k, w);
    s->type = type;
    s->flags = CXS_SECF_REQUIRED;
    s->offset = w->pos;
    s->length = n;
    s->checksum = cxs_hash(p, n);
    return rc ? rc : cxs_w_write(k, w, p, n);
}
