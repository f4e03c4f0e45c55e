/* The runtime reader: gather, samplers, loader, concurrency and fork, and
 * refusals of bad arguments.  The windows themselves are checked against an
 * independent numpy reference by tests/roundtrip; here the reader is
 * checked against itself through its different paths, the samplers
 * against their contracts, and the refusals' diagnostics.
 *
 * usage: reader_test CTXSHARD_EXE  (it synthesises and packs its dataset) */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include "ctxshard.h"
#include "cxs_test.h"

static char dir[256], packed[300], shard1[340], zpacked[300];
static cxs_dataset *ds;
static cxs_info info;

static void setup(void) {
    cxs_diag d;
    ck_assert_int_eq(cxs_dataset_open(packed, &ds, &d), 0);
    cxs_dataset_info(ds, &info);
}
/* The same data compressed (zstd, small chunks): the chunk cache's locks
 * and fork handler, and each loader worker's decoder, under the same
 * threads, forks and resets. */
static void setup_compressed(void) {
    cxs_diag d;
    ck_assert_int_eq(cxs_dataset_open(zpacked, &ds, &d), 0);
    cxs_dataset_info(ds, &info);
    ck_assert(info.compression != CXS_COMPRESSION_NONE);
}
static void teardown(void) { cxs_dataset_close(ds); }

static uint64_t *all_frames(uint64_t n) {
    uint64_t *f = malloc(n * sizeof *f);
    for (uint64_t i = 0; i < n; i++) f[i] = i;
    return f;
}

TEST(gather_matches_views) {
    /* For k <= guard the zero-copy view and the gather agree for every frame. */
    const uint32_t k = 5, D = info.dim, W = (2 * k + 1) * D;
    uint64_t n = info.num_frames;
    uint64_t *f = all_frames(n);
    float *x = malloc(n * W * sizeof *x);
    int64_t *y = malloc(n * sizeof *y), *yr = malloc(n * sizeof *yr);
    EXPECT_INT(cxs_dataset_gather(ds, f, n, k, 0, 2, x, y), 0);
    EXPECT_INT(cxs_dataset_labels(ds, 0, n, yr), 0);
    for (uint64_t i = 0; i < n; i++) {
        const void *w;
        EXPECT_LOOP(cxs_dataset_window(ds, i, k, &w) == 0);
        EXPECT_LOOP(memcmp(w, x + i * W, W * sizeof(float)) == 0);
        EXPECT_LOOP(y[i] == yr[i]);
    }
    free(f);
    free(x);
    free(y);
    free(yr);
}
END_TEST_

TEST(gather_threads_and_normalize) {
    const uint32_t k = 70, D = info.dim, W = (2 * k + 1) * D; /* k > guard */
    uint64_t n = 600, *f = malloc(n * sizeof *f);
    for (uint64_t i = 0; i < n; i++) f[i] = (i * 7919) % info.num_frames;
    float *a = malloc(n * W * 4), *b = malloc(n * W * 4), *c = malloc(n * W * 4);
    EXPECT_INT(cxs_dataset_gather(ds, f, n, k, 0, 1, a, NULL), 0);
    EXPECT_INT(cxs_dataset_gather(ds, f, n, k, 0, 3, b, NULL), 0);
    ck_assert(memcmp(a, b, n * W * 4) == 0);
    EXPECT_INT(cxs_dataset_gather(ds, f, n, k, CXS_GATHER_NORMALIZE, 2, c, NULL), 0);
    cxs_stats st;
    cxs_dataset_stats(ds, &st);
    for (uint64_t i = 0; i < n * W; i++) {
        uint32_t d = (uint32_t)(i % D);
        /* spec 7.4: binary64 arithmetic, one rounding to float32 at the end */
        double s = st.var[d] > 0 ? 1.0 / sqrt(st.var[d]) : 1.0;
        /* zero padding stays zero; a real value of exactly 0 is vanishingly
         * unlikely in synthesised data */
        float want = a[i] == 0.0f ? 0.0f : (float)(((double)a[i] - st.mean[d]) * s);
        EXPECT_LOOP(c[i] == want);
    }
    /* The normalised epoch has about zero mean and unit variance. */
    double sum = 0, sq = 0;
    uint64_t *g = all_frames(info.num_frames);
    float *z = malloc(info.num_frames * D * 4);
    EXPECT_INT(cxs_dataset_gather(ds, g, info.num_frames, 0, CXS_GATHER_NORMALIZE, 2, z, NULL), 0);
    for (uint64_t i = 0; i < info.num_frames * D; i += D) {
        sum += z[i + 3];
        sq += (double)z[i + 3] * z[i + 3];
    }
    double mean = sum / (double)info.num_frames, var = sq / (double)info.num_frames - mean * mean;
    ck_assert(fabs(mean) < 1e-4 && fabs(var - 1) < 1e-3);
    free(f);
    free(g);
    free(z);
    free(a);
    free(b);
    free(c);
}
END_TEST_

