/* zpool.h - compressing a FEATURES stream's chunks on several threads,
 * handed back in order.
 *
 * The writer puts full chunks in, one after another; worker threads
 * compress them (the same cxs_zchunk_encode, so the same bytes as one
 * thread); the sink gets each compressed chunk in the order it was put, on
 * the caller's thread (inside put or drain), so hashing and writing stay
 * sequential and the output is identical for any number of threads.
 * Memory: 2 x threads chunks in flight. */
#ifndef CXS_ZPOOL_H
#define CXS_ZPOOL_H

#include <stddef.h>
#include <stdint.h>

typedef struct cxs_zpool cxs_zpool;

/* Receives one compressed chunk (zn bytes); returns 0 or -errno. */
typedef int (*cxs_zpool_sink)(void *user, const uint8_t *z, size_t zn);

/* threads >= 2 workers, chunks of at most cap bytes of esize-byte elements,
 * zstd level and filter as cxs_zchunk_encode takes them.  0 or -errno. */
int cxs_zpool_create(unsigned threads, size_t cap, int level, uint32_t filter, size_t esize,
                     cxs_zpool **out);

/* Queue a copy of data[0..n) (n <= cap); first passes finished chunks to
 * sink, in order, waiting when every slot is busy.  0, or the first error
 * (the sink's, or -EIO for a chunk zstd failed on); after an error every
 * call returns it. */
int cxs_zpool_put(cxs_zpool *p, const uint8_t *data, size_t n, cxs_zpool_sink sink, void *user);

/* Wait for every queued chunk and pass each to sink, in order. */
int cxs_zpool_drain(cxs_zpool *p, cxs_zpool_sink sink, void *user);

/* Stop the workers and free everything (queued chunks are dropped). */
void cxs_zpool_free(cxs_zpool *p);

#endif
