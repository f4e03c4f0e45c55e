/* The block sampler and the loader's reading ahead: every frame exactly
 * once per epoch, ranks disjoint and equal, the same order whatever the
 * thread count, exact and elastic resume, the memory budget's refusal, and
 * the loader (with its helper thread reading blocks ahead and dropping
 * them, or asking for the pages of the next batches) against gather.
 *
 * usage: blocks_test CTXSHARD_EXE  (it synthesises and packs its dataset) */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ctxshard.h"
#include "cxs_test.h"

static char dir[256], packed[300];
static cxs_dataset *ds;
static cxs_info info;
static uint64_t row_bytes, mem; /* a budget of about 1/5 of the features */

static void setup(void) {
    ck_assert_int_eq(cxs_dataset_open(packed, &ds, NULL), 0);
    cxs_dataset_info(ds, &info);
    row_bytes = (uint64_t)info.dim * 4;
    mem = info.feature_bytes / 5;
}
static void teardown(void) { cxs_dataset_close(ds); }

static cxs_sampler *block_sampler(uint64_t seed, uint32_t rank, uint32_t world, uint32_t drop_last,
                                  uint64_t origin) {
    cxs_sampler_opts o = {.kind = CXS_SAMPLER_BLOCK, .seed = seed, .rank = rank,
                          .world_size = world, .drop_last = drop_last, .origin = origin,
                          .memory_bytes = mem, .blocks = 4};
    cxs_sampler *s;
    cxs_diag d;
    ck_assert_int_eq(cxs_sampler_create_ex(ds, &o, &s, &d), 0);
    return s;
}

static uint64_t *epoch_of(const cxs_sampler *s, uint64_t epoch) {
    uint64_t n = cxs_sampler_length(s), *f = malloc((n + 1) * sizeof *f);
    EXPECT_INT(cxs_sampler_get(s, epoch, 0, n, f), 0);
    return f;
}

TEST(every_frame_once_and_blockwise) {
    cxs_sampler *s = block_sampler(7, 0, 1, 0, 0);
    const uint64_t F = info.num_frames;
    ck_assert_uint_eq(cxs_sampler_length(s), F);
    uint64_t nb = cxs_sampler_num_blocks(s, 3);
    ck_assert_uint_gt(nb, 8); /* the budget cuts the data into many blocks */
    ck_assert_uint_eq(cxs_sampler_block_bytes(s), mem / 5);
    uint64_t *a = epoch_of(s, 3), *b = epoch_of(s, 4);
    unsigned char *seen = calloc(F, 1);
    for (uint64_t i = 0; i < F; i++) {
        EXPECT_LOOP(a[i] < F && !seen[a[i]]);
        seen[a[i]] = 1;
    }
    ck_assert(memcmp(a, b, F * 8) != 0); /* another epoch, another order */
    /* Blockwise: any window of one block's worth of positions draws on
     * few distinct places of the data (a full shuffle would touch nearly
     * every block); measured by distinct 1/64ths of the frame range. */
    const uint64_t win = (mem / 5) / row_bytes / 2, part = F / 64 + 1;
    unsigned char used[64] = {0};
    uint32_t distinct = 0;
    for (uint64_t i = F / 2; i < F / 2 + win; i++)
        if (!used[a[i] / part]++) distinct++;
    ck_assert_uint_lt(distinct, 40);
    /* but a batch mixes several blocks: 256 consecutive positions come
     * from more than one utterance's neighbourhood */
    memset(used, 0, sizeof used);
    distinct = 0;
    for (uint64_t i = F / 2; i < F / 2 + 256; i++)
        if (!used[a[i] / part]++) distinct++;
    ck_assert_uint_gt(distinct, 1);
    /* Stateless: any slice equals the same positions of the whole epoch. */
    uint64_t f[100];
    EXPECT_INT(cxs_sampler_get(s, 3, 12345, 100, f), 0);
    ck_assert(memcmp(f, a + 12345, sizeof f) == 0);
    /* The same (seed, epoch) from another sampler object: the same order. */
    cxs_sampler *s2 = block_sampler(7, 0, 1, 0, 0);
    uint64_t *c = epoch_of(s2, 3);
    ck_assert(memcmp(a, c, F * 8) == 0);
    free(a);
    free(b);
    free(c);
    free(seen);
    cxs_sampler_free(s);
    cxs_sampler_free(s2);
}
END_TEST_

/* The end of an epoch draws on as many blocks as the rest of it: its last
 * 0.5% of positions (within the final round) come from the last R = 4
 * blocks, not from one.  Counted in utterances: a block holds about
 * three. */
