/* dataset_internal.h - the open dataset, shared by the library's own
 * sources (never installed). */
#ifndef CXS_DATASET_INTERNAL_H
#define CXS_DATASET_INTERNAL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "blocksrc.h"
#include "ctxshard.h"
#include "cxs_format.h"
#include "cxs_le.h"
#include "cxs_zchunk.h"

/* A per-utterance table of a shard (INDEX, IDS, SEQUENCES) read in place
 * from the mapping and checked lazily, one block at a time, at its first
 * use (format 1.3 shards with BLOCKSUMS, spec section 8): `done` has a bit
 * per block of the section, set once the block's sum and (for the blocks
 * holding offsets) its structure are checked.  A table checked whole at
 * open (older shards, or a shard opened alone) has all_done set. */
typedef struct lazy_table {
    const uint8_t *p;       /* the section's bytes */
    uint64_t len;
    uint32_t type;          /* CXS_SEC_INDEX, _IDS or _SEQUENCES */
    int all_done;
    const cxs_bsum_entry *bs; /* its BLOCKSUMS entry (when !all_done) */
    uint64_t *done;         /* bitmap over bs->num_blocks (atomic bit sets) */
    cxs_bcheck *hashed;     /* blocks whose sum is checked: the block source's */
    uint64_t per_block;     /* u64 offsets per block: 2^shift / 8 */
} lazy_table;

typedef struct shard {
    char *path;
    const uint8_t *map;
    uint64_t size;
    cxs_container c;
    cxs_shard_meta meta;
    uint64_t u_start, f_start; /* first utterance and frame, dataset numbering */
    const uint8_t *index;
    const uint8_t *ids;
    const uint8_t *features; /* NULL when compressed */
    const uint8_t *labels;
    const uint8_t *seqs; /* SEQUENCES (format 1.2): U+1 u64 offsets, then symbols; or NULL */
    /* Compressed shards (format 1.1): the chunk table and the chunks. */
    cxs_chunks_head ch;
    const uint8_t *chunk_table; /* num_chunks entries: u64 end, u64 checksum */
    const uint8_t *zdata;
    uint64_t chunk_base;       /* dataset-wide number of this shard's chunk 0 */
    /* The frame -> utterance lookup's buckets of 2^CXS_BUCKET_SHIFT local
     * frames: 1 + the first local utterance meeting each, 0 while not yet
     * computed (filled at first use by a search of INDEX; relaxed atomic
     * stores of a value every thread computes alike). */
    uint32_t *bucket;
    uint64_t nbuckets;
    lazy_table t_index, t_ids, t_seqs;
    cxs_blocksums bs;          /* BLOCKSUMS (format 1.3); bs.n == 0 without */
    /* The block source's checked blocks (blocksrc.h): one per entry of
     * bs, and those of FEATURES and LABELS (NULL when not covered). */
    cxs_bcheck *bc, *bc_feat, *bc_lab;
    /* Where windows and the gather's labels are read: features and labels
     * (the mapping), or their checked copies in huge pages (hugecopy.c). */
    const uint8_t *serve_features, *serve_labels;
    /* QHEADERS (format 1.4, a coded dtype): the header of local utterance
     * u at qheaders + u * qh (the dataset's), U of them, its length and
     * checksum checked at open; NULL for a float dtype. */
    const uint8_t *qheaders;
    /* A bit per utterance, set once its header passed the check of its
     * first use (qheaders.c; atomic bit sets, as the block sums' bitmaps):
     * a shuffled epoch starts a new utterance at nearly every window, and
     * the check then runs once per utterance, not once per window. */
    uint64_t *qh_checked;
} shard;

