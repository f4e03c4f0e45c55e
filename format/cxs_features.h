/* cxs_features.h - conversion of one utterance's features into their
 * stored form (spec "Stored features"): type conversion, pack-time
 * normalisation, the finiteness rule and the per-dimension sums the
 * statistics are built from.  Shared by the writer (lib/write/writer.c) and the
 * packer's reader threads (lib/import/npy_raw.c), so both store the same bytes and
 * sum the same values. */
#ifndef CXS_FEATURES_H
#define CXS_FEATURES_H

#include <stddef.h>
#include <stdint.h>

#include "ctxshard_base.h"

/* Input element types: the stored ones (1 f32, 2 f16, 3 bf16) and f64. */
#define CXS_IN_F32 1u
#define CXS_IN_F16 2u
#define CXS_IN_BF16 3u
#define CXS_IN_F64 4u

/* A [T, D] matrix of floats somewhere in memory: element (t, d) at
 * data + t*row_stride + d*col_stride (bytes), of type `type`, little- or
 * big-endian. */
typedef struct cxs_fsrc {
    const uint8_t *data;
    uint64_t T, D;
    uint32_t type;
    int big_endian;
    int64_t row_stride, col_stride;
} cxs_fsrc;

/* Bytes per element of an input type (0 when unknown). */
size_t cxs_in_size(uint32_t type);

/*
 * Convert s into dst (T*D elements of the stored dtype, little-endian, C
 * order), normalising per utterance when normalize is CXS_NORM_UTTERANCE,
 * and add every stored value (as a double) into sum[d] and its square into
 * sumsq[d], frame by frame (sum and sumsq: D doubles each, zeroed here).
 * tmp: 2*D doubles of scratch.  flags: CXS_FEAT_*; *filled (may be NULL)
 * counts the values CXS_FEAT_FILL_NONFINITE stored as 0.  Returns 0, or
 * CXS_E_INPUT with the reason in d (NULL allowed: "NaN at frame 5,
 * dimension 2", "value 1e+06 at frame 0, dimension 1 overflows f16"),
 * without a file name: the caller adds it.
 */
int cxs_features_convert(const cxs_fsrc *s, uint32_t dtype, uint32_t normalize, uint32_t flags,
                         uint8_t *dst, double *sum, double *sumsq, double *tmp, uint64_t *filled,
                         cxs_diag *d);

/*
 * A coded dtype (q8, q16: cxs_qcodec.h): cxs_features_convert() then
 * writes the utterance's header (cxs_q_header_size bytes) followed by its
 * codes into dst: the values converted (and normalised) as for float32,
 * then encoded; sum and sumsq are of the decoded values, what a reader
 * serves.  CXS_E_INPUT also when the encoder refuses the values (a range
 * beyond float).
 *
 * cxs_features_coded(): an utterance already coded (header then codes,
 * as cxs_features_convert writes them: an importer that keeps Kaldi's
 * codes) checked (cxs_q_header_check: CXS_E_INPUT with the reason),
 * copied into dst and summed as above.
 */
int cxs_features_coded(uint32_t dtype, const uint8_t *src, uint64_t T, uint64_t D, uint8_t *dst,
                       double *sum, double *sumsq, cxs_diag *d);

/* cxs_features_convert's flags: a NaN or infinite input value is stored as
 * 0 (before normalisation) instead of refusing the utterance.  For a test
 * split, whose every frame needs a prediction. */
#define CXS_FEAT_FILL_NONFINITE 1u

#endif
