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
/** cxs_kaldi_opts.flags: with text or ali and no vocabulary, build the
 *  vocabulary from the labels themselves (the distinct tokens in byte
 *  order, or "0".."max" when every token is an integer).  Another split
 *  built this way may number its symbols differently: without this flag
 *  labels need a vocabulary (earlier versions built it unasked). */
#define CXS_KALDI_VOCAB_FROM_DATA 2u

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
     *  lines with ids 0..n-1, each once, as words.txt and phones.txt
     *  (`<eps> 0` first) are written; the label is the id, integer tokens
     *  are ids, as ali-to-phones writes them; a table whose ids leave a
     *  gap is refused, since renumbering would change what its integers
     *  mean) or one symbol per line (label = line number - 1; what
     *  `ctxshard vocab DATASET` prints; an integer token that is no
     *  symbol is a label here too).  NULL: the writer options' vocab list
     *  when it has symbols (label = position, integer tokens likewise),
     *  else CXS_KALDI_VOCAB_FROM_DATA must be set: labels without
     *  any of the three are refused (CXS_E_INVALID), so that no split is
     *  numbered by its own symbols unasked. */
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
    /* 0.3.0 (cxs_import_npy), in what were reserved words; zero from the
     * other importers. */
    uint64_t filled_values; /**< NaN or infinite values stored as 0 (CXS_NPY_FILL_NONFINITE) */
    uint64_t filled_utts;   /**< the utterances that held them */
    uint32_t shard_first;   /**< a part: the plan's shards it wrote, [shard_first, shard_end) */
    uint32_t shard_end;
    uint32_t shards_planned; /**< shards of the whole plan (a part's plan, or the whole pack's) */
    uint32_t has_labels;    /**< 1: RAW had a transcript/ directory */
    /** Format 1.4, cxs_import_kaldi into a coded dtype: utterances whose
     *  Kaldi codes were kept (CM into q8, CM2 into q16), and those encoded
     *  from their decoded values (any other object: FM, CM2 into q8 ...). */
    uint64_t codes_kept;
    uint64_t reencoded;
    uint64_t reserved[CXS_INFO_RESERVED - 6]; /**< written as zero: later fields */
} cxs_import_info;

/** Fill o with the defaults: no labels, sort an unsorted listing. */
CXS_API void cxs_kaldi_opts_init(cxs_kaldi_opts *o);

/**
 * Import Kaldi features into a packed dataset at out.
 *
 * in is a feats.scp (`utt path.ark:offset` or `utt path` lines; paths
 * relative to the current directory, as Kaldi reads them; pipes are
 * refused) or a bare archive (.ark): named by a Kaldi rspecifier
 * (`scp:FILE`, `ark:FILE`, with Kaldi's options: `ark,t:`, `scp,s,cs:`,
 * `ark,o:` ...), by a wspecifier `ark,scp:ARCHIVE,SCRIPT` (the archive is
 * read), by its ending, or else recognised by its bytes.  Of the options,
 * s (sorted) is checked: an unsorted listing is refused; p (permissive) is
 * refused (with on_error_skip bad utterances are left out and listed);
 * b, t, o, no, cs, ncs, ns, np, bg, f and nf change nothing (each object
 * says whether it is binary; every object is read once, in id order); any
 * other option is refused naming it.  A pipe (`ark:cmd |`), standard input
 * (`ark:-`) and a directory (a Kaldi data directory: its feats.scp is
 * named) are refused with what to give instead.  ko->text and ko->ali
 * take the same `ark[,OPTS]:FILE` form (an scp is refused).  An scp entry
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
 * Its vocab and vocab_size give the labels' vocabulary as a list (see
 * cxs_kaldi_opts.vocab); its label_seqs and part are set here.  With
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
 * reason); CXS_E_INVALID for bad arguments (labels without a vocabulary or
 * CXS_KALDI_VOCAB_FROM_DATA, two vocabularies); -EEXIST when OUT is something
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

/* ---- raw .npy directories (the HW1P2 layout) ---------------------------- */

/** cxs_npy_opts.transcripts: what RAW/transcript/<id>.npy holds. */
#define CXS_TRANSCRIPTS_FRAMES 0u   /**< [SOS], one symbol per frame, [EOS]: frame labels */
#define CXS_TRANSCRIPTS_SEQUENCE 1u /**< a label sequence of any length >= 1 (HW3P2) */
#define CXS_TRANSCRIPTS_BOTH 2u     /**< frame labels, and their runs as the label sequence */

/** cxs_npy_opts.flags: store NaN and infinite feature values as 0 and keep
 *  the utterance (each one said as a CXS_NPY_FILLED event). */
#define CXS_NPY_FILL_NONFINITE 1u

/** cxs_npy_event_fn kinds. */
#define CXS_NPY_PROBLEM 1 /**< an utterance the rules refuse: left out (on_error_skip), the one
                               that fails the pack (without on_error_skip), or, in a check,
                               found; d says where and why (code CXS_E_INPUT, or in a check
                               -errno when the machine failed to read it) */
#define CXS_NPY_FILLED 2  /**< count values of utterance id stored as 0; d->file is the file,
                               d->message "FILE: N NaN or infinite values stored as 0" */

