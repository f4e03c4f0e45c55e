/* qserve_test.c - coded features (q8, q16: format 1.4) served by every CPU
 * path equal, bit for bit, to the decoded reference: the gather of
 * windows (k 0, 3 and past the longest utterance, so windows at both
 * borders and wider than their utterance), normalised or not, the frame
 * loader in shuffle and block order, padded utterances and the utterance
 * loader, a mixture of coded sources; the header and codes a C caller
 * reads (cxs_dataset_read_qheader, read_features); zstd chunks on top of
 * q8; and a damaged header (the golden vectors') refused naming its shard and
 * utterance, nothing of it served.
 *
 * The datasets are written by the library's writer from random float
 * features with the pathological cases in them (utterances of 1 to 4
 * rows, a constant column, +0 and -0, one utterance of a huge range).
 * The reference is computed here from the same floats: the codec's
 * encoder (cxs_q_encode), its scalar reference decoder
 * (cxs_q_decode_rows), and the zero padding of spec section 6.
 *
 * usage: qserve_test GOLDEN_DIR */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memmem */
#endif
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctxshard.h"
#include "ctxshard_writer.h"
#include "cxs_qcodec.h"
#include "cxs_test.h"

#define NU 160
#define D 13 /* not a multiple of any vector width: the loops' tails run */
#define V 6
#define KBIG 90 /* past the longest utterance */

enum { Q8, Q16, Q8Z, NDS }; /* q8, q16, q8 under zstd */
static const uint32_t dtype_of[NDS] = {CXS_DTYPE_Q8, CXS_DTYPE_Q16, CXS_DTYPE_Q8};
static char dir[256], path[NDS][300];
static char golden[512]; /* tests/golden */
static uint64_t cum[NU + 1];
static float *feat;          /* the input floats, [F][D] */
static float *ref[NDS];      /* their decoded values, [F][D] */
static uint8_t *hdr[NDS];    /* the headers the codec gives, [NU][H] */

static uint64_t frames_of(uint64_t u) { return u < 8 ? 1 + u % 4 : 5 + (u * 37 + 11) % 70; }
static uint8_t label(uint64_t u, uint64_t t) { return (uint8_t)((u + t) % V); }

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double uniform(void) {
    rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
    return (double)((rng * 0x2545f4914f6cdd1dull) >> 11) / 9007199254740992.0;
}

static void make_features(void) {
    feat = malloc(sizeof *feat * cum[NU] * D);
    for (uint64_t u = 0; u < NU; u++)
        for (uint64_t t = 0; t < frames_of(u); t++)
            for (uint32_t d = 0; d < D; d++) {
                float *x = &feat[(cum[u] + t) * D + d];
                double g = uniform() * 8.0 - 4.0 + (double)d * 0.25;
                *x = (float)g;
                if (d == 3) *x = 1.5f;                         /* a constant column */
                if (d == 5) *x = (t + u) % 3 ? 0.0f : -0.0f;   /* +0 and -0 */
                if (u == 9 && d == 7) *x = (float)(g * 1e30);  /* a huge range */
            }
}

static void make_reference(int i) {
    const uint64_t H = cxs_q_header_size(dtype_of[i], D), E = dtype_of[i] == CXS_DTYPE_Q8 ? 1 : 2;
    ref[i] = malloc(sizeof(float) * cum[NU] * D);
    hdr[i] = malloc(H * NU);
    uint8_t *codes = malloc(100 * D * E);
    for (uint64_t u = 0; u < NU; u++) {
        const uint64_t T = frames_of(u);
        const char *why = NULL;
        if (cxs_q_encode(dtype_of[i], feat + cum[u] * D, T, D, D, hdr[i] + u * H, codes, &why))
            ck_abort_msg("encode: %s", why ? why : "?");
        cxs_q_decode_rows(dtype_of[i], hdr[i] + u * H, D, codes, T, ref[i] + cum[u] * D);
    }
    free(codes);
}

