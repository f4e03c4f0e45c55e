/* source.h - the block source (internal): the one place that knows where
 * the bytes of a shard's section come from, and makes them safe to serve.
 *
 * A loader (batch/) or a GPU upload (gpu/) decides which bytes it needs
 * and when; it asks the block source to make them readable, checked and
 * held, and lets go of them through it.  Only this layer knows whether a
 * block is
 *   - in the local mapping (the page cache: read ahead by pread or
 *     advice, let go by MADV_DONTNEED and POSIX_FADV_DONTNEED),
 *   - in a copy in huge pages (hugecopy.c: nothing to read or let go),
 *   - in a streamed dataset's cache entry (remote/stream.c: fetched and
 *     checked block by block, held under the entry's locks while read,
 *     evicted when the cache is over its limit),
 * and a coded feature dtype will be a fourth case here (decoded into the
 * source's buffer before it is served), not in the loaders.
 *
 * The block sums (format 1.3) are checked at first use by blocksrc.h,
 * which stays in read/ because open, warm, verify and the copy into huge
 * pages check the same bitmaps below this layer; this header includes it,
 * so that batch/ and gpu/ reach every check through the block source.
 *
 * A cxs_src is one user's view: its descriptors of the shards (opened at
 * first use, shardfd.h) and, for a streamed dataset, its holds (the
 * stream's locks are per user: a thread that holds a block must be the
 * one that lets it go).  Every call on a dataset that is not streamed
 * holds nothing and succeeds. */
#ifndef CXS_SOURCE_H
#define CXS_SOURCE_H

#include <stddef.h>
#include <stdint.h>

#include "blocksrc.h"
#include "dataset_internal.h"
#include "shardfd.h"

struct cxs_stream_user;
struct cxs_src_ahead;

typedef struct cxs_src {
    const cxs_dataset *ds;
    cxs_shard_fds fds;          /* CXS_SRC_FDS: the shards' descriptors, opened at
                                   first use */
    struct cxs_stream_user *su; /* a streamed dataset: this user's holds, else NULL */
    uint8_t *scratch;           /* CXS_SRC_READ: cxs_src_read's pread target */
    void *xs;                   /* CXS_SRC_READ: an XXH3 state for the block sums */
    struct cxs_src_ahead *ahead; /* CXS_SRC_AHEAD, streamed: the fetch-ahead thread */
} cxs_src;

/* A user that asks for ranges and lets them go (cxs_src_want,
 * cxs_src_evict): a descriptor per shard.  Without it a user only holds
 * (a worker thread: no table of the shards' descriptors each). */
#define CXS_SRC_FDS 1u
/* A user that reads blocks ahead (cxs_src_read): its buffer and hash, and
 * the descriptors. */
#define CXS_SRC_READ (2u | CXS_SRC_FDS)
/* A user that asks for ranges ahead (cxs_src_want) of a streamed dataset:
 * a thread of its own (and a stream user of its own) fetches them into the
 * cache while the caller serves others. */
#define CXS_SRC_AHEAD 4u

/* src for ds (flags: CXS_SRC_FDS, CXS_SRC_READ, CXS_SRC_AHEAD or 0).  0,
 * -ENOMEM or -EAGAIN (no thread for CXS_SRC_AHEAD; then destroy it). */
int cxs_src_init(cxs_src *src, const cxs_dataset *ds, unsigned flags);
/* Its memory, descriptors and holds; forked: in a child that inherited
 * it, whose holds and locks are the parent's (only the memory goes, and
 * the descriptors that still name their shard).  A zeroed src is fine. */
void cxs_src_destroy(cxs_src *src, int forked);
/* The first use in a forked child: the parent's holds and descriptors
 * are the parent's (and its fetch-ahead thread: the child starts its own;
 * without one its cxs_src_want fetches nothing ahead). */
void cxs_src_after_fork(cxs_src *src);
/* on: end src's transfers at once and refuse new ones (-ECANCELED), from
 * any thread (a loader stops); 0: allow them again. */
void cxs_src_cancel(cxs_src *src, int on);

/* Whether ds's features come from a streamed cache entry: the loaders
 * that serve one must hold every byte they read (cxs_src_hold). */
