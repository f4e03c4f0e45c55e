/**
 * @file ctxshard_writer.h
 * ctxshard_writer.h - the writer of libctxshard: a packed dataset built
 * from utterances held in memory, one at a time.
 *
 * Every byte of the format is written here: `ctxshard pack` (a directory
 * of .npy files), `ctxshard convert`, `ctxshard merge` (cxs_writer_merge)
 * and the Python `ctxshard.Writer` are clients of this API.  The writer applies the packer's rules: the feature
 * width is cxs_writer_opts.dim, or else fixed by the first utterance,
 * values must be finite once stored, labels must lie in the vocabulary,
 * ids must be 1..1024 bytes without control bytes and arrive in strictly
 * increasing byte order (an id out of order or repeated is refused with
 * CXS_E_INVALID, naming both ids: it is the caller's mistake, not a bad
 * utterance to skip, and the reader relies on the order).  Statistics (per-dimension mean and variance, label histogram)
 * are computed exactly as the packer computes them, so the same utterances
 * give byte-identical output whichever client wrote them.
 *
 * Output is atomic: everything is written into a temporary directory
 * beside OUT (".OUT.tmp-HOST-PID-XXXXXX"), fsynced, and renamed into place
 * by cxs_writer_commit(); a previous dataset at OUT is replaced only then.
 * An abort, a failed commit, a crash or a full disk leaves OUT as it was
 * (a temporary directory left by a killed process is removed by the next
 * writer of the same OUT on the same host).
 *
 * A rejected utterance (CXS_E_INPUT, the id and the reason in diag) leaves
 * the writer as it was: the caller may skip it (cxs_writer_skip() records
 * it in the dataset) or abort.  A writer is not thread-safe: one thread at
 * a time.  Return codes are those of ctxshard.h.
 */
#ifndef CTXSHARD_WRITER_H
#define CTXSHARD_WRITER_H

#include "ctxshard.h"

