/*
 * ctxshard.h - the public interface of libctxshard, the reader of packed
 * ctxshard datasets.
 *
 * A packed dataset is a directory holding one manifest and N shard files
 * (spec/format.md).  cxs_dataset_open() maps every file read-only and
 * validates the structure without touching per-frame data, so it takes
 * milliseconds at any dataset size.  After open, every function that takes a
 * `const cxs_dataset *` is thread-safe.
 *
 * Errors: functions return int, 0 on success, -errno for system failures
 * (-ENOMEM, -ENOENT, ...) and one of the CXS_E_* codes below for format and
 * argument errors.  cxs_strerror() names both.  Functions that can fail in
 * more ways than a code can say take an optional `cxs_diag *` as their last
 * argument and write a message there naming the file, the offset and what
 * was expected; pass NULL when you do not want it.  Results go out through
 * pointer arguments that are written only on success.
 *
 * Lifetime: pointers into the mapping (windows, labels, ids, vocabulary,
 * statistics) are read-only and stay valid until cxs_dataset_close().
 */
#ifndef CTXSHARD_H
#define CTXSHARD_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(CXS_BUILDING_LIBRARY) && defined(__GNUC__)
#define CXS_API __attribute__((visibility("default")))
#else
#define CXS_API
#endif

/* ---- error codes ------------------------------------------------------ */
/* Negative, and below -4095 so that they never collide with -errno. */
#define CXS_E_BAD_MAGIC   (-5001) /* not a ctxshard file (or byte-swapped) */
#define CXS_E_VERSION     (-5002) /* major version this reader does not know */
#define CXS_E_TRUNCATED   (-5003) /* file shorter than its structures claim */
#define CXS_E_CORRUPT     (-5004) /* structure violates the spec */
#define CXS_E_CHECKSUM    (-5005) /* XXH3 of a header or section differs */
#define CXS_E_UNSUPPORTED (-5006) /* valid but uses a feature not built in */
#define CXS_E_INVALID     (-5007) /* bad argument from the caller */
#define CXS_E_RANGE       (-5008) /* frame, utterance or index out of range */
#define CXS_E_INPUT       (-5009) /* a raw input file is invalid (packer) */

/* Format version this library writes and reads (spec/format.md). */
#define CXS_FORMAT_MAJOR 1
#define CXS_FORMAT_MINOR 0

/* Stored feature types. */
#define CXS_DTYPE_F32  1
#define CXS_DTYPE_F16  2
#define CXS_DTYPE_BF16 3

/* Pack-time normalisation modes. */
#define CXS_NORM_NONE      0
#define CXS_NORM_UTTERANCE 1

/* A diagnostic message: which file, where, what was expected. */
typedef struct cxs_diag {
    char message[1024];
} cxs_diag;

typedef struct cxs_dataset cxs_dataset;

/* Name of a return code (CXS_E_* or -errno).  Never NULL; static storage. */
CXS_API const char *cxs_strerror(int code);

/* Library version as "MAJOR.MINOR.PATCH"; static storage. */
CXS_API const char *cxs_version(void);

/* ---- open / close ----------------------------------------------------- */

/*
 * Open a packed dataset directory (or its manifest file).  Maps every shard
 * read-only, checks the header checksums, the section tables and every
 * structural rule of the spec that needs no per-frame work (O(shards +
 * utterances)).  Feature and label bytes are not hashed: cxs_dataset_verify()
 * does that.  On success *out owns the mapping; free it with
 * cxs_dataset_close().
 *
 * Returns 0, -errno (the directory or a shard cannot be opened or mapped),
 * CXS_E_BAD_MAGIC, CXS_E_VERSION, CXS_E_TRUNCATED, CXS_E_CORRUPT,
 * CXS_E_CHECKSUM or CXS_E_UNSUPPORTED.  diag may be NULL.
 */
CXS_API int cxs_dataset_open(const char *path, cxs_dataset **out, cxs_diag *diag);

/* Unmap and free.  NULL is a no-op.  Every pointer handed out dies here. */
CXS_API void cxs_dataset_close(cxs_dataset *ds);

/*
 * Progress callback for long operations: done and total in bytes.  Return
 * non-zero to stop the operation (it then returns -ECANCELED).
 */
typedef int (*cxs_progress_fn)(void *user, uint64_t done, uint64_t total);

/*
 * Re-hash every byte of every file against the stored XXH3 checksums and
 * check the rules open does not: zero padding and guard rows, labels below
 * the vocabulary size, finite features, utterance ids in strictly increasing
 * byte order across shards.  Stops at the first problem and describes it in
 * diag (file, section, offset).  Returns 0 when the dataset is intact,
 * CXS_E_CHECKSUM or CXS_E_CORRUPT otherwise.  progress may be NULL.
 */
CXS_API int cxs_dataset_verify(const cxs_dataset *ds, cxs_progress_fn progress,
                               void *user, cxs_diag *diag);

