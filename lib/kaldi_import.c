/* kaldi_import.c - cxs_import_kaldi (ctxshard_import.h): a feats.scp or a
 * bare archive, with labels from a Kaldi text file or per-frame
 * alignments, through the library's writer.
 *
 * The order of work: the listing (the scp's lines, or an index of the
 * archive read header by header), sorted by id; the labels file, sorted,
 * matched against the listing before anything is written (missing and
 * extra labels are named up front); the vocabulary; then one utterance at
 * a time: read its object with pread, decode it (kaldi.c), hand it to the
 * writer.  Kaldi's own reader is the reference for what is accepted
 * (src/util/kaldi-table-inl.h: keys end at a space; src/util/kaldi-io.cc:
 * `path:offset` rxfilenames). */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "ctxshard_import.h"
#include "cxs_format.h"
#include "cxs_le.h"
#include "kaldi.h"

/* ---- small helpers ---------------------------------------------------- */

static int is_space(int c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

static int pread_all(int fd, void *buf, size_t n, uint64_t off, size_t *got) {
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
static int slurp(const char *path, char **out, size_t *len, cxs_diag *d) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return cxs_diagf(d, -errno, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        close(fd);
        return cxs_diagf(d, CXS_E_INPUT, "%s: not a regular file", path);
    }
    char *b = malloc((size_t)st.st_size + 1);
    size_t got = 0;
    int rc = b ? pread_all(fd, b, (size_t)st.st_size, 0, &got) : -ENOMEM;
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

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return -ENOMEM;
    *p = q;
    *cap = c;
    return 0;
}

static int key_cmp(const char *a, const char *b) { return strcmp(a, b); } /* byte order */

/* ---- the archives ------------------------------------------------------ */

#define MAX_OPEN 64

typedef struct arkfile {
    char *path;
    int fd;          /* -1 while closed */
    uint64_t size;
} arkfile;

typedef struct files {
    arkfile *f;
    size_t n, cap;
    uint32_t *slot; /* hash table of indices + 1 */
    size_t nslot;
    size_t open_n, victim;
} files;

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

/* The index of path, added when new. */
static int files_add(files *fs, const char *path, uint32_t *idx) {
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
    if (grow(&p, &fs->cap, fs->n + 1, sizeof *fs->f)) return -ENOMEM;
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
static int files_open(files *fs, uint32_t i, cxs_diag *d) {
    arkfile *a = &fs->f[i];
    if (a->fd >= 0) return 0;
    while (fs->open_n >= MAX_OPEN) {
        arkfile *v = &fs->f[fs->victim++ % fs->n];
        if (v->fd >= 0 && v != a) {
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

static void files_free(files *fs) {
    for (size_t i = 0; i < fs->n; i++) {
        if (fs->f[i].fd >= 0) close(fs->f[i].fd);
        free(fs->f[i].path);
    }
    free(fs->f);
    free(fs->slot);
    memset(fs, 0, sizeof *fs);
}

/* ---- the listing -------------------------------------------------------- */

typedef struct ent {
    char *key;
    uint32_t file;
    uint64_t off;
    uint64_t line;  /* scp line; 0 for an archive */
    uint64_t order; /* position in the listing */
} ent;

typedef struct listing {
    ent *e;
    size_t n, cap;
    char *text; /* the scp, keys point into it */
    const char *name;
    int is_scp;
} listing;

static int ent_cmp(const void *a, const void *b) {
    const ent *x = a, *y = b;
    int c = key_cmp(x->key, y->key);
    return c ? c : (x->order > y->order) - (x->order < y->order);
}

static int add_ent(listing *L, char *key, uint32_t file, uint64_t off, uint64_t line) {
    void *p = L->e;
    if (grow(&p, &L->cap, L->n + 1, sizeof *L->e)) return -ENOMEM;
    L->e = p;
    L->e[L->n] = (ent){key, file, off, line, L->n};
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
static int read_scp(listing *L, files *fs, const char *path, cxs_diag *d) {
    size_t len;
    int rc = slurp(path, &L->text, &len, d);
    if (rc) return rc;
    char *s = L->text, *end = s + len, where[256];
    for (uint64_t line = 1; s < end; line++) {
        char *nl = memchr(s, '\n', (size_t)(end - s)), *e = nl ? nl : end;
        char *next = nl ? nl + 1 : end;
        while (e > s && is_space((unsigned char)e[-1])) e--;
        *e = 0;
        while (s < e && is_space((unsigned char)*s)) s++;
        if (s == e) {
            s = next;
            continue;
        }
        snprintf(where, sizeof where, "%s line %llu", path, (unsigned long long)line);
        char *k = s;
        while (s < e && !is_space((unsigned char)*s)) s++;
        if (s == e)
            return cxs_diagf(d, CXS_E_INPUT, "%s: '%s' alone: expected `utterance-id "
                             "path.ark:offset`", where, k);
        *s++ = 0;
        while (s < e && is_space((unsigned char)*s)) s++;
        char *rx = s;
        size_t rl = strlen(rx);
        if ((rc = check_key(where, k, d))) return rc;
        if (rx[rl - 1] == '|' || !strcmp(rx, "-"))
            return cxs_diagf(d, CXS_E_INPUT, "%s: %s: '%s' is a pipe or standard input: only "
                             "files are read (write the features to an archive first: "
                             "copy-feats scp:%s ark,scp:feats.ark,feats.scp)", where, k, rx, path);
        if (rx[rl - 1] == ']')
            return cxs_diagf(d, CXS_E_INPUT, "%s: %s: '%s' selects a range of rows or columns: "
                             "not supported (write the selection to an archive first: "
                             "copy-feats scp:%s ark,scp:feats.ark,feats.scp)", where, k, rx, path);
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
        if ((rc = files_add(fs, rx, &fi)) || (rc = add_ent(L, k, fi, off, line)))
            return cxs_diagf(d, rc, "out of memory");
        s = next;
    }
    return 0;
}

/* Index a bare archive: `key ` then an object, over and over. */
static int read_ark(listing *L, files *fs, const char *path, cxs_diag *d) {
    uint32_t fi;
    int rc;
    if ((rc = files_add(fs, path, &fi))) return cxs_diagf(d, rc, "out of memory");
    if ((rc = files_open(fs, fi, d))) return rc;
    const arkfile *a = &fs->f[fi];
    enum { WIN = CXS_MAX_ID_LEN + 64 + KALDI_MAX_HEAD };
    uint8_t buf[WIN + 1];
    uint64_t pos = 0;
    for (;;) {
        size_t got = 0;
        if ((rc = pread_all(a->fd, buf, WIN, pos, &got)))
            return cxs_diagf(d, rc, "%s: %s", path, strerror(-rc));
        size_t i = 0;
        while (i < got && is_space(buf[i])) i++;
        if (i == got) {
            if (got < WIN) break; /* only white space to the end */
            pos += got;
            continue;
        }
        size_t k0 = i;
        while (i < got && !is_space(buf[i]) && buf[i]) i++;
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
        if ((rc = check_key(where, key, d)) || (rc = add_ent(L, key, fi, obj, 0))) {
            free(key);
            return rc == -ENOMEM ? cxs_diagf(d, rc, "out of memory") : rc;
        }
        kaldi_hdr h;
        char why[200];
        size_t have = got - (i + 1);
        rc = kaldi_parse(buf + i + 1, have, &h, why, sizeof why);
        if (rc)
            return cxs_diagf(d, CXS_E_INPUT, "%s: offset %llu: utterance %s: %s%s", path,
                             (unsigned long long)obj, key, why,
                             rc == CXS_E_TRUNCATED ? " (truncated archive)" : "");
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

/* ---- labels ------------------------------------------------------------- */

typedef struct lab {
    char *key;
    char *toks; /* the rest of the line */
    uint64_t line;
    uint64_t order;
} lab;

typedef struct labels {
    lab *l;
    size_t n, cap;
    char *text;
    const char *path;
    const char *what; /* "text" or "alignment" */
} labels;

static int lab_cmp(const void *a, const void *b) {
    const lab *x = a, *y = b;
    int c = key_cmp(x->key, y->key);
    return c ? c : (x->order > y->order) - (x->order < y->order);
}

static int read_labels(labels *B, const char *path, cxs_diag *d) {
    size_t len;
    int rc = slurp(path, &B->text, &len, d);
    if (rc) return rc;
    B->path = path;
    char *s = B->text, *end = s + len;
    for (uint64_t line = 1; s < end; line++) {
        char *nl = memchr(s, '\n', (size_t)(end - s)), *e = nl ? nl : end;
        char *next = nl ? nl + 1 : end;
        while (e > s && is_space((unsigned char)e[-1])) e--;
        *e = 0;
        while (s < e && is_space((unsigned char)*s)) s++;
        if (s < e) {
            char *k = s;
            while (s < e && !is_space((unsigned char)*s)) s++;
            if (s < e) *s++ = 0;
            void *p = B->l;
            if (grow(&p, &B->cap, B->n + 1, sizeof *B->l)) return cxs_diagf(d, -ENOMEM, "out of memory");
            B->l = p;
            B->l[B->n] = (lab){k, s, line, B->n};
            B->n++;
        }
        s = next;
    }
    qsort(B->l, B->n, sizeof *B->l, lab_cmp);
    for (size_t i = 1; i < B->n; i++)
        if (!key_cmp(B->l[i - 1].key, B->l[i].key))
            return cxs_diagf(d, CXS_E_INPUT, "%s: utterance %s twice, lines %llu and %llu", path,
                             B->l[i].key, (unsigned long long)B->l[i - 1].line,
                             (unsigned long long)B->l[i].line);
    return 0;
}

/* The next token of *s (white space separated), or NULL. */
static char *next_tok(char **s) {
    char *p = *s;
    while (*p && is_space((unsigned char)*p)) p++;
    if (!*p) {
        *s = p;
        return NULL;
    }
    char *t = p;
    while (*p && !is_space((unsigned char)*p)) p++;
    *s = p;
    return t;
}

static size_t tok_len(const char *t) {
    size_t n = 0;
    while (t[n] && !is_space((unsigned char)t[n])) n++;
    return n;
}

/* A non-negative decimal integer below 2^31, or -1. */
static long tok_int(const char *t, size_t n) {
    if (n == 0 || n > 10) return -1;
    long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (t[i] < '0' || t[i] > '9') return -1;
        v = v * 10 + (t[i] - '0');
    }
    return v <= 0x7fffffffL ? v : -1;
}

/* ---- the vocabulary ----------------------------------------------------- */

typedef struct vocab {
    char **sym;      /* by label */
    uint32_t n;
    uint32_t *by_name; /* labels sorted by symbol */
    int ids;         /* a symbol table: integer tokens are labels */
    char *text;
} vocab;

static const vocab *g_sort_vocab; /* qsort has no user pointer in C11 */

static int by_name_cmp(const void *a, const void *b) {
    return strcmp(g_sort_vocab->sym[*(const uint32_t *)a], g_sort_vocab->sym[*(const uint32_t *)b]);
}

static int vocab_index(vocab *v, const char *path, cxs_diag *d) {
    if (v->n > CXS_MAX_VOCAB)
        return cxs_diagf(d, CXS_E_INPUT, "%s: %u symbols; a dataset holds at most %u (use a "
                         "smaller unit: phones, characters or word pieces)", path, v->n,
                         CXS_MAX_VOCAB);
    if (!(v->by_name = malloc((v->n + 1) * sizeof *v->by_name)))
        return cxs_diagf(d, -ENOMEM, "out of memory");
    for (uint32_t i = 0; i < v->n; i++) v->by_name[i] = i;
    g_sort_vocab = v;
    qsort(v->by_name, v->n, sizeof *v->by_name, by_name_cmp);
    for (uint32_t i = 1; i < v->n; i++)
        if (!strcmp(v->sym[v->by_name[i - 1]], v->sym[v->by_name[i]]))
            return cxs_diagf(d, CXS_E_INPUT, "%s: symbol '%s' twice", path,
                             v->sym[v->by_name[i]]);
    return 0;
}

/* The label of token t (n bytes), or -1. */
static long vocab_lookup(const vocab *v, const char *t, size_t n) {
    size_t lo = 0, hi = v->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const char *s = v->sym[v->by_name[mid]];
        int c = strncmp(s, t, n);
        if (c == 0) c = s[n] ? 1 : 0;
        if (c == 0) return v->by_name[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    if (v->ids) {
        long x = tok_int(t, n);
        if (x >= 0 && x < (long)v->n) return x;
    }
    return -1;
}

/* A vocabulary file: a Kaldi symbol table (every line `symbol id`) or one
 * symbol per line. */
static int vocab_read(vocab *v, const char *path, cxs_diag *d) {
    size_t len;
    int rc = slurp(path, &v->text, &len, d);
    if (rc) return rc;
    char *s = v->text, *end = s + len;
    size_t nl_count = 0, pairs = 0, cap = 0;
    char **sym = NULL;
    long *id = NULL;
    size_t idcap = 0;
    for (uint64_t line = 1; s < end; line++) {
        char *nl = memchr(s, '\n', (size_t)(end - s)), *e = nl ? nl : end;
        char *next = nl ? nl + 1 : end;
        if (e > s && e[-1] == '\r') e--;
        *e = 0;
        if (s == e) {
            if (next == end) break;
            free(sym);
            free(id);
            return cxs_diagf(d, CXS_E_INPUT, "%s: line %llu is empty (one symbol per line, or "
                             "`symbol id` lines)", path, (unsigned long long)line);
        }
        void *p = sym;
        size_t c2 = cap;
        if (grow(&p, &c2, nl_count + 1, sizeof *sym)) goto oom;
        sym = p;
        p = id;
        if (grow(&p, &idcap, nl_count + 1, sizeof *id)) goto oom;
        id = p;
        cap = c2;
        sym[nl_count] = s;
        id[nl_count] = -1;
        /* `symbol id`: two fields, the second an integer */
        char *sp = s;
        while (*sp && !is_space((unsigned char)*sp)) sp++;
        if (*sp) {
            char *q = sp;
            while (*q && is_space((unsigned char)*q)) q++;
            long x = tok_int(q, tok_len(q));
            if (x >= 0 && !q[tok_len(q)]) {
                id[nl_count] = x;
                pairs++;
            }
        }
        nl_count++;
        s = next;
    }
    if (nl_count == 0) {
        free(sym);
        free(id);
        return cxs_diagf(d, CXS_E_INPUT, "%s: empty vocabulary", path);
    }
    if (pairs == nl_count) {
        /* a symbol table: the label is the id, ids 0..n-1 */
        v->ids = 1;
        v->n = (uint32_t)nl_count;
        if (!(v->sym = calloc(nl_count, sizeof *v->sym))) goto oom;
        for (size_t i = 0; i < nl_count; i++) {
            char *sp = sym[i];
            while (*sp && !is_space((unsigned char)*sp)) sp++;
            *sp = 0;
            if (id[i] >= (long)nl_count || v->sym[id[i]]) {
                free(sym);
                free(id);
                return cxs_diagf(d, CXS_E_INPUT, "%s: symbol table line %zu: id %ld %s (ids must "
                                 "be 0..%zu, each once)", path, i + 1, id[i],
                                 id[i] >= (long)nl_count ? "out of range" : "twice",
                                 nl_count - 1);
            }
            v->sym[id[i]] = sym[i];
        }
        free(sym);
    } else {
        v->sym = sym;
        v->n = (uint32_t)nl_count;
    }
    free(id);
    return vocab_index(v, path, d);
oom:
    free(sym);
    free(id);
    return cxs_diagf(d, -ENOMEM, "out of memory");
}

static int str_ptr_cmp(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The vocabulary of the labels themselves: "0".."max" when every token is
 * an integer, else the distinct tokens in byte order. */
static int vocab_build(vocab *v, const labels *B, cxs_diag *d) {
    size_t n = 0, cap = 0;
    char **all = NULL;
    long max = -1;
    int ints = 1;
    for (size_t i = 0; i < B->n; i++) {
        char *s = B->l[i].toks, *t;
        while ((t = next_tok(&s))) {
            size_t l = tok_len(t);
            long x = tok_int(t, l);
            if (x < 0) ints = 0;
            else if (x > max) max = x;
            void *p = all;
            if (grow(&p, &cap, n + 1, sizeof *all)) {
                free(all);
                return cxs_diagf(d, -ENOMEM, "out of memory");
            }
            all = p;
            all[n++] = t;
        }
    }
    /* tokens end at white space: copy them out NUL-terminated */
    if (ints && n) {
        if (max >= (long)CXS_MAX_VOCAB) {
            free(all);
            return cxs_diagf(d, CXS_E_INPUT, "%s: integer label %ld; a dataset holds at most %u "
                             "symbols", B->path, max, CXS_MAX_VOCAB);
        }
        v->n = (uint32_t)max + 1;
        v->ids = 1;
        if (!(v->sym = calloc(v->n, sizeof *v->sym))) goto oom;
        for (uint32_t i = 0; i < v->n; i++) {
            char num[16];
            snprintf(num, sizeof num, "%u", i);
            if (!(v->sym[i] = strdup(num))) goto oom;
        }
    } else {
        for (size_t i = 0; i < n; i++)
            if (!(all[i] = strndup(all[i], tok_len(all[i])))) {
                for (size_t j = 0; j < i; j++) free(all[j]);
                goto oom;
            }
        qsort(all, n, sizeof *all, str_ptr_cmp);
        size_t u = 0;
        for (size_t i = 0; i < n; i++) {
            if (u && !strcmp(all[u - 1], all[i])) free(all[i]);
            else all[u++] = all[i];
        }
        if (u > CXS_MAX_VOCAB) {
            for (size_t i = 0; i < u; i++) free(all[i]);
            free(all);
            return cxs_diagf(d, CXS_E_INPUT, "%s: %zu distinct symbols; a dataset holds at most "
                             "%u (use a smaller unit: phones, characters or word pieces)",
                             B->path, u, CXS_MAX_VOCAB);
        }
        v->sym = all;
        v->n = (uint32_t)u;
        all = NULL;
    }
    free(all);
    v->text = NULL;
    return vocab_index(v, B->path, d);
oom:
    free(all);
    return cxs_diagf(d, -ENOMEM, "out of memory");
}

static void vocab_free(vocab *v, int owned) {
    if (owned && v->sym)
        for (uint32_t i = 0; i < v->n; i++) free(v->sym[i]);
    free(v->sym);
    free(v->by_name);
    free(v->text);
    memset(v, 0, sizeof *v);
}

/* ---- the import --------------------------------------------------------- */

typedef struct importer {
    const cxs_kaldi_opts *ko;
    cxs_writer *w;
    int skip;
    char msg[sizeof(((cxs_diag *)0)->message)];
} importer;

static void note(importer *im, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(importer *im, const char *fmt, ...) {
    if (!im->ko->note) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(im->msg, sizeof im->msg, fmt, ap);
    va_end(ap);
    im->ko->note(im->ko->note_user, im->msg);
}

/* A bad utterance: skipped and noted, or the import's failure. */
static int bad(importer *im, const char *key, cxs_diag *d) {
    if (!im->skip) {
        size_t l = strlen(d->message);
        snprintf(d->message + l, sizeof d->message - l, " (--on-error skip leaves bad "
                 "utterances out)");
        return CXS_E_INPUT;
    }
    int rc = cxs_writer_skip(im->w, key, d->message);
    if (rc) return cxs_diagf(d, rc, "out of memory");
    note(im, "skipped: %s", d->message);
    return 0;
}

void cxs_kaldi_opts_init(cxs_kaldi_opts *o) { memset(o, 0, sizeof *o); }

/* ---- the shard plan of a split import ------------------------------------ */

static int u32_cmp(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* Which shard every listed utterance goes to, decided from the objects'
 * headers before any data is read, as pack's plan does it (tools/pack.c):
 * utterances in id order, greedily, while the uncompressed shard file
 * stays within the shard size, each counted with the frames its header
 * declares (0 when it cannot be read) and the most common width.  An
 * utterance later skipped keeps its place.  member gets n entries; T the
 * frames; *hash the listing's hash (ids, frames, widths). */
static int plan_shards(listing *L, files *fs, const cxs_writer_opts *wo, uint32_t lw,
                       uint32_t *member, uint64_t *T, uint32_t *nshards, uint64_t *hash,
                       cxs_diag *d) {
    uint32_t *D = calloc(L->n + 1, sizeof *D);
    if (!D) return cxs_diagf(d, -ENOMEM, "out of memory");
    for (size_t i = 0; i < L->n; i++) {
        const ent *e = &L->e[i];
        uint8_t head[KALDI_MAX_HEAD];
        size_t got = 0;
        kaldi_hdr h;
        char why[8];
        T[i] = 0;
        if (files_open(fs, e->file, d)) continue;
        if (pread_all(fs->f[e->file].fd, head, sizeof head, e->off, &got)) continue;
        if (kaldi_parse(head, got, &h, why, sizeof why) || h.cols > CXS_MAX_DIM) continue;
        T[i] = h.rows;
        D[i] = (uint32_t)h.cols;
    }
    /* the most common width (0: no header read) */
    uint32_t width = 0;
    uint32_t *sorted = malloc((L->n + 1) * sizeof *sorted);
    if (!sorted) {
        free(D);
        return cxs_diagf(d, -ENOMEM, "out of memory");
    }
    memcpy(sorted, D, L->n * sizeof *sorted);
    qsort(sorted, L->n, sizeof *sorted, u32_cmp);
    for (size_t i = 0, best = 0; i < L->n;) {
        size_t j = i;
        while (j < L->n && sorted[j] == sorted[i]) j++;
        if (sorted[i] && j - i > best) {
            best = j - i;
            width = sorted[i];
        }
        i = j;
    }
    free(sorted);
    const uint64_t E = cxs_dtype_size(wo->dtype), G = wo->guard;
    uint64_t U = 0, F = 0, idb = 0;
    uint32_t s = 0;
    XXH3_state_t *x = XXH3_createState();
    if (!x) {
        free(D);
        return cxs_diagf(d, -ENOMEM, "out of memory");
    }
    XXH3_64bits_reset(x);
    for (size_t i = 0; i < L->n; i++) {
        uint64_t il = strlen(L->e[i].key);
        if (U > 0 && cxs_shard_file_size(U + 1, F + T[i], idb + il, width, E, G, lw) >
                         wo->shard_size) {
            s++;
            U = F = idb = 0;
        }
        U++;
        F += T[i];
        idb += il;
        member[i] = s;
        uint8_t rec[12];
        cxs_st64(rec, T[i]);
        cxs_st32(rec + 8, D[i]);
        XXH3_64bits_update(x, L->e[i].key, il + 1);
        XXH3_64bits_update(x, rec, sizeof rec);
    }
    *hash = XXH3_64bits_digest(x);
    XXH3_freeState(x);
    free(D);
    *nshards = L->n ? s + 1 : 0;
    return 0;
}

static int has_suffix(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

/* scp (1) or archive (0), and the path without a Kaldi-style prefix. */
static int input_kind(const char *in, const char **path, cxs_diag *d) {
    if (!strncmp(in, "scp:", 4) || !strncmp(in, "ark:", 4)) {
        *path = in + 4;
        return in[0] == 's';
    }
    *path = in;
    if (has_suffix(in, ".scp")) return 1;
    if (has_suffix(in, ".ark")) return 0;
    /* by the bytes: an archive has a NUL (the binary marker) after its first id */
    int fd = open(in, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return cxs_diagf(d, errno == ENOENT ? CXS_E_INPUT : -errno, "%s: %s", in, strerror(errno));
    uint8_t b[CXS_MAX_ID_LEN + 8];
    size_t got = 0;
    int rc = pread_all(fd, b, sizeof b, 0, &got);
    close(fd);
    if (rc) return cxs_diagf(d, rc, "%s: %s", in, strerror(-rc));
    return memchr(b, 0, got) ? 0 : 1;
}

int cxs_import_kaldi(const char *in, const char *out, const cxs_writer_opts *wo_in,
                     const cxs_kaldi_opts *ko_in, cxs_progress_fn progress, void *user,
                     cxs_import_info *info, cxs_diag *d) {
    if (!in || !out || !wo_in) return cxs_diagf(d, CXS_E_INVALID, "import: no input, output or options");
    cxs_kaldi_opts kdef;
    cxs_kaldi_opts_init(&kdef);
    const cxs_kaldi_opts *ko = ko_in ? ko_in : &kdef;
    if (ko->text && ko->ali)
        return cxs_diagf(d, CXS_E_INVALID, "import: give a text file or alignments, not both "
                         "(one vocabulary per dataset)");
    if (ko->vocab && !ko->text && !ko->ali)
        return cxs_diagf(d, CXS_E_INVALID, "import: a vocabulary without labels (give a text "
                         "file or alignments)");
    listing L = {0};
    files fs = {0};
    labels B = {0};
    vocab V = {0};
    int vocab_owned = 0;
    importer im = {ko, NULL, (int)wo_in->on_error_skip, ""};
    cxs_import_info res;
    memset(&res, 0, sizeof res);
    uint8_t *obj = NULL;
    void *vals = NULL;
    int32_t *labv = NULL;
    size_t obj_cap = 0, vals_cap = 0, lab_cap = 0;
    uint32_t *member = NULL; /* a split import's plan */
    uint64_t *frames = NULL;
    const char *path;
    int rc = input_kind(in, &path, d);
    if (rc < 0) return rc;
    L.is_scp = rc;
    L.name = path;
    rc = L.is_scp ? read_scp(&L, &fs, path, d) : read_ark(&L, &fs, path, d);
    if (rc) goto out;
    if (L.n == 0) {
        rc = cxs_diagf(d, CXS_E_INPUT, "%s: no utterance listed", path);
        goto out;
    }
    res.listed = L.n;
    /* Ids in byte order, as the writer and the reader need them. */
    for (size_t i = 1; i < L.n; i++)
        if (key_cmp(L.e[i - 1].key, L.e[i].key) > 0) {
            if (ko->flags & CXS_KALDI_NO_SORT) {
                if (L.is_scp)
                    rc = cxs_diagf(d, CXS_E_INPUT, "%s: not sorted: line %llu (%s) comes after "
                                   "line %llu (%s); sort it as Kaldi wants it: LC_ALL=C sort -k1,1 "
                                   "%s -o %s (or import without --no-sort)", path,
                                   (unsigned long long)L.e[i].line, L.e[i].key,
                                   (unsigned long long)L.e[i - 1].line, L.e[i - 1].key, path,
                                   path);
                else
                    rc = cxs_diagf(d, CXS_E_INPUT, "%s: not sorted: %s (offset %llu) comes after "
                                   "%s; import without --no-sort, or write a sorted copy: "
                                   "copy-feats ark:%s ark,scp:sorted.ark,sorted.scp, then "
                                   "LC_ALL=C sort -k1,1 sorted.scp", path, L.e[i].key,
                                   (unsigned long long)L.e[i].off, L.e[i - 1].key, path);
                goto out;
            }
            res.sorted = 1;
            break;
        }
    if (res.sorted) {
        qsort(L.e, L.n, sizeof *L.e, ent_cmp);
        note(&im, "%s: utterance ids not in byte order: sorted (%zu utterances)", path, L.n);
    }
    for (size_t i = 1; i < L.n; i++)
        if (!key_cmp(L.e[i - 1].key, L.e[i].key)) {
            if (L.is_scp)
                rc = cxs_diagf(d, CXS_E_INPUT, "%s: utterance %s twice, lines %llu and %llu",
                               path, L.e[i].key, (unsigned long long)L.e[i - 1].line,
                               (unsigned long long)L.e[i].line);
            else
                rc = cxs_diagf(d, CXS_E_INPUT, "%s: utterance %s twice, offsets %llu and %llu",
                               path, L.e[i].key, (unsigned long long)L.e[i - 1].off,
                               (unsigned long long)L.e[i].off);
            goto out;
        }
    /* Labels, matched against the listing before anything is written. */
    const char *lpath = ko->text ? ko->text : ko->ali;
    const char *lwhat = ko->text ? "text" : "alignment";
    if (lpath) {
        if ((rc = read_labels(&B, lpath, d))) goto out;
        size_t j = 0, missing = 0, extra = 0;
        const ent *first_missing = NULL;
        const lab *first_extra = NULL;
        for (size_t i = 0; i < L.n; i++) {
            while (j < B.n && key_cmp(B.l[j].key, L.e[i].key) < 0) {
                if (!extra++) first_extra = &B.l[j];
                j++;
            }
            if (j < B.n && !key_cmp(B.l[j].key, L.e[i].key)) j++;
            else if (!missing++) first_missing = &L.e[i];
        }
        for (; j < B.n; j++)
            if (!extra++) first_extra = &B.l[j];
        if (missing && !im.skip) {
            rc = cxs_diagf(d, CXS_E_INPUT, "%s: utterance %s has no line in the %s file %s (%zu "
                           "of the %zu utterances have none; --on-error skip leaves them out, "
                           "or fix the data directory: utils/fix_data_dir.sh)", path,
                           first_missing->key, lwhat, lpath, missing, L.n);
            goto out;
        }
        if (extra) {
            if (!im.skip) {
                rc = cxs_diagf(d, CXS_E_INPUT, "%s line %llu: utterance %s has no features in "
                               "%s (%zu such line%s; --on-error skip ignores them, or fix the "
                               "data directory: utils/fix_data_dir.sh)", lpath,
                               (unsigned long long)first_extra->line, first_extra->key, path,
                               extra, extra == 1 ? "" : "s");
                goto out;
            }
            note(&im, "%s: %zu line%s for utterances without features ignored (the first: line "
                 "%llu, %s)", lpath, extra, extra == 1 ? "" : "s",
                 (unsigned long long)first_extra->line, first_extra->key);
        }
        if (ko->vocab) {
            if ((rc = vocab_read(&V, ko->vocab, d))) goto out;
        } else {
            if ((rc = vocab_build(&V, &B, d))) goto out;
            vocab_owned = 1;
        }
        if (V.n == 0) {
            rc = cxs_diagf(d, CXS_E_INPUT, "%s: no labels in the file", lpath);
            goto out;
        }
        res.vocab_size = V.n;
    }
    cxs_writer_opts wo = *wo_in;
    wo.vocab_size = V.n;
    wo.vocab = (const char *const *)V.sym;
    wo.label_seqs = ko->text ? CXS_SEQ_ONLY : CXS_SEQ_NONE;
    wo.part = NULL;
    wo.flags &= ~CXS_WRITER_MANUAL_CUT;
    /* A split import: the plan for the whole listing, this part's slice of
     * whole shards, cut where the plan says. */
    size_t i_lo = 0, i_hi = L.n;
    cxs_writer_part part;
    if (ko->parts) {
        if (ko->part < 1 || ko->part > ko->parts) {
            rc = cxs_diagf(d, CXS_E_INVALID, "import: part %u of %u", ko->part, ko->parts);
            goto out;
        }
        const uint32_t lw = ko->ali ? (V.n <= 256 ? 1 : 2) : 0;
        uint32_t ns = 0;
        uint64_t hash = 0;
        if (!(member = calloc(L.n + 1, sizeof *member)) || !(frames = calloc(L.n + 1, sizeof *frames))) {
            rc = cxs_diagf(d, -ENOMEM, "out of memory");
            goto out;
        }
        if ((rc = plan_shards(&L, &fs, &wo, lw, member, frames, &ns, &hash, d))) goto out;
        if (ns < ko->parts && ns < L.n) {
            rc = cxs_diagf(d, CXS_E_INPUT, "%s: --part %u/%u: at this --shard-size the %zu "
                           "utterances make %u shard%s, fewer than the %u parts (a part is whole "
                           "shards): give a smaller --shard-size", path, ko->part, ko->parts,
                           L.n, ns, ns == 1 ? "" : "s", ko->parts);
            goto out;
        }
        uint32_t s_lo = (uint32_t)((uint64_t)ns * (ko->part - 1) / ko->parts);
        uint32_t s_hi = (uint32_t)((uint64_t)ns * ko->part / ko->parts);
        while (i_lo < L.n && member[i_lo] < s_lo) i_lo++;
        i_hi = i_lo;
        while (i_hi < L.n && member[i_hi] < s_hi) i_hi++;
        uint64_t f_base = 0;
        for (size_t i = 0; i < i_lo; i++) f_base += frames[i];
        part = (cxs_writer_part){ko->part, ko->parts, s_lo, s_hi, ns, i_lo, f_base, L.n, i_lo,
                                 i_hi, hash};
        wo.part = &part;
        wo.flags |= CXS_WRITER_MANUAL_CUT;
    }
    if ((rc = cxs_writer_create(out, &wo, &im.w, d))) goto out;
    size_t j = 0;
    int have = 0;
    uint32_t cur = 0;
    for (size_t i = i_lo; i < i_hi; i++) {
        const ent *e = &L.e[i];
        char where[512];
        arkfile *a = &fs.f[e->file];
        const lab *lb = NULL;
        if (lpath) {
            while (j < B.n && key_cmp(B.l[j].key, e->key) < 0) j++;
            if (j < B.n && !key_cmp(B.l[j].key, e->key)) lb = &B.l[j];
        }
        if (e->line)
            snprintf(where, sizeof where, "%s line %llu: %s: %s offset %llu", path,
                     (unsigned long long)e->line, e->key, a->path, (unsigned long long)e->off);
        else
            snprintf(where, sizeof where, "%s: offset %llu: utterance %s", path,
                     (unsigned long long)e->off, e->key);
        if ((rc = files_open(&fs, e->file, d))) {
            if (rc != CXS_E_INPUT || (rc = bad(&im, e->key, d))) goto out;
            goto next;
        }
        kaldi_hdr h;
        char why[256];
        uint8_t head[KALDI_MAX_HEAD];
        size_t got = 0;
        if (e->off > a->size) {
            cxs_diagf(d, CXS_E_INPUT, "%s: the offset is past the end of the file (%llu bytes)",
                      where, (unsigned long long)a->size);
            if ((rc = bad(&im, e->key, d))) goto out;
            goto next;
        }
        if ((rc = pread_all(a->fd, head, sizeof head, e->off, &got))) {
            cxs_diagf(d, rc, "%s: %s", a->path, strerror(-rc));
            goto out;
        }
        int prc = kaldi_parse(head, got, &h, why, sizeof why);
        if (!prc && e->off + h.size > a->size) {
            snprintf(why, sizeof why, "%s %llux%llu needs %llu bytes, the file ends %llu bytes "
                     "after its start (truncated archive)", kaldi_kind_name(h.kind),
                     (unsigned long long)h.rows, (unsigned long long)h.cols,
                     (unsigned long long)h.size, (unsigned long long)(a->size - e->off));
            prc = CXS_E_TRUNCATED;
        } else if (!prc && (h.rows == 0 || h.cols == 0)) {
            snprintf(why, sizeof why, "an empty %s (%llux%llu)", kaldi_kind_name(h.kind),
                     (unsigned long long)h.rows, (unsigned long long)h.cols);
            prc = CXS_E_INPUT;
        } else if (!prc && h.cols > CXS_MAX_DIM) {
            snprintf(why, sizeof why, "%s with %llu columns (at most %u features per frame)",
                     kaldi_kind_name(h.kind), (unsigned long long)h.cols, CXS_MAX_DIM);
            prc = CXS_E_INPUT;
        } else if (prc == CXS_E_TRUNCATED && e->line) {
            size_t l = strlen(why);
            snprintf(why + l, sizeof why - l, " (truncated archive, or a wrong offset)");
        } else if (prc == CXS_E_CORRUPT && e->line) {
            size_t l = strlen(why);
            snprintf(why + l, sizeof why - l, " (a wrong offset?)");
        }
        if (prc) {
            cxs_diagf(d, CXS_E_INPUT, "%s: %s", where, why);
            if ((rc = bad(&im, e->key, d))) goto out;
            goto next;
        }
        if (h.size > SIZE_MAX / 2 || grow((void **)&obj, &obj_cap, (size_t)h.size, 1) ||
            grow(&vals, &vals_cap, (size_t)(h.rows * h.cols), 8)) {
            rc = cxs_diagf(d, -ENOMEM, "%s: out of memory (%llu bytes)", where,
                           (unsigned long long)h.size);
            goto out;
        }
        if ((rc = pread_all(a->fd, obj, (size_t)h.size, e->off, &got))) {
            cxs_diagf(d, rc, "%s: %s", a->path, strerror(-rc));
            goto out;
        }
        if (got != h.size) {
            cxs_diagf(d, CXS_E_INPUT, "%s: the file shrank while being read", where);
            if ((rc = bad(&im, e->key, d))) goto out;
            goto next;
        }
        kaldi_decode(&h, obj, vals);
        res.kinds |= 1u << h.kind;
        res.input_bytes += h.size;
        cxs_writer_utt u;
        memset(&u, 0, sizeof u);
        u.data = vals;
        u.frames = h.rows;
        u.dim = h.cols;
        u.type = kaldi_is_double(&h) ? CXS_DTYPE_F64 : CXS_DTYPE_F32;
        if (lpath) {
            if (!lb) {
                cxs_diagf(d, CXS_E_INPUT, "%s: no line in the %s file %s", where, lwhat, lpath);
                if ((rc = bad(&im, e->key, d))) goto out;
                goto next;
            }
            size_t n = 0;
            char *s = lb->toks, *t;
            int badtok = 0;
            while ((t = next_tok(&s))) {
                size_t tl = tok_len(t);
                long x = vocab_lookup(&V, t, tl);
                if (x < 0) {
                    cxs_diagf(d, CXS_E_INPUT, "%s line %llu: utterance %s: token %zu '%.*s' is "
                              "not in the vocabulary (%s, %u symbols)", lpath,
                              (unsigned long long)lb->line, e->key, n + 1, (int)(tl > 64 ? 64 : tl),
                              t, ko->vocab ? ko->vocab : "built from the data", V.n);
                    badtok = 1;
                    break;
                }
                if (grow((void **)&labv, &lab_cap, n + 1, sizeof *labv)) {
                    rc = cxs_diagf(d, -ENOMEM, "out of memory");
                    goto out;
                }
                labv[n++] = (int32_t)x;
            }
            if (!badtok && n == 0) {
                cxs_diagf(d, CXS_E_INPUT, "%s line %llu: utterance %s: no %s", lpath,
                          (unsigned long long)lb->line, e->key,
                          ko->text ? "words (an empty transcript)" : "labels");
                badtok = 1;
            }
            if (!badtok && ko->ali && n != h.rows) {
                cxs_diagf(d, CXS_E_INPUT, "%s line %llu: utterance %s: %zu labels for %llu frames "
                          "(%s)", lpath, (unsigned long long)lb->line, e->key, n,
                          (unsigned long long)h.rows, where);
                badtok = 1;
            }
            if (badtok) {
                if ((rc = bad(&im, e->key, d))) goto out;
                goto next;
            }
            if (ko->ali) {
                u.labels = labv;
                u.label_count = n;
                u.label_size = 4;
            } else {
                u.seq = labv;
                u.seq_count = n;
                u.seq_size = 4;
            }
        }
        if (member && have && member[i] != cur && (rc = cxs_writer_cut(im.w, d))) goto out;
        if (member) cur = member[i];
        have = 1;
        if ((rc = cxs_writer_add(im.w, e->key, &u, d))) {
            if (rc != CXS_E_INPUT) goto out;
            /* the writer's reason, with where the utterance came from */
            char reason[sizeof d->message];
            size_t kl = strlen(e->key);
            const char *r = d->message;
            if (!strncmp(r, e->key, kl) && r[kl] == ':' && r[kl + 1] == ' ') r += kl + 2;
            snprintf(reason, sizeof reason, "%s", r);
            cxs_diagf(d, CXS_E_INPUT, "%s: %s", where, reason);
            if ((rc = bad(&im, e->key, d))) goto out;
        }
    next:
        if (progress && progress(user, i + 1 - i_lo, i_hi - i_lo)) {
            rc = cxs_diagf(d, -ECANCELED, "%s: import stopped", out);
            goto out;
        }
    }
    cxs_writer_info wi;
    cxs_writer_info_get(im.w, &wi);
    if (wi.num_utterances == 0 && !ko->parts) {
        rc = cxs_diagf(d, CXS_E_INPUT, "%s: no valid utterance to import (%llu skipped)", path,
                       (unsigned long long)wi.num_skipped);
        goto out;
    }
    rc = cxs_writer_commit(im.w, &res.w, d);
    im.w = NULL;
    if (!rc && info) *info = res;
out:
    cxs_writer_abort(im.w);
    free(member);
    free(frames);
    free(obj);
    free(vals);
    free(labv);
    if (!L.is_scp)
        for (size_t i = 0; i < L.n; i++) free(L.e[i].key);
    free(L.e);
    free(L.text);
    files_free(&fs);
    free(B.l);
    free(B.text);
    vocab_free(&V, vocab_owned);
    return rc;
}
