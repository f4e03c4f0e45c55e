/* verify.c - cxs_dataset_verify(): one streaming pass over every byte. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "ctxshard.h"
#include "cxs_format.h"
#include "cxs_le.h"
#include "cxs_qcodec.h"

/* Shared with dataset.c through this small internal view. */
#include "cxs_convert.h"
#include "cxs_xsum.h"
#include "dataset_internal.h"
#include "fault.h"

typedef struct vctx {
    const cxs_dataset *ds;
    cxs_progress_fn progress;
    void *user;
    uint64_t done, total;
    XXH3_state_t *st;
    /* The statistics recomputed as the writer forms them (spec 7.3): per
     * utterance and dimension, sums of the stored values and of their
     * squares in float64, in frame order; over utterances, exact sums. */
    double *u1, *u2;  /* dim each: the utterance at work */
    float *qrow;      /* a coded dtype: one row decoded (dim floats) */
    cxs_xsum *x1, *x2; /* dim each */
    /* Compressed: one chunk's rows and a decoder, made once (nothing is
     * allocated inside the recovery region the shards are read in). */
    uint8_t *buf;
    zreader zr;
} vctx;

/* Stored element i of p as float64. */
static double elem(const uint8_t *p, uint64_t i, uint32_t dtype) {
    if (dtype == CXS_DTYPE_F32) {
        uint32_t b = cxs_ld32(p + 4 * i);
        float f;
        memcpy(&f, &b, 4);
        return f;
    }
    if (dtype == CXS_DTYPE_F16) return cxs_f16_to_f32(cxs_ld16(p + 2 * i));
    return cxs_bf16_to_f32(cxs_ld16(p + 2 * i));
}

/* Add rows of an utterance to its sums. */
static void sum_rows(vctx *v, const uint8_t *p, uint64_t rows, const uint8_t *qheader) {
    const uint32_t D = v->ds->meta.dim, dt = v->ds->meta.dtype;
    if (qheader) {
        /* a coded dtype: the decoded values, as the writer summed them */
        for (uint64_t r = 0; r < rows; r++) {
            cxs_q_decode_rows(dt, qheader, D, p + r * v->ds->row_bytes, 1, v->qrow);
            for (uint32_t d = 0; d < D; d++) {
                const double x = v->qrow[d];
                v->u1[d] += x;
                v->u2[d] += x * x;
            }
        }
        return;
    }
    for (uint64_t r = 0; r < rows; r++)
        for (uint32_t d = 0; d < D; d++) {
            double x = elem(p, r * D + d, dt);
            v->u1[d] += x;
            v->u2[d] += x * x;
        }
}

/* An utterance is complete: its sums join the exact totals. */
static void sum_utterance(vctx *v) {
    for (uint32_t d = 0; d < v->ds->meta.dim; d++) {
        cxs_xsum_add(&v->x1[d], v->u1[d]);
        cxs_xsum_add(&v->x2[d], v->u2[d]);
        v->u1[d] = v->u2[d] = 0;
    }
}

/* A value no feature extractor gives: further than this many standard
 * deviations (the stored statistics') from its dimension's mean. */
#define IMPLAUSIBLE_SD 1000.0

/* After a FEATURES checksum mismatch: which utterances hold implausible
 * values, appended to msg.  The format has one checksum per section, so
 * damage that leaves every value plausible cannot be located. */
