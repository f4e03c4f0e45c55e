/* kaldi_list.c - the listing of a Kaldi import (kaldi_import.h): a
 * feats.scp's `utt rxfilename` lines, or a bare archive indexed header by
 * header (`key ` then an object, over and over), and the archives they
 * name, opened as they are needed.  Kaldi's readers are the reference
 * (src/util/kaldi-table-inl.h: a key ends at a space or tab;
 * src/util/kaldi-io.cc: `path:offset` rxfilenames). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cxs_format.h"
#include "kaldi.h"
#include "kaldi_import.h"

/* ---- small helpers ---------------------------------------------------- */

int kaldi_is_space(int c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

int kaldi_pread_all(int fd, void *buf, size_t n, uint64_t off, size_t *got) {
    size_t k = 0;
    while (k < n) {
        ssize_t r = pread(fd, (char *)buf + k, n - k, (off_t)(off + k));
        if (r < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        if (r == 0) break;
        k += (size_t)r;
    }
    *got = k;
    return 0;
}

/* A whole text file, NUL-terminated. */
int kaldi_slurp(const char *path, char **out, size_t *len, cxs_diag *d) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return cxs_diagf(d, -errno, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        close(fd);
        return cxs_diagf(d, CXS_E_INPUT, "%s: not a regular file", path);
    }
    char *b = malloc((size_t)st.st_size + 1);
    size_t got = 0;
    int rc = b ? kaldi_pread_all(fd, b, (size_t)st.st_size, 0, &got) : -ENOMEM;
    close(fd);
    if (rc) {
        free(b);
        return cxs_diagf(d, rc, "%s: %s", path, strerror(-rc));
    }
    b[got] = 0;
    if (memchr(b, 0, got)) {
        free(b);
        return cxs_diagf(d, CXS_E_INPUT, "%s: holds NUL bytes: a binary file where a text "
                         "file was expected", path);
    }
    *out = b;
    *len = got;
    return 0;
}

int kaldi_grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return -ENOMEM;
    *p = q;
    *cap = c;
    return 0;
}

int kaldi_key_cmp(const char *a, const char *b) { return strcmp(a, b); } /* byte order */

/* ---- the archives ------------------------------------------------------ */


static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

/* The index of path, added when new. */
int kaldi_files_add(files *fs, const char *path, uint32_t *idx) {
    if (fs->n * 2 >= fs->nslot) {
        size_t ns = fs->nslot ? fs->nslot * 2 : 64;
        uint32_t *t = calloc(ns, sizeof *t);
        if (!t) return -ENOMEM;
        for (size_t i = 0; i < fs->n; i++) {
            size_t h = hash_str(fs->f[i].path) & (ns - 1);
            while (t[h]) h = (h + 1) & (ns - 1);
            t[h] = (uint32_t)i + 1;
        }
        free(fs->slot);
        fs->slot = t;
        fs->nslot = ns;
    }
    size_t h = hash_str(path) & (fs->nslot - 1);
    while (fs->slot[h]) {
        if (!strcmp(fs->f[fs->slot[h] - 1].path, path)) {
            *idx = fs->slot[h] - 1;
            return 0;
        }
        h = (h + 1) & (fs->nslot - 1);
    }
    void *p = fs->f;
    if (kaldi_grow(&p, &fs->cap, fs->n + 1, sizeof *fs->f)) return -ENOMEM;
    fs->f = p;
    if (!(fs->f[fs->n].path = strdup(path))) return -ENOMEM;
    fs->f[fs->n].fd = -1;
    fs->f[fs->n].size = 0;
    fs->slot[h] = (uint32_t)fs->n + 1;
    *idx = (uint32_t)fs->n++;
    return 0;
}

/* An open descriptor of file i (at most MAX_OPEN stay open).  Returns 0 or
 * -errno (diag says which file). */
int kaldi_files_open(files *fs, uint32_t i, cxs_diag *d) {
    arkfile *a = &fs->f[i];
    if (a->fd >= 0) return 0;
    /* close another (one no reader holds); past MAX_OPEN when all are held */
    for (size_t tries = 0; fs->open_n >= MAX_OPEN && tries < fs->n; tries++) {
        arkfile *v = &fs->f[fs->victim++ % fs->n];
        if (v->fd >= 0 && v != a && !v->users) {
            close(v->fd);
            v->fd = -1;
            fs->open_n--;
        }
    }
    int fd = open(a->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return cxs_diagf(d, e == ENOENT ? CXS_E_INPUT : -e, "%s: %s%s", a->path, strerror(e),
                         e == ENOENT && a->path[0] != '/'
                             ? " (relative paths are read from the current directory, as "
                               "Kaldi reads them)" : "");
    }
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        close(fd);
        return cxs_diagf(d, CXS_E_INPUT, "%s: not a regular file", a->path);
    }
    posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    a->fd = fd;
    a->size = (uint64_t)st.st_size;
    fs->open_n++;
    return 0;
}

