/* A shard truncated under a running loader: the batch in flight ends in
 * CXS_E_TRUNCATED with a message naming the shard, and the process goes on
 * (a SIGBUS killed it before).  Frame loader (plain and compressed), the
 * utterance loader and the gather; and a SIGBUS that is not the library's
 * still reaches the handler that was there before.  A byte flipped in the
 * features (format 1.3's block sums): verify, warm and the block sampler's
 * loader name the utterance; without block sums verify says it cannot.
 *
 * usage: damage_test  (it writes its datasets with the library's writer:
 * testdata.h) */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ctxshard.h"
#include "cxs_test.h"
#include "testdata.h"

static char dir[256];

/* A fresh dataset of its own for each test (it is damaged). */
static cxs_dataset *make(const char *name, uint32_t compression, char *shard, size_t cap) {
    char out[400];
    snprintf(out, sizeof out, "%s/%s", dir, name);
    td_opts o = {.utts = 48, .dim = 8, .seed = 11, .compression = compression,
                 .chunk_size = compression ? 65536 : 0};
    ck_assert_int_eq(td_make(out, &o), 0);
    snprintf(shard, cap, "%s/shard-000000.cxs", out);
    cxs_dataset *ds;
    cxs_diag d;
    ck_assert_msg(cxs_dataset_open(out, &ds, &d) == 0, "%s", d.message);
    return ds;
}

/* Take batches until one fails; the failure must be the truncation. */
static void loader_meets_truncation(uint32_t compression, const char *name) {
    char shard[512];
    cxs_dataset *ds = make(name, compression, shard, sizeof shard);
    cxs_sampler_opts so = {.kind = CXS_SAMPLER_SHUFFLE, .seed = 5};
    cxs_sampler *s;
    EXPECT_INT(cxs_sampler_create(ds, &so, &s), 0);
    cxs_loader_opts o = {.k = 3, .batch_size = 128, .threads = 2, .labels = 1};
    cxs_loader *l;
    EXPECT_INT(cxs_loader_create(ds, s, &o, 0, 0, &l), 0);
    const cxs_batch *b;
    cxs_diag d;
    EXPECT_INT(cxs_loader_next_ex(l, &b, &d), 0);
    ck_assert_ptr_nonnull(b);
    EXPECT_INT(truncate(shard, 8192), 0); /* header and section table only */
    int rc = 0;
    uint64_t served = 1;
    while (!(rc = cxs_loader_next_ex(l, &b, &d)) && b) served++;
    EXPECT_INT(rc, CXS_E_TRUNCATED);
    EXPECT_STR_HAS(d.message, shard);
    EXPECT_STR_HAS(d.message, "truncated");
    EXPECT_STR_HAS(d.message, "utterance ");
    EXPECT_STR_HAS(d.message, "8192 bytes");
    /* and says it to a program: the code, the shard, the byte */
    EXPECT_INT(d.code, CXS_E_TRUNCATED);
    ck_assert_str_eq(d.file, shard);
    ck_assert(d.offset != CXS_NO_OFFSET && d.offset >= 8192);
    ck_assert(served < cxs_sampler_length(s) / o.batch_size); /* it failed mid-epoch */
    /* the process and the loader are still there: a restart fails the same
     * way, and the plain call's failure is the loader's to ask */
    EXPECT_INT(cxs_loader_reset(l, 0, 0), 0);
    EXPECT_INT(cxs_loader_error(l)->code, 0);
    EXPECT_INT(cxs_loader_next(l, &b), CXS_E_TRUNCATED);
    const cxs_diag *e = cxs_loader_error(l);
    EXPECT_INT(e->code, CXS_E_TRUNCATED);
    EXPECT_STR_HAS(e->message, shard);
    EXPECT_STR_HAS(e->message, "truncated");
    ck_assert_str_eq(e->file, shard);
    cxs_loader_free(l);
    /* the gather, on several threads */
    uint64_t fr[64];
    for (int i = 0; i < 64; i++) fr[i] = (uint64_t)i * 997 % cxs_sampler_length(s);
    float *x = malloc(64 * 7 * 8 * sizeof *x);
    int64_t y[64];
    EXPECT_INT(cxs_dataset_gather_ex(ds, fr, 64, 3, 0, NULL, 4, x, y, &d), CXS_E_TRUNCATED);
    EXPECT_STR_HAS(d.message, shard);
    EXPECT_STR_HAS(d.message, "truncated");
    free(x);
    cxs_sampler_free(s);
    cxs_dataset_close(ds);
}

