/* The ABI's room to grow (ctxshard_base.h, CXS_OPTS_RESERVED): every
 * *_opts_init gives the documented defaults and a zeroed tail; every call
 * that takes options refuses a non-zero reserved word with CXS_E_INVALID
 * and a message naming the struct (a program built against a newer header
 * asking for what this library does not know), and accepts the same
 * options zeroed; every struct the library fills comes back with its
 * reserved words zero, whatever the caller's memory held; cache_bytes 0
 * is the default chunk cache and CXS_CACHE_OFF none, both serving the
 * same values.  Data made with the library's writer (testdata.h). */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxshard.h"
#include "ctxshard_gpu.h"
#include "ctxshard_import.h"
#include "ctxshard_writer.h"
#include "cxs_test.h"
#include "testdata.h"

static char dir[64], plain[128], zpath[128];

static int zero_words(const uint64_t *w, unsigned n) {
    for (unsigned i = 0; i < n; i++)
        if (w[i]) return 0;
    return 1;
}

/* A diag that must name the struct and say what to do. */
#define EXPECT_REFUSED(rc, d, what)                                                      \
    do {                                                                                 \
        EXPECT_INT((rc), CXS_E_INVALID);                                                 \
        EXPECT_STR_HAS((d).message, what ": reserved word");                             \
        EXPECT_STR_HAS((d).message, what "_init()");                                     \
    } while (0)

TEST(init_gives_the_defaults) {
    cxs_open_opts oo;
    memset(&oo, 0xa5, sizeof oo);
    cxs_open_opts_init(&oo);
    EXPECT(oo.cache_bytes == 0 && oo.hugepage_budget == 0 && !oo.cache_dir && !oo.cache_limit);
    EXPECT(zero_words(oo.reserved, CXS_N(oo.reserved)));
    /* the fields URLs added came out of the reserved words: the size holds */
    EXPECT(sizeof oo == (2 + CXS_OPTS_RESERVED) * sizeof(uint64_t));
    cxs_sampler_opts so;
    memset(&so, 0xa5, sizeof so);
    cxs_sampler_opts_init(&so);
    EXPECT(so.kind == CXS_SAMPLER_SEQUENTIAL && so.world_size == 0 && !so.class_weights);
    EXPECT(zero_words(so.reserved, CXS_OPTS_RESERVED));
    cxs_loader_opts lo;
    memset(&lo, 0xa5, sizeof lo);
    cxs_loader_opts_init(&lo);
    EXPECT(lo.threads == 0 && lo.ring == 0 && !lo.norm && zero_words(lo.reserved, CXS_OPTS_RESERVED));
    cxs_utt_sampler_opts us;
    memset(&us, 0xa5, sizeof us);
    cxs_utt_sampler_opts_init(&us);
    EXPECT(us.frame_budget == 0 && us.buckets == 0 && zero_words(us.reserved, CXS_OPTS_RESERVED));
    cxs_utt_loader_opts ul;
    memset(&ul, 0xa5, sizeof ul);
    cxs_utt_loader_opts_init(&ul);
    EXPECT(ul.threads == 0 && !ul.norm && zero_words(ul.reserved, CXS_OPTS_RESERVED));
    cxs_gpu_opts go;
    memset(&go, 0xa5, sizeof go);
    cxs_gpu_opts_init(&go);
    EXPECT(go.device == 0 && go.mode == CXS_GPU_AUTO && zero_words(go.reserved, CXS_OPTS_RESERVED));
    cxs_gpu_utt_opts gu;
    memset(&gu, 0xa5, sizeof gu);
    cxs_gpu_utt_opts_init(&gu);
    EXPECT(gu.device == 0 && zero_words(gu.reserved, CXS_OPTS_RESERVED));
    cxs_writer_opts wo;
    memset(&wo, 0xa5, sizeof wo);
    cxs_writer_opts_init(&wo);
    EXPECT(wo.guard == CXS_WRITER_DEFAULT_GUARD && zero_words(wo.reserved, CXS_OPTS_RESERVED));
    cxs_kaldi_opts ko;
    memset(&ko, 0xa5, sizeof ko);
    cxs_kaldi_opts_init(&ko);
    EXPECT(!ko.text && zero_words(ko.reserved, CXS_OPTS_RESERVED));
}
END_TEST_