int kaldi_files_acquire(files *fs, uint32_t i, cxs_diag *d) {
    int rc = kaldi_files_open(fs, i, d);
    if (!rc) fs->f[i].users++;
    return rc;
}

void kaldi_files_release(files *fs, uint32_t i) { fs->f[i].users--; }

int kaldi_text_extent(int fd, uint64_t size, uint64_t off, uint64_t *n, cxs_diag *d) {
    uint8_t buf[65536];
    uint64_t pos = off;
    for (;;) {
        size_t got = 0;
        int rc = kaldi_pread_all(fd, buf, sizeof buf, pos, &got);
        if (rc) return rc;
        /* (the ']' sought is the first after off: a ']' elsewhere in a
         * valid object cannot be) */
        const int more = pos + got < size;
        size_t e = got ? kaldi_text_end(buf, got, more) : 0;
        if (e) {
            *n = pos - off + e;
            return 0;
        }
        if (memchr(buf, ']', got)) {
            /* a ']' then '\r' at the end of the window: read on from the ']' */
            pos += (size_t)((const uint8_t *)memchr(buf, ']', got) - buf);
            size_t g2 = 0;
            uint8_t b3[3];
            if ((rc = kaldi_pread_all(fd, b3, 3, pos, &g2))) return rc;
            *n = pos - off + kaldi_text_end(b3, g2, 0);
            return 0;
        }
        if (!more) {
            return cxs_diagf(d, CXS_E_TRUNCATED,
                             "text-form matrix without its ']': the file ends %llu bytes after "
                             "its '['", (unsigned long long)(size - off));
        }
        pos += got;
    }
}

/* A range's bound: decimal digits, at most 2^31 - 1 (Kaldi's int32). */
static int range_int(const char *s, size_t n, uint64_t *v) {
    if (n == 0 || n > 10) return -1;
    uint64_t x = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        x = x * 10 + (uint64_t)(s[i] - '0');
    }
    if (x > 0x7fffffffu) return -1;
    *v = x;
    return 0;
}

/* "A:B" or ":" (all) into *lo, *hi.  -1 when it is neither. */
static int range_pair(const char *s, size_t n, uint64_t *lo, uint64_t *hi) {
    if (n == 1 && s[0] == ':') {
        *lo = 0;
        *hi = KALDI_ALL;
        return 0;
    }
    const char *c = memchr(s, ':', n);
    if (!c || memchr(c + 1, ':', n - (size_t)(c + 1 - s))) return -1;
    if (range_int(s, (size_t)(c - s), lo) || range_int(c + 1, n - (size_t)(c + 1 - s), hi)) return -1;
    return *lo <= *hi ? 0 : -1;
}

/* Kaldi's ParseMatrixRangeSpecifier: "R0:R1" or "R0:R1,C0:C1", either
 * pair ":" for all. */
static int parse_range(const char *r, ent *e) {
    size_t n = strlen(r);
    const char *comma = memchr(r, ',', n);
    e->c0 = 0;
    e->c1 = KALDI_ALL;
    if (!comma) return range_pair(r, n, &e->r0, &e->r1);
    if (range_pair(r, (size_t)(comma - r), &e->r0, &e->r1)) return -1;
    return range_pair(comma + 1, n - (size_t)(comma + 1 - r), &e->c0, &e->c1);
}

int kaldi_range_apply(const ent *e, uint64_t rows, uint64_t cols, uint64_t *r0, uint64_t *nr,
                      uint64_t *c0, uint64_t *nc, int *cut, cxs_diag *d) {
    *cut = 0;
    if (!e->range) {
        *r0 = *c0 = 0;
        *nr = rows;
        *nc = cols;
        return 0;
    }
    uint64_t r1 = e->r1 == KALDI_ALL ? rows - 1 : e->r1, c1 = e->c1 == KALDI_ALL ? cols - 1 : e->c1;
    /* Kaldi's tolerance (length_tolerance 3: segment times rounded to
     * 10 ms, frames of 25 ms): a row range may end before rows + 3, and
     * is cut at the last row */
    if (e->r0 >= rows || r1 >= rows + 3 || c1 >= cols) {
        return cxs_diagf(d, CXS_E_INPUT, "range [%s] is outside the %llux%llu matrix", e->range,
                         (unsigned long long)rows, (unsigned long long)cols);
    }
    if (r1 >= rows) {
        r1 = rows - 1;
        *cut = 1;
    }
    *r0 = e->r0;
    *nr = r1 - e->r0 + 1;
    *c0 = e->c0;
    *nc = c1 - e->c0 + 1;
    return 0;
}

