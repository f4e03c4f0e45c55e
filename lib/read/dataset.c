/* dataset.c - open, describe, verify and read a packed dataset. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "ctxshard.h"
#include "abi.h"
#include "cxs_convert.h"
#include "cxs_format.h"
#include "cxs_le.h"
#include "cxs_qcodec.h"

#include "cxs_qcodec.h"
#include "dataset_internal.h"
#include "remote.h"
#include "fault.h"

static int map_file(const char *path, const uint8_t **map, uint64_t *size, cxs_diag *d) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return cxs_diag_at(d, -e, path, CXS_NO_OFFSET, "%s: %s", path, strerror(e));
    }
    struct stat st;
    int stat_failed = fstat(fd, &st) != 0;
    if (stat_failed || !S_ISREG(st.st_mode)) {
        int e = stat_failed ? errno : EINVAL; /* st is unset when fstat failed */
        close(fd);
        return cxs_diag_at(d, -e, path, CXS_NO_OFFSET, "%s: %s", path,
                           e == EINVAL ? "not a regular file" : strerror(e));
    }
    if (st.st_size == 0) {
        close(fd);
        return cxs_diag_at(d, CXS_E_TRUNCATED, path, CXS_NO_OFFSET, "%s: empty file", path);
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    int e = errno;
    close(fd);
    if (p == MAP_FAILED)
        return cxs_diag_at(d, -e, path, CXS_NO_OFFSET, "%s: cannot map: %s", path, strerror(e));
    *map = p;
    *size = (uint64_t)st.st_size;
    return 0;
}

void cxs_dataset_close(cxs_dataset *ds) {
    if (!ds) return;
    cxs_stream_free(ds->stream);
    if (ds->shards) {
        /* A lone shard may fail before its metadata set num_shards. */
        uint32_t n = ds->single_shard ? 1 : ds->meta.num_shards;
        for (uint32_t i = 0; i < n; i++) {
            shard *sh = &ds->shards[i];
            if (sh->map) munmap((void *)sh->map, sh->size);
            free(sh->path);
            free(sh->bucket);
            lazy_table *t[3] = {&sh->t_index, &sh->t_ids, &sh->t_seqs};
            for (int k = 0; k < 3; k++) free(t[k]->done);
            cxs_bsrc_free(sh);
            free(sh->qh_checked);
        }
    }
    if (ds->map) munmap((void *)ds->map, ds->size);
    if (ds->hp_map) munmap(ds->hp_map, (size_t)ds->hp_len);
    free(ds->shards);
    free(ds->shard_u0);
    free(ds->shard_f0);
    free(ds->norm_mean);
    free(ds->norm_scale);
    cxs_zcache_free(ds->zc);
    free(ds->manifest_path);
    free(ds->url);
    if (ds->cache_lock) close(ds->cache_lock - 1); /* the cache may evict it now */
    free(ds);
}

/* Hash one section and compare with its table entry. */
static int check_section_hash(const uint8_t *map, const cxs_section *s, const char *path,
                              cxs_diag *d) {
    if (cxs_checksum_differs(cxs_hash(map + s->offset, s->length), s->checksum))
        return cxs_diag_at(d, CXS_E_CHECKSUM, path, s->offset,
                         "%s: section %s (bytes %llu..%llu): checksum mismatch", path,
                         cxs_section_name(s->type), (unsigned long long)s->offset,
                         (unsigned long long)(s->offset + s->length));
    return 0;
}

static const cxs_section *need(const cxs_container *c, uint32_t type, const char *path, int *rc,
                               cxs_diag *d) {
    const cxs_section *s = cxs_container_find(c, type);
    if (!s)
        *rc = cxs_diag_at(d, CXS_E_CORRUPT, path, CXS_NO_OFFSET,
                          "%s: required section %s is missing", path, cxs_section_name(type));
    return s;
}

static int id_cmp(const uint8_t *a, uint64_t al, const uint8_t *b, uint64_t bl) {
    int r = memcmp(a, b, al < bl ? al : bl);
    if (r) return r;
    return al < bl ? -1 : al > bl;
}

/* A coded dtype (format 1.4): no guard rows; ds->qh its headers' size.
 * The files' minor version is not looked at, as for the features of 1.1 to
 * 1.3 (spec 3.1: any minor is accepted): the dtype alone says the features
 * are coded, and a reader of 1.3 refuses dtype 4 and 5 whatever the minor.
 * what: "DATASET_META" or "SHARD_META". */
static int coded_meta(cxs_dataset *ds, const char *path, const char *what, cxs_diag *d) {
    const cxs_dataset_meta *m = &ds->meta;
    ds->qh = cxs_q_header_size(m->dtype, m->dim);
    if (!ds->qh) return 0;
    if (m->guard)
        return cxs_diag_at(d, CXS_E_CORRUPT, path, CXS_NO_OFFSET,
                           "%s: %s: guard %u with dtype %s (a coded dtype stores no guard rows: "
                           "0)", path, what, m->guard, cxs_dtype_name(m->dtype));
    return 0;
}

static int open_manifest(cxs_dataset *ds, cxs_diag *d) {
    const char *mp = ds->manifest_path;
    int rc = map_file(mp, &ds->map, &ds->size, d);
    if (rc) return rc;
    rc = cxs_container_parse(ds->map, ds->size, CXS_KIND_MANIFEST, &ds->mc, mp, d);
    if (rc) return rc;
    /* The manifest is small: hash all of it at open. */
    for (uint32_t i = 0; i < ds->mc.nsections; i++)
        if ((rc = check_section_hash(ds->map, &ds->mc.sections[i], mp, d))) return rc;
    const cxs_section *sm = need(&ds->mc, CXS_SEC_DATASET_META, mp, &rc, d);
    const cxs_section *st = need(&ds->mc, CXS_SEC_SHARD_TABLE, mp, &rc, d);
    const cxs_section *ss = need(&ds->mc, CXS_SEC_STATS, mp, &rc, d);
    if (rc) return rc;
    cxs_dataset_meta *m = &ds->meta;
    if ((rc = cxs_dataset_meta_load(ds->map + sm->offset, sm->length, m, mp, d))) return rc;
    ds->esize = cxs_dtype_size(m->dtype);
    if (!ds->esize)
        return cxs_diag_at(d, CXS_E_CORRUPT, mp, CXS_NO_OFFSET,
                           "%s: DATASET_META: unknown dtype %u", mp, m->dtype);
    ds->row_bytes = (uint64_t)m->dim * ds->esize;
    if (m->dim == 0 || m->dim > CXS_MAX_DIM || m->guard > CXS_MAX_GUARD)
        return cxs_diag_at(d, CXS_E_CORRUPT, mp, CXS_NO_OFFSET,
                           "%s: DATASET_META: dim %u / guard %u out of range", mp, m->dim,
                           m->guard);
    if ((rc = coded_meta(ds, mp, "DATASET_META", d))) return rc;
    uint32_t want_lw = cxs_label_width(m->vocab_size);
    if (m->vocab_size > CXS_MAX_VOCAB || m->label_width != want_lw)
        return cxs_diag_at(d, CXS_E_CORRUPT, mp, CXS_NO_OFFSET,
                           "%s: DATASET_META: vocabulary of %u symbols with label width %u", mp,
                           m->vocab_size, m->label_width);
    if (m->normalize > CXS_NORM_UTTERANCE || m->on_error > 1)
        return cxs_diag_at(d, CXS_E_CORRUPT, mp, CXS_NO_OFFSET,
                           "%s: DATASET_META: bad normalize/on_error code", mp);
    if (m->num_shards == 0 || m->num_utterances == 0 || m->num_frames < m->num_utterances ||
        m->num_shards > m->num_utterances)
        return cxs_diag_at(d, CXS_E_CORRUPT, mp, CXS_NO_OFFSET,
                           "%s: DATASET_META: %u shards, %llu utterances, %llu frames is not a "
                           "valid combination",
                           mp, m->num_shards, (unsigned long long)m->num_utterances,
                           (unsigned long long)m->num_frames);
    if (st->length != (uint64_t)m->num_shards * CXS_SHARD_ENTRY_SIZE)
        return cxs_diag_at(d, CXS_E_CORRUPT, mp, CXS_NO_OFFSET,
                           "%s: SHARD_TABLE is %llu bytes, expected %u entries", mp,
                           (unsigned long long)st->length, m->num_shards);
    if (ss->length != CXS_STATS_HEAD + 16ull * m->dim + 8ull * m->vocab_size)
        return cxs_diag_at(
            d, CXS_E_CORRUPT, mp, CXS_NO_OFFSET, "%s: STATS is %llu bytes, expected %llu", mp,
            (unsigned long long)ss->length,
            (unsigned long long)(CXS_STATS_HEAD + 16ull * m->dim + 8ull * m->vocab_size));
    ds->stats = ds->map + ss->offset;
    ds->min_len = cxs_ld64(ds->stats + 8);
    ds->max_len = cxs_ld64(ds->stats + 16);
    if (ds->min_len == 0 || ds->min_len > ds->max_len || ds->max_len > m->num_frames)
        return cxs_diag_at(d, CXS_E_CORRUPT, mp, CXS_NO_OFFSET,
                           "%s: STATS: utterance lengths %llu to %llu in a dataset of %llu frames",
                           mp, (unsigned long long)ds->min_len, (unsigned long long)ds->max_len,
                           (unsigned long long)m->num_frames);
    if (cxs_ld64(ds->stats + 24) != 0)
        return cxs_diag_at(d, CXS_E_CORRUPT, mp, CXS_NO_OFFSET,
                           "%s: STATS: reserved bytes 24..31 not zero", mp);
    for (uint32_t j = 0; j < m->dim; j++) {
        double mean = cxs_ldf64(ds->stats + CXS_STATS_HEAD + 8 * j);
        double var = cxs_ldf64(ds->stats + CXS_STATS_HEAD + 8 * ((uint64_t)m->dim + j));
        if (!isfinite(mean) || !isfinite(var) || var < 0)
            return cxs_diag_at(d, CXS_E_CORRUPT, mp, CXS_NO_OFFSET,
                               "%s: STATS: dimension %u has mean %g and variance %g (must be "
                               "finite, the variance >= 0)",
                               mp, j, mean, var);
    }
    if (m->vocab_size) {
        const cxs_section *sv = need(&ds->mc, CXS_SEC_VOCAB, mp, &rc, d);
        if (rc) return rc;
        if ((rc = cxs_strtab_check(ds->map + sv->offset, sv->length, m->vocab_size,
                                   CXS_MAX_SYMBOL_LEN, "VOCAB", mp, d)) ||
            (rc = cxs_strtab_distinct(ds->map + sv->offset, m->vocab_size, "VOCAB", mp, d)))
            return rc;
        ds->vocab = ds->map + sv->offset;
    }
    /* Label sequences (format 1.2): need a vocabulary to index. */
    const cxs_section *sq = cxs_container_find(&ds->mc, CXS_SEC_SEQ_META);
    if (sq) {
        if ((rc = cxs_seq_meta_load(ds->map + sq->offset, sq->length, &ds->seqm, mp, d)))
            return rc;
        if (!m->vocab_size)
            return cxs_diag_at(d, CXS_E_CORRUPT, mp, CXS_NO_OFFSET,
                               "%s: SEQ_META in a dataset without a vocabulary", mp);
        ds->has_seqs = 1;
        ds->seq_width = m->label_width;
    }
    const cxs_section *sk = cxs_container_find(&ds->mc, CXS_SEC_SKIPPED);
    if (sk) {
        ds->skipped = (const char *)ds->map + sk->offset;
        ds->skipped_len = sk->length;
    }
    ds->total_bytes = ds->size;
    return 0;
}