static int make(const char *out, uint32_t dtype, uint32_t compression) {
    static const char *vocab[V] = {"a", "b", "c", "d", "e", "f"};
    cxs_writer_opts wo;
    cxs_writer_opts_init(&wo);
    wo.dtype = dtype;
    wo.compression = compression;
    wo.chunk_size = 4096; /* several chunks */
    wo.shard_size = 16u << 10; /* several shards */
    wo.vocab_size = V;
    wo.vocab = vocab;
    cxs_diag d = {0};
    cxs_writer *w;
    int rc = cxs_writer_create(out, &wo, &w, &d);
    if (rc) {
        fprintf(stderr, "%s\n", d.message);
        return rc;
    }
    uint8_t lab[100];
    for (uint64_t u = 0; u < NU && !rc; u++) {
        const uint64_t T = frames_of(u);
        for (uint64_t t = 0; t < T; t++) lab[t] = label(u, t);
        cxs_writer_utt wu = {.data = feat + cum[u] * D, .frames = T, .dim = D,
                             .type = CXS_DTYPE_F32, .labels = lab, .label_count = T,
                             .label_size = 1};
        char id[32];
        snprintf(id, sizeof id, "utt-%03llu", (unsigned long long)u);
        if ((rc = cxs_writer_add(w, id, &wu, &d))) fprintf(stderr, "%s\n", d.message);
    }
    if (rc) {
        cxs_writer_abort(w);
        return rc;
    }
    cxs_writer_info wi;
    if ((rc = cxs_writer_commit(w, &wi, &d))) fprintf(stderr, "%s\n", d.message);
    return rc;
}

static uint64_t utt_of(uint64_t f) {
    uint64_t u = 0;
    while (cum[u + 1] <= f) u++;
    return u;
}

/* The window of frame f from the reference: rows f-k .. f+k of its
 * utterance, zeros outside it, normalised when mean is given (spec 7.4). */
static void ref_window(int i, uint64_t f, uint32_t k, const double *mean, const double *scale,
                       float *w) {
    const uint64_t u = utt_of(f), t = f - cum[u], T = frames_of(u);
    for (int64_t r = -(int64_t)k; r <= (int64_t)k; r++, w += D) {
        const int64_t s = (int64_t)t + r;
        for (uint32_t d = 0; d < D; d++) {
            if (s < 0 || s >= (int64_t)T) {
                w[d] = 0.0f;
                continue;
            }
            float x = ref[i][(cum[u] + (uint64_t)s) * D + d];
            if (mean) x = (float)(((double)x - mean[d]) * scale[d]);
            w[d] = x;
        }
    }
}

static void stats_scale(const cxs_dataset *ds, double *mean, double *scale) {
    cxs_stats st;
    cxs_dataset_stats(ds, &st);
    for (uint32_t d = 0; d < D; d++) {
        mean[d] = st.mean[d];
        scale[d] = st.var[d] > 0 ? 1.0 / sqrt(st.var[d]) : 1.0;
    }
}

static void gather_all(int i, int normalize) {
    cxs_dataset *ds;
    EXPECT_INT(cxs_dataset_open(path[i], &ds, NULL), 0);
    cxs_info info;
    cxs_dataset_info(ds, &info);
    EXPECT_UINT(info.dtype, dtype_of[i]);
    EXPECT_UINT(info.guard, 0);
    EXPECT_UINT(info.num_frames, cum[NU]);
    const void *view;
    EXPECT_INT(cxs_dataset_window(ds, 0, 0, &view), CXS_E_UNSUPPORTED); /* codes are not values */
    double mean[D], scale[D];
    if (normalize) stats_scale(ds, mean, scale);
    static const uint32_t ks[] = {0, 3, KBIG};
    const uint64_t F = cum[NU];
    uint64_t *frames = malloc(F * sizeof *frames);
    int64_t *labels = malloc(F * sizeof *labels);
    /* the first half backwards, the rest forwards: not in storage order,
     * and neighbouring windows both ways (the gather copies the rows a
     * window shares with the one before) */
    for (uint64_t f = 0; f < F; f++) frames[f] = f < F / 2 ? F / 2 - 1 - f : f;
    for (size_t j = 0; j < sizeof ks / sizeof *ks; j++) {
        const size_t W = (2 * (size_t)ks[j] + 1) * D;
        float *out = malloc(F * W * sizeof *out), *w = malloc(W * sizeof *w);
        cxs_diag dg = {0};
        int rc = cxs_dataset_gather_ex(ds, frames, F, ks[j], normalize ? CXS_GATHER_NORMALIZE : 0,
                                       NULL, 2, out, labels, &dg);
        if (rc) ck_abort_msg("gather k=%u: %s", ks[j], dg.message);
        for (uint64_t n = 0; n < F; n++) {
            ref_window(i, frames[n], ks[j], normalize ? mean : NULL, scale, w);
            if (memcmp(w, out + n * W, W * sizeof *w))
                ck_abort_msg("%s: k=%u frame %llu differs from the decoded reference", path[i],
                             ks[j], (unsigned long long)frames[n]);
            const uint64_t u = utt_of(frames[n]);
            EXPECT_LOOP(labels[n] == label(u, frames[n] - cum[u]));
        }
        free(out);
        free(w);
    }
    free(frames);
    free(labels);
    cxs_dataset_close(ds);
}

