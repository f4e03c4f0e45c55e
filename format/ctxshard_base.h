/**
 * @file ctxshard_base.h
 * ctxshard_base.h - what every layer of ctxshard shares: return codes, the
 * diagnostic type, the format version, the stored feature types and the
 * normalisation modes and the compression codes.  It lives with the format code (format/), the lowest
 * layer that produces these codes, and is installed with the public headers:
 * ctxshard.h includes it, so a user includes ctxshard.h, never this file
 * alone.
 */
#ifndef CTXSHARD_BASE_H
#define CTXSHARD_BASE_H

#if defined(CXS_BUILDING_LIBRARY) && defined(__GNUC__)
#define CXS_API __attribute__((visibility("default")))
#else
#define CXS_API
#endif

/* ---- the ABI's room to grow ------------------------------------------- */
/**
 * Every options struct the caller fills (cxs_*_opts) ends in
 * `uint64_t reserved[CXS_OPTS_RESERVED]`, and every struct the library
 * fills for the caller (cxs_info and the other *_info / result structs)
 * in `uint64_t reserved[CXS_INFO_RESERVED]`.  A later version adds fields
 * by taking them from that room, so the structs keep their size and a
 * program built against an older header keeps working with a newer
 * library: the reserved words it zeroed read as the new fields' value 0,
 * which is always their default.  The library refuses options whose
 * reserved words are not zero (CXS_E_INVALID: a program built against a
 * newer header, asking for something this library does not know), and
 * zeroes the reserved words of what it fills.  Start options from their
 * *_opts_init() function (or zero them: `= {0}`, designated initialisers).
 */
#define CXS_OPTS_RESERVED 4
#define CXS_INFO_RESERVED 8

/* ---- error codes ------------------------------------------------------ */
/**
 * Every function that can fail returns an int: 0, -errno for a failure of
 * the system (-ENOMEM, -ENOENT, ...), or one of these codes.  They are
 * stable: a code's number and meaning never change and none is reused;
 * new codes are added after the last, and a call documents which it may
 * return.  cxs_strerror() names any of them, and a cxs_diag says more.
 * Negative, and below -4095 so that they never collide with -errno.
 */
#define CXS_E_BAD_MAGIC   (-5001) /**< not a ctxshard file (or byte-swapped) */
#define CXS_E_VERSION     (-5002) /**< major version this reader does not know */
#define CXS_E_TRUNCATED   (-5003) /**< file shorter than its structures claim */
#define CXS_E_CORRUPT     (-5004) /**< structure violates the spec */
#define CXS_E_CHECKSUM    (-5005) /**< XXH3 of a header or section differs */
#define CXS_E_UNSUPPORTED (-5006) /**< valid but uses a feature not built in */
#define CXS_E_INVALID     (-5007) /**< bad argument from the caller */
#define CXS_E_RANGE       (-5008) /**< frame, utterance or index out of range */
#define CXS_E_INPUT       (-5009) /**< an input the writer refuses: an utterance, a part to merge (diag names it) */
#define CXS_E_DEVICE      (-5010) /**< a CUDA error (ctxshard_gpu.h; the message names it) */
#define CXS_E_NO_LABELS   (-5011) /**< labels asked of a features-only dataset (a test split) */
#define CXS_E_NO_SEQUENCES (-5012) /**< label sequences asked of a dataset without them */

/** Format version this library reads and writes (spec/format.md): it reads
 * every minor version of this major, and writes the lowest minor version a
 * file needs (1.4 for a dataset of a coded dtype, q8 or q16; else 1.3 for
 * a dataset with block sums, the default; without them 1.0 for an
 * uncompressed dataset, 1.1 for a compressed one, 1.2 for one with label
 * sequences). */
#define CXS_FORMAT_MAJOR 1
#define CXS_FORMAT_MINOR 4

/** Stored feature types. */
#define CXS_DTYPE_F32  1
#define CXS_DTYPE_F16  2
#define CXS_DTYPE_BF16 3
/** Coded types (format 1.4): Kaldi's compressed matrices, per-utterance
 * headers in the shard's QHEADERS section, decoded to float when read.
 * q8: one byte a value (Kaldi's kSpeechFeature, "CM"); q16: two bytes a
 * value (kTwoByteAuto, "CM2"). */
#define CXS_DTYPE_Q8   4
#define CXS_DTYPE_Q16  5

/** Compression of the feature sections (cxs_info.compression,
 * cxs_writer_opts.compression; on disk: DATASET_META offset 60 and the
 * CHUNKS codec, spec/format.md). */
#define CXS_COMPRESSION_NONE 0u
#define CXS_COMPRESSION_ZSTD 1u

/** Pack-time normalisation modes. */
#define CXS_NORM_NONE      0
#define CXS_NORM_UTTERANCE 1

/** cxs_diag.offset when the failure has no byte offset. */
#define CXS_NO_OFFSET UINT64_MAX

/**
 * A diagnostic: what a failed call returned and why.  Every fallible call
 * of the library takes one (a trailing `cxs_diag *diag`, NULL allowed) or,
 * for a handle's run-time failures, keeps one (cxs_loader_error,
 * cxs_utt_loader_error).  `message` is one line that names the file and
 * says what was expected ("shard-000003.cxs: utterance 19-198-0001, chunk
 * 12: the chunk fails its checksum ..."); `file` and `offset` say the same
 * for a program, where the failure has a place in a file of the dataset
 * (or of the input being written or imported).  Written only on failure.
 */
typedef struct cxs_diag {
    char message[1024];
    int32_t code;     /**< what the call returned (CXS_E_* or -errno) */
    uint32_t pad;
    uint64_t offset;  /**< byte offset in file, or CXS_NO_OFFSET */
    char file[1024];  /**< the file concerned ("" when none) */
    uint64_t reserved[CXS_INFO_RESERVED];
} cxs_diag;

#endif