TEST(epoch_ends_on_several_blocks) {
    const uint64_t F = info.num_frames, tail = F / 200;
    for (uint64_t seed = 1; seed <= 4; seed++) {
        cxs_sampler *s = block_sampler(seed, 0, 1, 0, 0);
        uint64_t *f = epoch_of(s, 0);
        unsigned char *utt = calloc(info.num_utterances, 1);
        uint32_t distinct = 0;
        for (uint64_t i = F - tail; i < F; i++) {
            uint64_t u, t;
            EXPECT_INT(cxs_dataset_locate(ds, f[i], &u, &t), 0);
            if (!utt[u]++) distinct++;
        }
        ck_assert_uint_ge(distinct, 8); /* ending on one block: 6 */
        free(utt);
        free(f);
        cxs_sampler_free(s);
    }
}
END_TEST_

/* A child forked right after the loader was made (its first batches in
 * flight, the first one shared by the workers, the helper thread waiting
 * for them) serves the whole epoch: nothing of the parent's batches in
 * flight, nor a schedule lock a parent thread held, is inherited.  Each
 * child has 20 s (a hang is a SIGALRM). */
TEST(fork_during_first_batches) {
    for (uint64_t it = 0; it < 12; it++) {
        cxs_sampler *s = block_sampler(it, 0, 1, 0, 0);
        cxs_loader_opts lo = {.k = 5, .batch_size = 1024, .threads = 2, .labels = 1};
        cxs_loader *l;
        EXPECT_INT(cxs_loader_create(ds, s, &lo, 0, 0, &l), 0);
        pid_t pid = fork();
        if (pid == 0) {
            alarm(20);
            const cxs_batch *b;
            uint64_t n = 0;
            int rc;
            while (!(rc = cxs_loader_next(l, &b)) && b) n += b->n;
            _exit(rc || n != cxs_sampler_length(s) ? 1 : 0);
        }
        int st;
        ck_assert(waitpid(pid, &st, 0) == pid);
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %llu: %s %d",
                      (unsigned long long)it, WIFSIGNALED(st) ? "signal" : "exit",
                      WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
        cxs_loader_free(l);
        cxs_sampler_free(s);
    }
}
END_TEST_

TEST(ranks_disjoint_and_equal) {
    const uint64_t F = info.num_frames;
    for (uint32_t drop = 0; drop < 2; drop++) {
        unsigned char *seen = calloc(F, 1);
        uint64_t len[3], total = 0;
        for (uint32_t r = 0; r < 3; r++) {
            cxs_sampler *s = block_sampler(5, r, 3, drop, 0);
            len[r] = cxs_sampler_length(s);
            uint64_t *f = epoch_of(s, 1);
            for (uint64_t i = 0; i < len[r]; i++) {
                /* with padding, only the wrapped-around tail repeats */
                if (!drop && seen[f[i]]) continue;
                EXPECT_LOOP(!seen[f[i]]);
                seen[f[i]] = 1;
                total++;
            }
            free(f);
            cxs_sampler_free(s);
        }
        ck_assert(len[0] == len[1] && len[1] == len[2]);
        ck_assert_uint_eq(total, drop ? F / 3 * 3 : F);
        ck_assert_uint_eq(len[0], drop ? F / 3 : (F + 2) / 3);
        free(seen);
    }
}
END_TEST_

