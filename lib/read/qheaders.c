/* qheaders.c - a coded dataset's per-utterance headers (QHEADERS, format
 * 1.4) made ready to decode where they are first used (qdecode.h).  Open
 * checked the section's checksum (its bytes are as written); what is
 * checked here is what verify checks of every header, that the writer
 * could have written it (spec section 4.9). */
#include <string.h>

#include "cxs_qcodec.h"
#include "dataset_internal.h"
#include "qdecode.h"

/* Local utterance lu's header one the writer can have written: 0, or
 * CXS_E_CORRUPT naming the shard, the utterance and the fault.  Checked
 * once per process (sh->qh_checked): a header that failed is checked
 * again, and refused again, at every use. */
static int header_valid(const cxs_dataset *ds, uint32_t s, uint64_t lu, cxs_diag *d) {
    const shard *sh = &ds->shards[s];
    uint64_t *bits = &sh->qh_checked[lu >> 6];
    const uint64_t bit = 1ull << (lu & 63);
    if (__atomic_load_n(bits, __ATOMIC_ACQUIRE) & bit) return 0;
    const uint32_t dtype = ds->meta.dtype, D = ds->meta.dim;
    const uint8_t *h = sh->qheaders + lu * ds->qh;
    char why[160];
    if (!cxs_q_header_check(dtype, h, D, why, sizeof why)) {
        __atomic_fetch_or(bits, bit, __ATOMIC_RELEASE);
        return 0;
    }
    const uint8_t *id = NULL;
    uint64_t len = 0;
    if (cxs_id_get_in(ds, s, lu, &id, &len, NULL)) id = NULL;
    return cxs_diag_at(d, CXS_E_CORRUPT, sh->path, (uint64_t)(h - sh->map),
                       "%s: QHEADERS entry of utterance %.*s (number %llu): %s; not decoded",
                       sh->path, id ? (int)(len < 200 ? len : 200) : 1,
                       id ? (const char *)id : "?", (unsigned long long)(sh->u_start + lu), why);
}

int cxs_qdec_utt(cxs_qdec *q, const cxs_dataset *ds, uint32_t s, uint64_t lu, cxs_diag *d) {
    if (q->held == lu + 1 && q->shard == s && q->ds == ds) return 0;
    int rc = header_valid(ds, s, lu, d);
    if (rc) return rc;
    cxs_qdec_prepare(q, ds->shards[s].qheaders + lu * ds->qh);
    q->ds = ds;
    q->shard = s;
    q->held = lu + 1;
    return 0;
}

int cxs_qheaders_check(const cxs_dataset *ds, uint32_t s, cxs_diag *d) {
    int rc = 0;
    for (uint64_t lu = 0; lu < ds->shards[s].meta.num_utterances && !rc; lu++)
        rc = header_valid(ds, s, lu, d);
    return rc;
}

int cxs_dataset_read_qheader(const cxs_dataset *ds, uint64_t u, void *out, cxs_diag *d) {
    if (!ds || !out) return cxs_diagf(d, CXS_E_INVALID, "read_qheader: no dataset or out is NULL");
    if (!ds->qh)
        return cxs_diagf(d, CXS_E_UNSUPPORTED, "read_qheader: a %s dataset has no headers",
                         cxs_dtype_name(ds->meta.dtype));
    if (u >= ds->meta.num_utterances)
        return cxs_diagf(d, CXS_E_RANGE, "read_qheader: utterance %llu is past the dataset's %llu",
                         (unsigned long long)u, (unsigned long long)ds->meta.num_utterances);
    /* QHEADERS is part of the metadata (checked whole at open, a streamed
     * dataset's included): no FEATURES block is read */
    const uint32_t s = cxs_utt_shard(ds, u);
    const uint64_t lu = u - ds->shards[s].u_start;
    int rc = header_valid(ds, s, lu, d);
    if (rc) return rc;
    memcpy(out, ds->shards[s].qheaders + lu * ds->qh, (size_t)ds->qh);
    return 0;
}
