/* Whole-utterance batches: the utterance sampler (every utterance once an
 * epoch, the budget never passed, equal batch counts on every rank, a new
 * grouping and order every epoch, exact and elastic resume, block mode,
 * long utterances) and the padded batches of the loader (against the
 * stored features and labels, on a compressed copy too, the same whatever
 * the thread count, after fork).
 *
 * usage: utt_test  (it writes its datasets with the library's writer:
 * testdata.h) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ctxshard.h"
#include "cxs_test.h"
#include "testdata.h"

#define BUDGET 9000

static char dir[256], packed[300], zpacked[300], seqpacked[300];
static cxs_dataset *ds;
static cxs_info info;

static void setup(void) {
    ck_assert_int_eq(cxs_dataset_open(packed, &ds, NULL), 0);
    cxs_dataset_info(ds, &info);
}
static void teardown(void) { cxs_dataset_close(ds); }

static cxs_utt_sampler *sampler(const cxs_dataset *d, uint64_t seed, uint32_t rank, uint32_t world,
                                uint32_t drop_last, uint64_t origin) {
    cxs_utt_sampler_opts o = {.kind = CXS_UTT_SHUFFLE, .seed = seed, .frame_budget = BUDGET,
                              .rank = rank, .world_size = world, .drop_last = drop_last,
                              .origin = origin};
    cxs_utt_sampler *s;
    cxs_diag dg;
    int rc = cxs_utt_sampler_create(d, &o, &s, &dg);
    if (rc) ck_abort_msg("%s", dg.message);
    return s;
}

static uint64_t len_of(uint64_t u) {
    cxs_utterance ut;
    EXPECT_INT(cxs_dataset_utterance(ds, u, &ut), 0);
    return ut.num_frames;
}

/* The global batch order of an epoch as utterance lists: bat[g] starts at
 * utts[start[g]]. */
typedef struct order {
    uint64_t n, *start, *utts;
} order;

static order global_order(const cxs_utt_sampler *s, uint64_t epoch) {
    order o;
    EXPECT_INT(cxs_utt_sampler_length(s, epoch, &o.n, NULL), 0);
    o.start = calloc(o.n + 1, 8);
    o.utts = malloc(info.num_utterances * 8);
    uint32_t cap = cxs_utt_sampler_max_batch(s), n;
    uint64_t at = 0, g;
    for (uint64_t p = 0; p < o.n; p++) {
        EXPECT_INT(cxs_utt_sampler_batch(s, epoch, p, o.utts + at, cap, &n, &g), 0);
        EXPECT_UINT(g, p);
        at += n;
        o.start[p + 1] = at;
    }
    return o;
}

static void order_free(order *o) {
    free(o->start);
    free(o->utts);
}

TEST(every_utterance_once_under_budget) {
    cxs_utt_sampler *s = sampler(ds, 3, 0, 1, 0, 0);
    order a = global_order(s, 0), b = global_order(s, 1);
    const uint64_t U = info.num_utterances;
    EXPECT_UINT(a.start[a.n], U);
    EXPECT_UINT(b.start[b.n], U);
    unsigned char *seen = calloc(U, 1);
    double real = 0, padded = 0;
    for (uint64_t g = 0; g < a.n; g++) {
        uint64_t tmax = 0, n = a.start[g + 1] - a.start[g];
        EXPECT_LOOP(n >= 1);
        for (uint64_t i = a.start[g]; i < a.start[g + 1]; i++) {
            uint64_t u = a.utts[i], T = len_of(u);
            EXPECT_LOOP(u < U && !seen[u]);
            seen[u] = 1;
            real += (double)T;
            if (T > tmax) tmax = T;
        }
        EXPECT_LOOP(n * tmax <= BUDGET);
        padded += (double)(n * tmax);
    }
    /* bucketing keeps the padding small */
    ck_assert(padded / real < 1.25);
    /* a new epoch: other groups, another order */
    ck_assert(a.n != b.n || memcmp(a.utts, b.utts, U * 8) != 0);
    /* the same (seed, epoch) again, from another sampler: the same order */
    cxs_utt_sampler *s2 = sampler(ds, 3, 0, 1, 0, 0);
    order c = global_order(s2, 0);
    EXPECT_UINT(c.n, a.n);
    ck_assert(memcmp(a.utts, c.utts, U * 8) == 0);
    ck_assert(memcmp(a.start, c.start, (a.n + 1) * 8) == 0);
    order_free(&a);
    order_free(&b);
    order_free(&c);
    free(seen);
    cxs_utt_sampler_free(s);
    cxs_utt_sampler_free(s2);
}
END_TEST

