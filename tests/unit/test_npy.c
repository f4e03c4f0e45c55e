/* The .npy header parser: valid headers of every version, and refusals. */
#include <stdio.h>
#include <string.h>

#include "cxs_le.h"
#include "cxs_npy.h"
#include "cxs_test.h"

static uint8_t file[4096];

/* Build a file: magic, version, header dict, data of `data` bytes. */
static size_t build(int major, const char *dict, size_t data) {
    size_t hs = major == 1 ? 10 : 12, dl = strlen(dict);
    memcpy(file, "\x93NUMPY", 6);
    file[6] = (uint8_t)major;
    file[7] = 0;
    if (major == 1) cxs_st16(file + 8, (uint16_t)dl);
    else cxs_st32(file + 8, (uint32_t)dl);
    memcpy(file + hs, dict, dl);
    memset(file + hs + dl, 0x5a, data);
    return hs + dl + data;
}

static cxs_diag diag;
/* The reason of the last refusal, into why (the tests' 256 bytes). */
static int parse(size_t n, cxs_npy *h, char *why) {
    int rc = cxs_npy_parse(file, n, h, &diag);
    snprintf(why, 256, "%.255s", rc ? diag.message : "");
    return rc;
}

TEST(versions) {
    cxs_npy h;
    char why[256];
    const char *d = "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }   \n";
    for (int v = 1; v <= 3; v++) {
        size_t n = build(v, d, 24);
        EXPECT_INT(parse(n, &h, why), 0);
        EXPECT_INT(h.major, v);
        EXPECT_INT(h.ndim, 2);
        EXPECT_UINT(h.shape[0], 3);
        EXPECT_UINT(h.shape[1], 2);
        EXPECT_UINT(h.itemsize, 4);
        EXPECT_INT(h.kind, 'f');
        EXPECT_UINT(h.data_offset, (v == 1 ? 10 : 12) + strlen(d));
    }
    EXPECT_INT(parse(build(4, d, 24), &h, why), CXS_E_INPUT);
    EXPECT_STR_HAS(why, "version 4.0");
}
END_TEST_

TEST(descr_kinds) {
    cxs_npy h;
    char why[256];
    EXPECT_INT(parse(build(1, "{'descr': '>f8', 'fortran_order': True, 'shape': (2, 1)}", 16), &h, why), 0);
    EXPECT(h.big_endian && h.fortran_order && h.itemsize == 8);
    EXPECT_INT(parse(build(1, "{'descr': '<U5', 'fortran_order': False, 'shape': (4,), }", 80), &h, why), 0);
    EXPECT(h.kind == 'U' && h.itemsize == 20 && h.ndim == 1 && h.count == 4);
    EXPECT_INT(parse(build(1, "{'descr': '|S3', 'fortran_order': False, 'shape': (2,), }", 6), &h, why), 0);
    EXPECT(h.kind == 'S' && h.itemsize == 3);
    EXPECT_INT(parse(build(1, "{'shape': (5,), 'descr': '<i8', 'fortran_order': False}", 40), &h, why), 0);
    EXPECT(h.kind == 'i' && h.count == 5);
    EXPECT_INT(parse(build(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }", 4), &h, why), 0);
    EXPECT(h.ndim == 0 && h.count == 1);
    EXPECT_INT(parse(build(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3L, 0L), }", 0), &h, why), 0);
    EXPECT(h.count == 0);
}
END_TEST_

TEST(refusals) {
    cxs_npy h;
    char why[256];
    EXPECT_INT(parse(build(1, "{'descr': '|O', 'fortran_order': False, 'shape': (2,), }", 16), &h, why), CXS_E_INPUT);
    EXPECT_STR_HAS(why, "astype");
    EXPECT_INT(parse(build(1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", 8), &h, why), CXS_E_INPUT);
    EXPECT_STR_HAS(why, "structured");
    EXPECT_INT(parse(build(1, "{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", 16), &h, why), CXS_E_INPUT);
    EXPECT_INT(parse(build(1, "{'descr': '<f3', 'fortran_order': False, 'shape': (2,), }", 6), &h, why), CXS_E_INPUT);
    EXPECT_INT(parse(build(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-2, 3), }", 0), &h, why), CXS_E_INPUT);
    EXPECT_STR_HAS(why, "negative");
    EXPECT_INT(parse(build(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 2), }", 0), &h, why), CXS_E_INPUT);
    EXPECT_STR_HAS(why, "overflow");
    EXPECT_INT(parse(build(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", 0), &h, why), CXS_E_INPUT);
    EXPECT_INT(parse(build(1, "{'descr': '<f4', 'fortran_order': False}", 0), &h, why), CXS_E_INPUT);
    EXPECT_STR_HAS(why, "shape");
    EXPECT_INT(parse(build(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", 8), &h, why), CXS_E_INPUT);
    EXPECT_INT(parse(build(1, "'descr': '<f4'", 8), &h, why), CXS_E_INPUT);
    EXPECT_INT(parse(build(1, "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2,)}", 8), &h, why), CXS_E_INPUT);
}
END_TEST_

TEST(sizes) {
    cxs_npy h;
    char why[256];
    const char *d = "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }";
    size_t n = build(1, d, 24);
    EXPECT_INT(parse(n - 1, &h, why), CXS_E_INPUT);
    EXPECT_STR_HAS(why, "truncated");
    EXPECT_INT(parse(n + 4, &h, why), CXS_E_INPUT);
    EXPECT_STR_HAS(why, "unexpected bytes");
    /* Header length past the end of the file. */
    build(1, d, 0);
    cxs_st16(file + 8, 60000);
    EXPECT_INT(parse(n, &h, why), CXS_E_INPUT);
    EXPECT_STR_HAS(why, "truncated");
    EXPECT_INT(parse(9, &h, why), CXS_E_INPUT);
    memcpy(file, "NUMPY!", 6);
    EXPECT_INT(parse(n, &h, why), CXS_E_INPUT);
    EXPECT_STR_HAS(why, "magic");
}
END_TEST_

TEST(writer_reads_back) {
    char buf[256];
    uint64_t shape[2] = {1234, 28};
    size_t n = cxs_npy_header(buf, sizeof buf, "<f4", 2, shape);
    EXPECT(n > 0 && n % 64 == 0 && buf[n - 1] == '\n');
    memcpy(file, buf, n);
    cxs_npy h;
    char why[256];
    EXPECT_INT(parse(n + 0, &h, why), CXS_E_INPUT); /* no data yet */
    uint64_t one[1] = {7};
    n = cxs_npy_header(buf, sizeof buf, "<i8", 1, one);
    memcpy(file, buf, n);
    memset(file + n, 0, 56);
    EXPECT_INT(parse(n + 56, &h, why), 0);
    EXPECT(h.ndim == 1 && h.shape[0] == 7 && h.kind == 'i');
}
END_TEST_

RUN_SUITE("npy", versions, descr_kinds, refusals, sizes, writer_reads_back)