/* Label i of a shard's LABELS: one byte, or two little-endian. */
static inline uint32_t cxs_shard_label(const shard *sh, uint64_t i) {
    return sh->meta.label_width == 1 ? sh->labels[i] : cxs_ld16(sh->labels + 2 * i);
}
/* The same, from where labels are served (the mapping or its copy). */
static inline uint32_t cxs_served_label(const shard *sh, uint64_t i) {
    const uint8_t *p = sh->serve_labels;
    return sh->meta.label_width == 1 ? p[i] : cxs_ld16(p + 2 * i);
}

/* FEATURES rows [r0, r0 + n) of shard s (its layout, guard rows
 * counted) and LABELS of its local frames [f0, f0 + n) made safe to serve
 * (blocksrc.h): 0, or CXS_E_CHECKSUM naming the block in d (may be NULL),
 * CXS_E_TRUNCATED.  A window on checked blocks costs a load or two. */
static inline int cxs_bsrc_rows(const cxs_dataset *ds, uint32_t s, uint64_t r0, uint64_t n,
                                cxs_diag *d);
static inline int cxs_bsrc_labels(const cxs_dataset *ds, uint32_t s, uint64_t f0, uint64_t n,
                                  cxs_diag *d);

struct zcache;

/* The frame -> utterance lookup jumps to a bucket of 2^CXS_BUCKET_SHIFT
 * frames first, then searches the few utterances that meet the bucket. */
#define CXS_BUCKET_SHIFT 12

struct cxs_dataset {
    char *manifest_path;  /* or the shard's path when single_shard */
    char *url;            /* opened from a URL: it (manifest_path is the cached copy's) */
    int cache_lock;       /* a URL: 1 + the fd of its cache entry's shared lock, else 0 */
    struct cxs_stream *stream; /* CXS_OPEN_STREAM: its features come as the block
                                  loader reads them (remote.h), else NULL */
    int single_shard;
    const uint8_t *map;   /* the manifest (like a shard's map, size) */
    uint64_t size;
    cxs_container mc;
    cxs_dataset_meta meta;
    shard *shards;
    /* First utterance and first frame of every shard, num_shards + 1
     * entries (the last: U and F): the shard of an utterance or a frame by
     * a search of these; every per-utterance value is read from the
     * shard's own INDEX in the mapping (no table per utterance). */
    uint64_t *shard_u0, *shard_f0;
    int lazy;             /* some table is checked at first use */
    const uint8_t *vocab;
    const uint8_t *stats; /* NULL for a single shard */
    const char *skipped;
    uint64_t skipped_len;
    size_t esize;
    uint64_t total_bytes;
    /* The shortest and longest utterance: from STATS (the manifest), and
     * every length served is checked to lie within them (at open, or at
     * the first use of its INDEX block). */
    uint64_t min_len, max_len;
    uint64_t scan_min, scan_max;   /* of the INDEXes read whole at open */
    uint64_t seq_scan_min, seq_scan_max;
    int lazy_index, lazy_seqs;     /* some shard's INDEX / SEQUENCES is checked at use */
    /* Read-time normalisation constants (spec section 7.4) from the stored
     * statistics, dim each; NULL without statistics. */
    double *norm_mean, *norm_scale;
    uint64_t row_bytes;       /* dim * esize */
    uint64_t qh;              /* bytes of a QHEADERS entry (cxs_q_header_size); 0: a float dtype */
    uint64_t total_chunks;
    size_t max_chunk_bytes;   /* decoded size of the largest chunk */
    uint64_t zbytes, raw_feature_bytes;
    struct zcache *zc;        /* NULL when not compressed or no cache */
    /* Label sequences (format 1.2).  With sequences only, meta.label_width
     * is 0 after open (no frame labels: every frame-label call answers
     * CXS_E_NO_LABELS) and seq_width holds the stored width. */
    int has_seqs;
    uint32_t seq_width;
    cxs_seq_meta seqm;        /* the manifest's SEQ_META */
    uint64_t seq_total, seq_min, seq_max; /* from the shards */
    /* cxs_open_opts.hugepage_budget (hugecopy.c): the copy (NULL: none),
     * its bytes, how many of them huge pages back, or why there is none. */
    void *hp_map;
    uint64_t hp_len, hp_huge;
    char hp_why[200];
};

