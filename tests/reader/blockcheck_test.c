/* Nothing of a damaged block is served (format 1.3's block sums, spec
 * section 4.8): one LABELS byte changed to another valid symbol, or one
 * low bit of one feature value flipped -- damage no vocabulary or
 * statistic can tell -- stops every reader that needs the block, with
 * CXS_E_CHECKSUM and a message naming the block: the window, gather,
 * labels, utterance, read and pad calls, the frame loader in every order
 * (sequential, shuffle, weighted, block), the utterance loader (shuffle,
 * block mode), both mixtures, and the GPU loaders on the emulated device
 * (stream, resident, pool, utterances).  A sound copy of the same data
 * serves every one of them, and a block is checked once per open dataset.
 *
 * usage: blockcheck_test  (it writes its datasets with the library's
 * writer: testdata.h) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctxshard.h"
#include "ctxshard_gpu.h"
#include "cxs_test.h"
#include "testdata.h"

static char dir[256];
static char sound[400], bad_label[400], bad_value[400];
static const uint64_t DAMAGED_UTT = 20, DAMAGED_T = 7;

/* Byte `at` of the file: its label + 1 (modulo the vocabulary: another
 * valid symbol), or its lowest bit flipped.  0 or -1 (it runs before the
 * tests, outside them). */
static int poke(const char *path, uint64_t at, int label) {
    FILE *f = fopen(path, "r+b");
    if (!f) return -1;
    uint8_t b;
    int ok = !fseek(f, (long)at, SEEK_SET) && fread(&b, 1, 1, f) == 1;
    b = label ? (uint8_t)((b + 1) % TD_PHONES) : (uint8_t)(b ^ 1);
    ok = ok && !fseek(f, (long)at, SEEK_SET) && fwrite(&b, 1, 1, f) == 1;
    return fclose(f) || !ok ? -1 : 0;
}

/* The file offset of section `type` of the shard at path, 0 when none. */
static uint64_t section_at(const char *path, uint32_t type) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    uint8_t h[64 + 32 * 64];
    size_t got = fread(h, 1, sizeof h, f);
    fclose(f);
    if (got != sizeof h) return 0;
    uint32_t n;
    memcpy(&n, h + 24, 4);
    for (uint32_t i = 0; i < n && i < 64; i++) {
        uint32_t t;
        uint64_t off;
        memcpy(&t, h + 64 + 32 * i, 4);
        memcpy(&off, h + 64 + 32 * i + 8, 8);
        if (t == type) return off;
    }
    return 0;
}

/* A copy of the sound dataset at out, with frame DAMAGED_T of utterance
 * DAMAGED_UTT damaged: its label (label = 1) or its dimension 1's lowest
 * mantissa bit.  0 or -1. */
static int damage(const char *out, int label);
static int make_damaged(const char *out, int label) {
    char cmd[1000];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", out, sound, out);
    if (system(cmd)) return -1;
    return damage(out, label);
}

/* The dataset at out (a copy of the sound one) damaged in place, as
 * make_damaged does.  0 or -1. */
static int damage(const char *out, int label) {
    char shard[512];
    snprintf(shard, sizeof shard, "%s/shard-000000.cxs", out);
    cxs_dataset *ds;
    cxs_diag d;
    if (cxs_dataset_open(out, &ds, &d)) return fprintf(stderr, "%s\n", d.message), -1;
    cxs_info in;
    cxs_dataset_info(ds, &in);
    cxs_utterance ut;
    int rc = cxs_dataset_utterance(ds, DAMAGED_UTT, &ut);
    cxs_dataset_close(ds);
    if (rc) return -1;
    const uint64_t feat = section_at(shard, 4 /* FEATURES */), lab = section_at(shard, 5);
    if (!feat || !lab) return -1;
    if (label) return poke(shard, lab + ut.first_frame + DAMAGED_T, 1);
    const uint64_t row = in.guard * (DAMAGED_UTT + 1) + ut.first_frame + DAMAGED_T;
    return poke(shard, feat + row * in.dim * 4ull + 4, 0);
}

static cxs_dataset *open_ds(const char *path) {
    cxs_dataset *ds;
    cxs_diag d;
    ck_assert_msg(cxs_dataset_open(path, &ds, &d) == 0, "%s", d.message);
    return ds;
}

/* The outcome a path must have on each dataset: 0 on the sound one; on a
 * damaged one CXS_E_CHECKSUM naming the damaged section's block (when the
 * path says what, msg). */