TEST(truncated_under_frame_loader) { loader_meets_truncation(CXS_COMPRESSION_NONE, "plain"); }
END_TEST

TEST(truncated_under_frame_loader_compressed) {
    loader_meets_truncation(CXS_COMPRESSION_ZSTD, "zstd");
}
END_TEST

TEST(truncated_under_utterance_loader) {
    char shard[512];
    cxs_dataset *ds = make("utt", CXS_COMPRESSION_NONE, shard, sizeof shard);
    cxs_utt_sampler_opts so = {.kind = CXS_UTT_SHUFFLE, .seed = 8, .frame_budget = 4000};
    cxs_utt_sampler *s;
    EXPECT_INT(cxs_utt_sampler_create(ds, &so, &s, NULL), 0);
    cxs_utt_loader_opts o = {.threads = 2, .labels = 1};
    cxs_utt_loader *l;
    EXPECT_INT(cxs_utt_loader_create(ds, s, &o, 0, 0, &l), 0);
    const cxs_utt_batch *b;
    cxs_diag d;
    EXPECT_INT(cxs_utt_loader_next_ex(l, &b, &d), 0);
    EXPECT_INT(truncate(shard, 8192), 0);
    int rc;
    while (!(rc = cxs_utt_loader_next_ex(l, &b, &d)) && b) {
    }
    EXPECT_INT(rc, CXS_E_TRUNCATED);
    EXPECT_STR_HAS(d.message, shard);
    EXPECT_STR_HAS(d.message, "truncated");
    ck_assert_str_eq(d.file, shard);
    ck_assert(d.offset != CXS_NO_OFFSET && d.offset >= 8192);
    /* the plain call: the loader keeps what it met */
    EXPECT_INT(cxs_utt_loader_reset(l, 0, 0), 0);
    while (!(rc = cxs_utt_loader_next(l, &b)) && b) {
    }
    EXPECT_INT(rc, CXS_E_TRUNCATED);
    EXPECT_INT(cxs_utt_loader_error(l)->code, CXS_E_TRUNCATED);
    EXPECT_STR_HAS(cxs_utt_loader_error(l)->message, shard);
    ck_assert_str_eq(cxs_utt_loader_error(l)->file, shard);
    cxs_utt_loader_free(l);
    cxs_utt_sampler_free(s);
    cxs_dataset_close(ds);
}
END_TEST

/* A shard truncated after open, before the utterance sampler is made: its
 * creation reads every length from INDEX, and fails naming the shard (a
 * SIGBUS killed the process before).  The dataset is small enough that
 * open checked INDEX whole, so nothing before that pass reads it again;
 * then a sampler made before the truncation fails its next epoch's plan
 * the same way. */
TEST(truncated_before_utterance_sampler) {
    char shard[512];
    cxs_dataset *ds = make("utt-create", CXS_COMPRESSION_NONE, shard, sizeof shard);
    cxs_utt_sampler_opts so = {.kind = CXS_UTT_SHUFFLE, .seed = 8, .frame_budget = 4000};
    cxs_utt_sampler *s0;
    cxs_diag d;
    EXPECT_INT(cxs_utt_sampler_create(ds, &so, &s0, &d), 0);
    EXPECT_INT(truncate(shard, 8192), 0);
    cxs_utt_sampler *s = NULL;
    EXPECT_INT(cxs_utt_sampler_create(ds, &so, &s, &d), CXS_E_TRUNCATED);
    ck_assert_ptr_null(s);
    EXPECT_STR_HAS(d.message, shard);
    EXPECT_STR_HAS(d.message, "truncated");
    uint64_t global, length;
    EXPECT_INT(cxs_utt_sampler_length(s0, 0, &global, &length), CXS_E_TRUNCATED);
    cxs_utt_sampler_free(s0);
    cxs_dataset_close(ds);
}
END_TEST

