/* Golden vectors: valid/tiny must decode to known values; every damaged
 * copy in invalid/ must be refused by the step and with the code that
 * invalid/EXPECTED names, and the message must name the file. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxshard.h"

static int failures;
#define CHECK(c)                                                              \
    do {                                                                      \
        if (!(c)) {                                                           \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #c); \
            failures++;                                                       \
        }                                                                     \
    } while (0)

/* A valid vector opened, or NULL after a failed check and its message. */
static cxs_dataset *open_valid(const char *dir) {
    cxs_dataset *ds;
    cxs_diag dg;
    int rc = cxs_dataset_open(dir, &ds, &dg);
    CHECK(rc == 0);
    if (rc) {
        fprintf(stderr, "%s\n", dg.message);
        return NULL;
    }
    return ds;
}

/* The raw input of valid/tiny (tests/golden/make_golden.py). */
static const float utt_a[3][2] = {{1, 2}, {3, 4}, {5, 6}};
static const float utt_b[2][2] = {{10, 11}, {12, 13}};
static const int64_t labels[5] = {1, 2, 0, 2, 2};

static float value(uint64_t frame, int64_t row, int d) {
    /* frame's utterance: 0..2 -> a, 3..4 -> b */
    int64_t start = frame < 3 ? 0 : 3, T = frame < 3 ? 3 : 2;
    int64_t t = (int64_t)frame - start + row;
    if (t < 0 || t >= T) return 0;
    return frame < 3 ? utt_a[t][d] : utt_b[t][d];
}

/* valid/tiny, or a compressed copy (valid/tiny-zstd: 3 chunks of 3 rows,
 * byte shuffle; valid/tiny-zstd-noshuffle: 2 chunks of 5 rows, no filter):
 * the same decoded values, no zero-copy views.  valid/tiny-sums (sums = 1)
 * is tiny with format 1.3's block sums: the same values. */