TEST(bad_arguments) {
    float x[64 * 29];
    int64_t y[2];
    uint64_t f[2] = {0, info.num_frames};
    const void *w;
    uint64_t u, off;
    uint32_t l;
    EXPECT_INT(cxs_dataset_gather(ds, f, 2, 1, 0, 1, x, y), CXS_E_RANGE);
    EXPECT_INT(cxs_dataset_gather(ds, f, 1, 2000000, 0, 1, x, y), CXS_E_INVALID);
    EXPECT_INT(cxs_dataset_gather(ds, f, 1, 0, 0x80, 1, x, y), CXS_E_INVALID);
    EXPECT_INT(cxs_dataset_gather(ds, NULL, 1, 0, 0, 1, x, y), CXS_E_INVALID);
    EXPECT_INT(cxs_dataset_gather(ds, f, 0, 0, 0, 8, NULL, NULL), 0); /* zero batch */
    EXPECT_INT(cxs_dataset_gather(ds, f, 1, 0, 0, 1000, x, y), 0);   /* threads capped */
    EXPECT_INT(cxs_dataset_window(ds, 0, info.guard + 1, &w), CXS_E_RANGE);
    EXPECT_INT(cxs_dataset_window(ds, UINT64_MAX, 0, &w), CXS_E_RANGE);
    EXPECT_INT(cxs_dataset_locate(ds, info.num_frames, &u, &off), CXS_E_RANGE);
    EXPECT_INT(cxs_dataset_label(ds, info.num_frames, &l), CXS_E_RANGE);
    EXPECT_INT(cxs_dataset_labels(ds, info.num_frames - 1, 2, y), CXS_E_RANGE);
    EXPECT_INT(cxs_dataset_labels(ds, UINT64_MAX, 2, y), CXS_E_RANGE);
    cxs_utterance ut;
    EXPECT_INT(cxs_dataset_utterance(ds, info.num_utterances, &ut), CXS_E_RANGE);
    cxs_sampler *s;
    cxs_sampler_opts so = {.kind = CXS_SAMPLER_SHUFFLE, .seed = 1, .rank = 3, .world_size = 3};
    EXPECT_INT(cxs_sampler_create(ds, &so, &s), CXS_E_INVALID); /* rank >= world */
    so.rank = 0;
    so.kind = 9;
    EXPECT_INT(cxs_sampler_create(ds, &so, &s), CXS_E_INVALID);
    so.kind = CXS_SAMPLER_WEIGHTED;
    double wts[64] = {0};
    so.class_weights = wts; /* all zero */
    EXPECT_INT(cxs_sampler_create(ds, &so, &s), CXS_E_INVALID);
    wts[3] = -1;
    EXPECT_INT(cxs_sampler_create(ds, &so, &s), CXS_E_INVALID);
    EXPECT_INT(cxs_sampler_create(ds, NULL, &s), 0);
    EXPECT_INT(cxs_sampler_get(s, 0, cxs_sampler_length(s), 1, f), CXS_E_RANGE);
    EXPECT_INT(cxs_sampler_get(s, 0, UINT64_MAX, 2, f), CXS_E_RANGE);
    cxs_loader *ld;
    cxs_loader_opts lo = {.k = 1, .batch_size = 0, .threads = 1};
    EXPECT_INT(cxs_loader_create(ds, s, &lo, 0, 0, &ld), CXS_E_INVALID); /* batch 0 */
    lo.batch_size = 4;
    lo.k = 5000000;
    EXPECT_INT(cxs_loader_create(ds, s, &lo, 0, 0, &ld), CXS_E_INVALID);
    lo.k = 1;
    EXPECT_INT(cxs_loader_create(ds, s, &lo, 0, cxs_sampler_length(s) + 1, &ld), CXS_E_INVALID);
    cxs_sampler_free(s);
    cxs_sampler_free(NULL);
    cxs_loader_free(NULL);
}
END_TEST_