/* Copy the FEATURES and LABELS of every shard into anonymous huge-page
 * memory, each hashed and checked against its section checksum, and serve
 * them from there, when they fit in budget bytes and huge pages are on;
 * otherwise leave the mapping in use and say why in ds->hp_why.  0, or
 * CXS_E_CHECKSUM (a section's bytes do not match their checksum),
 * CXS_E_TRUNCATED, -ENOMEM, with d. */
int cxs_hugecopy(cxs_dataset *ds, uint64_t budget, cxs_diag *d);

/* Name path in d->file for a failure rc whose diagnostic names no file:
 * open's checks of one file (the manifest's, a shard's) say in the message
 * which file, and a program reads it from diag.file.  Returns rc. */
static inline int cxs_diag_name_file(cxs_diag *d, int rc, const char *path) {
    if (rc && d && !d->file[0]) snprintf(d->file, sizeof d->file, "%s", path);
    return rc;
}

/* The library's whole struct, every field of this version, for the sized
 * calls to copy out (info.c): cxs_dataset_info, _stats and _hugepages
 * (ds NULL: zeros) as documented in ctxshard.h. */
void cxs_info_fill(const cxs_dataset *ds, cxs_info *info);
void cxs_stats_fill(const cxs_dataset *ds, cxs_stats *s);
void cxs_hugepages_fill(const cxs_dataset *ds, cxs_hugepage_info *out);

/* Whether the shards hold ZFEATURES (format 1.1) rather than FEATURES. */
/* A streamed dataset (CXS_OPEN_STREAM) serves its features to the block
 * loader alone: any other reader of them answers CXS_E_UNSUPPORTED, saying
 * what (dataset.c). */
int cxs_streamed_refuse(const cxs_dataset *ds, const char *what, cxs_diag *d);
static inline int cxs_compressed(const cxs_dataset *ds) {
    return ds->meta.compression == CXS_COMPRESSION_ZSTD;
}

/* Per-thread state for reading compressed features: a decoder and scratch
 * buffers.  Zeroed = not yet set up. */
typedef struct zreader {
    ZSTD_DCtx *dc;
    uint8_t *scratch, *own;
    int32_t slot; /* cache slot held by the last get, or -1 */
    /* After a failed read: the shard-local chunk that failed, and for
     * CXS_E_TRUNCATED the file offset that could not be read. */
    uint64_t bad_chunk, bad_offset;
} zreader;

/* Copy stored rows r0 .. r0+n-1 of shard s's FEATURES layout into dst (n *
 * row_bytes bytes), decoding chunks of a compressed shard through the cache.
 * Returns 0, -ENOMEM, CXS_E_CHECKSUM or CXS_E_CORRUPT (a damaged chunk:
 * zr->bad_chunk says which), CXS_E_TRUNCATED (the shard lost the bytes
 * since open: zr->bad_chunk, zr->bad_offset).  Plain shards: a bare copy
 * from the mapping, which the caller runs in a recovery region (fault.h). */
int cxs_read_rows(const cxs_dataset *ds, zreader *zr, uint32_t s, uint64_t r0, uint64_t n,
                  uint8_t *dst);
/* Decode chunk c of shard s into dst (max_chunk_bytes) with checksum check;
 * *n gets its decoded size.  No cache.  The mapping is read in a recovery
 * region (fault.h): CXS_E_TRUNCATED when the file lost the chunk's bytes,
 * zr->bad_offset the first it could not read. */
int cxs_decode_chunk(const cxs_dataset *ds, zreader *zr, uint32_t s, uint64_t c, uint8_t *dst,
                     size_t *n);