static void valid(const char *dir, int compressed, uint32_t chunk_rows, uint32_t shuffle,
                  int sums) {
    cxs_diag dg;
    cxs_dataset *ds = open_valid(dir);
    if (!ds) return;
    cxs_info in;
    cxs_dataset_info(ds, &in);
    CHECK(in.num_frames == 5 && in.num_utterances == 2 && in.num_shards == 1);
    CHECK(in.dim == 2 && in.guard == 1 && in.dtype == CXS_DTYPE_F32);
    CHECK(in.vocab_size == 5 && in.label_width == 1 && in.format_major == 1);
    CHECK(in.min_length == 2 && in.max_length == 3);
    CHECK(in.format_minor == (sums ? 3u : compressed ? 1u : 0u));
    CHECK(in.block_sum_shards == (sums ? 1u : 0u));
    CHECK(in.compression == (compressed ? CXS_COMPRESSION_ZSTD : CXS_COMPRESSION_NONE));
    if (compressed)
        CHECK(in.chunk_rows == chunk_rows && in.shuffle == shuffle && in.feature_bytes == 64);
    CHECK(cxs_dataset_verify(ds, NULL, NULL, &dg) == 0);
    const char *sym;
    size_t n;
    const char *want[5] = {"[SIL]", "AA", "B", "[SOS]", "[EOS]"};
    for (uint32_t i = 0; i < 5; i++) {
        CHECK(cxs_dataset_vocab(ds, i, &sym, &n) == 0 && n == strlen(want[i]) &&
              memcmp(sym, want[i], n) == 0);
    }
    CHECK(cxs_dataset_vocab(ds, 5, &sym, &n) == CXS_E_RANGE);
    cxs_utterance u;
    CHECK(cxs_dataset_utterance(ds, 1, &u) == 0 && u.id_len == 1 && u.id[0] == 'b' &&
          u.first_frame == 3 && u.num_frames == 2);
    CHECK(cxs_dataset_utterance(ds, 2, &u) == CXS_E_RANGE);
    cxs_stats st;
    cxs_dataset_stats(ds, &st);
    CHECK(st.count == 5);
    CHECK(fabs(st.mean[0] - 6.2) < 1e-12 && fabs(st.mean[1] - 7.2) < 1e-12);
    CHECK(fabs(st.var[0] - 17.36) < 1e-9 && fabs(st.var[1] - 17.36) < 1e-9);
    CHECK(st.label_counts[0] == 1 && st.label_counts[1] == 1 && st.label_counts[2] == 3 &&
          st.label_counts[3] == 0 && st.label_counts[4] == 0);
    for (uint64_t f = 0; f < 5; f++) {
        uint64_t ut, off;
        CHECK(cxs_dataset_locate(ds, f, &ut, &off) == 0 && ut == (f < 3 ? 0u : 1u) &&
              off == (f < 3 ? f : f - 3));
        uint32_t l;
        CHECK(cxs_dataset_label(ds, f, &l) == 0 && l == labels[f]);
        for (uint32_t k = 0; k <= 1; k++) {
            const void *w;
            if (compressed) {
                CHECK(cxs_dataset_window(ds, f, k, &w) == CXS_E_UNSUPPORTED);
                continue;
            }
            CHECK(cxs_dataset_window(ds, f, k, &w) == 0);
            const float *x = w;
            for (int64_t r = -(int64_t)k; r <= (int64_t)k; r++)
                for (int d = 0; d < 2; d++) CHECK(x[(r + k) * 2 + d] == value(f, r, d));
        }
        for (uint32_t k = 0; k <= 4; k++) {
            float out[18];
            int64_t lab;
            CHECK(cxs_dataset_gather(ds, &f, 1, k, 0, 1, out, &lab) == 0 && lab == labels[f]);
            for (int64_t r = -(int64_t)k; r <= (int64_t)k; r++)
                for (int d = 0; d < 2; d++) CHECK(out[(r + k) * 2 + d] == value(f, r, d));
        }
    }
    /* Read-time normalisation (spec section 7.4, Appendix A): each stored
     * value v of frame f becomes nv[f] (both dimensions round alike here),
     * padding stays +0.0.  Bits, so that any other rounding fails. */
    static const uint32_t nv[5] = {0xbf9fbfc6, 0xbf449d42, 0xbe9375f2, 0x3f697abf, 0x3fb22e84};
    for (uint64_t f = 0; f < 5; f++) {
        float outn[6];
        CHECK(cxs_dataset_gather(ds, &f, 1, 1, CXS_GATHER_NORMALIZE, 1, outn, NULL) == 0);
        for (int r = -1; r <= 1; r++)
            for (int d = 0; d < 2; d++) {
                uint32_t bits, want_bits = 0;
                memcpy(&bits, &outn[(r + 1) * 2 + d], 4);
                int64_t src = (int64_t)f + r, lo = f < 3 ? 0 : 3, hi = f < 3 ? 3 : 5;
                if (src >= lo && src < hi) want_bits = nv[src];
                CHECK(bits == want_bits);
            }
        /* The same through cxs_dataset_gather_norm with the stored statistics. */
        cxs_norm nm = {2, st.mean, st.var};
        float outm[6];
        CHECK(cxs_dataset_gather_norm(ds, &f, 1, 1, &nm, 1, outm, NULL) == 0 &&
              memcmp(outm, outn, sizeof outn) == 0);
    }
    const void *w;
    uint64_t ut, off, bad = 5;
    float out[6];
    float feats[6];
    CHECK(cxs_dataset_read_features(ds, 0, 0, 3, feats) == 0);
    for (int i = 0; i < 6; i++) CHECK(feats[i] == (float)(i + 1));
    CHECK(cxs_dataset_read_features(ds, 1, 1, 2, feats) == CXS_E_RANGE);
    CHECK(compressed ? u.features == NULL : u.features != NULL);
    if (!compressed) {
        CHECK(cxs_dataset_window(ds, 0, 2, &w) == CXS_E_RANGE); /* k > guard: no view */
        CHECK(cxs_dataset_window(ds, 5, 0, &w) == CXS_E_RANGE);
    }
    CHECK(cxs_dataset_locate(ds, 5, &ut, &off) == CXS_E_RANGE);
    CHECK(cxs_dataset_gather(ds, &bad, 1, 1, 0, 1, out, NULL) == CXS_E_RANGE);
    CHECK(cxs_dataset_gather(ds, NULL, 0, 1, 0, 4, NULL, NULL) == 0);
    cxs_dataset_close(ds);
    cxs_dataset_close(NULL);
}

/* valid/tiny-f16 (spec Appendix A): features only, float16, guard 2.
 * Utterance a is 1..6, b holds 0.1, -0.5, 1e-5 and 1000 as float16. */