TEST(diagnostics) {
    /* Every refusal of gather, the sampler and the loader says which
     * argument and why, with the return code of the plain call. */
    float x[64 * 29];
    int64_t y[2];
    uint64_t f[2] = {0, info.num_frames};
    cxs_diag d;
    EXPECT_INT(cxs_dataset_gather_ex(ds, f, 2, 1, 0, NULL, 1, x, y, &d), CXS_E_RANGE);
    EXPECT_STR_HAS(d.message, "gather: frame ");
    EXPECT_STR_HAS(d.message, "(item 1) is past the dataset's");
    EXPECT_INT(cxs_dataset_gather_ex(ds, f, 1, 2000000, 0, NULL, 1, x, y, &d), CXS_E_INVALID);
    EXPECT_STR_HAS(d.message, "gather: context k=2000000 is above 1,000,000");
    EXPECT_INT(cxs_dataset_gather_ex(ds, f, 1, 0, 0x80, NULL, 1, x, y, &d), CXS_E_INVALID);
    EXPECT_STR_HAS(d.message, "gather: unknown flags 0x80");
    EXPECT_INT(cxs_dataset_gather_ex(ds, NULL, 1, 0, 0, NULL, 1, x, y, &d), CXS_E_INVALID);
    EXPECT_STR_HAS(d.message, "gather: frames is NULL for 1 frames");
    double mean[64] = {0}, var[64] = {0};
    var[2] = -1;
    cxs_norm nrm = {info.dim + 1, mean, var};
    EXPECT_INT(cxs_dataset_gather_ex(ds, f, 1, 0, CXS_GATHER_NORMALIZE, &nrm, 1, x, y, &d),
               CXS_E_INVALID);
    EXPECT_STR_HAS(d.message, "dataset's dim is");
    nrm.dim = info.dim;
    EXPECT_INT(cxs_dataset_gather_ex(ds, f, 1, 0, CXS_GATHER_NORMALIZE, &nrm, 1, x, y, &d),
               CXS_E_INVALID);
    EXPECT_STR_HAS(d.message, "dimension 2 has mean 0 and variance -1");
    EXPECT_INT(cxs_dataset_gather_norm(ds, f, 1, 0, &nrm, 1, x, y), CXS_E_INVALID);
    var[2] = 1;
    EXPECT_INT(cxs_dataset_gather_ex(ds, f, 1, 0, CXS_GATHER_NORMALIZE, &nrm, 1, x, y, &d), 0);
    cxs_sampler *s;
    cxs_sampler_opts so = {.kind = CXS_SAMPLER_WEIGHTED, .seed = 1};
    double wts[64] = {0};
    so.class_weights = wts;
    EXPECT_INT(cxs_sampler_create_ex(ds, &so, &s, &d), CXS_E_INVALID);
    EXPECT_STR_HAS(d.message, "weighted sampler: the class weights are all zero");
    wts[3] = -1;
    EXPECT_INT(cxs_sampler_create_ex(ds, &so, &s, &d), CXS_E_INVALID);
    EXPECT_STR_HAS(d.message, "weighted sampler: class_weights[3] is -1");
    EXPECT_INT(cxs_sampler_create(ds, NULL, &s), 0);
    cxs_loader *ld;
    cxs_loader_opts lo = {.k = 1, .batch_size = 0, .threads = 1};
    EXPECT_INT(cxs_loader_create_ex(ds, s, &lo, 0, 0, &ld, &d), CXS_E_INVALID);
    EXPECT_STR_HAS(d.message, "loader: batch_size must be at least 1");
    lo.batch_size = 4;
    lo.threads = 1000;
    EXPECT_INT(cxs_loader_create_ex(ds, s, &lo, 0, 0, &ld, &d), CXS_E_INVALID);
    EXPECT_STR_HAS(d.message, "loader: threads 1000 is above 256");
    lo.threads = 1;
    lo.readahead = 7;
    EXPECT_INT(cxs_loader_create_ex(ds, s, &lo, 0, 0, &ld, &d), CXS_E_INVALID);
    EXPECT_STR_HAS(d.message, "loader: unknown readahead 7");
    lo.readahead = 0;
    EXPECT_INT(cxs_loader_create_ex(ds, s, &lo, 0, cxs_sampler_length(s) + 1, &ld, &d),
               CXS_E_INVALID);
    EXPECT_STR_HAS(d.message, "loader: start ");
    EXPECT_STR_HAS(d.message, "is past the epoch's");
    lo.flags = CXS_GATHER_NORMALIZE;
    lo.norm = &nrm;
    var[2] = NAN;
    EXPECT_INT(cxs_loader_create_ex(ds, s, &lo, 0, 0, &ld, &d), CXS_E_INVALID);
    EXPECT_STR_HAS(d.message, "loader: normalisation statistics: dimension 2 has mean 0 and variance nan");
    EXPECT_INT(cxs_loader_create_ex(ds, s, &lo, 0, 0, NULL, &d), CXS_E_INVALID);
    EXPECT_STR_HAS(d.message, "loader: no dataset, sampler, options or result pointer");
    var[2] = 1;
    EXPECT_INT(cxs_loader_create_ex(ds, s, &lo, 0, 0, &ld, &d), 0);
    cxs_loader_free(ld);
    cxs_sampler_free(s);
}
END_TEST_

/* One bit per frame. */
static void check_permutation(const uint64_t *f, uint64_t n) {
    uint8_t *seen = calloc(n, 1);
    for (uint64_t i = 0; i < n; i++) {
        EXPECT_LOOP(f[i] < n);
        EXPECT_LOOP(!seen[f[i]]);
        seen[f[i]] = 1;
    }
    free(seen);
}

TEST(shuffle_is_a_permutation) {
    cxs_sampler *s;
    cxs_sampler_opts so = {.kind = CXS_SAMPLER_SHUFFLE, .seed = 42, .world_size = 1};
    EXPECT_INT(cxs_sampler_create(ds, &so, &s), 0);
    uint64_t n = cxs_sampler_length(s);
    EXPECT_UINT(n, info.num_frames);
    uint64_t *a = malloc(n * 8), *b = malloc(n * 8), *c = malloc(n * 8);
    EXPECT_INT(cxs_sampler_get(s, 0, 0, n, a), 0);
    check_permutation(a, n);
    EXPECT_INT(cxs_sampler_get(s, 1, 0, n, b), 0);
    check_permutation(b, n);
    uint64_t same = 0, inplace = 0;
    for (uint64_t i = 0; i < n; i++) {
        same += a[i] == b[i];
        inplace += a[i] == i;
    }
    ck_assert(same < n / 1000 + 10);    /* epochs differ */
    ck_assert(inplace < n / 1000 + 10); /* and are shuffled */
    /* Same seed, another sampler: identical.  Resume mid-epoch: identical. */
    cxs_sampler *s2;
    EXPECT_INT(cxs_sampler_create(ds, &so, &s2), 0);
    EXPECT_INT(cxs_sampler_get(s2, 0, 12345, n - 12345, c), 0);
    ck_assert(memcmp(a + 12345, c, (n - 12345) * 8) == 0);
    so.seed = 43;
    cxs_sampler *s3;
    EXPECT_INT(cxs_sampler_create(ds, &so, &s3), 0);
    EXPECT_INT(cxs_sampler_get(s3, 0, 0, n, c), 0);
    ck_assert(memcmp(a, c, n * 8) != 0);
    /* Consecutive positions should not be near each other in the dataset. */
    uint64_t near = 0;
    for (uint64_t i = 1; i < n; i++) near += (a[i] > a[i - 1] ? a[i] - a[i - 1] : a[i - 1] - a[i]) < 100;
    ck_assert(near < n / 100);
    cxs_sampler_free(s);
    cxs_sampler_free(s2);
    cxs_sampler_free(s3);
    free(a);
    free(b);
    free(c);
}
END_TEST_