TEST(reserved_words_are_refused) {
    cxs_diag d;
    cxs_dataset *ds = NULL;
    cxs_open_opts oo;
    cxs_open_opts_init(&oo);
    oo.reserved[CXS_N(oo.reserved) - 1] = 1;
    memset(&d, 0, sizeof d);
    EXPECT_REFUSED(cxs_dataset_open_ex(plain, &oo, &ds, &d), d, "cxs_open_opts");
    EXPECT(ds == NULL);
    oo.reserved[CXS_N(oo.reserved) - 1] = 0;
    EXPECT_INT(cxs_dataset_open_ex(plain, &oo, &ds, &d), 0);

    cxs_sampler *s = NULL;
    cxs_sampler_opts so;
    cxs_sampler_opts_init(&so);
    so.kind = CXS_SAMPLER_SHUFFLE;
    so.reserved[0] = 7;
    EXPECT_REFUSED(cxs_sampler_create_ex(ds, &so, &s, &d), d, "cxs_sampler_opts");
    EXPECT_INT(cxs_sampler_create(ds, &so, &s), CXS_E_INVALID); /* the plain call too */
    so.reserved[0] = 0;
    EXPECT_INT(cxs_sampler_create_ex(ds, &so, &s, &d), 0);

    cxs_loader *l = NULL;
    cxs_loader_opts lo;
    cxs_loader_opts_init(&lo);
    lo.k = 2, lo.batch_size = 16, lo.threads = 1;
    lo.reserved[2] = 1;
    EXPECT_REFUSED(cxs_loader_create_ex(ds, s, &lo, 0, 0, &l, &d), d, "cxs_loader_opts");
    lo.reserved[2] = 0;
    EXPECT_INT(cxs_loader_create_ex(ds, s, &lo, 0, 0, &l, &d), 0);
    const cxs_batch *b;
    EXPECT_INT(cxs_loader_next(l, &b), 0);
    EXPECT(b && b->n == 16);
    cxs_loader_free(l);

    cxs_utt_sampler *us = NULL;
    cxs_utt_sampler_opts uso;
    cxs_utt_sampler_opts_init(&uso);
    uso.frame_budget = 20000;
    uso.reserved[1] = 1;
    EXPECT_REFUSED(cxs_utt_sampler_create(ds, &uso, &us, &d), d, "cxs_utt_sampler_opts");
    uso.reserved[1] = 0;
    EXPECT_INT(cxs_utt_sampler_create(ds, &uso, &us, &d), 0);

    cxs_utt_loader *ul = NULL;
    cxs_utt_loader_opts ulo;
    cxs_utt_loader_opts_init(&ulo);
    ulo.reserved[3] = 1;
    EXPECT_REFUSED(cxs_utt_loader_create_ex(ds, us, &ulo, 0, 0, &ul, &d), d,
                   "cxs_utt_loader_opts");
    ulo.reserved[3] = 0;
    EXPECT_INT(cxs_utt_loader_create_ex(ds, us, &ulo, 0, 0, &ul, &d), 0);
    cxs_utt_loader_free(ul);

    /* the GPU loaders check first, before any device is looked for */
    cxs_gpu_loader *gl = NULL;
    cxs_gpu_opts go;
    cxs_gpu_opts_init(&go);
    go.device = CXS_GPU_EMULATE, go.k = 2, go.batch_size = 16;
    go.reserved[0] = 1;
    EXPECT_REFUSED(cxs_gpu_loader_create(ds, s, &go, 0, 0, &gl, &d), d, "cxs_gpu_opts");
    cxs_gpu_utt_loader *gul = NULL;
    cxs_gpu_utt_opts guo;
    cxs_gpu_utt_opts_init(&guo);
    guo.device = CXS_GPU_EMULATE;
    guo.reserved[0] = 1;
    EXPECT_REFUSED(cxs_gpu_utt_loader_create(ds, us, &guo, 0, 0, &gul, &d), d,
                   "cxs_gpu_utt_opts");

    cxs_utt_sampler_free(us);
    cxs_sampler_free(s);
    cxs_dataset_close(ds);

    /* the writer and the importers, before anything is written */
    char out[160];
    snprintf(out, sizeof out, "%s/written", dir);
    cxs_writer *w = NULL;
    cxs_writer_opts wo;
    cxs_writer_opts_init(&wo);
    wo.reserved[0] = 1;
    EXPECT_REFUSED(cxs_writer_create(out, &wo, &w, &d), d, "cxs_writer_opts");
    FILE *f = fopen(out, "r");
    EXPECT(f == NULL); /* nothing made */
    EXPECT_REFUSED(cxs_import_kaldi("/nonexistent.scp", out, &wo, NULL, NULL, NULL, NULL, &d), d,
                   "cxs_writer_opts");
    wo.reserved[0] = 0;
    cxs_kaldi_opts ko;
    cxs_kaldi_opts_init(&ko);
    ko.reserved[1] = 1;
    EXPECT_REFUSED(cxs_import_kaldi("/nonexistent.scp", out, &wo, &ko, NULL, NULL, NULL, &d), d,
                   "cxs_kaldi_opts");
}
END_TEST_

