/* The writer API (ctxshard_writer.h) from C: what it writes reads back
 * exactly; every input form (element types, strides, byte orders, label
 * widths, the transcript form) gives the same bytes; the rules refuse with
 * the id and the reason and leave the writer usable; options are checked;
 * abort, a failed commit and a full disk leave nothing behind. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctxshard_writer.h"
#include "cxs_test.h"

static char dir[256];

static void setup_dir(void) {
    snprintf(dir, sizeof dir, "/tmp/ctxshard-writer-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static char *at(const char *name) {
    static char p[4][512];
    static int i;
    i = (i + 1) % 4;
    snprintf(p[i], sizeof p[i], "%s/%s", dir, name);
    return p[i];
}

/* Entries of dir (. and .. aside). */
static int entries(void) {
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

static void rm_rf(const char *p) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", p);
    ck_assert_int_eq(system(cmd), 0);
}

/* Whether two dataset directories hold the same files, byte for byte. */
static int same_files(const char *a, const char *b) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "diff -r '%s' '%s' >/dev/null", a, b);
    return system(cmd) == 0;
}

static const char *const VOCAB[] = {"a", "b", "c", "[SOS]", "[EOS]"};
enum { NU = 6, D = 5, TMAX = 40 };

/* Deterministic utterances: T_u frames, values with fractions. */
static uint64_t frames_of(int u) { return 7 + (uint64_t)u * 6; }
static float value(int u, uint64_t t, uint64_t d) {
    return (float)(u * 1000 + (int)t) * 0.25f - (float)d * 1.5f;
}
static uint8_t label(int u, uint64_t t) { return (uint8_t)((u + t) % 3); }

static cxs_writer_opts opts(void) {
    cxs_writer_opts o;
    cxs_writer_opts_init(&o);
    o.vocab = VOCAB;
    o.vocab_size = 5;
    o.guard = 3;
    o.shard_size = 16 << 10;
    return o;
}

/* Write the utterances with form f of the input; returns the commit's rc. */
enum { F_C32, F_F64, F_FORTRAN, F_BIG, F_NEGATIVE, F_LAB16, F_LAB32, F_LAB64, F_FRAMED, F_N };

static int write_form(const char *out, int form, const cxs_writer_opts *o) {
    cxs_writer *w = NULL;
    cxs_diag dg;
    int rc = cxs_writer_create(out, o, &w, &dg);
    ck_assert_msg(rc == 0, "%s", dg.message);
    for (int u = 0; u < NU; u++) {
        const uint64_t T = frames_of(u);
        float f32[TMAX * D];
        double f64[TMAX * D];
        uint8_t big[TMAX * D * 4];
        uint8_t l8[TMAX + 2];
        uint16_t l16[TMAX];
        int32_t l32[TMAX];
        int64_t l64[TMAX + 2];
        cxs_writer_utt x = {0};
        x.frames = T;
        x.dim = D;
        x.type = CXS_DTYPE_F32;
        x.label_size = 1;
        x.labels = l8;
        x.label_count = T;
        for (uint64_t t = 0; t < T; t++) {
            l8[t] = label(u, t);
            l16[t] = l8[t];
            l32[t] = l8[t];
            l64[t] = l8[t];
            for (uint64_t d = 0; d < D; d++) f32[t * D + d] = value(u, t, d);
        }
        x.data = f32;
        switch (form) {
        case F_F64:
            for (uint64_t i = 0; i < T * D; i++) f64[i] = f32[i];
            x.data = f64;
            x.type = CXS_DTYPE_F64;
            break;
        case F_FORTRAN: /* column-major copy */
            for (uint64_t t = 0; t < T; t++)
                for (uint64_t d = 0; d < D; d++) f64[d * T + t] = value(u, t, d);
            x.data = f64;
            x.type = CXS_DTYPE_F64;
            x.row_stride = 8;
            x.col_stride = (int64_t)(8 * T);
            break;
        case F_BIG:
            for (uint64_t i = 0; i < T * D; i++) {
                uint32_t b;
                memcpy(&b, &f32[i], 4);
                b = __builtin_bswap32(b);
                memcpy(big + 4 * i, &b, 4);
            }
            x.data = big;
            x.big_endian = 1;
            break;
        case F_NEGATIVE: /* rows stored last to first, walked backwards */
            for (uint64_t t = 0; t < T; t++)
                for (uint64_t d = 0; d < D; d++) f64[(T - 1 - t) * D + d] = value(u, t, d);
            x.data = f64 + (T - 1) * D;
            x.type = CXS_DTYPE_F64;
            x.row_stride = -(int64_t)(8 * D);
            x.col_stride = 8;
            break;
        case F_LAB16: x.labels = l16; x.label_size = 2; break;
        case F_LAB32: x.labels = l32; x.label_size = 4; break;
        case F_LAB64: x.labels = l64; x.label_size = 8; break;
        case F_FRAMED:
            l64[0] = 3;
            for (uint64_t t = 0; t < T; t++) l64[t + 1] = label(u, t);
            l64[T + 1] = 4;
            x.labels = l64;
            x.label_size = 8;
            x.label_count = T + 2;
            break;
        }
        char id[32];
        snprintf(id, sizeof id, "utt-%02d", u);
        rc = cxs_writer_add(w, id, &x, &dg);
        ck_assert_msg(rc == 0, "form %d: %s", form, dg.message);
    }
    cxs_writer_info info;
    rc = cxs_writer_commit(w, &info, &dg);
    if (rc == 0) {
        ck_assert_uint_eq(info.num_utterances, NU);
        ck_assert_uint_eq(info.dim, D);
        ck_assert_uint_gt(info.num_shards, 1);
    }
    return rc;
}

