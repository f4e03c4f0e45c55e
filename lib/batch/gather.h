/* gather.h - the batch gather under cxs_dataset_gather, the loaders and
 * the GPU paths (gather.c; never installed). */
#ifndef CXS_GATHER_H
#define CXS_GATHER_H

#include <stddef.h>
#include <stdint.h>

#include "dataset_internal.h"
#include "qdecode.h"

/* The normalisation constants of spec section 7.4 for `norm` (NULL: the
 * dataset's own statistics): mean[d] = the mean, scale[d] = 1 / sqrt(var)
 * in binary64, or 1 when var is 0.  *out is malloc'd, 2*dim doubles (means
 * then scales).  CXS_E_INVALID when norm does not fit ds (dim, NULL
 * arrays, a mean or variance not finite, a negative variance) or ds has no
 * statistics; -ENOMEM.  d (may be NULL) says which. */
int cxs_norm_constants(const cxs_dataset *ds, const cxs_norm *norm, double **out, cxs_diag *d);

/* Stored rows into float32: `rows` whole rows of the dataset's dtype at src
 * (little-endian, as stored) into dst, normalised when mean and scale are
 * given (spec section 7.4, the arithmetic of every CPU path: windows,
 * padded utterances).  Rows of a coded dtype (q8, q16) are one
 * utterance's, decoded by q, which holds that utterance's header
 * (cxs_qdec_utt); q is unused otherwise.  Normalisation applies to the
 * decoded values.  cxs_normalize_rows does the normalisation alone,
 * in place, for rows already in float32. */
void cxs_convert_rows(const cxs_dataset *ds, const cxs_qdec *q, const uint8_t *src, size_t rows,
                      float *dst, const double *mean, const double *scale);
void cxs_normalize_rows(uint32_t D, float *dst, size_t rows, const double *mean,
                        const double *scale);

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
    cxs_qdec q;         /* coded dtypes: the decoder */
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

/* Padded utterances (uttbatch.c): what one thread keeps from batch to
 * batch, a decoder for compressed data, a staging buffer for stored
 * rows that are not float32 and the decoder of coded ones (zeroed =
 * nothing yet). */
typedef struct cxs_pad_ctx {
    zreader zr;
    uint8_t *stage;
    size_t stage_bytes;
    cxs_qdec q;
} cxs_pad_ctx;
void cxs_pad_ctx_free(cxs_pad_ctx *c);
/* cxs_dataset_pad_batch with explicit constants (mean/scale NULL: none),
 * cmvn for CXS_PAD_PER_UTTERANCE, the utterances known to be in range and
 * tmax at least the longest; a failure in the data names the shard, the
 * utterance and the chunk in d (may be NULL). */
int cxs_pad_impl(const cxs_dataset *ds, const uint64_t *utts, size_t n, uint64_t tmax,
                 const double *mean, const double *scale, int cmvn, float *x, int64_t *lengths,
                 int64_t *y, cxs_pad_ctx *c, cxs_diag *d);
/* cxs_dataset_pad_targets without the checks (lmax at least the longest:
 * cxs_longest_seq). */
int cxs_pad_targets_impl(const cxs_dataset *ds, const uint64_t *utts, size_t n, uint64_t lmax,
                         int64_t *targets, int64_t *target_lengths);
uint64_t cxs_longest_seq(const cxs_dataset *ds, const uint64_t *utts, size_t n);

#endif