TEST(filled_structs_come_back_with_zero_tails) {
    cxs_dataset *ds;
    cxs_diag d;
    EXPECT_INT(cxs_dataset_open_ex(plain, NULL, &ds, &d), 0);
    cxs_info info;
    memset(&info, 0xff, sizeof info);
    cxs_dataset_info(ds, &info);
    EXPECT(info.num_utterances == 30 && zero_words(info.reserved, CXS_INFO_RESERVED));
    cxs_stats st;
    memset(&st, 0xff, sizeof st);
    cxs_dataset_stats(ds, &st);
    EXPECT(zero_words(st.reserved, CXS_INFO_RESERVED));
    cxs_hugepage_info hp;
    memset(&hp, 0xff, sizeof hp);
    cxs_dataset_hugepages(ds, &hp);
    EXPECT(hp.bytes == 0 && zero_words(hp.reserved, CXS_INFO_RESERVED));
    cxs_warm_result wr;
    memset(&wr, 0xff, sizeof wr);
    EXPECT_INT(cxs_dataset_warm(ds, CXS_WARM_FORCE, NULL, NULL, &wr, &d), 0);
    EXPECT(zero_words(wr.reserved, CXS_INFO_RESERVED));
    EXPECT(zero_words(wr.memory.reserved, CXS_INFO_RESERVED));
    cxs_memory m;
    memset(&m, 0xff, sizeof m);
    EXPECT_INT(cxs_memory_probe(&m, &d), 0);
    EXPECT(zero_words(m.reserved, CXS_INFO_RESERVED));
    cxs_gpu_probe_info gp;
    memset(&gp, 0xff, sizeof gp);
    cxs_gpu_probe(CXS_GPU_EMULATE, &gp);
    EXPECT(zero_words(gp.reserved, CXS_INFO_RESERVED));
    cxs_dataset_close(ds);
}
END_TEST_

/* The sized calls (ctxshard_base.h) as a program built against another
 * header calls them: each fills a struct of size bytes in buf, followed by
 * a canary.  ex writes at the size it is given, old as first published. */