/* The per-shard arrays; needs meta's counts and ds->row_bytes.  `bytes` is
 * the size of the files that must hold the dataset: counts they cannot hold
 * are refused (every utterance takes 8 INDEX bytes, every frame a row of
 * D*E FEATURES bytes: one byte for q8 with D = 1, so no smaller bound
 * holds), before the lookup's buckets are sized by them. */
static int alloc_arrays(cxs_dataset *ds, uint64_t bytes, int compressed, const char *path,
                        cxs_diag *d) {
    uint64_t U = ds->meta.num_utterances;
    /* Compressed features may shrink a lot (all-zero chunks compress
     * ~10^4-fold); the frame bound is then generous, and the per-frame
     * array it protects (4 bytes per 4096 frames) stays small. */
    uint64_t max_frames = compressed ? (bytes > UINT64_MAX / 65536 ? UINT64_MAX : bytes * 65536)
                                     : bytes / ds->row_bytes;
    if (U >= bytes / 8 || ds->meta.num_frames > max_frames)
        return cxs_diag_at(d, CXS_E_CORRUPT, path, CXS_NO_OFFSET,
                           "%s: %llu utterances and %llu frames cannot fit in %llu bytes of shards",
                           path, (unsigned long long)U, (unsigned long long)ds->meta.num_frames,
                           (unsigned long long)bytes);
    uint32_t S = ds->meta.num_shards;
    ds->shard_u0 = calloc((size_t)S + 1, sizeof *ds->shard_u0);
    ds->shard_f0 = calloc((size_t)S + 1, sizeof *ds->shard_f0);
    ds->scan_min = ds->seq_scan_min = UINT64_MAX;
    ds->scan_max = ds->seq_scan_max = 0;
    return ds->shard_u0 && ds->shard_f0 ? 0 : -ENOMEM;
}

/* A shard opened alone describes the dataset itself. */
static int single_shard_meta(cxs_dataset *ds, const cxs_shard_meta *sm, uint64_t size,
                             const char *path, cxs_diag *d) {
    cxs_dataset_meta *m = &ds->meta;
    m->num_utterances = sm->num_utterances;
    m->num_frames = sm->num_frames;
    m->num_shards = 1;
    m->dim = sm->dim;
    m->guard = sm->guard;
    m->dtype = sm->dtype;
    m->label_width = sm->label_width;
    ds->esize = cxs_dtype_size(m->dtype);
    ds->row_bytes = (uint64_t)m->dim * ds->esize;
    if (!ds->esize || m->dim == 0 || m->dim > CXS_MAX_DIM || m->guard > CXS_MAX_GUARD ||
        m->label_width > 2 || m->num_utterances == 0 || m->num_frames < m->num_utterances ||
        m->num_utterances > UINT32_MAX * 64ull)
        return cxs_diag_at(d, CXS_E_CORRUPT, path, CXS_NO_OFFSET,
                           "%s: SHARD_META: dtype %u, dim %u, guard %u, label width %u, %llu "
                           "utterances, %llu frames is not valid",
                           path, m->dtype, m->dim, m->guard, m->label_width,
                           (unsigned long long)m->num_utterances,
                           (unsigned long long)m->num_frames);
    return alloc_arrays(ds, size, cxs_compressed(ds), path, d);
}

/* Check shard i against its manifest entry (or, for a shard opened alone,
 * against nothing) and fill the dataset's per-utterance arrays. */
/* The sections of one shard that open looks at (NULL when absent). */
typedef struct shard_sections {
    const cxs_section *meta, *index, *ids, *features, *zfeatures, *chunks, *labels, *seqs;
    int compressed;
} shard_sections;

/* Table t of a shard over section sec: checked at first use when BLOCKSUMS
 * covers it and the shard is a manifest's (may_defer), else whole at open. */
static int lazy_setup(shard *sh, lazy_table *t, const cxs_section *sec, int may_defer,
                      cxs_diag *d) {
    t->p = sh->map + sec->offset;
    t->len = sec->length;
    t->type = sec->type;
    t->bs = may_defer ? cxs_blocksums_find(&sh->bs, sec->type) : NULL;
    t->all_done = t->bs == NULL;
    if (t->all_done) return 0;
    size_t words = (size_t)((t->bs->num_blocks + 63) / 64);
    t->done = calloc(words ? words : 1, sizeof *t->done);
    /* its blocks' sums: the block source's bitmap, which every other
     * checker of a block of this section feeds too */
    t->hashed = sh->bc + (t->bs - sh->bs.e);
    if (!t->done)
        return cxs_diag_at(d, -ENOMEM, sh->path, CXS_NO_OFFSET, "%s: out of memory", sh->path);
    t->per_block = (1ull << t->bs->shift) / 8;
    return 0;
}

/* Map shard i, parse its container, match it to its manifest entry e (NULL
 * for a shard opened alone) and find its sections: the required ones, the
 * features in the form the dataset says, SEQUENCES exactly when the
 * dataset has label sequences; then hash the small sections (FEATURES and
 * LABELS are hashed by verify). */
static int shard_container(cxs_dataset *ds, uint32_t i, const cxs_shard_entry *e,
                           shard_sections *x, cxs_diag *d) {
    shard *sh = &ds->shards[i];
    const char *path = sh->path;
    int rc = map_file(path, &sh->map, &sh->size, d);
    if (rc) return rc;
    ds->total_bytes += sh->size;
    if (e && sh->size != e->file_size) {
        /* Parse first so a damaged header is reported as such. */
        cxs_container tmp;
        rc = cxs_container_parse(sh->map, sh->size, CXS_KIND_SHARD, &tmp, path, d);
        if (rc) return rc;
        return cxs_diag_at(d, CXS_E_CORRUPT, path, CXS_NO_OFFSET,
                           "%s: %llu bytes, the manifest says %llu", path,
                           (unsigned long long)sh->size, (unsigned long long)e->file_size);
    }
    if ((rc = cxs_container_parse(sh->map, sh->size, CXS_KIND_SHARD, &sh->c, path, d))) return rc;
    if (e && cxs_checksum_differs(sh->c.header_checksum, e->header_checksum))
        return cxs_diag_at(d, CXS_E_CHECKSUM, path, 0,
                           "%s: header checksum differs from the manifest's (shard replaced or "
                           "damaged)",
                           path);
    x->meta = need(&sh->c, CXS_SEC_SHARD_META, path, &rc, d);
    x->index = need(&sh->c, CXS_SEC_INDEX, path, &rc, d);
    x->ids = need(&sh->c, CXS_SEC_IDS, path, &rc, d);
    /* Compressed (format 1.1): ZFEATURES and CHUNKS instead of FEATURES. */
    x->zfeatures = cxs_container_find(&sh->c, CXS_SEC_ZFEATURES);
    x->chunks = cxs_container_find(&sh->c, CXS_SEC_CHUNKS);
    x->compressed = e ? ds->meta.compression == CXS_COMPRESSION_ZSTD : x->zfeatures != NULL;
    if (!e && i == 0) {
        ds->meta.compression = x->compressed ? CXS_COMPRESSION_ZSTD : CXS_COMPRESSION_NONE;
    }
    x->features = NULL;
    if (x->compressed) {
        x->zfeatures = need(&sh->c, CXS_SEC_ZFEATURES, path, &rc, d);
        x->chunks = need(&sh->c, CXS_SEC_CHUNKS, path, &rc, d);
        if (!rc && cxs_container_find(&sh->c, CXS_SEC_FEATURES))
            rc = cxs_diag_at(d, CXS_E_CORRUPT, path, CXS_NO_OFFSET,
                             "%s: both FEATURES and ZFEATURES are present", path);
    } else {
        x->features = need(&sh->c, CXS_SEC_FEATURES, path, &rc, d);
        if (!rc && (x->zfeatures || x->chunks))
            rc = cxs_diag_at(d, CXS_E_CORRUPT, path, CXS_NO_OFFSET,
                             "%s: a compressed shard in a dataset whose manifest says uncompressed",
                             path);
    }
    if (rc) return rc;
    /* Label sequences (format 1.2): in every shard of a dataset whose
     * manifest has SEQ_META, in none of another; a shard alone has them
     * exactly when it holds the section. */
    x->seqs = cxs_container_find(&sh->c, CXS_SEC_SEQUENCES);
    if (!e && i == 0) ds->has_seqs = x->seqs != NULL;
    if (e && ds->has_seqs && !x->seqs)
        return cxs_diag_at(d, CXS_E_CORRUPT, path, CXS_NO_OFFSET,
                           "%s: required section SEQUENCES is missing", path);
    if (e && !ds->has_seqs && x->seqs)
        return cxs_diag_at(d, CXS_E_CORRUPT, path, CXS_NO_OFFSET,
                           "%s: SEQUENCES present, but the manifest has no SEQ_META", path);
    x->labels = cxs_container_find(&sh->c, CXS_SEC_LABELS);
    /* BLOCKSUMS (format 1.3): its own sum and structure at open; the
     * per-utterance tables it covers are then checked a block at a time at
     * first use (utt_index.c) instead of whole here -- only for a shard of
     * a manifest, whose STATS and SEQ_META bound the lengths. */
    if ((rc = cxs_shard_blocksums(ds, i, d)) || (rc = cxs_bsrc_setup(ds, i, d))) return rc;
    if ((rc = lazy_setup(sh, &sh->t_index, x->index, e != NULL, d)) ||
        (rc = lazy_setup(sh, &sh->t_ids, x->ids, e != NULL, d)) ||
        (x->seqs && (rc = lazy_setup(sh, &sh->t_seqs, x->seqs, e != NULL, d))))
        return rc;
    if ((rc = check_section_hash(sh->map, x->meta, path, d)) ||
        (sh->t_index.all_done && (rc = check_section_hash(sh->map, x->index, path, d))) ||
        (sh->t_ids.all_done && (rc = check_section_hash(sh->map, x->ids, path, d))) ||
        (x->chunks && x->compressed && (rc = check_section_hash(sh->map, x->chunks, path, d))) ||
        (x->seqs && sh->t_seqs.all_done && (rc = check_section_hash(sh->map, x->seqs, path, d))))
        return rc;
    if (!sh->t_index.all_done) ds->lazy = ds->lazy_index = 1;
    if (!sh->t_ids.all_done) ds->lazy = 1;
    if (x->seqs && !sh->t_seqs.all_done) ds->lazy = ds->lazy_seqs = 1;
    return 0;
}