static void locate_features(const vctx *v, const struct shard *sh, const uint8_t *f, char *msg,
                            size_t cap) {
    const cxs_dataset *ds = v->ds;
    const uint32_t D = ds->meta.dim;
    size_t len = strlen(msg);
    if (!ds->stats) {
        snprintf(msg + len, cap - len,
                 "; a shard opened alone carries no statistics to judge its values by, and the "
                 "section checksum cannot say which utterance changed (verify the dataset)");
        return;
    }
    if (ds->qh) {
        /* every code decodes to a plausible value: none can be judged */
        snprintf(msg + len, cap - len, "; the section checksum cannot say which utterance's "
                 "codes changed (format 1.3 block sums can)");
        return;
    }
    const uint8_t *mean = ds->stats + CXS_STATS_HEAD, *var = mean + 8ull * D;
    uint64_t found = 0;
    for (uint64_t lu = 0; lu < sh->meta.num_utterances; lu++) {
        const uint64_t u = sh->u_start + lu;
        const cxs_uloc l = cxs_utt_at(ds, u); /* INDEX checked before the features */
        const uint64_t T = l.T;
        const uint8_t *p = f + l.row * ds->row_bytes;
        for (uint64_t i = 0; i < T * D; i++) {
            uint32_t d = (uint32_t)(i % D);
            double x = elem(p, i, ds->meta.dtype), m = cxs_ldf64(mean + 8ull * d);
            double sd = sqrt(cxs_ldf64(var + 8ull * d));
            if (!(fabs(x - m) > IMPLAUSIBLE_SD * sd)) continue;
            if (found++ < 3) {
                char name[300];
                cxs_utt_name(ds, u, name, sizeof name);
                len = strlen(msg);
                snprintf(msg + len, cap - len,
                         "%s %s holds %g at frame %llu, dimension %u (more than %g standard "
                         "deviations from the dimension's mean)",
                         found == 1 ? ";" : ",", name, x, (unsigned long long)(i / D), d,
                         IMPLAUSIBLE_SD);
            }
            break; /* one value per utterance */
        }
    }
    len = strlen(msg);
    if (found > 3)
        snprintf(msg + len, cap - len, ", and %llu more utterances", (unsigned long long)(found - 3));
    else if (!found)
        snprintf(msg + len, cap - len,
                 "; every value is plausible (within %g standard deviations of its dimension's "
                 "mean): the section checksum cannot say which utterance changed (the shard "
                 "has no block sums: it was packed with --block-sums off or by a writer "
                 "before format 1.3; re-pack or convert it to locate damage)",
                 IMPLAUSIBLE_SD);
}

/* The blocks of section be's up to byte `upto` checked against their
 * sums (cxs_blocks_check_upto), and each that passed told to the block
 * source (blocksrc.h): a dataset verified in the process is not hashed
 * again when it is served. */
static int check_upto(const cxs_dataset *ds, uint32_t s, const cxs_bsum_entry *be,
                      uint64_t *next, uint64_t upto, cxs_diag *d) {
    const uint64_t from = *next;
    const int rc = cxs_blocks_check_upto(ds, s, be, next, upto, d);
    cxs_bcheck *c = cxs_bsrc_of(ds, s, be->type);
    for (uint64_t j = from; c && j < *next; j++) cxs_bsrc_mark(c, j); /* (a failed one: not) */
    return rc;
}

static int tick(vctx *v, uint64_t n) {
    v->done += n;
    if (v->progress && v->progress(v->user, v->done, v->total)) return -ECANCELED;
    return 0;
}

static int zero_range(const uint8_t *p, uint64_t a, uint64_t b, uint64_t *bad) {
    for (uint64_t i = a; i < b; i++)
        if (p[i]) {
            *bad = i;
            return 0;
        }
    return 1;
}

/* Padding between the section table and the first section, between
 * sections, and after the last one must be zero. */
static int check_padding(const uint8_t *map, uint64_t size, const cxs_container *c,
                         const char *path, cxs_diag *d) {
    uint64_t bad, pos = CXS_HEADER_SIZE + (uint64_t)CXS_SECTION_ENTRY * c->nsections;
    for (uint32_t i = 0; i <= c->nsections; i++) {
        uint64_t next = i < c->nsections ? c->sections[i].offset : size;
        if (!zero_range(map, pos, next, &bad))
            return cxs_diagf(d, CXS_E_CORRUPT, "%s: padding byte at offset %llu is not zero", path,
                             (unsigned long long)bad);
        if (i < c->nsections) pos = c->sections[i].offset + c->sections[i].length;
    }
    return 0;
}

static int hash_plain(vctx *v, const uint8_t *map, const cxs_section *s, const char *path,
                      cxs_diag *d) {
    const uint64_t chunk = 8u << 20;
    XXH3_64bits_reset(v->st);
    for (uint64_t o = 0; o < s->length; o += chunk) {
        uint64_t n = s->length - o < chunk ? s->length - o : chunk;
        XXH3_64bits_update(v->st, map + s->offset + o, (size_t)n);
        int rc = tick(v, n);
        if (rc) return rc;
    }
    if (cxs_checksum_differs(XXH3_64bits_digest(v->st), s->checksum))
        return cxs_diag_at(d, CXS_E_CHECKSUM, path, s->offset,
                         "%s: section %s (bytes %llu..%llu): checksum mismatch", path,
                         cxs_section_name(s->type), (unsigned long long)s->offset,
                         (unsigned long long)(s->offset + s->length));
    return 0;
}

