/* blocksums.c - format 1.3's block sums (spec section 4.8): open's check
 * of a shard's BLOCKSUMS section, the check of blocks against their sums
 * (verify, warm, the block sampler's reader), and the message that names
 * what a damaged block holds. */
#include <stdio.h>
#include <string.h>

#include "cxs_format.h"
#include "cxs_le.h"
#include "dataset_internal.h"
#include "fault.h"

int cxs_shard_blocksums(cxs_dataset *ds, uint32_t s, cxs_diag *d) {
    shard *sh = &ds->shards[s];
    memset(&sh->bs, 0, sizeof sh->bs);
    const cxs_section *sec = cxs_container_find(&sh->c, CXS_SEC_BLOCKSUMS);
    if (!sec) return 0;
    if (cxs_checksum_differs(cxs_hash(sh->map + sec->offset, sec->length), sec->checksum))
        return cxs_diag_at(d, CXS_E_CHECKSUM, sh->path, sec->offset,
                         "%s: section BLOCKSUMS (bytes %llu..%llu): checksum mismatch", sh->path,
                         (unsigned long long)sec->offset,
                         (unsigned long long)(sec->offset + sec->length));
    return cxs_blocksums_load(sh->map + sec->offset, sec->length, &sh->c, &sh->bs, sh->path, d);
}

/* Local utterances [*lo, *hi] (inclusive) holding something of the
 * section's bytes [a, b) of entry e; 0 when none does (guard rows only,
 * or a section that holds no per-utterance data). */
static int block_utterances(const cxs_dataset *ds, const shard *sh, const cxs_bsum_entry *e,
                            uint64_t a, uint64_t b, uint64_t *lo, uint64_t *hi, uint64_t *r0,
                            uint64_t *r1) {
    const uint64_t U = sh->meta.num_utterances, G = ds->meta.guard;
    const uint8_t *cum = sh->index; /* checked at open */
#define CUM(u) cxs_ld64(cum + 8 * (u))
    uint64_t x0, x1; /* the unit range [x0, x1): rows, frames or entries */
    /* first[u] <= x < first[u] + len[u]: the units of utterance u */
    switch (e->type) {
    case CXS_SEC_FEATURES:
    case CXS_SEC_LABELS: {
        /* Units of a byte: a row of FEATURES (utterance u's are rows
         * g*(u+1) + cum[u] .. g*(u+1) + cum[u+1], g the guard), a frame's
         * label of LABELS (g = 0). */
        const int feat = e->type == CXS_SEC_FEATURES;
        const uint64_t unit = feat ? ds->row_bytes : sh->meta.label_width, g = feat ? G : 0;
        x0 = a / unit, x1 = (b + unit - 1) / unit;
        /* the first utterance ending after x0, the last starting before x1 */
        uint64_t l = 0, h = U;
        while (l < h) {
            uint64_t m = l + (h - l) / 2;
            if (g * (m + 1) + CUM(m + 1) > x0) h = m;
            else l = m + 1;
        }
        *lo = l;
        l = 0, h = U;
        while (l < h) {
            uint64_t m = l + (h - l) / 2;
            if (g * (m + 1) + CUM(m) < x1) l = m + 1;
            else h = m;
        }
        /* the rows or frames are named even when no utterance holds them
         * (a block of guard rows only) */
        *r0 = x0, *r1 = x1;
        if (!l) return 0;
        *hi = l - 1;
        break;
    }
    case CXS_SEC_INDEX:
    case CXS_SEC_IDS:
    case CXS_SEC_SEQUENCES: {
        /* Their offset arrays: entry i bounds utterances i-1 and i.  The
         * bytes after the offsets (ids, symbols) are not located. */
        x0 = a / 8, x1 = (b + 7) / 8;
        if (x0 > U) return 0;
        if (x1 > U + 1) x1 = U + 1;
        *lo = x0 ? x0 - 1 : 0;
        *hi = x1 - 1 < U ? x1 - 1 : U - 1;
        break;
    }
    case CXS_SEC_QHEADERS: {
        /* format 1.4: an entry of ds->qh bytes per utterance */
        if (!ds->qh || a / ds->qh >= U) return 0;
        *lo = a / ds->qh;
        *hi = (b - 1) / ds->qh < U ? (b - 1) / ds->qh : U - 1;
        break;
    }
    default: return 0;
    }
#undef CUM
    *r0 = x0, *r1 = x1;
    return *lo <= *hi && *lo < U;
}

