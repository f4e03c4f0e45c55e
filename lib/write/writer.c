/* writer.c - the writer (ctxshard_writer.h): utterances checked, converted
 * and written into shards, and the statistics.  The manifest (or a part's
 * part.cxs) is writer_manifest.c's, the merge of parts writer_merge.c's.
 * Every byte of the format that the project writes is written by these
 * files; the packer, convert, merge and the Python Writer are clients.
 * Output goes into a temporary directory that writer_out.c renames into
 * place at commit. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include "ctxshard_writer.h"
#include "abi.h"
#include "cxs_features.h"
#include "cxs_format.h"
#include "cxs_le.h"
#include "cxs_qcodec.h"
#include "cxs_xsum.h"
#include "cxs_zchunk.h"
#include "writer_internal.h"
#include "zpool.h"

#define SOS_SYMBOL "[SOS]"
#define EOS_SYMBOL "[EOS]"

static int grow(void *pp, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    void *n = realloc(*(void **)pp, need);
    if (!n) return -ENOMEM;
    *(void **)pp = n;
    *cap = need;
    return 0;
}

/* ---- shard writing ---------------------------------------------------- */

/* Format 1.3's block sizes (spec section 9): FEATURES in 64 KiB blocks
 * (one or two utterances' worth of rows at 40 dimensions), LABELS and the
 * per-utterance tables in pages (a few utterances' labels). */
#define CXS_FEATURE_BLOCK_SHIFT 16u
#define CXS_TABLE_BLOCK_SHIFT 12u

/* One compressed chunk, in order: into ZFEATURES and the chunk table. */
static int chunk_out(void *user, const uint8_t *z, size_t zn) {
    cxs_writer *k = user;
    swriter *w = &k->w;
    int rc = cxs_w_write(k, w, z, zn);
    if (rc) return rc;
    XXH3_64bits_update(w->fh, z, zn);
    w->zlen += zn;
    if ((rc = cxs_bytes_put64(&w->chunks, w->zlen))) return rc;
    return cxs_bytes_put64(&w->chunks, cxs_hash(z, zn));
}

/* Compress the chunk being filled: here, or queued to the compression
 * threads (which hand chunks back in order, so the bytes are the same). */
static int flush_chunk(cxs_writer *k) {
    if (!k->cfill) return 0;
    size_t n = k->cfill;
    k->cfill = 0;
    if (k->zp) return cxs_zpool_put(k->zp, k->cbuf, n, chunk_out, k);
    size_t z = cxs_zchunk_encode(k->cc, k->o.level, k->o.shuffle ? CXS_FILTER_SHUFFLE : 0,
                                 k->esize, k->cbuf, n, k->scratch, k->zbuf, k->zcap);
    return z ? chunk_out(k, k->zbuf, z) : -EIO;
}

/* Append n bytes to the shard's FEATURES stream (in chunks, compressed,
 * when the dataset is). */
static int feat_put(cxs_writer *k, const uint8_t *p, size_t n) {
    swriter *w = &k->w;
    w->feat_len += n;
    if (!k->cc) {
        XXH3_64bits_update(w->fh, p, n);
        /* The block sums of FEATURES as the bytes pass (format 1.3). */
        for (size_t at = 0; k->block_sums && at < n;) {
            const uint64_t B = 1ull << CXS_FEATURE_BLOCK_SHIFT;
            size_t take = B - w->bfill < n - at ? (size_t)(B - w->bfill) : n - at;
            XXH3_64bits_update(w->bh, p + at, take);
            w->bfill += take;
            at += take;
            if (w->bfill == B) {
                int rc = cxs_bytes_put64(&w->fsums, XXH3_64bits_digest(w->bh));
                if (rc) return rc;
                XXH3_64bits_reset(w->bh);
                w->bfill = 0;
            }
        }
        return cxs_w_write(k, w, p, n);
    }
    while (n) {
        size_t take = k->chunk_bytes - k->cfill < n ? k->chunk_bytes - k->cfill : n;
        memcpy(k->cbuf + k->cfill, p, take);
        k->cfill += take;
        p += take;
        n -= take;
        if (k->cfill == k->chunk_bytes) {
            int rc = flush_chunk(k);
            if (rc) return rc;
        }
    }
    return 0;
}

