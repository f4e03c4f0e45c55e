/* Fuzz target: a compressed shard (format 1.1: ZFEATURES and CHUNKS)
 * opened alone and read every way the library offers.
 *
 * Checksums would stop nearly every mutation at the door (the header's,
 * each section's, each chunk's), and fuzz_shard already covers that door.
 * This target recomputes them after the mutation, so the fuzzer reaches the
 * parsers behind them: the CHUNKS head and entries, the per-chunk zstd
 * frame rules, the byte-shuffle filter, and verify's walk over decoded
 * guard and value rows.  The fix-up reads the input with the same care as
 * the library (every offset checked against the size). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cxs_format.h"
#include "cxs_le.h"
#include "fuzz_common.h"

static int inside(uint64_t off, uint64_t len, uint64_t size) {
    return off <= size && len <= size - off;
}

static void fix_checksums(uint8_t *p, size_t size) {
    if (size < CXS_PAGE) return;
    uint32_t n = cxs_ld32(p + 24);
    if (n == 0 || n > CXS_MAX_SECTIONS) return;
    uint8_t *zsec = NULL, *csec = NULL;
    uint64_t zlen = 0, clen = 0;
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *e = p + CXS_HEADER_SIZE + CXS_SECTION_ENTRY * i;
        uint64_t off = cxs_ld64(e + 8), len = cxs_ld64(e + 16);
        if (!inside(off, len, size)) continue;
        if (cxs_ld32(e) == CXS_SEC_ZFEATURES) zsec = p + off, zlen = len;
        if (cxs_ld32(e) == CXS_SEC_CHUNKS) csec = p + off, clen = len;
    }
    /* Each chunk's checksum over its stored bytes, where its bounds make
     * sense (the reader refuses the others before it hashes them). */
    if (zsec && csec && clen >= CXS_CHUNKS_HEAD) {
        uint64_t prev = 0;
        for (uint64_t c = 0; c < (clen - CXS_CHUNKS_HEAD) / CXS_CHUNK_ENTRY; c++) {
            uint8_t *e = csec + CXS_CHUNKS_HEAD + CXS_CHUNK_ENTRY * c;
            uint64_t end = cxs_ld64(e);
            if (end <= prev || end > zlen) break;
            cxs_st64(e + 8, cxs_hash(zsec + prev, (size_t)(end - prev)));
            prev = end;
        }
    }
    for (uint32_t i = 0; i < n; i++) {
        uint8_t *e = p + CXS_HEADER_SIZE + CXS_SECTION_ENTRY * i;
        uint64_t off = cxs_ld64(e + 8), len = cxs_ld64(e + 16);
        if (inside(off, len, size)) cxs_st64(e + 24, cxs_hash(p + off, (size_t)len));
    }
    cxs_st64(p + 56, 0);
    cxs_st64(p + 56, cxs_hash(p, CXS_HEADER_SIZE + (size_t)CXS_SECTION_ENTRY * n));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *buf = malloc(size + 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    fix_checksums(buf, size);
    const char *path = fuzz_write("shard-000000.cxs", buf, size);
    free(buf);
    if (!path) return 0;
    cxs_dataset *ds;
    cxs_diag d;
    /* A small chunk cache, so that eviction and private decodes are reached. */
    cxs_open_opts o = {.cache_bytes = 1u << 12};
    int rc = cxs_dataset_open_ex(path, &o, &ds, &d);
    /* CXS_FUZZ_VERBOSE=1: say what open and verify made of each input (to
     * check that a seed reaches what it was written for). */
    if (getenv("CXS_FUZZ_VERBOSE")) {
        int vr = rc ? rc : cxs_dataset_verify(ds, NULL, NULL, &d);
        fprintf(stderr, "open %d verify %d: %s\n", rc, vr, rc || vr ? d.message : "OK");
    }
    if (rc == 0) {
        fuzz_exercise(ds);
        float feats[64];
        cxs_info in;
        cxs_dataset_info(ds, &in);
        if (in.num_utterances && in.dim <= 8) (void)cxs_dataset_read_features(ds, 0, 0, 1, feats);
        cxs_dataset_close(ds);
    }
    return 0;
}