static void expect(const char *path, int rc, const char *msg, const char *what) {
    if (path == sound) {
        ck_assert_msg(rc == 0, "%s on the sound dataset: %d %s", what, rc, msg ? msg : "");
        return;
    }
    ck_assert_msg(rc == CXS_E_CHECKSUM, "%s on %s: %d (%s), not CXS_E_CHECKSUM", what, path, rc,
                  msg ? msg : "");
    if (msg) {
        const char *sec = path == bad_label ? "LABELS block " : "FEATURES block ";
        ck_assert_msg(strstr(msg, sec), "%s: %s does not name the %s", what, msg, sec);
        ck_assert_msg(strstr(msg, "checksum mismatch"), "%s: %s", what, msg);
    }
}

static const char *const paths3[3] = {sound, bad_label, bad_value};

/* ---- the dataset's own calls ------------------------------------------ */

TEST(gather_refuses_a_damaged_block) {
    for (int p = 0; p < 3; p++) {
        cxs_dataset *ds = open_ds(paths3[p]);
        cxs_info in;
        cxs_dataset_info(ds, &in);
        const size_t n = (size_t)in.num_frames;
        uint64_t *fr = malloc(n * sizeof *fr);
        float *x = malloc(n * 7 * in.dim * sizeof *x);
        int64_t *y = malloc(n * sizeof *y);
        for (size_t i = 0; i < n; i++) fr[i] = i;
        cxs_diag d = {0};
        for (unsigned threads = 1; threads <= 3; threads += 2) {
            int rc = cxs_dataset_gather_ex(ds, fr, n, 3, 0, NULL, threads, x, y, &d);
            expect(paths3[p], rc, d.message, "gather");
        }
        free(fr), free(x), free(y);
        cxs_dataset_close(ds);
    }
}
END_TEST

TEST(window_labels_utterance_read_pad_refuse) {
    for (int p = 0; p < 3; p++) {
        const char *path = paths3[p];
        cxs_dataset *ds = open_ds(path);
        cxs_info in;
        cxs_dataset_info(ds, &in);
        /* windows (features only): every frame's */
        int wrc = 0;
        for (uint64_t f = 0; f < in.num_frames && !wrc; f++) {
            const void *w;
            wrc = cxs_dataset_window(ds, f, 3, &w);
        }
        if (path != bad_label) expect(path, wrc, NULL, "window");
        else EXPECT_INT(wrc, 0);
        /* labels: the range call, the frames call, the shard's */
        int64_t *y = malloc(in.num_frames * sizeof *y);
        uint64_t *fr = malloc(in.num_frames * sizeof *fr);
        for (uint64_t f = 0; f < in.num_frames; f++) fr[f] = f;
        int lrc = cxs_dataset_labels(ds, 0, in.num_frames, y);
        if (path != bad_value) expect(path, lrc, NULL, "labels");
        else EXPECT_INT(lrc, 0);
        cxs_dataset_close(ds);
        ds = open_ds(path);
        lrc = cxs_dataset_labels_of(ds, fr, in.num_frames, y);
        if (path != bad_value) expect(path, lrc, NULL, "labels_of");
        else EXPECT_INT(lrc, 0);
        cxs_dataset_close(ds);
        ds = open_ds(path);
        const void *lab = NULL;
        lrc = cxs_dataset_shard_labels(ds, 0, &lab, NULL, NULL);
        if (path != bad_value) expect(path, lrc, NULL, "shard_labels");
        else EXPECT_INT(lrc, 0);
        /* utterances: their pointers are handed out checked */
        int urc = 0;
        for (uint64_t u = 0; u < in.num_utterances && !urc; u++) {
            cxs_utterance ut;
            urc = cxs_dataset_utterance(ds, u, &ut);
            /* (an utterance before it may share the damaged block) */
            if (urc) ck_assert_uint_le(u, DAMAGED_UTT);
        }
        expect(path, urc, NULL, "utterance");
        cxs_dataset_close(ds);
        /* read_features (features only), a row at a time to each end */
        ds = open_ds(path);
        float buf[64];
        cxs_diag d = {0};
        int rrc = 0;
        for (uint64_t u = 0; u < in.num_utterances && !rrc; u++)
            for (uint64_t t = 0; !rrc; t++)
                if ((rrc = cxs_dataset_read_features_ex(ds, u, t, 1, buf, &d)) == CXS_E_RANGE) {
                    rrc = 0;
                    break;
                }
        if (path != bad_label) expect(path, rrc, d.message, "read_features");
        else EXPECT_INT(rrc, 0);
        cxs_dataset_close(ds);
        /* pad_batch, labels too: every utterance, one at a time */
        ds = open_ds(path);
        cxs_stats st;
        cxs_dataset_stats(ds, &st);
        float *x = malloc(in.num_frames * in.dim * sizeof *x);
        int prc = 0;
        for (uint64_t u = 0; u < in.num_utterances && !prc; u++) {
            int64_t len;
            prc = cxs_dataset_pad_batch_ex(ds, &u, 1, in.num_frames, 0, NULL, x, &len, y, &d);
        }
        expect(path, prc, d.message, "pad_batch");
        free(x), free(y), free(fr);
        cxs_dataset_close(ds);
    }
}
END_TEST

