/* npy_raw.c - listing, validation and conversion of the utterances of a raw
 * .npy directory (npy_raw.h), for cxs_import_npy (npy_import.c). */
#include "npy_raw.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctxshard.h"
#include "ctxshard_import.h"
#include "cxs_features.h"
#include "cxs_format.h"
#include "cxs_le.h"
#include "cxs_npy.h"
#include "cxs_qcodec.h"
#include "writer_internal.h"

static const char *const default_symbols[] = {
    "[SIL]", "AA", "AE", "AH", "AO", "AW", "AY", "B",  "CH", "D",  "DH",    "EH",   "ER", "EY",
    "F",     "G",  "HH", "IH", "IY", "JH", "K",  "L",  "M",  "N",  "NG",    "OW",   "OY", "P",
    "R",     "S",  "SH", "T",  "TH", "UH", "UW", "V",  "W",  "Y",  "Z",  "ZH", "[SOS]", "[EOS]"};

/* A refusal of the input, naming file (NULL: none) in d; CXS_E_INPUT. */
static int say(cxs_diag *d, const char *file, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int say(cxs_diag *d, const char *file, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    cxs_vdiag_at(d, CXS_E_INPUT, file, CXS_NO_OFFSET, fmt, ap);
    va_end(ap);
    return CXS_E_INPUT;
}

/* The machine's failure (code: -errno) while reading file. */
static int sysfail(cxs_diag *d, int code, const char *file, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int sysfail(cxs_diag *d, int code, const char *file, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    cxs_vdiag_at(d, code, file, CXS_NO_OFFSET, fmt, ap);
    va_end(ap);
    return code;
}

#define READ_NOT_REGULAR 1
#define READ_TOO_LARGE 2
static int read_file(const char *path, uint64_t max, uint8_t **buf, size_t *cap, size_t *len);

static uint32_t fnv(const char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h;
}

int64_t vocab_find(const vocab *v, const char *s, size_t n) {
    for (uint32_t h = fnv(s, n) & v->mask;; h = (h + 1) & v->mask) {
        uint32_t e = v->table[h];
        if (!e) return -1;
        e--;
        if (v->lens[e] == n && memcmp(v->sym[e], s, n) == 0) return e;
    }
}

static int vocab_add(vocab *v, const char *s, size_t n, cxs_diag *d) {
    if (n == 0 || n > CXS_MAX_SYMBOL_LEN)
        return say(d, NULL, "symbol %u is %zu bytes, must be 1..%u", v->n + 1, n,
                   CXS_MAX_SYMBOL_LEN);
    for (size_t i = 0; i < n; i++)
        if ((uint8_t)s[i] < 0x20) return say(d, NULL, "symbol %u holds a control byte", v->n + 1);
    if (v->n >= CXS_MAX_VOCAB) return say(d, NULL, "more than %u symbols", CXS_MAX_VOCAB);
    if (vocab_find(v, s, n) >= 0) return say(d, NULL, "symbol '%.*s' appears twice", (int)n, s);
    /* Keep the table at most half full. */
    if (2 * (v->n + 1) > v->mask + 1) {
        uint32_t nm = (v->mask + 1) * 2 - 1;
        uint32_t *nt = calloc((size_t)nm + 1, sizeof *nt);
        if (!nt) return sysfail(d, -ENOMEM, NULL, "out of memory");
        for (uint32_t i = 0; i < v->n; i++) {
            uint32_t h = fnv(v->sym[i], v->lens[i]) & nm;
            while (nt[h]) h = (h + 1) & nm;
            nt[h] = i + 1;
        }
        free(v->table);
        v->table = nt;
        v->mask = nm;
    }
    char **ns = realloc(v->sym, (v->n + 1) * sizeof *ns);
    if (ns) v->sym = ns;
    uint32_t *nl = realloc(v->lens, (v->n + 1) * sizeof *nl);
    if (nl) v->lens = nl;
    char *copy = malloc(n + 1);
    if (!ns || !nl || !copy) {
        free(copy);
        return sysfail(d, -ENOMEM, NULL, "out of memory");
    }
    memcpy(copy, s, n);
    copy[n] = 0;
    v->sym[v->n] = copy;
    v->lens[v->n] = (uint32_t)n;
    uint32_t h = fnv(s, n) & v->mask;
    while (v->table[h]) h = (h + 1) & v->mask;
    v->table[h] = v->n + 1;
    v->n++;
    return 0;
}

static int vocab_init(vocab *v) {
    memset(v, 0, sizeof *v);
    v->mask = 63;
    v->table = calloc(64, sizeof *v->table);
    v->sos = v->eos = -1;
    snprintf(v->sos_name, sizeof v->sos_name, "%s", SOS_SYMBOL);
    snprintf(v->eos_name, sizeof v->eos_name, "%s", EOS_SYMBOL);
    return v->table ? 0 : -1;
}

const char *const *cxs_phonemes(uint32_t *n) {
    if (n) *n = (uint32_t)(sizeof default_symbols / sizeof *default_symbols);
    return default_symbols;
}

int vocab_symbols(vocab *v, const char *const *sym, uint32_t n, cxs_diag *d) {
    if (vocab_init(v)) return sysfail(d, -ENOMEM, NULL, "out of memory");
    cxs_diag inner;
    for (uint32_t i = 0; i < n; i++) {
        int rc = vocab_add(v, sym[i], strlen(sym[i]), &inner);
        if (rc == CXS_E_INPUT) return say(d, NULL, "vocabulary: %s", inner.message);
        if (rc) return cxs_diag_copy(d, rc, &inner);
    }
    return 0;
}

int vocab_load(vocab *v, const char *path, cxs_diag *d) {
    uint8_t *buf = NULL;
    size_t cap = 0, len = 0;
    int rc = read_file(path, 16u << 20, &buf, &cap, &len);
    if (rc) {
        free(buf);
        if (rc == READ_NOT_REGULAR) return say(d, path, "%s: not a regular file", path);
        if (rc == READ_TOO_LARGE)
            return say(d, path, "%s: %zu bytes; a vocabulary file is at most 16 MiB", path, len);
        return sysfail(d, rc, path, "%s: %s", path, strerror(-rc));
    }
    if (vocab_init(v)) {
        free(buf);
        return sysfail(d, -ENOMEM, path, "out of memory");
    }
    size_t pos = 0, line = 0;
    cxs_diag inner;
    while (pos < len) {
        size_t e = pos;
        while (e < len && buf[e] != '\n') e++;
        line++;
        size_t n = e - pos;
        if (n && buf[pos + n - 1] == '\r') n--;
        if (n == 0) {
            free(buf);
            return say(d, path, "%s: line %zu is empty (one symbol per line, no blank lines)",
                       path, line);
        }
        if ((rc = vocab_add(v, (const char *)buf + pos, n, &inner))) {
            free(buf);
            if (rc != CXS_E_INPUT) return cxs_diag_copy(d, rc, &inner);
            return say(d, path, "%s: line %zu: %s", path, line, inner.message);
        }
        pos = e + 1;
    }
    free(buf);
    if (v->n == 0) return say(d, path, "%s: no symbols", path);
    return 0;
}

int vocab_markers(vocab *v, const char *sos, const char *eos, cxs_diag *d) {
    const char *s = sos ? sos : SOS_SYMBOL, *e = eos ? eos : EOS_SYMBOL;
    for (int k = 0; k < 2; k++) {
        const char *m = k ? e : s;
        size_t n = strlen(m);
        int ctl = 0;
        for (size_t i = 0; i < n; i++) ctl |= (uint8_t)m[i] < 0x20;
        if (n == 0 || n > CXS_MAX_SYMBOL_LEN || ctl)
            return cxs_diagf(d, CXS_E_INVALID, "%s '%s': a symbol is 1..%u bytes, no control bytes",
                       k ? "--eos" : "--sos", m, CXS_MAX_SYMBOL_LEN);
    }
    if (!strcmp(s, e))
        return cxs_diagf(d, CXS_E_INVALID,
                         "--sos and --eos are both '%s'; the start and end symbols must differ", s);
    snprintf(v->sos_name, sizeof v->sos_name, "%s", s);
    snprintf(v->eos_name, sizeof v->eos_name, "%s", e);
    v->sos = vocab_find(v, s, strlen(s));
    v->eos = vocab_find(v, e, strlen(e));
    return 0;
}

void vocab_free(vocab *v) {
    for (uint32_t i = 0; i < v->n; i++) free(v->sym[i]);
    free(v->sym);
    free(v->lens);
    free(v->table);
    memset(v, 0, sizeof *v);
}

/* ---- listing ---------------------------------------------------------- */

typedef struct name_list {
    char **ids;
    size_t n, cap;
} name_list;

static int list_npy(const char *dir, name_list *nl, cxs_diag *diag) {
    DIR *d = opendir(dir);
    if (!d) return say(diag, dir, "%s: %s", dir, strerror(errno));
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t n = strlen(de->d_name);
        if (n <= 4 || strcasecmp(de->d_name + n - 4, ".npy") != 0) continue;
        if (nl->n == nl->cap) {
            size_t nc = nl->cap ? nl->cap * 2 : 1024;
            char **ni = realloc(nl->ids, nc * sizeof *ni);
            if (!ni) break;
            nl->ids = ni;
            nl->cap = nc;
        }
        nl->ids[nl->n] = strdup(de->d_name);
        if (!nl->ids[nl->n]) break;
        nl->n++;
    }
    int e = errno;
    closedir(d);
    if (de) return sysfail(diag, -(e ? e : ENOMEM), dir, "%s: %s", dir, strerror(e ? e : ENOMEM));
    return 0;
}

/* Files are named <id>.npy; ".npy" may be in any case, so "a.npy" and
 * "a.NPY" are the same id twice. */
static int cmp_id(const char *a, const char *b) {
    size_t la = strlen(a) - 4, lb = strlen(b) - 4;
    int r = memcmp(a, b, la < lb ? la : lb);
    if (r) return r;
    return la < lb ? -1 : la > lb;
}

static int cmp_name_by_id(const void *a, const void *b) {
    int r = cmp_id(*(char *const *)a, *(char *const *)b);
    return r ? r : strcmp(*(char *const *)a, *(char *const *)b);
}

/* Edit distance of two short names, case-insensitive (a typo's size). */
static unsigned name_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 40 || lb > 40) return 99;
    unsigned row[41];
    for (size_t j = 0; j <= lb; j++) row[j] = (unsigned)j;
    for (size_t i = 1; i <= la; i++) {
        unsigned diag = row[0];
        row[0] = (unsigned)i;
        for (size_t j = 1; j <= lb; j++) {
            unsigned up = row[j];
            unsigned sub = diag + ((a[i - 1] | 0x20) != (b[j - 1] | 0x20));
            unsigned best = up + 1 < row[j - 1] + 1 ? up + 1 : row[j - 1] + 1;
            row[j] = sub < best ? sub : best;
            diag = up;
        }
    }
    return row[lb];
}