static int finite_rows(const uint8_t *p, uint64_t n, uint32_t dtype, uint64_t *bad) {
    if (cxs_dtype_coded(dtype)) return 1; /* codes: what they decode to is the headers' matter */
    if (dtype == CXS_DTYPE_F32) {
        for (uint64_t i = 0; i < n; i++)
            if ((cxs_ld32(p + 4 * i) & 0x7f800000u) == 0x7f800000u) return *bad = i, 0;
    } else {
        uint16_t mask = dtype == CXS_DTYPE_F16 ? 0x7c00 : 0x7f80;
        for (uint64_t i = 0; i < n; i++)
            if ((cxs_ld16(p + 2 * i) & mask) == mask) return *bad = i, 0;
    }
    return 1;
}

/* FEATURES: hash while checking guard rows are zero and values finite. */
static int verify_features(vctx *v, const struct shard *sh, const cxs_section *s, cxs_diag *d) {
    const cxs_dataset *ds = v->ds;
    const uint64_t rowb = (uint64_t)ds->meta.dim * ds->esize;
    const uint64_t gbytes = rowb * ds->meta.guard;
    const uint8_t *f = sh->map + s->offset;
    const uint32_t si = (uint32_t)(sh - ds->shards);
    const cxs_bsum_entry *be = cxs_blocksums_find(&sh->bs, CXS_SEC_FEATURES);
    uint64_t pos = 0, bad, nextb = 0;
    int rc;
    XXH3_64bits_reset(v->st);
    for (uint64_t u = 0; u <= sh->meta.num_utterances; u++) {
        /* Format 1.3: the blocks holding the bytes about to be looked at
         * first, so that damage is named by its block and utterances. */
        if (be && (rc = check_upto(ds, si, be, &nextb, pos + gbytes, d))) return rc;
        if (!zero_range(f, pos, pos + gbytes, &bad))
            return cxs_diag_at(d, CXS_E_CORRUPT, sh->path, s->offset + bad,
                             "%s: FEATURES: guard row byte at offset %llu is not zero", sh->path,
                             (unsigned long long)(s->offset + bad));
        XXH3_64bits_update(v->st, f + pos, (size_t)gbytes);
        pos += gbytes;
        if (u == sh->meta.num_utterances) break;
        uint64_t T = cxs_ld64(sh->index + 8 * (u + 1)) - cxs_ld64(sh->index + 8 * u);
        uint64_t n = T * rowb;
        if (be && (rc = check_upto(ds, si, be, &nextb, pos + n, d))) return rc;
        if (!finite_rows(f + pos, T * ds->meta.dim, ds->meta.dtype, &bad))
            return cxs_diag_at(d, CXS_E_CORRUPT, sh->path, s->offset + pos + bad * ds->esize,
                             "%s: FEATURES: utterance %llu holds a NaN or infinity at offset %llu",
                             sh->path, (unsigned long long)(sh->meta.first_utterance + u),
                             (unsigned long long)(s->offset + pos + bad * ds->esize));
        XXH3_64bits_update(v->st, f + pos, (size_t)n);
        sum_rows(v, f + pos, T, sh->qheaders ? sh->qheaders + u * ds->qh : NULL);
        sum_utterance(v);
        pos += n;
        if ((rc = tick(v, gbytes + n))) return rc;
    }
    if (be && (rc = check_upto(ds, si, be, &nextb, s->length, d))) return rc;
    if (cxs_checksum_differs(XXH3_64bits_digest(v->st), s->checksum)) {
        char msg[sizeof d->message];
        snprintf(msg, sizeof msg, "%s: section FEATURES (bytes %llu..%llu): checksum mismatch",
                 sh->path, (unsigned long long)s->offset,
                 (unsigned long long)(s->offset + s->length));
        locate_features(v, sh, f, msg, sizeof msg);
        return cxs_diag_at(d, CXS_E_CHECKSUM, sh->path, s->offset, "%s", msg);
    }
    return 0;
}

/* ", which holds rows of utterance A to utterance B" for chunk c (both
 * included). */