TEST(reads_back_exactly) {
    setup_dir();
    cxs_writer_opts o = opts();
    ck_assert_int_eq(write_form(at("out"), F_C32, &o), 0);
    cxs_dataset *ds;
    cxs_diag dg;
    ck_assert_int_eq(cxs_dataset_open(at("out"), &ds, &dg), 0);
    cxs_info in;
    cxs_dataset_info(ds, &in);
    EXPECT_UINT(in.num_utterances, NU);
    EXPECT_UINT(in.dim, D);
    EXPECT_UINT(in.guard, 3);
    EXPECT_UINT(in.vocab_size, 5);
    for (int u = 0; u < NU; u++) {
        cxs_utterance ut;
        ck_assert_int_eq(cxs_dataset_utterance(ds, (uint64_t)u, &ut), 0);
        EXPECT_UINT(ut.num_frames, frames_of(u));
        const float *f = ut.features;
        for (uint64_t t = 0; t < ut.num_frames; t++) {
            EXPECT_LOOP(((const uint8_t *)ut.labels)[t] == label(u, t));
            for (uint64_t d = 0; d < D; d++) EXPECT_LOOP(f[t * D + d] == value(u, t, d));
        }
    }
    ck_assert_int_eq(cxs_dataset_verify(ds, NULL, NULL, &dg), 0);
    cxs_dataset_close(ds);
    rm_rf(dir);
}
END_TEST

TEST(every_input_form_same_bytes) {
    setup_dir();
    cxs_writer_opts o = opts();
    ck_assert_int_eq(write_form(at("ref"), F_C32, &o), 0);
    for (int f = F_F64; f < F_N; f++) {
        char name[32];
        snprintf(name, sizeof name, "form%d", f);
        ck_assert_int_eq(write_form(at(name), f, &o), 0);
        ck_assert_msg(same_files(at("ref"), at(name)), "input form %d wrote other bytes", f);
    }
    /* compressed and float16: also independent of the input form */
    o.compression = CXS_COMPRESSION_ZSTD;
    o.dtype = CXS_DTYPE_F16;
    o.chunk_size = 100;
    ck_assert_int_eq(write_form(at("zref"), F_C32, &o), 0);
    ck_assert_int_eq(write_form(at("zbig"), F_BIG, &o), 0);
    ck_assert(same_files(at("zref"), at("zbig")));
    /* compression threads: chunks come back in order, the same bytes */
    for (uint32_t t = 2; t <= 5; t += 3) {
        o.threads = t;
        ck_assert_int_eq(write_form(at("zthreads"), F_FORTRAN, &o), 0);
        ck_assert_msg(same_files(at("zref"), at("zthreads")), "%u threads", t);
    }
    o.threads = CXS_WRITER_MAX_THREADS + 1;
    cxs_writer *w;
    cxs_diag dg;
    ck_assert_int_eq(cxs_writer_create(at("x"), &o, &w, &dg), CXS_E_INVALID);
    o.threads = 0;
    ck_assert(!same_files(at("ref"), at("zref")));
    rm_rf(dir);
}
END_TEST

/* One utterance of T frames (D columns of f) with labels lab. */
static int add1(cxs_writer *w, const char *id, const float *f, uint64_t T, uint64_t dim,
                const void *lab, uint64_t nlab, uint32_t lsize, cxs_diag *dg) {
    cxs_writer_utt x = {0};
    x.data = f;
    x.frames = T;
    x.dim = dim;
    x.type = CXS_DTYPE_F32;
    x.labels = lab;
    x.label_count = nlab;
    x.label_size = lsize;
    return cxs_writer_add(w, id, &x, dg);
}