void cxs_zreader_free(zreader *zr);
int cxs_zcache_create(cxs_dataset *ds, uint64_t bytes);
void cxs_zcache_free(struct zcache *zc);
/* blocksums.c: the block sums of format 1.3 (spec section 4.8). */
/* Open's check of shard s's BLOCKSUMS, when it has one (spec section 8,
 * step 6 item 13): the section checksum, then its structure; fills
 * sh->bs.  0, CXS_E_CHECKSUM or CXS_E_CORRUPT. */
int cxs_shard_blocksums(cxs_dataset *ds, uint32_t s, cxs_diag *d);
/* A failed block: "SHARD: SECTION block J of N (file bytes A..B[, rows or
 * frames R0..R1]): checksum mismatch; it holds UTTERANCES" into d, with
 * the utterances the block holds bytes of for FEATURES, LABELS, INDEX and
 * SEQUENCES; returns CXS_E_CHECKSUM. */
int cxs_block_failed(const cxs_dataset *ds, uint32_t s, const cxs_bsum_entry *e, uint64_t j,
                     cxs_diag *d);
/* Check, against their sums, the blocks of entry e (of shard s) from
 * *next up to the block holding byte `upto - 1` of the section, reading
 * the mapping; *next moves past them.  The caller runs it in a recovery
 * region (fault.h).  0 or CXS_E_CHECKSUM (d says which block). */
int cxs_blocks_check_upto(const cxs_dataset *ds, uint32_t s, const cxs_bsum_entry *e,
                          uint64_t *next, uint64_t upto, cxs_diag *d);

/* warm.c: cxs_dataset_warm, with the block sums checked (sums = 1) or
 * not (the page loader's background warm, whose result nobody reads). */
int cxs_warm_impl(const cxs_dataset *ds, uint32_t flags, int sums, cxs_progress_fn progress,
                  void *user, cxs_warm_result *result, cxs_diag *d);

/* open_hint.c: a diagnostic (CXS_E_INVALID) for a path that is not a
 * dataset and holds no manifest.cxs, saying what it most likely is. */
int cxs_explain_not_dataset(const char *path, int path_is_dir, cxs_diag *d);

/* The last i < n with first[i] <= x (first[0] <= x, non-decreasing): the
 * shard holding an utterance or a frame, and the segment of an epoch's
 * plan holding a position (lib/order: a round, a group, a window). */
static inline uint64_t cxs_last_le(const uint64_t *first, uint64_t n, uint64_t x) {
    uint64_t lo = 0, hi = n;
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (first[mid] <= x) lo = mid;
        else hi = mid;
    }
    return lo;
}
/* Shard of utterance u (< U) and of frame f (< F). */
static inline uint32_t cxs_utt_shard(const cxs_dataset *ds, uint64_t u) {
    return (uint32_t)cxs_last_le(ds->shard_u0, ds->meta.num_shards, u);
}
static inline uint32_t cxs_frame_shard(const cxs_dataset *ds, uint64_t f) {
    return (uint32_t)cxs_last_le(ds->shard_f0, ds->meta.num_shards, f);
}

/* INDEX entry lu (<= the shard's U) of a shard, read from the mapping.
 * Always inside the section; its value is checked only once its block is
 * (cxs_utt_check, cxs_find_utt). */
static inline uint64_t cxs_index_at(const shard *sh, uint64_t lu) {
    return cxs_ld64(sh->index + 8 * lu);
}

/* Where utterance u is. */
typedef struct cxs_uloc {
    uint32_t shard;
    uint64_t lu;    /* shard-local number */
    uint64_t f0;    /* first frame, dataset numbering */
    uint64_t T;     /* frames */
    uint64_t row;   /* FEATURES row of its frame 0 in its shard */
} cxs_uloc;

/* The location of utterance u (< U) from its INDEX entries, unchecked:
 * call after cxs_utt_check (or a check of the whole INDEX) has passed. */
