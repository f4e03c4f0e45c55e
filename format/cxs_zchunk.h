/* cxs_zchunk.h - one compressed chunk of a FEATURES byte stream (spec
 * section 4.6): the byte-shuffle filter and a zstd frame.  Shared by the
 * writer (ctxshard pack / convert) and the reader. */
#ifndef CXS_ZCHUNK_H
#define CXS_ZCHUNK_H

#include <stddef.h>
#include <stdint.h>
#include <zstd.h>

/* Largest zstd window a chunk's frame may declare (spec 4.6): the
 * reference decoder's default limit. */
#define CXS_ZCHUNK_MAX_WINDOW (1ull << 27)

/* Byte shuffle of n elements of e bytes: byte b of element i goes to
 * b*n + i (all first bytes, then all second bytes, ...). */
void cxs_shuffle(uint8_t *dst, const uint8_t *src, size_t n, size_t e);
void cxs_unshuffle(uint8_t *dst, const uint8_t *src, size_t n, size_t e);

/* Largest compressed size of a chunk of n bytes. */
static inline size_t cxs_zchunk_bound(size_t n) { return ZSTD_compressBound(n); }

/*
 * Compress src[0..n) (whole elements of esize bytes) into dst (capacity
 * cap >= cxs_zchunk_bound(n)) as one zstd frame with the content size and
 * no checksum or dictionary id, shuffling first when filter says so (scratch:
 * n bytes).  Deterministic for a given zstd version and level.  Returns the
 * compressed length, or 0 on failure.
 */
size_t cxs_zchunk_encode(ZSTD_CCtx *cc, int level, uint32_t filter, size_t esize,
                         const uint8_t *src, size_t n, uint8_t *scratch, uint8_t *dst,
                         size_t cap);

/*
 * Decompress one chunk of zn bytes into exactly n bytes at dst, undoing the
 * filter (scratch: n bytes).  Returns 0, or -1 when the bytes are not one
 * zstd frame of exactly n bytes, or the frame needs a dictionary or a
 * window over CXS_ZCHUNK_MAX_WINDOW.
 */
int cxs_zchunk_decode(ZSTD_DCtx *dc, uint32_t filter, size_t esize, const uint8_t *src,
                      size_t zn, uint8_t *scratch, uint8_t *dst, size_t n);

#endif