int cxs_block_failed(const cxs_dataset *ds, uint32_t s, const cxs_bsum_entry *e, uint64_t j,
                     cxs_diag *d) {
    const shard *sh = &ds->shards[s];
    uint64_t a, b, lo = 0, hi = 0, r0 = 0, r1 = 0;
    cxs_bsum_block(e, j, &a, &b);
    char units[96] = "", held[1400] = "";
    int some = block_utterances(ds, sh, e, a, b, &lo, &hi, &r0, &r1);
    if (e->type == CXS_SEC_FEATURES || e->type == CXS_SEC_LABELS)
        snprintf(units, sizeof units, ", %s %llu..%llu",
                 e->type == CXS_SEC_FEATURES ? "rows" : "frames",
                 (unsigned long long)(e->type == CXS_SEC_LABELS ? sh->f_start + r0 : r0),
                 (unsigned long long)(e->type == CXS_SEC_LABELS ? sh->f_start + r1 : r1));
    if (some && e->type == CXS_SEC_IDS) {
        /* the ids are what is damaged: numbers only, nothing read from it */
        snprintf(held, sizeof held, "; the block holds the ids of utterances %llu to %llu",
                 (unsigned long long)(sh->u_start + lo), (unsigned long long)(sh->u_start + hi));
    } else if (some) {
        /* every one of a few (a block of features is one or two at 40
         * dimensions), else the first and the last */
        char x[300];
        size_t at = (size_t)snprintf(held, sizeof held, "; the block holds ");
        if (hi - lo + 1 > 4)
            at += (size_t)snprintf(held + at, sizeof held - at, "%llu utterances, ",
                                   (unsigned long long)(hi - lo + 1));
        for (uint64_t u = lo; u <= hi && at < sizeof held; u++) {
            if (hi - lo + 1 > 4 && u > lo && u < hi) continue;
            cxs_utt_name(ds, sh->u_start + u, x, sizeof x);
            at += (size_t)snprintf(held + at, sizeof held - at, "%s%s",
                                   u == lo ? "" : hi - lo + 1 > 4 ? " to " : ", ", x);
        }
    } else if (e->type == CXS_SEC_FEATURES) {
        snprintf(held, sizeof held, "; the block holds guard rows only");
    }
    return cxs_diag_at(d, CXS_E_CHECKSUM, sh->path, e->sec->offset + a,
                     "%s: %s block %llu of %llu (file bytes %llu..%llu%s): checksum mismatch%s",
                     sh->path, cxs_section_name(e->type), (unsigned long long)j,
                     (unsigned long long)e->num_blocks,
                     (unsigned long long)(e->sec->offset + a),
                     (unsigned long long)(e->sec->offset + b), units, held);
}

int cxs_blocks_check_upto(const cxs_dataset *ds, uint32_t s, const cxs_bsum_entry *e,
                          uint64_t *next, uint64_t upto, cxs_diag *d) {
    const shard *sh = &ds->shards[s];
    const uint8_t *base = sh->map + e->sec->offset;
    while (*next < e->num_blocks && (*next << e->shift) < upto) {
        uint64_t a, b;
        cxs_bsum_block(e, *next, &a, &b);
        if (cxs_checksum_differs(cxs_hash(base + a, (size_t)(b - a)),
                                 cxs_bsum_of(&sh->bs, e, *next)))
            return cxs_block_failed(ds, s, e, *next, d);
        ++*next;
    }
    return 0;
}