static inline cxs_uloc cxs_utt_at(const cxs_dataset *ds, uint64_t u) {
    cxs_uloc l;
    l.shard = cxs_utt_shard(ds, u);
    const shard *sh = &ds->shards[l.shard];
    l.lu = u - sh->u_start;
    uint64_t a = cxs_index_at(sh, l.lu), b = cxs_index_at(sh, l.lu + 1);
    l.f0 = sh->f_start + a;
    l.T = b - a;
    l.row = (uint64_t)ds->meta.guard * (l.lu + 1) + a;
    return l;
}
static inline uint64_t cxs_utt_frames(const cxs_dataset *ds, uint64_t u) {
    return cxs_utt_at(ds, u).T;
}
static inline uint64_t cxs_utt_first(const cxs_dataset *ds, uint64_t u) {
    return cxs_utt_at(ds, u).f0;
}

/* Check (once) the INDEX blocks that utterance u's entries lie in: 0, or
 * CXS_E_CHECKSUM / CXS_E_CORRUPT with d (may be NULL) naming the shard and
 * the block; CXS_E_TRUNCATED when the shard lost those bytes. */
int cxs_utt_check_slow(const cxs_dataset *ds, uint64_t u, cxs_diag *d);
static inline int cxs_table_done(const lazy_table *t, uint64_t block) {
    return t->all_done || (__atomic_load_n(&t->done[block >> 6], __ATOMIC_ACQUIRE) >> (block & 63) & 1);
}
static inline int cxs_utt_check(const cxs_dataset *ds, uint64_t u, cxs_diag *d) {
    if (!ds->lazy) return 0;
    return cxs_utt_check_slow(ds, u, d);
}
/* cxs_utt_check, then cxs_utt_at, in a recovery region (fault.h): for the
 * callers that are not in one. */
int cxs_utt_loc_safe(const cxs_dataset *ds, uint64_t u, cxs_uloc *l, cxs_diag *d);
/* Map every page of the INDEX sections at once (MADV_POPULATE_READ),
 * for what is about to look up frames or utterances all over them (a
 * loader): advice, nothing to report. */
void cxs_index_populate(const cxs_dataset *ds);
/* Check every INDEX block of the dataset (what a whole-epoch order needs
 * anyway): 0 or the first failure. */
int cxs_index_check_all(const cxs_dataset *ds, cxs_diag *d);
/* Every per-utterance check open would make on a shard without
 * BLOCKSUMS (INDEX, IDS and their order, SEQUENCES, the lengths against
 * STATS and SEQ_META), for verify. */
int cxs_tables_check_all(const cxs_dataset *ds, cxs_diag *d);
/* IDS of utterance u checked (its block and the bytes of its id), and its
 * id: 0 or as cxs_utt_check. */
int cxs_id_get(const cxs_dataset *ds, uint64_t u, const uint8_t **id, uint64_t *len,
               cxs_diag *d);
int cxs_id_get_in(const cxs_dataset *ds, uint32_t s, uint64_t lu, const uint8_t **id,
                  uint64_t *len, cxs_diag *d);
/* SEQUENCES of utterance u checked; its symbols' offsets [*a, *b). */
int cxs_seq_get(const cxs_dataset *ds, uint64_t u, uint64_t *a, uint64_t *b, cxs_diag *d);

/* Utterance holding frame (< num_frames), its INDEX entries checked: 0,
 * or as cxs_utt_check.  Reads the mapping: callers serving data run it in
 * a recovery region (fault.h). */
