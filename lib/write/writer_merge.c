/* writer_merge.c - cxs_writer_merge(): the parts of a dataset packed in N
 * slices (each a directory holding part.cxs and its shards) into one
 * dataset.  The parts are checked to belong together; their shards are
 * linked (or copied, SHARD_META and header renumbered); the exact sums of
 * their PART_SUMS are added.  The rest is the writer's: a writer created
 * with the parts' options takes the merged state and commits it, so the
 * manifest, the temporary directory and the atomic rename are the same
 * code, and the same bytes, as a single pack's. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cxs_le.h"
#include "cxs_qcodec.h"
#include "writer_internal.h"

/* A part.cxs larger than this is refused (it holds tables, not data). */
#define PART_MAX_BYTES (1ull << 30)

typedef struct part_in {
    const char *dir;
    uint8_t *buf; /* part.cxs, whole */
    size_t len;
    cxs_container c;
    cxs_dataset_meta m;
    cxs_part_meta pm; /* PART_META */
    const uint8_t *table, *vocab, *sums, *skipped;
    uint64_t vocab_len, sums_len, skipped_len;
    int has_seqs; /* SEQ_META (format 1.2): label sequences */
    cxs_seq_meta seq;
    int bsums; /* its shards carry BLOCKSUMS: 1, 0, or -1 when no file says */
} part_in;

static const uint8_t *part_section(part_in *p, uint32_t type, uint64_t *len) {
    const cxs_section *s = cxs_container_find(&p->c, type);
    if (!s) return NULL;
    if (len) *len = s->length;
    return p->buf + s->offset;
}

/* Read a whole regular file of at most max bytes.  0, -errno, or 1 (not a
 * regular file, or too large). */
static int slurp(const char *path, uint64_t max, uint8_t **buf, size_t *len) {
    /* O_NONBLOCK: opening a FIFO must not wait for a writer. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return -errno;
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) != 0) rc = -errno;
    else if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > max) rc = 1;
    size_t want = rc ? 0 : (size_t)st.st_size, got = 0;
    if (!rc && !(*buf = malloc(want + 1))) rc = -ENOMEM;
    while (!rc && got < want) {
        ssize_t n = read(fd, *buf + got, want - got);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) rc = -errno;
        else if (n == 0) rc = -EIO; /* shrank while being read */
        else got += (size_t)n;
    }
    close(fd);
    *len = got;
    return rc;
}

/* Whether part p was packed with block sums (spec section 10): a part of
 * a float dtype says so by part.cxs's minor version (3 with them), but
 * every file of a coded dtype is minor 4 either way, so a coded part's
 * first shard says, holding BLOCKSUMS or not (-1 for a part without
 * shards).  0, CXS_E_INPUT or -errno (diag says). */
static int part_block_sums(part_in *p, cxs_diag *d) {
    p->bsums = p->c.minor >= 3;
    if (!cxs_dtype_coded(p->m.dtype)) return 0;
    p->bsums = -1;
    if (!p->m.num_shards) return 0;
    cxs_shard_entry pe;
    cxs_shard_entry_load(p->table, &pe);
    char name[64];
    snprintf(name, sizeof name, CXS_SHARD_NAME_FMT, p->pm.first_shard);
    char *src = cxs_path_join(p->dir, name);
    if (!src) return cxs_diagf(d, -ENOMEM, "out of memory");
    uint8_t page[CXS_PAGE];
    cxs_container c;
    int fd = open(src, O_RDONLY | O_CLOEXEC), rc = 0;
    if (fd < 0 || pread(fd, page, CXS_PAGE, 0) != (ssize_t)CXS_PAGE ||
        cxs_container_parse(page, pe.file_size, CXS_KIND_SHARD, &c, src, d))
        rc = cxs_diagf(d, CXS_E_INPUT, "%s: cannot be read as its part's first shard (%s); "
                       "re-pack that part", src, fd < 0 ? strerror(errno) : "its header");
    else
        p->bsums = cxs_container_find(&c, CXS_SEC_BLOCKSUMS) != NULL;
    if (fd >= 0) close(fd);
    free(src);
    return rc;
}

