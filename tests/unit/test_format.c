/* The container: build, parse, and every structural refusal. */
#include <string.h>

#include "cxs_format.h"
#include "cxs_le.h"
#include "cxs_zchunk.h"
#include "cxs_test.h"

static uint8_t f[3 * CXS_PAGE];

/* A two-section manifest-kind file: 10 bytes at page 1, 5 at page 2. */
static uint64_t make(void) {
    memset(f, 0, sizeof f);
    memset(f + CXS_PAGE, 0xab, 10);
    memset(f + 2 * CXS_PAGE, 0xcd, 5);
    cxs_section s[2] = {{CXS_SEC_DATASET_META, 1, CXS_PAGE, 10, cxs_hash(f + CXS_PAGE, 10)},
                        {CXS_SEC_STATS, 0, 2 * CXS_PAGE, 5, cxs_hash(f + 2 * CXS_PAGE, 5)}};
    return cxs_container_build(f, CXS_KIND_MANIFEST, sizeof f, s, 2);
}

static int parse(cxs_diag *d) {
    cxs_container c;
    return cxs_container_parse(f, sizeof f, CXS_KIND_MANIFEST, &c, "x", d);
}

/* Rewrite the header checksum after an edit, so that the structural check
 * behind it is reached. */
static void rehash(void) {
    uint32_t n = cxs_ld32(f + 24);
    if (n > CXS_MAX_SECTIONS) n = CXS_MAX_SECTIONS;
    cxs_st64(f + 56, 0);
    cxs_st64(f + 56, cxs_hash(f, CXS_HEADER_SIZE + CXS_SECTION_ENTRY * n));
}

TEST(round_trip) {
    uint64_t h = make();
    cxs_container c;
    cxs_diag d;
    EXPECT_INT(cxs_container_parse(f, sizeof f, CXS_KIND_MANIFEST, &c, "x", &d), 0);
    EXPECT_UINT(c.header_checksum, h);
    EXPECT_UINT(c.nsections, 2);
    EXPECT(cxs_container_find(&c, CXS_SEC_STATS)->length == 5);
    EXPECT(cxs_container_find(&c, CXS_SEC_VOCAB) == NULL);
    EXPECT_UINT(cxs_ld64(f), CXS_MAGIC);
}
END_TEST_

TEST(refusals) {
    cxs_diag d;
    cxs_container c;
    make();
    f[0] ^= 1;
    EXPECT_INT(parse(&d), CXS_E_BAD_MAGIC);
    make();
    EXPECT_INT(cxs_container_parse(f, 100, CXS_KIND_MANIFEST, &c, "x", &d), CXS_E_TRUNCATED);
    EXPECT_INT(cxs_container_parse(f, sizeof f - CXS_PAGE, CXS_KIND_MANIFEST, &c, "x", &d), CXS_E_TRUNCATED);
    EXPECT_INT(cxs_container_parse(f, sizeof f, CXS_KIND_SHARD, &c, "x", &d), CXS_E_CORRUPT);
    EXPECT_STR_HAS(d.message, "kind");
    make();
    f[64 + 16] ^= 1; /* section length, checksum not updated */
    EXPECT_INT(parse(&d), CXS_E_CHECKSUM);
    make();
    cxs_st16(f + 8, 2);
    rehash();
    EXPECT_INT(parse(&d), CXS_E_VERSION);
    make();
    cxs_st16(f + 10, 7); /* a newer minor version is fine */
    rehash();
    EXPECT_INT(parse(&d), 0);
    make();
    f[40] = 1;
    rehash();
    EXPECT_INT(parse(&d), CXS_E_CORRUPT);
    EXPECT_STR_HAS(d.message, "reserved");
    make();
    cxs_st64(f + 64 + 32 + 8, CXS_PAGE + 8); /* unaligned offset */
    rehash();
    EXPECT_INT(parse(&d), CXS_E_CORRUPT);
    make();
    cxs_st64(f + 64 + 32 + 16, CXS_PAGE * 5); /* past the end */
    rehash();
    EXPECT_INT(parse(&d), CXS_E_TRUNCATED);
    make();
    cxs_st64(f + 64 + 32 + 8, CXS_PAGE); /* overlaps section 0 */
    rehash();
    EXPECT_INT(parse(&d), CXS_E_CORRUPT);
    make();
    cxs_st32(f + 64 + 32, 999); /* unknown optional section: ignored */
    rehash();
    EXPECT_INT(parse(&d), 0);
    cxs_st32(f + 64 + 32 + 4, 1); /* ... but refused when required */
    rehash();
    EXPECT_INT(parse(&d), CXS_E_UNSUPPORTED);
    make();
    cxs_st32(f + 24, 0);
    rehash();
    EXPECT_INT(parse(&d), CXS_E_CORRUPT);
}
END_TEST_