int cxs_find_utt_slow(const cxs_dataset *ds, uint32_t s, uint64_t lf, uint64_t *lu, cxs_diag *d);
static inline int cxs_find_utt_loc(const cxs_dataset *ds, uint64_t frame, cxs_uloc *out,
                                   cxs_diag *d) {
    uint32_t s = cxs_frame_shard(ds, frame);
    const shard *sh = &ds->shards[s];
    uint64_t lf = frame - sh->f_start, b = lf >> CXS_BUCKET_SHIFT;
    uint32_t lo1 = __atomic_load_n(&sh->bucket[b], __ATOMIC_RELAXED);
    uint32_t hi1 = __atomic_load_n(&sh->bucket[b + 1], __ATOMIC_RELAXED);
    uint64_t lu;
    if (!lo1 || !hi1) {
        int rc = cxs_find_utt_slow(ds, s, lf, &lu, d);
        if (rc) return rc;
    } else {
        const uint64_t U = sh->meta.num_utterances;
        uint64_t lo = lo1 - 1, hi = hi1; /* [bucket[b], bucket[b+1]] */
        if (hi > U) hi = U;
        /* Largest lu in [lo, hi) with INDEX[lu] <= lf. */
        while (hi - lo > 1) {
            uint64_t mid = lo + (hi - lo) / 2;
            if (cxs_index_at(sh, mid) <= lf) lo = mid;
            else hi = mid;
        }
        lu = lo;
        if (ds->lazy) {
            int rc = cxs_utt_check(ds, sh->u_start + lu, d);
            /* buckets found through a block not checked yet: search again */
            if (!rc && (cxs_index_at(sh, lu) > lf || cxs_index_at(sh, lu + 1) <= lf))
                rc = cxs_find_utt_slow(ds, s, lf, &lu, d);
            if (rc) return rc;
        }
    }
    out->shard = s;
    out->lu = lu;
    uint64_t a = cxs_index_at(sh, lu);
    out->f0 = sh->f_start + a;
    out->T = cxs_index_at(sh, lu + 1) - a;
    out->row = (uint64_t)ds->meta.guard * (lu + 1) + a;
    return 0;
}
/* cxs_find_utt_loc of n <= CXS_FIND_BATCH frames at once, their searches
 * interleaved (the gather's): 0, or as cxs_find_utt_loc for the first
 * that fails.  In a recovery region, like it. */
#define CXS_FIND_BATCH 64
int cxs_find_utts(const cxs_dataset *ds, const uint64_t *frames, size_t n, cxs_uloc *out,
                  cxs_diag *d);
/* cxs_find_utt_loc in a recovery region (fault.h), for callers outside one. */
int cxs_find_utt_safe(const cxs_dataset *ds, uint64_t frame, cxs_uloc *l, cxs_diag *d);
/* The utterance of a frame (for messages): UINT64_MAX when it cannot be
 * found (a damaged INDEX, a shard truncated since open). */
static inline uint64_t cxs_find_utt(const cxs_dataset *ds, uint64_t frame) {
    cxs_uloc l;
    if (cxs_find_utt_safe(ds, frame, &l, NULL)) return UINT64_MAX;
    return ds->shards[l.shard].u_start + l.lu;
}

/* First byte of FEATURES row t (may be negative, into the guard) of the
 * utterance at l. */
static inline const uint8_t *cxs_loc_row_ptr(const cxs_dataset *ds, const cxs_uloc *l, int64_t t) {
    const shard *sh = &ds->shards[l->shard];
    return sh->serve_features + (uint64_t)((int64_t)l->row + t) * ds->row_bytes;
}

static inline int cxs_bsrc_rows(const cxs_dataset *ds, uint32_t s, uint64_t r0, uint64_t n,
                                cxs_diag *d) {
    const shard *sh = &ds->shards[s];
    if (!sh->bc_feat) return 0;
    return cxs_bsrc_range(ds, s, sh->bc_feat, r0 * ds->row_bytes, (r0 + n) * ds->row_bytes, d);
}
static inline int cxs_bsrc_labels(const cxs_dataset *ds, uint32_t s, uint64_t f0, uint64_t n,
                                  cxs_diag *d) {
    const shard *sh = &ds->shards[s];
    if (!sh->bc_lab) return 0;
    const uint64_t w = sh->meta.label_width;
    return cxs_bsrc_range(ds, s, sh->bc_lab, f0 * w, (f0 + n) * w, d);
}

#endif