static inline int cxs_src_streamed(const cxs_dataset *ds) { return ds->stream != NULL; }

/* Read FEATURES bytes [off, off+len) of shard s into the page cache,
 * widened to whole sum blocks, each checked against its sum as its last
 * byte arrives unless it was checked already (blocksrc.h), and, for a
 * streamed dataset, held (fetched first where the cache lacks them) until
 * cxs_src_release.  pace(arg) (may be NULL) runs before each piece read,
 * so that the caller can let more urgent reads go first; a set *stop ends
 * the read (0, nothing more read; still held).  Returns 0, CXS_E_CHECKSUM
 * with d naming the block, or a fetch's error (holding nothing then).
 * Read errors of a local shard are left to the reads that serve the bytes
 * (0).  A CXS_SRC_READ user, one thread at a time. */
int cxs_src_read(cxs_src *src, uint32_t s, uint64_t off, uint64_t len, const int *stop,
                 void (*pace)(void *), void *arg, cxs_diag *d);

/* Streamed: hold FEATURES bytes [lo, hi) of shard s (fetching what is
 * missing, checked) until cxs_src_release; a set *stop ends it
 * (-ECANCELED).  0, or an error naming the URL (nothing held then). */
int cxs_src_hold(cxs_src *src, uint32_t s, uint64_t lo, uint64_t hi, const int *stop,
                 cxs_diag *d);
/* Let go of a cxs_src_hold's or cxs_src_read's hold; drop: out of the
 * cache too when it is over its limit (bytes done with for the epoch). */
void cxs_src_release(cxs_src *src, uint32_t s, uint64_t lo, uint64_t hi, int drop);

/* Ask for bytes [off, off+len) of shard s to be read into the page cache
 * (POSIX_FADV_WILLNEED: the kernel reads them while the caller serves
 * others); streamed, with CXS_SRC_AHEAD, to be fetched into the cache
 * entry by the fetch-ahead thread, in the order asked, checked and not
 * held (a fetch that fails is met again, and said, by the hold that needs
 * the bytes; the cache's limit is kept as by any fetch, evicting the least
 * recently used blocks no reader holds).  Advice: from any thread. */
void cxs_src_want(cxs_src *src, uint32_t s, uint64_t off, uint64_t len);
/* The ranges asked for ahead and not yet begun are forgotten (a loader
 * that moved to another position or epoch). */
void cxs_src_unwant(cxs_src *src);
/* Streamed: the bytes of features a fetch ahead may keep in the cache
 * beside `held` bytes its caller holds: a quarter of what the cache's limit
 * leaves beside them (its metadata, and a page per shard file, counted),
 * UINT64_MAX without a limit; 0 when nothing more fits.  Not streamed: 0. */
uint64_t cxs_src_ahead_room(const cxs_src *src, uint64_t held);
/* Let bytes [off, off+len) of shard s go: out of the page cache
 * (cxs_range_drop) and, streamed, out of the cache entry when the cache
 * is over its limit and no reader holds them. */
void cxs_src_evict(cxs_src *src, uint32_t s, uint64_t off, uint64_t len);

/* ---- a batch's holds ------------------------------------------------------
 *
 * What a worker holds while it copies one batch of whole utterances: their
 * FEATURES ranges, sorted and merged, so that utterances that share a sum
 * block take its lock once and each range is fetched in one request. */
typedef struct cxs_src_range {
    uint32_t shard;
    uint64_t lo, hi;
} cxs_src_range;

typedef struct cxs_src_batch {
    cxs_src_range *r;
    size_t n, cap;
} cxs_src_batch;

/* Streamed: hold the features of utterances utts[0 .. n) of src's dataset
 * until cxs_src_batch_release (nothing on a dataset not streamed).  0, an
 * error of the utterance table, or cxs_src_hold's (nothing held then). */
int cxs_src_batch_hold(cxs_src *src, cxs_src_batch *h, const uint64_t *utts, size_t n,
                       const int *stop, cxs_diag *d);
void cxs_src_batch_release(cxs_src *src, cxs_src_batch *h);
void cxs_src_batch_free(cxs_src_batch *h);

#endif