TEST(sequential_is_in_order) {
    cxs_sampler *s;
    EXPECT_INT(cxs_sampler_create(ds, NULL, &s), 0);
    uint64_t n = cxs_sampler_length(s), *a = malloc(n * 8);
    EXPECT_INT(cxs_sampler_get(s, 3, 0, n, a), 0);
    for (uint64_t i = 0; i < n; i++) EXPECT_LOOP(a[i] == i);
    cxs_sampler_free(s);
    free(a);
}
END_TEST_

static void check_ranks(uint32_t kind, uint32_t world, uint32_t drop_last) {
    uint64_t N = info.num_frames;
    uint8_t *seen = calloc(N, 1);
    uint64_t len0 = 0, total = 0, dup = 0;
    for (uint32_t r = 0; r < world; r++) {
        cxs_sampler *s;
        cxs_sampler_opts so = {.kind = kind, .seed = 9, .rank = r, .world_size = world,
                               .drop_last = drop_last};
        EXPECT_INT(cxs_sampler_create(ds, &so, &s), 0);
        uint64_t n = cxs_sampler_length(s), *a = malloc(n * 8);
        if (r == 0) len0 = n;
        EXPECT_UINT(n, len0); /* equal counts */
        EXPECT_UINT(n, drop_last ? N / world : (N + world - 1) / world);
        EXPECT_INT(cxs_sampler_get(s, 2, 0, n, a), 0);
        for (uint64_t i = 0; i < n; i++) {
            dup += seen[a[i]];
            seen[a[i]] = 1;
        }
        total += n;
        cxs_sampler_free(s);
        free(a);
    }
    uint64_t covered = 0;
    for (uint64_t i = 0; i < N; i++) covered += seen[i];
    if (drop_last) {
        EXPECT_UINT(dup, 0);
        EXPECT_UINT(covered, total);
    } else {
        EXPECT_UINT(covered, N);       /* every frame */
        EXPECT_UINT(dup, total - N);   /* repeats only as padding */
    }
    free(seen);
}

TEST(ranks_partition) {
    check_ranks(CXS_SAMPLER_SHUFFLE, 3, 0);
    check_ranks(CXS_SAMPLER_SHUFFLE, 3, 1);
    check_ranks(CXS_SAMPLER_SHUFFLE, 8, 0);
    check_ranks(CXS_SAMPLER_SEQUENTIAL, 7, 0);
    check_ranks(CXS_SAMPLER_SEQUENTIAL, 7, 1);
}
END_TEST_

/* Class frequencies of n weighted draws against expected shares p[c]:
 * every class within 5 standard deviations (binomial), which a correct
 * sampler violates with probability below 1e-5 for 42 classes. */
static void check_weighted(const double *weights, const double *p, uint64_t n) {
    cxs_sampler *s;
    cxs_sampler_opts so = {.kind = CXS_SAMPLER_WEIGHTED, .seed = 5, .world_size = 1,
                           .num_samples = n, .class_weights = weights};
    EXPECT_INT(cxs_sampler_create(ds, &so, &s), 0);
    EXPECT_UINT(cxs_sampler_length(s), n);
    uint64_t *a = malloc(n * 8);
    int64_t *lab = malloc(n * 8);
    EXPECT_INT(cxs_sampler_get(s, 0, 0, n, a), 0);
    for (uint64_t i = 0; i < n; i++) {
        uint32_t l;
        cxs_dataset_label(ds, a[i], &l);
        lab[i] = l;
    }
    uint64_t cnt[64] = {0};
    for (uint64_t i = 0; i < n; i++) cnt[lab[i]]++;
    for (uint32_t c = 0; c < info.vocab_size; c++) {
        double sd = sqrt(p[c] * (1 - p[c]) / (double)n), obs = (double)cnt[c] / (double)n;
        ck_assert_msg(fabs(obs - p[c]) <= 5 * sd + 1e-12, "class %u: %.5f, expected %.5f", c,
                      obs, p[c]);
    }
    /* Resumable: the same draws from the middle. */
    uint64_t *b = malloc(1000 * 8);
    EXPECT_INT(cxs_sampler_get(s, 0, n / 2, 1000, b), 0);
    ck_assert(memcmp(a + n / 2, b, 1000 * 8) == 0);
    cxs_sampler_free(s);
    free(a);
    free(b);
    free(lab);
}

TEST(weighted_matches_distribution) {
    cxs_stats st;
    cxs_dataset_stats(ds, &st);
    double p[64] = {0}, w[64];
    uint32_t present = 0;
    for (uint32_t c = 0; c < info.vocab_size; c++) present += st.label_counts[c] > 0;
    ck_assert(present >= 30);
    /* Default: inverse frequency, every present class equally likely. */
    for (uint32_t c = 0; c < info.vocab_size; c++) p[c] = st.label_counts[c] ? 1.0 / present : 0;
    check_weighted(NULL, p, 400000);
    /* Caller weights: 1 everywhere is the natural distribution ... */
    for (uint32_t c = 0; c < info.vocab_size; c++) {
        w[c] = 1;
        p[c] = (double)st.label_counts[c] / (double)info.num_frames;
    }
    check_weighted(w, p, 400000);
    /* ... and a zero weight removes a class; here only classes 1 and 2, 1:3. */
    double tot = 0;
    for (uint32_t c = 0; c < info.vocab_size; c++) w[c] = 0;
    w[1] = 1.0 / (double)st.label_counts[1];
    w[2] = 3.0 / (double)st.label_counts[2];
    for (uint32_t c = 0; c < info.vocab_size; c++) tot += w[c] * (double)st.label_counts[c];
    for (uint32_t c = 0; c < info.vocab_size; c++) p[c] = w[c] * (double)st.label_counts[c] / tot;
    check_weighted(w, p, 100000);
}
END_TEST_