/* Read and check PART/part.cxs.  0, CXS_E_INPUT or -errno (diag says). */
static int part_load(part_in *p, const char *dir, cxs_diag *d) {
    memset(p, 0, sizeof *p);
    p->dir = dir;
    char *path = cxs_path_join(dir, CXS_PART_NAME);
    if (!path) return cxs_diagf(d, -ENOMEM, "out of memory");
    int rc = slurp(path, PART_MAX_BYTES, &p->buf, &p->len);
    if (rc) {
        struct stat st;
        char *m = cxs_path_join(dir, CXS_MANIFEST_NAME);
        const int code = rc == -ENOENT || rc > 0 ? CXS_E_INPUT : rc;
        if (rc == -ENOENT && m && stat(m, &st) == 0)
            cxs_diagf(d, code,
                      "%s: a complete dataset, not a part (pack it with --part I/N to merge)", dir);
        else
            cxs_diagf(d, code, "%s: %s", path,
                      rc > 0 ? "not a regular file or too large" : strerror(-rc));
        free(m);
        free(path);
        return code;
    }
    rc = CXS_E_INPUT;
    if (cxs_container_parse(p->buf, p->len, CXS_KIND_PART, &p->c, path, d)) goto out;
    for (uint32_t i = 0; i < p->c.nsections; i++) {
        const cxs_section *s = &p->c.sections[i];
        if (cxs_checksum_differs(cxs_hash(p->buf + s->offset, s->length), s->checksum)) {
            cxs_diagf(d, CXS_E_INPUT, "%s: section %s: checksum mismatch", path, cxs_section_name(s->type));
            goto out;
        }
    }
    uint64_t ml = 0, pl = 0;
    const uint8_t *meta = part_section(p, CXS_SEC_DATASET_META, &ml);
    const uint8_t *pm = part_section(p, CXS_SEC_PART_META, &pl);
    p->sums = part_section(p, CXS_SEC_PART_SUMS, &p->sums_len);
    if (!meta || !pm || pl != CXS_PART_META_SIZE || !p->sums ||
        cxs_dataset_meta_load(meta, ml, &p->m, path, d)) {
        cxs_diagf(d, CXS_E_INPUT, "%s: not a valid part (DATASET_META, PART_META or PART_SUMS)", path);
        goto out;
    }
    cxs_part_meta_load(pm, &p->pm);
    uint64_t tl = 0;
    p->table = part_section(p, CXS_SEC_SHARD_TABLE, &tl);
    p->vocab = part_section(p, CXS_SEC_VOCAB, &p->vocab_len);
    p->skipped = part_section(p, CXS_SEC_SKIPPED, &p->skipped_len);
    uint64_t sql = 0;
    const uint8_t *sq = part_section(p, CXS_SEC_SEQ_META, &sql);
    if (sq && (!p->m.vocab_size || cxs_seq_meta_load(sq, sql, &p->seq, path, d))) {
        cxs_diagf(d, CXS_E_INPUT, "%s: not a valid part (SEQ_META)", path);
        goto out;
    }
    p->has_seqs = sq != NULL;
    if (p->pm.part < 1 || p->pm.part > p->pm.parts ||
        tl != (uint64_t)p->m.num_shards * CXS_SHARD_ENTRY_SIZE ||
        (p->m.vocab_size && !p->vocab)) {
        cxs_diagf(d, CXS_E_INPUT, "%s: not a valid part (part number or shard table)", path);
        goto out;
    }
    rc = part_block_sums(p, d);
out:
    if (rc && d) d->code = rc; /* a parser's own message, this call's code */
    free(path);
    return rc;
}

static int part_cmp(const void *a, const void *b) {
    const part_in *x = a, *y = b;
    return (x->pm.part > y->pm.part) - (x->pm.part < y->pm.part);
}

