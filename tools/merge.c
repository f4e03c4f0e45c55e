/* merge.c - `ctxshard merge PART... OUT`: partial datasets (pack --part
 * I/N) into one, byte-identical to a single pack. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include "ctxshard.h"
#include "cxs_format.h"
#include "cxs_le.h"
#include "cxs_xsum.h"
#include "pack.h"
#include "util.h"

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

static void fault_point(const char *phase) {
    if (fault.n < 0 || strcmp(phase, fault.phase) != 0 || fault.n-- != 0) return;
    if (strcmp(fault.action, "kill") == 0) raise(SIGKILL);
    if (strcmp(fault.action, "stall") == 0) sleep(10); /* a signal ends it early */
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
    uint64_t feat_len;  /* FEATURES bytes (decoded, when compressed) */
    uint64_t zlen;      /* compressed: ZFEATURES bytes written */
    bytes labels, cum, idoff, ids, chunks;
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
    cxs_xsum *s1, *s2; /* per dimension, exact over all utterances */
    uint64_t *hist;
    uint32_t vocab_n;
    bytes skipped;
    uint64_t nskipped;
    uint64_t bytes_in, bytes_out, feat_out;
    /* Shard numbering: a part's shards follow the shards of earlier parts. */
    uint32_t index_base;
    uint64_t u_base, f_base;
    const uint32_t *member; /* shard of every listed utterance (pack), or NULL */
    uint32_t cur_member;
    /* Compression (format 1.1). */
    uint32_t minor;
    uint32_t chunk_rows;
    size_t chunk_bytes, cfill, zcap;
    uint8_t *cbuf, *zbuf, *scratch;
    ZSTD_CCtx *cc;
} packer;

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

static int put_section(swriter *w, cxs_section *s, uint32_t type, const void *p, size_t n) {
    int rc = w_pad(w);
    s->type = type;
    s->flags = CXS_SECF_REQUIRED;
    s->offset = w->pos;
    s->length = n;
    s->checksum = cxs_hash(p, n);
    return rc ? rc : w_write(w, p, n);
}

static void swriter_free(swriter *w) {
    if (w->fd > 0) close(w->fd);
    free(w->path);
    if (w->fh) XXH3_freeState(w->fh);
    free(w->labels.p);
    free(w->cum.p);
    free(w->idoff.p);
    free(w->ids.p);
    free(w->chunks.p);
    memset(w, 0, sizeof *w);
}

/* The STATS section from the exact sums (spec 7.3). */
static int stats_bytes(const packer *k, bytes *b) {
    uint8_t t[8];
    int rc = bytes_put64(b, k->F);
    if (!rc) rc = bytes_put64(b, k->minlen);
    if (!rc) rc = bytes_put64(b, k->maxlen);
    if (!rc) rc = bytes_put64(b, 0);
    double *mean = malloc((k->D + 1) * sizeof *mean);
    if (!mean) rc = -ENOMEM;
    for (uint32_t d = 0; d < k->D && !rc; d++) {
        mean[d] = cxs_xsum_value(&k->s1[d]) / (double)k->F;
        cxs_stf64(t, mean[d]);
        rc = bytes_put(b, t, 8);
    }
    for (uint32_t d = 0; d < k->D && !rc; d++) {
        double var = cxs_xsum_value(&k->s2[d]) / (double)k->F - mean[d] * mean[d];
        cxs_stf64(t, var > 0 ? var : 0.0);
        rc = bytes_put(b, t, 8);
    }
    free(mean);
    for (uint32_t l = 0; l < k->vocab_n && !rc; l++) rc = bytes_put64(b, k->hist[l]);
    return rc;
}


/* What a manifest (or a part's manifest) holds beyond the packer's state. */
typedef struct index_file {
    uint32_t kind;           /* CXS_KIND_MANIFEST or CXS_KIND_PART */
    const bytes *vocab;      /* VOCAB bytes (k->vocab_n > 0) */
    const bytes *stats;      /* STATS (manifest) or PART_SUMS (part) */
    const uint8_t *part_meta; /* part: CXS_PART_META_SIZE bytes */
} index_file;