#ifdef __cplusplus
extern "C" {
#endif

/** A dataset being written (opaque). */
typedef struct cxs_writer cxs_writer;

/** Input element type of cxs_writer_utt.type beyond the stored types
 *  (CXS_DTYPE_F32, CXS_DTYPE_F16, CXS_DTYPE_BF16): float64, never stored.
 *  Its number is CXS_DTYPE_Q8's, a stored type that is an input type only
 *  for stored coded values (cxs_writer_utt.stored): the two never meet. */
#define CXS_DTYPE_F64 4

/** Defaults of cxs_writer_opts_init(). */
#define CXS_WRITER_DEFAULT_GUARD 64u
#define CXS_WRITER_DEFAULT_SHARD_SIZE (1ull << 30)
#define CXS_WRITER_MIN_SHARD_SIZE (16ull << 10)
#define CXS_WRITER_DEFAULT_LEVEL 3
#define CXS_WRITER_DEFAULT_CHUNK_SIZE (64ull << 10)
#define CXS_WRITER_MAX_THREADS 256u

/** cxs_writer_opts.flags: shards end only at cxs_writer_cut() (a client
 *  that plans its shards itself); shard_size is then only recorded. */
#define CXS_WRITER_MANUAL_CUT 1u
/** cxs_writer_opts.flags: no BLOCKSUMS section (format 1.3): the shards
 *  then carry one checksum per section, as format 1.2 writers write them,
 *  and damage to the features can be detected but not located.  Without
 *  the flag (the default) every shard's FEATURES and LABELS get a checksum
 *  per 64 KiB block and INDEX, IDS and SEQUENCES one per 4 KiB, which
 *  `verify`, `warm` and the block sampler's reader check. */
#define CXS_WRITER_NO_BLOCK_SUMS 2u

/**
 * A part of a dataset split into N slices (`ctxshard pack --part I/N`):
 * the writer writes part.cxs (spec "Partial datasets") instead of a
 * manifest, numbering shards, utterances and frames from the slice's
 * start.  The fields describe the client's shard plan, recorded so that
 * `ctxshard merge` can check that the parts belong together.
 */
typedef struct cxs_writer_part {
    uint32_t part, parts;           /**< 1 <= part <= parts */
    uint32_t first_shard, end_shard; /**< this slice's shards of the plan */
    uint32_t total_shards;           /**< shards of the whole plan */
    uint64_t first_utterance;        /**< listed items before the slice */
    uint64_t first_frame;            /**< frames before the slice */
    uint64_t listed;                 /**< items of the whole listing */
    uint64_t first_item, end_item;   /**< the slice's items of the listing */
    uint64_t input_hash;             /**< the client's hash of its listing */
} cxs_writer_part;

/** cxs_writer_opts.label_seqs: which labels every utterance carries. */
#define CXS_SEQ_NONE 0u        /**< per-frame labels only (the default) */
#define CXS_SEQ_WITH_FRAMES 1u /**< per-frame labels and a label sequence */
#define CXS_SEQ_ONLY 2u        /**< a label sequence, no per-frame labels */

/** Options of cxs_writer_create(); start from cxs_writer_opts_init(). */
typedef struct cxs_writer_opts {
    uint32_t dtype;       /**< stored CXS_DTYPE_F32 (default), F16 or BF16, or a
                               coded CXS_DTYPE_Q8 or Q16 (format 1.4: each
                               utterance coded as Kaldi's CompressedMatrix
                               codes it, after normalize; statistics of the
                               decoded values; guard is then 0, whatever
                               was asked) */
    uint32_t guard;       /**< zero rows around utterances, 0..4096 (64) */
    uint64_t shard_size;  /**< largest shard file in bytes, >= 16 KiB (1 GiB);
                               a longer single utterance gets its own shard */
    uint32_t normalize;   /**< CXS_NORM_NONE (default) or CXS_NORM_UTTERANCE */
    uint32_t compression; /**< CXS_COMPRESSION_NONE (default) or _ZSTD */
    int32_t level;        /**< zstd level 1..19 (3) */
    uint64_t chunk_size;  /**< decoded bytes per chunk, whole rows (64 KiB) */
    uint32_t shuffle;     /**< byte-shuffle filter before zstd (1) */
    uint32_t vocab_size;  /**< symbols in vocab; 0: features only */
    const char *const *vocab; /**< vocab_size NUL-terminated symbols, copied */
    uint32_t on_error_skip; /**< recorded: the source leaves bad utterances
                                 out (cxs_writer_skip) rather than failing */
    uint32_t flags;       /**< CXS_WRITER_* */
    const cxs_writer_part *part; /**< NULL: a whole dataset */
    uint32_t threads;     /**< compression threads: 0 or 1 compress in the
                               calling thread; N > 1 start N workers (chunks
                               come back in order: the same bytes for any N;
                               at most CXS_WRITER_MAX_THREADS) */
    uint32_t label_seqs;  /**< CXS_SEQ_*: label sequences (format 1.2; they
                               need a vocabulary).  CXS_SEQ_NONE writes
                               exactly the bytes of earlier versions */
    uint32_t dim;         /**< features per frame, 1..65536, fixed up front:
                               an utterance of another width is refused
                               (CXS_E_INPUT); 0 (default): the first
                               utterance added fixes it */
    uint64_t reserved[CXS_OPTS_RESERVED]; /**< zero (start from cxs_writer_opts_init) */
} cxs_writer_opts;

/** One utterance for cxs_writer_add(). */
typedef struct cxs_writer_utt {
    const void *data;     /**< element (t, d) at data + t*row_stride + d*col_stride */
    uint64_t frames;      /**< T >= 1 */
    uint64_t dim;         /**< D, 1..65536, equal for every utterance */
    uint32_t type;        /**< CXS_DTYPE_F32, F16, BF16 or F64 */
    uint32_t big_endian;  /**< elements are big-endian (else little-endian) */
    int64_t row_stride;   /**< bytes between frames; 0 with col_stride 0: C order */
    int64_t col_stride;   /**< bytes between dimensions */
    /** Labels, one per frame (count == frames), or the HW1P2 transcript
     *  form (count == frames + 2: [SOS], one per frame, [EOS], checked and
     *  stripped).  NULL with count 0 on a features-only dataset. */
    const void *labels;
    uint64_t label_count;
    uint32_t label_size;  /**< bytes per label in host order: 1, 2 (unsigned),
                               4 or 8 (signed) */
    uint32_t stored;      /**< 1: data already holds the stored values
                               (the dataset's dtype, normalised when it
                               normalises, little-endian, C order): taken as
                               they are, still checked finite.  A coded
                               dataset (q8, q16) with type its dtype: data
                               holds the utterance's header
                               (8 + 8*dim bytes for q8, 8 for q16), then its
                               codes row-major (spec §4.9: an importer that
                               keeps Kaldi's codes), the header checked as
                               verify checks it (CXS_E_INPUT).  On any
                               dataset, type F32, F16 or BF16 other than
                               its dtype: float values already normalised,
                               converted (spec 7.1) or coded as they are */
    /** The label sequence (label_seqs != CXS_SEQ_NONE): vocabulary indices,
     *  any number >= 1, not tied to the frames (HW3P2's transcripts).  Either
     *  bare (p1 .. pn) or framed ([SOS] p1 .. pn [EOS]: both markers, checked
     *  and stripped; a sequence that starts with [SOS] and does not end with
     *  [EOS], or the reverse, is refused).  [SOS] and [EOS] never occur
     *  inside.  NULL with seq_count 0 when the dataset has none. */
    const void *seq;
    uint64_t seq_count;
    uint32_t seq_size;    /**< bytes per element, as label_size */
} cxs_writer_utt;

/** Counts of a writer so far (cxs_writer_info) or of the committed dataset. */
typedef struct cxs_writer_info {
    uint64_t num_utterances; /**< added */
    uint64_t num_frames;
    uint64_t num_skipped;    /**< recorded by cxs_writer_skip */
    uint32_t num_shards;     /**< finished shards */
    uint32_t dim;            /**< 0 until the first utterance */
    uint64_t bytes_written;  /**< bytes of finished files */
    uint64_t feature_bytes;  /**< bytes of finished feature sections (stored) */
    uint32_t stale_removed;  /**< temporary directories of killed writers removed */
    uint64_t reserved[CXS_INFO_RESERVED]; /**< written as zero: later fields */
} cxs_writer_info;

/** Fill o with the defaults (float32, guard 64, 1 GiB shards, no
 *  compression, level 3, 64 KiB chunks, shuffle on, no vocabulary). */
CXS_API void cxs_writer_opts_init(cxs_writer_opts *o);

/**
 * Start a dataset at out.  Checks the options and OUT: OUT may be absent,
 * an empty directory, or a previous dataset (a directory holding
 * manifest.cxs, or part.cxs for a part), which is replaced at commit.
 * Removes the temporary directories that killed writers of OUT on this
 * host left, then creates this writer's.  On success *w owns it.
 *
 * Returns 0; CXS_E_INVALID for a bad option; -EEXIST when OUT is something
 * else (nothing is touched); -errno when OUT cannot be examined or the
 * temporary directory cannot be made.  diag says which.
 */
CXS_API int cxs_writer_create(const char *out, const cxs_writer_opts *opts, cxs_writer **w,
                              cxs_diag *diag);

/**
 * Validate, convert and append one utterance (into the current shard, or
 * a new one when it would pass shard_size).  The id is a NUL-terminated
 * string.  Conversion to the stored type rounds to nearest even from the
 * input value; CXS_NORM_UTTERANCE stores (x - mean) / std per dimension
 * (std 1 for a constant dimension), like the packer.
 *
 * Returns 0; CXS_E_INPUT for an utterance the rules refuse ("ID: reason"
 * in diag; the writer is unchanged and stays usable); CXS_E_INVALID for a
 * bad argument; -errno (-ENOSPC, -EIO, -ENOMEM) for a system failure,
 * after which the writer can only be aborted.  A shard's bytes reach its
 * file a megabyte at a time, so a failure of the disk shows at the add
 * that fills the buffer, or at cxs_writer_commit(), not necessarily at
 * the add whose bytes it concerns.
 */
CXS_API int cxs_writer_add(cxs_writer *w, const char *id, const cxs_writer_utt *u,
                           cxs_diag *diag);

/**
 * Add n utterances in order: ids[i] with utts[i], exactly as n calls of
 * cxs_writer_add() would (the same checks, the same bytes), in one call;
 * for callers whose cost per call matters (the Python Writer's add_many,
 * millions of utterances of a few frames).
 *
 * Stops at the first utterance that is not added and returns
 * cxs_writer_add()'s code for it, with its diag; the utterances before it
 * are in the dataset.  *added (may be NULL) is written whatever the
 * outcome: how many were added, which is the index of the one that failed
 * (so that a caller can skip it after CXS_E_INPUT, which leaves the writer
 * usable, and go on from the next).  n == 0 adds nothing and returns 0.
 *
 * Returns 0 when all n were added; CXS_E_INPUT, CXS_E_INVALID or -errno
 * as cxs_writer_add() (CXS_E_INVALID also for NULL ids or utts with
 * n > 0).
 */
CXS_API int cxs_writer_add_many(cxs_writer *w, const char *const *ids,
                                const cxs_writer_utt *utts, size_t n, size_t *added,
                                cxs_diag *diag);

/**
 * Record that utterance id was left out for a reason (one line of the
 * dataset's SKIPPED list: `ctxshard info` shows it).  Returns 0, -ENOMEM,
 * or CXS_E_INVALID when id is empty or holds a control byte, or reason
 * holds a TAB, LF or CR (either would forge lines of the list: one line
 * per utterance, id TAB reason LF); nothing is recorded then.
 */
CXS_API int cxs_writer_skip(cxs_writer *w, const char *id, const char *reason);

/**
 * End the current shard now: the next utterance starts a new one (needed
 * only with CXS_WRITER_MANUAL_CUT).  No-op when no shard is open.  Returns
 * 0 or -errno.
 */
CXS_API int cxs_writer_cut(cxs_writer *w, cxs_diag *diag);

/** Counts so far into *info.  Returns 0. */
CXS_API int cxs_writer_info_get(const cxs_writer *w, cxs_writer_info *info);

/**
 * Finish: the last shard, the manifest (or part.cxs), fsync, and the
 * rename into place.  Frees the writer whatever the outcome; on failure
 * nothing is left behind and a previous dataset at OUT is untouched.
 * info (may be NULL) gets the final counts on success.
 *
 * What OUT holds is looked at again here, not only at create: an OUT
 * that is no longer a dataset (replaced meanwhile by another directory)
 * is left alone and the answer is -EEXIST ("OUT: exists and is not a
 * ctxshard dataset (no manifest.cxs): it changed since the writer was
 * created; left alone, nothing written").
 *
 * Returns 0; CXS_E_INVALID when no utterance was added to a whole dataset;
 * -EEXIST as above; -errno (-ENOSPC, -EIO, ...) when writing or renaming
 * failed.
 */
CXS_API int cxs_writer_commit(cxs_writer *w, cxs_writer_info *info, cxs_diag *diag);

/** Discard everything written and free the writer.  NULL is a no-op. */
CXS_API void cxs_writer_abort(cxs_writer *w);

/** What cxs_writer_merge() did. */
typedef struct cxs_merge_info {
    cxs_writer_info w;       /**< the merged dataset's counts */
    uint32_t shards_linked;  /**< shard files hard-linked from the parts */
    uint32_t shards_copied;  /**< copied: renumbered, or across filesystems */
    uint64_t reserved[CXS_INFO_RESERVED]; /**< written as zero: later fields */
} cxs_merge_info;

/**
 * Merge the parts of a dataset written in N slices (`ctxshard pack --part
 * I/N`, or writers with cxs_writer_opts.part) into one dataset at out,
 * byte-identical to the dataset one writer would have written from the
 * whole input.  parts are N directories, each holding part.cxs and its
 * shards, in any order; all N are needed.
 *
 * The parts must come from one run over the same input: same number of
 * parts, version, listing, options, compression options, vocabulary and
 * feature width, with shard ranges that follow on; each part.cxs and each
 * shard's header and SHARD_META are checked against what its part says.
 * A shard file that already carries its final numbering is hard-linked
 * into OUT (the parts then share it), otherwise copied with its
 * SHARD_META and header renumbered; the parts are never modified.  The
 * statistics are added from the parts' exact sums.  OUT is treated as by
 * cxs_writer_create() and written as by cxs_writer_commit(): temporary
 * directory, fsync, rename; on any failure nothing is left behind and a
 * previous dataset at OUT is untouched.
 *
 * progress (may be NULL) is called before each shard with the shards
 * placed so far and the total; non-zero stops the merge.  info (may be
 * NULL) gets the counts on success.
 *
 * Returns 0; CXS_E_INPUT when the parts do not belong together or one is
 * damaged or missing (diag names the part and the reason); -EEXIST when
 * OUT is something else; -ECANCELED when progress stopped it;
 * CXS_E_INVALID for bad arguments; -errno (-ENOSPC, -EIO, ...) when
 * reading, writing or renaming failed.
 */
CXS_API int cxs_writer_merge(const char *const *parts, uint32_t nparts, const char *out,
                             cxs_progress_fn progress, void *user, cxs_merge_info *info,
                             cxs_diag *diag);

#ifdef __cplusplus
}
#endif

#endif