static void valid_f16(const char *dir) {
    static const float vals[5][2] = {
        {1, 2}, {3, 4}, {5, 6}, {0.0999755859375f, -0.5f}, {1.0013580322265625e-05f, 1000}};
    static const uint16_t bits[5][2] = {{0x3c00, 0x4000}, {0x4200, 0x4400}, {0x4500, 0x4600},
                                        {0x2e66, 0xb800}, {0x00a8, 0x63d0}};
    /* spec Appendix A: mean and var, binary64 bits */
    static const uint64_t stats_bits[4] = {0x3ffd1eb54ccccccdull, 0x406949999999999aull,
                                           0x400d8451fd40b613ull, 0x41036b6fae147ae1ull};
    cxs_diag dg;
    cxs_dataset *ds = open_valid(dir);
    if (!ds) return;
    cxs_info in;
    cxs_dataset_info(ds, &in);
    CHECK(in.num_frames == 5 && in.num_utterances == 2 && in.num_shards == 1);
    CHECK(in.dim == 2 && in.guard == 2 && in.dtype == CXS_DTYPE_F16);
    CHECK(in.vocab_size == 0 && in.label_width == 0 && in.format_minor == 0);
    CHECK(in.compression == CXS_COMPRESSION_NONE && in.min_length == 2 && in.max_length == 3);
    CHECK(cxs_dataset_verify(ds, NULL, NULL, &dg) == 0);
    const char *sym;
    size_t n;
    CHECK(cxs_dataset_vocab(ds, 0, &sym, &n) == CXS_E_RANGE);
    cxs_stats st;
    cxs_dataset_stats(ds, &st);
    CHECK(st.count == 5 && st.label_counts == NULL);
    for (int i = 0; i < 4; i++) {
        uint64_t b;
        memcpy(&b, i < 2 ? &st.mean[i] : &st.var[i - 2], 8);
        CHECK(b == stats_bits[i]);
    }
    uint32_t l;
    CHECK(cxs_dataset_label(ds, 0, &l) == CXS_E_NO_LABELS);
    for (uint64_t f = 0; f < 5; f++) {
        int64_t lo = f < 3 ? 0 : 3, hi = f < 3 ? 3 : 5;
        for (uint32_t k = 0; k <= 3; k++) {
            float out[14];
            CHECK(cxs_dataset_gather(ds, &f, 1, k, 0, 1, out, NULL) == 0);
            for (int64_t r = -(int64_t)k; r <= (int64_t)k; r++)
                for (int d = 0; d < 2; d++) {
                    int64_t src = (int64_t)f + r;
                    float want = src >= lo && src < hi ? vals[src][d] : 0.0f;
                    CHECK(memcmp(&out[(r + k) * 2 + d], &want, 4) == 0);
                }
            const void *w;
            if (k > 2) {
                CHECK(cxs_dataset_window(ds, f, k, &w) == CXS_E_RANGE);
                continue;
            }
            CHECK(cxs_dataset_window(ds, f, k, &w) == 0);
            const uint8_t *p = w;
            for (int64_t r = -(int64_t)k; r <= (int64_t)k; r++)
                for (int d = 0; d < 2; d++) {
                    int64_t src = (int64_t)f + r;
                    uint16_t want = src >= lo && src < hi ? bits[src][d] : 0, got;
                    memcpy(&got, p + 2 * ((r + k) * 2 + d), 2);
                    CHECK(got == want);
                }
        }
    }
    cxs_dataset_close(ds);
}

/* valid/tiny-seq (only = 0: tiny's frame labels and the sequences of their
 * runs, a = 1 2 0, b = 2) and valid/tiny-seq-only (only = 1: sequences
 * from HW3P2-style transcripts, a = 1 2 from [SOS] AA B [EOS], b = 2 1 2 0
 * from the bare B AA B [SIL]; no frame labels): tiny's features, format 1.2. */