/* SHARD_META, and its agreement with the manifest's entry. */
static int shard_meta(cxs_dataset *ds, uint32_t i, const cxs_shard_entry *e,
                      const shard_sections *x, cxs_diag *d) {
    shard *sh = &ds->shards[i];
    const cxs_dataset_meta *m = &ds->meta;
    cxs_shard_meta *sm = &sh->meta;
    int rc = cxs_shard_meta_load(sh->map + x->meta->offset, x->meta->length, sm, sh->path, d);
    if (rc) return rc;
    if (!e) {
        if ((rc = single_shard_meta(ds, sm, sh->size, sh->path, d)) ||
            (rc = coded_meta(ds, sh->path, "SHARD_META", d)))
            return rc;
        sh->u_start = sh->f_start = 0;
        return 0;
    }
    if (sm->index != i || sm->dim != m->dim || sm->guard != m->guard || sm->dtype != m->dtype ||
        sm->label_width != m->label_width || sm->num_utterances != e->num_utterances ||
        sm->num_frames != e->num_frames || sm->first_utterance != e->first_utterance ||
        sm->first_frame != e->first_frame)
        return cxs_diag_at(d, CXS_E_CORRUPT, sh->path, CXS_NO_OFFSET,
                           "%s: SHARD_META disagrees with the manifest (index, dims, dtype, "
                           "guard or counts)",
                           sh->path);
    sh->u_start = sm->first_utterance;
    sh->f_start = sm->first_frame;
    ds->shard_u0[i] = sh->u_start;
    ds->shard_f0[i] = sh->f_start;
    return 0;
}

/* INDEX: U+1 increasing frame offsets from 0 to F.  Read whole when the
 * shard has no BLOCKSUMS for it (its lengths' range kept for STATS' check),
 * else only its ends: its blocks are checked at first use (utt_index.c). */
static int shard_index(cxs_dataset *ds, uint32_t i, const shard_sections *x, cxs_diag *d) {
    shard *sh = &ds->shards[i];
    const char *path = sh->path;
    const uint64_t U = sh->meta.num_utterances, F = sh->meta.num_frames;
    if (x->index->length != 8 * (U + 1))
        return cxs_diag_at(d, CXS_E_CORRUPT, path, CXS_NO_OFFSET,
                           "%s: INDEX is %llu bytes, expected %llu", path,
                           (unsigned long long)x->index->length, (unsigned long long)(8 * (U + 1)));
    sh->index = sh->map + x->index->offset;
    uint64_t prev = cxs_ld64(sh->index);
    if (prev != 0)
        return cxs_diag_at(d, CXS_E_CORRUPT, path, CXS_NO_OFFSET, "%s: INDEX entry 0 is not 0",
                           path);
    if (!sh->t_index.all_done) {
        prev = cxs_ld64(sh->index + 8 * U);
    } else {
        for (uint64_t u = 0; u < U; u++) {
            uint64_t nx = cxs_ld64(sh->index + 8 * (u + 1));
            if (nx <= prev || nx > F)
                return cxs_diag_at(
                    d, CXS_E_CORRUPT, path, CXS_NO_OFFSET,
                    "%s: INDEX entry %llu: %llu after %llu (must increase, up to %llu)", path,
                    (unsigned long long)(u + 1), (unsigned long long)nx, (unsigned long long)prev,
                    (unsigned long long)F);
            if (nx - prev < ds->scan_min) ds->scan_min = nx - prev;
            if (nx - prev > ds->scan_max) ds->scan_max = nx - prev;
            prev = nx;
        }
    }
    if (prev != F)
        return cxs_diag_at(d, CXS_E_CORRUPT, path, CXS_NO_OFFSET,
                           "%s: INDEX ends at %llu, the shard has %llu frames", path,
                           (unsigned long long)prev, (unsigned long long)F);
    return 0;
}

/* Id u of a shard whose IDS open has checked. */
static const uint8_t *shard_id(const shard *sh, uint64_t u, uint64_t *len) {
    const uint64_t U = sh->meta.num_utterances;
    uint64_t a = cxs_ld64(sh->ids + 8 * u), b = cxs_ld64(sh->ids + 8 * (u + 1));
    *len = b - a;
    return sh->ids + 8 * (U + 1) + a;
}

/* IDS: a string table of U ids, in strictly increasing byte order, across
 * shards too (the previous shard's last id, from its own IDS). */
static int shard_ids(cxs_dataset *ds, uint32_t i, const shard_sections *x, cxs_diag *d) {
    shard *sh = &ds->shards[i];
    const uint64_t U = sh->meta.num_utterances;
    const uint8_t *p = sh->map + x->ids->offset;
    const uint64_t len = x->ids->length;
    sh->ids = p;
    if (!sh->t_ids.all_done) {
        /* the string table's frame now, every id at its block's first use */
        if (U >= UINT64_MAX / 8 - 1 || len < 8 * (U + 1))
            return cxs_diag_at(d, CXS_E_CORRUPT, sh->path, CXS_NO_OFFSET,
                               "%s: IDS: %llu bytes cannot hold %llu offsets", sh->path,
                               (unsigned long long)len, (unsigned long long)U + 1);
        if (cxs_ld64(p) != 0)
            return cxs_diag_at(d, CXS_E_CORRUPT, sh->path, CXS_NO_OFFSET,
                               "%s: IDS: first offset is not 0", sh->path);
        if (cxs_ld64(p + 8 * U) != len - 8 * (U + 1))
            return cxs_diag_at(d, CXS_E_CORRUPT, sh->path, CXS_NO_OFFSET,
                               "%s: IDS: last offset %llu, expected the string bytes' length %llu",
                               sh->path, (unsigned long long)cxs_ld64(p + 8 * U),
                               (unsigned long long)(len - 8 * (U + 1)));
        return 0;
    }
    int rc = cxs_strtab_check(p, len, U, CXS_MAX_ID_LEN, "IDS", sh->path, d);
    if (rc) return rc;
    uint64_t pl = 0;
    const uint8_t *pb = NULL;
    if (i > 0) {
        /* the previous shard's last id, checked (its block, if lazy) */
        cxs_diag pd;
        const shard *ps = &ds->shards[i - 1];
        if (!ps->t_ids.all_done) {
            if ((rc = cxs_id_get_in(ds, i - 1, ps->meta.num_utterances - 1, &pb, &pl, &pd)))
                return cxs_diag_copy(d, rc, &pd);
        } else {
            pb = shard_id(ps, ps->meta.num_utterances - 1, &pl);
        }
    }
    for (uint64_t u = 0; u < U; u++) {
        uint64_t l;
        const uint8_t *id = shard_id(sh, u, &l);
        if (pb && id_cmp(pb, pl, id, l) >= 0)
            return cxs_diag_at(d, CXS_E_CORRUPT, sh->path, CXS_NO_OFFSET,
                               "%s: IDS: utterance %llu's id is not after the previous one",
                               sh->path, (unsigned long long)(sh->meta.first_utterance + u));
        pb = id, pl = l;
    }
    return 0;
}