/* Run the loader over one epoch and compare with sampler + gather. */
static void loader_epoch(uint32_t kind, uint32_t threads, uint32_t batch, uint32_t drop_last,
                         uint64_t epoch, uint64_t start) {
    cxs_sampler *s;
    cxs_sampler_opts so = {.kind = kind, .seed = 77, .world_size = 1};
    EXPECT_INT(cxs_sampler_create(ds, &so, &s), 0);
    cxs_loader *l;
    cxs_loader_opts lo = {.k = 3, .batch_size = batch, .threads = threads, .drop_last = drop_last,
                          .labels = 1};
    EXPECT_INT(cxs_loader_create(ds, s, &lo, epoch, start, &l), 0);
    EXPECT_UINT(cxs_loader_ring(l), threads + 2 < 3 ? 3 : threads + 2); /* the default */
    const uint32_t W = 7 * info.dim;
    float *x = malloc((size_t)batch * W * 4);
    int64_t *y = malloc(batch * 8);
    uint64_t *f = malloc(batch * 8);
    uint64_t len = cxs_sampler_length(s), pos = start, nb = 0;
    const cxs_batch *b;
    for (;;) {
        EXPECT_INT(cxs_loader_next(l, &b), 0);
        if (!b) break;
        ck_assert(b->index == nb && b->position == pos);
        size_t want = len - pos < batch ? (size_t)(len - pos) : batch;
        ck_assert(b->n == want && (!drop_last || b->n == batch));
        cxs_sampler_get(s, epoch, pos, b->n, f);
        ck_assert(memcmp(f, b->frames, b->n * 8) == 0);
        cxs_dataset_gather(ds, f, b->n, 3, 0, 1, x, y);
        ck_assert(memcmp(x, b->x, b->n * W * 4) == 0);
        ck_assert(memcmp(y, b->y, b->n * 8) == 0);
        pos += b->n;
        nb++;
    }
    uint64_t expect_end = drop_last ? start + (len - start) / batch * batch : len;
    EXPECT_UINT(pos, expect_end);
    EXPECT_INT(cxs_loader_next(l, &b), 0); /* stays at the end */
    ck_assert(b == NULL);
    cxs_loader_free(l);
    cxs_sampler_free(s);
    free(x);
    free(y);
    free(f);
}

TEST(loader_matches_gather) {
    loader_epoch(CXS_SAMPLER_SHUFFLE, 2, 1000, 0, 0, 0);
    loader_epoch(CXS_SAMPLER_SHUFFLE, 3, 777, 1, 4, 0);
    loader_epoch(CXS_SAMPLER_SEQUENTIAL, 1, 4096, 0, 0, 0);
    loader_epoch(CXS_SAMPLER_WEIGHTED, 2, 513, 0, 1, 0);
    loader_epoch(CXS_SAMPLER_SHUFFLE, 2, 1000, 0, 2, 31337); /* resumed mid-epoch */
}
END_TEST_

/* A loader normalising with statistics of another dataset (train's, for a
 * dev split): the same windows as cxs_dataset_gather_norm with them; a
 * norm of another dimension is refused at create. */
TEST(loader_norm_from_other_stats) {
    const uint32_t D = info.dim, B = 500, k = 2, W = (2 * k + 1) * D;
    double *mean = malloc(D * 8), *var = malloc(D * 8);
    cxs_stats st;
    cxs_dataset_stats(ds, &st);
    for (uint32_t d = 0; d < D; d++) {
        mean[d] = st.mean[d] + 1.0; /* anything but the dataset's own */
        var[d] = d == 3 ? 0.0 : st.var[d] * 4.0; /* and a zero variance */
    }
    cxs_norm nrm = {D, mean, var};
    cxs_sampler *s;
    cxs_sampler_opts so = {.kind = CXS_SAMPLER_SHUFFLE, .seed = 4, .world_size = 1};
    EXPECT_INT(cxs_sampler_create(ds, &so, &s), 0);
    cxs_loader *l;
    cxs_loader_opts lo = {.k = k, .batch_size = B, .threads = 2, .flags = CXS_GATHER_NORMALIZE,
                          .labels = 1, .norm = &nrm};
    EXPECT_INT(cxs_loader_create(ds, s, &lo, 0, 0, &l), 0);
    float *x = malloc((size_t)B * W * 4), *own = malloc((size_t)B * W * 4);
    int64_t y[500];
    for (int i = 0; i < 3; i++) {
        const cxs_batch *b;
        EXPECT_INT(cxs_loader_next(l, &b), 0);
        EXPECT_INT(cxs_dataset_gather_norm(ds, b->frames, b->n, k, &nrm, 1, x, y), 0);
        ck_assert(memcmp(x, b->x, b->n * W * 4) == 0 && memcmp(y, b->y, b->n * 8) == 0);
        /* and not what the dataset's own statistics give */
        EXPECT_INT(cxs_dataset_gather(ds, b->frames, b->n, k, CXS_GATHER_NORMALIZE, 1, own, y), 0);
        ck_assert(memcmp(own, b->x, b->n * W * 4) != 0);
    }
    cxs_loader_free(l);
    nrm.dim = D + 1;
    EXPECT_INT(cxs_loader_create(ds, s, &lo, 0, 0, &l), CXS_E_INVALID);
    cxs_sampler_free(s);
    free(mean);
    free(var);
    free(x);
    free(own);
}
END_TEST_