/* ---- loaders ---------------------------------------------------------- */

static int frame_epoch(const char *path, uint32_t kind, cxs_diag *d) {
    cxs_dataset *ds = open_ds(path);
    cxs_sampler_opts so = {.kind = kind, .seed = 5};
    if (kind == CXS_SAMPLER_BLOCK) so.memory_bytes = 1u << 20, so.blocks = 2;
    cxs_sampler *s;
    ck_assert_msg(cxs_sampler_create_ex(ds, &so, &s, d) == 0, "%s", d->message);
    cxs_loader_opts o = {.k = 3, .batch_size = 64, .threads = 2, .labels = 1};
    cxs_loader *l;
    EXPECT_INT(cxs_loader_create(ds, s, &o, 0, 0, &l), 0);
    const cxs_batch *b;
    int rc;
    while (!(rc = cxs_loader_next_ex(l, &b, d)) && b) continue;
    cxs_loader_free(l);
    cxs_sampler_free(s);
    cxs_dataset_close(ds);
    return rc;
}

TEST(frame_loader_every_order_refuses) {
    const uint32_t kinds[] = {CXS_SAMPLER_SEQUENTIAL, CXS_SAMPLER_SHUFFLE, CXS_SAMPLER_WEIGHTED,
                              CXS_SAMPLER_BLOCK};
    const char *names[] = {"sequential", "shuffle", "weighted", "block"};
    for (int p = 0; p < 3; p++)
        for (int k = 0; k < 4; k++) {
            cxs_diag d = {0};
            int rc = frame_epoch(paths3[p], kinds[k], &d);
            /* a weighted epoch draws with replacement: it may miss the frame */
            if (kinds[k] == CXS_SAMPLER_WEIGHTED && paths3[p] != sound && rc == 0) continue;
            expect(paths3[p], rc, d.message, names[k]);
        }
}
END_TEST

static int utt_epoch(const char *path, uint64_t memory, cxs_diag *d) {
    cxs_dataset *ds = open_ds(path);
    cxs_utt_sampler_opts so = {.kind = CXS_UTT_SHUFFLE, .seed = 3, .frame_budget = 4096,
                               .long_alone = 1, .memory_bytes = memory};
    cxs_utt_sampler *s;
    ck_assert_msg(cxs_utt_sampler_create(ds, &so, &s, d) == 0, "%s", d->message);
    cxs_utt_loader_opts o = {.threads = 2, .labels = 1};
    cxs_utt_loader *l;
    ck_assert_msg(cxs_utt_loader_create_ex(ds, s, &o, 0, 0, &l, d) == 0, "%s", d->message);
    const cxs_utt_batch *b;
    int rc;
    while (!(rc = cxs_utt_loader_next_ex(l, &b, d)) && b) continue;
    cxs_utt_loader_free(l);
    cxs_utt_sampler_free(s);
    cxs_dataset_close(ds);
    return rc;
}

TEST(utterance_loader_refuses) {
    for (int p = 0; p < 3; p++) {
        cxs_diag d = {0};
        expect(paths3[p], utt_epoch(paths3[p], 0, &d), d.message, "utterance loader");
        expect(paths3[p], utt_epoch(paths3[p], 1u << 20, &d), d.message,
               "utterance loader, block mode");
    }
}
END_TEST