TEST(budget_refused) {
    cxs_sampler_opts o = {.kind = CXS_SAMPLER_BLOCK, .blocks = 4};
    cxs_sampler *s;
    cxs_diag d;
    EXPECT_INT(cxs_sampler_create_ex(ds, &o, &s, &d), CXS_E_INVALID); /* no budget */
    EXPECT_STR_HAS(d.message, "memory_bytes");
    /* five blocks of less than the longest utterance */
    o.memory_bytes = 5 * (info.max_length * row_bytes) - 1;
    EXPECT_INT(cxs_sampler_create_ex(ds, &o, &s, &d), CXS_E_RANGE);
    char want[64];
    snprintf(want, sizeof want, "%llu bytes", (unsigned long long)o.memory_bytes);
    EXPECT_STR_HAS(d.message, want);
    snprintf(want, sizeof want, "%llu frames", (unsigned long long)info.max_length);
    EXPECT_STR_HAS(d.message, "longest utterance");
    EXPECT_STR_HAS(d.message, want);
    EXPECT_INT(cxs_sampler_create(ds, &o, &s), CXS_E_RANGE);
    o.blocks = 2000;
    o.memory_bytes = mem;
    EXPECT_INT(cxs_sampler_create_ex(ds, &o, &s, &d), CXS_E_INVALID);
    o.blocks = 4;
    o.origin = info.num_frames + 1;
    EXPECT_INT(cxs_sampler_create_ex(ds, &o, &s, &d), CXS_E_INVALID);
    EXPECT_STR_HAS(d.message, "origin");
    /* a budget of just the longest utterance per block works: one
     * utterance a block */
    o.origin = 0;
    o.memory_bytes = 5 * (info.max_length + info.guard) * row_bytes;
    EXPECT_INT(cxs_sampler_create_ex(ds, &o, &s, &d), 0);
    ck_assert_uint_ge(cxs_sampler_num_blocks(s, 0), info.num_utterances / 2);
    uint64_t *f = epoch_of(s, 0);
    unsigned char *seen = calloc(info.num_frames, 1);
    for (uint64_t i = 0; i < info.num_frames; i++) {
        EXPECT_LOOP(!seen[f[i]]);
        seen[f[i]] = 1;
    }
    free(seen);
    free(f);
    cxs_sampler_free(s);
}
END_TEST_

/* One epoch through a loader: frames in order, windows checked against
 * gather every few batches. */
static uint64_t *run_loader(const cxs_sampler *s, uint64_t epoch, uint64_t start, uint32_t threads,
                            uint32_t readahead, uint64_t *n) {
    const uint32_t k = 6, B = 257, W = (2 * k + 1) * info.dim;
    cxs_loader_opts o = {.k = k, .batch_size = B, .threads = threads, .labels = 1,
                         .readahead = readahead};
    cxs_loader *l;
    EXPECT_INT(cxs_loader_create(ds, s, &o, epoch, start, &l), 0);
    uint64_t len = cxs_sampler_length(s), *f = malloc((len + 1) * sizeof *f);
    float *x = malloc((size_t)B * W * 4);
    int64_t y[257];
    const cxs_batch *b;
    *n = 0;
    while (cxs_loader_next(l, &b) == 0 && b) {
        EXPECT_LOOP(b->position == start + *n);
        memcpy(f + *n, b->frames, b->n * 8);
        if (b->index % 7 == 0) {
            EXPECT_INT(cxs_dataset_gather(ds, b->frames, b->n, k, 0, 1, x, y), 0);
            ck_assert(memcmp(x, b->x, b->n * W * 4) == 0 && memcmp(y, b->y, b->n * 8) == 0);
        }
        *n += b->n;
    }
    free(x);
    cxs_loader_free(l);
    return f;
}

TEST(loader_same_order_any_threads) {
    /* the helper reads blocks ahead and drops them while 1, 2 or 4
     * workers fill batches: the order is the sampler's, every time */
    cxs_sampler *s = block_sampler(9, 0, 1, 0, 0);
    uint64_t *want = epoch_of(s, 2), n;
    const uint32_t threads[] = {1, 2, 4};
    for (int t = 0; t < 3; t++)
        for (uint32_t ra = 0; ra <= CXS_READAHEAD_OFF; ra++) {
            uint64_t *f = run_loader(s, 2, 0, threads[t], ra, &n);
            ck_assert_uint_eq(n, info.num_frames);
            ck_assert(memcmp(f, want, n * 8) == 0);
            free(f);
        }
    free(want);
    cxs_sampler_free(s);
    /* the full shuffle with its page requests: the same too */
    cxs_sampler_opts so = {.kind = CXS_SAMPLER_SHUFFLE, .seed = 4};
    ck_assert_int_eq(cxs_sampler_create(ds, &so, &s), 0);
    want = epoch_of(s, 1);
    uint64_t *f = run_loader(s, 1, 0, 2, 0, &n);
    ck_assert(n == info.num_frames && memcmp(f, want, n * 8) == 0);
    free(f);
    free(want);
    cxs_sampler_free(s);
}
END_TEST_