TEST(labels_of_and_shard_labels) {
    uint64_t f[5] = {info.num_frames - 1, 0, 17, info.num_frames / 2, 3};
    int64_t a[5], b;
    EXPECT_INT(cxs_dataset_labels_of(ds, f, 5, a), 0);
    for (int i = 0; i < 5; i++) {
        EXPECT_INT(cxs_dataset_labels(ds, f[i], 1, &b), 0);
        EXPECT_LOOP(a[i] == b);
    }
    f[2] = info.num_frames;
    EXPECT_INT(cxs_dataset_labels_of(ds, f, 5, a), CXS_E_RANGE);
    uint64_t total = 0;
    for (uint32_t s = 0; s < info.num_shards; s++) {
        const uint8_t *p;
        uint64_t first, n;
        uint32_t want;
        EXPECT_INT(cxs_dataset_shard_labels(ds, s, (const void **)&p, &first, &n), 0);
        ck_assert(first == total && n > 0);
        EXPECT_INT(cxs_dataset_label(ds, first + n - 1, &want), 0);
        uint32_t got = info.label_width == 1 ? p[n - 1] : (uint32_t)(p[2 * n - 2] | p[2 * n - 1] << 8);
        EXPECT_UINT(got, want);
        total += n;
    }
    EXPECT_UINT(total, info.num_frames);
    EXPECT_INT(cxs_dataset_shard_labels(ds, info.num_shards, NULL, NULL, NULL), CXS_E_RANGE);
}
END_TEST_

TEST(loader_reset_and_early_free) {
    cxs_sampler *s;
    cxs_sampler_opts so = {.kind = CXS_SAMPLER_SHUFFLE, .seed = 1, .world_size = 1};
    EXPECT_INT(cxs_sampler_create(ds, &so, &s), 0);
    cxs_loader *l;
    cxs_loader_opts lo = {.k = 2, .batch_size = 256, .threads = 3, .ring = 4};
    EXPECT_INT(cxs_loader_create(ds, s, &lo, 0, 0, &l), 0);
    EXPECT_UINT(cxs_loader_ring(l), 4);
    const cxs_batch *b;
    uint64_t first[256];
    EXPECT_INT(cxs_loader_next(l, &b), 0);
    EXPECT_INT(cxs_loader_next(l, &b), 0);
    EXPECT_INT(cxs_loader_reset(l, 5, 1000), 0);
    EXPECT_INT(cxs_loader_next(l, &b), 0);
    cxs_sampler_get(s, 5, 1000, 256, first);
    ck_assert(b && b->position == 1000 && b->index == 0 && b->y == NULL);
    ck_assert(memcmp(first, b->frames, sizeof first) == 0);
    cxs_loader_free(l); /* with batches in flight */
    cxs_sampler_free(s);
}
END_TEST_

static uint64_t hash_batches(const cxs_dataset *d, uint64_t seed, int n) {
    XXH64_state_t *st = XXH64_createState();
    XXH64_reset(st, 0);
    const uint32_t k = 10, W = (2 * k + 1) * info.dim;
    float *x = malloc(512 * W * 4);
    int64_t y[512];
    uint64_t f[512];
    for (int b = 0; b < n; b++) {
        for (int i = 0; i < 512; i++) f[i] = (seed * 1000003 + (uint64_t)b * 512 + (uint64_t)i * 7919) % info.num_frames;
        cxs_dataset_gather(d, f, 512, k, 0, 1, x, y);
        XXH64_update(st, x, 512 * W * 4);
        XXH64_update(st, y, sizeof y);
    }
    uint64_t h = XXH64_digest(st);
    XXH64_freeState(st);
    free(x);
    return h;
}

typedef struct {
    uint64_t seed, h;
} tjob;

static void *thread_reader(void *arg) {
    tjob *j = arg;
    j->h = hash_batches(ds, j->seed, 20);
    return NULL;
}

