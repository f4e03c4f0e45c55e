/* npy_raw.h - reading and validating a raw HW1P2-style dataset:
 * RAW/mfcc/<id>.npy and (optionally) RAW/transcript/<id>.npy, for
 * cxs_import_npy() (npy_import.c).  Internal to the library (and the fuzz
 * targets, which build npy_raw.c on its own).  Fallible calls return 0,
 * CXS_E_INPUT for input the rules refuse, or -errno for the machine's
 * failure, with d naming the file and the reason. */
#ifndef CXS_NPY_RAW_H
#define CXS_NPY_RAW_H

#include <stddef.h>
#include <stdint.h>

#include "cxs_format.h"

#define SOS_SYMBOL "[SOS]"
#define EOS_SYMBOL "[EOS]"

typedef struct vocab {
    uint32_t n;
    char **sym;
    uint32_t *lens;
    uint32_t *table; /* open addressing, index+1, 0 = empty */
    uint32_t mask;
    int64_t sos, eos; /* index of the start / end symbol, or -1 */
    char sos_name[CXS_MAX_SYMBOL_LEN + 1], eos_name[CXS_MAX_SYMBOL_LEN + 1]; /* [SOS], [EOS] */
} vocab;

/* A vocabulary of n symbols (cxs_phonemes(), or the caller's). */
int vocab_symbols(vocab *v, const char *const *sym, uint32_t n, cxs_diag *d);
/* One symbol per line; messages name the file. */
int vocab_load(vocab *v, const char *path, cxs_diag *d);
int64_t vocab_find(const vocab *v, const char *s, size_t n);
/* The symbols that open and close every transcript (--sos, --eos; NULL:
 * [SOS] and [EOS]): they must differ; they keep their indices when in the
 * vocabulary and are never frame labels.  0 or CXS_E_INVALID (d). */
int vocab_markers(vocab *v, const char *sos, const char *eos, cxs_diag *d);
void vocab_free(vocab *v);

/* One utterance of the listing. */
typedef struct raw_item {
    char *id;
    char *mfcc;       /* path, or NULL when only a transcript exists */
    char *transcript; /* path, or NULL */
} raw_item;

typedef struct raw_set {
    char *root;
    int has_transcripts;
    char *notes; /* warnings about the layout, one a line ("" when none) */
    size_t n;
    raw_item *items; /* sorted by id, byte order */
} raw_set;

/* List and pair the files.  Problems that concern the whole directory
 * (missing mfcc/, unreadable) fail; per-id problems (unpaired, duplicate,
 * odd names) are left for raw_item_problem().  What looks like a mistake
 * in the layout but leaves a valid dataset goes into rs->notes: a
 * subdirectory that is not read (named, with "did you mean transcript/?"
 * when it holds .npy files of the same ids or its name is close), no
 * transcript/ beside a RAW whose name does not say "test". */
int raw_list(const char *root, raw_set *rs, cxs_diag *d);
void raw_free(raw_set *rs);
/* A problem of the listing for item i (unpaired, duplicate id, odd name),
 * in d (CXS_E_INPUT); 0 when none. */
int raw_item_problem(const raw_set *rs, size_t i, cxs_diag *d);

/* Conversion options. */
typedef struct conv_opts {
    uint32_t dtype;     /* CXS_DTYPE_* stored */
    uint32_t normalize; /* CXS_NORM_* */
    const vocab *v;     /* NULL: features only */
    uint32_t transcripts; /* CXS_TRANSCRIPTS_* */
    int fill_nonfinite; /* NaN/infinite values stored as 0, counted in utt.filled */
} conv_opts;

/* An utterance read, validated and converted into its stored form. */
typedef struct utt {
    uint64_t T;
    uint64_t filled;     /* NaN/infinite values stored as 0 (fill_nonfinite) */
    uint64_t file_bytes; /* size of the features file read */
    uint32_t D;
    uint8_t *feat;     /* T*D stored elements */
    size_t feat_cap;
    uint8_t *labels;   /* T labels of label width */
    size_t labels_cap;
    uint8_t *seq;      /* seq_len symbols of label width (label sequences) */
    size_t seq_cap;
    uint64_t seq_len;
    double *sum, *sumsq; /* D each, over the stored values */
    size_t stat_cap;
    uint8_t *buf;      /* file read buffer, reused */
    size_t buf_cap;
    double *tmp;       /* per-utterance normalisation sums */
    size_t tmp_cap;
} utt;

/* Limits on raw files: they are read whole, so these bound memory. */
#define MAX_FEATURE_FILE (1ull << 30) /* 1 GiB: 9.6M frames of 28 float32 */
#define MAX_SYMBOL_CHARS 1024u

/*
 * Validate and convert a features file held in memory (buf, len) into u
 * (u->T, u->D, u->feat, u->sum, u->sumsq).  path names it in messages.
 * Returns 0, or an error with "path: reason" in d.
 */
int features_decode(utt *u, const uint8_t *buf, size_t len, const conv_opts *o, const char *path,
                    cxs_diag *d);

/*
 * Validate a transcript held in memory against u->T frames (the length
 * rule, [SOS]/[EOS], known symbols) into u->labels.  mfcc names the
 * features file in the length message.  Returns 0 or an error (d).
 */
int transcript_decode(utt *u, const uint8_t *buf, size_t len, const vocab *v, const char *path,
                      const char *mfcc, cxs_diag *d);
/*
 * Validate a label-sequence transcript (--transcripts sequence) held in
 * memory into u->seq and u->seq_len: any number of vocabulary symbols >= 1,
 * either bare or framed by [SOS] .. [EOS] (both, stripped), never [SOS] or
 * [EOS] inside.  Returns 0 or an error (d names path and the reason).
 */
int sequence_decode(utt *u, const uint8_t *buf, size_t len, const vocab *v, const char *path,
                    cxs_diag *d);
/* The label sequence of u's frame labels: every run of one label once
 * (--transcripts both).  0, or -ENOMEM. */
int sequence_from_frames(utt *u, const vocab *v);

/*
 * Read, validate and convert utterance i.  On a problem returns
 * CXS_E_INPUT with "path: reason" in d; -errno for a system error.
 */
int utt_load(utt *u, const raw_set *rs, size_t i, const conv_opts *o, cxs_diag *d);
void utt_free(utt *u);

/* Frames and width of item i from its features file's header alone (no
 * data read, nothing validated beyond the header).  Returns 0, or -1 with
 * *T = *D = 0 when the header cannot be read. */
int raw_probe(const raw_set *rs, size_t i, uint64_t *T, uint32_t *D);

#endif