/* FEATURES (or ZFEATURES and CHUNKS): (F + (U+1) guard rows) rows. */
static int shard_features(cxs_dataset *ds, uint32_t i, const shard_sections *x, cxs_diag *d) {
    shard *sh = &ds->shards[i];
    const cxs_dataset_meta *m = &ds->meta;
    const uint64_t U = sh->meta.num_utterances, F = sh->meta.num_frames;
    uint64_t rows = F + (U + 1) * (uint64_t)m->guard;
    const uint64_t row_bytes = ds->row_bytes;
    uint64_t flen = x->compressed ? (rows <= UINT64_MAX / row_bytes ? rows * row_bytes : 0)
                                  : x->features->length;
    if (rows > UINT64_MAX / row_bytes || flen != rows * row_bytes)
        return cxs_diag_at(d, CXS_E_CORRUPT, sh->path, CXS_NO_OFFSET,
                           "%s: FEATURES is %llu bytes, expected (%llu frames + %llu guard rows) x "
                           "%llu bytes",
                           sh->path, (unsigned long long)flen, (unsigned long long)F,
                           (unsigned long long)((U + 1) * (uint64_t)m->guard),
                           (unsigned long long)row_bytes);
    ds->raw_feature_bytes += flen;
    if (!x->compressed) {
        sh->features = sh->serve_features = sh->map + x->features->offset;
        return 0;
    }
    int rc = cxs_chunks_load(sh->map + x->chunks->offset, x->chunks->length, flen, row_bytes,
                             x->zfeatures->length, &sh->ch, sh->path, d);
    if (rc) return rc;
    sh->chunk_table = sh->map + x->chunks->offset + CXS_CHUNKS_HEAD;
    sh->zdata = sh->map + x->zfeatures->offset;
    sh->chunk_base = ds->total_chunks;
    ds->total_chunks += sh->ch.num_chunks;
    ds->zbytes += x->zfeatures->length;
    size_t cb = (size_t)(sh->ch.chunk_rows * row_bytes);
    if (cb > ds->max_chunk_bytes) ds->max_chunk_bytes = cb;
    return 0;
}

/* LABELS, and SEQUENCES (format 1.2). */
static int shard_labels(cxs_dataset *ds, uint32_t i, const cxs_shard_entry *e,
                        const shard_sections *x, cxs_diag *d) {
    shard *sh = &ds->shards[i];
    const cxs_dataset_meta *m = &ds->meta;
    const char *path = sh->path;
    const uint64_t U = sh->meta.num_utterances, F = sh->meta.num_frames;
    const cxs_section *slab = x->labels;
    /* Frame labels: always with a vocabulary, unless the dataset holds
     * label sequences only (SEQ_META frame_labels 0); a shard alone with
     * SEQUENCES may hold LABELS or not. */
    const int want_labels = m->label_width && (!ds->has_seqs || (!e ? slab != NULL
                                                                    : ds->seqm.frame_labels));
    if (want_labels) {
        if (!slab)
            return cxs_diag_at(d, CXS_E_CORRUPT, path, CXS_NO_OFFSET,
                               "%s: required section LABELS is missing", path);
        if (slab->length != F * m->label_width)
            return cxs_diag_at(
                d, CXS_E_CORRUPT, path, CXS_NO_OFFSET, "%s: LABELS is %llu bytes, expected %llu",
                path, (unsigned long long)slab->length, (unsigned long long)(F * m->label_width));
        sh->labels = sh->serve_labels = sh->map + slab->offset;
    } else if (slab) {
        return cxs_diag_at(d, CXS_E_CORRUPT, path, CXS_NO_OFFSET,
                           "%s: LABELS present in a dataset %s", path,
                           m->label_width ? "of label sequences only" : "without a vocabulary");
    }
    if (!x->seqs) return 0;
    if (!m->label_width)
        return cxs_diag_at(d, CXS_E_CORRUPT, path, CXS_NO_OFFSET,
                           "%s: SEQUENCES in a shard of label width 0", path);
    /* A shard alone has no vocabulary: any value of the width. */
    uint32_t V = e ? m->vocab_size : m->label_width == 1 ? 256u : 65536u;
    uint64_t tot, lo, hi;
    const uint8_t *p = sh->map + x->seqs->offset;
    const uint64_t len = x->seqs->length, w = m->label_width;
    sh->seqs = p;
    ds->seq_width = m->label_width;
    if (!sh->t_seqs.all_done) {
        /* the offsets' ends now, every sequence at its block's first use */
        if (U >= UINT64_MAX / 8 - 1 || len < 8 * (U + 1) || cxs_ld64(p) != 0)
            return cxs_diag_at(d, CXS_E_CORRUPT, path, CXS_NO_OFFSET,
                               "%s: SEQUENCES: %llu bytes do not start with %llu offsets from 0",
                               path, (unsigned long long)len, (unsigned long long)U + 1);
        tot = cxs_ld64(p + 8 * U);
        if (tot > (len - 8 * (U + 1)) / w || 8 * (U + 1) + tot * w != len)
            return cxs_diag_at(d, CXS_E_CORRUPT, path, CXS_NO_OFFSET,
                               "%s: SEQUENCES is %llu bytes, its last offset counts %llu symbols",
                               path, (unsigned long long)len, (unsigned long long)tot);
        ds->seq_total += tot;
        return 0;
    }
    int rc = cxs_sequences_check(p, len, U, m->label_width, V, &tot, &lo, &hi, path, d);
    if (rc) return rc;
    ds->seq_total += tot;
    if (lo < ds->seq_scan_min) ds->seq_scan_min = lo;
    if (hi > ds->seq_scan_max) ds->seq_scan_max = hi;
    return 0;
}

/* Shard i (e: its manifest entry, NULL for a shard opened alone), its
 * checks in the spec's order (spec/format.md, section 8). */
/* QHEADERS (format 1.4): present exactly when the dtype is coded, U
 * entries of qh bytes, its checksum checked here (a few hundred bytes an
 * utterance).  The headers' values are verify's (spec §8). */
static int shard_qheaders(cxs_dataset *ds, uint32_t i, cxs_diag *d) {
    shard *sh = &ds->shards[i];
    const cxs_section *q = cxs_container_find(&sh->c, CXS_SEC_QHEADERS);
    sh->qheaders = NULL;
    if (!ds->qh && !q) return 0;
    if (!ds->qh)
        return cxs_diag_at(d, CXS_E_CORRUPT, sh->path, q->offset,
                           "%s: QHEADERS present, but the dtype is %s (not coded)", sh->path,
                           cxs_dtype_name(ds->meta.dtype));
    if (!q)
        return cxs_diag_at(d, CXS_E_CORRUPT, sh->path, CXS_NO_OFFSET,
                           "%s: required section QHEADERS is missing (dtype %s)", sh->path,
                           cxs_dtype_name(ds->meta.dtype));
    const uint64_t U = sh->meta.num_utterances;
    if (q->length / ds->qh != U || q->length % ds->qh)
        return cxs_diag_at(d, CXS_E_CORRUPT, sh->path, q->offset,
                           "%s: QHEADERS is %llu bytes, expected %llu utterances x %llu bytes",
                           sh->path, (unsigned long long)q->length, (unsigned long long)U,
                           (unsigned long long)ds->qh);
    int rc = check_section_hash(sh->map, q, sh->path, d);
    if (rc) return rc;
    if (!(sh->qh_checked = calloc((size_t)((U + 63) / 64) + 1, sizeof *sh->qh_checked)))
        return cxs_diag_at(d, -ENOMEM, sh->path, CXS_NO_OFFSET, "%s: out of memory", sh->path);
    sh->qheaders = sh->map + q->offset;
    return 0;
}

static int open_shard(cxs_dataset *ds, uint32_t i, const cxs_shard_entry *e, cxs_diag *d) {
    shard_sections x;
    int rc;
    if ((rc = shard_container(ds, i, e, &x, d)) || (rc = shard_meta(ds, i, e, &x, d)) ||
        (rc = shard_qheaders(ds, i, d)) ||
        (rc = shard_index(ds, i, &x, d)) || (rc = shard_ids(ds, i, &x, d)) ||
        (rc = shard_features(ds, i, &x, d)) || (rc = shard_labels(ds, i, e, &x, d)))
        return cxs_diag_name_file(d, rc, ds->shards[i].path);
    return 0;
}

/* The lookup's buckets (filled at first use), and the normalisation
 * constants. */
static int finish_open(cxs_dataset *ds, cxs_diag *d) {
    uint64_t U = ds->meta.num_utterances, F = ds->meta.num_frames;
    if (U > UINT32_MAX)
        return cxs_diag_at(d, CXS_E_UNSUPPORTED, ds->manifest_path, CXS_NO_OFFSET,
                           "%s: %llu utterances: this reader serves at most 4,294,967,295 (a limit "
                           "of this library, not of the format)",
                           ds->manifest_path, (unsigned long long)U);
    if (ds->single_shard) {
        /* a shard alone is read whole at open: its ranges are the scan's */
        ds->min_len = ds->scan_min;
        ds->max_len = ds->scan_max;
        ds->seq_min = ds->seq_scan_min;
        ds->seq_max = ds->seq_scan_max;
    }
    /* The API gives sequence lengths as u32 (a limit of this reader's,
     * reported after the format's checks, spec section 8). */
    if (ds->has_seqs && ds->seq_max > UINT32_MAX)
        return cxs_diag_at(d, CXS_E_UNSUPPORTED, ds->manifest_path, CXS_NO_OFFSET,
                           "%s: a label sequence of %llu symbols: this reader serves sequences of "
                           "at most 4,294,967,295 (a limit of this library, not of the format)",
                           ds->manifest_path, (unsigned long long)ds->seq_max);
    const uint32_t S = ds->meta.num_shards;
    ds->shard_u0[S] = U;
    ds->shard_f0[S] = F;
    for (uint32_t i = 0; i < S; i++) {
        shard *sh = &ds->shards[i];
        /* bucket b + 1 is read for every b: one more than the buckets */
        sh->nbuckets = (sh->meta.num_frames >> CXS_BUCKET_SHIFT) + 1;
        sh->bucket = calloc(sh->nbuckets + 1, sizeof *sh->bucket);
        if (!sh->bucket)
            return cxs_diag_at(d, -ENOMEM, sh->path, CXS_NO_OFFSET,
                               "%s: out of memory for the frame lookup of %llu frames", sh->path,
                               (unsigned long long)sh->meta.num_frames);
    }
    /* Label sequences without frame labels: every frame-label call then
     * answers CXS_E_NO_LABELS, as on a features-only dataset. */
    if (ds->has_seqs && !ds->shards[0].labels) ds->meta.label_width = 0;
    if (ds->stats && cxs_host_is_le()) {
        uint32_t D = ds->meta.dim;
        ds->norm_mean = malloc(D * sizeof *ds->norm_mean);
        ds->norm_scale = malloc(D * sizeof *ds->norm_scale);
        if (!ds->norm_mean || !ds->norm_scale)
            return cxs_diag_at(d, -ENOMEM, ds->manifest_path, CXS_NO_OFFSET,
                               "%s: out of memory for the normalisation constants",
                               ds->manifest_path);
        for (uint32_t dd = 0; dd < D; dd++) {
            double mean = cxs_ldf64(ds->stats + CXS_STATS_HEAD + 8 * dd);
            double var = cxs_ldf64(ds->stats + CXS_STATS_HEAD + 8 * (D + dd));
            /* Spec section 7.4; open has checked both finite, var >= 0. */
            ds->norm_mean[dd] = mean;
            ds->norm_scale[dd] = var > 0 ? 1.0 / sqrt(var) : 1.0;
        }
    }
    return 0;
}