/* A size as the command line takes it: "1G", "256M", "4096". */
static void size_str(uint64_t v, char *buf, size_t n) {
    static const char units[] = "TGMK";
    for (int u = 0; u < 4; u++) {
        uint64_t m = 1ull << (10 * (4 - u));
        if (v && v % m == 0) {
            snprintf(buf, n, "%llu%c", (unsigned long long)(v / m), units[u]);
            return;
        }
    }
    snprintf(buf, n, "%llu", (unsigned long long)v);
}

static const char *name_of(uint32_t v, const char *const *names, uint32_t n) {
    return v < n ? names[v] : "?";
}

typedef struct two_values {
    char p[48], a[48]; /* part p's value, part a's */
} two_values;

static void names_of(two_values *v, uint32_t p, uint32_t a, const char *const *names, uint32_t n) {
    snprintf(v->p, sizeof v->p, "%s", name_of(p, names, n));
    snprintf(v->a, sizeof v->a, "%s", name_of(a, names, n));
}

static void numbers_of(two_values *v, long long p, long long a, const char *unit) {
    snprintf(v->p, sizeof v->p, "%lld%s", p, unit);
    snprintf(v->a, sizeof v->a, "%lld%s", a, unit);
}

/* The first pack option in which part p differs from part a, named with
 * both values in d ("P2 was packed with --dtype f16, P1 with --dtype
 * f32").  1 when one differs. */
static int option_differs(const part_in *p, const part_in *a, cxs_diag *d) {
    static const char *const norm[] = {"none", "utterance"}, *const onerr[] = {"fail", "skip"},
                             *const comp[] = {"none", "zstd"},
                             *const filt[] = {"--no-shuffle", "the byte shuffle"},
                             *const dtypes[] = {"?", "f32", "f16", "bf16"};
    const cxs_dataset_meta *x = &p->m, *y = &a->m;
    const char *opt = NULL;
    two_values v = {"", ""};
    if (x->dtype != y->dtype) {
        opt = "--dtype ";
        names_of(&v, x->dtype, y->dtype, dtypes, 4);
    } else if (x->guard != y->guard) {
        opt = "--guard ";
        numbers_of(&v, x->guard, y->guard, "");
    } else if (x->shard_size != y->shard_size) {
        opt = "--shard-size ";
        size_str(x->shard_size, v.p, sizeof v.p);
        size_str(y->shard_size, v.a, sizeof v.a);
    } else if (x->normalize != y->normalize) {
        opt = "--normalize ";
        names_of(&v, x->normalize, y->normalize, norm, 2);
    } else if (x->on_error != y->on_error) {
        opt = "--on-error ";
        names_of(&v, x->on_error, y->on_error, onerr, 2);
    } else if (x->compression != y->compression) {
        opt = "--compress ";
        names_of(&v, x->compression, y->compression, comp, 2);
    } else if (p->pm.level != a->pm.level) {
        opt = "--compress zstd:";
        numbers_of(&v, p->pm.level, a->pm.level, "");
    } else if (p->pm.filter != a->pm.filter) {
        opt = "";
        names_of(&v, p->pm.filter, a->pm.filter, filt, 2);
    } else if (x->label_width != y->label_width) {
        opt = "labels of ";
        numbers_of(&v, x->label_width, y->label_width, " bytes");
    } else if (p->has_seqs != a->has_seqs || p->seq.frame_labels != a->seq.frame_labels) {
        static const char *const tr[] = {"frames", "sequence", "both"};
        opt = "--transcripts ";
        names_of(&v, p->has_seqs ? 1 + p->seq.frame_labels : 0,
                 a->has_seqs ? 1 + a->seq.frame_labels : 0, tr, 3);
    }
    if (!opt) return 0;
    cxs_diagf(d, CXS_E_INPUT, "%s was packed with %s%s, %s with %s%s; refusing to merge (pack "
              "every part with the same options)", p->dir, opt, v.p, a->dir, opt, v.a);
    return 1;
}

/* Parts must come from one run of the same command over the same input.
 * 0 or CXS_E_INPUT (diag says why). */