static void chunk_utterances(const cxs_dataset *ds, const struct shard *sh, uint64_t c, char *out,
                             size_t cap) {
    const uint64_t r0 = c * sh->ch.chunk_rows, r1 = r0 + sh->ch.chunk_rows;
    uint64_t first = UINT64_MAX, last = 0;
    for (uint64_t lu = 0; lu < sh->meta.num_utterances; lu++) {
        const uint64_t u = sh->u_start + lu;
        const cxs_uloc l = cxs_utt_at(ds, u);
        const uint64_t a = l.row, b = a + l.T;
        if (a < r1 && b > r0) {
            if (first == UINT64_MAX) first = u;
            last = u;
        }
    }
    out[0] = 0;
    if (first == UINT64_MAX) {
        snprintf(out, cap, ", which holds guard rows only");
        return;
    }
    char a[300], b[300];
    cxs_utt_name(ds, first, a, sizeof a);
    if (first == last) {
        snprintf(out, cap, ", which holds rows of %s", a);
        return;
    }
    cxs_utt_name(ds, last, b, sizeof b);
    snprintf(out, cap, ", which holds rows of %s to %s", a, b);
}

/* After ZFEATURES's section checksum failed: the first chunk whose stored
 * bytes fail their own checksum, with the utterances whose rows it holds,
 * appended to msg; or, when every chunk matches its own, that the section's
 * checksum is what disagrees. */
static void locate_chunk(const cxs_dataset *ds, const struct shard *sh, const cxs_section *s,
                         char *msg, size_t cap) {
    size_t len = strlen(msg);
    for (uint64_t c = 0, a = 0; c < sh->ch.num_chunks; c++) {
        const uint8_t *e = sh->chunk_table + CXS_CHUNK_ENTRY * c;
        const uint64_t b = cxs_ld64(e); /* checked at open: a < b <= length */
        if (cxs_checksum_differs(cxs_hash(sh->map + s->offset + a, (size_t)(b - a)),
                                 cxs_ld64(e + 8))) {
            char held[700];
            chunk_utterances(ds, sh, c, held, sizeof held);
            snprintf(msg + len, cap - len, "; chunk %llu (bytes %llu..%llu) fails its checksum%s",
                     (unsigned long long)c, (unsigned long long)(s->offset + a),
                     (unsigned long long)(s->offset + b), held);
            return;
        }
        a = b;
    }
    snprintf(msg + len, cap - len,
             "; every chunk matches its own checksum in CHUNKS: the section's checksum in the "
             "section table does not describe the chunks");
}

/* ZFEATURES (compressed), in spec 4.6's order: the section's checksum, then
 * every chunk decoded (its own checksum and exact size), checking guard
 * rows and values on the decoded rows as verify_features does. */