static int write_index(packer *k, const index_file *x) {
    const char *name = x->kind == CXS_KIND_PART ? PART_NAME : CXS_MANIFEST_NAME;
    char *path = path_join(k->tmpdir, name);
    if (!path) return -ENOMEM;
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    free(path);
    if (fd < 0) return -errno;
    swriter w = {.fd = fd, .pos = 0};
    cxs_section sec[8];
    uint32_t n = 0;
    static const uint8_t page0[CXS_PAGE];
    int rc = w_write(&w, page0, CXS_PAGE);
    uint8_t meta[CXS_DATASET_META_SIZE];
    cxs_dataset_meta m = {k->U, k->F, k->nshards, k->D, k->o->guard, (uint16_t)k->o->dtype,
                          (uint16_t)k->lw, k->vocab_n, k->o->normalize, k->o->shard_size,
                          k->nskipped, (uint32_t)k->o->skip_bad, k->o->compress};
    cxs_dataset_meta_store(meta, &m);
    if (!rc) rc = put_section(&w, &sec[n++], CXS_SEC_DATASET_META, meta, sizeof meta);
    if (!rc && k->shard_table.n)
        rc = put_section(&w, &sec[n++], CXS_SEC_SHARD_TABLE, k->shard_table.p, k->shard_table.n);
    if (!rc && k->vocab_n) rc = put_section(&w, &sec[n++], CXS_SEC_VOCAB, x->vocab->p, x->vocab->n);
    if (!rc)
        rc = put_section(&w, &sec[n++], x->kind == CXS_KIND_PART ? CXS_SEC_PART_SUMS : CXS_SEC_STATS,
                         x->stats->p, x->stats->n);
    if (!rc && k->skipped.n) {
        rc = put_section(&w, &sec[n], CXS_SEC_SKIPPED, k->skipped.p, k->skipped.n);
        sec[n++].flags = 0; /* informational: readers may ignore it */
    }
    if (!rc && x->part_meta)
        rc = put_section(&w, &sec[n++], CXS_SEC_PART_META, x->part_meta, CXS_PART_META_SIZE);
    if (!rc) rc = w_pad(&w);
    fault_point("manifest"); /* sections written, header page not yet */
    uint8_t page[CXS_PAGE];
    cxs_container_build_v(page, x->kind, x->kind == CXS_KIND_PART ? 1 : k->minor, w.pos, sec, n);
    k->bytes_out += w.pos;
    if (!rc && pwrite(fd, page, CXS_PAGE, 0) != (ssize_t)CXS_PAGE) rc = errno ? -errno : -EIO;
    if (!rc && fsync(fd) != 0) rc = -errno;
    if (close(fd) != 0 && !rc) rc = -errno;
    return rc;
}

/* ---- output directory ------------------------------------------------- */