/* ---- description ------------------------------------------------------ */

typedef struct cxs_info {
    uint64_t num_frames;      /* frames of all utterances, guards excluded */
    uint64_t num_utterances;
    uint32_t num_shards;
    uint32_t dim;             /* D: features per frame */
    uint32_t dtype;           /* CXS_DTYPE_* of the stored features */
    uint32_t guard;           /* G: zero rows around every utterance */
    uint32_t vocab_size;      /* 0 for a features-only dataset */
    uint32_t label_width;     /* bytes per stored label: 0, 1 or 2 */
    uint32_t normalize;       /* CXS_NORM_* applied at pack time */
    uint32_t format_major;
    uint32_t format_minor;
    uint64_t shard_size;      /* --shard-size the dataset was packed with */
    uint64_t num_skipped;     /* utterances left out by --on-error skip */
    uint32_t on_error_skip;   /* 1 when packed with --on-error skip */
    uint64_t min_length;      /* shortest utterance, frames */
    uint64_t max_length;      /* longest utterance, frames */
    uint64_t total_bytes;     /* all files of the dataset */
} cxs_info;

/* Fill *info.  Cannot fail for an open dataset. */
CXS_API void cxs_dataset_info(const cxs_dataset *ds, cxs_info *info);

/*
 * Dataset statistics, computed at pack time over the stored feature values
 * (after conversion and normalisation) and the labels.  Arrays have dim
 * (mean, var) or vocab_size (label_counts) entries and point into the
 * mapping.  The variance is the population variance (divided by count).
 * Values are little-endian on disk; on a big-endian host these pointers are
 * NULL.  label_counts is NULL for a features-only dataset.
 */
typedef struct cxs_stats {
    uint64_t count;              /* frames the statistics cover */
    const double *mean;
    const double *var;
    const uint64_t *label_counts;
} cxs_stats;
CXS_API void cxs_dataset_stats(const cxs_dataset *ds, cxs_stats *stats);

/*
 * Vocabulary symbol i (0 <= i < vocab_size): *sym points into the mapping,
 * is not NUL-terminated and has *len bytes.  Returns 0 or CXS_E_RANGE.
 */
CXS_API int cxs_dataset_vocab(const cxs_dataset *ds, uint32_t i,
                              const char **sym, size_t *len);

/*
 * The skip report stored by `pack --on-error skip`: UTF-8 text, one line
 * per utterance left out, "id<TAB>reason\n".  *len is 0 when none.
 */
CXS_API void cxs_dataset_skipped(const cxs_dataset *ds, const char **text, size_t *len);

/* ---- utterances and frames ------------------------------------------- */

typedef struct cxs_utterance {
    const char *id;       /* not NUL-terminated; id_len bytes */
    size_t id_len;
    uint64_t first_frame; /* global frame number of the utterance's frame 0 */
    uint64_t num_frames;
    uint32_t shard;
    const void *features; /* num_frames * dim elements of the stored dtype */
    const void *labels;   /* num_frames labels of label_width bytes, or NULL */
} cxs_utterance;

/* Utterance u (0 <= u < num_utterances).  Returns 0 or CXS_E_RANGE. */
CXS_API int cxs_dataset_utterance(const cxs_dataset *ds, uint64_t u, cxs_utterance *out);

/*
 * Which utterance holds global frame `frame`, and the frame's offset in it.
 * O(log utterances).  Returns 0 or CXS_E_RANGE.
 */
CXS_API int cxs_dataset_locate(const cxs_dataset *ds, uint64_t frame,
                               uint64_t *utterance, uint64_t *offset);

/*
 * Zero-copy context window of frame `frame`: (2k+1)*dim contiguous stored
 * elements, rows frame-k .. frame+k of its utterance, zero rows where the
 * window passes the utterance's borders.  Needs k <= guard (CXS_E_RANGE
 * otherwise: use cxs_dataset_gather, which pads any k).  The pointer is
 * read-only and valid until close.
 */
CXS_API int cxs_dataset_window(const cxs_dataset *ds, uint64_t frame, uint32_t k,
                               const void **window);

/* Label (vocabulary index) of a frame.  CXS_E_RANGE, or CXS_E_INVALID on a
 * features-only dataset. */
CXS_API int cxs_dataset_label(const cxs_dataset *ds, uint64_t frame, uint32_t *label);

/*
 * Copy the windows of n frames as float32 into out[n][(2k+1)*dim], any k
 * (rows past the utterance borders are zero), and, when labels is not NULL,
 * their labels as int64 into labels[n].  Returns 0, CXS_E_RANGE (a frame
 * past the end; out is then partly written) or CXS_E_INVALID.
 */
CXS_API int cxs_dataset_gather(const cxs_dataset *ds, const uint64_t *frames, size_t n,
                               uint32_t k, float *out, int64_t *labels);

#ifdef __cplusplus
}
#endif
#endif /* CTXSHARD_H */