TEST(q8_windows_equal_the_reference) { gather_all(Q8, 0); }
END_TEST_
TEST(q16_windows_equal_the_reference) { gather_all(Q16, 0); }
END_TEST_
TEST(q8_zstd_windows_equal_the_reference) { gather_all(Q8Z, 0); }
END_TEST_
TEST(normalised_windows_are_of_the_decoded_values) {
    gather_all(Q8, 1);
    gather_all(Q16, 1);
}
END_TEST_

/* A whole epoch of the frame loader, every window checked. */
static void loader_epoch(int i, uint32_t kind) {
    cxs_dataset *ds;
    EXPECT_INT(cxs_dataset_open(path[i], &ds, NULL), 0);
    cxs_sampler_opts so;
    cxs_sampler_opts_init(&so);
    so.kind = kind;
    so.seed = 5;
    so.memory_bytes = kind == CXS_SAMPLER_BLOCK ? 64u << 10 : 0;
    cxs_sampler *s;
    cxs_diag dg = {0};
    if (cxs_sampler_create_ex(ds, &so, &s, &dg)) ck_abort_msg("sampler: %s", dg.message);
    cxs_loader_opts lo;
    cxs_loader_opts_init(&lo);
    lo.k = 4;
    lo.batch_size = 37;
    lo.threads = 2;
    lo.labels = 1;
    cxs_loader *l;
    EXPECT_INT(cxs_loader_create(ds, s, &lo, 0, 0, &l), 0);
    const size_t W = 9 * D;
    float *w = malloc(W * sizeof *w);
    const cxs_batch *b;
    uint64_t seen = 0;
    int rc;
    while ((rc = cxs_loader_next_ex(l, &b, &dg)) == 0 && b && b->n) {
        for (size_t n = 0; n < b->n; n++) {
            ref_window(i, b->frames[n], 4, NULL, NULL, w);
            EXPECT_LOOP(!memcmp(w, b->x + n * W, W * sizeof *w));
            const uint64_t u = utt_of(b->frames[n]);
            EXPECT_LOOP(b->y[n] == label(u, b->frames[n] - cum[u]));
        }
        seen += b->n;
    }
    if (rc) ck_abort_msg("loader: %s", dg.message);
    EXPECT_UINT(seen, cum[NU]);
    free(w);
    cxs_loader_free(l);
    cxs_sampler_free(s);
    cxs_dataset_close(ds);
}

TEST(frame_loader_serves_the_reference) {
    loader_epoch(Q8, CXS_SAMPLER_SHUFFLE);
    loader_epoch(Q16, CXS_SAMPLER_SHUFFLE);
    loader_epoch(Q8Z, CXS_SAMPLER_SHUFFLE);
}
END_TEST_
TEST(block_order_serves_the_reference) {
    loader_epoch(Q8, CXS_SAMPLER_BLOCK);
    loader_epoch(Q16, CXS_SAMPLER_BLOCK);
}
END_TEST_

/* A mixture of a q8 and a q16 source (and the q8 one under zstd): every
 * window equals its own source's reference. */
