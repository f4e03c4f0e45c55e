/* cxs_qcodec.h - the coded feature types q8 and q16 (format 1.4,
 * spec/format.md §4.9): Kaldi's CompressedMatrix, bit for bit.
 *
 * q8 is Kaldi's kSpeechFeature method (its kOneByteWithColHeaders format,
 * the "CM" objects of `copy-feats --compress=true`): per utterance a
 * global min and range, per column four 16-bit percentile codes of that
 * range, one byte a value, piecewise linear between the percentiles.  q16
 * is Kaldi's kTwoByteAuto (the "CM2" objects): a min and a range, 16 bits
 * a value.  Reference: src/matrix/compressed-matrix.cc and
 * src/matrix/kaldi-matrix.cc (MatrixBase::Min and Max) of kaldi-asr/kaldi.
 *
 * The codes of an utterance are row-major (a row is D codes, a window a
 * contiguous run of them), little-endian for q16; its header is one
 * fixed-size entry of the shard's QHEADERS section:
 *
 *   q8:  f32 min, f32 range, then per column u16 p0, p25, p75, p100
 *        (8 + 8*D bytes: Kaldi's GlobalHeader less its format, rows and
 *        cols, then its PerColHeaders)
 *   q16: f32 min, f32 range (8 bytes)
 *
 * Every function here computes in float and double exactly where Kaldi's
 * code does, in the same order, without fused multiply-adds: encoding
 * gives the bytes Kaldi's CopyFromMat gives for a Matrix<float>, decoding
 * the floats its CopyToMat gives.  Pure functions of their arguments;
 * thread-safe. */
#ifndef CXS_QCODEC_H
#define CXS_QCODEC_H

#include <stddef.h>
#include <stdint.h>

#include "ctxshard_base.h"
#include "cxs_le.h"

/* Bytes of the q16 header; the q8 header is CXS_Q8_HEAD + 8 per column. */
#define CXS_Q16_HEADER 8u
#define CXS_Q8_HEAD 8u

/* Whether dtype is a coded type (q8 or q16). */
static inline int cxs_dtype_coded(uint32_t dtype) {
    return dtype == CXS_DTYPE_Q8 || dtype == CXS_DTYPE_Q16;
}

/* The guard rows a dataset of dtype stores for a requested guard: none
 * for a coded dtype (its reader pads every window itself, spec §4.9). */
static inline uint32_t cxs_stored_guard(uint32_t dtype, uint32_t guard) {
    return cxs_dtype_coded(dtype) ? 0 : guard;
}

/* Bytes of one utterance's header (H of the spec) for a coded dtype and
 * dim columns; 0 for any other dtype. */
static inline uint64_t cxs_q_header_size(uint32_t dtype, uint64_t dim) {
    return dtype == CXS_DTYPE_Q8 ? CXS_Q8_HEAD + 8 * dim : dtype == CXS_DTYPE_Q16 ? CXS_Q16_HEADER : 0;
}

/* Encode one utterance: n >= 1 rows of dim >= 1 floats, row r at
 * rows + r * stride (stride >= dim floats).  Writes the header
 * (cxs_q_header_size bytes) and the codes (n * dim bytes for q8, n * dim
 * little-endian u16 for q16), row-major.  q8 follows Kaldi's CopyFromMat
 * with kSpeechFeature for every n (Kaldi's automatic method would switch
 * to two bytes at n <= 8: this does not), q16 with kTwoByteAuto.
 * Returns 0; CXS_E_INPUT when a value is NaN or infinite, or when the
 * range (max - min, or Kaldi's 1 + |min| for a constant matrix) is not a
 * finite float, with *why (NULL allowed) set to a static sentence saying
 * which; CXS_E_INVALID for a dtype that is not coded or n or dim 0;
 * -ENOMEM.  Nothing is written on failure. */
int cxs_q_encode(uint32_t dtype, const float *rows, uint64_t n, uint64_t dim, uint64_t stride,
                 uint8_t *header, uint8_t *codes, const char **why);

/* The decoding of one q8 column: its four percentile values as floats
 * (Kaldi's Uint16ToFloat of p0, p25, p75, p100), computed once per
 * utterance and column. */
typedef struct cxs_q8_col {
    float p0, p25, p75, p100;
} cxs_q8_col;