/* Open's last check (spec section 8, step 8): every block of a section
 * that open checked whole against its section checksum (the tables it
 * does not defer, CHUNKS, QHEADERS) and that BLOCKSUMS covers, against its
 * block sum.  A faulty writer's shard can have a section checksum that
 * matches and a block sum that does not; the block sum wins, so that
 * nothing a block sum disagrees with is served (section 4.8).  They are
 * small sections, read whole already; the blocks are marked checked. */
static int whole_sections_blocks(const cxs_dataset *ds, cxs_diag *d) {
    const uint32_t S = ds->single_shard ? 1 : ds->meta.num_shards;
    for (uint32_t s = 0; s < S; s++) {
        const shard *sh = &ds->shards[s];
        for (uint32_t k = 0; sh->bc && k < sh->bs.n; k++) {
            cxs_bcheck *c = &sh->bc[k];
            const uint32_t t = c->e->type;
            const int whole = t == CXS_SEC_QHEADERS || t == CXS_SEC_CHUNKS ||
                              (t == CXS_SEC_INDEX && !sh->t_index.bs) ||
                              (t == CXS_SEC_IDS && !sh->t_ids.bs) ||
                              (t == CXS_SEC_SEQUENCES && !sh->t_seqs.bs);
            for (uint64_t j = 0; whole && j < c->e->num_blocks; j++) {
                int rc = cxs_bsrc_block(ds, s, c, j, d);
                if (rc) return cxs_diag_name_file(d, rc, sh->path);
            }
        }
    }
    return 0;
}

/* Whether a file starts like a shard (magic and kind 1). */
static int looks_like_shard(const char *path) {
    uint8_t h[16];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, h, sizeof h);
    close(fd);
    return n == (ssize_t)sizeof h && memcmp(h, cxs_magic_bytes, 8) == 0 &&
           cxs_ld32(h + 12) == CXS_KIND_SHARD;
}

static char *shard_path(const char *dir, uint32_t i) {
    size_t plen = strlen(dir) + 32;
    char *p = malloc(plen);
    if (p) snprintf(p, plen, "%s/" CXS_SHARD_NAME_FMT, dir, i);
    return p;
}

int cxs_dataset_open(const char *path, cxs_dataset **out, cxs_diag *d) {
    return cxs_dataset_open_ex(path, NULL, out, d);
}

static int open_impl(const char *path, cxs_dataset **out, cxs_diag *d);
static int open_options(cxs_dataset *ds, const cxs_open_opts *opts, const char *path,
                        cxs_dataset **out, cxs_diag *d);

int cxs_streamed_refuse(const cxs_dataset *ds, const char *what, cxs_diag *d) {
    if (!ds || !ds->stream) return 0;
    return cxs_diagf(d, CXS_E_UNSUPPORTED, "%s: %s: the dataset is open to stream (its features "
                     "come as a frame loader with the block sampler reads them); open it "
                     "without streaming to read them otherwise (the whole dataset is fetched)",
                     ds->url, what);
}

/* A streamed entry just opened: the stream of its shards' features, each
 * shard's FEATURES with the block sums that check it. */
static int stream_attach(cxs_dataset *ds, const char *url, const cxs_fetch *f, cxs_diag *d) {
    if (cxs_compressed(ds) || ds->single_shard)
        return cxs_diagf(d, CXS_E_UNSUPPORTED, "%s: cannot be streamed (compressed)", url);
    int rc = cxs_stream_new(url, f, ds->meta.num_shards, &ds->stream, d);
    for (uint32_t i = 0; !rc && i < ds->meta.num_shards; i++) {
        const shard *sh = &ds->shards[i];
        const cxs_bsum_entry *e = cxs_blocksums_find(&sh->bs, CXS_SEC_FEATURES);
        if (!e)
            return cxs_diagf(d, CXS_E_UNSUPPORTED, "%s: shard %u has no block sums of its "
                             "FEATURES, so it cannot be streamed: open it without streaming",
                             url, i);
        /* every block of FEATURES that reaches this process's readers came
         * through the stream's fetch, which checks it against its sum
         * (remote/stream.c): the block source counts FEATURES as checked
         * (LABELS, fetched whole at open, are checked at first use) */
        cxs_bsrc_mark_all(sh->bc_feat);
        const char *name = strrchr(sh->path, '/');
        rc = cxs_stream_shard(ds->stream, i, name ? name + 1 : sh->path, e->sec->offset,
                              e->sec->length, e->shift, sh->bs.sums + 8 * e->first,
                              e->num_blocks, d);
    }
    return rc;
}

int cxs_is_url(const char *path) { return cxs_url_is_remote(path); }

uint64_t cxs_dataset_fetched(const cxs_dataset *ds) {
    return ds ? cxs_stream_fetched(ds->stream) : 0;
}

/* A dataset at a URL: its copy in the node-local cache (remote.h), every
 * checksum of a fresh copy verified before it serves a byte, the cache
 * entry's lock held shared while it is open. */
static int open_url(const char *url, const cxs_open_opts *opts, cxs_progress_fn progress,
                    void *user, cxs_fetch_info *info, cxs_dataset **out, cxs_diag *d) {
    cxs_fetch *f = malloc(sizeof *f);
    if (!f) return cxs_diagf(d, -ENOMEM, "%s: out of memory", url);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    cxs_dataset *ds = NULL;
    int rc;
    for (int again = 0;; again++) {
        rc = (opts && (opts->flags & CXS_OPEN_STREAM) ? cxs_fetch_stream : cxs_fetch_dataset)(
            url, opts ? opts->cache_dir : NULL, opts ? opts->cache_limit : 0, progress, user, f,
            d);
        if (!rc) rc = open_impl(f->local, &ds, d);
        if (!rc && f->streamed && (rc = stream_attach(ds, url, f, d))) {
            cxs_dataset_close(ds);
            ds = NULL;
        }
        /* a complete entry that does not open (a file of it removed by
         * hand, an eviction killed half-way): fetched again, once */
        if (!rc || f->fresh || f->lock_fd < 0 || again) break;
        cxs_fetch_invalidate(f);
    }
    char why[sizeof d->message];
    if (rc && d && f->fresh) { /* the copy was just made: say where it came from */
        snprintf(why, sizeof why, "%s", d->message);
        cxs_diagf(d, rc, "%s: the downloaded copy cannot be opened, and is not kept: %s", url,
                  why);
    }
    /* (a streamed copy's metadata was checked by the open; its features
     * are checked block by block as they arrive) */
    if (!rc && f->fresh && !f->streamed && (rc = cxs_dataset_verify(ds, NULL, NULL, d))) {
        snprintf(why, sizeof why, "%s", d ? d->message : "");
        cxs_diagf(d, rc, "%s: the downloaded copy fails its checks, and is not kept: %s", url,
                  why);
    }
    if (!rc && !(ds->url = strdup(url))) rc = cxs_diagf(d, -ENOMEM, "%s: out of memory", url);
    if (f->lock_fd >= 0) {
        int fd = cxs_fetch_done(f, rc == 0);
        if (!rc) ds->cache_lock = fd + 1;
    }
    if (!rc && info) {
        clock_gettime(CLOCK_MONOTONIC, &t1);
        memset(info, 0, sizeof *info);
        info->dataset_bytes = f->dataset_bytes;
        info->bytes_fetched = f->bytes_fetched;
        info->cached = !f->fresh;
        info->streamed = (uint32_t)f->streamed;
        info->offline = (uint32_t)f->offline;
        info->seconds = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
    }
    free(f);
    if (rc) {
        cxs_dataset_close(ds);
        return rc;
    }
    *out = ds;
    return 0;
}

int cxs_url_fetch(const char *url, const cxs_open_opts *opts, cxs_progress_fn progress,
                  void *user, cxs_fetch_info *info, cxs_dataset **out, cxs_diag *d) {
    if (out) *out = NULL;
    if (!url) return cxs_diagf(d, CXS_E_INVALID, "cxs_url_fetch: NULL url");
    int rc;
    if (opts && (rc = CXS_OPTS_CHECK(opts, "cxs_open_opts", d))) return rc;
    if (!cxs_url_is_remote(url))
        return cxs_diagf(d, CXS_E_INVALID, "%s: not a URL (http://, https://, s3://BUCKET/PREFIX)",
                         url);
    cxs_dataset *ds;
    if ((rc = open_url(url, opts, progress, user, info, &ds, d))) return rc;
    if (!out) {
        cxs_dataset_close(ds);
        return 0;
    }
    return open_options(ds, opts, url, out, d);
}