TEST(loader_external_buffers) {
    /* Batches land in the caller's buffers and stay the caller's. */
    cxs_sampler *s;
    cxs_sampler_opts so = {.kind = CXS_SAMPLER_SHUFFLE, .seed = 8, .world_size = 1};
    EXPECT_INT(cxs_sampler_create(ds, &so, &s), 0);
    const uint32_t B = 500, k = 2, W = (2 * k + 1) * info.dim;
    cxs_loader *l;
    cxs_loader_opts lo = {.k = k, .batch_size = B, .threads = 2, .ring = 3, .labels = 1,
                          .external = 1};
    EXPECT_INT(cxs_loader_create(ds, s, &lo, 0, 0, &l), 0);
    const cxs_batch *b;
    EXPECT_INT(cxs_loader_next(l, &b), CXS_E_INVALID); /* no buffer: an error, not a hang */
    uint64_t len = cxs_sampler_length(s), nb = (len + B - 1) / B;
    float **xs = calloc(nb, sizeof *xs);
    int64_t **ys = calloc(nb, sizeof *ys);
    for (uint64_t i = 0; i < nb; i++) {
        xs[i] = malloc((size_t)B * W * 4);
        ys[i] = malloc(B * 8);
    }
    uint64_t given = 0;
    for (; given < 3; given++) EXPECT_INT(cxs_loader_provide(l, xs[given], ys[given]), 0);
    EXPECT_INT(cxs_loader_provide(l, xs[0], ys[0]), CXS_E_INVALID); /* ring full */
    const float *got_x[4096];
    size_t got_n[4096];
    uint64_t got = 0;
    for (;;) {
        EXPECT_INT(cxs_loader_next(l, &b), 0);
        if (!b) break;
        ck_assert(b->x == xs[got] && b->y == ys[got]); /* in the order given */
        got_x[got] = b->x;
        got_n[got] = b->n;
        got++;
        if (given < nb) {
            EXPECT_INT(cxs_loader_provide(l, xs[given], ys[given]), 0);
            given++;
        }
    }
    EXPECT_UINT(got, nb);
    cxs_loader_free(l);
    /* Every batch is still intact after the loader is gone. */
    uint64_t *f = malloc(B * 8);
    float *x = malloc((size_t)B * W * 4);
    for (uint64_t i = 0; i < got; i++) {
        cxs_sampler_get(s, 0, i * B, got_n[i], f);
        cxs_dataset_gather(ds, f, got_n[i], k, 0, 1, x, NULL);
        ck_assert(memcmp(x, got_x[i], got_n[i] * W * 4) == 0);
    }
    /* Reset hands unfilled buffers back to the queue: nothing is lost. */
    EXPECT_INT(cxs_loader_create(ds, s, &lo, 1, 0, &l), 0);
    for (int i = 0; i < 3; i++) EXPECT_INT(cxs_loader_provide(l, xs[i], ys[i]), 0);
    EXPECT_INT(cxs_loader_next(l, &b), 0);
    EXPECT_INT(cxs_loader_reset(l, 2, 0), 0);
    for (int i = 0; i < 6; i++) {
        EXPECT_INT(cxs_loader_next(l, &b), 0);
        ck_assert(b != NULL && b->index == (uint64_t)i);
        EXPECT_INT(cxs_loader_provide(l, (float *)b->x, (int64_t *)b->y), 0); /* recycle */
    }
    cxs_loader_free(l);
    for (uint64_t i = 0; i < nb; i++) {
        free(xs[i]);
        free(ys[i]);
    }
    free(xs);
    free(ys);
    free(f);
    free(x);
    cxs_sampler_free(s);
}
END_TEST_

TEST(concurrent_threads) {
    tjob jobs[8];
    pthread_t t[8];
    for (int i = 0; i < 8; i++) {
        jobs[i].seed = (uint64_t)i;
        pthread_create(&t[i], NULL, thread_reader, &jobs[i]);
    }
    for (int i = 0; i < 8; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < 8; i++) EXPECT_UINT(jobs[i].h, hash_batches(ds, (uint64_t)i, 20));
}
END_TEST_

TEST(forked_children_read_the_same) {
    /* Forked children read the same mapping and get the same bytes. */
    int fds[4][2];
    pid_t pids[4];
    for (int c = 0; c < 4; c++) {
        ck_assert(pipe(fds[c]) == 0);
        pids[c] = fork();
        if (pids[c] == 0) {
            uint64_t h = hash_batches(ds, (uint64_t)c, 20);
            ssize_t w = write(fds[c][1], &h, 8);
            _exit(w == 8 ? 0 : 1);
        }
        close(fds[c][1]);
    }
    for (int c = 0; c < 4; c++) {
        uint64_t h = 0;
        ck_assert(read(fds[c][0], &h, 8) == 8);
        close(fds[c][0]);
        int status;
        waitpid(pids[c], &status, 0);
        ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        EXPECT_UINT(h, hash_batches(ds, (uint64_t)c, 20));
    }
}
END_TEST_

TEST(loader_after_fork) {
    /* A loader created before fork() goes on in the child from where the
     * parent stood, with the same batches the parent gets.  Skipped with
     * CXS_TEST_NO_FORK set: the sanitizers' own allocators are not fork-safe
     * while other threads run (glibc's malloc is), so a child starting
     * threads can deadlock inside the sanitizer. */
    cxs_sampler *s;
    cxs_sampler_opts so = {.kind = CXS_SAMPLER_SHUFFLE, .seed = 3, .world_size = 1};
    EXPECT_INT(cxs_sampler_create(ds, &so, &s), 0);
    cxs_loader *l;
    cxs_loader_opts lo = {.k = 4, .batch_size = 300, .threads = 2, .labels = 1};
    EXPECT_INT(cxs_loader_create(ds, s, &lo, 0, 0, &l), 0);
    const cxs_batch *b;
    for (int i = 0; i < 3; i++) EXPECT_INT(cxs_loader_next(l, &b), 0);
    int fd[2];
    ck_assert(pipe(fd) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        XXH64_state_t *st = XXH64_createState();
        XXH64_reset(st, 0);
        int ok = 1;
        for (int i = 0; i < 10; i++) {
            ok &= cxs_loader_next(l, &b) == 0 && b != NULL && b->index == (uint64_t)(3 + i);
            if (b) XXH64_update(st, b->x, b->n * 9 * info.dim * 4);
        }
        cxs_loader_free(l);
        uint64_t h = XXH64_digest(st);
        ssize_t w = write(fd[1], &h, 8);
        _exit(ok && w == 8 ? 0 : 1);
    }
    close(fd[1]);
    XXH64_state_t *st = XXH64_createState();
    XXH64_reset(st, 0);
    for (int i = 0; i < 10; i++) {
        EXPECT_INT(cxs_loader_next(l, &b), 0);
        XXH64_update(st, b->x, b->n * 9 * info.dim * 4);
    }
    uint64_t h = 0;
    ck_assert(read(fd[0], &h, 8) == 8);
    close(fd[0]);
    int status;
    waitpid(pid, &status, 0);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    EXPECT_UINT(h, XXH64_digest(st));
    XXH64_freeState(st);
    cxs_loader_free(l);
    cxs_sampler_free(s);
}
END_TEST_