TEST(strtab) {
    uint8_t t[8 * 3 + 5];
    cxs_diag d;
    cxs_st64(t, 0);
    cxs_st64(t + 8, 2);
    cxs_st64(t + 16, 5);
    memcpy(t + 24, "abcde", 5);
    EXPECT_INT(cxs_strtab_check(t, sizeof t, 2, 10, "IDS", "x", &d), 0);
    EXPECT_INT(cxs_strtab_check(t, sizeof t, 2, 2, "IDS", "x", &d), CXS_E_CORRUPT); /* too long */
    EXPECT_INT(cxs_strtab_check(t, sizeof t, 3, 10, "IDS", "x", &d), CXS_E_CORRUPT);
    EXPECT_INT(cxs_strtab_check(t, sizeof t, UINT64_MAX / 4, 10, "IDS", "x", &d), CXS_E_CORRUPT);
    cxs_st64(t + 8, 0); /* empty string */
    EXPECT_INT(cxs_strtab_check(t, sizeof t, 2, 10, "IDS", "x", &d), CXS_E_CORRUPT);
    cxs_st64(t + 8, 2);
    t[25] = '\n';
    EXPECT_INT(cxs_strtab_check(t, sizeof t, 2, 10, "IDS", "x", &d), CXS_E_CORRUPT);
    EXPECT_STR_HAS(d.message, "control");
}
END_TEST_

/* VOCAB symbols must be distinct (spec section 5.3): CXS_E_CORRUPT. */
TEST(strtab_distinct) {
    uint8_t t[8 * 4 + 6];
    cxs_diag d;
    cxs_st64(t, 0);
    cxs_st64(t + 8, 2);
    cxs_st64(t + 16, 3);
    cxs_st64(t + 24, 6);
    memcpy(t + 32, "abcabc", 6); /* "ab" "c" "abc" */
    EXPECT_INT(cxs_strtab_check(t, sizeof t, 3, 10, "VOCAB", "x", &d), 0);
    EXPECT_INT(cxs_strtab_distinct(t, 3, "VOCAB", "x", &d), 0);
    cxs_st64(t + 16, 4); /* "ab" "ca" "bc": still distinct */
    EXPECT_INT(cxs_strtab_distinct(t, 3, "VOCAB", "x", &d), 0);
    memcpy(t + 32, "abcaab", 6); /* "ab" "ca" "ab" */
    EXPECT_INT(cxs_strtab_distinct(t, 3, "VOCAB", "x", &d), CXS_E_CORRUPT);
    EXPECT_STR_HAS(d.message, "strings 0 and 2 are both 'ab'");
    EXPECT_INT(cxs_strtab_distinct(t, 1, "VOCAB", "x", &d), 0);
}
END_TEST_

/* The CHUNKS head (spec section 4.6): codec and filter first
 * (CXS_E_UNSUPPORTED), then raw_length, chunk_rows, num_chunks, reserved
 * bytes, entries (CXS_E_CORRUPT). */
TEST(chunks_order) {
    uint8_t c[CXS_CHUNKS_HEAD + 2 * CXS_CHUNK_ENTRY];
    cxs_chunks_head h = {CXS_COMPRESSION_ZSTD, CXS_FILTER_SHUFFLE, 5 * 8, 3, 3, 2};
    cxs_chunks_head out;
    cxs_diag d;
    /* 5 rows of 8 bytes, 3 rows per chunk: 2 chunks ending at 10 and 17 */
#define RESET()                                                                \
    do {                                                                       \
        cxs_chunks_head_store(c, &h);                                          \
        cxs_st64(c + CXS_CHUNKS_HEAD, 10);                                     \
        cxs_st64(c + CXS_CHUNKS_HEAD + 8, 1);                                  \
        cxs_st64(c + CXS_CHUNKS_HEAD + 16, 17);                                \
        cxs_st64(c + CXS_CHUNKS_HEAD + 24, 2);                                 \
    } while (0)
#define LOAD() cxs_chunks_load(c, sizeof c, 40, 8, 17, &out, "x", &d)
    RESET();
    EXPECT_INT(LOAD(), 0);
    EXPECT_UINT(out.num_chunks, 2);
    /* every field wrong at once: the codec is reported */
    RESET();
    cxs_st32(c, 9);
    cxs_st32(c + 4, 9);
    cxs_st64(c + 8, 41);
    cxs_st32(c + 16, 0);
    cxs_st64(c + 24, 7);
    c[40] = 1;
    cxs_st64(c + CXS_CHUNKS_HEAD, 0);
    EXPECT_INT(LOAD(), CXS_E_UNSUPPORTED);
    EXPECT_STR_HAS(d.message, "codec");
    cxs_st32(c, CXS_COMPRESSION_ZSTD);
    EXPECT_INT(LOAD(), CXS_E_UNSUPPORTED);
    EXPECT_STR_HAS(d.message, "filter");
    cxs_st32(c + 4, 0);
    EXPECT_INT(LOAD(), CXS_E_CORRUPT);
    EXPECT_STR_HAS(d.message, "raw length");
    cxs_st64(c + 8, 40);
    EXPECT_INT(LOAD(), CXS_E_CORRUPT);
    EXPECT_STR_HAS(d.message, "rows per chunk");
    cxs_st32(c + 16, 3);
    EXPECT_INT(LOAD(), CXS_E_CORRUPT);
    EXPECT_STR_HAS(d.message, "expected 2 chunks");
    cxs_st64(c + 24, 2);
    EXPECT_INT(LOAD(), CXS_E_CORRUPT);
    EXPECT_STR_HAS(d.message, "reserved");
    c[40] = 0;
    EXPECT_INT(LOAD(), CXS_E_CORRUPT);
    EXPECT_STR_HAS(d.message, "chunk 0 ends at 0");
    /* 0 < end[0] < end[1] = the ZFEATURES length */
    RESET();
    cxs_st64(c + CXS_CHUNKS_HEAD + 16, 10);
    EXPECT_INT(LOAD(), CXS_E_CORRUPT);
    RESET();
    cxs_st64(c + CXS_CHUNKS_HEAD + 16, 16);
    EXPECT_INT(LOAD(), CXS_E_CORRUPT);
    EXPECT_STR_HAS(d.message, "ZFEATURES is 17 bytes");
    RESET();
    EXPECT_INT(cxs_chunks_load(c, 63, 40, 8, 17, &out, "x", &d), CXS_E_CORRUPT);
#undef RESET
#undef LOAD
}
END_TEST_