static int parts_agree(const part_in *ps, uint32_t n, cxs_diag *d) {
    const part_in *a = &ps[0];
    const part_in *full = NULL; /* a part with utterances: it knows the width */
    const part_in *sums = NULL; /* a part whose files say whether it has block sums */
    for (uint32_t i = 0; i < n; i++) {
        if (ps[i].m.num_utterances && !full) full = &ps[i];
        if (ps[i].bsums >= 0 && !sums) sums = &ps[i];
    }
    if (a->pm.parts != n)
        return cxs_diagf(d, CXS_E_INPUT, "%s is part %u of %u, but %u part%s given: every part "
                         "is needed",
                         a->dir, a->pm.part, a->pm.parts, n, n == 1 ? " was" : "s were");
    for (uint32_t i = 0; i < n; i++) {
        const part_in *p = &ps[i];
        const char *why = NULL;
        if (p->pm.part != i + 1) {
            if (i > 0 && ps[i - 1].pm.part == p->pm.part)
                return cxs_diagf(d, CXS_E_INPUT, "%s and %s are both part %u", ps[i - 1].dir,
                                 p->dir, p->pm.part);
            return cxs_diagf(d, CXS_E_INPUT, "part %u of %u is missing (%s is part %u)", i + 1, n,
                             p->dir, p->pm.part);
        }
        if (p->pm.parts != a->pm.parts) why = "a different number of parts (--part I/N)";
        else if (strcmp(p->pm.version, a->pm.version)) why = "another ctxshard version";
        else if (option_differs(p, a, d)) return CXS_E_INPUT; /* before the listing: the
                                                   * options change the shard layout */
        else if (p->bsums >= 0 && p->bsums != sums->bsums)
            return cxs_diagf(d, CXS_E_INPUT, "%s was packed with --block-sums %s, %s with "
                             "--block-sums %s; refusing to merge (pack every part with the "
                             "same options)", p->dir, p->bsums ? "on" : "off", sums->dir,
                             sums->bsums ? "on" : "off");
        else if (p->pm.listed != a->pm.listed || p->pm.input_hash != a->pm.input_hash ||
                 p->pm.total_shards != a->pm.total_shards)
            why = "different inputs (the listing of RAW: ids, frame counts or files differ)";
        else if (p->m.vocab_size != a->m.vocab_size || p->vocab_len != a->vocab_len ||
                 (p->vocab_len && memcmp(p->vocab, a->vocab, (size_t)p->vocab_len)))
            why = "a different vocabulary (--vocab)";
        else if (full && p->m.num_utterances && p->pm.chunk_rows != full->pm.chunk_rows)
            why = "a different --chunk-size";
        else if (full && p->m.num_utterances && p->m.dim != full->m.dim)
            why = "a different feature width (pack with --on-error fail to see which utterances "
                  "differ)";
        else if (i > 0 && p->pm.first_shard != ps[i - 1].pm.end_shard)
            why = "shard ranges that do not follow on";
        if (why)
            return cxs_diagf(d, CXS_E_INPUT, "%s was packed with %s than %s; refusing to merge",
                             p->dir, why, p == a ? ps[1].dir : a->dir);
    }
    return 0;
}

/* The writer options the parts were packed with; *sym gets the vocabulary
 * (freed by the caller, also on failure).  0 or CXS_E_INPUT. */