TEST(random_batching_pads_more) {
    cxs_utt_sampler_opts o = {.kind = CXS_UTT_SHUFFLE, .seed = 3, .frame_budget = BUDGET,
                              .buckets = 1};
    cxs_utt_sampler *r, *b = sampler(ds, 3, 0, 1, 0, 0);
    EXPECT_INT(cxs_utt_sampler_create(ds, &o, &r, NULL), 0);
    double pad[2];
    cxs_utt_sampler *ss[2] = {r, b};
    for (int k = 0; k < 2; k++) {
        order a = global_order(ss[k], 0);
        double real = 0, padded = 0;
        for (uint64_t g = 0; g < a.n; g++) {
            uint64_t tmax = 0;
            for (uint64_t i = a.start[g]; i < a.start[g + 1]; i++) {
                uint64_t T = len_of(a.utts[i]);
                real += (double)T;
                tmax = T > tmax ? T : tmax;
                EXPECT_LOOP(tmax * (i - a.start[g] + 1) <= BUDGET);
            }
            padded += (double)(tmax * (a.start[g + 1] - a.start[g]));
        }
        pad[k] = padded / real;
        order_free(&a);
    }
    ck_assert(pad[1] < pad[0]);
    cxs_utt_sampler_free(r);
    cxs_utt_sampler_free(b);
}
END_TEST

/* Every rank the same count; together the global order, padded by
 * wrapping (drop_last 0) or cut (drop_last 1). */
TEST(ranks_equal_and_disjoint) {
    for (uint32_t drop = 0; drop < 2; drop++)
        for (uint32_t W = 2; W <= 5; W++) {
            uint64_t N = 0, len0 = 0;
            unsigned char *seen = NULL;
            uint64_t covered = 0;
            for (uint32_t r = 0; r < W; r++) {
                cxs_utt_sampler *s = sampler(ds, 9, r, W, drop, 0);
                uint64_t n, len;
                EXPECT_INT(cxs_utt_sampler_length(s, 2, &n, &len), 0);
                if (r == 0) {
                    N = n, len0 = len;
                    seen = calloc(N, 1);
                    EXPECT_UINT(len, drop ? N / W : (N + W - 1) / W);
                }
                EXPECT_UINT(n, N);
                EXPECT_UINT(len, len0); /* no rank waits for a batch another lacks */
                uint64_t utts[4096], g;
                uint32_t m;
                for (uint64_t p = 0; p < len; p++) {
                    EXPECT_INT(cxs_utt_sampler_batch(s, 2, p, utts, 4096, &m, &g), 0);
                    uint64_t want = (r + p * W);
                    EXPECT_UINT(g, want % N);
                    if (want < N) {
                        EXPECT_LOOP(!seen[g]);
                        seen[g] = 1;
                        covered++;
                    }
                }
                EXPECT_INT(cxs_utt_sampler_batch(s, 2, len, utts, 4096, &m, &g), CXS_E_RANGE);
                cxs_utt_sampler_free(s);
            }
            EXPECT_UINT(covered, drop ? N / W * W : N);
            free(seen);
        }
}
END_TEST

/* The batches a loader hands out: utterances, global places, and bytes. */
typedef struct run {
    uint64_t n, *glob, nx;
    uint64_t xsum;
} run;

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static run load(const cxs_dataset *d, const cxs_utt_sampler *s, uint32_t threads, uint64_t epoch,
                uint64_t start, uint64_t stop_after) {
    cxs_utt_loader_opts o = {.threads = threads, .labels = 1};
    cxs_utt_loader *l;
    EXPECT_INT(cxs_utt_loader_create(d, s, &o, epoch, start, &l), 0);
    run r = {0, calloc(4096, 8), 0, 0xcbf29ce484222325ull};
    const cxs_utt_batch *b;
    cxs_info in;
    cxs_dataset_info(d, &in);
    while (r.n < stop_after) {
        EXPECT_INT(cxs_utt_loader_next(l, &b), 0);
        if (!b) break;
        EXPECT_UINT(b->index, start + r.n);
        r.glob[r.n++] = b->global;
        r.xsum = fnv(r.xsum, b->x, b->n * b->tmax * in.dim * 4);
        r.xsum = fnv(r.xsum, b->y, b->n * b->tmax * 8);
        r.xsum = fnv(r.xsum, b->lengths, b->n * 8);
        r.nx += b->n;
    }
    cxs_utt_loader_free(l);
    return r;
}