TEST(rules_refuse_and_writer_goes_on) {
    setup_dir();
    cxs_writer_opts o = opts();
    cxs_writer *w;
    cxs_diag dg;
    ck_assert_int_eq(cxs_writer_create(at("out"), &o, &w, &dg), 0);
    float f[4 * D] = {0}, g[4 * 3] = {0};
    uint8_t lab[6] = {0, 1, 2, 1, 0, 0};
    ck_assert_int_eq(add1(w, "m", f, 4, D, lab, 4, 1, &dg), 0);
    struct {
        const char *id;
        const float *f;
        uint64_t T, dim, nlab;
        const void *lab;
        const char *want;
    } bad[] = {
        {"n", g, 4, 3, 4, lab, "n: 3 features per frame, expected 5 like the first utterance"},
        {"n", f, 0, D, 0, lab, "n: empty utterance (0 frames)"},
        {"n", f, 4, D, 5, lab, "n: 5 labels, expected 4 (one per frame) or 6"},
        {"", f, 4, D, 4, lab, "utterance id is empty"},
        {"n\t1", f, 4, D, 4, lab, "control byte 0x09"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int rc = add1(w, bad[i].id, bad[i].f, bad[i].T, bad[i].dim, bad[i].lab, bad[i].nlab, 1,
                      &dg);
        ck_assert_int_eq(rc, CXS_E_INPUT);
        ck_assert_msg(strstr(dg.message, bad[i].want), "case %zu: %s", i, dg.message);
    }
    /* the order is the caller's to keep: refused as a mistake, never a
     * bad utterance to skip */
    ck_assert_int_eq(add1(w, "b", f, 4, D, lab, 4, 1, &dg), CXS_E_INVALID);
    EXPECT_STR_HAS(dg.message, "b: utterance id comes after 'm': ids must arrive in increasing");
    ck_assert_int_eq(add1(w, "m", f, 4, D, lab, 4, 1, &dg), CXS_E_INVALID);
    EXPECT_STR_HAS(dg.message, "m: duplicate utterance id");
    /* a skip list line per utterance: no TAB or newline to forge another */
    ck_assert_int_eq(cxs_writer_skip(w, "q\tx", "why"), CXS_E_INVALID);
    ck_assert_int_eq(cxs_writer_skip(w, "q\nx", "why"), CXS_E_INVALID);
    ck_assert_int_eq(cxs_writer_skip(w, "", "why"), CXS_E_INVALID);
    ck_assert_int_eq(cxs_writer_skip(w, "q", "bad\nforged\tline"), CXS_E_INVALID);
    ck_assert_int_eq(cxs_writer_skip(w, "q", "a\ttab"), CXS_E_INVALID);
    uint8_t out_of_range[4] = {0, 5, 0, 0};
    ck_assert_int_eq(add1(w, "n", f, 4, D, out_of_range, 4, 1, &dg), CXS_E_INPUT);
    EXPECT_STR_HAS(dg.message, "n: frame 1: label 5 is outside the vocabulary (0..4)");
    uint8_t sos_inside[4] = {0, 3, 0, 0};
    ck_assert_int_eq(add1(w, "n", f, 4, D, sos_inside, 4, 1, &dg), CXS_E_INPUT);
    EXPECT_STR_HAS(dg.message, "n: frame 1: [SOS] inside the transcript");
    uint8_t framed_bad[6] = {0, 1, 1, 1, 1, 4};
    ck_assert_int_eq(add1(w, "n", f, 4, D, framed_bad, 6, 1, &dg), CXS_E_INPUT);
    EXPECT_STR_HAS(dg.message, "n: position 0: label 0, expected [SOS] (3)");
    float nan4[4 * D] = {0};
    nan4[2 * D + 3] = NAN;
    ck_assert_int_eq(add1(w, "n", nan4, 4, D, lab, 4, 1, &dg), CXS_E_INPUT);
    EXPECT_STR_HAS(dg.message, "n: NaN at frame 2, dimension 3");
    nan4[2 * D + 3] = -INFINITY;
    ck_assert_int_eq(add1(w, "n", nan4, 4, D, lab, 4, 1, &dg), CXS_E_INPUT);
    EXPECT_STR_HAS(dg.message, "n: ");
    EXPECT_STR_HAS(dg.message, "frame 2, dimension 3");
    ck_assert_int_eq(add1(w, "n", f, 4, D, NULL, 0, 1, &dg), CXS_E_INPUT);
    EXPECT_STR_HAS(dg.message, "n: no labels");
    ck_assert_int_eq(add1(w, "n", f, 4, D, lab, 4, 3, &dg), CXS_E_INVALID);
    /* all refused: the writer is as it was, and goes on */
    cxs_writer_info info;
    cxs_writer_info_get(w, &info);
    EXPECT_UINT(info.num_utterances, 1);
    EXPECT_UINT(info.num_frames, 4);
    ck_assert_int_eq(add1(w, "n", f, 4, D, lab, 4, 1, &dg), 0);
    ck_assert_int_eq(cxs_writer_skip(w, "o", "not wanted"), 0);
    ck_assert_int_eq(cxs_writer_commit(w, &info, &dg), 0);
    EXPECT_UINT(info.num_utterances, 2);
    EXPECT_UINT(info.num_skipped, 1);
    cxs_dataset *ds;
    ck_assert_int_eq(cxs_dataset_open(at("out"), &ds, &dg), 0);
    const char *text;
    size_t n;
    cxs_dataset_skipped(ds, &text, &n);
    ck_assert_int_eq((int)n, (int)strlen("o\tnot wanted\n"));
    ck_assert(memcmp(text, "o\tnot wanted\n", n) == 0);
    cxs_dataset_close(ds);
    rm_rf(dir);
}
END_TEST

TEST(options_and_outputs_checked) {
    setup_dir();
    cxs_writer *w = NULL;
    cxs_diag dg;
    cxs_writer_opts o = opts();
    o.guard = 5000;
    ck_assert_int_eq(cxs_writer_create(at("x"), &o, &w, &dg), CXS_E_INVALID);
    EXPECT_STR_HAS(dg.message, "guard 5000");
    o = opts();
    o.shard_size = 100;
    ck_assert_int_eq(cxs_writer_create(at("x"), &o, &w, &dg), CXS_E_INVALID);
    o = opts();
    o.dtype = 9;
    ck_assert_int_eq(cxs_writer_create(at("x"), &o, &w, &dg), CXS_E_INVALID);
    o = opts();
    o.compression = CXS_COMPRESSION_ZSTD;
    o.level = 20;
    ck_assert_int_eq(cxs_writer_create(at("x"), &o, &w, &dg), CXS_E_INVALID);
    static const char *const twice[] = {"a", "a"};
    o = opts();
    o.vocab = twice;
    o.vocab_size = 2;
    ck_assert_int_eq(cxs_writer_create(at("x"), &o, &w, &dg), CXS_E_INVALID);
    EXPECT_STR_HAS(dg.message, "symbol 'a' appears twice");
    ck_assert_int_eq(entries(), 0);
    /* a directory that is not a dataset is never replaced */
    ck_assert_int_eq(mkdir(at("mine"), 0755), 0);
    FILE *fp = fopen(at("mine/notes"), "w");
    ck_assert_ptr_nonnull(fp);
    fclose(fp);
    o = opts();
    ck_assert_int_eq(cxs_writer_create(at("mine"), &o, &w, &dg), -EEXIST);
    EXPECT_STR_HAS(dg.message, "not a ctxshard dataset");
    ck_assert_int_eq(entries(), 1);
    /* no utterance: refused at commit, nothing left */
    ck_assert_int_eq(cxs_writer_create(at("empty"), &o, &w, &dg), 0);
    ck_assert_int_eq(cxs_writer_commit(w, NULL, &dg), CXS_E_INVALID);
    EXPECT_STR_HAS(dg.message, "no utterance added");
    ck_assert_int_eq(entries(), 1);
    cxs_writer_abort(NULL);
    rm_rf(dir);
}
END_TEST

TEST(abort_and_full_disk_leave_nothing) {
    setup_dir();
    cxs_writer_opts o = opts();
    /* a previous dataset at OUT */
    ck_assert_int_eq(write_form(at("out"), F_C32, &o), 0);
    ck_assert_int_eq(write_form(at("copy"), F_C32, &o), 0);
    cxs_writer *w;
    cxs_diag dg;
    ck_assert_int_eq(cxs_writer_create(at("out"), &o, &w, &dg), 0);
    float f[8 * D] = {1};
    uint8_t lab[8] = {0};
    for (int i = 0; i < 30; i++) {
        char id[16];
        snprintf(id, sizeof id, "z%03d", i);
        ck_assert_int_eq(add1(w, id, f, 8, D, lab, 8, 1, &dg), 0);
    }
    cxs_writer_abort(w);
    ck_assert_int_eq(entries(), 2);
    ck_assert(same_files(at("out"), at("copy")));
    /* a full disk (injected after 20 KiB, in a build with the test hooks):
     * an error, then nothing new; without the hooks the variable is
     * ignored and the writer commits */
    setenv("CXS_PACK_FAULT", "enospc:20000", 1);
    ck_assert_int_eq(cxs_writer_create(at("out"), &o, &w, &dg), 0);
    unsetenv("CXS_PACK_FAULT");
    int rc = 0;
    for (int i = 0; i < 30 && rc == 0; i++) {
        char id[16];
        snprintf(id, sizeof id, "z%03d", i);
        rc = add1(w, id, f, 8, D, lab, 8, 1, &dg);
    }
#ifndef CXS_TEST_HOOKS
    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq(cxs_writer_commit(w, NULL, &dg), 0);
    ck_assert(!same_files(at("out"), at("copy")));
    rm_rf(dir);
    return;
#endif
    if (rc == 0) rc = cxs_writer_commit(w, NULL, &dg);
    else {
        ck_assert_int_eq(rc, -ENOSPC);
        ck_assert_int_eq(add1(w, "zz", f, 8, D, lab, 8, 1, &dg), CXS_E_INVALID);
        EXPECT_STR_HAS(dg.message, "failed earlier");
        ck_assert_int_eq(cxs_writer_commit(w, NULL, &dg), CXS_E_INVALID);
    }
    ck_assert_int_ne(rc, 0);
    ck_assert_int_eq(entries(), 2);
    ck_assert(same_files(at("out"), at("copy")));
    rm_rf(dir);
}
END_TEST

TEST(manual_cut) {
    setup_dir();
    cxs_writer_opts o = opts();
    o.flags = CXS_WRITER_MANUAL_CUT;
    o.shard_size = 16 << 10;
    cxs_writer *w;
    cxs_diag dg;
    ck_assert_int_eq(cxs_writer_create(at("out"), &o, &w, &dg), 0);
    float f[200 * D] = {0};
    uint8_t lab[200] = {0};
    ck_assert_int_eq(add1(w, "a", f, 200, D, lab, 200, 1, &dg), 0);
    ck_assert_int_eq(add1(w, "b", f, 200, D, lab, 200, 1, &dg), 0); /* past 16 KiB: no cut */
    ck_assert_int_eq(cxs_writer_cut(w, &dg), 0);
    ck_assert_int_eq(cxs_writer_cut(w, &dg), 0); /* no shard open: no-op */
    ck_assert_int_eq(add1(w, "c", f, 10, D, lab, 10, 1, &dg), 0);
    cxs_writer_info info;
    ck_assert_int_eq(cxs_writer_commit(w, &info, &dg), 0);
    EXPECT_UINT(info.num_shards, 2);
    cxs_dataset *ds;
    ck_assert_int_eq(cxs_dataset_open(at("out"), &ds, &dg), 0);
    cxs_utterance ut;
    ck_assert_int_eq(cxs_dataset_utterance(ds, 1, &ut), 0);
    EXPECT_UINT(ut.shard, 0);
    ck_assert_int_eq(cxs_dataset_utterance(ds, 2, &ut), 0);
    EXPECT_UINT(ut.shard, 1);
    cxs_dataset_close(ds);
    rm_rf(dir);
}
END_TEST

/* Label sequences (format 1.2): utterance u's sequence is 1 + u symbols
 * (u % 3, (u+1) % 3, ...), given framed ([SOS] .. [EOS]) for even u and
 * bare for odd u, in 8-byte elements; with or without frame labels, with or
 * without compression.  They read back exactly; the frame labels and the
 * features are those of a dataset without sequences. */
static int write_seqs(const char *out, uint32_t mode, uint32_t compression) {
    cxs_writer_opts o = opts();
    o.label_seqs = mode;
    o.compression = compression;
    cxs_writer *w;
    cxs_diag dg;
    ck_assert_int_eq(cxs_writer_create(out, &o, &w, &dg), 0);
    for (int u = 0; u < NU; u++) {
        const uint64_t T = frames_of(u);
        float f[TMAX * D];
        uint8_t lab[TMAX];
        int64_t sq[NU + 3];
        uint64_t n = 0;
        if (u % 2 == 0) sq[n++] = 3;
        for (int j = 0; j <= u; j++) sq[n++] = (u + j) % 3;
        if (u % 2 == 0) sq[n++] = 4;
        for (uint64_t t = 0; t < T; t++) {
            lab[t] = label(u, t);
            for (uint64_t d = 0; d < D; d++) f[t * D + d] = value(u, t, d);
        }
        cxs_writer_utt x = {0};
        x.data = f;
        x.frames = T;
        x.dim = D;
        x.type = CXS_DTYPE_F32;
        if (mode != CXS_SEQ_ONLY) {
            x.labels = lab;
            x.label_count = T;
            x.label_size = 1;
        }
        if (mode != CXS_SEQ_NONE) {
            x.seq = sq;
            x.seq_count = n;
            x.seq_size = 8;
        }
        char id[8];
        snprintf(id, sizeof id, "u%d", u);
        int rc = cxs_writer_add(w, id, &x, &dg);
        ck_assert_msg(rc == 0, "%s", dg.message);
    }
    return cxs_writer_commit(w, NULL, &dg);
}

TEST(label_sequences_read_back) {
    setup_dir();
    ck_assert_int_eq(write_seqs(at("plain"), CXS_SEQ_NONE, 0), 0);
    const uint32_t modes[2] = {CXS_SEQ_WITH_FRAMES, CXS_SEQ_ONLY};
    for (int m = 0; m < 2; m++)
        for (uint32_t z = 0; z < 2; z++) {
            rm_rf(at("seq"));
            ck_assert_int_eq(write_seqs(at("seq"), modes[m], z), 0);
            cxs_dataset *ds, *pl;
            cxs_diag dg;
            ck_assert_int_eq(cxs_dataset_open(at("seq"), &ds, &dg), 0);
            ck_assert_int_eq(cxs_dataset_open(at("plain"), &pl, &dg), 0);
            ck_assert_int_eq(cxs_dataset_verify(ds, NULL, NULL, &dg), 0);
            cxs_info in;
            cxs_dataset_info(ds, &in);
            ck_assert_uint_eq(in.format_minor, 3); /* block sums, format 1.3 */
            ck_assert_uint_eq(in.label_seqs, 1);
            ck_assert_uint_eq(in.label_width, modes[m] == CXS_SEQ_ONLY ? 0 : 1);
            ck_assert_uint_eq(in.min_seq_length, 1);
            ck_assert_uint_eq(in.max_seq_length, NU);
            ck_assert_uint_eq(in.seq_symbols, NU * (NU + 1) / 2);
            for (int u = 0; u < NU; u++) {
                int64_t got[NU + 1];
                uint32_t n;
                ck_assert_int_eq(cxs_dataset_label_seq(ds, (uint64_t)u, got, NU + 1, &n), 0);
                ck_assert_uint_eq(n, (uint32_t)u + 1);
                for (int j = 0; j <= u; j++) ck_assert_int_eq(got[j], (u + j) % 3);
                /* The same features (and frame labels) as without sequences. */
                uint64_t T = frames_of(u);
                float a[TMAX * D], b[TMAX * D];
                ck_assert_int_eq(cxs_dataset_read_features(ds, (uint64_t)u, 0, T, a), 0);
                ck_assert_int_eq(cxs_dataset_read_features(pl, (uint64_t)u, 0, T, b), 0);
                ck_assert(memcmp(a, b, sizeof(float) * T * D) == 0);
            }
            int64_t l[4];
            ck_assert_int_eq(cxs_dataset_labels(ds, 0, 4, l),
                             modes[m] == CXS_SEQ_ONLY ? CXS_E_NO_LABELS : 0);
            cxs_dataset_close(ds);
            cxs_dataset_close(pl);
        }
    /* Without sequences no 1.2 feature is used: the files are of minor
     * version 3 for their block sums (format 1.3), and 0 without them
     * (block_sums_off_is_format_1_0). */
    cxs_dataset *pl;
    ck_assert_int_eq(cxs_dataset_open(at("plain"), &pl, NULL), 0);
    cxs_info in;
    cxs_dataset_info(pl, &in);
    ck_assert_uint_eq(in.format_minor, 3);
    uint32_t n;
    ck_assert_int_eq(cxs_dataset_label_seq(pl, 0, NULL, 0, &n), CXS_E_NO_SEQUENCES);
    cxs_dataset_close(pl);
    rm_rf(dir);
}
END_TEST

TEST(label_sequences_refused) {
    setup_dir();
    cxs_writer_opts o = opts();
    o.label_seqs = CXS_SEQ_ONLY;
    cxs_writer *w;
    cxs_diag dg;
    ck_assert_int_eq(cxs_writer_create(at("out"), &o, &w, &dg), 0);
    float f[4 * D] = {0};
    struct {
        int64_t s[5];
        uint64_t n;
        const char *want;
    } bad[] = {
        {{0}, 0, "x: empty label sequence"},
        {{3, 4}, 2, "x: empty label sequence ([SOS] [EOS] with no symbol between)"},
        {{3, 1, 2}, 3, "x: label sequence starts with [SOS] but does not end with [EOS]"},
        {{1, 2, 4}, 3, "x: label sequence ends with [EOS] but does not start with [SOS]"},
        {{1, 5, 2}, 3, "x: sequence position 1: label 5 is outside the vocabulary (0..4)"},
        {{3, 1, 3, 2, 4}, 5, "x: sequence position 2: [SOS] inside the sequence"},
        {{-1}, 1, "x: sequence position 0: label -1 is outside the vocabulary"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cxs_writer_utt x = {0};
        x.data = f;
        x.frames = 4;
        x.dim = D;
        x.type = CXS_DTYPE_F32;
        x.seq = bad[i].n ? bad[i].s : NULL;
        x.seq_count = bad[i].n;
        x.seq_size = 8;
        ck_assert_int_eq(cxs_writer_add(w, "x", &x, &dg), CXS_E_INPUT);
        ck_assert_msg(strstr(dg.message, bad[i].want), "%zu: %s", i, dg.message);
    }
    /* Frame labels in a dataset of sequences only: a caller's mistake. */
    uint8_t lab[4] = {0};
    int64_t ok[2] = {1, 2};
    cxs_writer_utt x = {0};
    x.data = f;
    x.frames = 4;
    x.dim = D;
    x.type = CXS_DTYPE_F32;
    x.labels = lab;
    x.label_count = 4;
    x.label_size = 1;
    x.seq = ok;
    x.seq_count = 2;
    x.seq_size = 8;
    ck_assert_int_eq(cxs_writer_add(w, "x", &x, &dg), CXS_E_INVALID);
    x.labels = NULL;
    x.label_count = 0;
    ck_assert_int_eq(cxs_writer_add(w, "x", &x, &dg), 0); /* still usable */
    ck_assert_int_eq(cxs_writer_commit(w, NULL, &dg), 0);
    /* Sequences need a vocabulary; a sequence to a writer without them. */
    o = opts();
    o.vocab_size = 0;
    o.vocab = NULL;
    o.label_seqs = CXS_SEQ_ONLY;
    ck_assert_int_eq(cxs_writer_create(at("v"), &o, &w, &dg), CXS_E_INVALID);
    o = opts();
    o.label_seqs = 7;
    ck_assert_int_eq(cxs_writer_create(at("v"), &o, &w, &dg), CXS_E_INVALID);
    o = opts();
    ck_assert_int_eq(cxs_writer_create(at("v"), &o, &w, &dg), 0);
    x.labels = lab;
    x.label_count = 4;
    ck_assert_int_eq(cxs_writer_add(w, "x", &x, &dg), CXS_E_INVALID);
    ck_assert_ptr_nonnull(strstr(dg.message, "without label sequences"));
    cxs_writer_abort(w);
    rm_rf(dir);
}
END_TEST

/* cxs_writer_opts.dim fixes the width before any utterance: a first
 * utterance of another width is refused, not taken as the width. */
TEST(dim_fixed_up_front) {
    setup_dir();
    cxs_writer_opts o = opts();
    cxs_writer *w;
    cxs_diag dg;
    o.dim = 70000;
    ck_assert_int_eq(cxs_writer_create(at("out"), &o, &w, &dg), CXS_E_INVALID);
    EXPECT_STR_HAS(dg.message, "dim 70000, expected 1..65536");
    o.dim = D;
    ck_assert_int_eq(cxs_writer_create(at("out"), &o, &w, &dg), 0);
    float f[4 * D] = {0}, g[4 * 3] = {0};
    uint8_t lab[4] = {0, 1, 2, 1};
    ck_assert_int_eq(add1(w, "a", g, 4, 3, lab, 4, 1, &dg), CXS_E_INPUT);
    EXPECT_STR_HAS(dg.message, "a: 3 features per frame, expected 5 (the writer's dim)");
    ck_assert_int_eq(cxs_writer_skip(w, "a", "3 features per frame"), 0);
    ck_assert_int_eq(add1(w, "b", f, 4, D, lab, 4, 1, &dg), 0);
    ck_assert_int_eq(add1(w, "c", g, 4, 3, lab, 4, 1, &dg), CXS_E_INPUT);
    cxs_writer_info info;
    ck_assert_int_eq(cxs_writer_commit(w, &info, &dg), 0);
    EXPECT_UINT(info.dim, D);
    EXPECT_UINT(info.num_utterances, 1);
    rm_rf(dir);
}
END_TEST

/* cxs_writer_add_many: the bytes of one cxs_writer_add per utterance,
 * whatever the batches; a refused utterance stops the batch at its index
 * with add's code and message, and the writer goes on from the next. */
TEST(add_many_same_bytes) {
    setup_dir();
    cxs_writer_opts o = opts();
    ck_assert_int_eq(write_form(at("ref"), F_C32, &o), 0);
    static float f[NU][TMAX * D];
    static uint8_t lab[NU][TMAX];
    cxs_writer_utt x[NU + 1];
    char idbuf[NU + 1][16];
    const char *ids[NU + 1];
    for (int u = 0; u < NU; u++) {
        const uint64_t T = frames_of(u);
        for (uint64_t t = 0; t < T; t++) {
            lab[u][t] = label(u, t);
            for (uint64_t d = 0; d < D; d++) f[u][t * D + d] = value(u, t, d);
        }
        memset(&x[u], 0, sizeof x[u]);
        x[u].data = f[u];
        x[u].frames = T;
        x[u].dim = D;
        x[u].type = CXS_DTYPE_F32;
        x[u].labels = lab[u];
        x[u].label_count = T;
        x[u].label_size = 1;
        snprintf(idbuf[u], sizeof idbuf[u], "utt-%02d", u);
        ids[u] = idbuf[u];
    }
    const size_t batches[] = {1, 2, 4, NU};
    for (size_t b = 0; b < sizeof batches / sizeof *batches; b++) {
        cxs_writer *w;
        cxs_diag dg;
        ck_assert_int_eq(cxs_writer_create(at("many"), &o, &w, &dg), 0);
        for (size_t u = 0; u < NU; u += batches[b]) {
            size_t n = NU - u < batches[b] ? NU - u : batches[b], added = 99;
            ck_assert_int_eq(cxs_writer_add_many(w, ids + u, x + u, n, &added, &dg), 0);
            EXPECT_UINT(added, n);
        }
        size_t added = 99;
        ck_assert_int_eq(cxs_writer_add_many(w, NULL, NULL, 0, &added, &dg), 0);
        EXPECT_UINT(added, 0);
        ck_assert_int_eq(cxs_writer_commit(w, NULL, &dg), 0);
        ck_assert_msg(same_files(at("ref"), at("many")), "batches of %zu: other bytes",
                      batches[b]);
    }
    /* A refused utterance in the middle: utt-02 given 3 columns. */
    cxs_writer *w;
    cxs_diag dg;
    ck_assert_int_eq(cxs_writer_create(at("many"), &o, &w, &dg), 0);
    cxs_writer_utt y[NU];
    memcpy(y, x, sizeof y);
    y[2].dim = 3;
    size_t added = 99;
    ck_assert_int_eq(cxs_writer_add_many(w, ids, y, NU, &added, &dg), CXS_E_INPUT);
    EXPECT_UINT(added, 2);
    EXPECT_STR_HAS(dg.message, "utt-02: 3 features per frame, expected 5");
    ck_assert_int_eq(cxs_writer_add_many(w, ids + 2, x + 2, NU - 2, &added, &dg), 0);
    EXPECT_UINT(added, NU - 2);
    ck_assert_int_eq(cxs_writer_add_many(w, NULL, x, 1, &added, &dg), CXS_E_INVALID);
    EXPECT_UINT(added, 0);
    ck_assert_int_eq(cxs_writer_commit(w, NULL, &dg), 0);
    ck_assert(same_files(at("ref"), at("many")));
    rm_rf(dir);
}
END_TEST

/* Utterances of a few bytes and of megabytes, mixed, so that the shard's
 * write buffer is crossed, filled exactly, and passed by writes larger
 * than itself: every value reads back and the dataset verifies. */
static float big_value(uint64_t u, uint64_t t, uint64_t d) {
    return (float)((u * 7919 + t * 31 + d) % 100003) * 0.5f;
}

TEST(write_buffer_crossed_and_passed) {
    setup_dir();
    cxs_writer_opts o;
    cxs_writer_opts_init(&o);
    o.guard = 2;
    /* frames per utterance; 1 MiB is 52428.8 frames of 5 float32 */
    static const uint64_t Ts[] = {1, 3, 52428, 1, 70000, 2, 130000, 5, 300000, 1, 52429, 4};
    enum { NB = sizeof Ts / sizeof *Ts };
    float *f = malloc(300000 * D * sizeof *f);
    ck_assert_ptr_nonnull(f);
    cxs_writer *w;
    cxs_diag dg;
    ck_assert_int_eq(cxs_writer_create(at("out"), &o, &w, &dg), 0);
    for (uint64_t u = 0; u < NB; u++) {
        for (uint64_t t = 0; t < Ts[u]; t++)
            for (uint64_t d = 0; d < D; d++) f[t * D + d] = big_value(u, t, d);
        char id[16];
        snprintf(id, sizeof id, "u%02d", (int)u);
        ck_assert_int_eq(add1(w, id, f, Ts[u], D, NULL, 0, 1, &dg), 0);
    }
    free(f);
    ck_assert_int_eq(cxs_writer_commit(w, NULL, &dg), 0);
    cxs_dataset *ds;
    ck_assert_int_eq(cxs_dataset_open(at("out"), &ds, &dg), 0);
    for (uint64_t u = 0; u < NB; u++) {
        cxs_utterance ut;
        ck_assert_int_eq(cxs_dataset_utterance(ds, u, &ut), 0);
        EXPECT_UINT(ut.num_frames, Ts[u]);
        const float *g = ut.features;
        int bad = 0;
        for (uint64_t t = 0; t < ut.num_frames && !bad; t++)
            for (uint64_t d = 0; d < D; d++) bad |= g[t * D + d] != big_value(u, t, d);
        ck_assert_msg(!bad, "utterance %d reads back other values", (int)u);
    }
    ck_assert_int_eq(cxs_dataset_verify(ds, NULL, NULL, &dg), 0);
    cxs_dataset_close(ds);
    rm_rf(dir);
}
END_TEST

RUN_SUITE("writer", reads_back_exactly, every_input_form_same_bytes,
          rules_refuse_and_writer_goes_on, options_and_outputs_checked,
          abort_and_full_disk_leave_nothing, manual_cut, label_sequences_read_back,
          label_sequences_refused, dim_fixed_up_front, add_many_same_bytes,
          write_buffer_crossed_and_passed)
