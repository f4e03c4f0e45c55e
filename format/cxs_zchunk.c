/* cxs_zchunk.c - the byte-shuffle filter and one zstd frame per chunk. */
#include "cxs_zchunk.h"

#include <string.h>

#include "cxs_format.h"

void cxs_shuffle(uint8_t *dst, const uint8_t *src, size_t n, size_t e) {
    if (e == 4) {
        uint8_t *d0 = dst, *d1 = dst + n, *d2 = dst + 2 * n, *d3 = dst + 3 * n;
        for (size_t i = 0; i < n; i++, src += 4) {
            d0[i] = src[0];
            d1[i] = src[1];
            d2[i] = src[2];
            d3[i] = src[3];
        }
    } else if (e == 2) {
        uint8_t *d0 = dst, *d1 = dst + n;
        for (size_t i = 0; i < n; i++, src += 2) {
            d0[i] = src[0];
            d1[i] = src[1];
        }
    } else {
        for (size_t b = 0; b < e; b++)
            for (size_t i = 0; i < n; i++) dst[b * n + i] = src[i * e + b];
    }
}

void cxs_unshuffle(uint8_t *dst, const uint8_t *src, size_t n, size_t e) {
    if (e == 4) {
        const uint8_t *s0 = src, *s1 = src + n, *s2 = src + 2 * n, *s3 = src + 3 * n;
        for (size_t i = 0; i < n; i++, dst += 4) {
            dst[0] = s0[i];
            dst[1] = s1[i];
            dst[2] = s2[i];
            dst[3] = s3[i];
        }
    } else if (e == 2) {
        const uint8_t *s0 = src, *s1 = src + n;
        for (size_t i = 0; i < n; i++, dst += 2) {
            dst[0] = s0[i];
            dst[1] = s1[i];
        }
    } else {
        for (size_t b = 0; b < e; b++)
            for (size_t i = 0; i < n; i++) dst[i * e + b] = src[b * n + i];
    }
}

size_t cxs_zchunk_encode(ZSTD_CCtx *cc, int level, uint32_t filter, size_t esize,
                         const uint8_t *src, size_t n, uint8_t *scratch, uint8_t *dst,
                         size_t cap) {
    ZSTD_CCtx_reset(cc, ZSTD_reset_session_and_parameters);
    if (ZSTD_isError(ZSTD_CCtx_setParameter(cc, ZSTD_c_compressionLevel, level)) ||
        ZSTD_isError(ZSTD_CCtx_setParameter(cc, ZSTD_c_contentSizeFlag, 1)) ||
        ZSTD_isError(ZSTD_CCtx_setParameter(cc, ZSTD_c_checksumFlag, 0)) ||
        ZSTD_isError(ZSTD_CCtx_setParameter(cc, ZSTD_c_dictIDFlag, 0)))
        return 0;
    const uint8_t *in = src;
    if (filter == CXS_FILTER_SHUFFLE) {
        cxs_shuffle(scratch, src, n / esize, esize);
        in = scratch;
    }
    size_t z = ZSTD_compress2(cc, dst, cap, in, n);
    return ZSTD_isError(z) ? 0 : z;
}

int cxs_zchunk_decode(ZSTD_DCtx *dc, uint32_t filter, size_t esize, const uint8_t *src,
                      size_t zn, uint8_t *scratch, uint8_t *dst, size_t n) {
    /* One frame, exactly n bytes: the declared content size must say so
     * before anything is decoded, and the decoder must produce that much. */
    if (ZSTD_findFrameCompressedSize(src, zn) != zn) return -1;
    unsigned long long cs = ZSTD_getFrameContentSize(src, zn);
    if (cs != (unsigned long long)n) return -1;
    uint8_t *out = filter == CXS_FILTER_SHUFFLE ? scratch : dst;
    size_t r = ZSTD_decompressDCtx(dc, out, n, src, zn);
    if (ZSTD_isError(r) || r != n) return -1;
    if (filter == CXS_FILTER_SHUFFLE) cxs_unshuffle(dst, scratch, n / esize, esize);
    return 0;
}