TEST(loader_batches_match_stored_data) {
    cxs_utt_sampler *s = sampler(ds, 5, 0, 1, 0, 0);
    cxs_utt_loader_opts o = {.threads = 3, .labels = 1};
    cxs_utt_loader *l;
    EXPECT_INT(cxs_utt_loader_create(ds, s, &o, 1, 0, &l), 0);
    const cxs_utt_batch *b;
    uint64_t seen = 0, batches = 0;
    for (;;) {
        EXPECT_INT(cxs_utt_loader_next(l, &b), 0);
        if (!b) break;
        EXPECT_UINT(b->index, batches);
        batches++;
        ck_assert_uint_le(b->n * b->tmax, BUDGET);
        uint64_t fr = 0, tm = 0;
        for (size_t i = 0; i < b->n; i++) {
            cxs_utterance ut;
            EXPECT_INT(cxs_dataset_utterance(ds, b->utts[i], &ut), 0);
            EXPECT_UINT((uint64_t)b->lengths[i], ut.num_frames);
            fr += ut.num_frames;
            tm = ut.num_frames > tm ? ut.num_frames : tm;
            const float *x = b->x + i * b->tmax * info.dim;
            ck_assert(memcmp(x, ut.features, ut.num_frames * info.dim * 4) == 0);
            for (uint64_t k = ut.num_frames * info.dim; k < b->tmax * info.dim; k++)
                EXPECT_LOOP(x[k] == 0.0f);
            int64_t *lab = malloc(ut.num_frames * 8 + 8);
            EXPECT_INT(cxs_dataset_labels(ds, ut.first_frame, ut.num_frames, lab), 0);
            const int64_t *y = b->y + i * b->tmax;
            ck_assert(memcmp(y, lab, ut.num_frames * 8) == 0);
            for (uint64_t k = ut.num_frames; k < b->tmax; k++) EXPECT_LOOP(y[k] == CXS_UTT_PAD_LABEL);
            free(lab);
        }
        EXPECT_UINT(b->frames, fr);
        EXPECT_UINT(b->tmax, tm);
        seen += b->n;
    }
    EXPECT_UINT(seen, info.num_utterances);
    uint64_t N;
    EXPECT_INT(cxs_utt_sampler_length(s, 1, &N, NULL), 0);
    EXPECT_UINT(batches, N);
    cxs_utt_loader_free(l);
    cxs_utt_sampler_free(s);
}
END_TEST

TEST(same_batches_any_threads_and_compressed) {
    cxs_utt_sampler *s = sampler(ds, 8, 0, 1, 0, 0);
    run a = load(ds, s, 1, 4, 0, UINT64_MAX), b = load(ds, s, 4, 4, 0, UINT64_MAX);
    EXPECT_UINT(a.n, b.n);
    ck_assert(memcmp(a.glob, b.glob, a.n * 8) == 0);
    EXPECT_UINT(a.xsum, b.xsum);
    cxs_dataset *z;
    ck_assert_int_eq(cxs_dataset_open(zpacked, &z, NULL), 0);
    cxs_info zi;
    cxs_dataset_info(z, &zi);
    EXPECT_UINT(zi.compression, CXS_COMPRESSION_ZSTD);
    cxs_utt_sampler *zs = sampler(z, 8, 0, 1, 0, 0);
    run c = load(z, zs, 3, 4, 0, UINT64_MAX);
    EXPECT_UINT(c.n, a.n);
    EXPECT_UINT(c.xsum, a.xsum); /* the same bytes, decoded */
    free(a.glob);
    free(b.glob);
    free(c.glob);
    cxs_utt_sampler_free(zs);
    cxs_dataset_close(z);
    cxs_utt_sampler_free(s);
}
END_TEST

TEST(exact_resume_mid_epoch) {
    cxs_utt_sampler *s = sampler(ds, 11, 0, 1, 0, 0);
    run full = load(ds, s, 2, 7, 0, UINT64_MAX);
    uint64_t k = full.n / 3;
    run tail = load(ds, s, 3, 7, k, UINT64_MAX);
    EXPECT_UINT(tail.n, full.n - k);
    ck_assert(memcmp(tail.glob, full.glob + k, tail.n * 8) == 0);
    /* reset inside a running loader: the same */
    cxs_utt_loader_opts o = {.threads = 2};
    cxs_utt_loader *l;
    EXPECT_INT(cxs_utt_loader_create(ds, s, &o, 7, 0, &l), 0);
    const cxs_utt_batch *b;
    EXPECT_INT(cxs_utt_loader_next(l, &b), 0);
    EXPECT_INT(cxs_utt_loader_reset(l, 7, k), 0);
    EXPECT_INT(cxs_utt_loader_next(l, &b), 0);
    EXPECT_UINT(b->global, full.glob[k]);
    EXPECT_UINT(b->index, k);
    EXPECT_INT(cxs_utt_loader_reset(l, 7, full.n + 1), CXS_E_INVALID);
    cxs_utt_loader_free(l);
    free(full.glob);
    free(tail.glob);
    cxs_utt_sampler_free(s);
}
END_TEST

/* Saved on 2 ranks at position p (global 2p), resumed on 3 ranks and on 1:
 * the global order goes on, nothing repeated or lost. */
