/* dataset_internal.h - the open dataset, shared by the library's own
 * sources (never installed). */
#ifndef CXS_DATASET_INTERNAL_H
#define CXS_DATASET_INTERNAL_H

#include <stdint.h>
#include <stdlib.h>

#include "ctxshard.h"
#include "cxs_format.h"
#include "cxs_le.h"
#include "cxs_zchunk.h"

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
    cxs_blocksums bs;          /* BLOCKSUMS (format 1.3); bs.n == 0 without */
} shard;

/* Label i of a shard's LABELS: one byte, or two little-endian. */
static inline uint32_t cxs_shard_label(const shard *sh, uint64_t i) {
    return sh->meta.label_width == 1 ? sh->labels[i] : cxs_ld16(sh->labels + 2 * i);
}

struct zcache;

/* The frame -> utterance lookup jumps to a bucket of 2^CXS_BUCKET_SHIFT
 * frames first, then searches the few utterances that meet the bucket. */
#define CXS_BUCKET_SHIFT 12

struct cxs_dataset {
    char *manifest_path;  /* or the shard's path when single_shard */
    int single_shard;
    const uint8_t *map;   /* the manifest (like a shard's map, size) */
    uint64_t size;
    cxs_container mc;
    cxs_dataset_meta meta;
    shard *shards;
    uint64_t *cum;        /* first frame of every utterance, U+1 entries */
    uint32_t *utt_shard;  /* shard of every utterance */
    uint64_t *row;        /* FEATURES row of every utterance's frame 0 */
    uint32_t *bucket;     /* first utterance meeting each bucket of frames */
    const uint8_t *vocab;
    const uint8_t *stats; /* NULL for a single shard */
    const char *skipped;
    uint64_t skipped_len;
    size_t esize;
    uint64_t total_bytes;
    uint64_t min_len, max_len;
    /* Read-time normalisation constants (spec section 7.4) from the stored
     * statistics, dim each; NULL without statistics. */
    double *norm_mean, *norm_scale;
    uint64_t row_bytes;       /* dim * esize */
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
};

/* Whether the shards hold ZFEATURES (format 1.1) rather than FEATURES. */
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

/* The options a sampler was created with (kind, seed, rank, world size). */
const cxs_sampler_opts *cxs_sampler_options(const cxs_sampler *s);
/* Global position (within the epoch, padding wrapped) of this rank's
 * position pos. */
uint64_t cxs_sampler_global(const cxs_sampler *s, uint64_t pos);
/* The block schedule of a block sampler, NULL for other kinds. */
struct cxs_block_sched *cxs_sampler_blocks(const cxs_sampler *s);

/* Utterance holding frame (< num_frames). */
static inline uint64_t cxs_find_utt(const cxs_dataset *ds, uint64_t frame) {
    uint64_t b = frame >> CXS_BUCKET_SHIFT;
    uint64_t lo = ds->bucket[b], hi = ds->bucket[b + 1] + 1;
    if (hi > ds->meta.num_utterances) hi = ds->meta.num_utterances;
    /* Largest u in [lo, hi) with cum[u] <= frame. */
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (ds->cum[mid] <= frame) lo = mid;
        else hi = mid;
    }
    return lo;
}

/* First byte of FEATURES row t (may be negative, into the guard) of
 * utterance u. */
static inline const uint8_t *cxs_row_ptr(const cxs_dataset *ds, uint64_t u, int64_t t) {
    const shard *sh = &ds->shards[ds->utt_shard[u]];
    return sh->features + (uint64_t)((int64_t)ds->row[u] + t) * ds->meta.dim * ds->esize;
}

/* The normalisation constants of spec section 7.4 for `norm` (NULL: the
 * dataset's own statistics): mean[d] = the mean, scale[d] = 1 / sqrt(var)
 * in binary64, or 1 when var is 0.  *out is malloc'd, 2*dim doubles (means
 * then scales).  CXS_E_INVALID when norm does not fit ds (dim, NULL
 * arrays, a mean or variance not finite, a negative variance) or ds has no
 * statistics; -ENOMEM.  d (may be NULL) says which. */
int cxs_norm_constants(const cxs_dataset *ds, const cxs_norm *norm, double **out, cxs_diag *d);

/* What one thread keeps from gather to gather (a loader's worker): a way
 * to stop early -- cancelled(arg), when set, is asked before every few
 * dozen windows, and a true answer ends the gather with -ECANCELED, the
 * output half-written -- and, for compressed data, its decoder and buffers,
 * set up once rather than for every call.  Zeroed = nothing yet; freed with
 * cxs_gather_ctx_free. */
typedef struct cxs_gather_ctx {
    int (*cancelled)(void *arg);
    void *arg;
    zreader zr;
    uint8_t *stage;     /* compressed: the real rows of one window */
    size_t stage_bytes;
} cxs_gather_ctx;
void cxs_gather_ctx_free(cxs_gather_ctx *c);

/* cxs_dataset_gather with explicit constants: mean/scale NULL means no
 * normalisation.  ctx NULL: no early end, scratch of this call's own; with
 * a ctx, threads must be 1 (it is one thread's).  A failure in the data
 * (CXS_E_TRUNCATED: the shard lost bytes since open; CXS_E_CHECKSUM or
 * CXS_E_CORRUPT: a damaged chunk, a label outside the vocabulary) gets a
 * message in d (may be NULL) naming the shard, the utterance and the
 * chunk (fault.h). */
int cxs_gather_impl(const cxs_dataset *ds, const uint64_t *frames, size_t n, uint32_t k,
                    const double *mean, const double *scale, unsigned threads, float *out,
                    int64_t *labels, cxs_gather_ctx *ctx, cxs_diag *d);

#endif