void kaldi_files_free(files *fs) {
    for (size_t i = 0; i < fs->n; i++) {
        if (fs->f[i].fd >= 0) close(fs->f[i].fd);
        free(fs->f[i].path);
    }
    free(fs->f);
    free(fs->slot);
    memset(fs, 0, sizeof *fs);
}

/* ---- the listing -------------------------------------------------------- */

int kaldi_ent_cmp(const void *a, const void *b) {
    const ent *x = a, *y = b;
    int c = kaldi_key_cmp(x->key, y->key);
    return c ? c : (x->order > y->order) - (x->order < y->order);
}

static int add_ent(listing *L, char *key, uint32_t file, uint64_t off, uint64_t line,
                   const ent *range) {
    void *p = L->e;
    if (kaldi_grow(&p, &L->cap, L->n + 1, sizeof *L->e)) return -ENOMEM;
    L->e = p;
    L->e[L->n] = (ent){key, file, off, line, L->n, NULL, 0, KALDI_ALL, 0, KALDI_ALL};
    if (range) {
        L->e[L->n].range = range->range;
        L->e[L->n].r0 = range->r0;
        L->e[L->n].r1 = range->r1;
        L->e[L->n].c0 = range->c0;
        L->e[L->n].c1 = range->c1;
    }
    L->n++;
    return 0;
}

static int check_key(const char *where, const char *key, cxs_diag *d) {
    size_t n = strlen(key);
    if (n > CXS_MAX_ID_LEN)
        return cxs_diagf(d, CXS_E_INPUT, "%s: utterance id of %zu bytes (at most %u)", where, n,
                         CXS_MAX_ID_LEN);
    for (size_t i = 0; i < n; i++)
        if ((uint8_t)key[i] < 0x20 || key[i] == 0x7f)
            return cxs_diagf(d, CXS_E_INPUT, "%s: utterance id '%s' holds a control byte", where,
                             key);
    return 0;
}

/* Parse a feats.scp: `key rxfilename` lines. */
int kaldi_read_scp(listing *L, files *fs, const char *path, cxs_diag *d) {
    size_t len;
    int rc = kaldi_slurp(path, &L->text, &len, d);
    if (rc) return rc;
    char *s = L->text, *end = s + len, where[256];
    for (uint64_t line = 1; s < end; line++) {
        char *nl = memchr(s, '\n', (size_t)(end - s)), *e = nl ? nl : end;
        char *next = nl ? nl + 1 : end;
        while (e > s && kaldi_is_space((unsigned char)e[-1])) e--;
        *e = 0;
        while (s < e && kaldi_is_space((unsigned char)*s)) s++;
        if (s == e) {
            s = next;
            continue;
        }
        snprintf(where, sizeof where, "%s line %llu", path, (unsigned long long)line);
        char *k = s;
        while (s < e && !kaldi_is_space((unsigned char)*s)) s++;
        if (s == e)
            return cxs_diagf(d, CXS_E_INPUT, "%s: '%s' alone: expected `utterance-id "
                             "path.ark:offset`", where, k);
        *s++ = 0;
        while (s < e && kaldi_is_space((unsigned char)*s)) s++;
        char *rx = s;
        size_t rl = strlen(rx);
        if ((rc = check_key(where, k, d))) return rc;
        if (rx[rl - 1] == '|' || !strcmp(rx, "-"))
            return cxs_diagf(d, CXS_E_INPUT, "%s: %s: '%s' is a pipe or standard input: only "
                             "files are read (write the features to an archive first: "
                             "copy-feats scp:%s ark,scp:feats.ark,feats.scp)", where, k, rx, path);
        /* Kaldi's range: exactly one '[', ']' at the end, something before */
        ent rg = {0};
        int ranged = rx[rl - 1] == ']';
        if (ranged) {
            char *lb = strchr(rx, '[');
            if (!lb || strchr(lb + 1, '[') || lb == rx || lb + 2 >= rx + rl) 
                return cxs_diagf(d, CXS_E_INPUT, "%s: %s: '%s': not a Kaldi range (expected "
                                 "path:offset[R0:R1] or [R0:R1,C0:C1], ':' for all)", where, k,
                                 rx);
            rx[rl - 1] = 0;
            *lb = 0;
            rg.range = lb + 1;
            if (parse_range(rg.range, &rg)) {
                rx[rl - 1] = ']';
                *lb = '[';
                return cxs_diagf(d, CXS_E_INPUT, "%s: %s: '%s': not a Kaldi range (expected "
                                 "[R0:R1] or [R0:R1,C0:C1] with R0 <= R1, C0 <= C1, ':' for "
                                 "all)", where, k, rx);
            }
        }
        /* path:offset when what follows the last ':' is a number */
        uint64_t off = 0;
        char *colon = strrchr(rx, ':');
        if (colon && colon[1]) {
            char *q = colon + 1;
            while (*q >= '0' && *q <= '9') q++;
            if (!*q) {
                errno = 0;
                off = strtoull(colon + 1, NULL, 10);
                if (errno)
                    return cxs_diagf(d, CXS_E_INPUT, "%s: %s: offset '%s' is out of range",
                                     where, k, colon + 1);
                *colon = 0;
            }
        }
        uint32_t fi;
        if ((rc = kaldi_files_add(fs, rx, &fi)) ||
            (rc = add_ent(L, k, fi, off, line, ranged ? &rg : NULL)))
            return cxs_diagf(d, rc, "out of memory");
        s = next;
    }
    return 0;
}