TEST(le_helpers) {
    uint8_t b[8];
    cxs_st64(b, 0x0102030405060708ull);
    EXPECT_UINT(b[0], 8);
    EXPECT_UINT(b[7], 1);
    EXPECT_UINT(cxs_ld64(b), 0x0102030405060708ull);
    EXPECT_UINT(cxs_ld32(b), 0x05060708u);
    EXPECT_UINT(cxs_ld16(b), 0x0708u);
    cxs_stf64(b, -1.5);
    EXPECT(cxs_ldf64(b) == -1.5);
}
END_TEST_

/* The size the writer and the packer's plan cut shards by: a header page,
 * then every section on its own pages (features with guard rows around
 * each utterance, labels, index, ids, SHARD_META). */
TEST(shard_file_size) {
    /* 1 utterance of 10 frames x 28 float32, guard 64: 138 rows, 4 pages */
    EXPECT_UINT(cxs_shard_file_size(1, 10, 3, 28, 4, 64, 1, 0), 4096 + 16384 + 4 * 4096);
    EXPECT_UINT(cxs_shard_file_size(1, 10, 3, 28, 4, 64, 0, 0), 4096 + 16384 + 3 * 4096);
    /* 600 utterances: index and id offsets pass a page (8 * 601 bytes) */
    EXPECT_UINT(cxs_shard_file_size(600, 600, 600, 1, 2, 0, 2, 0),
                4096 + 4096 + 4096 + 2 * 4096 + 2 * 4096 + 4096);
}
END_TEST_

/* Spec 4.6: a frame whose window exceeds 2^27 bytes is refused, whatever
 * else it holds.  The frame is built by hand (RFC 8878): a
 * Window_Descriptor (not single-segment), a 4-byte content size and one
 * raw block of 16 bytes. */
static size_t wframe(uint8_t *out, uint8_t window_descriptor) {
    size_t o = 0;
    cxs_st32(out, 0xFD2FB528u);
    o = 4;
    out[o++] = 0x80; /* FCS_Field_Size 4, no single segment, no checksum/dict */
    out[o++] = window_descriptor;
    cxs_st32(out + o, 16);
    o += 4;
    uint32_t bh = 1u | (16u << 3); /* last block, raw, 16 bytes */
    out[o++] = (uint8_t)bh;
    out[o++] = (uint8_t)(bh >> 8);
    out[o++] = (uint8_t)(bh >> 16);
    for (int i = 0; i < 16; i++) out[o++] = (uint8_t)(i + 1);
    return o;
}

TEST(zchunk_window_limit) {
    ZSTD_DCtx *dc = ZSTD_createDCtx();
    uint8_t fr[64], dst[16], scratch[16];
    /* Window_Descriptor: exponent e (bits 7-3), mantissa m (bits 2-0):
     * 2^(10+e) + m * 2^(10+e)/8 */
    struct { uint8_t wd; int ok; } cases[] = {
        {0x00, 1},               /* 1 KiB */
        {(17 << 3), 1},          /* 2^27: the limit, accepted */
        {(17 << 3) | 1, 0},      /* 2^27 + 2^24 */
        {(21 << 3), 0},          /* 2^31 */
        {(22 << 3), 0},          /* 2^32 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = wframe(fr, cases[i].wd);
        memset(dst, 0, sizeof dst);
        int r = cxs_zchunk_decode(dc, 0, 4, fr, n, scratch, dst, sizeof dst);
        ck_assert_msg(r == (cases[i].ok ? 0 : -1), "window descriptor 0x%02x: %d", cases[i].wd, r);
        if (cases[i].ok) EXPECT_UINT(dst[15], 16);
    }
    ZSTD_freeDCtx(dc);
}
END_TEST_

RUN_SUITE("format", round_trip, refusals, strtab, strtab_distinct, chunks_order, le_helpers,
          shard_file_size, zchunk_window_limit)