/* verify over a shard truncated since open: reported, naming it */
TEST(truncated_under_verify) {
    for (uint32_t z = 0; z < 2; z++) {
        char shard[512];
        cxs_dataset *ds = make(z ? "verify-zstd" : "verify", z ? CXS_COMPRESSION_ZSTD : 0, shard,
                               sizeof shard);
        cxs_diag d;
        EXPECT_INT(cxs_dataset_verify(ds, NULL, NULL, &d), 0);
        EXPECT_INT(truncate(shard, 8192), 0);
        int rc = cxs_dataset_verify(ds, NULL, NULL, &d);
        EXPECT_INT(rc, CXS_E_TRUNCATED);
        EXPECT_STR_HAS(d.message, shard);
        EXPECT_STR_HAS(d.message, z ? "can no longer be read" : "truncated");
        cxs_dataset_close(ds);
    }
}
END_TEST

/* A SIGBUS outside the library's mappings goes to the previous handler. */
static sigjmp_buf mine;
static volatile sig_atomic_t mine_called;
static void my_handler(int sig) {
    (void)sig;
    mine_called = 1;
    siglongjmp(mine, 1);
}

/* Each test runs in a process of its own (Check forks), where the library
 * installs its handler at the first open: a handler installed before it
 * still gets every SIGBUS that is not the library's. */
/* A shard cut short before open: the refusal names it, for a person in
 * the message and for a program in diag.file. */
TEST(truncated_before_open_names_the_shard) {
    char shard[512], out[400];
    cxs_dataset_close(make("before-open", CXS_COMPRESSION_NONE, shard, sizeof shard));
    snprintf(out, sizeof out, "%s/before-open", dir);
    EXPECT_INT(truncate(shard, 8192), 0);
    cxs_dataset *ds = NULL;
    cxs_diag d;
    EXPECT_INT(cxs_dataset_open(out, &ds, &d), CXS_E_TRUNCATED);
    EXPECT_STR_HAS(d.message, "the manifest says");
    ck_assert_str_eq(d.file, shard);
    EXPECT_INT(d.code, CXS_E_TRUNCATED);
}

TEST(other_sigbus_is_chained) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = my_handler;
    sigemptyset(&sa.sa_mask);
    EXPECT_INT(sigaction(SIGBUS, &sa, NULL), 0);
    char shard[512];
    cxs_dataset *ds = make("other", CXS_COMPRESSION_NONE, shard, sizeof shard);
    char path[300];
    snprintf(path, sizeof path, "%s/one-byte", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("x", f);
    fclose(f);
    f = fopen(path, "r");
    long pg = sysconf(_SC_PAGESIZE);
    volatile char *p = mmap(NULL, 4 * (size_t)pg, PROT_READ, MAP_SHARED, fileno(f), 0);
    ck_assert(p != MAP_FAILED);
    if (sigsetjmp(mine, 1) == 0) {
        (void)p[2 * pg]; /* past the end of that file: SIGBUS, not the library's */
        ck_abort_msg("no SIGBUS past the end of the file");
    }
    EXPECT_INT(mine_called, 1);
    munmap((void *)p, 4 * (size_t)pg);
    fclose(f);
    /* and the library's own faults are still the library's */
    EXPECT_INT(truncate(shard, 8192), 0);
    uint64_t fr[4] = {0, 1000, 20000, 40000};
    float x[4 * 8];
    cxs_diag d;
    mine_called = 0;
    EXPECT_INT(cxs_dataset_gather_ex(ds, fr, 4, 0, 0, NULL, 1, x, NULL, &d), CXS_E_TRUNCATED);
    EXPECT_INT(mine_called, 0); /* not passed on */
    cxs_dataset_close(ds);
}
END_TEST