static int verify_zfeatures(vctx *v, uint32_t si, const cxs_section *s, cxs_diag *d) {
    const cxs_dataset *ds = v->ds;
    const struct shard *sh = &ds->shards[si];
    /* The section's checksum first: a file whose chunks were rewritten with
     * their own checksums but not the section's is CXS_E_CHECKSUM, whatever
     * its rows hold.  The chunk that fails its own names the damage. */
    int rc = hash_plain(v, sh->map, s, sh->path, d);
    if (rc == CXS_E_CHECKSUM && d) {
        char msg[sizeof d->message];
        snprintf(msg, sizeof msg, "%s", d->message);
        locate_chunk(ds, sh, s, msg, sizeof msg);
        snprintf(d->message, sizeof d->message, "%s", msg);
    }
    if (rc) return rc;
    const uint64_t rowb = ds->row_bytes, G = ds->meta.guard, U = sh->meta.num_utterances;
    uint8_t *buf = v->buf;
    /* Segments of the row stream: guard 0, utterance 0, guard 1, ... */
    uint64_t seg = 0, seg_end = G, row = 0, bad;
    for (uint64_t c = 0; c < sh->ch.num_chunks && !rc; c++) {
        size_t n;
        rc = cxs_decode_chunk(ds, &v->zr, si, c, buf, &n);
        if (rc) {
            const uint8_t *e = sh->chunk_table + CXS_CHUNK_ENTRY * c;
            uint64_t a = c ? cxs_ld64(e - CXS_CHUNK_ENTRY) : 0, b = cxs_ld64(e);
            char held[700];
            chunk_utterances(ds, sh, c, held, sizeof held);
            rc = cxs_diagf(d, rc,
                           "%s: ZFEATURES: chunk %llu (bytes %llu..%llu) %s%s", sh->path,
                           (unsigned long long)c, (unsigned long long)(s->offset + a),
                           (unsigned long long)(s->offset + b),
                           rc == CXS_E_CHECKSUM ? "fails its checksum"
                           : rc == CXS_E_TRUNCATED ? "can no longer be read (the file shrank)"
                                                   : "does not decode to its rows",
                           held);
            break;
        }
        for (uint64_t r = 0; r < n / rowb; r++, row++) {
            while (row >= seg_end && seg < 2 * U) {
                if (seg % 2) sum_utterance(v); /* its last row is behind */
                seg++;
                uint64_t len = seg % 2 ? cxs_ld64(sh->index + 8 * (seg / 2 + 1)) -
                                             cxs_ld64(sh->index + 8 * (seg / 2))
                                       : G;
                seg_end += len;
            }
            const uint8_t *p = buf + r * rowb;
            if (seg % 2 == 0 && !zero_range(p, 0, rowb, &bad)) {
                rc = cxs_diagf(d, CXS_E_CORRUPT,
                               "%s: ZFEATURES: chunk %llu: guard row %llu is not zero", sh->path,
                               (unsigned long long)c, (unsigned long long)row);
                break;
            }
            if (seg % 2 == 1 && !finite_rows(p, ds->meta.dim, ds->meta.dtype, &bad)) {
                rc = cxs_diagf(d, CXS_E_CORRUPT,
                               "%s: ZFEATURES: utterance %llu holds a NaN or infinity (row %llu)",
                               sh->path, (unsigned long long)(sh->meta.first_utterance + seg / 2),
                               (unsigned long long)row);
                break;
            }
            if (seg % 2 == 1)
                sum_rows(v, p, 1, sh->qheaders ? sh->qheaders + seg / 2 * ds->qh : NULL);
        }
    }
    if (!rc && seg % 2) sum_utterance(v); /* the last utterance, without a guard after it */
    return rc;
}

static int verify_labels(vctx *v, const struct shard *sh, const cxs_section *s, uint64_t *hist,
                         cxs_diag *d) {
    const uint32_t w = sh->meta.label_width;
    /* A shard alone has no vocabulary: any value of the width is valid. */
    const uint32_t V = v->ds->meta.vocab_size ? v->ds->meta.vocab_size : (w == 1 ? 256u : 65536u);
    /* The values first: a label outside the vocabulary names its frame and
     * utterance, which the section checksum could not. */
    const cxs_dataset *ds = v->ds;
    const uint32_t si = (uint32_t)(sh - ds->shards);
    const cxs_bsum_entry *be = cxs_blocksums_find(&sh->bs, CXS_SEC_LABELS);
    uint64_t nextb = 0, checked = 0; /* bytes of LABELS checked against block sums */
    for (uint64_t i = 0; i < sh->meta.num_frames; i++) {
        if (be && (i + 1) * w > checked) {
            int rc = check_upto(ds, si, be, &nextb, (i + 1) * w, d);
            if (rc) return rc;
            checked = nextb << be->shift;
        }
        uint32_t l = cxs_shard_label(sh, i);
        if (l >= V) {
            char name[300];
            cxs_utt_name(v->ds, cxs_find_utt(v->ds, sh->f_start + i), name, sizeof name);
            return cxs_diagf(d, CXS_E_CORRUPT,
                             "%s: LABELS: frame %llu (%s) has label %u, the vocabulary has %u "
                             "symbols",
                             sh->path, (unsigned long long)(sh->f_start + i), name, l, V);
        }
        hist[l]++;
    }
    int rc = hash_plain(v, sh->map, s, sh->path, d);
    if (rc == CXS_E_CHECKSUM && d && !be) {
        size_t len = strlen(d->message);
        snprintf(d->message + len, sizeof d->message - len,
                 "; every label is in the vocabulary: the section checksum cannot say which "
                 "frame changed (the shard has no block sums: packed with --block-sums off or "
                 "by a writer before format 1.3; the label histogram in STATS may show which "
                 "labels)");
    }
    return rc;
}

/* SEQUENCES (format 1.2): its checksum, then its offsets and every symbol
 * against the vocabulary (open checked them too; verify does not rely on
 * it). */