static int shard_begin(cxs_writer *k) {
    swriter *w = &k->w;
    memset(w, 0, sizeof *w);
    w->index = k->part.first_shard + k->nshards;
    w->first_u = k->part.first_utterance + k->U;
    w->first_f = k->part.first_frame + k->F;
    char name[64];
    snprintf(name, sizeof name, CXS_SHARD_NAME_FMT, w->index);
    w->path = cxs_path_join(k->tmpdir, name);
    w->fh = XXH3_createState();
    w->bh = k->block_sums ? XXH3_createState() : NULL;
    if (!w->path || !w->fh || (k->block_sums && !w->bh)) return -ENOMEM;
    if (w->bh) XXH3_64bits_reset(w->bh);
    /* (the buffer before the file: abort closes a file only once open) */
    if (!(w->buf = malloc(CXS_WBUF_SIZE))) return -ENOMEM;
    w->fd = open(w->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (w->fd < 0) return -errno;
    k->open = 1;
    cxs_wfault_point(&k->fault, "shard-begin");
    XXH3_64bits_reset(w->fh);
    static const uint8_t page[CXS_PAGE];
    int rc = cxs_w_write(k, w, page, CXS_PAGE);
    if (!rc) rc = feat_put(k, k->zero_guard, k->guard_bytes);
    if (!rc) rc = cxs_bytes_put64(&w->cum, 0);
    if (!rc) rc = cxs_bytes_put64(&w->idoff, 0);
    if (!rc && k->o.label_seqs) rc = cxs_bytes_put64(&w->seqoff, 0);
    return rc;
}

static int shard_add(cxs_writer *k, const char *id, size_t il, uint64_t T, const uint8_t *feat,
                     const uint8_t *labels) {
    swriter *w = &k->w;
    /* A coded utterance's header goes to QHEADERS, its codes (which
     * follow it in feat) to FEATURES. */
    int rc = k->qh ? cxs_bytes_put(&w->qheaders, feat, k->qh) : 0;
    if (rc) return rc;
    feat += k->qh;
    /* feat holds the guard's zero rows after the frames: one pass over
     * the hashes and the buffer for both. */
    if ((rc = feat_put(k, feat, (size_t)T * k->D * k->esize + k->guard_bytes))) return rc;
    if (k->flw && (rc = cxs_bytes_put(&w->labels, labels, (size_t)T * k->flw))) return rc;
    if (k->o.label_seqs &&
        ((rc = cxs_bytes_put(&w->seqsym, k->sq, (size_t)k->sq_len * k->lw)) ||
         (rc = cxs_bytes_put64(&w->seqoff, w->seqsym.n / k->lw))))
        return rc;
    cxs_wfault_point(&k->fault, "utt");
    w->U++;
    w->F += T;
    if ((rc = cxs_bytes_put(&w->ids, id, il)) || (rc = cxs_bytes_put64(&w->cum, w->F)) ||
        (rc = cxs_bytes_put64(&w->idoff, w->ids.n)))
        return rc;
    return 0;
}

static void swriter_free(swriter *w) {
    if (w->fd > 0) close(w->fd);
    free(w->path);
    free(w->buf);
    if (w->fh) XXH3_freeState(w->fh);
    if (w->bh) XXH3_freeState(w->bh);
    free(w->fsums.p);
    free(w->labels.p);
    free(w->cum.p);
    free(w->idoff.p);
    free(w->ids.p);
    free(w->chunks.p);
    free(w->seqoff.p);
    free(w->seqsym.p);
    free(w->qheaders.p);
    memset(w, 0, sizeof *w);
}

/* Block sums (format 1.3) of a section written whole: the sums of its
 * blocks of 2^shift bytes appended to *sums. */
static int block_sums_of(bytes *sums, const uint8_t *p, uint64_t n, uint32_t shift) {
    int rc = 0;
    for (uint64_t at = 0; at < n && !rc; at += 1ull << shift) {
        uint64_t len = n - at < 1ull << shift ? n - at : 1ull << shift;
        rc = cxs_bytes_put64(sums, cxs_hash(p + at, (size_t)len));
    }
    return rc;
}

/* A section BLOCKSUMS covers: its type, block shift and bytes (p NULL for
 * FEATURES, whose sums were formed as it streamed out, in w->fsums). */
typedef struct covered {
    uint32_t type, shift;
    const uint8_t *p; /* the section's bytes; NULL: FEATURES (w->fsums) */
    uint64_t len;
} covered;

/* Write the BLOCKSUMS section of the ncv covered sections: an entry each,
 * by type, then their sums in that order; *out gets its table entry
 * (optional: required bit clear). */
static int put_block_sums(cxs_writer *k, swriter *w, cxs_section *out, const covered *cv,
                          uint32_t ncv) {
    /* Close FEATURES's last (short) block. */
    if (w->bfill) {
        int rc = cxs_bytes_put64(&w->fsums, XXH3_64bits_digest(w->bh));
        if (rc) return rc;
        w->bfill = 0;
    }
    /* By type: insertion sort of the few entries. */
    covered c[CXS_BLOCKSUMS_MAX];
    memcpy(c, cv, ncv * sizeof *c);
    for (uint32_t i = 1; i < ncv; i++)
        for (uint32_t j = i; j > 0 && c[j].type < c[j - 1].type; j--) {
            covered t = c[j];
            c[j] = c[j - 1];
            c[j - 1] = t;
        }
    bytes t = {0}, sums = {0};
    uint8_t head[CXS_BLOCKSUMS_HEAD] = {0};
    cxs_st32(head, ncv);
    int rc = cxs_bytes_put(&t, head, sizeof head);
    uint64_t first = 0;
    for (uint32_t i = 0; i < ncv && !rc; i++) {
        const uint64_t B = 1ull << c[i].shift, nb = (c[i].len + B - 1) / B;
        uint8_t e[CXS_BLOCKSUMS_ENTRY];
        cxs_st32(e, c[i].type);
        cxs_st32(e + 4, c[i].shift);
        cxs_st64(e + 8, nb);
        cxs_st64(e + 16, first);
        first += nb;
        rc = cxs_bytes_put(&t, e, sizeof e);
        if (!rc) rc = c[i].p ? block_sums_of(&sums, c[i].p, c[i].len, c[i].shift)
                             : cxs_bytes_put(&sums, w->fsums.p, w->fsums.n);
    }
    if (!rc && sums.n != 8 * first) rc = -EIO; /* FEATURES's stream and its length disagree */
    if (!rc) rc = cxs_bytes_put(&t, sums.p, sums.n);
    if (!rc) rc = cxs_put_section(k, w, out, CXS_SEC_BLOCKSUMS, t.p, t.n);
    out->flags = 0; /* optional: a 1.2 reader ignores it */
    free(t.p);
    free(sums.p);
    return rc;
}

static int shard_end(cxs_writer *k) {
    swriter *w = &k->w;
    cxs_section sec[9];
    covered cv[CXS_BLOCKSUMS_MAX];
    uint32_t n = 0, ncv = 0;
    int rc = flush_chunk(k);
    if (!rc && k->zp) rc = cxs_zpool_drain(k->zp, chunk_out, k);
    sec[n].type = k->cc ? CXS_SEC_ZFEATURES : CXS_SEC_FEATURES;
    sec[n].flags = CXS_SECF_REQUIRED;
    sec[n].offset = CXS_PAGE;
    sec[n].length = k->cc ? w->zlen : w->feat_len;
    sec[n++].checksum = XXH3_64bits_digest(w->fh);
    k->feat_out += sec[0].length;
    if (!k->cc) cv[ncv++] = (covered){CXS_SEC_FEATURES, CXS_FEATURE_BLOCK_SHIFT, NULL, w->feat_len};
    if (!rc && k->flw) {
        rc = cxs_put_section(k, w, &sec[n++], CXS_SEC_LABELS, w->labels.p, w->labels.n);
        cv[ncv++] = (covered){CXS_SEC_LABELS, CXS_TABLE_BLOCK_SHIFT, w->labels.p, w->labels.n};
    }
    bytes seqs = {0}, ids = {0};
    if (!rc && k->o.label_seqs) {
        if (!(rc = cxs_bytes_put(&seqs, w->seqoff.p, w->seqoff.n)) &&
            !(rc = cxs_bytes_put(&seqs, w->seqsym.p, w->seqsym.n)))
            rc = cxs_put_section(k, w, &sec[n++], CXS_SEC_SEQUENCES, seqs.p, seqs.n);
        cv[ncv++] = (covered){CXS_SEC_SEQUENCES, CXS_TABLE_BLOCK_SHIFT, seqs.p, seqs.n};
    }
    if (!rc && k->cc) {
        bytes t = {0};
        uint8_t head[CXS_CHUNKS_HEAD];
        uint64_t rows = w->feat_len / ((uint64_t)k->D * k->esize);
        cxs_chunks_head h = {CXS_COMPRESSION_ZSTD, k->o.shuffle ? CXS_FILTER_SHUFFLE : 0,
                             w->feat_len, k->chunk_rows, k->o.level,
                             (rows + k->chunk_rows - 1) / k->chunk_rows};
        cxs_chunks_head_store(head, &h);
        if (!(rc = cxs_bytes_put(&t, head, sizeof head)) &&
            !(rc = cxs_bytes_put(&t, w->chunks.p, w->chunks.n)))
            rc = cxs_put_section(k, w, &sec[n++], CXS_SEC_CHUNKS, t.p, t.n);
        free(t.p);
    }
    if (!rc && k->qh) {
        rc = cxs_put_section(k, w, &sec[n++], CXS_SEC_QHEADERS, w->qheaders.p, w->qheaders.n);
        cv[ncv++] = (covered){CXS_SEC_QHEADERS, CXS_TABLE_BLOCK_SHIFT, w->qheaders.p, w->qheaders.n};
    }
    if (!rc) rc = cxs_put_section(k, w, &sec[n++], CXS_SEC_INDEX, w->cum.p, w->cum.n);
    cv[ncv++] = (covered){CXS_SEC_INDEX, CXS_TABLE_BLOCK_SHIFT, w->cum.p, w->cum.n};
    if (!rc && !(rc = cxs_bytes_put(&ids, w->idoff.p, w->idoff.n)) &&
        !(rc = cxs_bytes_put(&ids, w->ids.p, w->ids.n)))
        rc = cxs_put_section(k, w, &sec[n++], CXS_SEC_IDS, ids.p, ids.n);
    cv[ncv++] = (covered){CXS_SEC_IDS, CXS_TABLE_BLOCK_SHIFT, ids.p, ids.n};
    uint8_t meta[CXS_SHARD_META_SIZE];
    cxs_shard_meta m = {w->index, k->D, w->U, w->F, w->first_u, w->first_f, k->o.guard,
                        (uint16_t)k->o.dtype, (uint16_t)k->lw};
    cxs_shard_meta_store(meta, &m);
    if (!rc) rc = cxs_put_section(k, w, &sec[n++], CXS_SEC_SHARD_META, meta, sizeof meta);
    /* Format 1.3: the block sums, last (sections in file order need not be
     * in type order; the table lists them by offset). */
    if (!rc && k->block_sums) rc = put_block_sums(k, w, &sec[n++], cv, ncv);
    free(seqs.p);
    free(ids.p);
    if (!rc) rc = cxs_w_pad(k, w);
    if (!rc) rc = cxs_w_flush(w);
    uint8_t page[CXS_PAGE];
    uint64_t h = cxs_container_build_v(page, CXS_KIND_SHARD, k->minor, w->pos, sec, n);
    if (!rc && pwrite(w->fd, page, CXS_PAGE, 0) != (ssize_t)CXS_PAGE) rc = errno ? -errno : -EIO;
    if (!rc && fsync(w->fd) != 0) rc = -errno;
    if (close(w->fd) != 0 && !rc) rc = -errno;
    w->fd = -1;
    k->open = 0;
    cxs_wfault_point(&k->fault, "shard-end");
    if (!rc) {
        uint8_t e[CXS_SHARD_ENTRY_SIZE];
        cxs_shard_entry se = {w->pos, h, w->U, w->F, w->first_u, w->first_f};
        cxs_shard_entry_store(e, &se);
        rc = cxs_bytes_put(&k->shard_table, e, sizeof e);
        k->nshards++;
        k->bytes_out += w->pos;
    }
    swriter_free(w);
    return rc;
}

/* ---- the API ---------------------------------------------------------- */

void cxs_writer_opts_init(cxs_writer_opts *o) {
    memset(o, 0, sizeof *o);
    o->dtype = CXS_DTYPE_F32;
    o->guard = CXS_WRITER_DEFAULT_GUARD;
    o->shard_size = CXS_WRITER_DEFAULT_SHARD_SIZE;
    o->normalize = CXS_NORM_NONE;
    o->compression = CXS_COMPRESSION_NONE;
    o->level = CXS_WRITER_DEFAULT_LEVEL;
    o->chunk_size = CXS_WRITER_DEFAULT_CHUNK_SIZE;
    o->shuffle = 1;
}

static int check_opts(const cxs_writer_opts *o, const char *out, cxs_diag *d) {
    if (o->dtype < CXS_DTYPE_F32 || o->dtype > CXS_DTYPE_Q16)
        return cxs_diagf(d, CXS_E_INVALID, "%s: unknown stored dtype %u", out, o->dtype);
    if (o->guard > CXS_MAX_GUARD)
        return cxs_diagf(d, CXS_E_INVALID, "%s: guard %u is above %u", out, o->guard,
                         CXS_MAX_GUARD);
    if (o->shard_size < CXS_WRITER_MIN_SHARD_SIZE)
        return cxs_diagf(d, CXS_E_INVALID, "%s: shard size %llu is below %llu bytes", out,
                         (unsigned long long)o->shard_size,
                         (unsigned long long)CXS_WRITER_MIN_SHARD_SIZE);
    if (o->normalize > CXS_NORM_UTTERANCE)
        return cxs_diagf(d, CXS_E_INVALID, "%s: unknown normalisation %u", out, o->normalize);
    if (o->compression > CXS_COMPRESSION_ZSTD)
        return cxs_diagf(d, CXS_E_INVALID, "%s: unknown compression %u", out, o->compression);
    if (o->threads > CXS_WRITER_MAX_THREADS)
        return cxs_diagf(d, CXS_E_INVALID, "%s: %u compression threads (at most %u)", out,
                         o->threads, CXS_WRITER_MAX_THREADS);
    if (o->compression && (o->level < 1 || o->level > 19 || o->chunk_size == 0))
        return cxs_diagf(d, CXS_E_INVALID, "%s: zstd level must be 1..19 and chunks non-empty",
                         out);
    if (o->label_seqs > CXS_SEQ_ONLY)
        return cxs_diagf(d, CXS_E_INVALID, "%s: unknown label_seqs %u", out, o->label_seqs);
    if (o->label_seqs && !o->vocab_size)
        return cxs_diagf(d, CXS_E_INVALID, "%s: label sequences need a vocabulary", out);
    if (o->vocab_size > CXS_MAX_VOCAB || (o->vocab_size && !o->vocab))
        return cxs_diagf(d, CXS_E_INVALID, "%s: vocabulary of %u symbols (at most %u)", out,
                         o->vocab_size, CXS_MAX_VOCAB);
    for (uint32_t i = 0; i < o->vocab_size; i++) {
        const char *s = o->vocab[i];
        size_t n = s ? strlen(s) : 0;
        if (n == 0 || n > CXS_MAX_SYMBOL_LEN)
            return cxs_diagf(d, CXS_E_INVALID, "%s: symbol %u is %zu bytes, must be 1..%u", out,
                             i + 1, n, CXS_MAX_SYMBOL_LEN);
        for (size_t j = 0; j < n; j++)
            if ((uint8_t)s[j] < 0x20)
                return cxs_diagf(d, CXS_E_INVALID, "%s: symbol %u holds a control byte", out,
                                 i + 1);
        for (uint32_t j = 0; j < i; j++)
            if (strcmp(o->vocab[j], s) == 0)
                return cxs_diagf(d, CXS_E_INVALID, "%s: symbol '%s' appears twice", out, s);
    }
    if (o->dim > CXS_MAX_DIM)
        return cxs_diagf(d, CXS_E_INVALID, "%s: dim %u, expected 1..%u (0: the first "
                         "utterance's)", out, o->dim, CXS_MAX_DIM);
    const cxs_writer_part *p = o->part;
    if (p && (p->part < 1 || p->part > p->parts || p->first_shard > p->end_shard))
        return cxs_diagf(d, CXS_E_INVALID, "%s: part %u of %u", out, p->part, p->parts);
    return 0;
}

int cxs_writer_create(const char *out, const cxs_writer_opts *opts, cxs_writer **wp,
                      cxs_diag *d) {
    cxs_writer_opts def;
    if (!opts) {
        cxs_writer_opts_init(&def);
        opts = &def;
    }
    if (!out || !*out || !wp) return cxs_diagf(d, CXS_E_INVALID, "no output path");
    int rc = CXS_OPTS_CHECK(opts, "cxs_writer_opts", d);
    if (rc) return rc;
    rc = check_opts(opts, out, d);
    if (rc) return rc;
    cxs_writer *k = calloc(1, sizeof *k);
    if (!k) return cxs_diagf(d, -ENOMEM, "%s: out of memory", out);
    k->o = *opts;
    k->o.vocab = NULL;
    k->o.part = NULL;
    if (opts->part) {
        k->part = *opts->part;
        k->is_part = 1;
    }
    k->esize = cxs_dtype_size(k->o.dtype);
    /* A coded dataset stores no guard rows (its reader pads windows). */
    k->o.guard = cxs_stored_guard(k->o.dtype, k->o.guard);
    k->vocab_n = k->o.vocab_size;
    k->lw = cxs_label_width(k->vocab_n);
    k->flw = k->o.label_seqs == CXS_SEQ_ONLY ? 0 : k->lw;
    k->minlen = UINT64_MAX;
    k->seq_min = UINT64_MAX;
    /* The lowest minor version whose features the files use. */
    k->block_sums = !(k->o.flags & CXS_WRITER_NO_BLOCK_SUMS);
    k->minor = cxs_dtype_coded(k->o.dtype) ? 4
               : k->block_sums                ? 3
               : k->o.label_seqs              ? 2
               : k->o.compression             ? 1
                                              : 0;
    k->sos = k->eos = -1;
    k->hist = calloc(k->vocab_n + 1, sizeof *k->hist);
    k->out = strdup(out);
    if (!k->hist || !k->out) rc = -ENOMEM;
    /* The VOCAB section: offsets, then the symbols. */
    uint64_t off = 0;
    for (uint32_t i = 0; i <= k->vocab_n && !rc; i++) {
        rc = cxs_bytes_put64(&k->vocab, off);
        if (i < k->vocab_n) off += strlen(opts->vocab[i]);
    }
    for (uint32_t i = 0; i < k->vocab_n && !rc; i++) {
        rc = cxs_bytes_put(&k->vocab, opts->vocab[i], strlen(opts->vocab[i]));
        if (strcmp(opts->vocab[i], SOS_SYMBOL) == 0) k->sos = i;
        if (strcmp(opts->vocab[i], EOS_SYMBOL) == 0) k->eos = i;
    }
    if (rc) {
        cxs_writer_abort(k);
        return cxs_diagf(d, rc, "%s: out of memory", out);
    }
    /* A missing parent is made (and taken away again if this writer
     * fails), so that OUT may name a new directory tree. */
    char *bad = NULL;
    if ((rc = cxs_make_parents(out, &k->made_parents, &bad))) {
        cxs_writer_abort(k);
        if (rc == -ENOTDIR)
            cxs_diagf(d, rc, "%s: cannot create its parent directory: %s is not a directory", out,
                      bad ? bad : "a path above it");
        else
            cxs_diagf(d, rc, "%s: cannot create its parent directory %s: %s", out,
                      bad ? bad : "", strerror(-rc));
        free(bad);
        return rc;
    }
    const char *marker = k->is_part ? CXS_PART_NAME : CXS_MANIFEST_NAME;
    int st = cxs_out_state(out, marker, &k->replace);
    if (st != 0) {
        const int is_part = k->is_part; /* k is gone after the abort */
        cxs_writer_abort(k);
        if (st < 0) return cxs_diagf(d, st, "%s: %s", out, strerror(-st));
        return cxs_diagf(d, -EEXIST,
                         "%s: exists and is not a ctxshard %s (no %s); refusing to replace it",
                         out, is_part ? "part" : "dataset", marker);
    }
    k->stale_removed = cxs_remove_stale(out);
    k->tmpdir = cxs_make_tmpdir(out);
    if (!k->tmpdir) {
        int e = errno ? errno : ENOMEM;
        cxs_writer_abort(k);
        return cxs_diagf(d, -e, "%s: cannot create a temporary directory beside it: %s", out,
                         strerror(e));
    }
    cxs_wfault_init(&k->fault);
    if (k->o.dim && (rc = cxs_writer_set_width(k, k->o.dim))) {
        cxs_writer_abort(k);
        return cxs_diagf(d, rc, "%s: %s", out, strerror(-rc));
    }
    *wp = k;
    return 0;
}

/* Set up what depends on the feature width D, once it is known. */
int cxs_writer_set_width(cxs_writer *k, uint32_t D) {
    k->guard_bytes = (size_t)k->o.guard * D * k->esize;
    k->qh = cxs_q_header_size(k->o.dtype, D);
    k->zero_guard = calloc(1, k->guard_bytes + 1);
    k->s1 = calloc(D, sizeof *k->s1);
    k->s2 = calloc(D, sizeof *k->s2);
    if (!k->zero_guard || !k->s1 || !k->s2) return -ENOMEM;
    if (k->o.compression == CXS_COMPRESSION_ZSTD) {
        uint64_t rowb = (uint64_t)D * k->esize;
        uint64_t rows = k->o.chunk_size / rowb;
        if (rows == 0) rows = 1;
        if (rows * rowb > CXS_MAX_CHUNK_BYTES) rows = CXS_MAX_CHUNK_BYTES / rowb;
        k->chunk_rows = (uint32_t)rows;
        k->chunk_bytes = (size_t)(rows * rowb);
        k->zcap = cxs_zchunk_bound(k->chunk_bytes);
        k->cbuf = malloc(k->chunk_bytes);
        k->scratch = malloc(k->chunk_bytes);
        k->zbuf = malloc(k->zcap);
        k->cc = ZSTD_createCCtx();
        if (!k->cbuf || !k->scratch || !k->zbuf || !k->cc) return -ENOMEM;
        if (k->o.threads > 1) {
            int rc = cxs_zpool_create(k->o.threads, k->chunk_bytes, k->o.level,
                                      k->o.shuffle ? CXS_FILTER_SHUFFLE : 0, k->esize, &k->zp);
            if (rc) return rc;
        }
    }
    k->D = D;
    return 0;
}

static int64_t label_at(const void *p, uint32_t size, uint64_t j) {
    switch (size) {
    case 1: return ((const uint8_t *)p)[j];
    case 2: return ((const uint16_t *)p)[j];
    case 4: return ((const int32_t *)p)[j];
    default: return ((const int64_t *)p)[j];
    }
}

/* Check the labels of u against the vocabulary into k->lab (label width,
 * little-endian).  Messages follow the packer's for integer transcripts. */
static int take_labels(cxs_writer *k, const char *id, const cxs_writer_utt *u, cxs_diag *d) {
    const uint64_t T = u->frames, n = u->label_count;
    if (!k->flw) {
        if (u->labels || n)
            return cxs_diagf(d, CXS_E_INVALID, "%s: labels given, but the dataset has no %s", id,
                             k->lw ? "per-frame labels (label sequences only: give seq)"
                                   : "vocabulary (features only)");
        return 0;
    }
    if (!u->labels)
        return cxs_diagf(d, CXS_E_INPUT, "%s: no labels (the dataset has a vocabulary)", id);
    if (u->label_size != 1 && u->label_size != 2 && u->label_size != 4 && u->label_size != 8)
        return cxs_diagf(d, CXS_E_INVALID, "%s: label size %u (1, 2, 4 or 8 bytes)", id,
                         u->label_size);
    const int framed = n == T + 2;
    if (n != T && !framed)
        return cxs_diagf(d, CXS_E_INPUT, "%s: %llu labels, expected %llu (one per frame) or "
                         "%llu ([SOS], one per frame, [EOS]); a phoneme sequence not tied to "
                         "the frames is a label sequence (label_seqs, seq)", id,
                         (unsigned long long)n, (unsigned long long)T, (unsigned long long)T + 2);
    if (framed && (k->sos < 0 || k->eos < 0))
        return cxs_diagf(d, CXS_E_INPUT, "%s: integer transcripts need [SOS] and [EOS] in the "
                         "vocabulary", id);
    if (grow(&k->lab, &k->lab_cap, T * k->lw + 1)) return cxs_diagf(d, -ENOMEM, "out of memory");
    const char *where = framed ? "position" : "frame";
    for (uint64_t j = 0; j < n; j++) {
        int64_t idx = label_at(u->labels, u->label_size, j);
        if (idx < 0 || idx >= (int64_t)k->vocab_n)
            return cxs_diagf(d, CXS_E_INPUT, "%s: %s %llu: label %lld is outside the vocabulary "
                             "(0..%u)", id, where, (unsigned long long)j, (long long)idx,
                             k->vocab_n - 1);
        if (framed && (j == 0 || j + 1 == n)) {
            int64_t want = j == 0 ? k->sos : k->eos;
            if (idx != want)
                return cxs_diagf(d, CXS_E_INPUT, "%s: position %llu: label %lld, expected %s "
                                 "(%lld)", id, (unsigned long long)j, (long long)idx,
                                 j == 0 ? SOS_SYMBOL : EOS_SYMBOL, (long long)want);
            continue;
        }
        if (idx == k->sos || idx == k->eos)
            return cxs_diagf(d, CXS_E_INPUT, "%s: %s %llu: %s inside the transcript", id, where,
                             (unsigned long long)j, idx == k->sos ? SOS_SYMBOL : EOS_SYMBOL);
        uint64_t t = framed ? j - 1 : j;
        if (k->lw == 1) k->lab[t] = (uint8_t)idx;
        else cxs_st16(k->lab + 2 * t, (uint16_t)idx);
    }
    return 0;
}

/* Check the label sequence of u against the vocabulary into k->sq (label
 * width, little-endian), [SOS] and [EOS] stripped when it is framed. */
static int take_seq(cxs_writer *k, const char *id, const cxs_writer_utt *u, cxs_diag *d) {
    const uint64_t n = u->seq_count;
    k->sq_len = 0;
    if (!k->o.label_seqs) {
        if (u->seq || n)
            return cxs_diagf(d, CXS_E_INVALID, "%s: a label sequence given, but the writer was "
                             "created without label sequences (label_seqs)", id);
        return 0;
    }
    if (!u->seq || n == 0)
        return cxs_diagf(d, CXS_E_INPUT, "%s: empty label sequence (the dataset has label "
                         "sequences: every utterance needs at least one symbol)", id);
    if (u->seq_size != 1 && u->seq_size != 2 && u->seq_size != 4 && u->seq_size != 8)
        return cxs_diagf(d, CXS_E_INVALID, "%s: sequence element size %u (1, 2, 4 or 8 bytes)",
                         id, u->seq_size);
    const int64_t first = label_at(u->seq, u->seq_size, 0);
    const int64_t last = label_at(u->seq, u->seq_size, n - 1);
    const int starts = k->sos >= 0 && first == k->sos, ends = k->eos >= 0 && last == k->eos;
    if (starts && (n < 2 || !ends))
        return cxs_diagf(d, CXS_E_INPUT, "%s: label sequence starts with %s but does not end "
                         "with %s (give both markers, or neither)", id, SOS_SYMBOL, EOS_SYMBOL);
    if (ends && !starts)
        return cxs_diagf(d, CXS_E_INPUT, "%s: label sequence ends with %s but does not start "
                         "with %s (give both markers, or neither)", id, EOS_SYMBOL, SOS_SYMBOL);
    const uint64_t a = starts ? 1 : 0, b = starts ? n - 1 : n;
    if (a == b)
        return cxs_diagf(d, CXS_E_INPUT, "%s: empty label sequence (%s %s with no symbol "
                         "between)", id, SOS_SYMBOL, EOS_SYMBOL);
    if (b - a > UINT32_MAX)
        return cxs_diagf(d, CXS_E_INPUT, "%s: label sequence of %llu symbols (at most 2^32-1)",
                         id, (unsigned long long)(b - a));
    if (grow(&k->sq, &k->sq_cap, (size_t)(b - a) * k->lw))
        return cxs_diagf(d, -ENOMEM, "out of memory");
    for (uint64_t j = a; j < b; j++) {
        int64_t idx = label_at(u->seq, u->seq_size, j);
        if (idx < 0 || idx >= (int64_t)k->vocab_n)
            return cxs_diagf(d, CXS_E_INPUT, "%s: sequence position %llu: label %lld is outside "
                             "the vocabulary (0..%u)", id, (unsigned long long)j, (long long)idx,
                             k->vocab_n - 1);
        if (idx == k->sos || idx == k->eos)
            return cxs_diagf(d, CXS_E_INPUT, "%s: sequence position %llu: %s inside the "
                             "sequence", id, (unsigned long long)j,
                             idx == k->sos ? SOS_SYMBOL : EOS_SYMBOL);
        if (k->lw == 1) k->sq[j - a] = (uint8_t)idx;
        else cxs_st16(k->sq + 2 * (j - a), (uint16_t)idx);
    }
    k->sq_len = b - a;
    return 0;
}

/* Whether the plan rule ends the shard before an utterance of T frames
 * and an id of il bytes: the uncompressed shard file would pass
 * shard_size (the packer's plan applies the same formula). */
static int would_overflow(const cxs_writer *k, uint64_t T, uint64_t il) {
    const swriter *w = &k->w;
    if (!k->open || w->U == 0) return 0;
    const uint64_t E = k->esize, G = k->o.guard, D = k->D, lw = k->flw;
    uint64_t U1 = w->U + 1, F1 = w->F + T, idb1 = w->ids.n + il;
    return cxs_shard_file_size(U1, F1, idb1, D, E, G, lw, cxs_q_header_size(k->o.dtype, D)) >
           k->o.shard_size;
}

int cxs_writer_add(cxs_writer *k, const char *id, const cxs_writer_utt *u, cxs_diag *d) {
    if (!k || !id || !u) return cxs_diagf(d, CXS_E_INVALID, "NULL writer, id or utterance");
    if (k->broken)
        return cxs_diagf(d, CXS_E_INVALID, "%s: the writer failed earlier; abort it", k->out);
    size_t il = strlen(id);
    if (il == 0) return cxs_diagf(d, CXS_E_INPUT, "utterance id is empty");
    if (il > CXS_MAX_ID_LEN)
        return cxs_diagf(d, CXS_E_INPUT, "%.64s...: utterance id is %zu bytes, at most %u allowed",
                         id, il, CXS_MAX_ID_LEN);
    for (size_t j = 0; j < il; j++)
        if ((uint8_t)id[j] < 0x20)
            return cxs_diagf(d, CXS_E_INPUT, "%s: utterance id holds control byte 0x%02x", id,
                             (uint8_t)id[j]);
    if (k->have_last) {
        int c = memcmp(k->last_id, id, il < k->last_len ? il : k->last_len);
        if (c == 0) c = k->last_len < il ? -1 : k->last_len > il;
        /* The caller's mistake, whatever its policy for bad utterances:
         * skipping it would drop the rest of an unsorted stream. */
        if (c == 0) return cxs_diagf(d, CXS_E_INVALID, "%s: duplicate utterance id", id);
        if (c > 0)
            return cxs_diagf(d, CXS_E_INVALID, "%s: utterance id comes after '%s': ids must "
                             "arrive in increasing byte order", id, k->last_id);
    }
    const uint64_t T = u->frames, D = u->dim;
    /* Stored values of a coded dtype: its header and codes, bytes */
    const int coded = u->stored && cxs_dtype_coded(k->o.dtype) && u->type == k->o.dtype;
    size_t isz = coded ? 1 : cxs_in_size(u->type);
    if (!u->data || isz == 0)
        return cxs_diagf(d, CXS_E_INVALID, "%s: no features or unknown element type %u", id,
                         u->type);
    if (T == 0) return cxs_diagf(d, CXS_E_INPUT, "%s: empty utterance (0 frames)", id);
    if (D == 0 || D > CXS_MAX_DIM)
        return cxs_diagf(d, CXS_E_INPUT, "%s: feature dimension %llu, expected 1..%u", id,
                         (unsigned long long)D, CXS_MAX_DIM);
    if (k->D && D != k->D)
        return cxs_diagf(d, CXS_E_INPUT, "%s: %llu features per frame, expected %u %s", id,
                         (unsigned long long)D, k->D,
                         k->o.dim ? "(the writer's dim)" : "like the first utterance");
    if (T > (SIZE_MAX / 2) / (D * 8))
        return cxs_diagf(d, CXS_E_INPUT, "%s: %llu frames is too large", id,
                         (unsigned long long)T);
    /* Stored float values of another type (a dataset being converted,
     * a coded one decoded): converted (spec 7.1) or encoded as they are,
     * not normalised again. */
    const int stored_float = u->stored && !coded && !u->big_endian &&
                             u->type >= CXS_DTYPE_F32 && u->type <= CXS_DTYPE_BF16;
    if (u->stored && !stored_float && (u->type != k->o.dtype || u->big_endian))
        return cxs_diagf(d, CXS_E_INVALID, "%s: stored features must be the dataset's dtype, "
                         "little-endian", id);
    int rc = take_labels(k, id, u, d);
    if (!rc) rc = take_seq(k, id, u, d);
    if (rc) return rc;
    cxs_fsrc s = {u->data, T, D, u->type, (int)u->big_endian, u->row_stride, u->col_stride};
    if (s.row_stride == 0 && s.col_stride == 0) {
        s.col_stride = (int64_t)isz;
        s.row_stride = (int64_t)(isz * D);
    }
    const size_t fb = (size_t)(cxs_q_header_size(k->o.dtype, D) + T * D * k->esize);
    if (grow(&k->conv, &k->conv_cap, fb + (size_t)k->o.guard * D * k->esize) ||
        grow(&k->sums, &k->sums_cap, 4 * D * sizeof(double)))
        return cxs_diagf(d, -ENOMEM, "%s: out of memory", id);
    cxs_diag why;
    /* Stored values are taken as they are: converting them into their own
     * type is exact, and it checks them and sums them the same way. */
    rc = coded ? cxs_features_coded(k->o.dtype, u->data, T, D, k->conv, k->sums, k->sums + D, &why)
               : cxs_features_convert(&s, k->o.dtype, u->stored ? CXS_NORM_NONE : k->o.normalize,
                                      0, k->conv, k->sums, k->sums + D, k->sums + 2 * D, NULL,
                                      &why);
    if (rc == -ENOMEM) return cxs_diagf(d, rc, "%s: out of memory", id);
    if (rc) return cxs_diagf(d, CXS_E_INPUT, "%s: %s", id, why.message);
    memset(k->conv + fb, 0, (size_t)k->o.guard * D * k->esize); /* the guard after it */
    /* Accepted: from here on a failure is the system's. */
    if (!k->last_id && !(k->last_id = malloc(CXS_MAX_ID_LEN + 1)))
        return cxs_diagf(d, -ENOMEM, "%s: out of memory", id);
    if (!k->D && (rc = cxs_writer_set_width(k, (uint32_t)D))) goto fail;
    if (!(k->o.flags & CXS_WRITER_MANUAL_CUT) && would_overflow(k, T, il) && (rc = shard_end(k)))
        goto fail;
    if (!k->open && (rc = shard_begin(k))) goto fail;
    if ((rc = shard_add(k, id, il, T, k->conv, k->lab))) goto fail;
    for (uint32_t dd = 0; dd < k->D; dd++) {
        cxs_xsum_add(&k->s1[dd], k->sums[dd]);
        cxs_xsum_add(&k->s2[dd], k->sums[D + dd]);
    }
    if (k->flw)
        for (uint64_t t = 0; t < T; t++)
            k->hist[k->flw == 1 ? k->lab[t] : cxs_ld16(k->lab + 2 * t)]++;
    if (k->o.label_seqs) {
        k->seq_total += k->sq_len;
        if (k->sq_len < k->seq_min) k->seq_min = k->sq_len;
        if (k->sq_len > k->seq_max) k->seq_max = k->sq_len;
    }
    k->U++;
    k->F += T;
    if (T < k->minlen) k->minlen = T;
    if (T > k->maxlen) k->maxlen = T;
    memcpy(k->last_id, id, il + 1);
    k->last_len = il;
    k->have_last = 1;
    return 0;
fail:
    k->broken = 1;
    return cxs_diagf(d, rc, "%s: %s", k->out, strerror(-rc));
}

int cxs_writer_add_many(cxs_writer *k, const char *const *ids, const cxs_writer_utt *utts,
                        size_t n, size_t *added, cxs_diag *d) {
    size_t i = 0;
    int rc = 0;
    if (n && (!ids || !utts)) rc = cxs_diagf(d, CXS_E_INVALID, "NULL ids or utterances");
    for (; i < n && !rc; i++)
        if ((rc = cxs_writer_add(k, ids[i], &utts[i], d))) break;
    if (added) *added = i;
    return rc;
}

int cxs_writer_skip(cxs_writer *k, const char *id, const char *reason) {
    if (!k || !id || !reason || !*id) return CXS_E_INVALID;
    /* one line per utterance: "id TAB reason LF" */
    for (const char *c = id; *c; c++)
        if ((uint8_t)*c < 0x20) return CXS_E_INVALID;
    if (strpbrk(reason, "\t\n\r")) return CXS_E_INVALID;
    int rc;
    if ((rc = cxs_bytes_put(&k->skipped, id, strlen(id))) || (rc = cxs_bytes_put(&k->skipped, "\t", 1)) ||
        (rc = cxs_bytes_put(&k->skipped, reason, strlen(reason))) ||
        (rc = cxs_bytes_put(&k->skipped, "\n", 1)))
        return rc;
    k->nskipped++;
    return 0;
}

int cxs_writer_cut(cxs_writer *k, cxs_diag *d) {
    if (!k) return CXS_E_INVALID;
    if (!k->open) return 0;
    int rc = shard_end(k);
    if (rc) {
        k->broken = 1;
        return cxs_diagf(d, rc, "%s: %s", k->out, strerror(-rc));
    }
    return 0;
}

int cxs_writer_info_get(const cxs_writer *k, cxs_writer_info *info) {
    if (!k || !info) return CXS_E_INVALID;
    memset(info, 0, sizeof *info);
    info->num_utterances = k->U;
    info->num_frames = k->F;
    info->num_skipped = k->nskipped;
    info->num_shards = k->nshards;
    info->dim = k->D;
    info->bytes_written = k->bytes_out;
    info->feature_bytes = k->feat_out;
    info->stale_removed = k->stale_removed;
    return 0;
}

int cxs_writer_commit(cxs_writer *k, cxs_writer_info *info, cxs_diag *d) {
    if (!k) return cxs_diagf(d, CXS_E_INVALID, "NULL writer");
    int rc = 0;
    if (k->broken) rc = cxs_diagf(d, CXS_E_INVALID, "%s: the writer failed earlier; nothing "
                                  "written", k->out);
    else if (k->U == 0 && !k->is_part)
        rc = cxs_diagf(d, CXS_E_INVALID, "%s: no utterance added (%llu skipped); nothing written",
                       k->out, (unsigned long long)k->nskipped);
    else if ((k->open && (rc = shard_end(k))) || (rc = cxs_writer_write_index(k)))
        cxs_diagf(d, rc, "%s: %s; nothing written", k->out, strerror(-rc));
    else if ((rc = cxs_commit_output(&k->fault, k->tmpdir, k->out,
                                     k->is_part ? CXS_PART_NAME : CXS_MANIFEST_NAME))) {
        if (rc == -EEXIST)
            cxs_diagf(d, rc, "%s: exists and is not a ctxshard %s (no %s): it changed since the "
                      "writer was created; left alone, nothing written", k->out,
                      k->is_part ? "part" : "dataset",
                      k->is_part ? CXS_PART_NAME : CXS_MANIFEST_NAME);
        else
            cxs_diagf(d, rc, "%s: %s; nothing written", k->out, strerror(-rc));
    }
    if (!rc) {
        free(k->tmpdir); /* renamed: nothing to remove */
        k->tmpdir = NULL;
        free(k->made_parents); /* they hold the dataset now */
        k->made_parents = NULL;
        if (info) cxs_writer_info_get(k, info);
    }
    cxs_writer_abort(k);
    return rc;
}

void cxs_writer_abort(cxs_writer *k) {
    if (!k) return;
    if (k->open) close(k->w.fd);
    k->w.fd = -1;
    swriter_free(&k->w);
    if (k->tmpdir) {
        cxs_remove_tree(k->tmpdir);
        free(k->tmpdir);
    }
    if (k->made_parents && k->out) cxs_remove_parents(k->out, k->made_parents);
    free(k->made_parents);
    free(k->out);
    free(k->zero_guard);
    free(k->s1);
    free(k->s2);
    free(k->hist);
    free(k->vocab.p);
    free(k->shard_table.p);
    free(k->skipped.p);
    free(k->cbuf);
    free(k->scratch);
    free(k->zbuf);
    cxs_zpool_free(k->zp); /* its slots hold copies: nothing of k's is in use */
    if (k->cc) ZSTD_freeCCtx(k->cc);
    free(k->conv);
    free(k->lab);
    free(k->sq);
    free(k->sums);
    free(k->last_id);
    free(k);
}