/* The file offset and length of section `type` of the shard at path. */
static void section_of(const char *path, uint32_t type, uint64_t *off, uint64_t *len) {
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    uint8_t h[64 + 32 * 64];
    ck_assert_uint_eq(fread(h, 1, sizeof h, f), sizeof h);
    fclose(f);
    uint32_t n;
    memcpy(&n, h + 24, 4);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t t;
        memcpy(&t, h + 64 + 32 * i, 4);
        if (t != type) continue;
        memcpy(off, h + 64 + 32 * i + 8, 8);
        memcpy(len, h + 64 + 32 * i + 16, 8);
        return;
    }
    ck_abort_msg("%s: no section %u", path, type);
}

/* Flip one low mantissa bit of frame t, dimension 1 of utterance u of a
 * dataset of one shard (a plausible value: no statistics can tell). */
static void flip_value(const cxs_dataset *ds, const char *shard, uint64_t u, uint64_t t) {
    cxs_info in;
    cxs_dataset_info(ds, &in);
    cxs_utterance ut;
    EXPECT_INT(cxs_dataset_utterance(ds, u, &ut), 0);
    uint64_t off, len;
    section_of(shard, 4 /* FEATURES */, &off, &len);
    const uint64_t row = in.guard * (u + 1) + ut.first_frame + t, rowb = in.dim * 4ull;
    FILE *f = fopen(shard, "r+b");
    ck_assert_ptr_nonnull(f);
    const long at = (long)(off + row * rowb + 4);
    uint8_t b;
    fseek(f, at, SEEK_SET);
    ck_assert_uint_eq(fread(&b, 1, 1, f), 1);
    b ^= 1;
    fseek(f, at, SEEK_SET);
    ck_assert_uint_eq(fwrite(&b, 1, 1, f), 1);
    fclose(f);
}

/* Reopened after the damage (open does not read FEATURES: it opens). */
static cxs_dataset *damaged(const char *name, uint32_t flags, uint64_t u, char *id, size_t cap) {
    char out[400], shard[512];
    snprintf(out, sizeof out, "%s/%s", dir, name);
    td_opts o = {.utts = 48, .dim = 8, .seed = 11, .flags = flags};
    ck_assert_int_eq(td_make(out, &o), 0);
    snprintf(shard, sizeof shard, "%s/shard-000000.cxs", out);
    cxs_dataset *ds;
    cxs_diag d;
    ck_assert_msg(cxs_dataset_open(out, &ds, &d) == 0, "%s", d.message);
    cxs_utterance ut;
    EXPECT_INT(cxs_dataset_utterance(ds, u, &ut), 0);
    snprintf(id, cap, "%.*s", (int)ut.id_len, ut.id);
    flip_value(ds, shard, u, 7);
    cxs_dataset_close(ds);
    ck_assert_msg(cxs_dataset_open(out, &ds, &d) == 0, "%s", d.message);
    return ds;
}

TEST(flipped_value_named_by_verify) {
    char id[300];
    cxs_dataset *ds = damaged("bs-verify", 0, 29, id, sizeof id);
    cxs_diag d;
    EXPECT_INT(cxs_dataset_verify(ds, NULL, NULL, &d), CXS_E_CHECKSUM);
    EXPECT_STR_HAS(d.message, "FEATURES block ");
    EXPECT_STR_HAS(d.message, id);
    EXPECT_STR_HAS(d.message, "(number 29)");
    cxs_dataset_close(ds);
}
END_TEST

TEST(flipped_value_stops_warm) {
    char id[300];
    cxs_dataset *ds = damaged("bs-warm", 0, 17, id, sizeof id);
    cxs_diag d;
    EXPECT_INT(cxs_dataset_warm(ds, CXS_WARM_FORCE, NULL, NULL, NULL, &d), CXS_E_CHECKSUM);
    EXPECT_STR_HAS(d.message, "FEATURES block ");
    EXPECT_STR_HAS(d.message, id);
    /* cached now: warming again without reading what is cached checks
     * nothing (the sums are checked on the bytes warm reads) */
    EXPECT_INT(cxs_dataset_warm(ds, CXS_WARM_SKIP_CACHED, NULL, NULL, NULL, &d), 0);
    cxs_dataset_close(ds);
}
END_TEST