TEST(elastic_resume) {
    cxs_utt_sampler *one = sampler(ds, 13, 0, 1, 0, 0);
    uint64_t N;
    EXPECT_INT(cxs_utt_sampler_length(one, 6, &N, NULL), 0);
    const uint64_t p = N / 5, G = 2 * p;
    unsigned char *seen = calloc(N, 1);
    for (uint32_t r = 0; r < 2; r++) {
        cxs_utt_sampler *s = sampler(ds, 13, r, 2, 0, 0);
        run a = load(ds, s, 2, 6, 0, p);
        EXPECT_UINT(a.n, p);
        for (uint64_t i = 0; i < a.n; i++) {
            EXPECT_LOOP(a.glob[i] < G && !seen[a.glob[i]]);
            seen[a.glob[i]] = 1;
        }
        free(a.glob);
        cxs_utt_sampler_free(s);
    }
    for (uint32_t M = 1; M <= 3; M += 2) {
        unsigned char *again = malloc(N);
        memcpy(again, seen, N);
        uint64_t lens[3];
        for (uint32_t r = 0; r < M; r++) {
            cxs_utt_sampler *s = sampler(ds, 13, r, M, 0, G);
            EXPECT_INT(cxs_utt_sampler_length(s, 6, NULL, &lens[r]), 0);
            EXPECT_UINT(lens[r], (N - G + M - 1) / M);
            run a = load(ds, s, 1 + r, 6, 0, UINT64_MAX);
            EXPECT_UINT(a.n, lens[r]);
            for (uint64_t i = 0; i < a.n; i++) {
                uint64_t want = G + r + i * M;
                EXPECT_UINT(a.glob[i], want % N);
                if (want < N) {
                    EXPECT_LOOP(!again[a.glob[i]]);
                    again[a.glob[i]] = 1;
                }
            }
            free(a.glob);
            cxs_utt_sampler_free(s);
        }
        for (uint64_t g = 0; g < N; g++) EXPECT_LOOP(again[g]);
        free(again);
    }
    free(seen);
    cxs_utt_sampler_free(one);
}
END_TEST

TEST(block_mode_reads_blocks_in_turn) {
    cxs_utt_sampler_opts o = {.kind = CXS_UTT_SHUFFLE, .seed = 2, .frame_budget = BUDGET,
                              .memory_bytes = info.feature_bytes / 4, .blocks = 2};
    cxs_utt_sampler *s;
    cxs_diag dg;
    EXPECT_INT(cxs_utt_sampler_create(ds, &o, &s, &dg), 0);
    order a = global_order(s, 1);
    const uint64_t U = info.num_utterances;
    unsigned char *seen = calloc(U, 1);
    for (uint64_t i = 0; i < U; i++) {
        EXPECT_LOOP(!seen[a.utts[i]]);
        seen[a.utts[i]] = 1;
    }
    for (uint64_t g = 0; g < a.n; g++) {
        uint64_t tmax = 0;
        for (uint64_t i = a.start[g]; i < a.start[g + 1]; i++)
            tmax = len_of(a.utts[i]) > tmax ? len_of(a.utts[i]) : tmax;
        EXPECT_LOOP(tmax * (a.start[g + 1] - a.start[g]) <= BUDGET);
    }
    /* The first sixth of the epoch's utterances come from one group of
     * two blocks (each a contiguous tenth of the data or so): few of the
     * dataset's 32 equal parts.  A full shuffle touches nearly all. */
    unsigned char part[32] = {0};
    uint32_t distinct = 0;
    for (uint64_t i = 0; i < U / 6; i++)
        if (!part[a.utts[i] * 32 / U]++) distinct++;
    ck_assert_uint_lt(distinct, 12);
    /* The loader in block mode (asking for the next group's blocks
     * ahead, or not): the sampler's batches, the same bytes. */
    run with = load(ds, s, 2, 1, 0, UINT64_MAX);
    EXPECT_UINT(with.n, a.n);
    for (uint64_t g = 0; g < a.n; g++) EXPECT_LOOP(with.glob[g] == g);
    cxs_utt_loader_opts lo = {.threads = 2, .labels = 1, .readahead = CXS_READAHEAD_OFF};
    cxs_utt_loader *l;
    EXPECT_INT(cxs_utt_loader_create(ds, s, &lo, 1, 0, &l), 0);
    const cxs_utt_batch *b;
    uint64_t xs = 0xcbf29ce484222325ull, nb = 0;
    while (!cxs_utt_loader_next(l, &b) && b) {
        xs = fnv(xs, b->x, b->n * b->tmax * info.dim * 4);
        xs = fnv(xs, b->y, b->n * b->tmax * 8);
        xs = fnv(xs, b->lengths, b->n * 8);
        nb++;
    }
    EXPECT_UINT(nb, a.n);
    EXPECT_UINT(xs, with.xsum);
    cxs_utt_loader_free(l);
    free(with.glob);
    /* too small a memory budget for the longest utterance */
    o.memory_bytes = 1000;
    cxs_utt_sampler *t;
    EXPECT_INT(cxs_utt_sampler_create(ds, &o, &t, &dg), CXS_E_RANGE);
    EXPECT_STR_HAS(dg.message, "memory budget");
    order_free(&a);
    free(seen);
    cxs_utt_sampler_free(s);
}
END_TEST