TEST(a_mixture_of_coded_sources_serves_each_ones_reference) {
    const int src[3] = {Q8, Q16, Q8Z};
    cxs_dataset *ds[3];
    for (int i = 0; i < 3; i++) EXPECT_INT(cxs_dataset_open(path[src[i]], &ds[i], NULL), 0);
    cxs_mix_opts mo;
    cxs_mix_opts_init(&mo);
    mo.kind = CXS_SAMPLER_SHUFFLE;
    mo.seed = 4;
    mo.batch_size = 50;
    cxs_mix *m;
    cxs_diag dg = {0};
    if (cxs_mix_create((const cxs_dataset *const *)ds, 3, &mo, &m, &dg))
        ck_abort_msg("mix: %s", dg.message);
    cxs_loader_opts lo;
    cxs_loader_opts_init(&lo);
    lo.k = 3;
    lo.batch_size = 50;
    lo.threads = 2;
    lo.labels = 1;
    cxs_mix_loader *l;
    if (cxs_mix_loader_create(m, &lo, 0, 0, &l, &dg)) ck_abort_msg("mix loader: %s", dg.message);
    const size_t W = 7 * D;
    float *w = malloc(W * sizeof *w);
    const cxs_mix_frames *b;
    uint64_t seen[3] = {0};
    int rc;
    while ((rc = cxs_mix_loader_next(l, &b, &dg)) == 0 && b) {
        for (size_t n = 0; n < b->n; n++) {
            const int i = src[b->source[n]];
            ref_window(i, b->frames[n], 3, NULL, NULL, w);
            EXPECT_LOOP(!memcmp(w, b->x + n * W, W * sizeof *w));
            seen[b->source[n]]++;
        }
    }
    if (rc) ck_abort_msg("mix loader: %s", dg.message);
    EXPECT(seen[0] && seen[1] && seen[2]);
    free(w);
    cxs_mix_loader_free(l);
    cxs_mix_free(m);
    for (int i = 0; i < 3; i++) cxs_dataset_close(ds[i]);
}
END_TEST_

static void check_padded(int i, const float *x, const int64_t *lengths, const uint64_t *utts,
                         size_t n, uint64_t tmax) {
    for (size_t j = 0; j < n; j++) {
        const uint64_t u = utts[j], T = frames_of(u);
        EXPECT_LOOP((uint64_t)lengths[j] == T);
        const float *row = x + j * tmax * D;
        EXPECT_LOOP(!memcmp(row, ref[i] + cum[u] * D, T * D * sizeof *row));
        for (uint64_t e = T * D; e < tmax * D; e++) {
            uint32_t bits;
            memcpy(&bits, &row[e], 4);
            EXPECT_LOOP(bits == 0); /* +0.0 */
        }
    }
}

static void utterances(int i) {
    cxs_dataset *ds;
    EXPECT_INT(cxs_dataset_open(path[i], &ds, NULL), 0);
    uint64_t utts[NU];
    for (uint64_t u = 0; u < NU; u++) utts[u] = (u * 61) % NU;
    float *x = malloc(sizeof *x * NU * 100 * D);
    int64_t lengths[NU];
    cxs_diag dg = {0};
    if (cxs_dataset_pad_batch_ex(ds, utts, NU, 100, 0, NULL, x, lengths, NULL, &dg))
        ck_abort_msg("pad_batch: %s", dg.message);
    check_padded(i, x, lengths, utts, NU, 100);
    free(x);
    cxs_utt_sampler_opts so = {.kind = CXS_UTT_SHUFFLE, .seed = 2, .frame_budget = 300};
    cxs_utt_sampler *s;
    if (cxs_utt_sampler_create(ds, &so, &s, &dg)) ck_abort_msg("sampler: %s", dg.message);
    cxs_utt_loader_opts lo = {.threads = 2};
    cxs_utt_loader *l;
    EXPECT_INT(cxs_utt_loader_create(ds, s, &lo, 0, 0, &l), 0);
    const cxs_utt_batch *b;
    uint64_t seen = 0;
    int rc;
    while ((rc = cxs_utt_loader_next_ex(l, &b, &dg)) == 0 && b && b->n) {
        check_padded(i, b->x, b->lengths, b->utts, b->n, b->tmax);
        seen += b->n;
    }
    if (rc) ck_abort_msg("utterance loader: %s", dg.message);
    EXPECT_UINT(seen, NU);
    cxs_utt_loader_free(l);
    cxs_utt_sampler_free(s);
    cxs_dataset_close(ds);
}