/* The same in the library's own thread (cxs_warm_start, the loaders'
 * prefetch): the failure comes back from cxs_warm_finish with its diag. */
TEST(flipped_value_stops_background_warm) {
    char id[300];
    cxs_dataset *ds = damaged("bs-bgwarm", 0, 23, id, sizeof id);
    cxs_diag d;
    cxs_warm *w;
    EXPECT_INT(cxs_warm_start(ds, CXS_WARM_FORCE, &w, &d), 0);
    cxs_warm_result r;
    memset(&r, 0xab, sizeof r);
    EXPECT_INT(cxs_warm_finish(w, 0, &r, &d), CXS_E_CHECKSUM);
    EXPECT_STR_HAS(d.message, "FEATURES block ");
    EXPECT_STR_HAS(d.message, id);
    EXPECT(r.total_bytes == 0xababababababababull); /* not written on failure */
    cxs_dataset_close(ds);
}
END_TEST

/* A sound dataset: the background warm-up ends as the call in the caller's
 * thread does, its progress reaching the total; asked to stop at once it
 * ends cancelled or (a small dataset) already done, never otherwise. */
TEST(background_warm_is_the_warm) {
    char out[400];
    snprintf(out, sizeof out, "%s/bgwarm", dir);
    td_opts o = {.utts = 64, .dim = 8, .seed = 5};
    ck_assert_int_eq(td_make(out, &o), 0);
    cxs_dataset *ds;
    cxs_diag d;
    ck_assert_msg(cxs_dataset_open(out, &ds, &d) == 0, "%s", d.message);
    cxs_warm_result fg, bg;
    EXPECT_INT(cxs_dataset_warm(ds, CXS_WARM_FORCE, NULL, NULL, &fg, &d), 0);
    cxs_warm *w;
    EXPECT_INT(cxs_warm_start(ds, CXS_WARM_FORCE | CXS_WARM_SKIP_CACHED, &w, &d), 0);
    uint64_t done = 0, total = 0;
    for (int i = 0; i < 20000 && cxs_warm_poll(w, &done, &total) == 1; i++) usleep(1000);
    EXPECT_INT(cxs_warm_poll(w, &done, &total), 0);
    EXPECT_UINT(total, fg.total_bytes);
    EXPECT_UINT(done, fg.total_bytes);
    EXPECT_INT(cxs_warm_finish(w, 0, &bg, &d), 0);
    EXPECT_UINT(bg.total_bytes, fg.total_bytes);
    EXPECT(bg.fits == 1 && bg.cached_before > 0); /* the first call cached it */
    EXPECT_INT(cxs_warm_start(ds, CXS_WARM_FORCE, &w, &d), 0);
    int rc = cxs_warm_finish(w, 1, &bg, &d);
    ck_assert_msg(rc == 0 || rc == -ECANCELED, "stopped: %d (%s)", rc, d.message);
    /* refusals, each with a message */
    EXPECT_INT(cxs_warm_start(ds, 0x80, &w, &d), CXS_E_INVALID);
    ck_assert_ptr_null(w);
    EXPECT_STR_HAS(d.message, "unknown flags");
    EXPECT_INT(cxs_warm_start(NULL, 0, &w, &d), CXS_E_INVALID);
    EXPECT_INT(cxs_warm_poll(NULL, NULL, NULL), CXS_E_INVALID);
    EXPECT_INT(cxs_warm_finish(NULL, 1, NULL, NULL), 0);
    cxs_dataset_close(ds);
}
END_TEST

/* The block sampler's loader: every block it reads is checked, and a batch
 * that waits for the damaged one fails, naming it (the first batches of a
 * start, which do not wait for blocks, may be served before). */
