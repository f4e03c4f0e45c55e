/* qdecode.h - coded features (q8, q16: spec/format.md section 4.9) decoded
 * where they are served: the one step every reader of features (the
 * window gather, the utterance padder, the GPU's host side) calls where a
 * stored row becomes float32 values.  (Never installed.)
 *
 * A decoder holds one utterance's decoding at a time, prepared from its
 * QHEADERS entry (utterance lu of a shard: the H bytes at lu * H, no
 * search) when the first rows of that utterance are decoded, and kept
 * while the next rows decoded are the same utterance's.  Preparing checks
 * the header's validity (cxs_q_header_check; open checked the section's
 * checksum) at its first use in the process, remembered in a bitmap per
 * shard: a header the writer cannot have written is refused naming the
 * shard and the utterance, never decoded, at every use. */
#ifndef CXS_QDECODE_H
#define CXS_QDECODE_H

#include <stddef.h>
#include <stdint.h>

#include "ctxshard.h"

typedef struct cxs_qdec {
    uint32_t dtype, dim;
    const cxs_dataset *ds; /* whose utterance is prepared: the dataset, */
    uint32_t shard;  /* the shard and 1 + the local utterance, 0 while */
    uint64_t held;   /* none is (zeroed = nothing yet) */
    /* q8: per column the base and the slope of its three pieces (Kaldi's
     * CharToFloat: p0, p25, p75 and p25 - p0, p75 - p25, p100 - p75),
     * piece-major, 6 * dim floats, then p75 again as dim doubles; q16:
     * the min and Kaldi's increment. */
    float *k;
    int exact_f; /* q8: the float pieces are exact for these slopes */
    float min, inc;
} cxs_qdec;

/* q (zeroed, or set up before) made a decoder for dtype and dim columns
 * (a dataset's); nothing to do when it is one already, or when the dtype
 * is not coded (the decoder is then unused).  Allocates: outside a
 * recovery region.  0 or -ENOMEM. */
int cxs_qdec_init(cxs_qdec *q, uint32_t dtype, uint32_t dim);
void cxs_qdec_free(cxs_qdec *q);

/* Make local utterance lu of shard s the one q decodes (nothing to do
 * when it already is): its header validated and prepared.  0, or
 * CXS_E_CORRUPT (d names the shard, the utterance and what is wrong).
 * Reads the mapping: callers run it in a recovery region (fault.h). */
int cxs_qdec_utt(cxs_qdec *q, const cxs_dataset *ds, uint32_t s, uint64_t lu, cxs_diag *d);

/* Every header of shard s checked as cxs_qdec_utt checks one (what
 * the GPU's resident upload sends whole): 0 or the first failure.  In a
 * recovery region, like it. */
int cxs_qheaders_check(const cxs_dataset *ds, uint32_t s, cxs_diag *d);

/* q's constants from a header (cxs_q_header_size bytes), unchecked: what
 * cxs_qdec_utt does once the header passed its checks (q holds no
 * utterance of a dataset then: the caller keeps track). */
void cxs_qdec_prepare(cxs_qdec *q, const uint8_t *header);

/* rows rows of codes of q's utterance (row-major, dim a row) into dst
 * (rows * dim floats): bit for bit cxs_q_decode_rows, vectorised. */
void cxs_qdec_rows(const cxs_qdec *q, const uint8_t *src, size_t rows, float *dst);

#endif