typedef int (*sized_ex)(const cxs_dataset *ds, void *out, size_t size);
typedef void (*sized_old)(const cxs_dataset *ds, void *out);
static int info_ex(const cxs_dataset *ds, void *o, size_t n) { return cxs_dataset_info_ex(ds, o, n); }
static void info_old(const cxs_dataset *ds, void *o) { cxs_dataset_info(ds, o); }
static int stats_ex(const cxs_dataset *ds, void *o, size_t n) { return cxs_dataset_stats_ex(ds, o, n); }
static void stats_old(const cxs_dataset *ds, void *o) { cxs_dataset_stats(ds, o); }
static int hp_ex(const cxs_dataset *ds, void *o, size_t n) { return cxs_dataset_hugepages_ex(ds, o, n); }
static void hp_old(const cxs_dataset *ds, void *o) { cxs_dataset_hugepages(ds, o); }

/* The size a sized struct was first published with: through its reserved
 * words, wherever later fields go. */
#define THROUGH_RESERVED(type) (offsetof(type, reserved) + sizeof(((type *)0)->reserved))
#define CANARY 0xa5
#define SLACK 64

static int canary_from(const unsigned char *b, size_t from, size_t to) {
    for (size_t i = from; i < to; i++)
        if (b[i] != CANARY) return 0;
    return 1;
}

/* full: the struct's size in this header; older: the size of an older
 * header's struct (its fields up to some member); published: the size the
 * call without _ex fills. */
static void expect_sized(const cxs_dataset *ds, sized_ex ex, sized_old old, size_t full,
                         size_t older, size_t published) {
    _Alignas(16) unsigned char want[1024], buf[1024 + SLACK];
    EXPECT(full + SLACK <= sizeof buf);
    EXPECT_INT(ex(ds, want, full), 0);
    /* an older program's smaller struct: its fields, nothing past them */
    memset(buf, CANARY, sizeof buf);
    EXPECT_INT(ex(ds, buf, older), 0);
    EXPECT(memcmp(buf, want, older) == 0);
    EXPECT(canary_from(buf, older, sizeof buf));
    /* a newer program's larger one: the fields this library lacks read 0 */
    memset(buf, CANARY, sizeof buf);
    EXPECT_INT(ex(ds, buf, full + SLACK), 0);
    EXPECT(memcmp(buf, want, full) == 0);
    for (size_t i = full; i < full + SLACK; i++) EXPECT(buf[i] == 0);
    EXPECT(canary_from(buf, full + SLACK, sizeof buf));
    /* the call without _ex: the struct as first published, no further */
    memset(buf, CANARY, sizeof buf);
    old(ds, buf);
    EXPECT(memcmp(buf, want, published) == 0);
    EXPECT(canary_from(buf, published, sizeof buf));
    EXPECT_INT(ex(ds, NULL, full), CXS_E_INVALID);
    EXPECT_INT(ex(ds, buf, 0), CXS_E_INVALID);
}

TEST(sized_calls_write_no_further_than_asked) {
    cxs_dataset *ds;
    cxs_diag d;
    EXPECT_INT(cxs_dataset_open_ex(plain, NULL, &ds, &d), 0);
    expect_sized(ds, info_ex, info_old, sizeof(cxs_info), offsetof(cxs_info, label_seqs),
                 THROUGH_RESERVED(cxs_info));
    expect_sized(ds, stats_ex, stats_old, sizeof(cxs_stats), offsetof(cxs_stats, label_counts),
                 THROUGH_RESERVED(cxs_stats));
    expect_sized(ds, hp_ex, hp_old, sizeof(cxs_hugepage_info),
                 offsetof(cxs_hugepage_info, reason), THROUGH_RESERVED(cxs_hugepage_info));
    cxs_info in;
    EXPECT_INT(cxs_dataset_info_ex(NULL, &in, sizeof in), CXS_E_INVALID);
    cxs_dataset_close(ds);
}
END_TEST_

/* The fixed structs (ctxshard_base.h) keep their size for good: a field
 * added at their end instead of out of their reserved words fails here.
 * The sizes of an LP64 host, where pointers and size_t have 8 bytes. */