TEST(flipped_value_stops_block_loader) {
    char id[300];
    cxs_dataset *ds = damaged("bs-loader", 0, 40, id, sizeof id);
    cxs_sampler_opts so = {.kind = CXS_SAMPLER_BLOCK, .seed = 3, .memory_bytes = 4u << 20,
                           .blocks = 2};
    cxs_sampler *s;
    cxs_diag d;
    ck_assert_msg(cxs_sampler_create_ex(ds, &so, &s, &d) == 0, "%s", d.message);
    cxs_loader_opts o = {.k = 3, .batch_size = 64, .threads = 2, .labels = 1};
    cxs_loader *l;
    EXPECT_INT(cxs_loader_create(ds, s, &o, 0, 0, &l), 0);
    const cxs_batch *b;
    int rc;
    uint64_t served = 0;
    while (!(rc = cxs_loader_next_ex(l, &b, &d)) && b) served++;
    EXPECT_INT(rc, CXS_E_CHECKSUM);
    EXPECT_STR_HAS(d.message, "FEATURES block ");
    EXPECT_STR_HAS(d.message, id);
    EXPECT_STR_HAS(d.message, "not served");
    /* the block's shard and its first byte, as the message says them */
    EXPECT_INT(d.code, CXS_E_CHECKSUM);
    EXPECT_STR_HAS(d.file, "shard-");
    EXPECT_STR_HAS(d.message, d.file);
    char at[40];
    snprintf(at, sizeof at, "file bytes %llu..", (unsigned long long)d.offset);
    EXPECT_STR_HAS(d.message, at);
    cxs_loader_free(l);
    cxs_sampler_free(s);
    cxs_dataset_close(ds);
}
END_TEST

TEST(unlocated_without_block_sums) {
    char id[300];
    cxs_dataset *ds = damaged("bs-off", CXS_WRITER_NO_BLOCK_SUMS, 29, id, sizeof id);
    cxs_info in;
    cxs_dataset_info(ds, &in);
    EXPECT_INT(in.block_sum_shards, 0);
    EXPECT_INT(in.format_minor, 0);
    cxs_diag d;
    EXPECT_INT(cxs_dataset_verify(ds, NULL, NULL, &d), CXS_E_CHECKSUM);
    EXPECT_STR_HAS(d.message, "section FEATURES");
    EXPECT_STR_HAS(d.message, "no block sums");
    /* the section's shard and first byte, as the message says them */
    EXPECT_INT(d.code, CXS_E_CHECKSUM);
    EXPECT_STR_HAS(d.file, "shard-");
    EXPECT_STR_HAS(d.message, d.file);
    char at[48];
    snprintf(at, sizeof at, "(bytes %llu..", (unsigned long long)d.offset);
    EXPECT_STR_HAS(d.message, at);
    EXPECT_INT(cxs_dataset_warm(ds, CXS_WARM_FORCE, NULL, NULL, NULL, &d), 0); /* nothing to check */
    cxs_dataset_close(ds);
}
END_TEST

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/cxs-damage-XXXXXX");
    if (!mkdtemp(dir)) return 3;
    const TTest *const t[] = {truncated_under_frame_loader, truncated_under_frame_loader_compressed,
                              truncated_under_utterance_loader, truncated_before_utterance_sampler,
                              truncated_under_verify, truncated_before_open_names_the_shard,
                              flipped_value_named_by_verify, flipped_value_stops_warm,
                              flipped_value_stops_background_warm, background_warm_is_the_warm,
                              flipped_value_stops_block_loader, unlocated_without_block_sums,
                              other_sigbus_is_chained};
    /* In one process (CK_FORK=no, valgrind) the library's handler is there
     * before the test's own: the chaining case (last) needs a process of
     * its own. */
    const char *fk = getenv("CK_FORK");
    int n = (int)(sizeof t / sizeof *t);
    if (fk && !strcmp(fk, "no")) {
        puts("SKIP other_sigbus_is_chained: CK_FORK=no (it needs a process of its own)");
        n--;
    }
    /* each test writes a dataset: slow on a loaded machine */
    const cxs_group g[] = {{"damage", 60, NULL, NULL, t, n, NULL}};
    int rc = cxs_run_groups("damage", g, CXS_N(g), 0) ? EXIT_FAILURE : EXIT_SUCCESS;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) rc = EXIT_FAILURE;
    return rc;
}