int cxs_dataset_push(const char *dir, const char *url, cxs_progress_fn progress, void *user,
                     uint64_t *sent, cxs_diag *d) {
    if (sent) *sent = 0;
    if (!dir || !url) return cxs_diagf(d, CXS_E_INVALID, "cxs_dataset_push: NULL argument");
    if (!cxs_url_is_remote(url))
        return cxs_diagf(d, CXS_E_INVALID, "%s: not a URL to push to (http://, https://, "
                         "s3://BUCKET/PREFIX)", url);
    if (cxs_url_is_remote(dir))
        return cxs_diagf(d, CXS_E_INVALID, "%s: push uploads a local dataset, not a URL", dir);
    cxs_dataset *ds;
    int rc = cxs_dataset_open(dir, &ds, d);
    if (rc) return rc;
    if (ds->single_shard) {
        cxs_dataset_close(ds);
        return cxs_diagf(d, CXS_E_INVALID, "%s: a shard alone; push uploads a dataset directory "
                         "(its manifest and shards)", dir);
    }
    /* never upload a damaged dataset: readers would refuse it after the
     * download, everywhere */
    if ((rc = cxs_dataset_verify(ds, NULL, NULL, d))) {
        char why[sizeof d->message];
        snprintf(why, sizeof why, "%s", d ? d->message : "");
        cxs_dataset_close(ds);
        return cxs_diagf(d, rc, "%s: not uploaded, it fails its checks: %s", dir, why);
    }
    uint32_t n = ds->meta.num_shards;
    const char **paths = calloc(n ? n : 1, sizeof *paths);
    uint64_t *sizes = calloc(n ? n : 1, sizeof *sizes);
    if (!paths || !sizes) {
        rc = cxs_diagf(d, -ENOMEM, "%s: out of memory", dir);
    } else {
        for (uint32_t i = 0; i < n; i++) {
            paths[i] = ds->shards[i].path;
            sizes[i] = ds->shards[i].size;
        }
        rc = cxs_push_files(url, paths, sizes, n, ds->manifest_path, ds->size, progress, user,
                            sent, d);
    }
    free(paths);
    free(sizes);
    cxs_dataset_close(ds);
    return rc;
}

int cxs_dataset_url(const cxs_dataset *ds, const char **url, const char **local) {
    if (!ds) return CXS_E_INVALID;
    if (url) *url = ds->url;
    if (local) *local = ds->url ? ds->manifest_path : NULL;
    return ds->url ? 1 : 0;
}

void cxs_open_opts_init(cxs_open_opts *o) { memset(o, 0, sizeof *o); }

/* A streamed cache entry opened by its directory: its shard files hold
 * holes where features were not fetched, which a local open would serve
 * as zeros.  Refused (open it by its URL). */
static int streamed_entry(const char *path, cxs_diag *d) {
    char p[4200];
    struct stat st;
    if (stat(path, &st)) return 0; /* (open_impl says what is wrong) */
    if (S_ISDIR(st.st_mode)) snprintf(p, sizeof p, "%s/stream", path);
    else {
        const char *sl = strrchr(path, '/');
        int n = sl ? (int)(sl - path) : 1;
        snprintf(p, sizeof p, "%.*s/stream", n, sl ? path : ".");
    }
    if (stat(p, &st)) return 0;
    return cxs_diagf(d, CXS_E_UNSUPPORTED, "%s: a cache entry of a dataset opened to stream: "
                     "features it has not fetched are holes in its files; open it by its URL",
                     path);
}

int cxs_dataset_open_ex(const char *path, const cxs_open_opts *opts, cxs_dataset **out,
                        cxs_diag *d) {
    if (!path || !out) return cxs_diagf(d, CXS_E_INVALID, "cxs_dataset_open: NULL argument");
    int rc;
    if (opts && (rc = CXS_OPTS_CHECK(opts, "cxs_open_opts", d))) return rc;
    cxs_dataset *ds;
    if (cxs_url_is_remote(path)) {
        if ((rc = open_url(path, opts, NULL, NULL, NULL, &ds, d))) return rc;
    } else if ((rc = streamed_entry(path, d)) || (rc = open_impl(path, &ds, d))) {
        return rc;
    }
    return open_options(ds, opts, path, out, d);
}

/* The options' part of an open: the chunk cache, the copy into huge pages.
 * ds is closed on failure. */
static int open_options(cxs_dataset *ds, const cxs_open_opts *opts, const char *path,
                        cxs_dataset **out, cxs_diag *d) {
    int rc;
    /* 0 is the default, as in every options struct */
    uint64_t cache = !opts || !opts->cache_bytes ? CXS_DEFAULT_CACHE_BYTES
                     : opts->cache_bytes == CXS_CACHE_OFF ? 0
                                                          : opts->cache_bytes;
    if (cxs_compressed(ds) && (rc = cxs_zcache_create(ds, cache))) {
        cxs_dataset_close(ds);
        return cxs_diag_at(d, rc, path, CXS_NO_OFFSET,
                           "%s: cannot allocate a chunk cache of %llu bytes", path,
                           (unsigned long long)cache);
    }
    if (opts && opts->hugepage_budget && ds->stream) {
        rc = cxs_streamed_refuse(ds, "hugepage_budget (a copy of every feature)", d);
        cxs_dataset_close(ds);
        return rc;
    }
    if (opts && opts->hugepage_budget && (rc = cxs_hugecopy(ds, opts->hugepage_budget, d))) {
        cxs_dataset_close(ds);
        return rc;
    }
    *out = ds;
    return 0;
}

static int open_impl(const char *path, cxs_dataset **out, cxs_diag *d) {
    cxs_fault_install(); /* before any mapping is read: see fault.h */
    cxs_dataset *ds = calloc(1, sizeof *ds);
    if (!ds) return -ENOMEM;
    char *dir = NULL;
    struct stat st;
    int rc;
    if (stat(path, &st) != 0) {
        int e = errno;
        rc = cxs_diag_at(d, -e, path, CXS_NO_OFFSET, "%s: %s", path, strerror(e));
        goto fail;
    }
    if (!S_ISDIR(st.st_mode) && looks_like_shard(path)) {
        ds->single_shard = 1;
        ds->shards = calloc(1, sizeof *ds->shards);
        ds->manifest_path = strdup(path);
        if (!ds->shards || !ds->manifest_path || !(ds->shards[0].path = strdup(path))) {
            rc = -ENOMEM;
            goto fail;
        }
        if ((rc = open_shard(ds, 0, NULL, d)) || (rc = finish_open(ds, d)) ||
            (rc = whole_sections_blocks(ds, d)))
            goto fail;
        *out = ds;
        return 0;
    }
    if (S_ISDIR(st.st_mode)) {
        dir = strdup(path);
    } else {
        const char *slash = strrchr(path, '/');
        dir = slash ? strndup(path, (size_t)(slash - path)) : strdup(".");
        if (dir && !*dir) {
            free(dir);
            dir = strdup("/");
        }
    }
    if (!dir) {
        rc = -ENOMEM;
        goto fail;
    }
    size_t ml = strlen(dir) + sizeof CXS_MANIFEST_NAME + 2;
    ds->manifest_path = malloc(ml);
    if (!ds->manifest_path) {
        rc = -ENOMEM;
        goto fail;
    }
    snprintf(ds->manifest_path, ml, "%s/%s", dir, CXS_MANIFEST_NAME);
    if ((rc = open_manifest(ds, d))) {
        cxs_diag_name_file(d, rc, ds->manifest_path);
        /* A partial dataset (pack --part I/N) has part.cxs instead. */
        size_t pl = strlen(dir) + 16;
        char *pp = rc == -ENOENT ? malloc(pl) : NULL;
        if (pp) {
            snprintf(pp, pl, "%s/part.cxs", dir);
            if (access(pp, F_OK) == 0)
                rc = cxs_diag_at(d, CXS_E_UNSUPPORTED, dir, CXS_NO_OFFSET,
                                 "%s: a partial dataset (pack --part I/N), not a dataset: join "
                                 "all the parts with `ctxshard merge PART... OUT` first",
                                 dir);
            free(pp);
            if (pp && rc == -ENOENT) rc = cxs_explain_not_dataset(path, S_ISDIR(st.st_mode), d);
        }
        goto fail;
    }
    uint64_t U = ds->meta.num_utterances;
    ds->shards = calloc(ds->meta.num_shards, sizeof *ds->shards);
    if (!ds->shards) {
        rc = -ENOMEM;
        goto fail;
    }
    const uint8_t *table = ds->map + cxs_container_find(&ds->mc, CXS_SEC_SHARD_TABLE)->offset;
    uint64_t bytes = 0;
    for (uint32_t i = 0; i < ds->meta.num_shards; i++) {
        if (!(ds->shards[i].path = shard_path(dir, i))) {
            rc = -ENOMEM;
            goto fail;
        }
        struct stat sst;
        if (stat(ds->shards[i].path, &sst) != 0) {
            int e = errno;
            rc = cxs_diag_at(d, -e, ds->shards[i].path, CXS_NO_OFFSET, "%s: %s", ds->shards[i].path,
                             strerror(e));
            goto fail;
        }
        /* A shard of the wrong size is reported as such, before the counts
         * are checked against the sizes. */
        cxs_shard_entry se;
        cxs_shard_entry_load(table + (uint64_t)i * CXS_SHARD_ENTRY_SIZE, &se);
        if ((uint64_t)sst.st_size != se.file_size) {
            rc = cxs_diag_at(d,
                             (uint64_t)sst.st_size < se.file_size ? CXS_E_TRUNCATED : CXS_E_CORRUPT,
                             ds->shards[i].path, CXS_NO_OFFSET,
                             "%s: %llu bytes, the manifest says %llu", ds->shards[i].path,
                             (unsigned long long)sst.st_size, (unsigned long long)se.file_size);
            goto fail;
        }
        bytes += (uint64_t)sst.st_size;
    }
    if ((rc = alloc_arrays(ds, bytes, cxs_compressed(ds), ds->manifest_path, d))) goto fail;
    for (uint32_t i = 0; i < ds->meta.num_shards; i++) {
        cxs_shard_entry e;
        if (cxs_shard_entry_load(table + (uint64_t)i * CXS_SHARD_ENTRY_SIZE, &e)) {
            rc = cxs_diag_at(d, CXS_E_CORRUPT, ds->manifest_path, CXS_NO_OFFSET,
                             "%s: SHARD_TABLE entry %u: reserved bytes not zero", ds->manifest_path,
                             i);
            goto fail;
        }
        uint64_t want_u = i == 0 ? 0 : ds->shards[i - 1].u_start + ds->shards[i - 1].meta.num_utterances;
        uint64_t want_f = i == 0 ? 0 : ds->shards[i - 1].f_start + ds->shards[i - 1].meta.num_frames;
        if (e.first_utterance != want_u || e.first_frame != want_f || e.num_utterances == 0 ||
            e.num_utterances > U - want_u || e.num_frames < e.num_utterances ||
            e.num_frames > ds->meta.num_frames - want_f) {
            rc = cxs_diag_at(d, CXS_E_CORRUPT, ds->manifest_path, CXS_NO_OFFSET,
                             "%s: SHARD_TABLE entry %u: utterances %llu+%llu, frames %llu+%llu do "
                             "not follow the previous shard",
                             ds->manifest_path, i, (unsigned long long)e.first_utterance,
                             (unsigned long long)e.num_utterances,
                             (unsigned long long)e.first_frame, (unsigned long long)e.num_frames);
            goto fail;
        }
        if ((rc = open_shard(ds, i, &e, d))) goto fail;
    }
    const shard *last = &ds->shards[ds->meta.num_shards - 1];
    if (last->u_start + last->meta.num_utterances != U ||
        last->f_start + last->meta.num_frames != ds->meta.num_frames) {
        rc = cxs_diag_at(d, CXS_E_CORRUPT, ds->manifest_path, CXS_NO_OFFSET,
                         "%s: the shards hold %llu utterances and %llu frames, DATASET_META says "
                         "%llu and %llu",
                         ds->manifest_path,
                         (unsigned long long)(last->u_start + last->meta.num_utterances),
                         (unsigned long long)(last->f_start + last->meta.num_frames),
                         (unsigned long long)U, (unsigned long long)ds->meta.num_frames);
        goto fail;
    }
    /* The length ranges: STATS' and SEQ_META's are the dataset's; an INDEX
     * or SEQUENCES read whole must agree with them (all of them read whole:
     * reach them exactly), one checked at use holds every length to them. */
    uint64_t smin = ds->min_len, smax = ds->max_len;
    if (ds->lazy_index ? ds->scan_min < smin || (ds->scan_max && ds->scan_max > smax)
                       : ds->scan_min != smin || ds->scan_max != smax) {
        rc = cxs_diag_at(d, CXS_E_CORRUPT, ds->manifest_path, CXS_NO_OFFSET,
                         "%s: STATS: length range disagrees with the shards", ds->manifest_path);
        goto fail;
    }
    if (ds->has_seqs) {
        ds->seq_min = ds->seqm.min_length;
        ds->seq_max = ds->seqm.max_length;
    }
    if (ds->has_seqs &&
        (ds->seqm.num_symbols != ds->seq_total ||
         (ds->lazy_seqs ? ds->seq_scan_min < ds->seq_min ||
                              (ds->seq_scan_max && ds->seq_scan_max > ds->seq_max)
                        : ds->seq_scan_min != ds->seq_min || ds->seq_scan_max != ds->seq_max))) {
        rc =
            cxs_diag_at(d, CXS_E_CORRUPT, ds->manifest_path, CXS_NO_OFFSET,
                        "%s: SEQ_META: %llu symbols, sequences of %llu to %llu, the shards hold "
                        "%llu, of %llu to %llu",
                        ds->manifest_path, (unsigned long long)ds->seqm.num_symbols,
                        (unsigned long long)ds->seqm.min_length,
                        (unsigned long long)ds->seqm.max_length, (unsigned long long)ds->seq_total,
                        (unsigned long long)ds->seq_scan_min, (unsigned long long)ds->seq_scan_max);
        goto fail;
    }
    if ((rc = finish_open(ds, d)) || (rc = whole_sections_blocks(ds, d))) goto fail;
    free(dir);
    *out = ds;
    return 0;
fail:
    free(dir);
    cxs_dataset_close(ds);
    return rc;
}