/** What happened to one utterance (cxs_npy_opts.event), in id order. */
typedef void (*cxs_npy_event_fn)(void *user, int kind, const char *id, uint64_t count,
                                 const cxs_diag *d);

/** Options of cxs_import_npy(); start from cxs_npy_opts_init(). */
typedef struct cxs_npy_opts {
    /** The vocabulary of the transcripts: a file of one symbol per line.
     *  NULL: wo->vocab when it has symbols, else the standard 42-symbol
     *  phoneme list of HW1P2 (cxs_phonemes()).  Unused without
     *  transcript/. */
    const char *vocab_file;
    /** The symbols that open and close every transcript (NULL: [SOS] and
     *  [EOS]); they must differ, keep their indices when they are in the
     *  vocabulary, and are never frame labels. */
    const char *sos, *eos;
    uint32_t transcripts; /**< CXS_TRANSCRIPTS_* */
    uint32_t flags;       /**< CXS_NPY_* */
    /** A part (1 <= part <= parts; parts 0: the whole), as for
     *  cxs_kaldi_opts: the plan is made from every file's header, this
     *  call writes the part-th slice of whole shards. */
    uint32_t part, parts;
    uint32_t pad; /**< zero */
    /** Messages about the run that a quiet program may leave out (the
     *  widths of a mixed directory, a part's shard size, temporary
     *  directories of a killed pack removed). */
    cxs_note_fn note;
    /** Warnings that a program should always show: the layout looks
     *  mistaken (a directory that is not read, no transcript/ in a split
     *  not named as a test split), a part with nothing to pack. */
    cxs_note_fn warn;
    cxs_npy_event_fn event; /**< per-utterance events (may be NULL) */
    void *user;             /**< for note, warn and event */
    uint64_t reserved[CXS_OPTS_RESERVED]; /**< zero (start from cxs_npy_opts_init) */
} cxs_npy_opts;

/** Fill o with the defaults: the phonemes, [SOS] and [EOS], frame labels,
 *  the whole directory. */
CXS_API void cxs_npy_opts_init(cxs_npy_opts *o);

/** The standard 42-symbol phoneme list of HW1P2 ([SIL] AA AE ... ZH [SOS]
 *  [EOS]), the vocabulary of a raw directory without --vocab; *n gets its
 *  length.  Static storage. */
CXS_API const char *const *cxs_phonemes(uint32_t *n);

/**
 * Pack a raw directory in the HW1P2 layout, RAW/mfcc/<id>.npy ([T, D]
 * floating point, any byte order and memory order) and, when there are
 * labels, RAW/transcript/<id>.npy (strings or integers), into a dataset at
 * out: `ctxshard pack RAW OUT` and the Python `ctxshard.pack` are clients
 * of this call.
 *
 * Utterances are taken in byte order of their ids.  The shards are
 * planned before any data is read, from every features header: the
 * dataset's width is the most common one (a file of another width is a
 * problem of its own), and greedy shards of at most wo->shard_size (0: the
 * default, 1 GiB; with parts, a size chosen so that every part has about
 * the same work) are cut where a single pack would cut them, so that parts
 * (no->parts) merge into the same bytes.  wo->threads reader threads read, validate and convert
 * utterances ahead of the writer (and are its compression threads); the
 * output and every event are the same for any count.
 *
 * Problems of one utterance (an unpaired file, a bad header, a NaN, a
 * transcript of the wrong length or with an unknown symbol, a width not
 * the dataset's) fail the pack, with diag naming the file and the reason,
 * or with wo->on_error_skip leave the utterance out, listed in the
 * dataset, as a CXS_NPY_PROBLEM event.  A features-only directory that
 * lost utterances this way is the caller's to warn about (info->has_labels
 * 0, info->w.num_skipped): every later frame of a prediction shifts.
 *
 * out NULL checks instead of writing (`ctxshard check RAW`): every
 * utterance is read and validated as a pack would (wo gives threads only),
 * every problem is a CXS_NPY_PROBLEM event, and the call returns 0 when
 * the directory could be read, whatever it found: info->w.num_utterances
 * and num_frames count the valid utterances, num_skipped the problems,
 * dim the width.
 *
 * progress (may be NULL) is called after each utterance with the count
 * done and the total; non-zero stops the call (-ECANCELED).
 *
 * Returns 0 (info, may be NULL, filled); CXS_E_INPUT for input the rules
 * refuse (diag names the file and the reason; the directory itself:
 * missing mfcc/, no .npy files, a bad vocabulary file); -ENOENT or
 * -ENOTDIR when raw is not a directory; CXS_E_INVALID for bad arguments
 * (--sos equal to --eos, a bad part, reserved words); -EEXIST when OUT is
 * something else than a dataset; -ECANCELED; -errno for a system failure.
 * On failure nothing is written and a previous dataset at OUT is
 * untouched.
 */
CXS_API int cxs_import_npy(const char *raw, const char *out, const cxs_writer_opts *wo,
                           const cxs_npy_opts *no, cxs_progress_fn progress, void *user,
                           cxs_import_info *info, cxs_diag *diag);

#ifdef __cplusplus
}
#endif

#endif
