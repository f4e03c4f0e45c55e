/* kaldi.h - Kaldi's binary archive objects (the library's importer,
 * import_kaldi.c): the header of one object and its decoding into floats.
 *
 * Reference: Kaldi's src/base/io-funcs.cc and io-funcs-inl.h (the "\0B"
 * binary marker, tokens, ReadBasicType's size byte), src/matrix/
 * kaldi-matrix.cc and kaldi-vector.cc (Matrix::Read and Vector::Read of
 * FM, DM, FV, DV) and src/matrix/compressed-matrix.cc and .h
 * (CompressedMatrix::Read and CopyToMat of CM, CM2, CM3).  Only the
 * little-endian layout Kaldi writes on every machine it runs on. */
#ifndef CXS_KALDI_H
#define CXS_KALDI_H

#include <stddef.h>
#include <stdint.h>

#include "ctxshard_base.h"

enum {
    KALDI_FM = 0, /* float matrix */
    KALDI_DM,     /* double matrix */
    KALDI_FV,     /* float vector: one column */
    KALDI_DV,     /* double vector */
    KALDI_CM,     /* compressed, one byte per element, per-column headers */
    KALDI_CM2,    /* compressed, two bytes per element */
    KALDI_CM3,    /* compressed, one byte per element */
    KALDI_TXT,    /* a text-form matrix ("[ 1 2 \n 3 4 ]", ark,t) */
    KALDI_KINDS
};

/* Bytes of the longest object header: "\0B", "CM2 ", the 16-byte global
 * header. */
#define KALDI_MAX_HEAD 24u

typedef struct kaldi_hdr {
    uint32_t kind;
    uint64_t rows, cols;  /* a vector: rows = its size, cols = 1 */
    uint64_t head;        /* bytes from the marker to the first data byte */
    uint64_t size;        /* bytes of the whole object, marker included */
    float min, range;     /* CM, CM2, CM3: the global header */
} kaldi_hdr;

/* The token of a kind ("FM", "CM2", ...). */
const char *kaldi_kind_name(uint32_t kind);

/* Parse the object that starts at buf (n bytes available, at most what
 * the file holds from there).  Returns 0; CXS_E_TRUNCATED when n ends
 * inside the header; CXS_E_CORRUPT for anything else, d's message saying
 * what was found (the caller says where).  A text-form object (no binary marker, white space
 * then '[') is kind KALDI_TXT with head the offset of its '[' and rows,
 * cols and size 0: its extent and sizes are known only once it has been
 * read to its ']' (kaldi_text_end, kaldi_text_parse). */
int kaldi_parse(const uint8_t *buf, size_t n, kaldi_hdr *h, cxs_diag *d);

/* Whether the elements decode to double (DM, DV), else float. */
int kaldi_is_double(const kaldi_hdr *h);

/* Decode a whole object (h->size bytes at obj, parsed by kaldi_parse) into
 * out, rows x cols in C order: float for every kind but DM and DV, which
 * are copied as doubles.  Compressed kinds decode exactly as Kaldi's
 * CompressedMatrix::CopyToMat into a Matrix<float>. */
void kaldi_decode(const kaldi_hdr *h, const uint8_t *obj, void *out);

/* The end of a text-form object whose '[' is at buf[0]: the offset past
 * its ']' and the line end after it (none, "\n" or "\r\n", as Kaldi's
 * reader eats it), or 0 when buf (n bytes) holds no ']' yet.  more: bytes
 * follow buf in the file (a "\r" at the end may be the start of "\r\n"). */
size_t kaldi_text_end(const uint8_t *buf, size_t n, int more);

/* Read a text-form matrix (buf: n bytes from its '[' to the end that
 * kaldi_text_end found) as Kaldi's Matrix<float>::Read does in text mode
 * (src/matrix/kaldi-matrix.cc): the token "[" (or "[]", an empty matrix),
 * rows ended by a newline or ';', numbers read as a C++ stream reads a
 * float (the characters of a decimal number, then strtof in the C locale:
 * correctly rounded; out of float's range is an error), inf, infinity and
 * nan in any case, ']'.  Rows of different lengths are refused.  With out
 * NULL only *rows and *cols are set; else out gets rows x cols floats in
 * C order.  Returns 0, or CXS_E_CORRUPT with d's message saying what was
 * found and where (the byte offset from the '['). */
int kaldi_text_parse(const uint8_t *buf, size_t n, uint64_t *rows, uint64_t *cols, float *out,
                     cxs_diag *d);

#endif