TEST(fixed_structs_keep_their_size) {
#if UINTPTR_MAX == UINT64_MAX
    EXPECT_INT((int)sizeof(cxs_diag), 2128);
    EXPECT_INT((int)sizeof(cxs_memory), 104);
    EXPECT_INT((int)sizeof(cxs_warm_result), 208);
    EXPECT_INT((int)sizeof(cxs_fetch_info), 96);
    EXPECT_INT((int)sizeof(cxs_cache_entry), 104);
    EXPECT_INT((int)sizeof(cxs_utterance), 120);
    EXPECT_INT((int)sizeof(cxs_writer_info), 120);
    EXPECT_INT((int)sizeof(cxs_merge_info), 192);
    EXPECT_INT((int)sizeof(cxs_import_info), 216);
    EXPECT_INT((int)sizeof(cxs_gpu_probe_info), 888);
    EXPECT_INT((int)sizeof(cxs_gpu_loader_info), 360);
#endif
}
END_TEST_

/* Every window of the compressed dataset, with the chunk cache of 0 (the
 * default), none (CXS_CACHE_OFF) and a small one: the same floats. */
TEST(cache_bytes_zero_is_the_default) {
    float *w[3] = {0};
    uint64_t F = 0;
    const uint64_t caches[3] = {0, CXS_CACHE_OFF, 1u << 16};
    for (int c = 0; c < 3; c++) {
        cxs_open_opts oo;
        cxs_open_opts_init(&oo);
        oo.cache_bytes = caches[c];
        cxs_dataset *ds;
        cxs_diag d;
        EXPECT_INT(cxs_dataset_open_ex(zpath, &oo, &ds, &d), 0);
        cxs_info info;
        cxs_dataset_info(ds, &info);
        F = info.num_frames;
        uint64_t *fr = malloc(F * sizeof *fr);
        w[c] = malloc(F * 5 * info.dim * sizeof(float));
        EXPECT(fr && w[c]);
        for (uint64_t i = 0; i < F; i++) fr[i] = (i * 7919) % F;
        EXPECT_INT(cxs_dataset_gather(ds, fr, F, 2, 0, 1, w[c], NULL), 0);
        free(fr);
        cxs_dataset_close(ds);
    }
    cxs_dataset *ds;
    cxs_diag d;
    EXPECT_INT(cxs_dataset_open_ex(zpath, NULL, &ds, &d), 0);
    cxs_info info;
    cxs_dataset_info(ds, &info);
    cxs_dataset_close(ds);
    size_t bytes = F * 5 * info.dim * sizeof(float);
    EXPECT(memcmp(w[0], w[1], bytes) == 0);
    EXPECT(memcmp(w[0], w[2], bytes) == 0);
    for (int c = 0; c < 3; c++) free(w[c]);
}
END_TEST_

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/cxs-abi-XXXXXX");
    if (!mkdtemp(dir)) return 3;
    snprintf(plain, sizeof plain, "%s/plain", dir);
    snprintf(zpath, sizeof zpath, "%s/z", dir);
    td_opts o = {.utts = 30, .dim = 8, .seed = 2, .shard_size = 1u << 20};
    if (td_make(plain, &o)) return 3;
    o.compression = CXS_COMPRESSION_ZSTD, o.chunk_size = 16u << 10;
    if (td_make(zpath, &o)) return 3;
    const TTest *tests[] = {init_gives_the_defaults, reserved_words_are_refused,
                            filled_structs_come_back_with_zero_tails,
                            sized_calls_write_no_further_than_asked,
                            fixed_structs_keep_their_size,
                            cache_bytes_zero_is_the_default};
    const cxs_group g[] = {{"abi", 120, NULL, NULL, tests, CXS_N(tests), NULL}};
    int failed = cxs_run_groups("abi", g, CXS_N(g), 0);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
