/* blocksrc.h - the block source's check (never installed): "bytes [a, b)
 * of section X of shard s: make them safe to serve".  The rest of the
 * block source (where the bytes come from, read-ahead, holds) is
 * source/source.h, above this layer; the check stays here because open,
 * warm, verify and the huge-page copy, all in read/, feed and read the
 * same bitmaps.
 *
 * In a shard with block sums (format 1.3, spec section 4.8) every covered
 * block is checked against its sum at its first use in the process,
 * before any byte of it is served, and remembered in a bitmap of checked
 * blocks per covered section (atomic bit sets: threads may check the same
 * block at the same time, and both set the same bit).  Everything that checks a block feeds the same bitmap, so
 * a block is hashed once per process: the deferred tables (utt_index.c),
 * warm (warm.c), the block reader (source/source.c), the copy into huge
 * pages (hugecopy.c, a section checksum: the whole section at once) and a
 * streamed dataset's fetch (remote/stream.c checks every FEATURES block it
 * downloads, so a streamed FEATURES counts as checked) and verify
 * (cxs_dataset_verify: each block that passed its sum).  Once a section's
 * blocks are all checked its `all` flag is set, and a window on it costs
 * one load.
 *
 * What a compressed dataset's block sums cover: INDEX, IDS, LABELS and
 * SEQUENCES (the writers never cover ZFEATURES or CHUNKS); its features
 * are checked by their chunks' checksums at every decode (spec section
 * 4.6).  A shard without BLOCKSUMS (older than 1.3) has no bitmaps: its
 * tables are checked whole at open, its FEATURES and LABELS only by
 * verify (warm reads them unchecked), and a label outside the vocabulary
 * is still refused when served. */
#ifndef CXS_BLOCKSRC_H
#define CXS_BLOCKSRC_H

#include <stdint.h>

#include "ctxshard.h"
#include "cxs_format.h"

struct shard;

/* One covered section's checked blocks. */
typedef struct cxs_bcheck {
    const cxs_bsum_entry *e; /* its BLOCKSUMS entry */
    uint64_t *bits;          /* a bit per block, set once it passed */
    uint64_t left;           /* blocks not yet checked (atomic) */
    int all;                 /* every block checked (atomic) */
} cxs_bcheck;

/* The bitmaps of shard s, one per entry of its BLOCKSUMS (sh->bc, and
 * sh->bc_feat, sh->bc_lab for FEATURES and LABELS when covered); nothing
 * without BLOCKSUMS.  Called by open after the BLOCKSUMS check.  In a
 * test build, CXS_BLOCKCHECK=off at open leaves FEATURES and LABELS
 * unchecked (the benchmark's control; hooks.h).  0 or -ENOMEM. */
int cxs_bsrc_setup(cxs_dataset *ds, uint32_t s, cxs_diag *d);
void cxs_bsrc_free(struct shard *sh);
/* The bitmap of section `type` of shard s, or NULL when not covered. */
cxs_bcheck *cxs_bsrc_of(const cxs_dataset *ds, uint32_t s, uint32_t type);

static inline int cxs_bsrc_has(const cxs_bcheck *c, uint64_t j) {
    return __atomic_load_n(&c->bits[j >> 6], __ATOMIC_ACQUIRE) >> (j & 63) & 1;
}
/* Block j passed (checked by the caller against its sum). */
void cxs_bsrc_mark(cxs_bcheck *c, uint64_t j);
/* Every block of c passed (a section checksum over the same bytes, or a
 * stream whose every download is checked). */
void cxs_bsrc_mark_all(cxs_bcheck *c);

/* Block j of c (shard s) checked against its sum, once: 0, or
 * CXS_E_CHECKSUM with cxs_block_failed's message in d (may be NULL);
 * CXS_E_TRUNCATED when the shard lost those bytes since open.  Runs its
 * read of the mapping in a recovery region of its own, unless the thread
 * is in one of ds's already (whose fault it then is). */
int cxs_bsrc_block(const cxs_dataset *ds, uint32_t s, cxs_bcheck *c, uint64_t j, cxs_diag *d);
/* cxs_bsrc_block for a caller already in a recovery region (a fault is
 * then the region's). */
int cxs_bsrc_block_in(const cxs_dataset *ds, uint32_t s, cxs_bcheck *c, uint64_t j,
                      cxs_diag *d);
/* Every block holding bytes [a, b) of c's section: as cxs_bsrc_block. */
int cxs_bsrc_slow(const cxs_dataset *ds, uint32_t s, cxs_bcheck *c, uint64_t a, uint64_t b,
                  cxs_diag *d);

/* The hot path: bytes [a, b) of a section (c NULL: not covered). */
static inline int cxs_bsrc_range(const cxs_dataset *ds, uint32_t s, cxs_bcheck *c, uint64_t a,
                                 uint64_t b, cxs_diag *d) {
    if (!c || a >= b || __atomic_load_n(&c->all, __ATOMIC_ACQUIRE)) return 0;
    const uint64_t j0 = a >> c->e->shift, j1 = (b - 1) >> c->e->shift;
    if (j1 - j0 <= 1 && cxs_bsrc_has(c, j0) && cxs_bsrc_has(c, j1)) return 0;
    return cxs_bsrc_slow(ds, s, c, a, b, d);
}

/* FEATURES rows and LABELS frames of a shard: cxs_bsrc_rows and
 * cxs_bsrc_labels, inline in dataset_internal.h (they read the shard). */
/* Local utterances [lu0, lu1) of shard s, their INDEX entries checked
 * already: their rows, and their labels when `labels` (a GPU pool's block,
 * one call). */
int cxs_bsrc_utts(const cxs_dataset *ds, uint32_t s, uint64_t lu0, uint64_t lu1, int labels,
                  cxs_diag *d);
/* Every block of FEATURES, and of LABELS when `labels`, of every shard
 * (what a resident GPU upload is about to copy whole): 0 or the first
 * failure. */
int cxs_bsrc_all(const cxs_dataset *ds, int labels, cxs_diag *d);

#endif
