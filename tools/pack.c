/* pack.c - `ctxshard pack` and `ctxshard check`.
 *
 * Worker threads read, validate and convert utterances into a bounded ring
 * of slots (memory: a few utterances per thread); the main thread consumes
 * the slots strictly in id order, so the output bytes never depend on the
 * thread count.  Output is built in a temporary directory beside OUT,
 * fsynced, and renamed into place (RENAME_EXCHANGE when replacing a
 * previous dataset). */
#include "pack.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "ctxshard.h"
#include "cxs_format.h"
#include "cxs_le.h"
#include "raw.h"
#include "util.h"
#include "xsum.h"

/* ---- fault injection (testing hook) ----------------------------------- */

/* CXS_PACK_FAULT, read once at the start of a pack, lets the crash-safety
 * tests stop the packer at exact points: "kill:PHASE:N" sends SIGKILL to
 * the process the N-th time (from 0) it reaches PHASE (shard-begin, utt,
 * shard-end, manifest, rename, after-rename), "stall:PHASE:N" sleeps there
 * (for a test to send a signal meanwhile); "enospc:BYTES" makes every
 * write fail with ENOSPC once BYTES have been written.  Never set otherwise. */
static struct {
    char action[8];
    char phase[32];
    long n;
    uint64_t enospc_after; /* 0: off */
    uint64_t written;
} fault;

static void fault_init(void) {
    memset(&fault, 0, sizeof fault);
    fault.n = -1;
    const char *f = getenv("CXS_PACK_FAULT");
    if (!f) return;
    unsigned long long b;
    if (sscanf(f, "enospc:%llu", &b) == 1) fault.enospc_after = b ? b : 1;
    else if (sscanf(f, "%7[a-z]:%31[a-z-]:%ld", fault.action, fault.phase, &fault.n) != 3)
        fault.n = -1;
}

static void fault_point(const char *phase) {
    if (fault.n < 0 || strcmp(phase, fault.phase) != 0 || fault.n-- != 0) return;
    if (strcmp(fault.action, "kill") == 0) raise(SIGKILL);
    if (strcmp(fault.action, "stall") == 0) sleep(10); /* a signal ends it early */
}

/* ---- the read/convert pipeline --------------------------------------- */

typedef struct slot {
    int ready;
    int status; /* 0 ok, -1 bad input, -2 system error */
    char why[WHY_SIZE];
    utt u;
} slot;

typedef struct pipeline {
    const raw_set *rs;
    conv_opts co;
    slot *slots;
    size_t nslots, next, consumed;
    int stop;
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_ready;
    pthread_t *threads;
    unsigned nthreads;
} pipeline;

static void *worker(void *arg) {
    pipeline *p = arg;
    pthread_mutex_lock(&p->mu);
    while (!p->stop && p->next < p->rs->n) {
        if (p->next >= p->consumed + p->nslots) {
            pthread_cond_wait(&p->cv_work, &p->mu);
            continue;
        }
        size_t i = p->next++;
        slot *s = &p->slots[i % p->nslots];
        pthread_mutex_unlock(&p->mu);
        s->why[0] = 0;
        int st = utt_load(&s->u, p->rs, i, &p->co, s->why, sizeof s->why);
        pthread_mutex_lock(&p->mu);
        s->status = st;
        s->ready = 1;
        pthread_cond_broadcast(&p->cv_ready);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static int pipeline_start(pipeline *p, const raw_set *rs, const conv_opts *co, unsigned threads) {
    memset(p, 0, sizeof *p);
    p->rs = rs;
    p->co = *co;
    p->nslots = 2 * (size_t)threads + 2;
    p->slots = calloc(p->nslots, sizeof *p->slots);
    p->threads = calloc(threads, sizeof *p->threads);
    if (!p->slots || !p->threads) return -ENOMEM;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_work, NULL);
    pthread_cond_init(&p->cv_ready, NULL);
    for (unsigned t = 0; t < threads; t++) {
        if (pthread_create(&p->threads[t], NULL, worker, p) != 0) break;
        p->nthreads++;
    }
    return p->nthreads ? 0 : -EAGAIN;
}

/* Wait for utterance i (consumed in order). */
static slot *pipeline_get(pipeline *p, size_t i) {
    slot *s = &p->slots[i % p->nslots];
    pthread_mutex_lock(&p->mu);
    while (!s->ready) pthread_cond_wait(&p->cv_ready, &p->mu);
    pthread_mutex_unlock(&p->mu);
    return s;
}

static void pipeline_release(pipeline *p, size_t i) {
    pthread_mutex_lock(&p->mu);
    p->slots[i % p->nslots].ready = 0;
    p->consumed = i + 1;
    pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);
}