/* Bytes of a dataset's shard files in the page cache (mincore over a
 * mapping of each), or, with drop set, none after dropping them from the
 * cache (clean pages: the writer fsynced them); *total their size. */
static uint64_t shards_cached(const char *path, int drop, uint64_t *total) {
    DIR *dd = opendir(path);
    ck_assert_ptr_nonnull(dd);
    const long P = sysconf(_SC_PAGESIZE);
    uint64_t cached = 0, all = 0;
    struct dirent *e;
    while ((e = readdir(dd))) {
        if (strncmp(e->d_name, "shard-", 6) != 0) continue;
        char file[600];
        snprintf(file, sizeof file, "%s/%s", path, e->d_name);
        int fd = open(file, O_RDONLY);
        ck_assert_int_ge(fd, 0);
        struct stat st;
        ck_assert_int_eq(fstat(fd, &st), 0);
        all += (uint64_t)st.st_size;
        if (drop) {
            ck_assert_int_eq(posix_fadvise(fd, 0, st.st_size, POSIX_FADV_DONTNEED), 0);
        } else {
            size_t pages = (size_t)((st.st_size + P - 1) / P);
            void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
            ck_assert(m != MAP_FAILED);
            unsigned char *v = malloc(pages);
            ck_assert_int_eq(mincore(m, (size_t)st.st_size, v), 0);
            for (size_t i = 0; i < pages; i++) cached += (uint64_t)(v[i] & 1) * (uint64_t)P;
            free(v);
            munmap(m, (size_t)st.st_size);
        }
        close(fd);
    }
    closedir(dd);
    if (total) *total = all;
    return cached;
}

/* Dataset `name` (utts x 32 in one shard, seed) made in dir, at path,
 * dropped from the page cache and opened: a cold start; *total the
 * shards' bytes. */
static cxs_dataset *cold_open(const char *name, uint32_t utts, uint64_t seed, char path[320],
                              uint64_t *total, cxs_info *in) {
    snprintf(path, 320, "%s/%s", dir, name);
    td_opts to = {.utts = utts, .dim = 32, .seed = seed, .shard_size = 64u << 20};
    EXPECT_INT(td_make(path, &to), 0);
    shards_cached(path, 1, total);
    ck_assert_uint_lt(shards_cached(path, 0, NULL), *total / 8);
    cxs_dataset *d;
    EXPECT_INT(cxs_dataset_open(path, &d, NULL), 0);
    cxs_dataset_info(d, in);
    return d;
}

/* Block mode keeps to its budget in the page cache: each group's blocks
 * go once the consumer is past them (the loader before read every block
 * in and let none go: the whole dataset ended cached).  One shard of 25
 * MB, larger than the kernel's read-ahead of an open (8 MB on the
 * machines this was written on), so that an open does not read it all. */
TEST(block_mode_lets_groups_go) {
    char big[320];
    uint64_t total;
    cxs_info bi;
    cxs_dataset *d = cold_open("big", 160, 9, big, &total, &bi);
    const uint64_t budget = bi.feature_bytes / 8;
    cxs_utt_sampler_opts o = {.kind = CXS_UTT_SHUFFLE, .seed = 6, .frame_budget = 4 * BUDGET,
                              .memory_bytes = budget, .blocks = 2};
    cxs_utt_sampler *s;
    cxs_diag dg;
    ck_assert_msg(cxs_utt_sampler_create(d, &o, &s, &dg) == 0, "%s", dg.message);
    cxs_utt_loader_opts lo = {.threads = 2};
    cxs_utt_loader *l;
    EXPECT_INT(cxs_utt_loader_create(d, s, &lo, 0, 0, &l), 0);
    const cxs_utt_batch *b;
    uint64_t nb = 0, len;
    while (!cxs_utt_loader_next(l, &b) && b) nb++;
    EXPECT_INT(cxs_utt_sampler_length(s, 0, NULL, &len), 0);
    EXPECT_UINT(nb, len);
    /* what is left: the last group served and the one before it (a group
     * is blocks x budget / (blocks + 1)), the shard's other sections, a
     * page at each block's edges; with room for a busy machine's timing
     * (a page a worker faulted before the group's read-ahead reached it),
     * half of the dataset, which the loader before ended with all of */
    uint64_t end = shards_cached(big, 0, NULL);
    ck_assert_msg(end <= 4 * budget, "%llu bytes cached after the epoch, budget %llu of %llu",
                  (unsigned long long)end, (unsigned long long)budget, (unsigned long long)total);
    cxs_utt_loader_free(l);
    cxs_utt_sampler_free(s);
    cxs_dataset_close(d);
}
END_TEST