static int out_state(const char *out, const char *marker, int *replace) {
    struct stat st;
    *replace = 0;
    if (lstat(out, &st) != 0) return errno == ENOENT ? 0 : -errno;
    if (!S_ISDIR(st.st_mode)) return 1;
    char *m = path_join(out, marker);
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

static void packer_free(packer *k) {
    if (k->open) close(k->w.fd);
    k->w.fd = -1;
    swriter_free(&k->w);
    free(k->zero_guard);
    free(k->s1);
    free(k->s2);
    free(k->hist);
    free(k->shard_table.p);
    free(k->skipped.p);
    free(k->cbuf);
    free(k->scratch);
    free(k->zbuf);
    if (k->cc) ZSTD_freeCCtx(k->cc);
    memset(k, 0, sizeof *k);
}

/* Where the output goes: checks OUT, removes what killed runs left, makes
 * the temporary directory.  marker is the file whose presence makes OUT a
 * previous output that may be replaced.  Returns 0 or an exit code. */
static int output_begin(const char *out, const char *marker, int quiet, char **tmp, int *replace) {
    int st = out_state(out, marker, replace);
    if (st < 0) {
        warnx_("%s: %s", out, strerror(-st));
        return EXIT_SYSTEM;
    }
    if (st > 0) {
        warnx_("%s: exists and is not a ctxshard %s (no %s); refusing to replace it", out,
               strcmp(marker, PART_NAME) ? "dataset" : "part", marker);
        return EXIT_USAGE;
    }
    install_signal_flag(); /* before anything exists that a signal would strand */
    remove_stale(out, quiet);
    *tmp = make_tmpdir(out);
    if (!*tmp) {
        warnx_("%s: cannot create a temporary directory beside it: %s", out, strerror(errno));
        return EXIT_SYSTEM;
    }
    return 0;
}

typedef struct part_in {
    const char *dir;
    uint8_t *buf; /* part.cxs, whole */
    size_t len, cap;
    cxs_container c;
    cxs_dataset_meta m;
    uint32_t part, parts, first_shard, end_shard, total_shards, chunk_rows, filter;
    int32_t level;
    uint64_t listed, input_hash, minlen, maxlen;
    char version[17];
    const uint8_t *table, *vocab, *sums, *skipped;
    uint64_t vocab_len, sums_len, skipped_len;
} part_in;

static const uint8_t *part_section(part_in *p, uint32_t type, uint64_t *len) {
    const cxs_section *s = cxs_container_find(&p->c, type);
    if (!s) return NULL;
    if (len) *len = s->length;
    return p->buf + s->offset;
}

/* Read and check PART/part.cxs.  Returns 0 or an exit code (printed). */
static int part_load(part_in *p, const char *dir) {
    memset(p, 0, sizeof *p);
    p->dir = dir;
    char *path = path_join(dir, PART_NAME);
    if (!path) return EXIT_SYSTEM;
    int rc = read_file(path, 1ull << 30, &p->buf, &p->cap, &p->len);
    cxs_diag d;
    int ec = 0;
    if (rc) {
        struct stat st;
        char *m = path_join(dir, CXS_MANIFEST_NAME);
        if (rc == -ENOENT && m && stat(m, &st) == 0)
            warnx_("%s: a complete dataset, not a part (pack it with --part I/N to merge)", dir);
        else
            warnx_("%s: %s", path, rc > 0 ? "not a regular file or too large" : strerror(-rc));
        free(m);
        ec = rc == -ENOENT || rc > 0 ? EXIT_DATA : EXIT_SYSTEM;
        goto out;
    }
    if ((rc = cxs_container_parse(p->buf, p->len, CXS_KIND_PART, &p->c, path, &d))) {
        warnx_("%s", d.message);
        ec = EXIT_DATA;
        goto out;
    }
    for (uint32_t i = 0; i < p->c.nsections; i++) {
        const cxs_section *s = &p->c.sections[i];
        if (cxs_checksum_differs(cxs_hash(p->buf + s->offset, s->length), s->checksum)) {
            warnx_("%s: section %s: checksum mismatch", path, cxs_section_name(s->type));
            ec = EXIT_DATA;
            goto out;
        }
    }
    uint64_t ml = 0, pl = 0;
    const uint8_t *meta = part_section(p, CXS_SEC_DATASET_META, &ml);
    const uint8_t *pm = part_section(p, CXS_SEC_PART_META, &pl);
    p->sums = part_section(p, CXS_SEC_PART_SUMS, &p->sums_len);
    if (!meta || !pm || pl != CXS_PART_META_SIZE || !p->sums ||
        cxs_dataset_meta_load(meta, ml, &p->m, path, &d)) {
        warnx_("%s: not a valid part (DATASET_META, PART_META or PART_SUMS)", path);
        ec = EXIT_DATA;
        goto out;
    }
    p->part = cxs_ld32(pm);
    p->parts = cxs_ld32(pm + 4);
    p->listed = cxs_ld64(pm + 8);
    p->input_hash = cxs_ld64(pm + 16);
    p->first_shard = cxs_ld32(pm + 24);
    p->end_shard = cxs_ld32(pm + 28);
    p->total_shards = cxs_ld32(pm + 32);
    p->level = (int32_t)cxs_ld32(pm + 36);
    p->chunk_rows = cxs_ld32(pm + 40);
    p->filter = cxs_ld32(pm + 44);
    p->minlen = cxs_ld64(pm + 48);
    p->maxlen = cxs_ld64(pm + 56);
    memcpy(p->version, pm + 64, 16);
    uint64_t tl = 0;
    p->table = part_section(p, CXS_SEC_SHARD_TABLE, &tl);
    p->vocab = part_section(p, CXS_SEC_VOCAB, &p->vocab_len);
    p->skipped = part_section(p, CXS_SEC_SKIPPED, &p->skipped_len);
    if (p->part < 1 || p->part > p->parts || tl != (uint64_t)p->m.num_shards * CXS_SHARD_ENTRY_SIZE ||
        (p->m.vocab_size && !p->vocab)) {
        warnx_("%s: not a valid part (part number or shard table)", path);
        ec = EXIT_DATA;
    }
out:
    free(path);
    return ec;
}

/* Copy a file (copy_file_range, which may share blocks on the filesystem). */
static int copy_file(const char *src, const char *dst) {
    int in = open(src, O_RDONLY | O_CLOEXEC);
    if (in < 0) return -errno;
    int outfd = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (outfd < 0) {
        int e = errno;
        close(in);
        return -e;
    }
    int rc = 0;
    for (;;) {
        ssize_t n = copy_file_range(in, NULL, outfd, NULL, 1 << 30, 0);
        if (n == 0) break;
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno != EXDEV && errno != ENOSYS && errno != EINVAL && errno != EOPNOTSUPP) {
                rc = -errno;
                break;
            }
            /* Fallback: plain reads and writes. */
            static uint8_t buf[1 << 20];
            ssize_t r;
            while ((r = read(in, buf, sizeof buf)) > 0)
                if ((rc = write_all(outfd, buf, (size_t)r))) break;
            if (r < 0) rc = -errno;
            break;
        }
    }
    if (!rc && fsync(outfd) != 0) rc = -errno;
    if (close(outfd) != 0 && !rc) rc = -errno;
    close(in);
    return rc;
}