static void pipeline_stop(pipeline *p) {
    if (p->threads) {
        pthread_mutex_lock(&p->mu);
        p->stop = 1;
        pthread_cond_broadcast(&p->cv_work);
        pthread_mutex_unlock(&p->mu);
        for (unsigned t = 0; t < p->nthreads; t++) pthread_join(p->threads[t], NULL);
        pthread_mutex_destroy(&p->mu);
        pthread_cond_destroy(&p->cv_work);
        pthread_cond_destroy(&p->cv_ready);
    }
    if (p->slots)
        for (size_t i = 0; i < p->nslots; i++) utt_free(&p->slots[i].u);
    free(p->slots);
    free(p->threads);
    memset(p, 0, sizeof *p);
}

/* The feature width is set by the first valid utterance in id order; a
 * later one that differs becomes a problem of its own.  Returns 1 when this
 * utterance set the width. */
static int width_check(slot *s, const raw_set *rs, size_t i, uint32_t *D, const char **first) {
    if (s->status) return 0;
    if (*D == 0) {
        *D = s->u.D;
        *first = rs->items[i].mfcc;
        return 1;
    }
    if (s->u.D != *D) {
        s->status = -1;
        snprintf(s->why, sizeof s->why,
                 "%s: %u features per frame, expected %u like the first utterance (%s)",
                 rs->items[i].mfcc, s->u.D, *D, *first);
    }
    return 0;
}

/* ---- growable byte buffer -------------------------------------------- */

typedef struct bytes {
    uint8_t *p;
    size_t n, cap;
} bytes;