/* The frame loader in block order over a dataset within its memory
 * budget (no more blocks than a round draws on) leaves it in the page
 * cache after the epoch: the next epoch reads every block again, and the
 * budget holds them all (the loader before dropped every block it had
 * read when it was freed, and each epoch went to the disk again: checked,
 * 73,728 bytes of the 6,183,936 of features cached). */
TEST(block_order_keeps_a_dataset_within_its_budget) {
    char small[320];
    uint64_t total;
    cxs_info si;
    cxs_dataset *d = cold_open("within", 40, 11, small, &total, &si);
    cxs_sampler_opts so;
    cxs_sampler_opts_init(&so);
    so.kind = CXS_SAMPLER_BLOCK;
    so.seed = 3;
    so.memory_bytes = 2 * si.feature_bytes;
    cxs_sampler *s;
    cxs_diag dg;
    ck_assert_msg(cxs_sampler_create_ex(d, &so, &s, &dg) == 0, "%s", dg.message);
    cxs_loader_opts lo;
    cxs_loader_opts_init(&lo);
    lo.k = 2, lo.batch_size = 64, lo.threads = 2;
    cxs_loader *l;
    EXPECT_INT(cxs_loader_create(d, s, &lo, 0, 0, &l), 0);
    const cxs_batch *b;
    uint64_t n = 0;
    while (!cxs_loader_next(l, &b) && b && b->n) n += b->n;
    EXPECT_UINT(n, si.num_frames);
    cxs_loader_free(l);
    const uint64_t end = shards_cached(small, 0, NULL);
    ck_assert_msg(end >= si.feature_bytes, "%llu bytes cached after the epoch, features %llu",
                  (unsigned long long)end, (unsigned long long)si.feature_bytes);
    cxs_sampler_free(s);
    cxs_dataset_close(d);
}
END_TEST

TEST(long_utterances_refused_or_alone) {
    const uint64_t budget = info.max_length - 1;
    cxs_utt_sampler_opts o = {.kind = CXS_UTT_SHUFFLE, .seed = 1, .frame_budget = budget};
    cxs_utt_sampler *s;
    cxs_diag dg;
    EXPECT_INT(cxs_utt_sampler_create(ds, &o, &s, &dg), CXS_E_RANGE);
    EXPECT_STR_HAS(dg.message, "longer than frame_budget");
    EXPECT_STR_HAS(dg.message, "long_alone");
    o.long_alone = 1;
    EXPECT_INT(cxs_utt_sampler_create(ds, &o, &s, &dg), 0);
    EXPECT_UINT(cxs_utt_sampler_max_frames(s), info.max_length);
    order a = global_order(s, 0);
    int alone = 0;
    for (uint64_t g = 0; g < a.n; g++) {
        uint64_t n = a.start[g + 1] - a.start[g], tmax = 0;
        for (uint64_t i = a.start[g]; i < a.start[g + 1]; i++)
            tmax = len_of(a.utts[i]) > tmax ? len_of(a.utts[i]) : tmax;
        if (tmax > budget) {
            EXPECT_UINT(n, 1);
            alone++;
        } else {
            EXPECT_LOOP(n * tmax <= budget);
        }
    }
    ck_assert_int_ge(alone, 1);
    run r = load(ds, s, 2, 0, 0, UINT64_MAX); /* its buffers hold the long one */
    EXPECT_UINT(r.n, a.n);
    free(r.glob);
    order_free(&a);
    cxs_utt_sampler_free(s);
    o.frame_budget = 0;
    EXPECT_INT(cxs_utt_sampler_create(ds, &o, &s, &dg), CXS_E_INVALID);
    EXPECT_STR_HAS(dg.message, "frame_budget");
}
END_TEST