static void valid_seq(const char *dir, int only) {
    static const int64_t seq_a[2][3] = {{1, 2, 0}, {1, 2, 0}};
    static const int64_t seq_b[2][4] = {{2, 0, 0, 0}, {2, 1, 2, 0}};
    const uint32_t len_a = only ? 2 : 3, len_b = only ? 4 : 1;
    cxs_diag dg;
    cxs_dataset *ds = open_valid(dir);
    if (!ds) return;
    cxs_info in;
    cxs_dataset_info(ds, &in);
    CHECK(in.num_frames == 5 && in.num_utterances == 2 && in.vocab_size == 5);
    CHECK(in.format_major == 1 && in.format_minor == 2 && in.label_seqs == 1);
    CHECK(in.label_width == (only ? 0u : 1u));
    CHECK(in.seq_symbols == len_a + len_b);
    CHECK(in.min_seq_length == (len_a < len_b ? len_a : len_b));
    CHECK(in.max_seq_length == (len_a > len_b ? len_a : len_b));
    CHECK(in.seq_width == 1); /* stored as uint8 (5 symbols) */
    CHECK(cxs_dataset_verify(ds, NULL, NULL, &dg) == 0);
    {
        /* Its shard opened alone: no vocabulary, the width SHARD_META's. */
        char sp[4200];
        cxs_dataset *one;
        snprintf(sp, sizeof sp, "%s/shard-000000.cxs", dir);
        if (cxs_dataset_open(sp, &one, NULL) == 0) {
            cxs_info oi;
            cxs_dataset_info(one, &oi);
            CHECK(oi.single_shard == 1 && oi.vocab_size == 0 && oi.label_seqs == 1);
            CHECK(oi.seq_width == 1);
            cxs_dataset_close(one);
        } else {
            CHECK(!"the shard of a valid vector opens alone");
        }
    }
    int64_t out[8];
    uint32_t n = 99;
    CHECK(cxs_dataset_label_seq(ds, 0, out, 8, &n) == 0 && n == len_a);
    for (uint32_t j = 0; j < len_a; j++) CHECK(out[j] == seq_a[only][j]);
    CHECK(cxs_dataset_label_seq(ds, 1, out, 8, &n) == 0 && n == len_b);
    for (uint32_t j = 0; j < len_b; j++) CHECK(out[j] == seq_b[only][j]);
    /* A short buffer gets the first cap symbols and the whole length. */
    out[1] = -1;
    CHECK(cxs_dataset_label_seq(ds, 1, out, 1, &n) == 0 && n == len_b && out[0] == 2 &&
          out[1] == -1);
    CHECK(cxs_dataset_label_seq(ds, 0, NULL, 0, &n) == 0 && n == len_a);
    n = 99;
    CHECK(cxs_dataset_label_seq(ds, 2, out, 8, &n) == CXS_E_RANGE && n == 99);
    CHECK(cxs_dataset_label_seq(ds, 0, NULL, 1, &n) == CXS_E_INVALID);
    uint32_t l;
    if (only) {
        CHECK(cxs_dataset_label(ds, 0, &l) == CXS_E_NO_LABELS);
        cxs_utterance ut;
        CHECK(cxs_dataset_utterance(ds, 0, &ut) == 0 && ut.labels == NULL);
    } else {
        for (uint64_t f = 0; f < 5; f++)
            CHECK(cxs_dataset_label(ds, f, &l) == 0 && l == (uint32_t)labels[f]);
    }
    cxs_stats st;
    cxs_dataset_stats(ds, &st);
    static const uint64_t counts[5] = {1, 1, 3, 0, 0};
    for (int i = 0; i < 5; i++) CHECK(st.label_counts[i] == (only ? 0 : counts[i]));
    for (uint64_t f = 0; f < 5; f++) {
        float w[6];
        CHECK(cxs_dataset_gather(ds, &f, 1, 1, 0, 1, w, NULL) == 0);
        for (int64_t r = -1; r <= 1; r++)
            for (int d = 0; d < 2; d++) CHECK(w[(r + 1) * 2 + d] == value(f, r, d));
    }
    cxs_dataset_close(ds);
}

static int code_of(const char *name) {
    static const struct {
        const char *n;
        int c;
    } t[] = {{"CXS_E_BAD_MAGIC", CXS_E_BAD_MAGIC}, {"CXS_E_VERSION", CXS_E_VERSION},
             {"CXS_E_TRUNCATED", CXS_E_TRUNCATED}, {"CXS_E_CORRUPT", CXS_E_CORRUPT},
             {"CXS_E_CHECKSUM", CXS_E_CHECKSUM},   {"ENOENT", -ENOENT}};
    for (size_t i = 0; i < sizeof t / sizeof *t; i++)
        if (!strcmp(t[i].n, name)) return t[i].c;
    return 1;
}

/* valid/sums-blocks (format 1.3, tests/golden/make_golden.py raw_blocks):
 * three utterances u1 u2 u3 of 3000, 2500 and 1000 frames, D = 4, guard 1,
 * value (u, t, d) = ((7t + 3d + 11u) % 97) / 4, label (t + u) % 3; its
 * FEATURES and LABELS span two blocks each. */