/* The directory pack reads that name looks like a typo of, or NULL. */
static const char *meant(const char *name) {
    static const char *const known[] = {"transcript", "mfcc"};
    for (int k = 0; k < 2; k++)
        if (name_distance(name, known[k]) <= (k == 0 ? 3u : 1u) ||
            (k == 0 && strncasecmp(name, "transcr", 7) == 0))
            return known[k];
    return NULL;
}

static int note(raw_set *rs, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int note(raw_set *rs, const char *fmt, ...) {
    char line[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    size_t have = rs->notes ? strlen(rs->notes) : 0, add = strlen(line);
    char *n = realloc(rs->notes, have + add + 2);
    if (!n) return -1;
    memcpy(n + have, line, add);
    n[have + add] = '\n';
    n[have + add + 1] = 0;
    rs->notes = n;
    return 0;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The subdirectories of root other than mfcc/ and transcript/, in name
 * order, each said in a note; whether one of them holds .npy files with
 * the ids of mfcc/ (sorted names in ml) -- the labels, misplaced. */
static void note_other_dirs(raw_set *rs, const char *root, const name_list *ml) {
    DIR *d = opendir(root);
    if (!d) return;
    name_list dirs = {0};
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.' || !strcmp(de->d_name, "mfcc") ||
            !strcmp(de->d_name, "transcript"))
            continue;
        char *p = cxs_path_join(root, de->d_name);
        struct stat st;
        int isdir = p && stat(p, &st) == 0 && S_ISDIR(st.st_mode);
        free(p);
        if (!isdir || dirs.n >= 64) continue;
        char **ni = realloc(dirs.ids, (dirs.n + 1) * sizeof *ni);
        if (!ni) break;
        dirs.ids = ni;
        if (!(dirs.ids[dirs.n] = strdup(de->d_name))) break;
        dirs.n++;
    }
    closedir(d);
    if (dirs.n) qsort(dirs.ids, dirs.n, sizeof *dirs.ids, cmp_str);
    const char *sep = root[0] && root[strlen(root) - 1] == '/' ? "" : "/";
    for (size_t k = 0; k < dirs.n; k++) {
        const char *name = dirs.ids[k];
        char *p = cxs_path_join(root, name);
        name_list nl = {0};
        cxs_diag ignored;
        size_t same = 0;
        if (p && !rs->has_transcripts && list_npy(p, &nl, &ignored) == 0)
            for (size_t i = 0; i < nl.n; i++)
                if (bsearch(&nl.ids[i], ml->ids, ml->n, sizeof *ml->ids, cmp_str)) same++;
        const char *m = same ? "transcript" : meant(name);
        if (same)
            note(rs, "%s%s%s/ holds %zu .npy file%s named like those of mfcc/ but is not read: "
                     "did you mean transcript/? Rename it (mv %s%s%s %s%stranscript) to pack "
                     "the labels", root, sep, name, same, same == 1 ? "" : "s", root, sep, name,
                 root, sep);
        else if (m && !(rs->has_transcripts && !strcmp(m, "transcript")))
            note(rs, "%s%s%s/ is not used: did you mean %s/?", root, sep, name, m);
        else
            note(rs, "%s%s%s/ is not used (pack reads mfcc/ and transcript/ only)", root, sep,
                 name);
        for (size_t i = 0; i < nl.n; i++) free(nl.ids[i]);
        free(nl.ids);
        free(p);
        free(dirs.ids[k]);
    }
    free(dirs.ids);
}

/* A split without transcripts is a test split; say so when the name does
 * not. */
static void note_no_transcripts(raw_set *rs, const char *root) {
    size_t n = strlen(root);
    while (n > 1 && root[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && root[b - 1] != '/') b--;
    char base[256];
    snprintf(base, sizeof base, "%.*s", (int)(n - b), root + b);
    for (char *c = base; *c; c++) *c = (char)(*c | 0x20);
    if (strstr(base, "test") || strstr(base, "eval")) return;
    const char *sep = root[0] && root[strlen(root) - 1] == '/' ? "" : "/";
    note(rs, "%s: no transcript/ directory: features only, without labels (a train or dev split "
             "needs %s%stranscript/<id>.npy; only a test split has none)", root, root, sep);
}

int raw_list(const char *root, raw_set *rs, cxs_diag *d) {
    memset(rs, 0, sizeof *rs);
    struct stat st;
    if (stat(root, &st) != 0) {
        int e = errno;
        if (e == ENOENT) return sysfail(d, -ENOENT, root, "%s: no such directory", root);
        return say(d, root, "%s: %s", root, strerror(e)); /* a path that cannot be one */
    }
    if (!S_ISDIR(st.st_mode)) return sysfail(d, -ENOTDIR, root, "%s: not a directory", root);
    char *md = cxs_path_join(root, "mfcc"), *td = cxs_path_join(root, "transcript");
    name_list ml = {0}, tl = {0};
    int rc = -ENOMEM;
    rs->root = strdup(root);
    if (!md || !td || !rs->root) {
        sysfail(d, rc, NULL, "out of memory");
        goto out;
    }
    if (stat(md, &st) != 0 || !S_ISDIR(st.st_mode)) {
        /* A near name (MFCC/, mfccs/) is the likely mistake: name it. */
        char near[4200] = "";
        DIR *dir = opendir(root);
        struct dirent *de;
        while (dir && (de = readdir(dir)) && !near[0])
            if (de->d_name[0] != '.' && meant(de->d_name) && !strcmp(meant(de->d_name), "mfcc"))
                snprintf(near, sizeof near, "; %.2000s/%.255s/ is there: did you mean mfcc/? (rename it)",
                         root, de->d_name);
        if (dir) closedir(dir);
        rc = sysfail(d, -ENOENT, md, "%s: no mfcc/ directory (expected %s/<id>.npy)%s", md, md,
                     near);
        goto out;
    }
    if ((rc = list_npy(md, &ml, d))) goto out;
    rs->has_transcripts = stat(td, &st) == 0 && S_ISDIR(st.st_mode);
    if (rs->has_transcripts && (rc = list_npy(td, &tl, d))) goto out;
    if (ml.n == 0) {
        rc = say(d, md, "%s: no .npy files", md);
        goto out;
    }
    qsort(ml.ids, ml.n, sizeof *ml.ids, cmp_name_by_id);
    if (tl.n) qsort(tl.ids, tl.n, sizeof *tl.ids, cmp_name_by_id);
    {
        /* The ids of mfcc/ in plain byte order, for the misplaced-labels
         * test (file names: same id, same name, for ".npy"). */
        name_list sorted = {malloc(ml.n * sizeof *ml.ids), ml.n, ml.n};
        if (sorted.ids) {
            memcpy(sorted.ids, ml.ids, ml.n * sizeof *ml.ids);
            qsort(sorted.ids, sorted.n, sizeof *sorted.ids, cmp_str);
            size_t before = rs->notes ? strlen(rs->notes) : 0;
            note_other_dirs(rs, root, &sorted);
            int misplaced = rs->notes && strstr(rs->notes + before, "did you mean transcript/? Rename");
            if (!rs->has_transcripts && !misplaced) note_no_transcripts(rs, root);
            free(sorted.ids);
        }
    }
    rc = -ENOMEM;
    rs->items = calloc(ml.n + tl.n, sizeof *rs->items);
    if (!rs->items) {
        sysfail(d, rc, NULL, "out of memory");
        goto out;
    }
    size_t a = 0, b = 0;
    while (a < ml.n || b < tl.n) {
        int c = a == ml.n ? 1 : b == tl.n ? -1 : cmp_id(ml.ids[a], tl.ids[b]);
        raw_item *it = &rs->items[rs->n++];
        const char *name = c <= 0 ? ml.ids[a] : tl.ids[b];
        it->id = strndup(name, strlen(name) - 4);
        if (c <= 0) it->mfcc = cxs_path_join(md, ml.ids[a++]);
        if (c >= 0) it->transcript = cxs_path_join(td, tl.ids[b++]);
        if (!it->id || (c <= 0 && !it->mfcc) || (c >= 0 && !it->transcript)) {
            sysfail(d, rc, NULL, "out of memory");
            goto out;
        }
    }
    rc = 0;
out:
    for (size_t i = 0; i < ml.n; i++) free(ml.ids[i]);
    for (size_t i = 0; i < tl.n; i++) free(tl.ids[i]);
    free(ml.ids);
    free(tl.ids);
    free(md);
    free(td);
    if (rc) raw_free(rs);
    return rc;
}

void raw_free(raw_set *rs) {
    for (size_t i = 0; i < rs->n; i++) {
        free(rs->items[i].id);
        free(rs->items[i].mfcc);
        free(rs->items[i].transcript);
    }
    free(rs->items);
    free(rs->root);
    free(rs->notes);
    memset(rs, 0, sizeof *rs);
}

int raw_item_problem(const raw_set *rs, size_t i, cxs_diag *d) {
    const raw_item *it = &rs->items[i];
    const char *p = it->mfcc ? it->mfcc : it->transcript;
    size_t n = strlen(it->id);
    if (n > CXS_MAX_ID_LEN)
        return say(d, p, "%s: utterance id is %zu bytes, at most %u allowed", p, n,
                   CXS_MAX_ID_LEN);
    for (size_t j = 0; j < n; j++)
        if ((uint8_t)it->id[j] < 0x20)
            return say(d, p, "%s: utterance id holds control byte 0x%02x", p,
                       (uint8_t)it->id[j]);
    if ((i > 0 && strcmp(rs->items[i - 1].id, it->id) == 0) ||
        (i + 1 < rs->n && strcmp(rs->items[i + 1].id, it->id) == 0))
        return say(d, p, "%s: duplicate utterance id '%s' (another file has the same name "
                            "with a different .npy case)", p, it->id);
    if (!it->mfcc)
        return say(d, p, "%s: transcript without features (no %s/mfcc/%s.npy)", p, rs->root,
                   it->id);
    if (rs->has_transcripts && !it->transcript)
        return say(d, p, "%s: features without a transcript (no %s/transcript/%s.npy)", p,
                   rs->root, it->id);
    return 0;
}

/* ---- one utterance ---------------------------------------------------- */

/* Read a whole file of at most max bytes into *buf (realloc'd, capacity
 * *cap).  Returns 0, -errno, READ_NOT_REGULAR, or READ_TOO_LARGE (*len is
 * then the file's size; nothing is read). */
static int read_file(const char *path, uint64_t max, uint8_t **buf, size_t *cap, size_t *len) {
    /* O_NONBLOCK: opening a FIFO must not wait for a writer (it is then
     * refused as not a regular file); regular files ignore the flag. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return -errno;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return READ_NOT_REGULAR;
    }
    if ((uint64_t)st.st_size > max) {
        close(fd);
        *len = (size_t)st.st_size;
        return READ_TOO_LARGE;
    }
    size_t want = (size_t)st.st_size;
    if (want + 1 > *cap) {
        uint8_t *nb = realloc(*buf, want + 1);
        if (!nb) {
            close(fd);
            return -ENOMEM;
        }
        *buf = nb;
        *cap = want + 1;
    }
    size_t got = 0;
    while (got < want) {
        ssize_t r = read(fd, *buf + got, want - got);
        if (r < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            close(fd);
            return -e;
        }
        if (r == 0) break; /* shrank while reading: parse what is there */
        got += (size_t)r;
    }
    close(fd);
    *len = got;
    return 0;
}

static int grow(void *pp, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    void *n = realloc(*(void **)pp, need);
    if (!n) return -1;
    *(void **)pp = n;
    *cap = need;
    return 0;
}

void utt_free(utt *u) {
    free(u->feat);
    free(u->labels);
    free(u->seq);
    free(u->sum);
    free(u->buf);
    free(u->tmp);
    memset(u, 0, sizeof *u);
}

/* Read a .npy file of at most max bytes into u->buf. */
static int read_npy_file(utt *u, const char *path, uint64_t max, const char *what, size_t *len,
                         cxs_diag *d) {
    int rc = read_file(path, max, &u->buf, &u->buf_cap, len);
    if (rc == READ_NOT_REGULAR) return say(d, path, "%s: not a regular file", path);
    if (rc == READ_TOO_LARGE)
        return say(d, path, "%s: %zu bytes, more than %s can be (%llu bytes at most)", path, *len,
                   what, (unsigned long long)max);
    if (rc == -ENOMEM || rc == -EIO || rc == -EMFILE || rc == -ENFILE)
        return sysfail(d, rc, path, "%s: %s", path, strerror(-rc)); /* the machine's, not the file's */
    if (rc) return say(d, path, "%s: %s", path, strerror(-rc));
    return 0;
}

int features_decode(utt *u, const uint8_t *buf, size_t len, const conv_opts *o, const char *path,
                    cxs_diag *d) {
    cxs_npy h;
    cxs_diag r;
    if (cxs_npy_parse(buf, len, &h, &r)) return say(d, path, "%s: %s", path, r.message);
    if (h.kind != 'f')
        return say(d, path, "%s: features have dtype kind '%c', expected float (f2, f4 or f8)",
                   path, h.kind);
    if (h.ndim != 2)
        return say(d, path, "%s: features have %d dimensions, expected 2 (frames, dim)", path,
                   h.ndim);
    uint64_t T = h.shape[0], D = h.shape[1];
    if (T == 0) return say(d, path, "%s: empty utterance (0 frames)", path);
    if (D == 0 || D > CXS_MAX_DIM)
        return say(d, path, "%s: feature dimension %llu, expected 1..%u", path,
                   (unsigned long long)D, CXS_MAX_DIM);
    size_t es = cxs_dtype_size(o->dtype);
    if (T > (SIZE_MAX / 2) / (D * 8))
        return say(d, path, "%s: %llu frames is too large", path, (unsigned long long)T);
    /* a coded dtype: the utterance's header, then its codes */
    if (grow(&u->feat, &u->feat_cap, cxs_q_header_size(o->dtype, D) + T * D * es) ||
        grow(&u->sum, &u->stat_cap, 2 * D * sizeof(double)) ||
        grow(&u->tmp, &u->tmp_cap, 2 * D * sizeof(double))) {
        return sysfail(d, -ENOMEM, path, "%s: out of memory", path);
    }
    u->T = T;
    u->D = (uint32_t)D;
    u->sumsq = u->sum + D;
    /* The conversion, the finiteness rule and the sums are the writer's
     * (format/cxs_features.c), so both store the same bytes. */
    const uint64_t isz = h.itemsize;
    cxs_fsrc fs = {buf + h.data_offset, T, D,
                   isz == 2 ? CXS_IN_F16 : isz == 4 ? CXS_IN_F32 : CXS_IN_F64,
                   h.big_endian && isz > 1,
                   /* element (t, d): C order at t*D+d, Fortran order at d*T+t */
                   (int64_t)(h.fortran_order ? isz : D * isz),
                   (int64_t)(h.fortran_order ? T * isz : isz)};
    if (cxs_features_convert(&fs, o->dtype, o->normalize,
                             o->fill_nonfinite ? CXS_FEAT_FILL_NONFINITE : 0, u->feat, u->sum,
                             u->sumsq, u->tmp, &u->filled, &r))
        return say(d, path, "%s: %s", path, r.message);
    return 0;
}

/* Symbol j of a string array, as UTF-8 into out (cap bytes); its length. */
static int symbol_at(const cxs_npy *h, const uint8_t *src, uint64_t j, char *out, size_t cap,
                     size_t *len) {
    size_t n = 0;
    if (h->kind == 'S') {
        const uint8_t *p = src + j * h->itemsize;
        uint64_t m = h->itemsize;
        while (m && p[m - 1] == 0) m--;
        if (m >= cap) return -1;
        memcpy(out, p, m);
        n = m;
    } else {
        uint64_t chars = h->itemsize / 4;
        const uint8_t *p = src + j * h->itemsize;
        while (chars && cxs_ld32(p + 4 * (chars - 1)) == 0) chars--;
        for (uint64_t c = 0; c < chars; c++) {
            uint32_t cp = cxs_ld32(p + 4 * c);
            if (h->big_endian) cp = __builtin_bswap32(cp);
            if (n + 4 >= cap) return -1;
            if (cp < 0x80) out[n++] = (char)cp;
            else if (cp < 0x800) {
                out[n++] = (char)(0xc0 | (cp >> 6));
                out[n++] = (char)(0x80 | (cp & 0x3f));
            } else if (cp < 0x10000) {
                out[n++] = (char)(0xe0 | (cp >> 12));
                out[n++] = (char)(0x80 | ((cp >> 6) & 0x3f));
                out[n++] = (char)(0x80 | (cp & 0x3f));
            } else if (cp < 0x110000) {
                out[n++] = (char)(0xf0 | (cp >> 18));
                out[n++] = (char)(0x80 | ((cp >> 12) & 0x3f));
                out[n++] = (char)(0x80 | ((cp >> 6) & 0x3f));
                out[n++] = (char)(0x80 | (cp & 0x3f));
            } else {
                return -1;
            }
        }
    }
    out[n] = 0;
    *len = n;
    return 0;
}

static int64_t int_at(const cxs_npy *h, const uint8_t *p, uint64_t j) {
    p += j * h->itemsize;
    uint64_t v = 0;
    for (uint64_t b = 0; b < h->itemsize; b++)
        v |= (uint64_t)p[h->big_endian ? h->itemsize - 1 - b : b] << (8 * b);
    if (h->kind == 'i' && h->itemsize < 8 && (v >> (8 * h->itemsize - 1)) & 1)
        v |= ~0ull << (8 * h->itemsize); /* sign-extend */
    if (h->kind == 'u' && (int64_t)v < 0) return INT64_MAX;
    return (int64_t)v;
}

/* The checks every transcript passes first: a parsable 1-D .npy of
 * strings or integers. */
static int transcript_header(cxs_npy *h, const uint8_t *buf, size_t len, const char *path,
                             cxs_diag *d) {
    cxs_diag r;
    if (cxs_npy_parse(buf, len, h, &r)) return say(d, path, "%s: %s", path, r.message);
    if (h->ndim != 1)
        return say(d, path, "%s: transcript has %d dimensions, expected a 1-D array", path,
                   h->ndim);
    if (h->kind == 'f' || h->kind == 'b')
        return say(d, path, "%s: transcript has dtype kind '%c', expected strings (U, S) or "
                            "integers", path, h->kind);
    return 0;
}

/* The last symbol looked up, so that a run of one phoneme over many
 * frames costs one vocabulary search. */
typedef struct sym_cache {
    char prev[CXS_MAX_SYMBOL_LEN + 1];
    size_t prev_len;
    int64_t prev_idx;
} sym_cache;

/* Element j of transcript `path` as a vocabulary index into *idx: an
 * integer as it is, a string looked up (-1: not in the vocabulary; its text
 * in sym, sl bytes).  Refuses (say) an integer outside 0..n-1 and a string
 * that is not valid text. */
static int label_at(const cxs_npy *h, const uint8_t *src, uint64_t j, int ints, const vocab *v,
                    sym_cache *c, char *sym, size_t cap, size_t *sl, int64_t *idx,
                    const char *path, cxs_diag *d) {
    if (ints) {
        *idx = int_at(h, src, j);
        if (*idx < 0 || *idx >= (int64_t)v->n)
            return say(d, path, "%s: position %llu: label %lld is outside the vocabulary "
                                "(0..%u)", path, (unsigned long long)j, (long long)*idx,
                       v->n - 1);
        return 0;
    }
    if (symbol_at(h, src, j, sym, cap, sl))
        return say(d, path, "%s: position %llu: symbol is not valid text", path,
                   (unsigned long long)j);
    if (*sl == c->prev_len && memcmp(sym, c->prev, *sl) == 0) {
        *idx = c->prev_idx;
        return 0;
    }
    *idx = vocab_find(v, sym, *sl);
    if (*idx >= 0 && *sl <= CXS_MAX_SYMBOL_LEN) {
        memcpy(c->prev, sym, *sl);
        c->prev_len = *sl;
        c->prev_idx = *idx;
    }
    return 0;
}

int transcript_decode(utt *u, const uint8_t *buf, size_t len, const vocab *v, const char *path,
                      const char *mfcc, cxs_diag *d) {
    cxs_npy h;
    int rc = transcript_header(&h, buf, len, path, d);
    if (rc) return rc;
    /* [D, T] saved for [T, D]: the transcript fits the columns, and there
     * are fewer "frames" than "features" (real utterances are longer than
     * their 13..80 features are wide). */
    if (h.count != u->T + 2 && h.count == (uint64_t)u->D + 2 && u->T < u->D)
        return say(d, mfcc, "%s: shape [%llu, %u] looks transposed: its transcript %s has "
                            "%llu symbols, one per column plus %s and %s; save the features "
                            "as [frames, features] (numpy: np.ascontiguousarray(x.T))",
                   mfcc, (unsigned long long)u->T, u->D, path, (unsigned long long)h.count,
                   v->sos_name, v->eos_name);
    if (h.count != u->T + 2)
        return say(d, path, "%s: %llu symbols, expected %llu (%s, one per frame of %s, %s); "
                            "if the transcripts are phoneme sequences not aligned with the "
                            "frames (HW3P2), pack with --transcripts sequence",
                   path, (unsigned long long)h.count, (unsigned long long)u->T + 2, v->sos_name,
                   mfcc, v->eos_name);
    if ((h.kind == 'U' && h.itemsize > 4 * MAX_SYMBOL_CHARS) ||
        (h.kind == 'S' && h.itemsize > 4 * MAX_SYMBOL_CHARS))
        return say(d, path, "%s: symbols are %llu bytes wide; a phoneme symbol is at most %u "
                            "characters", path, (unsigned long long)h.itemsize, MAX_SYMBOL_CHARS);
    const int lw = (int)cxs_label_width(v->n);
    if (grow(&u->labels, &u->labels_cap, u->T * lw)) {
        return sysfail(d, -ENOMEM, path, "%s: out of memory", path);
    }
    const uint8_t *src = buf + h.data_offset;
    const int ints = h.kind == 'i' || h.kind == 'u';
    if (ints && (v->sos < 0 || v->eos < 0))
        return say(d, path, "%s: integer transcripts need %s and %s in the vocabulary", path,
                   v->sos_name, v->eos_name);
    char sym[1024];
    size_t sl = 0;
    sym_cache c = {.prev_len = (size_t)-1};
    for (uint64_t j = 0; j < h.count; j++) {
        int64_t idx = -1;
        if ((rc = label_at(&h, src, j, ints, v, &c, sym, sizeof sym, &sl, &idx, path, d)))
            return rc;
        if (idx < 0 && j > 0 && j + 1 < h.count)
            return say(d, path, "%s: position %llu: unknown symbol '%s'", path,
                       (unsigned long long)j, sym);
        if (j == 0 || j + 1 == h.count) {
            const char *want = j == 0 ? v->sos_name : v->eos_name;
            int ok = ints ? idx == (j == 0 ? v->sos : v->eos)
                          : (sl == strlen(want) && memcmp(sym, want, sl) == 0);
            if (!ok) {
                if (ints)
                    return say(d, path, "%s: position %llu: label %lld, expected %s (%lld)", path,
                               (unsigned long long)j, (long long)idx, want,
                               (long long)(j == 0 ? v->sos : v->eos));
                return say(d, path, "%s: position %llu: '%s', expected %s (transcripts with "
                                    "other start and end symbols: --sos SYM --eos SYM)", path,
                           (unsigned long long)j, sym, want);
            }
            continue;
        }
        if (idx == v->sos || idx == v->eos)
            return say(d, path, "%s: position %llu: %s inside the transcript", path,
                       (unsigned long long)j, idx == v->sos ? v->sos_name : v->eos_name);
        if (lw == 1) u->labels[j - 1] = (uint8_t)idx;
        else cxs_st16(u->labels + 2 * (j - 1), (uint16_t)idx);
    }
    return 0;
}

int sequence_decode(utt *u, const uint8_t *buf, size_t len, const vocab *v, const char *path,
                    cxs_diag *d) {
    cxs_npy h;
    u->seq_len = 0;
    int rc = transcript_header(&h, buf, len, path, d);
    if (rc) return rc;
    if ((h.kind == 'U' || h.kind == 'S') && h.itemsize > 4 * MAX_SYMBOL_CHARS)
        return say(d, path, "%s: symbols are %llu bytes wide; a phoneme symbol is at most %u "
                            "characters", path, (unsigned long long)h.itemsize, MAX_SYMBOL_CHARS);
    if (h.count == 0)
        return say(d, path, "%s: empty label sequence (no symbol); every utterance needs at "
                            "least one", path);
    const int lw = (int)cxs_label_width(v->n);
    if (grow(&u->seq, &u->seq_cap, h.count * lw)) {
        return sysfail(d, -ENOMEM, path, "%s: out of memory", path);
    }
    const uint8_t *src = buf + h.data_offset;
    const int ints = h.kind == 'i' || h.kind == 'u';
    char sym[1024];
    size_t sl = 0;
    /* Whether the first and last elements are the start and end markers,
     * by name (strings) or by index (integers). */
    int starts = 0, ends = 0;
    for (int pass = 0; pass < 2; pass++) {
        uint64_t j = pass ? h.count - 1 : 0;
        if (ints) {
            int64_t idx = int_at(&h, src, j);
            if (pass ? idx == v->eos && v->eos >= 0 : idx == v->sos && v->sos >= 0) {
                if (pass) ends = 1;
                else starts = 1;
            }
        } else if (!symbol_at(&h, src, j, sym, sizeof sym, &sl)) {
            const char *want = pass ? v->eos_name : v->sos_name;
            if (sl == strlen(want) && memcmp(sym, want, sl) == 0) {
                if (pass) ends = 1;
                else starts = 1;
            }
        }
    }
    if (starts && (h.count < 2 || !ends))
        return say(d, path, "%s: starts with %s but does not end with %s (a label sequence is "
                            "framed by both markers, or by neither)", path, v->sos_name,
                   v->eos_name);
    if (ends && !starts)
        return say(d, path, "%s: ends with %s but does not start with %s (a label sequence is "
                            "framed by both markers, or by neither)", path, v->eos_name,
                   v->sos_name);
    const uint64_t a = starts ? 1 : 0, b = starts ? h.count - 1 : h.count;
    if (a == b)
        return say(d, path, "%s: empty label sequence (%s %s with no symbol between)", path,
                   v->sos_name, v->eos_name);
    sym_cache c = {.prev_len = (size_t)-1};
    for (uint64_t j = a; j < b; j++) {
        int64_t idx = -1;
        if ((rc = label_at(&h, src, j, ints, v, &c, sym, sizeof sym, &sl, &idx, path, d)))
            return rc;
        if (idx < 0) {
            int marker = (sl == strlen(v->sos_name) && !memcmp(sym, v->sos_name, sl)) ||
                         (sl == strlen(v->eos_name) && !memcmp(sym, v->eos_name, sl));
            if (!marker)
                return say(d, path, "%s: position %llu: unknown symbol '%s'", path,
                           (unsigned long long)j, sym);
            return say(d, path, "%s: position %llu: %s inside the sequence", path,
                       (unsigned long long)j, sym);
        }
        if (idx == v->sos || idx == v->eos)
            return say(d, path, "%s: position %llu: %s inside the sequence", path,
                       (unsigned long long)j, idx == v->sos ? v->sos_name : v->eos_name);
        if (lw == 1) u->seq[j - a] = (uint8_t)idx;
        else cxs_st16(u->seq + 2 * (j - a), (uint16_t)idx);
    }
    u->seq_len = b - a;
    return 0;
}

int sequence_from_frames(utt *u, const vocab *v) {
    const int lw = (int)cxs_label_width(v->n);
    if (grow(&u->seq, &u->seq_cap, u->T * lw)) return -ENOMEM;
    uint64_t n = 0;
    uint32_t prev = UINT32_MAX;
    for (uint64_t t = 0; t < u->T; t++) {
        uint32_t l = lw == 1 ? u->labels[t] : cxs_ld16(u->labels + 2 * t);
        if (l == prev) continue;
        if (lw == 1) u->seq[n] = (uint8_t)l;
        else cxs_st16(u->seq + 2 * n, (uint16_t)l);
        n++;
        prev = l;
    }
    u->seq_len = n;
    return 0;
}

int utt_load(utt *u, const raw_set *rs, size_t i, const conv_opts *o, cxs_diag *d) {
    u->filled = 0;
    int rc = raw_item_problem(rs, i, d);
    if (rc) return rc;
    const raw_item *it = &rs->items[i];
    size_t len;
    rc = read_npy_file(u, it->mfcc, MAX_FEATURE_FILE, "an utterance's features", &len, d);
    u->file_bytes = len;
    if (!rc) rc = features_decode(u, u->buf, len, o, it->mfcc, d);
    if (rc || !o->v || !it->transcript) return rc;
    /* A transcript holds T+2 symbols of at most MAX_SYMBOL_CHARS characters
     * (4 bytes each as '<U'), after a header: anything larger is refused
     * before it is read, so a hostile file cannot exhaust memory. */
    uint64_t max = (1u << 20) + (u->T + 2) * 4ull * MAX_SYMBOL_CHARS;
    rc = read_npy_file(u, it->transcript, max, "a transcript of this utterance's length", &len,
                       d);
    if (rc) return rc;
    if (o->transcripts == CXS_TRANSCRIPTS_SEQUENCE)
        return sequence_decode(u, u->buf, len, o->v, it->transcript, d);
    rc = transcript_decode(u, u->buf, len, o->v, it->transcript, it->mfcc, d);
    if (!rc && o->transcripts == CXS_TRANSCRIPTS_BOTH && sequence_from_frames(u, o->v))
        return sysfail(d, -ENOMEM, it->transcript, "%s: out of memory", it->transcript);
    return rc;
}

int raw_probe(const raw_set *rs, size_t i, uint64_t *T, uint32_t *D) {
    *T = 0;
    *D = 0;
    const raw_item *it = &rs->items[i];
    if (!it->mfcc) return -1;
    int fd = open(it->mfcc, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return -1;
    struct stat st;
    uint8_t head[12], *buf = NULL;
    int rc = -1;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < 12 ||
        pread(fd, head, sizeof head, 0) != (ssize_t)sizeof head)
        goto out;
    /* The whole header (magic, version, length, dictionary), no data. */
    uint64_t hend = head[6] == 1 ? 10 + (uint64_t)cxs_ld16(head + 8) : 12 + (uint64_t)cxs_ld32(head + 8);
    if (hend > (1u << 20) || hend > (uint64_t)st.st_size || !(buf = malloc((size_t)hend)) ||
        pread(fd, buf, (size_t)hend, 0) != (ssize_t)hend)
        goto out;
    cxs_npy h;
    /* The parser reads only the header bytes; the size lets it check that
     * the data the shape promises is what the file holds. */
    if (cxs_npy_parse(buf, (uint64_t)st.st_size, &h, NULL) == 0 && h.ndim == 2 &&
        h.data_offset <= hend && h.shape[1] > 0 && h.shape[1] <= CXS_MAX_DIM) {
        *T = h.shape[0];
        *D = (uint32_t)h.shape[1];
        rc = 0;
    }
out:
    free(buf);
    close(fd);
    return rc;
}