void cxs_info_fill(const cxs_dataset *ds, cxs_info *info) {
    memset(info, 0, sizeof *info);
    const cxs_dataset_meta *m = &ds->meta;
    info->num_frames = m->num_frames;
    info->num_utterances = m->num_utterances;
    info->num_shards = m->num_shards;
    info->dim = m->dim;
    info->dtype = m->dtype;
    info->guard = m->guard;
    info->vocab_size = m->vocab_size;
    info->label_width = m->label_width;
    info->normalize = m->normalize;
    info->format_major = ds->single_shard ? ds->shards[0].c.major : ds->mc.major;
    info->format_minor = ds->single_shard ? ds->shards[0].c.minor : ds->mc.minor;
    info->shard_size = m->shard_size;
    info->num_skipped = m->num_skipped;
    info->on_error_skip = m->on_error;
    info->min_length = ds->min_len;
    info->max_length = ds->max_len;
    info->total_bytes = ds->total_bytes;
    info->single_shard = (uint32_t)ds->single_shard;
    info->compression = cxs_compressed(ds) ? CXS_COMPRESSION_ZSTD : CXS_COMPRESSION_NONE;
    info->feature_bytes = ds->raw_feature_bytes;
    info->stored_feature_bytes = cxs_compressed(ds) ? ds->zbytes : ds->raw_feature_bytes;
    info->label_seqs = (uint32_t)ds->has_seqs;
    if (ds->has_seqs) {
        info->seq_symbols = ds->seq_total;
        info->min_seq_length = ds->seq_min;
        info->max_seq_length = ds->seq_max;
        info->seq_width = ds->seq_width;
    }
    for (uint32_t i = 0; i < (ds->single_shard ? 1u : ds->meta.num_shards); i++)
        info->block_sum_shards += ds->shards[i].bs.n > 0;
    if (cxs_compressed(ds)) {
        info->chunk_rows = ds->shards[0].ch.chunk_rows;
        info->compression_level = ds->shards[0].ch.level;
        info->shuffle = ds->shards[0].ch.filter == CXS_FILTER_SHUFFLE;
    }
}

typedef struct read_arg {
    const cxs_dataset *ds;
    zreader *zr;
    uint32_t s;
    uint64_t r0, n;
    void *out;
} read_arg;

/* In a recovery region (fault.h): a shard truncated since open is
 * CXS_E_TRUNCATED, not a SIGBUS. */
static int read_rows_mapped(void *p) {
    const read_arg *a = p;
    return cxs_read_rows(a->ds, a->zr, a->s, a->r0, a->n, a->out);
}

int cxs_dataset_read_features(const cxs_dataset *ds, uint64_t u, uint64_t first, uint64_t count,
                              void *out) {
    return cxs_dataset_read_features_ex(ds, u, first, count, out, NULL);
}

int cxs_dataset_read_features_ex(const cxs_dataset *ds, uint64_t u, uint64_t first,
                                 uint64_t count, void *out, cxs_diag *d) {
    if (!ds || (count && !out))
        return cxs_diagf(d, CXS_E_INVALID, "read_features: no dataset or out is NULL");
    if (ds->stream) return cxs_streamed_refuse(ds, "read_features", d);
    if (u >= ds->meta.num_utterances)
        return cxs_diagf(d, CXS_E_RANGE, "read_features: utterance %llu is past the dataset's %llu",
                         (unsigned long long)u, (unsigned long long)ds->meta.num_utterances);
    cxs_uloc l;
    int rc = cxs_utt_loc_safe(ds, u, &l, d);
    if (rc) return rc;
    uint64_t T = l.T;
    if (first > T || count > T - first)
        return cxs_diagf(d, CXS_E_RANGE,
                         "read_features: frames %llu..%llu of utterance %llu, which has %llu",
                         (unsigned long long)first, (unsigned long long)(first + count),
                         (unsigned long long)u, (unsigned long long)T);
    if (!count) return 0;
    if ((rc = cxs_bsrc_rows(ds, l.shard, l.row + first, count, d))) return rc;
    zreader zr = {0};
    read_arg a = {ds, &zr, l.shard, l.row + first, count, out};
    cxs_fault f;
    rc = cxs_fault_run(ds, read_rows_mapped, &a, &f);
    if (rc && rc != -ENOMEM) {
        cxs_where w = CXS_WHERE_NONE;
        w.shard = l.shard;
        w.utt = u;
        w.chunk = zr.bad_chunk;
        w.offset = rc == CXS_E_TRUNCATED && zr.bad_chunk == UINT64_MAX ? f.offset : zr.bad_offset;
        cxs_where_diag(ds, rc, &w, d);
    } else if (rc) {
        cxs_diagf(d, rc, "read_features: out of memory");
    }
    cxs_zreader_free(&zr);
    return rc;
}

void cxs_stats_fill(const cxs_dataset *ds, cxs_stats *s) {
    memset(s, 0, sizeof *s);
    if (!ds->stats) return;
    s->count = cxs_ld64(ds->stats);
    if (!cxs_host_is_le()) return;
    uint32_t D = ds->meta.dim;
    s->mean = (const double *)(const void *)(ds->stats + CXS_STATS_HEAD);
    s->var = (const double *)(const void *)(ds->stats + CXS_STATS_HEAD + 8 * D);
    if (ds->meta.vocab_size)
        s->label_counts = (const uint64_t *)(const void *)(ds->stats + CXS_STATS_HEAD + 16 * D);
}