TEST(single_shard) {
    cxs_dataset *one;
    cxs_diag d;
    EXPECT_INT(cxs_dataset_open(shard1, &one, &d), 0);
    cxs_info in;
    cxs_dataset_info(one, &in);
    ck_assert(in.single_shard == 1 && in.num_shards == 1 && in.vocab_size == 0 &&
              in.label_width == 1 && in.dim == info.dim);
    cxs_stats st;
    cxs_dataset_stats(one, &st);
    ck_assert(st.mean == NULL && st.count == 0);
    EXPECT_INT(cxs_dataset_verify(one, NULL, NULL, &d), 0);
    /* Its frame 0 is the full dataset's first frame of shard 1. */
    cxs_utterance u0, g;
    EXPECT_INT(cxs_dataset_utterance(one, 0, &u0), 0);
    ck_assert(u0.first_frame == 0 && u0.shard == 0);
    uint64_t gu = 0;
    for (; gu < info.num_utterances; gu++) {
        cxs_dataset_utterance(ds, gu, &g);
        if (g.shard == 1) break;
    }
    ck_assert(g.id_len == u0.id_len && memcmp(g.id, u0.id, g.id_len) == 0);
    const uint32_t k = 80, W = (2 * k + 1) * in.dim;
    float *a = malloc(W * 4 * 50), *b = malloc(W * 4 * 50);
    int64_t ya[50], yb[50];
    uint64_t fa[50], fb[50];
    for (int i = 0; i < 50; i++) {
        fa[i] = (uint64_t)i * 37 % in.num_frames;
        fb[i] = g.first_frame + fa[i];
    }
    EXPECT_INT(cxs_dataset_gather(one, fa, 50, k, 0, 1, a, ya), 0);
    EXPECT_INT(cxs_dataset_gather(ds, fb, 50, k, 0, 1, b, yb), 0);
    ck_assert(memcmp(a, b, W * 4 * 50) == 0 && memcmp(ya, yb, sizeof ya) == 0);
    EXPECT_INT(cxs_dataset_gather(one, fa, 1, 0, CXS_GATHER_NORMALIZE, 1, a, NULL), CXS_E_INVALID);
    cxs_dataset_close(one);
    free(a);
    free(b);
}
END_TEST_

TEST(open_close_repeatedly) {
    /* Under the sanitizers this also proves open and close leak nothing. */
    for (int i = 0; i < 50; i++) {
        cxs_dataset *x;
        EXPECT_INT(cxs_dataset_open(packed, &x, NULL), 0);
        cxs_dataset_close(x);
    }
}
END_TEST_

static int fork_kind(const TTest *t) {
    return t == forked_children_read_the_same ? CXS_FORK_ANY
           : t == loader_after_fork           ? CXS_FORK_THREADS
                                              : CXS_FORK_NONE;
}

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    snprintf(dir, sizeof dir, "/tmp/cxs-reader-XXXXXX");
    if (!mkdtemp(dir)) return 3;
    snprintf(packed, sizeof packed, "%s/packed", dir);
    snprintf(shard1, sizeof shard1, "%s/shard-000001.cxs", packed);
    snprintf(zpacked, sizeof zpacked, "%s/zpacked", dir);
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "'%s' synth '%s/raw' --utts 60 --seed 11 --quiet && "
             "'%s' pack '%s/raw' '%s' --guard 40 --shard-size 3M --quiet && "
             "'%s' convert '%s' '%s' --compress zstd --chunk-size 64K --quiet",
             argv[1], dir, argv[1], dir, packed, argv[1], packed, zpacked);
    int rc = system(cmd);
    if (rc != 0) return 3;
    const TTest *tests[] = {gather_matches_views, gather_threads_and_normalize, bad_arguments,
                            diagnostics,
                            shuffle_is_a_permutation, sequential_is_in_order, ranks_partition,
                            weighted_matches_distribution, loader_matches_gather,
                            labels_of_and_shard_labels, loader_norm_from_other_stats,
                            loader_reset_and_early_free,
                            loader_external_buffers, concurrent_threads,
                            forked_children_read_the_same, loader_after_fork, single_shard,
                            open_close_repeatedly};
    const TTest *ztests[] = {gather_threads_and_normalize, loader_matches_gather,
                             loader_reset_and_early_free, loader_external_buffers,
                             concurrent_threads, forked_children_read_the_same,
                             loader_after_fork};
    const cxs_group g[] = {
        {"reader", 120, setup, teardown, tests, CXS_N(tests), fork_kind},
        {"compressed", 120, setup_compressed, teardown, ztests, CXS_N(ztests), fork_kind}};
    int failed = cxs_run_groups("reader", g, CXS_N(g), 0);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) return 3;
    return failed ? 1 : 0;
}