/* Index a bare archive: `key ` then an object, over and over. */
int kaldi_read_ark(listing *L, files *fs, const char *path, cxs_diag *d) {
    uint32_t fi;
    int rc;
    if ((rc = kaldi_files_add(fs, path, &fi))) return cxs_diagf(d, rc, "out of memory");
    if ((rc = kaldi_files_open(fs, fi, d))) return rc;
    const arkfile *a = &fs->f[fi];
    enum { WIN = CXS_MAX_ID_LEN + 64 + KALDI_MAX_HEAD };
    uint8_t buf[WIN + 1];
    uint64_t pos = 0;
    for (;;) {
        size_t got = 0;
        if ((rc = kaldi_pread_all(a->fd, buf, WIN, pos, &got)))
            return cxs_diagf(d, rc, "%s: %s", path, strerror(-rc));
        size_t i = 0;
        while (i < got && kaldi_is_space(buf[i])) i++;
        if (i == got) {
            if (got < WIN) break; /* only white space to the end */
            pos += got;
            continue;
        }
        size_t k0 = i;
        while (i < got && !kaldi_is_space(buf[i]) && buf[i]) i++;
        if (i == got || (buf[i] != ' ' && buf[i] != '\t')) { /* Kaldi takes either */
            if (i - k0 > CXS_MAX_ID_LEN)
                return cxs_diagf(d, CXS_E_INPUT, "%s: offset %llu: an utterance id longer than "
                                 "%u bytes, or not a Kaldi archive", path,
                                 (unsigned long long)(pos + k0), CXS_MAX_ID_LEN);
            return cxs_diagf(d, CXS_E_INPUT,
                             "%s: offset %llu: utterance id '%.*s' %s", path,
                             (unsigned long long)(pos + k0), (int)(i - k0 > 64 ? 64 : i - k0),
                             (const char *)buf + k0,
                             i == got ? "is followed by the end of the file (truncated archive)"
                                      : "is not followed by a space (not a Kaldi binary archive)");
        }
        char *key = strndup((const char *)buf + k0, i - k0);
        if (!key) return cxs_diagf(d, -ENOMEM, "out of memory");
        uint64_t obj = pos + i + 1;
        char where[64];
        snprintf(where, sizeof where, "%s: offset %llu", path, (unsigned long long)(pos + k0));
        if ((rc = check_key(where, key, d)) || (rc = add_ent(L, key, fi, obj, 0, NULL))) {
            free(key);
            return rc == -ENOMEM ? cxs_diagf(d, rc, "out of memory") : rc;
        }
        kaldi_hdr h;
        cxs_diag why; /* a reason, before it is said where */
        size_t have = got - (i + 1);
        rc = kaldi_parse(buf + i + 1, have, &h, &why);
        if (rc)
            return cxs_diagf(d, CXS_E_INPUT, "%s: offset %llu: utterance %s: %s%s", path,
                             (unsigned long long)obj, key, why.message,
                             rc == CXS_E_TRUNCATED ? " (truncated archive)" : "");
        if (h.kind == KALDI_TXT) {
            uint64_t tn = 0;
            rc = kaldi_text_extent(a->fd, a->size, obj + h.head, &tn, &why);
            if (rc && rc != CXS_E_TRUNCATED) return cxs_diagf(d, rc, "%s: %s", path, strerror(-rc));
            if (rc)
                return cxs_diagf(d, CXS_E_INPUT,
                                 "%s: offset %llu: utterance %s: %s (truncated "
                                 "archive)",
                                 path, (unsigned long long)obj, key, why.message);
            pos = obj + h.head + tn;
            continue;
        }
        if (obj + h.size > a->size)
            return cxs_diagf(d, CXS_E_INPUT, "%s: offset %llu: utterance %s: %s %llux%llu needs "
                             "%llu bytes, the file ends %llu bytes after its start (truncated "
                             "archive)", path, (unsigned long long)obj, key,
                             kaldi_kind_name(h.kind), (unsigned long long)h.rows,
                             (unsigned long long)h.cols, (unsigned long long)h.size,
                             (unsigned long long)(a->size - obj));
        pos = obj + h.size;
    }
    if (L->n == 0) return cxs_diagf(d, CXS_E_INPUT, "%s: no utterance in the archive", path);
    return 0;
}