TEST(padded_utterances_and_the_utterance_loader_serve_the_reference) {
    utterances(Q8);
    utterances(Q16);
    utterances(Q8Z);
}
END_TEST_

/* cxs_dataset_read_qheader and cxs_dataset_read_features give what a C
 * caller needs to decode: the codec's header and codes of every
 * utterance (a zstd dataset's decompressed), which its reference decoder
 * turns into the values the loaders serve.  A float dataset has no
 * headers; an utterance past the end is out of range. */
static void headers_and_codes(int i) {
    cxs_dataset *ds;
    EXPECT_INT(cxs_dataset_open(path[i], &ds, NULL), 0);
    const uint64_t H = cxs_q_header_size(dtype_of[i], D), E = dtype_of[i] == CXS_DTYPE_Q8 ? 1 : 2;
    uint8_t *h = malloc(H), *codes = malloc(100 * D * E);
    float *x = malloc(sizeof *x * 100 * D);
    cxs_diag dg = {0};
    for (uint64_t u = 0; u < NU; u++) {
        const uint64_t T = frames_of(u);
        if (cxs_dataset_read_qheader(ds, u, h, &dg)) ck_abort_msg("read_qheader: %s", dg.message);
        EXPECT(memcmp(h, hdr[i] + u * H, H) == 0);
        EXPECT_INT(cxs_dataset_read_features(ds, u, 0, T, codes), 0);
        cxs_q_decode_rows(dtype_of[i], h, D, codes, T, x);
        EXPECT(memcmp(x, ref[i] + cum[u] * D, sizeof *x * T * D) == 0);
    }
    EXPECT_INT(cxs_dataset_read_qheader(ds, NU, h, &dg), CXS_E_RANGE);
    EXPECT_INT(cxs_dataset_read_qheader(ds, 0, NULL, &dg), CXS_E_INVALID);
    cxs_dataset_close(ds);
    free(h);
    free(codes);
    free(x);
}

TEST(read_qheader_and_read_features_decode_to_the_reference) {
    headers_and_codes(Q8);
    headers_and_codes(Q16);
    headers_and_codes(Q8Z);
    char p[700];
    snprintf(p, sizeof p, "%s/valid/tiny", golden);
    cxs_dataset *ds;
    EXPECT_INT(cxs_dataset_open(p, &ds, NULL), 0);
    uint8_t h[16];
    cxs_diag dg = {0};
    EXPECT_INT(cxs_dataset_read_qheader(ds, 0, h, &dg), CXS_E_UNSUPPORTED);
    EXPECT_STR_HAS(dg.message, "float32");
    cxs_dataset_close(ds);
}
END_TEST_

/* The golden vectors of damaged headers (tests/golden/invalid: every
 * checksum good, so open takes them; verify and the first use refuse
 * them): a window of the damaged utterance, a padded batch holding it and
 * a loader's epoch all refuse it, naming the shard, the QHEADERS entry,
 * the utterance and the fault; its neighbour still serves. */
