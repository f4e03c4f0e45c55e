/* verify.c - cxs_dataset_verify(): one streaming pass over every byte. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "ctxshard.h"
#include "cxs_format.h"
#include "cxs_le.h"

/* Shared with dataset.c through this small internal view. */
#include "dataset_internal.h"

typedef struct vctx {
    const cxs_dataset *ds;
    cxs_progress_fn progress;
    void *user;
    uint64_t done, total;
    XXH3_state_t *st;
} vctx;

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
        return cxs_diagf(d, CXS_E_CHECKSUM,
                         "%s: section %s (bytes %llu..%llu): checksum mismatch", path,
                         cxs_section_name(s->type), (unsigned long long)s->offset,
                         (unsigned long long)(s->offset + s->length));
    return 0;
}

static int finite_rows(const uint8_t *p, uint64_t n, uint32_t dtype, uint64_t *bad) {
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
    uint64_t pos = 0, bad;
    XXH3_64bits_reset(v->st);
    for (uint64_t u = 0; u <= sh->meta.num_utterances; u++) {
        if (!zero_range(f, pos, pos + gbytes, &bad))
            return cxs_diagf(d, CXS_E_CORRUPT,
                             "%s: FEATURES: guard row byte at offset %llu is not zero", sh->path,
                             (unsigned long long)(s->offset + bad));
        XXH3_64bits_update(v->st, f + pos, (size_t)gbytes);
        pos += gbytes;
        if (u == sh->meta.num_utterances) break;
        uint64_t T = cxs_ld64(sh->index + 8 * (u + 1)) - cxs_ld64(sh->index + 8 * u);
        uint64_t n = T * rowb;
        if (!finite_rows(f + pos, T * ds->meta.dim, ds->meta.dtype, &bad))
            return cxs_diagf(d, CXS_E_CORRUPT,
                             "%s: FEATURES: utterance %llu holds a NaN or infinity at offset %llu",
                             sh->path, (unsigned long long)(sh->meta.first_utterance + u),
                             (unsigned long long)(s->offset + pos + bad * ds->esize));
        XXH3_64bits_update(v->st, f + pos, (size_t)n);
        pos += n;
        int rc = tick(v, gbytes + n);
        if (rc) return rc;
    }
    if (cxs_checksum_differs(XXH3_64bits_digest(v->st), s->checksum))
        return cxs_diagf(d, CXS_E_CHECKSUM,
                         "%s: section FEATURES (bytes %llu..%llu): checksum mismatch", sh->path,
                         (unsigned long long)s->offset,
                         (unsigned long long)(s->offset + s->length));
    return 0;
}

/* ZFEATURES (compressed): the section hash, then every chunk decoded
 * (its own checksum and exact size), checking guard rows and values on the
 * decoded rows as verify_features does. */
static int verify_zfeatures(vctx *v, uint32_t si, const cxs_section *s, cxs_diag *d) {
    const cxs_dataset *ds = v->ds;
    const struct shard *sh = &ds->shards[si];
    int rc = hash_plain(v, sh->map, s, sh->path, d);
    if (rc) return rc;
    const uint64_t rowb = ds->row_bytes, G = ds->meta.guard, U = sh->meta.num_utterances;
    uint8_t *buf = malloc(ds->max_chunk_bytes);
    zreader zr = {0};
    if (!buf) return -ENOMEM;
    /* Segments of the row stream: guard 0, utterance 0, guard 1, ... */
    uint64_t seg = 0, seg_end = G, row = 0, bad;
    for (uint64_t c = 0; c < sh->ch.num_chunks && !rc; c++) {
        size_t n;
        rc = cxs_decode_chunk(ds, &zr, si, c, buf, &n);
        if (rc) {
            const uint8_t *e = sh->chunk_table + CXS_CHUNK_ENTRY * c;
            uint64_t a = c ? cxs_ld64(e - CXS_CHUNK_ENTRY) : 0, b = cxs_ld64(e);
            rc = cxs_diagf(d, rc,
                           "%s: ZFEATURES: chunk %llu (bytes %llu..%llu) %s", sh->path,
                           (unsigned long long)c, (unsigned long long)(s->offset + a),
                           (unsigned long long)(s->offset + b),
                           rc == CXS_E_CHECKSUM ? "fails its checksum"
                                                : "does not decode to its rows");
            break;
        }
        for (uint64_t r = 0; r < n / rowb; r++, row++) {
            while (row >= seg_end && seg < 2 * U) {
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
        }
    }
    free(buf);
    cxs_zreader_free(&zr);
    return rc;
}

static int verify_labels(vctx *v, const struct shard *sh, const cxs_section *s, uint64_t *hist,
                         cxs_diag *d) {
    int rc = hash_plain(v, sh->map, s, sh->path, d);
    if (rc) return rc;
    const uint32_t w = sh->meta.label_width;
    /* A shard alone has no vocabulary: any value of the width is valid. */
    const uint32_t V = v->ds->meta.vocab_size ? v->ds->meta.vocab_size : (w == 1 ? 256u : 65536u);
    for (uint64_t i = 0; i < sh->meta.num_frames; i++) {
        uint32_t l = cxs_shard_label(sh, i);
        if (l >= V)
            return cxs_diagf(d, CXS_E_CORRUPT,
                             "%s: LABELS: frame %llu has label %u, the vocabulary has %u symbols",
                             sh->path, (unsigned long long)(sh->f_start + i), l, V);
        hist[l]++;
    }
    return 0;
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

int cxs_dataset_verify(const cxs_dataset *ds, cxs_progress_fn progress, void *user, cxs_diag *d) {
    vctx v = {ds, progress, user, 0, ds->total_bytes, XXH3_createState()};
    uint64_t *hist = calloc(65537, sizeof *hist);
    int rc = 0;
    if (!v.st || !hist) {
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
    uint64_t minlen = UINT64_MAX, maxlen = 0;
    for (uint32_t i = 0; i < ds->meta.num_shards; i++) {
        const struct shard *sh = &ds->shards[i];
        if ((rc = check_padding(sh->map, sh->size, &sh->c, sh->path, d))) goto out;
        for (uint32_t j = 0; j < sh->c.nsections; j++) {
            const cxs_section *s = &sh->c.sections[j];
            if (s->type == CXS_SEC_FEATURES) rc = verify_features(&v, sh, s, d);
            else if (s->type == CXS_SEC_ZFEATURES && cxs_compressed(ds))
                rc = verify_zfeatures(&v, i, s, d);
            else if (s->type == CXS_SEC_LABELS) rc = verify_labels(&v, sh, s, hist, d);
            else if (s->type == CXS_SEC_SEQUENCES && ds->has_seqs)
                rc = verify_sequences(&v, sh, s, d);
            else rc = hash_plain(&v, sh->map, s, sh->path, d);
            if (rc) goto out;
        }
        for (uint64_t u = 0; u < sh->meta.num_utterances; u++) {
            uint64_t T = cxs_ld64(sh->index + 8 * (u + 1)) - cxs_ld64(sh->index + 8 * u);
            if (T < minlen) minlen = T;
            if (T > maxlen) maxlen = T;
        }
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
    if (v.st) XXH3_freeState(v.st);
    return rc;
}