static void valid_blocks(const char *dir) {
    cxs_diag dg;
    cxs_dataset *ds = open_valid(dir);
    if (!ds) return;
    cxs_info in;
    cxs_dataset_info(ds, &in);
    CHECK(in.num_utterances == 3 && in.num_frames == 6500 && in.dim == 4 && in.guard == 1);
    CHECK(in.format_minor == 3 && in.block_sum_shards == 1);
    CHECK(cxs_dataset_verify(ds, NULL, NULL, &dg) == 0);
    CHECK(cxs_dataset_warm(ds, 0, NULL, NULL, NULL, &dg) == 0);
    const uint64_t T[3] = {3000, 2500, 1000};
    static float x[3000 * 4];
    int64_t lab[3000];
    uint64_t f0 = 0;
    for (uint64_t u = 0; u < 3; u++) {
        CHECK(cxs_dataset_read_features(ds, u, 0, T[u], x) == 0);
        CHECK(cxs_dataset_labels(ds, f0, T[u], lab) == 0);
        int bad = 0;
        for (uint64_t t = 0; t < T[u]; t++) {
            for (uint64_t d = 0; d < 4; d++)
                bad += x[t * 4 + d] != (float)((7 * t + 3 * d + 11 * u) % 97) / 4.0f;
            bad += lab[t] != (int64_t)((t + u) % 3);
        }
        CHECK(bad == 0);
        f0 += T[u];
    }
    cxs_dataset_close(ds);
}

/* The file an open refusal of a case of invalid/ must name in diag.file:
 * the manifest for these, shard-000000.cxs (the one shard) for the
 * others.  seq-frame-labels' manifest says the shard holds frame labels
 * and it holds none: the reader names the shard it finds lacking. */
static const char *const manifest_cases[] = {
    "manifest-meta-flip", "manifest-table-flip", "manifest-vocab-flip", "manifest-stats-flip",
    "future-major", "seq-meta-flip", "seq-meta-count", "q8-guard"};

static const char *damaged_file(const char *name) {
    for (size_t i = 0; i < sizeof manifest_cases / sizeof *manifest_cases; i++)
        if (!strcmp(name, manifest_cases[i])) return "manifest.cxs";
    return "shard-000000.cxs";
}

/* valid/tiny-q8, tiny-q16 and their zstd copies (format 1.4, spec
 * Appendix A): features only, guard 0, the codes of spec §4.9.5 for
 * make_golden.py's CODED_A (3 x 2) and CODED_B (6 x 2), served by
 * read_features as stored; verify passes (headers valid, statistics of the
 * decoded values). */
static void valid_coded(const char *dir, uint32_t dtype) {
    static const uint8_t q8[2][12] = {
        {0x00, 0x00, 0x40, 0x40, 0xc0, 0xff},
        {0x80, 0x40, 0xd5, 0xff, 0x00, 0xb2, 0xc0, 0xd2, 0xff, 0x00, 0x40, 0xc0}};
    static const uint16_t q16[2][12] = {
        {0x0000, 0x3333, 0x6666, 0x9999, 0xcccc, 0xffff},
        {0x6aaa, 0x2aaa, 0xaaaa, 0xdfff, 0x3555, 0x5555, 0x7fff, 0x7fff, 0xffff, 0x0000, 0x5555,
         0x5aaa}};
    static const uint64_t T[2] = {3, 6};
    cxs_dataset *ds = open_valid(dir);
    if (!ds) return;
    cxs_info in;
    cxs_dataset_info(ds, &in);
    CHECK(in.dtype == dtype && in.guard == 0 && in.dim == 2 && in.format_minor == 4);
    CHECK(in.num_utterances == 2 && in.num_frames == 9 && in.vocab_size == 0);
    for (uint64_t u = 0; u < 2; u++) {
        uint8_t got[24];
        CHECK(cxs_dataset_read_features(ds, u, 0, T[u], got) == 0);
        for (uint64_t i = 0; i < T[u] * 2; i++)
            CHECK(dtype == CXS_DTYPE_Q8 ? got[i] == q8[u][i]
                                        : (uint16_t)(got[2 * i] | got[2 * i + 1] << 8) == q16[u][i]);
    }
    cxs_diag dg = {0};
    CHECK(cxs_dataset_verify(ds, NULL, NULL, &dg) == 0);
    cxs_dataset_close(ds);
}