static int verify_sequences(vctx *v, const struct shard *sh, const cxs_section *s, cxs_diag *d) {
    int rc = hash_plain(v, sh->map, s, sh->path, d);
    if (rc) return rc;
    const cxs_dataset *ds = v->ds;
    const uint32_t w = ds->seq_width;
    const uint32_t V = ds->meta.vocab_size ? ds->meta.vocab_size : (w == 1 ? 256u : 65536u);
    uint64_t tot, lo, hi;
    return cxs_sequences_check(sh->map + s->offset, s->length, sh->meta.num_utterances, w, V,
                               &tot, &lo, &hi, sh->path, d);
}

typedef struct shard_arg {
    vctx *v;
    uint32_t i;
    uint64_t *hist;
    cxs_diag *d;
    uint64_t *minlen, *maxlen;
} shard_arg;

/* QHEADERS (format 1.4): every utterance's header as the encoder writes
 * them (cxs_q_header_check), the culprit named; before the features,
 * whose sums decode with them. */
static int verify_qheaders(const cxs_dataset *ds, const struct shard *sh, cxs_diag *d) {
    const cxs_section *q = cxs_container_find(&sh->c, CXS_SEC_QHEADERS);
    char why[160];
    for (uint64_t u = 0; u < sh->meta.num_utterances; u++)
        if (cxs_q_header_check(ds->meta.dtype, sh->qheaders + u * ds->qh, ds->meta.dim, why,
                               sizeof why))
            return cxs_diag_at(d, CXS_E_CORRUPT, sh->path, q->offset + u * ds->qh,
                               "%s: QHEADERS: utterance %llu (bytes %llu..%llu): %s", sh->path,
                               (unsigned long long)(sh->meta.first_utterance + u),
                               (unsigned long long)(q->offset + u * ds->qh),
                               (unsigned long long)(q->offset + (u + 1) * ds->qh), why);
    return 0;
}

/* Every byte of shard i: in a recovery region (fault.h), so that a shard
 * truncated under verify is reported, not a SIGBUS. */
static int verify_shard(void *p) {
    const shard_arg *a = p;
    vctx *v = a->v;
    const cxs_dataset *ds = v->ds;
    const struct shard *sh = &ds->shards[a->i];
    cxs_diag *d = a->d;
    int rc = check_padding(sh->map, sh->size, &sh->c, sh->path, d);
    if (!rc && sh->qheaders) rc = verify_qheaders(ds, sh, d);
    for (uint32_t j = 0; j < sh->c.nsections && !rc; j++) {
        const cxs_section *s = &sh->c.sections[j];
        /* Format 1.3: a covered section's blocks before its other checks
         * (FEATURES and LABELS check theirs as they go). */
        const cxs_bsum_entry *be = cxs_blocksums_find(&sh->bs, s->type);
        uint64_t nextb = 0;
        if (be && s->type != CXS_SEC_FEATURES && s->type != CXS_SEC_LABELS &&
            (rc = check_upto(ds, a->i, be, &nextb, s->length, d)))
            break;
        if (s->type == CXS_SEC_FEATURES) rc = verify_features(v, sh, s, d);
        else if (s->type == CXS_SEC_ZFEATURES && cxs_compressed(ds))
            rc = verify_zfeatures(v, a->i, s, d);
        else if (s->type == CXS_SEC_LABELS) rc = verify_labels(v, sh, s, a->hist, d);
        else if (s->type == CXS_SEC_SEQUENCES && ds->has_seqs)
            rc = verify_sequences(v, sh, s, d);
        else rc = hash_plain(v, sh->map, s, sh->path, d);
    }
    for (uint64_t u = 0; u < sh->meta.num_utterances && !rc; u++) {
        uint64_t T = cxs_ld64(sh->index + 8 * (u + 1)) - cxs_ld64(sh->index + 8 * u);
        if (T < *a->minlen) *a->minlen = T;
        if (T > *a->maxlen) *a->maxlen = T;
    }
    return rc;
}