static void refused(const char *name, uint64_t bad, const char *why) {
    char p[700];
    snprintf(p, sizeof p, "%s/invalid/%s", golden, name);
    cxs_dataset *ds;
    cxs_diag dg = {0};
    if (cxs_dataset_open(p, &ds, &dg)) ck_abort_msg("open %s: %s", p, dg.message);
    cxs_utterance ut;
    EXPECT_INT(cxs_dataset_utterance_ex(ds, bad, CXS_UTTERANCE_NO_DATA, &ut, NULL), 0);
    char id[64];
    snprintf(id, sizeof id, "%.*s", (int)ut.id_len, ut.id);
    cxs_info info;
    cxs_dataset_info(ds, &info);
    const uint32_t dim = info.dim;
    float *w = malloc(sizeof *w * 5 * dim * 64);
    uint64_t f = ut.first_frame;
    EXPECT_INT(cxs_dataset_gather_ex(ds, &f, 1, 2, 0, NULL, 1, w, NULL, &dg), CXS_E_CORRUPT);
    EXPECT_STR_HAS(dg.message, "QHEADERS");
    EXPECT_STR_HAS(dg.message, id);
    EXPECT_STR_HAS(dg.message, "shard-");
    EXPECT_STR_HAS(dg.message, why);
    int64_t len;
    EXPECT_INT(cxs_dataset_pad_batch_ex(ds, &bad, 1, 0, 0, NULL, w, &len, NULL, &dg),
               CXS_E_CORRUPT);
    EXPECT_STR_HAS(dg.message, id);
    uint8_t h[8 + 8 * 64];
    EXPECT(dim <= 64);
    EXPECT_INT(cxs_dataset_read_qheader(ds, bad, h, &dg), CXS_E_CORRUPT);
    EXPECT_STR_HAS(dg.message, id);
    EXPECT_STR_HAS(dg.message, why);
    uint64_t other = bad ? 0 : 1;
    EXPECT_INT(cxs_dataset_pad_batch_ex(ds, &other, 1, 0, 0, NULL, w, &len, NULL, &dg), 0);
    cxs_sampler *s;
    EXPECT_INT(cxs_sampler_create(ds, NULL, &s), 0);
    cxs_loader_opts lo;
    cxs_loader_opts_init(&lo);
    lo.k = 1;
    lo.batch_size = 1;
    lo.threads = 1;
    cxs_loader *l;
    EXPECT_INT(cxs_loader_create(ds, s, &lo, 0, 0, &l), 0);
    const cxs_batch *b;
    int rc;
    while ((rc = cxs_loader_next_ex(l, &b, &dg)) == 0 && b && b->n)
        EXPECT(b->frames[0] < ut.first_frame || b->frames[0] >= ut.first_frame + ut.num_frames);
    EXPECT_INT(rc, CXS_E_CORRUPT);
    EXPECT_STR_HAS(dg.message, id);
    cxs_loader_free(l);
    cxs_sampler_free(s);
    free(w);
    cxs_dataset_close(ds);
}

TEST(a_damaged_header_is_refused_naming_the_utterance) {
    refused("q8-bad-percentiles", 0, "column 1");
    refused("q8-bad-header", 1, "range");
}
END_TEST_

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    snprintf(golden, sizeof golden, "%s", argv[1]);
    snprintf(dir, sizeof dir, "/tmp/cxs-qserve-XXXXXX");
    if (!mkdtemp(dir)) return 3;
    cum[0] = 0;
    for (uint64_t u = 0; u < NU; u++) cum[u + 1] = cum[u] + frames_of(u);
    make_features();
    static const char *names[NDS] = {"q8", "q16", "q8-zstd"};
    for (int i = 0; i < NDS; i++) {
        snprintf(path[i], sizeof path[i], "%s/%s", dir, names[i]);
        if (make(path[i], dtype_of[i], i == Q8Z ? CXS_COMPRESSION_ZSTD : CXS_COMPRESSION_NONE))
            return 3;
        make_reference(i);
    }
    const TTest *t[] = {q8_windows_equal_the_reference,
                        q16_windows_equal_the_reference,
                        q8_zstd_windows_equal_the_reference,
                        normalised_windows_are_of_the_decoded_values,
                        frame_loader_serves_the_reference,
                        block_order_serves_the_reference,
                        a_mixture_of_coded_sources_serves_each_ones_reference,
                        padded_utterances_and_the_utterance_loader_serve_the_reference,
                        read_qheader_and_read_features_decode_to_the_reference,
                        a_damaged_header_is_refused_naming_the_utterance};
    const cxs_group g[] = {{"qserve", 120, NULL, NULL, t, CXS_N(t), NULL}};
    int failed = cxs_run_groups("qserve", g, CXS_N(g), 0);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) return 3;
    return failed ? 1 : 0;
}