TEST(mixtures_refuse) {
    for (int p = 0; p < 3; p++) {
        for (uint32_t kind = 0; kind < 2; kind++) {
            const cxs_dataset *src[2] = {open_ds(sound), open_ds(paths3[p])};
            cxs_mix_opts mo = {.kind = kind ? CXS_SAMPLER_SHUFFLE : CXS_SAMPLER_SEQUENTIAL,
                               .seed = 9, .batch_size = 64};
            cxs_mix *m;
            cxs_diag d = {0};
            ck_assert_msg(cxs_mix_create(src, 2, &mo, &m, &d) == 0, "%s", d.message);
            cxs_loader_opts o = {.k = 3, .batch_size = 64, .threads = 2, .labels = 1};
            cxs_mix_loader *l;
            ck_assert_msg(cxs_mix_loader_create(m, &o, 0, 0, &l, &d) == 0, "%s", d.message);
            const cxs_mix_frames *b;
            int rc;
            while (!(rc = cxs_mix_loader_next(l, &b, &d)) && b) continue;
            expect(paths3[p], rc, d.message, "frame mixture");
            cxs_mix_loader_free(l);
            cxs_mix_free(m);
            /* the utterance mixture */
            cxs_mix_utt_opts uo = {.kind = kind ? CXS_UTT_SHUFFLE : CXS_UTT_SEQUENTIAL,
                                   .seed = 9, .frame_budget = 4096, .long_alone = 1};
            cxs_mix_utt *mu;
            ck_assert_msg(cxs_mix_utt_create(src, 2, &uo, &mu, &d) == 0, "%s", d.message);
            cxs_utt_loader_opts lo = {.threads = 2, .labels = 1};
            cxs_mix_utt_loader *ul;
            ck_assert_msg(cxs_mix_utt_loader_create(mu, &lo, 0, 0, &ul, &d) == 0, "%s", d.message);
            const cxs_mix_utts *ub;
            while (!(rc = cxs_mix_utt_loader_next(ul, &ub, &d)) && ub) continue;
            expect(paths3[p], rc, d.message, "utterance mixture");
            cxs_mix_utt_loader_free(ul);
            cxs_mix_utt_free(mu);
            cxs_dataset_close((cxs_dataset *)src[0]);
            cxs_dataset_close((cxs_dataset *)src[1]);
        }
    }
}
END_TEST

/* ---- the GPU loaders, on the emulated device -------------------------- */

static int gpu_epoch(const char *path, uint32_t mode, cxs_diag *d) {
    cxs_dataset *ds = open_ds(path);
    cxs_sampler_opts so = {.kind = CXS_SAMPLER_SHUFFLE, .seed = 5};
    cxs_sampler *s;
    EXPECT_INT(cxs_sampler_create(ds, &so, &s), 0);
    cxs_gpu_opts o;
    cxs_gpu_opts_init(&o);
    o.device = CXS_GPU_EMULATE;
    o.mode = mode;
    o.k = 3;
    o.batch_size = 64;
    o.labels = 1;
    o.threads = 2;
    o.budget_bytes = mode == CXS_GPU_POOL ? 1u << 20 : 16u << 20;
    void *stream = NULL;
    EXPECT_INT(cxs_gpu_emu_stream_create(&stream), 0);
    cxs_gpu_loader *l = NULL;
    int rc = cxs_gpu_loader_create(ds, s, &o, 0, 0, &l, d);
    const cxs_gpu_batch *b;
    while (!rc && !(rc = cxs_gpu_loader_next(l, stream, &b)) && b) continue;
    if (rc && l) *d = *cxs_gpu_loader_error(l);
    cxs_gpu_emu_stream_sync(stream);
    cxs_gpu_loader_free(l);
    cxs_gpu_emu_stream_destroy(stream);
    cxs_sampler_free(s);
    cxs_dataset_close(ds);
    return rc;
}

static int gpu_utt_epoch(const char *path, cxs_diag *d) {
    cxs_dataset *ds = open_ds(path);
    cxs_utt_sampler_opts so = {.kind = CXS_UTT_SHUFFLE, .seed = 3, .frame_budget = 4096,
                               .long_alone = 1};
    cxs_utt_sampler *s;
    ck_assert_msg(cxs_utt_sampler_create(ds, &so, &s, d) == 0, "%s", d->message);
    cxs_gpu_utt_opts o;
    cxs_gpu_utt_opts_init(&o);
    o.device = CXS_GPU_EMULATE;
    o.labels = 1;
    o.budget_bytes = 16u << 20;
    void *stream = NULL;
    EXPECT_INT(cxs_gpu_emu_stream_create(&stream), 0);
    cxs_gpu_utt_loader *l = NULL;
    int rc = cxs_gpu_utt_loader_create(ds, s, &o, 0, 0, &l, d);
    const cxs_gpu_utt_batch *b;
    while (!rc && !(rc = cxs_gpu_utt_loader_next(l, stream, &b)) && b) continue;
    if (rc && l) *d = *cxs_gpu_utt_loader_error(l);
    cxs_gpu_emu_stream_sync(stream);
    cxs_gpu_utt_loader_free(l);
    cxs_gpu_emu_stream_destroy(stream);
    cxs_utt_sampler_free(s);
    cxs_dataset_close(ds);
    return rc;
}

