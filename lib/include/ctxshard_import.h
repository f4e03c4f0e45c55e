/**
 * @file ctxshard_import.h
 * ctxshard_import.h - importers of libctxshard: feature stores written by
 * other tools, turned into a packed dataset through the library's writer
 * (ctxshard_writer.h), which owns the shards, the statistics, the
 * checksums and the atomic commit.  `ctxshard import kaldi` and the Python
 * `ctxshard.import_kaldi` are clients of this API.  Return codes are those
 * of ctxshard.h.
 */
#ifndef CTXSHARD_IMPORT_H
#define CTXSHARD_IMPORT_H

#include "ctxshard_writer.h"

#ifdef __cplusplus
extern "C" {
#endif

/** A message for the user (a sorted listing, a skipped utterance, labels
 *  without features); the library never prints. */
typedef void (*cxs_note_fn)(void *user, const char *message);

/** cxs_kaldi_opts.flags: refuse a listing whose ids are not in byte order
 *  (with the command that sorts it) instead of sorting it. */
#define CXS_KALDI_NO_SORT 1u

/** Options of cxs_import_kaldi(); start from cxs_kaldi_opts_init(). */
typedef struct cxs_kaldi_opts {
    /** A Kaldi `text` file (`utt w1 w2 ...`, one utterance a line): stored
     *  as label sequences (no frame labels).  NULL: none. */
    const char *text;
    /** Per-frame alignments (`utt p1 p2 ... pT`, the text output of
     *  ali-to-phones --per-frame=true): stored as frame labels, T per
     *  utterance.  NULL: none.  At most one of text and ali. */
    const char *ali;
    /** The vocabulary of text or ali: a Kaldi symbol table (`symbol id`
     *  lines, ids 0..n-1: words.txt, phones.txt; integer tokens are ids,
     *  as ali-to-phones writes them) or one symbol per line (label = line
     *  number - 1).  NULL: built from the data and stored: the distinct
     *  tokens in byte order, or "0".."max" when every token is an integer
     *  (label = the integer). */
    const char *vocab;
    uint32_t flags;     /**< CXS_KALDI_* */
    cxs_note_fn note;   /**< messages (may be NULL) */
    void *note_user;
    /** A part of the import (`--part I/N`, 1 <= part <= parts; parts 0:
     *  the whole): the shards are planned from the objects' headers for
     *  the whole listing, as pack plans them, and this call writes the
     *  part-th of parts slices of whole shards (a partial dataset:
     *  part.cxs); `ctxshard merge` joins the N parts into the bytes of the
     *  whole import. */
    uint32_t part, parts;
    uint64_t reserved[CXS_OPTS_RESERVED]; /**< zero (start from cxs_kaldi_opts_init) */
} cxs_kaldi_opts;

/** What cxs_import_kaldi() did. */
typedef struct cxs_import_info {
    cxs_writer_info w;    /**< the dataset's counts (cxs_writer_commit) */
    uint64_t listed;      /**< utterances in the scp or archive */
    uint64_t input_bytes; /**< bytes of Kaldi objects read */
    uint32_t sorted;      /**< 1: the listing was not in byte order of ids and was sorted */
    uint32_t vocab_size;  /**< symbols of the stored vocabulary (0: none) */
    uint32_t kinds;       /**< object types met: bit 0 FM, 1 DM, 2 FV, 3 DV, 4 CM, 5 CM2, 6 CM3,
                               7 a text-form matrix */
    uint32_t pad;         /**< zero */
    uint64_t reserved[CXS_INFO_RESERVED]; /**< written as zero: later fields */
} cxs_import_info;

/** Fill o with the defaults: no labels, sort an unsorted listing. */
CXS_API void cxs_kaldi_opts_init(cxs_kaldi_opts *o);

/**
 * Import Kaldi features into a packed dataset at out.
 *
 * in is a feats.scp (`utt path.ark:offset` or `utt path` lines; paths
 * relative to the current directory, as Kaldi reads them; pipes are
 * refused) or a bare archive (.ark): named by its ending, by a Kaldi-style
 * "scp:" or "ark:" prefix, or else recognised by its bytes.  An scp entry
 * may end in Kaldi's range, `[R0:R1]` or `[R0:R1,C0:C1]` (":" for all):
 * the block of rows and columns Kaldi's ExtractObjectRange gives (a row
 * range may end at row rows + 2 at most and is cut at the last row, with
 * a note; other ranges outside the matrix are refused).  Objects are
 * binary (the "\0B" marker) FM, DM, FV, DV (a vector is one column) or the
 * compressed CM, CM2, CM3, decoded exactly as Kaldi decodes them into a
 * float matrix (double ones stay double until the writer rounds them to
 * the stored type), or text-form matrices (`[ 1 2 \n 3 4 ]`), read as
 * Kaldi's Matrix<float>::Read reads them (strtof in the C locale).
 * Utterances are taken in byte order of their ids: an unsorted listing is
 * sorted (info->sorted; CXS_KALDI_NO_SORT refuses it), a duplicate id is
 * refused naming both places.  A bare archive is indexed first (headers;
 * text objects are read to their ']') and then read in id order.
 *
 * wo->threads reader threads (0 or 1: none, the calling thread reads)
 * read, decode, label and convert utterances into a ring of 2N + 2 slots
 * ahead of the writer, which takes them in listing order: the output and
 * every note are the same for any count, and memory holds the utterances
 * of the ring, whatever the archive's size.
 *
 * wo gives the writer's options (start from cxs_writer_opts_init): dtype,
 * guard, shard size, normalisation, compression, threads (the reader
 * threads above, and the writer's compression threads), on_error_skip.
 * Its vocab, vocab_size, label_seqs and part are set here.  With
 * on_error_skip an utterance that cannot be read or labelled, or that the
 * writer refuses, is left out and listed in the dataset (and noted);
 * otherwise it fails the import and nothing is written.  Labels for
 * utterances the listing lacks are refused (noted and ignored with
 * on_error_skip).
 *
 * progress (may be NULL) is called after each utterance with the count
 * done and the total; non-zero stops the import.
 *
 * Returns 0 (info, may be NULL, filled); CXS_E_INPUT for input the rules
 * refuse (diag names the file, the line or offset, the utterance and the
 * reason); CXS_E_INVALID for bad arguments; -EEXIST when OUT is something
 * else than a dataset; -ECANCELED when progress stopped it; -errno for a
 * system failure.  On failure nothing is written and a previous dataset
 * at OUT is untouched.
 */
CXS_API int cxs_import_kaldi(const char *in, const char *out, const cxs_writer_opts *wo,
                             const cxs_kaldi_opts *ko, cxs_progress_fn progress, void *user,
                             cxs_import_info *info, cxs_diag *diag);

/**
 * Import an HDF5 file of features into a packed dataset at out (features
 * only).  Two layouts, told apart by what the file holds:
 * - one dataset per utterance (Lhotse's NumpyHdf5Writer): every dataset,
 *   in any group, is an utterance, its path without the leading '/' the
 *   id, its value [T, D] floating point (float16/32/64, any byte order; a
 *   1-D dataset is one column); taken in byte order of ids;
 * - concatenated: exactly the root datasets `features` [N, D], `offsets`
 *   [U + 1] (integers 0 .. N, non-decreasing) and `ids` [U] (strings, in
 *   byte order, each once).
 * Other files (other ranks, integer features, extra datasets beside
 * offsets) are refused naming the dataset.  wo is as for
 * cxs_import_kaldi(); note, progress and info likewise (may be NULL).
 *
 * Returns 0; CXS_E_INPUT for input the rules refuse (diag names the file,
 * the dataset and the reason); CXS_E_UNSUPPORTED when the library was
 * built without HDF5; otherwise as cxs_import_kaldi().  On failure nothing
 * is written.
 */
CXS_API int cxs_import_hdf5(const char *in, const char *out, const cxs_writer_opts *wo,
                            cxs_note_fn note, void *note_user, cxs_progress_fn progress,
                            void *user, cxs_import_info *info, cxs_diag *diag);

#ifdef __cplusplus
}
#endif

#endif