TEST(exact_resume_mid_epoch) {
    cxs_sampler *s = block_sampler(3, 0, 1, 0, 0);
    uint64_t *want = epoch_of(s, 5), n;
    const uint64_t at = info.num_frames / 2 + 11; /* not on a batch boundary */
    uint64_t *f = run_loader(s, 5, at, 2, 0, &n);
    ck_assert_uint_eq(n, info.num_frames - at);
    ck_assert(memcmp(f, want + at, n * 8) == 0);
    free(f);
    /* a reset inside a running loader to another epoch and position */
    const uint32_t B = 100;
    cxs_loader_opts o = {.k = 3, .batch_size = B, .threads = 2};
    cxs_loader *l;
    EXPECT_INT(cxs_loader_create(ds, s, &o, 1, 0, &l), 0);
    const cxs_batch *b;
    for (int i = 0; i < 5; i++) EXPECT_INT(cxs_loader_next(l, &b), 0);
    EXPECT_INT(cxs_loader_reset(l, 5, at), 0);
    EXPECT_INT(cxs_loader_next(l, &b), 0);
    ck_assert(b->position == at && memcmp(b->frames, want + at, b->n * 8) == 0);
    cxs_loader_free(l);
    free(want);
    cxs_sampler_free(s);
}
END_TEST_

/* Elastic resume: N ranks stop at local position p (global G = p*N); M
 * ranks resume from origin G.  Together: the global order, nothing
 * repeated or lost. */
static void elastic(uint32_t kind, uint32_t N, uint32_t M) {
    const uint64_t F = info.num_frames;
    cxs_sampler_opts o = {.kind = kind, .seed = 21, .memory_bytes = mem, .blocks = 4, .drop_last = 0};
    cxs_sampler *g;
    ck_assert_int_eq(cxs_sampler_create(ds, &o, &g), 0);
    uint64_t *global = epoch_of(g, 6);
    cxs_sampler_free(g);
    uint64_t *got = malloc(F * 2 * sizeof *got);
    const uint64_t p = F / N / 3 + 5, G = p * N;
    for (uint32_t r = 0; r < N; r++) { /* the first run, up to p */
        o.rank = r, o.world_size = N;
        cxs_sampler *s;
        ck_assert_int_eq(cxs_sampler_create(ds, &o, &s), 0);
        uint64_t n, *f = run_loader(s, 6, 0, 2, 0, &n);
        for (uint64_t i = 0; i < p; i++) got[r + i * N] = f[i];
        free(f);
        cxs_sampler_free(s);
    }
    uint64_t len = 0;
    for (uint32_t r = 0; r < M; r++) { /* the resumed run */
        o.rank = r, o.world_size = M, o.origin = G;
        cxs_sampler *s;
        ck_assert_int_eq(cxs_sampler_create(ds, &o, &s), 0);
        len = cxs_sampler_length(s);
        ck_assert_uint_eq(len, (F - G + M - 1) / M);
        uint64_t n, *f = run_loader(s, 6, 0, 1 + r % 3, 0, &n);
        ck_assert_uint_eq(n, len);
        for (uint64_t i = 0; i < n; i++) got[G + r + i * M] = f[i];
        free(f);
        cxs_sampler_free(s);
    }
    /* the global order, then the padding from its beginning */
    ck_assert(memcmp(got, global, F * 8) == 0);
    for (uint64_t i = F; i < G + len * M; i++) EXPECT_LOOP(got[i] == global[i - F]);
    free(got);
    free(global);
}

TEST(elastic_resume) {
    elastic(CXS_SAMPLER_BLOCK, 2, 3);
    elastic(CXS_SAMPLER_BLOCK, 2, 1);
    elastic(CXS_SAMPLER_SHUFFLE, 2, 3);
    elastic(CXS_SAMPLER_SHUFFLE, 3, 1);
}
END_TEST_

static int fork_kind(const TTest *t) {
    return t == fork_during_first_batches ? CXS_FORK_THREADS : CXS_FORK_NONE;
}

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    snprintf(dir, sizeof dir, "/tmp/cxs-blocks-XXXXXX");
    if (!mkdtemp(dir)) return 3;
    snprintf(packed, sizeof packed, "%s/packed", dir);
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "'%s' synth '%s/raw' --utts 90 --seed 5 --quiet && "
             "'%s' pack '%s/raw' '%s' --guard 8 --shard-size 2M --quiet",
             argv[1], dir, argv[1], dir, packed);
    if (system(cmd) != 0) return 3;
    const TTest *tests[] = {every_frame_once_and_blockwise, epoch_ends_on_several_blocks,
                            fork_during_first_batches,
                            ranks_disjoint_and_equal,
                            budget_refused, loader_same_order_any_threads,
                            exact_resume_mid_epoch, elastic_resume};
    const cxs_group g[] = {{"blocks", 240, setup, teardown, tests, CXS_N(tests), fork_kind}};
    int failed = cxs_run_groups("blocks", g, CXS_N(g), 0);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) return 3;
    return failed ? 1 : 0;
}