TEST(pad_batch_normalises) {
    uint64_t utts[3] = {4, 0, 7}, T[3];
    uint64_t tmax = 0;
    for (int i = 0; i < 3; i++) T[i] = len_of(utts[i]), tmax = T[i] > tmax ? T[i] : tmax;
    float *x = malloc(3 * tmax * info.dim * 4);
    int64_t len[3];
    EXPECT_INT(cxs_dataset_pad_batch(ds, utts, 3, 0, CXS_PAD_PER_UTTERANCE, NULL, x, len, NULL), 0);
    for (int i = 0; i < 3; i++) {
        EXPECT_UINT((uint64_t)len[i], T[i]);
        for (uint32_t d = 0; d < info.dim; d++) { /* mean 0, variance 1 per dimension */
            double m = 0, q = 0;
            for (uint64_t t = 0; t < T[i]; t++) m += x[(i * tmax + t) * info.dim + d];
            m /= (double)T[i];
            for (uint64_t t = 0; t < T[i]; t++) {
                double e = x[(i * tmax + t) * info.dim + d] - m;
                q += e * e;
            }
            ck_assert(m < 1e-4 && m > -1e-4);
            ck_assert(q / (double)T[i] > 0.999 && q / (double)T[i] < 1.001);
        }
        for (uint64_t t = T[i]; t < tmax; t++)
            for (uint32_t d = 0; d < info.dim; d++) EXPECT_LOOP(x[(i * tmax + t) * info.dim + d] == 0);
    }
    /* the stored statistics: the frame gather's values, row for row */
    EXPECT_INT(cxs_dataset_pad_batch(ds, utts, 3, tmax, CXS_GATHER_NORMALIZE, NULL, x, len, NULL), 0);
    cxs_utterance ut;
    EXPECT_INT(cxs_dataset_utterance(ds, 0, &ut), 0);
    float *w = malloc(ut.num_frames * info.dim * 4);
    uint64_t *fr = malloc(ut.num_frames * 8);
    for (uint64_t t = 0; t < ut.num_frames; t++) fr[t] = ut.first_frame + t;
    EXPECT_INT(cxs_dataset_gather(ds, fr, ut.num_frames, 0, CXS_GATHER_NORMALIZE, 1, w, NULL), 0);
    ck_assert(memcmp(w, x + tmax * info.dim, ut.num_frames * info.dim * 4) == 0);
    EXPECT_INT(cxs_dataset_pad_batch(ds, utts, 3, tmax - 1, 0, NULL, x, len, NULL), CXS_E_RANGE);
    EXPECT_INT(cxs_dataset_pad_batch(ds, utts, 3, tmax, 4, NULL, x, len, NULL), CXS_E_INVALID);
    free(w);
    free(fr);
    free(x);
}
END_TEST

TEST(fork_child_goes_on) {
    /* The child starts workers of its own: left out with CXS_TEST_NO_FORK
     * set (the sanitizers' allocators are not fork-safe while threads run,
     * and ThreadSanitizer cannot follow a multi-threaded fork at all). */
    cxs_utt_sampler *s = sampler(ds, 21, 0, 1, 0, 0);
    run full = load(ds, s, 2, 0, 0, UINT64_MAX);
    cxs_utt_loader_opts o = {.threads = 3};
    cxs_utt_loader *l;
    EXPECT_INT(cxs_utt_loader_create(ds, s, &o, 0, 0, &l), 0);
    const cxs_utt_batch *b;
    EXPECT_INT(cxs_utt_loader_next(l, &b), 0);
    EXPECT_INT(cxs_utt_loader_next(l, &b), 0);
    pid_t pid = fork();
    if (pid == 0) {
        uint64_t i = 2;
        int ok = 1;
        for (;; i++) {
            if (cxs_utt_loader_next(l, &b)) _exit(2);
            if (!b) break;
            if (b->global != full.glob[i]) ok = 0;
        }
        cxs_utt_loader_free(l);
        cxs_utt_sampler_free(s); /* the child's own: a leak checker follows it */
        free(full.glob);
        _exit(ok && i == full.n ? 0 : 1);
    }
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert(WIFEXITED(st));
    EXPECT_INT(WEXITSTATUS(st), 0);
    EXPECT_INT(cxs_utt_loader_next(l, &b), 0);
    EXPECT_UINT(b->global, full.glob[2]);
    cxs_utt_loader_free(l);
    free(full.glob);
    cxs_utt_sampler_free(s);
}
END_TEST

/* Label sequences as CTC targets: cxs_dataset_pad_targets and the
 * loader's targets equal cxs_dataset_label_seq, padded with
 * CXS_UTT_PAD_LABEL; asked of a dataset without them, refused by name. */