int cxs_dataset_vocab(const cxs_dataset *ds, uint32_t i, const char **sym, size_t *len) {
    if (i >= ds->meta.vocab_size) return CXS_E_RANGE;
    uint32_t V = ds->meta.vocab_size;
    uint64_t a = cxs_ld64(ds->vocab + 8 * (uint64_t)i), b = cxs_ld64(ds->vocab + 8 * ((uint64_t)i + 1));
    *sym = (const char *)ds->vocab + 8 * ((uint64_t)V + 1) + a;
    *len = (size_t)(b - a);
    return 0;
}

void cxs_dataset_skipped(const cxs_dataset *ds, const char **text, size_t *len) {
    *text = ds->skipped;
    *len = (size_t)ds->skipped_len;
}

uint64_t cxs_dataset_identity(const cxs_dataset *ds) {
    return ds->single_shard ? ds->shards[0].c.header_checksum : ds->mc.header_checksum;
}

int cxs_dataset_locate(const cxs_dataset *ds, uint64_t frame, uint64_t *utterance,
                       uint64_t *offset) {
    if (frame >= ds->meta.num_frames) return CXS_E_RANGE;
    cxs_uloc l;
    int rc = cxs_find_utt_safe(ds, frame, &l, NULL);
    if (rc) return rc;
    *utterance = ds->shards[l.shard].u_start + l.lu;
    *offset = frame - l.f0;
    return 0;
}

int cxs_dataset_utterance(const cxs_dataset *ds, uint64_t u, cxs_utterance *out) {
    return cxs_dataset_utterance_ex(ds, u, 0, out, NULL);
}

int cxs_dataset_utterance_ex(const cxs_dataset *ds, uint64_t u, uint32_t flags,
                             cxs_utterance *out, cxs_diag *d) {
    if (!ds || !out || (flags & ~CXS_UTTERANCE_NO_DATA))
        return cxs_diagf(d, CXS_E_INVALID, "utterance: no dataset, out is NULL or unknown flags");
    if (u >= ds->meta.num_utterances)
        return cxs_diagf(d, CXS_E_RANGE, "utterance %llu is past the dataset's %llu",
                         (unsigned long long)u, (unsigned long long)ds->meta.num_utterances);
    const int data = !(flags & CXS_UTTERANCE_NO_DATA);
    /* the INDEX and IDS blocks of u checked (lazily), the id's offsets
     * read from the mapping in a recovery region: a shard truncated since
     * open is CXS_E_TRUNCATED here, not a SIGBUS (the id's bytes, like the
     * features, are the caller's to read) */
    const uint8_t *id;
    uint64_t id_len;
    int rc;
    cxs_uloc l;
    if ((rc = cxs_utt_loc_safe(ds, u, &l, d)) || (rc = cxs_id_get(ds, u, &id, &id_len, d)))
        return rc;
    const shard *sh = &ds->shards[l.shard];
    /* the pointers handed out: their blocks checked first */
    if (data && ((rc = cxs_bsrc_rows(ds, l.shard, l.row, l.T, d)) ||
                 (sh->labels && (rc = cxs_bsrc_labels(ds, l.shard, l.f0 - sh->f_start, l.T, d)))))
        return rc;
    memset(out, 0, sizeof *out);
    out->id = (const char *)id;
    out->id_len = (size_t)id_len;
    out->first_frame = l.f0;
    out->num_frames = l.T;
    out->shard = l.shard;
    if (!data) return 0;
    out->features = cxs_compressed(ds) || ds->stream ? NULL : cxs_loc_row_ptr(ds, &l, 0);
    out->labels = sh->labels ? sh->serve_labels + (l.f0 - sh->f_start) * sh->meta.label_width : NULL;
    return 0;
}

typedef struct guard_arg {
    const uint8_t *p;
    size_t n;
} guard_arg;

static int guard_zero(void *arg) {
    const guard_arg *g = arg;
    for (size_t i = 0; i < g->n; i++)
        if (g->p[i]) return CXS_E_CORRUPT;
    return 0;
}

int cxs_dataset_window(const cxs_dataset *ds, uint64_t frame, uint32_t k, const void **window) {
    /* a coded dtype's codes are not values: its windows are decoded copies */
    if (cxs_compressed(ds) || ds->stream || cxs_dtype_coded(ds->meta.dtype))
        return CXS_E_UNSUPPORTED;
    if (k > ds->meta.guard || frame >= ds->meta.num_frames) return CXS_E_RANGE;
    cxs_uloc l;
    int rc = cxs_find_utt_safe(ds, frame, &l, NULL);
    if (rc) return rc;
    const int64_t t = (int64_t)(frame - l.f0), T = (int64_t)l.T;
    /* the view's rows, guard rows included: their blocks checked */
    if ((rc = cxs_bsrc_rows(ds, l.shard, (uint64_t)((int64_t)l.row + t - (int64_t)k), 2 * (uint64_t)k + 1,
                            NULL)))
        return rc;
    /* The guard rows a view spans are served as they are stored: check
     * them (at most 2k rows, only near the borders), so that a damaged
     * guard row is refused rather than served as padding.  Open does not
     * read them; verify checks every one. */
    cxs_fault f;
    if (t < (int64_t)k) {
        guard_arg g = {cxs_loc_row_ptr(ds, &l, t - (int64_t)k), (size_t)((int64_t)k - t) * ds->row_bytes};
        rc = cxs_fault_run(ds, guard_zero, &g, &f);
        if (rc) return rc;
    }
    if (t + (int64_t)k >= T) {
        guard_arg g = {cxs_loc_row_ptr(ds, &l, T), (size_t)(t + (int64_t)k - T + 1) * ds->row_bytes};
        rc = cxs_fault_run(ds, guard_zero, &g, &f);
        if (rc) return rc;
    }
    *window = cxs_loc_row_ptr(ds, &l, t - (int64_t)k);
    return 0;
}

int cxs_dataset_labels_of(const cxs_dataset *ds, const uint64_t *frames, size_t n,
                          int64_t *out) {
    if (!ds || (n && (!frames || !out))) return CXS_E_INVALID;
    if (!ds->meta.label_width) return CXS_E_NO_LABELS;
    for (size_t i = 0; i < n; i++)
        if (frames[i] >= ds->meta.num_frames) return CXS_E_RANGE;
    const uint32_t V = ds->meta.vocab_size;
    for (size_t i = 0; i < n; i++) {
        const uint32_t s = cxs_frame_shard(ds, frames[i]);
        const shard *sh = &ds->shards[s];
        int rc = cxs_bsrc_labels(ds, s, frames[i] - sh->f_start, 1, NULL);
        if (rc) return rc;
        uint32_t l = cxs_served_label(sh, frames[i] - sh->f_start);
        if (V && l >= V) return CXS_E_CORRUPT; /* damaged: never served */
        out[i] = l;
    }
    return 0;
}

int cxs_dataset_shard_labels(const cxs_dataset *ds, uint32_t s, const void **labels,
                             uint64_t *first_frame, uint64_t *num_frames) {
    if (!ds) return CXS_E_INVALID;
    if (s >= ds->meta.num_shards) return CXS_E_RANGE;
    if (!ds->meta.label_width) return CXS_E_NO_LABELS;
    const shard *sh = &ds->shards[s];
    /* the whole section is handed out: every block of it checked */
    int rc = labels ? cxs_bsrc_labels(ds, s, 0, sh->meta.num_frames, NULL) : 0;
    if (rc) return rc;
    if (labels) *labels = sh->serve_labels;
    if (first_frame) *first_frame = sh->f_start;
    if (num_frames) *num_frames = sh->meta.num_frames;
    return 0;
}

int cxs_dataset_labels(const cxs_dataset *ds, uint64_t first, uint64_t count, int64_t *out) {
    if (!ds->meta.label_width) return CXS_E_NO_LABELS;
    if (first > ds->meta.num_frames || count > ds->meta.num_frames - first) return CXS_E_RANGE;
    if (!count) return 0;
    uint32_t si = cxs_frame_shard(ds, first);
    uint64_t f = first, end = first + count;
    while (f < end) {
        const shard *sh = &ds->shards[si];
        uint64_t stop = sh->f_start + sh->meta.num_frames < end ? sh->f_start + sh->meta.num_frames : end;
        int rc = cxs_bsrc_labels(ds, si++, f - sh->f_start, stop - f, NULL);
        if (rc) return rc;
        for (uint64_t i = 0; i < stop - f; i++) {
            uint32_t l = cxs_served_label(sh, f - sh->f_start + i);
            if (ds->meta.vocab_size && l >= ds->meta.vocab_size) return CXS_E_CORRUPT;
            out[i] = l;
        }
        out += stop - f;
        f = stop;
    }
    return 0;
}

int cxs_dataset_label(const cxs_dataset *ds, uint64_t frame, uint32_t *label) {
    int64_t l;
    int rc = cxs_dataset_labels(ds, frame, 1, &l);
    if (rc) return rc;
    *label = (uint32_t)l;
    return 0;
}

int cxs_dataset_label_seq(const cxs_dataset *ds, uint64_t u, int64_t *out, uint32_t cap,
                          uint32_t *len) {
    if (!ds || !len || (cap && !out)) return CXS_E_INVALID;
    if (!ds->has_seqs) return CXS_E_NO_SEQUENCES;
    if (u >= ds->meta.num_utterances) return CXS_E_RANGE;
    const shard *sh = &ds->shards[cxs_utt_shard(ds, u)];
    const uint64_t U = sh->meta.num_utterances;
    uint64_t a, b;
    int rc = cxs_seq_get(ds, u, &a, &b, NULL);
    if (rc) return rc;
    const uint8_t *sym = sh->seqs + 8 * (U + 1);
    /* Open or the block's check made sure of the offsets, the lengths
     * (< 2^32) and every symbol. */
    const uint32_t n = (uint32_t)(b - a), take = n < cap ? n : cap;
    if (ds->seq_width == 1)
        for (uint32_t j = 0; j < take; j++) out[j] = sym[a + j];
    else
        for (uint32_t j = 0; j < take; j++) out[j] = cxs_ld16(sym + 2 * (a + j));
    *len = n;
    return 0;
}