static int bytes_put(bytes *b, const void *src, size_t n) {
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

static int bytes_put64(bytes *b, uint64_t v) {
    uint8_t t[8];
    cxs_st64(t, v);
    return bytes_put(b, t, 8);
}

/* ---- shard writer ----------------------------------------------------- */

typedef struct swriter {
    int fd;
    char *path;
    uint32_t index;
    uint64_t U, F, first_u, first_f;
    uint64_t pos; /* bytes written so far */
    XXH3_state_t *fh;
    uint64_t feat_len;
    bytes labels, cum, idoff, ids;
} swriter;

typedef struct packer {
    const pack_opts *o;
    const char *tmpdir;
    uint32_t D;
    size_t esize;
    uint32_t lw;
    uint8_t *zero_guard; /* G zero rows */
    size_t guard_bytes;
    swriter w;
    int open;
    bytes shard_table;
    uint32_t nshards;
    uint64_t U, F, minlen, maxlen;
    xsum *s1, *s2; /* per dimension, exact over all utterances */
    uint64_t *hist;
    uint32_t vocab_n;
    bytes skipped;
    uint64_t nskipped;
    uint64_t bytes_in, bytes_out;
} packer;

static uint64_t shard_file_size(const packer *k, uint64_t U, uint64_t F, uint64_t idb) {
    uint64_t feat = (F + (U + 1) * (uint64_t)k->o->guard) * k->D * k->esize;
    uint64_t s = CXS_PAGE + cxs_align_page(feat);
    if (k->lw) s += cxs_align_page(F * k->lw);
    s += cxs_align_page(8 * (U + 1)) + cxs_align_page(8 * (U + 1) + idb) +
         cxs_align_page(CXS_SHARD_META_SIZE);
    return s;
}

static int w_write(swriter *w, const void *p, size_t n) {
    if (fault.enospc_after && fault.written + n > fault.enospc_after) return -ENOSPC;
    fault.written += n;
    int rc = write_all(w->fd, p, n);
    w->pos += n;
    return rc;
}

static int w_pad(swriter *w) {
    static const uint8_t zeros[CXS_PAGE];
    size_t pad = (size_t)(cxs_align_page(w->pos) - w->pos);
    return pad ? w_write(w, zeros, pad) : 0;
}

static int shard_begin(packer *k) {
    swriter *w = &k->w;
    memset(w, 0, sizeof *w);
    w->index = k->nshards;
    w->first_u = k->U;
    w->first_f = k->F;
    char name[64];
    snprintf(name, sizeof name, CXS_SHARD_NAME_FMT, w->index);
    w->path = path_join(k->tmpdir, name);
    w->fh = XXH3_createState();
    if (!w->path || !w->fh) return -ENOMEM;
    w->fd = open(w->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (w->fd < 0) return -errno;
    k->open = 1;
    fault_point("shard-begin");
    XXH3_64bits_reset(w->fh);
    static const uint8_t page[CXS_PAGE];
    int rc = w_write(w, page, CXS_PAGE);
    if (!rc) rc = w_write(w, k->zero_guard, k->guard_bytes);
    XXH3_64bits_update(w->fh, k->zero_guard, k->guard_bytes);
    w->feat_len = k->guard_bytes;
    if (!rc) rc = bytes_put64(&w->cum, 0);
    if (!rc) rc = bytes_put64(&w->idoff, 0);
    return rc;
}

static int shard_add(packer *k, const char *id, const utt *u) {
    swriter *w = &k->w;
    size_t fb = (size_t)u->T * k->D * k->esize;
    int rc = w_write(w, u->feat, fb);
    if (!rc) rc = w_write(w, k->zero_guard, k->guard_bytes);
    if (rc) return rc;
    XXH3_64bits_update(w->fh, u->feat, fb);
    XXH3_64bits_update(w->fh, k->zero_guard, k->guard_bytes);
    w->feat_len += fb + k->guard_bytes;
    if (k->lw && (rc = bytes_put(&w->labels, u->labels, (size_t)u->T * k->lw))) return rc;
    fault_point("utt");
    w->U++;
    w->F += u->T;
    size_t il = strlen(id);
    if ((rc = bytes_put(&w->ids, id, il)) || (rc = bytes_put64(&w->cum, w->F)) ||
        (rc = bytes_put64(&w->idoff, w->ids.n)))
        return rc;
    return 0;
}

static int put_section(swriter *w, cxs_section *s, uint32_t type, const void *p, size_t n) {
    int rc = w_pad(w);
    s->type = type;
    s->flags = CXS_SECF_REQUIRED;
    s->offset = w->pos;
    s->length = n;
    s->checksum = cxs_hash(p, n);
    return rc ? rc : w_write(w, p, n);
}

static int shard_end(packer *k) {
    swriter *w = &k->w;
    cxs_section sec[5];
    uint32_t n = 0;
    int rc = 0;
    sec[n].type = CXS_SEC_FEATURES;
    sec[n].flags = CXS_SECF_REQUIRED;
    sec[n].offset = CXS_PAGE;
    sec[n].length = w->feat_len;
    sec[n++].checksum = XXH3_64bits_digest(w->fh);
    if (k->lw) rc = put_section(w, &sec[n++], CXS_SEC_LABELS, w->labels.p, w->labels.n);
    if (!rc) rc = put_section(w, &sec[n++], CXS_SEC_INDEX, w->cum.p, w->cum.n);
    bytes ids = {0};
    if (!rc && !(rc = bytes_put(&ids, w->idoff.p, w->idoff.n)) &&
        !(rc = bytes_put(&ids, w->ids.p, w->ids.n)))
        rc = put_section(w, &sec[n++], CXS_SEC_IDS, ids.p, ids.n);
    free(ids.p);
    uint8_t meta[CXS_SHARD_META_SIZE];
    cxs_shard_meta m = {w->index, k->D, w->U, w->F, w->first_u, w->first_f, k->o->guard,
                        (uint16_t)k->o->dtype, (uint16_t)k->lw};
    cxs_shard_meta_store(meta, &m);
    if (!rc) rc = put_section(w, &sec[n++], CXS_SEC_SHARD_META, meta, sizeof meta);
    if (!rc) rc = w_pad(w);
    uint8_t page[CXS_PAGE];
    uint64_t h = cxs_container_build(page, CXS_KIND_SHARD, w->pos, sec, n);
    if (!rc && pwrite(w->fd, page, CXS_PAGE, 0) != (ssize_t)CXS_PAGE) rc = errno ? -errno : -EIO;
    if (!rc && fsync(w->fd) != 0) rc = -errno;
    if (close(w->fd) != 0 && !rc) rc = -errno;
    w->fd = -1;
    k->open = 0;
    fault_point("shard-end");
    if (!rc) {
        uint8_t e[CXS_SHARD_ENTRY_SIZE];
        cxs_shard_entry se = {w->pos, h, w->U, w->F, w->first_u, w->first_f};
        cxs_shard_entry_store(e, &se);
        rc = bytes_put(&k->shard_table, e, sizeof e);
        k->nshards++;
        k->bytes_out += w->pos;
    }
    return rc;
}

static void swriter_free(swriter *w) {
    if (w->fd > 0) close(w->fd);
    free(w->path);
    if (w->fh) XXH3_freeState(w->fh);
    free(w->labels.p);
    free(w->cum.p);
    free(w->idoff.p);
    free(w->ids.p);
    memset(w, 0, sizeof *w);
}

/* Add one valid utterance: shard rollover, write, statistics. */
static int packer_add(packer *k, const char *id, const utt *u) {
    size_t il = strlen(id);
    if (k->open && k->w.U > 0 &&
        shard_file_size(k, k->w.U + 1, k->w.F + u->T, k->w.ids.n + il) > k->o->shard_size) {
        int rc = shard_end(k);
        swriter_free(&k->w);
        if (rc) return rc;
    }
    if (!k->open) {
        int rc = shard_begin(k);
        if (rc) return rc;
    }
    int rc = shard_add(k, id, u);
    if (rc) return rc;
    for (uint32_t d = 0; d < k->D; d++) {
        xsum_add(&k->s1[d], u->sum[d]);
        xsum_add(&k->s2[d], u->sumsq[d]);
    }
    if (k->lw)
        for (uint64_t t = 0; t < u->T; t++)
            k->hist[k->lw == 1 ? u->labels[t] : cxs_ld16(u->labels + 2 * t)]++;
    k->U++;
    k->F += u->T;
    if (u->T < k->minlen) k->minlen = u->T;
    if (u->T > k->maxlen) k->maxlen = u->T;
    return 0;
}

static int write_manifest(packer *k, const vocab *v) {
    char *path = path_join(k->tmpdir, CXS_MANIFEST_NAME);
    if (!path) return -ENOMEM;
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    free(path);
    if (fd < 0) return -errno;
    swriter w = {.fd = fd, .pos = 0};
    cxs_section sec[5];
    uint32_t n = 0;
    static const uint8_t page0[CXS_PAGE];
    int rc = w_write(&w, page0, CXS_PAGE);
    uint8_t meta[CXS_DATASET_META_SIZE];
    cxs_dataset_meta m = {k->U, k->F, k->nshards, k->D, k->o->guard, (uint16_t)k->o->dtype,
                          (uint16_t)k->lw, k->vocab_n, k->o->normalize, k->o->shard_size,
                          k->nskipped, (uint32_t)k->o->skip_bad};
    cxs_dataset_meta_store(meta, &m);
    if (!rc) rc = put_section(&w, &sec[n++], CXS_SEC_DATASET_META, meta, sizeof meta);
    if (!rc) rc = put_section(&w, &sec[n++], CXS_SEC_SHARD_TABLE, k->shard_table.p, k->shard_table.n);
    bytes b = {0};
    if (!rc && k->vocab_n) {
        uint64_t off = 0;
        for (uint32_t i = 0; i <= v->n && !rc; i++) {
            rc = bytes_put64(&b, off);
            if (i < v->n) off += v->lens[i];
        }
        for (uint32_t i = 0; i < v->n && !rc; i++) rc = bytes_put(&b, v->sym[i], v->lens[i]);
        if (!rc) rc = put_section(&w, &sec[n++], CXS_SEC_VOCAB, b.p, b.n);
        b.n = 0;
    }
    if (!rc) {
        /* Statistics of the stored values: exact sums rounded once. */
        uint8_t t[8];
        rc = bytes_put64(&b, k->F);
        if (!rc) rc = bytes_put64(&b, k->minlen);
        if (!rc) rc = bytes_put64(&b, k->maxlen);
        if (!rc) rc = bytes_put64(&b, 0);
        double *mean = malloc(k->D * sizeof *mean);
        if (!mean) rc = -ENOMEM;
        for (uint32_t d = 0; d < k->D && !rc; d++) {
            mean[d] = xsum_value(&k->s1[d]) / (double)k->F;
            cxs_stf64(t, mean[d]);
            rc = bytes_put(&b, t, 8);
        }
        for (uint32_t d = 0; d < k->D && !rc; d++) {
            double var = xsum_value(&k->s2[d]) / (double)k->F - mean[d] * mean[d];
            cxs_stf64(t, var > 0 ? var : 0.0);
            rc = bytes_put(&b, t, 8);
        }
        free(mean);
        for (uint32_t l = 0; l < k->vocab_n && !rc; l++) rc = bytes_put64(&b, k->hist[l]);
        if (!rc) rc = put_section(&w, &sec[n++], CXS_SEC_STATS, b.p, b.n);
    }
    free(b.p);
    if (!rc && k->skipped.n) {
        rc = put_section(&w, &sec[n], CXS_SEC_SKIPPED, k->skipped.p, k->skipped.n);
        sec[n++].flags = 0; /* informational: readers may ignore it */
    }
    if (!rc) rc = w_pad(&w);
    fault_point("manifest"); /* sections written, header page not yet */
    uint8_t page[CXS_PAGE];
    cxs_container_build(page, CXS_KIND_MANIFEST, w.pos, sec, n);
    k->bytes_out += w.pos;
    if (!rc && pwrite(fd, page, CXS_PAGE, 0) != (ssize_t)CXS_PAGE) rc = errno ? -errno : -EIO;
    if (!rc && fsync(fd) != 0) rc = -errno;
    if (close(fd) != 0 && !rc) rc = -errno;
    return rc;
}

/* ---- output directory ------------------------------------------------- */

static int out_state(const char *out, int *replace) {
    struct stat st;
    *replace = 0;
    if (lstat(out, &st) != 0) return errno == ENOENT ? 0 : -errno;
    if (!S_ISDIR(st.st_mode)) return 1;
    char *m = path_join(out, CXS_MANIFEST_NAME);
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

/* The temporary directory's name carries this host and process, so that a
 * later pack can tell what a killed pack left from what a running one is
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

static char *make_tmpdir(const char *out) {
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

/* Remove what packs of OUT on this host left when they were killed: their
 * temporary directories whose process no longer exists. */
static void remove_stale(const char *out, int quiet) {
    char *parent, *base, host[40];
    if (split_out(out, &parent, &base)) return;
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
            char *p = path_join(parent, e->d_name);
            if (p && remove_tree(p) == 0 && !quiet)
                warnx_("removed %s, left by an interrupted pack", p);
            free(p);
        }
        closedir(d);
    }
    free(prefix);
    free(parent);
    free(base);
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

static int commit_output(const char *tmp, const char *out, int replace) {
    int rc = fsync_path(tmp, 1);
    if (rc) return rc;
    fault_point("rename");
    if (replace) {
        if (renameat2(AT_FDCWD, tmp, AT_FDCWD, out, RENAME_EXCHANGE) == 0) {
            /* tmp now holds the previous dataset */
            parent_fsync(out);
            fault_point("after-rename");
            remove_tree(tmp);
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
        if (rename(tmp, out) != 0) {
            int e = errno;
            rename(old, out);
            free(old);
            return -e;
        }
        parent_fsync(out);
        remove_tree(old);
        free(old);
        return 0;
    }
    if (rename(tmp, out) != 0) return -errno;
    rc = parent_fsync(out);
    fault_point("after-rename");
    return rc;
}

/* ---- the commands ----------------------------------------------------- */

static int load_vocab(const char *path, vocab *v) {
    char why[WHY_SIZE];
    if (path ? vocab_load(v, path, why, sizeof why) : vocab_default(v)) {
        warnx_("%s", path ? why : "out of memory");
        vocab_free(v);
        return path ? EXIT_USAGE : EXIT_SYSTEM;
    }
    return 0;
}

/* List RAW and load the vocabulary its transcripts need (none without
 * transcripts).  Returns 0 or an exit code, having printed why. */
static int open_raw(const char *rawdir, const char *vocab_path, raw_set *rs, vocab *v) {
    char why[WHY_SIZE];
    memset(v, 0, sizeof *v);
    if (raw_list(rawdir, rs, why, sizeof why)) {
        warnx_("%s", why);
        return EXIT_DATA;
    }
    int ec = rs->has_transcripts ? load_vocab(vocab_path, v) : 0;
    if (ec) raw_free(rs);
    return ec;
}

int pack_run(const char *rawdir, const char *out, const pack_opts *o) {
    raw_set rs;
    vocab v;
    int ec = open_raw(rawdir, o->vocab_path, &rs, &v), rc = 0;
    if (ec) return ec;
    packer k;
    memset(&k, 0, sizeof k);
    pipeline p = {0};
    char *tmp = NULL;
    int replace;
    double t0 = now_seconds();
    int st = out_state(out, &replace);
    if (st < 0) {
        warnx_("%s: %s", out, strerror(-st));
        ec = EXIT_SYSTEM;
        goto out;
    }
    if (st > 0) {
        warnx_("%s: exists and is not a ctxshard dataset (no %s); refusing to replace it", out,
               CXS_MANIFEST_NAME);
        ec = EXIT_USAGE;
        goto out;
    }
    install_signal_flag(); /* before anything exists that a signal would strand */
    remove_stale(out, o->quiet);
    tmp = make_tmpdir(out);
    if (!tmp) {
        warnx_("%s: cannot create a temporary directory beside it: %s", out, strerror(errno));
        ec = EXIT_SYSTEM;
        goto out;
    }
    fault_init();
    conv_opts co = {o->dtype, o->normalize, rs.has_transcripts ? &v : NULL};
    k.o = o;
    k.tmpdir = tmp;
    k.esize = cxs_dtype_size(o->dtype);
    k.vocab_n = rs.has_transcripts ? v.n : 0;
    k.lw = k.vocab_n == 0 ? 0 : k.vocab_n <= 256 ? 1 : 2;
    k.minlen = UINT64_MAX;
    k.hist = calloc(k.vocab_n + 1, sizeof *k.hist);
    if (!k.hist || (rc = pipeline_start(&p, &rs, &co, o->threads))) {
        rc = rc ? rc : -ENOMEM;
        goto sysfail;
    }
    progress bar;
    progress_init(&bar, "pack", o->quiet);
    const char *first_path = NULL;
    for (size_t i = 0; i < rs.n; i++) {
        if (g_interrupted) {
            warnx_("%s: interrupted; nothing written", out);
            ec = EXIT_SYSTEM;
            goto out;
        }
        slot *s = pipeline_get(&p, i);
        if (s->status == -2) {
            warnx_("%s", s->why);
            ec = EXIT_SYSTEM;
            goto out;
        }
        if (width_check(s, &rs, i, &k.D, &first_path)) {
            k.guard_bytes = (size_t)o->guard * k.D * k.esize;
            k.zero_guard = calloc(1, k.guard_bytes + 1);
            k.s1 = calloc(k.D, sizeof *k.s1);
            k.s2 = calloc(k.D, sizeof *k.s2);
            if (!k.zero_guard || !k.s1 || !k.s2) {
                rc = -ENOMEM;
                goto sysfail;
            }
        }
        if (s->status == -1) {
            if (!o->skip_bad) {
                warnx_("%s", s->why);
                warnx_("nothing written (use --on-error skip to leave bad utterances out, or "
                       "`ctxshard check %s` to list every problem)", rawdir);
                ec = EXIT_DATA;
                goto out;
            }
            if (!o->quiet) warnx_("skipped: %s", s->why);
            k.nskipped++;
            if ((rc = bytes_put(&k.skipped, rs.items[i].id, strlen(rs.items[i].id))) ||
                (rc = bytes_put(&k.skipped, "\t", 1)) ||
                (rc = bytes_put(&k.skipped, s->why, strlen(s->why))) ||
                (rc = bytes_put(&k.skipped, "\n", 1)))
                goto sysfail;
        } else {
            const raw_item *it = &rs.items[i];
            k.bytes_in += s->u.file_bytes;
            if ((rc = packer_add(&k, it->id, &s->u))) goto sysfail;
        }
        pipeline_release(&p, i);
        progress_update(&bar, i + 1, rs.n, "utterances");
    }
    progress_done(&bar);
    pipeline_stop(&p);
    if (k.U == 0) {
        warnx_("%s: no valid utterance to pack (%llu skipped); nothing written", rawdir,
               (unsigned long long)k.nskipped);
        ec = EXIT_DATA;
        goto out;
    }
    if ((rc = shard_end(&k)) || (rc = write_manifest(&k, &v))) goto sysfail;
    if ((rc = commit_output(tmp, out, replace))) goto sysfail;
    free(tmp);
    tmp = NULL;
    if (!o->quiet) {
        double dt = now_seconds() - t0;
        char a[32], b[32];
        uint64_t outb = k.bytes_out;
        printf("packed %llu utterances, %llu frames x %u dims (%s) into %u shard%s in %s\n",
               (unsigned long long)k.U, (unsigned long long)k.F, k.D, cxs_dtype_name(o->dtype),
               k.nshards, k.nshards == 1 ? "" : "s", out);
        printf("  read %s, wrote %s in %.2f s (%.0f MB/s of input, %.0f frames/s)\n",
               human_bytes((double)k.bytes_in, a, sizeof a), human_bytes((double)outb, b, sizeof b),
               dt, (double)k.bytes_in / dt / 1e6, (double)k.F / dt);
        if (k.nskipped)
            printf("  skipped %llu bad utterance%s (listed in the dataset: ctxshard info %s)\n",
                   (unsigned long long)k.nskipped, k.nskipped == 1 ? "" : "s", out);
    }
    goto out;
sysfail:
    warnx_("%s: %s; nothing written", out, strerror(-rc));
    ec = EXIT_SYSTEM;
out:
    pipeline_stop(&p);
    if (k.open) close(k.w.fd);
    k.w.fd = -1;
    swriter_free(&k.w);
    if (tmp) {
        remove_tree(tmp);
        free(tmp);
    }
    free(k.zero_guard);
    free(k.s1);
    free(k.s2);
    free(k.hist);
    free(k.shard_table.p);
    free(k.skipped.p);
    vocab_free(&v);
    raw_free(&rs);
    return ec;
}

int check_run(const char *rawdir, const char *vocab_path, unsigned threads, int quiet) {
    raw_set rs;
    vocab v;
    int ec = open_raw(rawdir, vocab_path, &rs, &v);
    if (ec) return ec;
    conv_opts co = {CXS_DTYPE_F32, CXS_NORM_NONE, rs.has_transcripts ? &v : NULL};
    pipeline p;
    if (pipeline_start(&p, &rs, &co, threads)) {
        warnx_("cannot start threads");
        pipeline_stop(&p);
        vocab_free(&v);
        raw_free(&rs);
        return EXIT_SYSTEM;
    }
    progress bar;
    progress_init(&bar, "check", quiet);
    uint32_t D = 0;
    const char *first = NULL;
    uint64_t problems = 0, good = 0, frames = 0;
    for (size_t i = 0; i < rs.n; i++) {
        slot *s = pipeline_get(&p, i);
        width_check(s, &rs, i, &D, &first);
        if (s->status) {
            progress_done(&bar);
            fprintf(stderr, "%s\n", s->why);
            problems++;
            if (s->status == -2) ec = EXIT_SYSTEM;
        } else {
            good++;
            frames += s->u.T;
        }
        pipeline_release(&p, i);
        progress_update(&bar, i + 1, rs.n, "utterances");
    }
    progress_done(&bar);
    pipeline_stop(&p);
    printf("%s: %llu utterances checked, %llu valid (%llu frames, dim %u, %s), %llu problem%s\n",
           rawdir, (unsigned long long)rs.n, (unsigned long long)good,
           (unsigned long long)frames, D, rs.has_transcripts ? "with transcripts" : "features only",
           (unsigned long long)problems, problems == 1 ? "" : "s");
    vocab_free(&v);
    raw_free(&rs);
    if (ec) return ec;
    return problems ? EXIT_DATA : 0;
}