TEST(targets_are_the_label_sequences) {
    cxs_dataset *q;
    ck_assert_int_eq(cxs_dataset_open(seqpacked, &q, NULL), 0);
    cxs_info qi;
    cxs_dataset_info(q, &qi);
    ck_assert(qi.label_seqs);
    const uint64_t utts[3] = {5, 0, 17};
    uint64_t L = qi.max_seq_length;
    int64_t *t = malloc(3 * L * sizeof *t), tl[3], *ref = malloc(L * sizeof *ref);
    EXPECT_INT(cxs_dataset_pad_targets(q, utts, 3, L, t, tl), 0);
    for (int i = 0; i < 3; i++) {
        uint32_t n;
        EXPECT_INT(cxs_dataset_label_seq(q, utts[i], ref, (uint32_t)L, &n), 0);
        EXPECT_INT(tl[i], n);
        for (uint64_t j = 0; j < L; j++) EXPECT_INT(t[i * L + j], j < n ? ref[j] : CXS_UTT_PAD_LABEL);
    }
    EXPECT_INT(cxs_dataset_pad_targets(q, utts, 3, 1, t, tl), CXS_E_RANGE); /* lmax too short */
    EXPECT_INT(cxs_dataset_pad_targets(ds, utts, 3, L, t, tl), CXS_E_NO_SEQUENCES);
    cxs_utt_sampler *s = sampler(q, 6, 0, 1, 0, 0);
    cxs_utt_loader_opts o = {.threads = 2, .targets = 1};
    cxs_utt_loader *l;
    EXPECT_INT(cxs_utt_loader_create(q, s, &o, 0, 0, &l), 0);
    const cxs_utt_batch *b;
    uint64_t seen = 0;
    while (!cxs_utt_loader_next(l, &b) && b) {
        ck_assert(b->targets && b->target_lengths && !b->y);
        uint64_t longest = 0;
        for (size_t i = 0; i < b->n; i++) {
            uint32_t n;
            EXPECT_INT(cxs_dataset_label_seq(q, b->utts[i], ref, (uint32_t)L, &n), 0);
            EXPECT_INT(b->target_lengths[i], n);
            if (n > longest) longest = n;
            for (uint64_t j = 0; j < b->lmax; j++)
                EXPECT_INT(b->targets[i * b->lmax + j], j < n ? ref[j] : CXS_UTT_PAD_LABEL);
        }
        EXPECT_UINT(b->lmax, longest);
        seen += b->n;
    }
    EXPECT_UINT(seen, qi.num_utterances);
    cxs_utt_loader_free(l);
    /* frame labels asked of sequences only; targets of a dataset without them */
    cxs_diag d = {0};
    o.labels = 1;
    EXPECT_INT(cxs_utt_loader_create_ex(q, s, &o, 0, 0, &l, &d), CXS_E_NO_LABELS);
    ck_assert(strstr(d.message, "label sequences only"));
    cxs_utt_sampler_free(s);
    s = sampler(ds, 6, 0, 1, 0, 0);
    o.labels = 0;
    EXPECT_INT(cxs_utt_loader_create_ex(ds, s, &o, 0, 0, &l, &d), CXS_E_NO_SEQUENCES);
    ck_assert(strstr(d.message, "--transcripts sequence"));
    o.targets = 0, o.threads = 300;
    EXPECT_INT(cxs_utt_loader_create_ex(ds, s, &o, 0, 0, &l, &d), CXS_E_INVALID);
    ck_assert(strstr(d.message, "threads 300"));
    cxs_utt_sampler_free(s);
    free(t);
    free(ref);
    cxs_dataset_close(q);
}
END_TEST

static int fork_kind(const TTest *t) {
    return t == fork_child_goes_on ? CXS_FORK_THREADS : CXS_FORK_NONE;
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/cxs-utt-XXXXXX");
    if (!mkdtemp(dir)) return 3;
    snprintf(packed, sizeof packed, "%s/packed", dir);
    snprintf(zpacked, sizeof zpacked, "%s/zpacked", dir);
    snprintf(seqpacked, sizeof seqpacked, "%s/seqpacked", dir);
    td_opts o = {.utts = 150, .dim = 12, .seed = 4, .shard_size = 2u << 20};
    if (td_make(packed, &o)) return 3;
    o.compression = CXS_COMPRESSION_ZSTD, o.chunk_size = 64u << 10;
    if (td_make(zpacked, &o)) return 3;
    td_opts q = {.utts = 40, .dim = 6, .seed = 5, .shard_size = 256u << 10,
                 .label_seqs = CXS_SEQ_ONLY};
    if (td_make(seqpacked, &q)) return 3;
    char cmd[400];
    const TTest *tests[] = {every_utterance_once_under_budget, random_batching_pads_more,
                            ranks_equal_and_disjoint, loader_batches_match_stored_data,
                            same_batches_any_threads_and_compressed, exact_resume_mid_epoch,
                            elastic_resume, block_mode_reads_blocks_in_turn,
                            block_mode_lets_groups_go,
                            block_order_keeps_a_dataset_within_its_budget,
                            long_utterances_refused_or_alone, pad_batch_normalises,
                            fork_child_goes_on, targets_are_the_label_sequences};
    const cxs_group g[] = {{"utt", 240, setup, teardown, tests, CXS_N(tests), fork_kind}};
    int failed = cxs_run_groups("utt", g, CXS_N(g), 0);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) return 3;
    return failed ? 1 : 0;
}