TEST(gpu_loaders_refuse) {
    const uint32_t modes[] = {CXS_GPU_STREAM, CXS_GPU_RESIDENT, CXS_GPU_POOL};
    const char *names[] = {"GPU stream", "GPU resident", "GPU pool"};
    for (int p = 0; p < 3; p++) {
        for (int m = 0; m < 3; m++) {
            cxs_diag d = {0};
            int rc = gpu_epoch(paths3[p], modes[m], &d);
            expect(paths3[p], rc, d.message, names[m]);
        }
        cxs_diag d = {0};
        expect(paths3[p], gpu_utt_epoch(paths3[p], &d), d.message, "GPU utterances");
        ck_assert_msg(cxs_gpu_emu_fault() == NULL, "%s", cxs_gpu_emu_fault());
    }
}
END_TEST

/* cxs_dataset_verify feeds the block source: a block it checked is not
 * hashed again when served by the same open dataset.  Shown by damage
 * made on disk after the verify, through the shard's mapping: served as
 * it now reads (the block was checked once, by verify), while a fresh
 * open of the same files refuses it. */
TEST(a_block_verified_is_not_hashed_again) {
    char path[400], cmd[1400];
    snprintf(path, sizeof path, "%s/verified", dir);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", path, sound, path);
    EXPECT_INT(system(cmd), 0);
    cxs_dataset *ds = open_ds(path), *ref = open_ds(sound);
    cxs_info in;
    cxs_dataset_info(ds, &in);
    cxs_diag d;
    int rc = cxs_dataset_verify(ds, NULL, NULL, &d);
    ck_assert_msg(rc == 0, "verify: %d %s", rc, d.message);
    cxs_utterance ut;
    EXPECT_INT(cxs_dataset_utterance(ref, DAMAGED_UTT, &ut), 0);
    EXPECT_INT(damage(path, 1), 0); /* a label byte, after the verify */
    /* (old code: every call that needs the block hashes it again and
     * refuses it, CXS_E_CHECKSUM) */
    cxs_utterance ut2;
    EXPECT_INT(cxs_dataset_utterance(ds, DAMAGED_UTT, &ut2), 0);
    const uint64_t f = ut.first_frame + DAMAGED_T;
    int64_t y[1], y0[1];
    EXPECT_INT(cxs_dataset_labels(ref, f, 1, y0), 0);
    rc = cxs_dataset_labels(ds, f, 1, y);
    ck_assert_msg(rc == 0, "labels after verify: %d (the block was hashed again)", rc);
    EXPECT_INT(y[0], (y0[0] + 1) % TD_PHONES); /* the bytes the mapping now holds */
    cxs_dataset_close(ds);
    cxs_dataset_close(ref);
    ds = open_ds(path); /* a fresh open checks the block at its first use */
    expect(bad_label, cxs_dataset_labels(ds, f, 1, y), NULL, "labels after reopening");
    cxs_dataset_close(ds);
}
END_TEST

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/cxs-blockcheck-XXXXXX");
    if (!mkdtemp(dir)) return 3;
    snprintf(sound, sizeof sound, "%s/sound", dir);
    snprintf(bad_label, sizeof bad_label, "%s/bad-label", dir);
    snprintf(bad_value, sizeof bad_value, "%s/bad-value", dir);
    td_opts o = {.utts = 48, .dim = 8, .seed = 11};
    if (td_make(sound, &o) || make_damaged(bad_label, 1) || make_damaged(bad_value, 0)) return 3;
    const TTest *const t[] = {gather_refuses_a_damaged_block, window_labels_utterance_read_pad_refuse,
                              frame_loader_every_order_refuses, utterance_loader_refuses,
                              mixtures_refuse, gpu_loaders_refuse,
                              a_block_verified_is_not_hashed_again};
    const cxs_group g[] = {{"blockcheck", 120, NULL, NULL, t, CXS_N(t), NULL}};
    int rc = cxs_run_groups("blockcheck", g, CXS_N(g), 0) ? EXIT_FAILURE : EXIT_SUCCESS;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) rc = EXIT_FAILURE;
    return rc;
}