static int parts_opts(const part_in *a, cxs_writer_opts *o, char ***sym, cxs_diag *d) {
    const cxs_dataset_meta *m = &a->m;
    cxs_writer_opts_init(o);
    o->dtype = m->dtype;
    o->guard = m->guard;
    o->shard_size = m->shard_size;
    o->normalize = m->normalize;
    o->on_error_skip = m->on_error;
    o->compression = m->compression;
    if (m->compression) o->level = a->pm.level;
    o->flags = CXS_WRITER_MANUAL_CUT;
    /* The shards carry BLOCKSUMS (format 1.3) exactly when the parts'
     * files say so (part_block_sums); the manifest's version follows. */
    if (!a->bsums) o->flags |= CXS_WRITER_NO_BLOCK_SUMS;
    const uint32_t V = m->vocab_size;
    if (V && cxs_strtab_check(a->vocab, a->vocab_len, V, CXS_MAX_SYMBOL_LEN, "VOCAB", a->dir, d))
        return CXS_E_INPUT;
    if (!(*sym = calloc((size_t)V + 1, sizeof **sym))) return cxs_diagf(d, -ENOMEM, "out of memory");
    for (uint32_t i = 0; i < V; i++) {
        const uint8_t *text = a->vocab + 8 * ((uint64_t)V + 1);
        uint64_t b = cxs_ld64(a->vocab + 8ull * i), e = cxs_ld64(a->vocab + 8ull * (i + 1));
        if (!((*sym)[i] = strndup((const char *)text + b, (size_t)(e - b))))
            return cxs_diagf(d, -ENOMEM, "out of memory");
    }
    o->vocab_size = V;
    o->vocab = (const char *const *)*sym;
    o->label_seqs = !a->has_seqs ? CXS_SEQ_NONE
                    : a->seq.frame_labels ? CXS_SEQ_WITH_FRAMES : CXS_SEQ_ONLY;
    const uint32_t lw = cxs_label_width(V);
    if (m->label_width != lw)
        return cxs_diagf(d, CXS_E_INPUT, "%s: not a valid part (label width %u for %u symbols)",
                         a->dir, m->label_width, V);
    return 0;
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
            uint8_t *buf = malloc(1 << 20);
            ssize_t r = 0;
            if (!buf) rc = -ENOMEM;
            while (buf && (r = read(in, buf, 1 << 20)) > 0)
                if ((rc = cxs_write_all(outfd, buf, (size_t)r))) break;
            if (r < 0) rc = -errno;
            free(buf);
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
 * manifest entry.  Returns 0, -errno, or CXS_E_INPUT when the file is not
 * what the part's table says. */
static int place_shard(cxs_writer *k, const char *src, const char *dst, const cxs_shard_entry *pe,
                       uint32_t index, uint64_t first_u, uint64_t first_f, int *linked,
                       cxs_shard_entry *e, cxs_diag *d) {
    int fd = open(src, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int er = errno;
        return cxs_diagf(d, er == ENOENT ? CXS_E_INPUT : -er, "%s: %s", src, strerror(er));
    }
    struct stat st;
    uint8_t page[CXS_PAGE], meta[CXS_SHARD_META_SIZE];
    cxs_container c;
    cxs_shard_meta m;
    const cxs_section *sm = NULL;
    int bad = fstat(fd, &st) != 0 || (uint64_t)st.st_size != pe->file_size ||
              pread(fd, page, CXS_PAGE, 0) != (ssize_t)CXS_PAGE ||
              cxs_container_parse(page, pe->file_size, CXS_KIND_SHARD, &c, src, d) ||
              cxs_checksum_differs(c.header_checksum, pe->header_checksum) ||
              !(sm = cxs_container_find(&c, CXS_SEC_SHARD_META)) ||
              sm->length != CXS_SHARD_META_SIZE ||
              pread(fd, meta, sizeof meta, (off_t)sm->offset) != (ssize_t)sizeof meta ||
              cxs_checksum_differs(cxs_hash(meta, sizeof meta), sm->checksum) ||
              cxs_shard_meta_load(meta, sizeof meta, &m, src, d) ||
              m.num_utterances != pe->num_utterances || m.num_frames != pe->num_frames;
    close(fd);
    if (bad)
        return cxs_diagf(d, CXS_E_INPUT, "%s: does not match its part's shard table (size, "
                         "header checksum or SHARD_META); re-pack that part", src);
    *e = *pe;
    e->first_utterance = first_u;
    e->first_frame = first_f;
    *linked = 0;
    const int same = m.index == index && m.first_utterance == first_u && m.first_frame == first_f;
    if (same && link(src, dst) == 0) {
        *linked = 1;
        return 0;
    }
    /* A copy writes the file's bytes: the injected disk-full budget counts them. */
    cxs_wfault *f = &k->fault;
    if (f->enospc_after && f->written + pe->file_size > f->enospc_after) return -ENOSPC;
    f->written += pe->file_size;
    int rc = copy_file(src, dst);
    if (rc || same) return rc;
    /* Renumber: SHARD_META and the header change, nothing else. */
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
    /* (a short write is a failure: never a half-renumbered shard) */
    errno = 0;
    rc = pwrite(fd, meta, sizeof meta, (off_t)sm->offset) == (ssize_t)sizeof meta &&
                 pwrite(fd, page, CXS_PAGE, 0) == (ssize_t)CXS_PAGE && fsync(fd) == 0
             ? 0
             : (errno ? -errno : -EIO);
    if (close(fd) != 0 && !rc) rc = -errno;
    return rc;
}

/* Add part p to the merged state of k: its exact sums, histogram, lengths,
 * skipped list, and its shards (renumbered after the earlier parts'). */
static int merge_part(cxs_writer *k, const part_in *p, cxs_progress_fn progress, void *user,
                      uint64_t *done, uint64_t total, cxs_merge_info *mi, cxs_diag *d) {
    const uint32_t D = k->D;
    /* The exact sums: adding every partial of every part is exact. */
    const uint8_t *q = p->sums, *end = p->sums + p->sums_len;
    uint64_t pd = p->sums_len >= 16 ? cxs_ld64(q) : UINT64_MAX;
    uint64_t pv = p->sums_len >= 16 ? cxs_ld64(q + 8) : UINT64_MAX;
    q += p->sums_len >= 16 ? 16 : 0;
    int ok = p->sums_len >= 16 && (pd == D || (pd == 0 && !p->m.num_utterances)) &&
             pv == k->vocab_n;
    for (uint64_t dd = 0; ok && dd < 2 * pd; dd++) {
        uint64_t cnt = (uint64_t)(end - q) >= 8 ? cxs_ld64(q) : UINT64_MAX;
        if (cnt > 48 || (uint64_t)(end - q) < 8 + 8 * cnt) {
            ok = 0;
            break;
        }
        q += 8;
        for (uint64_t j = 0; j < cnt; j++, q += 8)
            cxs_xsum_add(dd % 2 ? &k->s2[dd / 2] : &k->s1[dd / 2], cxs_ldf64(q));
    }
    if (!ok || (uint64_t)(end - q) != 8ull * k->vocab_n)
        return cxs_diagf(d, CXS_E_INPUT, "%s: %s: PART_SUMS does not describe %u dimensions and "
                         "%u labels", p->dir, CXS_PART_NAME, D, k->vocab_n);
    for (uint32_t l = 0; l < k->vocab_n; l++) k->hist[l] += cxs_ld64(q + 8ull * l);
    if (p->m.num_utterances) {
        if (p->pm.min_length < k->minlen) k->minlen = p->pm.min_length;
        if (p->pm.max_length > k->maxlen) k->maxlen = p->pm.max_length;
        if (p->has_seqs) {
            k->seq_total += p->seq.num_symbols;
            if (p->seq.min_length < k->seq_min) k->seq_min = p->seq.min_length;
            if (p->seq.max_length > k->seq_max) k->seq_max = p->seq.max_length;
        }
    }
    k->nskipped += p->m.num_skipped;
    int rc;
    if (p->skipped_len && (rc = cxs_bytes_put(&k->skipped, p->skipped, (size_t)p->skipped_len)))
        return cxs_diagf(d, rc, "%s: %s; nothing written", k->out, strerror(-rc));
    for (uint32_t j = 0; j < p->m.num_shards; j++) {
        if (progress && progress(user, *done, total))
            return cxs_diagf(d, -ECANCELED, "%s: interrupted; nothing written", k->out);
        cxs_shard_entry pe, e;
        cxs_shard_entry_load(p->table + (uint64_t)j * CXS_SHARD_ENTRY_SIZE, &pe);
        char name[64];
        snprintf(name, sizeof name, CXS_SHARD_NAME_FMT, p->pm.first_shard + j);
        char *src = cxs_path_join(p->dir, name);
        snprintf(name, sizeof name, CXS_SHARD_NAME_FMT, k->nshards);
        char *dst = cxs_path_join(k->tmpdir, name);
        int was_linked = 0;
        rc = src && dst ? place_shard(k, src, dst, &pe, k->nshards, k->U, k->F, &was_linked, &e, d)
                        : -ENOMEM;
        free(src);
        free(dst);
        if (rc == CXS_E_INPUT) return rc;
        if (rc) return cxs_diagf(d, rc, "%s: %s; nothing written", k->out, strerror(-rc));
        cxs_wfault_point(&k->fault, "shard-end");
        mi->shards_linked += (uint32_t)was_linked;
        mi->shards_copied += (uint32_t)!was_linked;
        uint8_t eb[CXS_SHARD_ENTRY_SIZE];
        cxs_shard_entry_store(eb, &e);
        if ((rc = cxs_bytes_put(&k->shard_table, eb, sizeof eb)))
            return cxs_diagf(d, rc, "%s: %s; nothing written", k->out, strerror(-rc));
        k->nshards++;
        k->U += e.num_utterances;
        k->F += e.num_frames;
        k->bytes_out += e.file_size;
        ++*done;
    }
    return 0;
}

int cxs_writer_merge(const char *const *dirs, uint32_t n, const char *out,
                     cxs_progress_fn progress, void *user, cxs_merge_info *info, cxs_diag *d) {
    if (!dirs || n == 0 || !out || !*out)
        return cxs_diagf(d, CXS_E_INVALID, "no parts or no output path");
    part_in *ps = calloc(n, sizeof *ps);
    if (!ps) return cxs_diagf(d, -ENOMEM, "out of memory");
    cxs_writer *k = NULL;
    char **sym = NULL;
    cxs_writer_opts o; /* its vocab: sym, NULL-terminated */
    cxs_merge_info mi;
    memset(&mi, 0, sizeof mi);
    int rc = 0;
    for (uint32_t i = 0; i < n && !rc; i++) rc = part_load(&ps[i], dirs[i], d);
    if (rc) goto out;
    qsort(ps, n, sizeof *ps, part_cmp);
    if ((rc = parts_agree(ps, n, d))) goto out;
    uint32_t D = 0;
    uint64_t total = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (ps[i].m.num_utterances) D = ps[i].m.dim;
        total += ps[i].m.num_shards;
    }
    if (D == 0) {
        rc = cxs_diagf(d, CXS_E_INPUT, "no part holds a valid utterance; nothing to merge");
        goto out;
    }
    if ((rc = parts_opts(&ps[0], &o, &sym, d))) goto out;
    /* The writer checks OUT, removes what killed writers of it left, and
     * makes the temporary directory; its commit writes the manifest. */
    if ((rc = cxs_writer_create(out, &o, &k, d))) {
        if (rc == CXS_E_INVALID) { /* options no pack writes */
            char why[sizeof d->message];
            snprintf(why, sizeof why, "%s", d ? d->message : "its options");
            rc = cxs_diagf(d, CXS_E_INPUT, "%s: not a valid part (%s)", ps[0].dir, why);
        }
        goto out;
    }
    if ((rc = cxs_writer_set_width(k, D))) {
        rc = cxs_diagf(d, rc, "%s: %s; nothing written", out, strerror(-rc));
        goto out;
    }
    uint64_t done = 0;
    for (uint32_t i = 0; i < n && !rc; i++)
        rc = merge_part(k, &ps[i], progress, user, &done, total, &mi, d);
    if (rc) goto out;
    rc = cxs_writer_commit(k, &mi.w, d);
    k = NULL;
    if (!rc && info) *info = mi;
out:
    cxs_writer_abort(k);
    for (size_t i = 0; sym && sym[i]; i++) free(sym[i]);
    free(sym);
    for (uint32_t i = 0; i < n; i++) free(ps[i].buf);
    free(ps);
    return rc;
}