static void invalid(const char *dir) {
    char path[4096], name[128], step[16], code[64], text[128], line[512];
    if (snprintf(path, sizeof path, "%s/EXPECTED", dir) >= (int)sizeof path) return;
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    if (!f) return;
    int cases = 0;
    while (fgets(line, sizeof line, f)) {
        text[0] = 0;
        if (line[0] == '#' || sscanf(line, "%127s %15s %63s %127s", name, step, code, text) < 3)
            continue;
        for (char *c = text; *c; c++) /* the message must hold it, '_' for ' ' */
            if (*c == '_') *c = ' ';
        cases++;
        if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) continue;
        cxs_dataset *ds = NULL;
        cxs_diag dg = {0};
        int rc = cxs_dataset_open(path, &ds, &dg), want = code_of(code);
        if (!strcmp(step, "verify")) {
            if (rc != 0) {
                fprintf(stderr, "%s: open refused (%s): %s\n", name, cxs_strerror(rc), dg.message);
                failures++;
                continue;
            }
            rc = cxs_dataset_verify(ds, NULL, NULL, &dg);
            cxs_dataset_close(ds);
        }
        if (rc != want || !strstr(dg.message, path) || !strstr(dg.message, text)) {
            fprintf(stderr, "%s: %s gave %d (%s), expected %s%s%s; message: %s\n", name, step,
                    rc, cxs_strerror(rc), code, *text ? " naming " : "", text, dg.message);
            failures++;
        }
        char want_file[4096 + 32];
        snprintf(want_file, sizeof want_file, "%s/%s", path, damaged_file(name));
        if (!strcmp(step, "open") && strcmp(dg.file, want_file)) {
            fprintf(stderr, "%s: %s: diag.file is \"%s\", expected \"%s\"\n", name, step,
                    dg.file, want_file);
            failures++;
        }
    }
    fclose(f);
    CHECK(cases >= 26);
}

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    char p[4096];
    snprintf(p, sizeof p, "%s/valid/tiny", argv[1]);
    valid(p, 0, 0, 0, 0);
    snprintf(p, sizeof p, "%s/valid/tiny-zstd", argv[1]);
    valid(p, 1, 3, 1, 0);
    snprintf(p, sizeof p, "%s/valid/tiny-zstd-noshuffle", argv[1]);
    valid(p, 1, 5, 0, 0);
    snprintf(p, sizeof p, "%s/valid/tiny-sums", argv[1]);
    valid(p, 0, 0, 0, 1);
    snprintf(p, sizeof p, "%s/valid/tiny-sums-required", argv[1]);
    valid(p, 0, 0, 0, 1);
    snprintf(p, sizeof p, "%s/valid/sums-blocks", argv[1]);
    valid_blocks(p);
    snprintf(p, sizeof p, "%s/valid/tiny-f16", argv[1]);
    valid_f16(p);
    snprintf(p, sizeof p, "%s/valid/tiny-seq", argv[1]);
    valid_seq(p, 0);
    snprintf(p, sizeof p, "%s/valid/tiny-seq-only", argv[1]);
    valid_seq(p, 1);
    {
        /* A dataset without sequences: a clear code, nothing written. */
        cxs_dataset *ds;
        snprintf(p, sizeof p, "%s/valid/tiny", argv[1]);
        if (cxs_dataset_open(p, &ds, NULL) == 0) {
            uint32_t n = 99;
            int64_t o[4];
            cxs_info in;
            cxs_dataset_info(ds, &in);
            CHECK(in.label_seqs == 0 && in.max_seq_length == 0);
            CHECK(cxs_dataset_label_seq(ds, 0, o, 4, &n) == CXS_E_NO_SEQUENCES && n == 99);
            CHECK(cxs_dataset_label_seq(ds, 7, o, 4, &n) == CXS_E_NO_SEQUENCES);
            cxs_dataset_close(ds);
        }
    }
    static const char *const coded[] = {"tiny-q8", "tiny-q8-zstd", "tiny-q16", "tiny-q16-zstd"};
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/valid/%s", argv[1], coded[i]);
        valid_coded(p, i < 2 ? CXS_DTYPE_Q8 : CXS_DTYPE_Q16);
    }
    snprintf(p, sizeof p, "%s/invalid", argv[1]);
    invalid(p);
    if (failures) fprintf(stderr, "%d failures\n", failures);
    return failures ? 1 : 0;
}