/* Put one part's shard into the output as shard `index` holding utterances
 * from first_u and frames from first_f: linked when it already says so,
 * otherwise copied with its SHARD_META and header rewritten.  *e gets its
 * manifest entry.  Returns 0, -errno, or 1 when the file is not what the
 * part's table says (message printed). */
static int place_shard(const char *src, const char *dst, const cxs_shard_entry *pe,
                       uint32_t index, uint64_t first_u, uint64_t first_f, int *linked,
                       cxs_shard_entry *e) {
    int fd = open(src, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        warnx_("%s: %s", src, strerror(errno));
        return errno == ENOENT ? 1 : -errno;
    }
    struct stat st;
    uint8_t page[CXS_PAGE], meta[CXS_SHARD_META_SIZE];
    cxs_container c;
    cxs_diag d;
    cxs_shard_meta m;
    const cxs_section *sm = NULL;
    int bad = fstat(fd, &st) != 0 || (uint64_t)st.st_size != pe->file_size ||
              pread(fd, page, CXS_PAGE, 0) != (ssize_t)CXS_PAGE ||
              cxs_container_parse(page, pe->file_size, CXS_KIND_SHARD, &c, src, &d) ||
              cxs_checksum_differs(c.header_checksum, pe->header_checksum) ||
              !(sm = cxs_container_find(&c, CXS_SEC_SHARD_META)) ||
              sm->length != CXS_SHARD_META_SIZE ||
              pread(fd, meta, sizeof meta, (off_t)sm->offset) != (ssize_t)sizeof meta ||
              cxs_checksum_differs(cxs_hash(meta, sizeof meta), sm->checksum) ||
              cxs_shard_meta_load(meta, sizeof meta, &m, src, &d) ||
              m.num_utterances != pe->num_utterances || m.num_frames != pe->num_frames;
    close(fd);
    if (bad) {
        warnx_("%s: does not match its part's shard table (size, header checksum or "
               "SHARD_META); re-pack that part",
               src);
        return 1;
    }
    *e = *pe;
    e->first_utterance = first_u;
    e->first_frame = first_f;
    int rc;
    *linked = 0;
    if (m.index == index && m.first_utterance == first_u && m.first_frame == first_f) {
        if (link(src, dst) == 0) {
            *linked = 1;
            return 0;
        }
        return copy_file(src, dst);
    }
    /* Renumber: SHARD_META and the header change, nothing else. */
    if ((rc = copy_file(src, dst))) return rc;
    m.index = index;
    m.first_utterance = first_u;
    m.first_frame = first_f;
    cxs_shard_meta_store(meta, &m);
    cxs_section *ms = (cxs_section *)(uintptr_t)sm;
    ms->checksum = cxs_hash(meta, sizeof meta);
    e->header_checksum = cxs_container_build_v(page, CXS_KIND_SHARD, c.minor, c.file_size,
                                               c.sections, c.nsections);
    fd = open(dst, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return -errno;
    rc = pwrite(fd, meta, sizeof meta, (off_t)sm->offset) == (ssize_t)sizeof meta &&
                 pwrite(fd, page, CXS_PAGE, 0) == (ssize_t)CXS_PAGE && fsync(fd) == 0
             ? 0
             : -errno;
    close(fd);
    return rc;
}

static int part_cmp(const void *a, const void *b) {
    const part_in *x = a, *y = b;
    return (x->part > y->part) - (x->part < y->part);
}

/* Parts must come from one run of the same command over the same input. */
static int parts_agree(part_in *ps, int n) {
    const part_in *a = &ps[0];
    const part_in *full = NULL; /* a part with utterances: it knows the width */
    for (int i = 0; i < n; i++)
        if (ps[i].m.num_utterances && !full) full = &ps[i];
    if (a->parts != (uint32_t)n) {
        warnx_("%s is part %u of %u, but %d part%s given: every part is needed", a->dir, a->part,
               a->parts, n, n == 1 ? " was" : "s were");
        return 0;
    }
    for (int i = 0; i < n; i++) {
        const part_in *p = &ps[i];
        const char *why = NULL;
        if (p->part != (uint32_t)i + 1) {
            warnx_("%s and %s are both part %u", ps[i - 1].dir, p->dir, p->part);
            return 0;
        }
        if (p->parts != a->parts) why = "a different number of parts (--part I/N)";
        else if (strcmp(p->version, a->version)) why = "another ctxshard version";
        else if (p->listed != a->listed || p->input_hash != a->input_hash ||
                 p->total_shards != a->total_shards)
            why = "different inputs (the listing of RAW: ids, frame counts or files differ)";
        else if (p->m.guard != a->m.guard || p->m.dtype != a->m.dtype ||
                 p->m.normalize != a->m.normalize || p->m.shard_size != a->m.shard_size ||
                 p->m.on_error != a->m.on_error || p->m.label_width != a->m.label_width)
            why = "different options (--dtype, --guard, --normalize, --shard-size or --on-error)";
        else if (p->m.compression != a->m.compression || p->level != a->level ||
                 p->filter != a->filter ||
                 (full && p->m.num_utterances && p->chunk_rows != full->chunk_rows))
            why = "different compression options (--compress, --chunk-size or --no-shuffle)";
        else if (p->m.vocab_size != a->m.vocab_size || p->vocab_len != a->vocab_len ||
                 (p->vocab_len && memcmp(p->vocab, a->vocab, (size_t)p->vocab_len)))
            why = "a different vocabulary (--vocab)";
        else if (full && p->m.num_utterances && p->m.dim != full->m.dim)
            why = "a different feature width (pack with --on-error fail to see which utterances "
                  "differ)";
        else if (i > 0 && p->first_shard != ps[i - 1].end_shard)
            why = "shard ranges that do not follow on";
        if (why) {
            warnx_("%s was packed with %s than %s; refusing to merge", p->dir, why,
                   p == a ? ps[1].dir : a->dir);
            return 0;
        }
    }
    return 1;
}

int merge_run(char **dirs, int n, const char *out, int move, int quiet) {
    part_in *ps = calloc((size_t)n, sizeof *ps);
    if (!ps) {
        warnx_("out of memory");
        return EXIT_SYSTEM;
    }
    int ec = 0, rc = 0, replace;
    packer k;
    memset(&k, 0, sizeof k);
    pack_opts o;
    memset(&o, 0, sizeof o);
    char *tmp = NULL;
    double t0 = now_seconds();
    for (int i = 0; i < n && !ec; i++) ec = part_load(&ps[i], dirs[i]);
    if (ec) goto out;
    qsort(ps, (size_t)n, sizeof *ps, part_cmp);
    if (!parts_agree(ps, n)) {
        ec = EXIT_DATA;
        goto out;
    }
    uint32_t D = 0;
    for (int i = 0; i < n; i++)
        if (ps[i].m.num_utterances) D = ps[i].m.dim;
    if (D == 0) {
        warnx_("no part holds a valid utterance; nothing to merge");
        ec = EXIT_DATA;
        goto out;
    }
    if ((ec = output_begin(out, CXS_MANIFEST_NAME, quiet, &tmp, &replace))) goto out;
    const cxs_dataset_meta *am = &ps[0].m;
    o.dtype = am->dtype;
    o.guard = am->guard;
    o.shard_size = am->shard_size;
    o.skip_bad = (int)am->on_error;
    o.normalize = am->normalize;
    o.compress = am->compression;
    k.o = &o;
    k.tmpdir = tmp;
    k.esize = cxs_dtype_size(o.dtype);
    k.vocab_n = am->vocab_size;
    k.lw = am->label_width;
    k.minor = o.compress ? 1 : 0;
    k.minlen = UINT64_MAX;
    k.D = D;
    k.s1 = calloc(D, sizeof *k.s1);
    k.s2 = calloc(D, sizeof *k.s2);
    k.hist = calloc(k.vocab_n + 1, sizeof *k.hist);
    if (!k.s1 || !k.s2 || !k.hist) {
        rc = -ENOMEM;
        goto sysfail;
    }
    uint64_t linked = 0, copied = 0;
    for (int i = 0; i < n; i++) {
        part_in *p = &ps[i];
        /* The exact sums: adding every partial of every part is exact. */
        const uint8_t *q = p->sums, *end = p->sums + p->sums_len;
        uint64_t pd = p->sums_len >= 16 ? cxs_ld64(q) : UINT64_MAX, pv = cxs_ld64(q + 8);
        q += 16;
        int ok = p->sums_len >= 16 && (pd == D || (pd == 0 && !p->m.num_utterances)) &&
                 pv == k.vocab_n;
        for (uint64_t dd = 0; ok && dd < 2 * pd; dd++) {
            uint64_t cnt = (uint64_t)(end - q) >= 8 ? cxs_ld64(q) : UINT64_MAX;
            if (cnt > 48 || (uint64_t)(end - q) < 8 + 8 * cnt) {
                ok = 0;
                break;
            }
            q += 8;
            for (uint64_t j = 0; j < cnt; j++, q += 8)
                cxs_xsum_add(dd % 2 ? &k.s2[dd / 2] : &k.s1[dd / 2], cxs_ldf64(q));
        }
        if (!ok || (uint64_t)(end - q) != 8ull * k.vocab_n) {
            warnx_("%s: %s: PART_SUMS does not describe %u dimensions and %u labels", p->dir,
                   PART_NAME, D, k.vocab_n);
            ec = EXIT_DATA;
            goto out;
        }
        for (uint32_t l = 0; l < k.vocab_n; l++) k.hist[l] += cxs_ld64(q + 8ull * l);
        if (p->m.num_utterances) {
            if (p->minlen < k.minlen) k.minlen = p->minlen;
            if (p->maxlen > k.maxlen) k.maxlen = p->maxlen;
        }
        k.nskipped += p->m.num_skipped;
        if (p->skipped_len && (rc = bytes_put(&k.skipped, p->skipped, (size_t)p->skipped_len)))
            goto sysfail;
        /* The shards, renumbered after those of the earlier parts. */
        for (uint32_t j = 0; j < p->m.num_shards; j++) {
            if (g_interrupted) {
                warnx_("%s: interrupted; nothing written", out);
                ec = EXIT_SYSTEM;
                goto out;
            }
            cxs_shard_entry pe, e;
            cxs_shard_entry_load(p->table + (uint64_t)j * CXS_SHARD_ENTRY_SIZE, &pe);
            char name[64];
            snprintf(name, sizeof name, CXS_SHARD_NAME_FMT, p->first_shard + j);
            char *src = path_join(p->dir, name);
            snprintf(name, sizeof name, CXS_SHARD_NAME_FMT, k.nshards);
            char *dst = path_join(tmp, name);
            int was_linked = 0;
            rc = src && dst ? place_shard(src, dst, &pe, k.nshards, k.U, k.F, &was_linked, &e)
                            : -ENOMEM;
            free(src);
            free(dst);
            if (rc == 1) {
                ec = EXIT_DATA;
                goto out;
            }
            if (rc) goto sysfail;
            linked += was_linked;
            copied += !was_linked;
            uint8_t eb[CXS_SHARD_ENTRY_SIZE];
            cxs_shard_entry_store(eb, &e);
            if ((rc = bytes_put(&k.shard_table, eb, sizeof eb))) goto sysfail;
            k.nshards++;
            k.U += e.num_utterances;
            k.F += e.num_frames;
            k.bytes_out += e.file_size;
        }
    }
    bytes vb = {0}, sb = {0};
    if (!(rc = bytes_put(&vb, ps[0].vocab, (size_t)ps[0].vocab_len)) &&
        !(rc = stats_bytes(&k, &sb))) {
        index_file x = {CXS_KIND_MANIFEST, &vb, &sb, NULL};
        rc = write_index(&k, &x);
    }
    free(vb.p);
    free(sb.p);
    if (rc || (rc = commit_output(tmp, out, replace))) goto sysfail;
    free(tmp);
    tmp = NULL;
    if (move) /* the dataset is complete: the parts go */
        for (int i = 0; i < n; i++) remove_tree(ps[i].dir);
    if (!quiet)
        printf("merged %d part%s into %s: %llu utterances, %llu frames, %u shards (%llu linked, "
               "%llu copied) in %.2f s\n",
               n, n == 1 ? "" : "s", out, (unsigned long long)k.U, (unsigned long long)k.F,
               k.nshards, (unsigned long long)linked, (unsigned long long)copied,
               now_seconds() - t0);
    goto out;
sysfail:
    warnx_("%s: %s; nothing written", out, strerror(-rc));
    ec = EXIT_SYSTEM;
out:
    if (tmp) {
        remove_tree(tmp);
        free(tmp);
    }
    for (int i = 0; i < n; i++) free(ps[i].buf);
    free(ps);
    packer_free(&k);
    return ec;
}