int cxs_dataset_verify(const cxs_dataset *ds, cxs_progress_fn progress, void *user, cxs_diag *d) {
    if (ds && ds->stream) return cxs_streamed_refuse(ds, "verify", d);
    vctx v = {ds, progress, user, 0, ds->total_bytes, XXH3_createState(), NULL, NULL, NULL, NULL,
              NULL, NULL, {0}};
    uint64_t *hist = calloc(65537, sizeof *hist);
    const uint32_t D = ds->meta.dim;
    v.u1 = calloc(2 * (size_t)D + 1, sizeof *v.u1);
    v.u2 = v.u1 ? v.u1 + D : NULL;
    v.x1 = calloc(2 * (size_t)D + 1, sizeof *v.x1);
    v.x2 = v.x1 ? v.x1 + D : NULL;
    v.qrow = malloc((size_t)D * sizeof *v.qrow + 1);
    int rc = 0;
    if (cxs_compressed(ds) && ds->max_chunk_bytes) v.buf = malloc(ds->max_chunk_bytes);
    if (!v.st || !hist || !v.u1 || !v.x1 || !v.qrow || (cxs_compressed(ds) && ds->max_chunk_bytes && !v.buf)) {
        rc = -ENOMEM;
        goto out;
    }
    const char *mp = ds->manifest_path;
    if (!ds->single_shard) {
        if ((rc = check_padding(ds->map, ds->size, &ds->mc, mp, d))) goto out;
        for (uint32_t i = 0; i < ds->mc.nsections && !rc; i++)
            rc = hash_plain(&v, ds->map, &ds->mc.sections[i], mp, d);
        if (rc) goto out;
    }
    /* The per-utterance tables that open leaves to their first use (format
     * 1.3, BLOCKSUMS) are checked whole first: the features' checks below
     * walk the utterances by INDEX. */
    if ((rc = cxs_tables_check_all(ds, d))) goto out;
    uint64_t minlen = UINT64_MAX, maxlen = 0;
    for (uint32_t i = 0; i < ds->meta.num_shards; i++) {
        shard_arg a = {&v, i, hist, d, &minlen, &maxlen};
        cxs_fault f;
        rc = cxs_fault_run(ds, verify_shard, &a, &f);
        if (rc == CXS_E_TRUNCATED && f.shard == i) {
            cxs_where w = CXS_WHERE_NONE;
            w.shard = i;
            w.offset = f.offset;
            cxs_where_diag(ds, rc, &w, d);
        }
        if (rc) goto out;
    }
    /* The stored statistics must describe the data. */
    const uint8_t *st = ds->stats;
    if (!st) goto out; /* a shard alone carries none */
    if (cxs_ld64(st) != ds->meta.num_frames || cxs_ld64(st + 8) != minlen ||
        cxs_ld64(st + 16) != maxlen) {
        rc = cxs_diagf(d, CXS_E_CORRUPT,
                       "%s: STATS: frame count or length range disagrees with the shards", mp);
        goto out;
    }
    /* Mean and variance as the writer forms them (spec 7.3), bit for bit:
     * forged statistics (checksums recomputed) would otherwise pass and
     * normalise every window with them. */
    for (uint32_t k = 0; k < D && ds->meta.num_frames; k++) {
        const double F = (double)ds->meta.num_frames;
        const double mean = cxs_xsum_value(&v.x1[k]) / F;
        double var = cxs_xsum_value(&v.x2[k]) / F - mean * mean;
        var = var > 0 ? var : 0.0;
        const double sm = cxs_ldf64(st + CXS_STATS_HEAD + 8ull * k);
        const double sv = cxs_ldf64(st + CXS_STATS_HEAD + 8ull * (D + k));
        if (memcmp(&sm, &mean, sizeof mean) || memcmp(&sv, &var, sizeof var)) {
            rc = cxs_diagf(d, CXS_E_CORRUPT,
                           "%s: STATS: dimension %u has mean %.17g and variance %.17g; the "
                           "features give %.17g and %.17g",
                           mp, k, sm, sv, mean, var);
            goto out;
        }
    }
    const uint8_t *lc = st + CXS_STATS_HEAD + 16ull * ds->meta.dim;
    for (uint32_t l = 0; l < ds->meta.vocab_size; l++)
        if (cxs_ld64(lc + 8ull * l) != hist[l]) {
            rc = cxs_diagf(d, CXS_E_CORRUPT,
                           "%s: STATS: label %u counted %llu times, the labels hold %llu", mp, l,
                           (unsigned long long)cxs_ld64(lc + 8ull * l),
                           (unsigned long long)hist[l]);
            goto out;
        }
out:
    free(hist);
    free(v.u1);
    free(v.x1);
    free(v.qrow);
    free(v.buf);
    cxs_zreader_free(&v.zr);
    if (v.st) XXH3_freeState(v.st);
    return rc;
}