/* Kaldi's Uint16ToFloat: min + range * 1.52590218966964e-05F * code, in
 * float, left to right.  Inline, as cxs_q8_col_make: a reader prepares a
 * q8 utterance's columns at every window that starts one (qdecode.c), a
 * loop the compiler vectorises only when it sees these. */
static inline float cxs_q_u16_to_float(float min, float range, uint16_t code) {
    const float a = range * 1.52590218966964e-05F;
    const float b = a * (float)code;
    return min + b;
}

/* One column's decoding from the global min and range and the column's 8
 * header bytes (u16 LE p0, p25, p75, p100). */
static inline cxs_q8_col cxs_q8_col_make(float min, float range, const uint8_t pct[8]) {
    cxs_q8_col c;
    c.p0 = cxs_q_u16_to_float(min, range, cxs_ld16(pct));
    c.p25 = cxs_q_u16_to_float(min, range, cxs_ld16(pct + 2));
    c.p75 = cxs_q_u16_to_float(min, range, cxs_ld16(pct + 4));
    c.p100 = cxs_q_u16_to_float(min, range, cxs_ld16(pct + 6));
    return c;
}

/* Every column of a q8 header (cxs_q_header_size(CXS_DTYPE_Q8, dim)
 * bytes): cols[0 .. dim). */
void cxs_q8_prepare(const uint8_t *header, uint64_t dim, cxs_q8_col *cols);

/* Kaldi's CharToFloat: the value of code in column c.  Its products are
 * float, its sums double, rounded to float once (spec §4.9.4). */
float cxs_q8_value(const cxs_q8_col *c, uint8_t code);

/* The 256 values of a column (table[v] = cxs_q8_value(c, v)): a decoder
 * that looks codes up instead of computing them. */
void cxs_q8_table(const cxs_q8_col *c, float table[256]);

/* q16: Kaldi's increment, (float)(range * (1.0 / 65535.0)) with the
 * product in double; a code v decodes as cxs_q16_value(min, inc, v). */
float cxs_q16_increment(float range);
static inline float cxs_q16_value(float min, float inc, uint16_t v) {
    /* float product then float sum, as Kaldi's CopyToMat; a fused
     * multiply-add would change the last bit */
    const float p = (float)v * inc;
    return min + p;
}

/* The global min and range of a header (either coded dtype). */
void cxs_q_header_minrange(const uint8_t *header, float *min, float *range);

/* The scalar reference decoder: n rows of codes (row-major, dim a row) of
 * one utterance whose header is header, into out (n * dim floats,
 * row-major).  Every decoder (vectorised, GPU) must give these bits. */
void cxs_q_decode_rows(uint32_t dtype, const uint8_t *header, uint64_t dim, const uint8_t *codes,
                       uint64_t n, float *out);

/* Whether a header can have come from the encoder (spec §4.9.2): min a
 * finite float, range finite and > 0, for q8 every column's percentiles
 * non-decreasing (p0 <= p25 <= p75 <= p100).  Returns 0, or CXS_E_CORRUPT
 * with why (len bytes, NUL-terminated) saying what is wrong ("column 3:
 * p25 41000 > p75 40000", "range -1 is not > 0"). */
int cxs_q_header_check(uint32_t dtype, const uint8_t *header, uint64_t dim, char *why, size_t len);

/* Rows [r0, r0 + nr) and columns [c0, c0 + nc) of Kaldi's "CM" object
 * body (after the token: f32 min, f32 range, i32 rows, i32 cols, the
 * column headers, the bytes column by column) of rows x cols, as a q8
 * header (of nc columns) and row-major codes: the same codes, transposed,
 * with their columns' headers.  No arithmetic: a code's value depends only
 * on its column's header, so the decoded values are what Kaldi reads of
 * the same range. */
void cxs_q8_from_kaldi_cm(const uint8_t *body, uint64_t rows, uint64_t cols, uint64_t r0,
                          uint64_t nr, uint64_t c0, uint64_t nc, uint8_t *header, uint8_t *codes);

/* The reverse: a q8 header and row-major codes as the body of a Kaldi
 * "CM" object (16 + 8 * cols + rows * cols bytes). */
void cxs_q8_to_kaldi_cm(const uint8_t *header, const uint8_t *codes, uint64_t rows, uint64_t cols,
                        uint8_t *body);

#endif
