/* cxs_zchunk.c - the byte-shuffle filter and one zstd frame per chunk. */
#include "cxs_zchunk.h"

#include <string.h>

#include "cxs_format.h"
#include "cxs_le.h"

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

/* The window a zstd frame declares (RFC 8878 3.1.1.1.2), or UINT64_MAX
 * when the header is not that of a plain frame without a dictionary.  A
 * single-segment frame's window is its content size.  The header's own
 * version is parsed here because ZSTD_getFrameHeader is in the part of
 * the zstd API a shared library does not promise to keep. */
static uint64_t frame_window(const uint8_t *src, size_t zn) {
    if (zn < 6 || cxs_ld32(src) != 0xFD2FB528u) return UINT64_MAX;
    unsigned fhd = src[4];
    unsigned fcs_flag = fhd >> 6, single = (fhd >> 5) & 1, did_flag = fhd & 3;
    size_t pos = 5;
    uint64_t window = 0;
    if (!single) {
        unsigned wd = src[pos++];
        uint64_t base = 1ull << (10 + (wd >> 3));
        window = base + (base >> 3) * (wd & 7);
    }
    static const size_t did_size[4] = {0, 1, 2, 4};
    static const size_t fcs_size[4] = {0, 2, 4, 8};
    size_t ds = did_size[did_flag], fs = fcs_flag == 0 && single ? 1 : fcs_size[fcs_flag];
    if (zn < pos + ds + fs) return UINT64_MAX;
    uint64_t did = 0;
    for (size_t i = 0; i < ds; i++) did |= (uint64_t)src[pos + i] << (8 * i);
    if (did != 0) return UINT64_MAX;
    pos += ds;
    if (single) {
        for (size_t i = 0; i < fs; i++) window |= (uint64_t)src[pos + i] << (8 * i);
        if (fs == 2) window += 256;
    }
    return window;
}

int cxs_zchunk_decode(ZSTD_DCtx *dc, uint32_t filter, size_t esize, const uint8_t *src,
                      size_t zn, uint8_t *scratch, uint8_t *dst, size_t n) {
    /* One frame, exactly n bytes: the declared content size must say so
     * before anything is decoded, and the decoder must produce that much. */
    if (ZSTD_findFrameCompressedSize(src, zn) != zn) return -1;
    unsigned long long cs = ZSTD_getFrameContentSize(src, zn);
    if (cs != (unsigned long long)n) return -1;
    /* One-shot decoding into a caller's buffer applies no window limit of
     * its own (only the streaming decoder checks ZSTD_d_windowLogMax), so
     * the spec's window limit and no-dictionary rule are checked here. */
    if (frame_window(src, zn) > CXS_ZCHUNK_MAX_WINDOW) return -1;
    uint8_t *out = filter == CXS_FILTER_SHUFFLE ? scratch : dst;
    size_t r = ZSTD_decompressDCtx(dc, out, n, src, zn);
    if (ZSTD_isError(r) || r != n) return -1;
    if (filter == CXS_FILTER_SHUFFLE) cxs_unshuffle(dst, scratch, n / esize, esize);
    return 0;
}
