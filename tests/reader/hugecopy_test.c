/* hugecopy_test.c - cxs_open_opts.hugepage_budget: what is served from
 * the copy in huge pages equals the reference, for float32, float16 and
 * bfloat16 storage, windows of k <= guard (zero-copy views) and k > guard
 * (the gather's copying path), the loader with one and two threads and in
 * a forked child; a budget too small, compressed data or huge pages off
 * fall back to the mapping with a reason; a damaged feature byte fails
 * the open with the copy (it is hashed against the section checksum)
 * where the open without it serves the byte.
 *
 * The datasets are written by the library's writer: 300 utterances of
 * 1..50 frames x 3 dims, guard 4, two shards, every value a formula of
 * (u, t, d) exact in all three dtypes, so that the reference needs no
 * stored copy.
 *
 * usage: hugecopy_test */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memmem */
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ctxshard.h"
#include "ctxshard_writer.h"
#include "cxs_test.h"

#define NU 300
#define D 3
#define G 4
#define V 8
#define BUDGET (1ull << 30)

static char dir[256], path[4][300]; /* f32, f16, bf16, f32 compressed */
static uint64_t cum[NU + 1];        /* first frame of every utterance */

static uint64_t frames_of(uint64_t u) { return 1 + (u * 37 + 11) % 50; }
static float value(uint64_t u, uint64_t t, uint32_t d) {
    return (float)((u * 7 + t * 3 + d) % 200 + 1) * 0.5f; /* exact in bfloat16 too */
}
static uint8_t label(uint64_t u, uint64_t t) { return (uint8_t)((u + t) % V); }

static int make(const char *out, uint32_t dtype, uint32_t compression) {
    static const char *vocab[V] = {"a", "b", "c", "d", "e", "f", "g", "h"};
    cxs_writer_opts wo;
    cxs_writer_opts_init(&wo);
    wo.guard = G;
    wo.dtype = dtype;
    wo.compression = compression;
    wo.shard_size = 48u << 10; /* two shards */
    wo.vocab_size = V;
    wo.vocab = vocab;
    cxs_diag d = {0};
    cxs_writer *w;
    int rc = cxs_writer_create(out, &wo, &w, &d);
    if (rc) {
        fprintf(stderr, "%s\n", d.message);
        return rc;
    }
    float x[50 * D];
    uint8_t lab[50];
    for (uint32_t u = 0; u < NU && !rc; u++) {
        uint64_t T = frames_of(u);
        for (uint64_t t = 0; t < T; t++) {
            lab[t] = label(u, t);
            for (uint32_t k = 0; k < D; k++) x[t * D + k] = value(u, t, k);
        }
        cxs_writer_utt wu = {.data = x, .frames = T, .dim = D, .type = CXS_DTYPE_F32,
                             .labels = lab, .label_count = T, .label_size = 1};
        char id[32];
        snprintf(id, sizeof id, "u%05u", u);
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

/* The utterance and frame of global frame f. */
static void locate(uint64_t f, uint64_t *u, uint64_t *t) {
    uint64_t lo = 0, hi = NU;
    while (hi - lo > 1) {
        uint64_t mid = (lo + hi) / 2;
        if (cum[mid] <= f) lo = mid;
        else hi = mid;
    }
    *u = lo;
    *t = f - cum[lo];
}

/* Whether the window of frame f at k equals the reference (zeros past the
 * utterance's ends). */
static int window_ok(const float *x, uint64_t f, uint32_t k) {
    uint64_t u, t;
    locate(f, &u, &t);
    const int64_t T = (int64_t)frames_of(u);
    for (int64_t j = 0; j <= 2 * (int64_t)k; j++) {
        int64_t r = (int64_t)t - k + j;
        for (uint32_t d = 0; d < D; d++) {
            float want = r < 0 || r >= T ? 0.0f : value(u, (uint64_t)r, d);
            if (x[j * D + d] != want) return 0;
        }
    }
    return 1;
}

static int label_ok(int64_t y, uint64_t f) {
    uint64_t u, t;
    locate(f, &u, &t);
    return y == label(u, t);
}

/* The file behind the mapping holding p ("" for anonymous memory), from
 * /proc/self/maps. */
static void mapping_of(const void *p, char *out, size_t n) {
    FILE *fp = fopen("/proc/self/maps", "r");
    char line[1024];
    out[0] = 0;
    while (fp && fgets(line, sizeof line, fp)) {
        unsigned long a, b;
        int off = 0;
        if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %n", &a, &b, &off) < 2) continue;
        if ((uintptr_t)p < a || (uintptr_t)p >= b) continue;
        snprintf(out, n, "%s", off ? line + off : "");
        out[strcspn(out, "\n")] = 0;
        break;
    }
    if (fp) fclose(fp);
}

static cxs_dataset *open_with(const char *p, uint64_t budget, cxs_hugepage_info *hi) {
    cxs_open_opts oo = {.cache_bytes = CXS_DEFAULT_CACHE_BYTES, .hugepage_budget = budget};
    cxs_dataset *ds = NULL;
    cxs_diag d = {0};
    int rc = cxs_dataset_open_ex(p, &oo, &ds, &d);
    if (rc) ck_abort_msg("open %s: %s", p, d.message);
    cxs_dataset_hugepages(ds, hi);
    return ds;
}

/* Every frame gathered at k, compared with the reference. */
static void gather_all(const cxs_dataset *ds, uint32_t k, unsigned threads) {
    const uint64_t F = cum[NU];
    const size_t W = (2 * (size_t)k + 1) * D;
    uint64_t *fr = malloc(F * sizeof *fr);
    float *x = malloc(F * W * sizeof *x);
    int64_t *y = malloc(F * sizeof *y);
    EXPECT(fr && x && y);
    for (uint64_t f = 0; f < F; f++) fr[(f * 7919) % F] = f; /* 7919 is prime to F */
    cxs_diag d = {0};
    int rc = cxs_dataset_gather_ex(ds, fr, F, k, 0, NULL, threads, x, y, &d);
    if (rc) ck_abort_msg("gather k=%u: %s", k, d.message);
    for (uint64_t i = 0; i < F; i++) {
        EXPECT_LOOP(window_ok(x + i * W, fr[i], k));
        EXPECT_LOOP(label_ok(y[i], fr[i]));
    }
    free(fr);
    free(x);
    free(y);
}

/* One epoch of a shuffled loader, every batch against the reference; in a
 * forked child after the first batch when fork_after is set. */
static void loader_epoch(const cxs_dataset *ds, uint32_t k, uint32_t threads, int fork_after) {
    cxs_sampler_opts so = {.kind = CXS_SAMPLER_SHUFFLE, .seed = 5, .world_size = 1};
    cxs_sampler *s;
    EXPECT_INT(cxs_sampler_create(ds, &so, &s), 0);
    cxs_loader_opts lo = {.k = k, .batch_size = 64, .threads = threads, .labels = 1};
    cxs_loader *l;
    EXPECT_INT(cxs_loader_create(ds, s, &lo, 3, 0, &l), 0);
    const size_t W = (2 * (size_t)k + 1) * D;
    const cxs_batch *b;
    uint64_t seen = 0;
    pid_t child = -1;
    int bad = 0;
    for (;;) {
        if (cxs_loader_next(l, &b)) {
            bad = 1;
            break;
        }
        if (!b) break;
        for (size_t i = 0; i < b->n; i++)
            bad |= !window_ok(b->x + i * W, b->frames[i], k) || !label_ok(b->y[i], b->frames[i]);
        seen += b->n;
        if (fork_after && child < 0 && (child = fork()) < 0) bad = 1;
        if (child > 0) break; /* the parent stops here, the child goes on */
    }
    if (child == 0) _exit(bad || seen != cum[NU] ? 1 : 0);
    cxs_loader_free(l);
    cxs_sampler_free(s);
    EXPECT(!bad);
    if (child > 0) {
        int st;
        EXPECT(waitpid(child, &st, 0) == child);
        EXPECT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    } else {
        EXPECT_UINT(seen, cum[NU]);
    }
}

static void served_from_copy(int which) {
    cxs_hugepage_info hi, h0;
    cxs_dataset *ds = open_with(path[which], BUDGET, &hi), *plain = open_with(path[which], 0, &h0);
    EXPECT_UINT(h0.bytes, 0);
    EXPECT_INT(h0.reason[0], 0);
    if (!hi.bytes) {
        /* a kernel without transparent huge pages: the fallback, said */
        EXPECT(hi.reason[0]);
        printf("NOTE: no copy in huge pages here (%s): the mapping is tested instead\n", hi.reason);
    } else {
        EXPECT_INT(hi.reason[0], 0);
        printf("%s: copy of %llu bytes, %llu in huge pages\n", path[which],
               (unsigned long long)hi.bytes, (unsigned long long)hi.huge_bytes);
    }
    /* k <= guard: zero-copy views, from the copy (anonymous memory), the
     * same bytes as the mapping's */
    const size_t row = D * (which == 0 ? 4u : 2u);
    for (uint64_t f = 0; f < cum[NU]; f += 5) {
        const void *w, *w0;
        EXPECT_INT(cxs_dataset_window(ds, f, G, &w), 0);
        EXPECT_INT(cxs_dataset_window(plain, f, G, &w0), 0);
        EXPECT_LOOP(!memcmp(w, w0, (2 * G + 1) * row));
        if (which == 0) EXPECT_LOOP(window_ok(w, f, G));
        if (f == 0) {
            char m[512], m0[512];
            mapping_of(w, m, sizeof m);
            mapping_of(w0, m0, sizeof m0);
            EXPECT(strstr(m0, "shard-") != NULL);
            if (hi.bytes) EXPECT_INT(m[0], 0); /* anonymous */
        }
    }
    gather_all(ds, 2, 1);  /* k <= guard */
    gather_all(ds, 9, 2);  /* k > guard: the zeros written */
    loader_epoch(ds, 9, 1, 0);
    loader_epoch(ds, 2, 2, 0);
    loader_epoch(ds, 9, 2, 1);
    cxs_dataset_close(plain);
    cxs_dataset_close(ds);
}

TEST(float32_served_from_the_copy) { served_from_copy(0); }
END_TEST_

TEST(float16_served_from_the_copy) { served_from_copy(1); }
END_TEST_

TEST(bfloat16_served_from_the_copy) { served_from_copy(2); }
END_TEST_

TEST(small_budget_or_compressed_falls_back) {
    cxs_hugepage_info hi;
    cxs_dataset *ds = open_with(path[0], 4096, &hi);
    EXPECT_UINT(hi.bytes, 0);
    EXPECT_STR_HAS(hi.reason, "the budget is 4096");
    gather_all(ds, 9, 1);
    cxs_dataset_close(ds);
    ds = open_with(path[3], BUDGET, &hi);
    EXPECT_UINT(hi.bytes, 0);
    EXPECT_STR_HAS(hi.reason, "compressed");
    gather_all(ds, 9, 1);
    cxs_dataset_close(ds);
}
END_TEST_

TEST(huge_pages_off_falls_back) {
#ifdef CXS_TEST_HOOKS
    setenv("CXS_HUGEPAGE_FAULT", "off", 1);
    cxs_hugepage_info hi;
    cxs_dataset *ds = open_with(path[1], BUDGET, &hi);
    unsetenv("CXS_HUGEPAGE_FAULT");
    EXPECT_UINT(hi.bytes, 0);
    EXPECT_STR_HAS(hi.reason, "transparent huge pages are off");
    gather_all(ds, 9, 1);
    loader_epoch(ds, 2, 1, 0);
    cxs_dataset_close(ds);
#else
    printf("SKIP: huge_pages_off_falls_back (needs -Dtest_hooks=true)\n");
#endif
}
END_TEST_

/* Finds the n bytes of needle in file and writes the wn bytes
 * of with over their start, in place. */
static void overwrite_at(const char *file, const void *needle, size_t n, const void *with,
                         size_t wn) {
    FILE *f = fopen(file, "r+b");
    EXPECT(f != NULL);
    struct stat st;
    EXPECT_INT(fstat(fileno(f), &st), 0);
    uint8_t *buf = malloc((size_t)st.st_size);
    EXPECT(buf != NULL);
    EXPECT(fread(buf, 1, (size_t)st.st_size, f) == (size_t)st.st_size);
    uint8_t *at = memmem(buf, (size_t)st.st_size, needle, n);
    EXPECT(at != NULL);
    EXPECT_INT(fseek(f, (long)(at - buf), SEEK_SET), 0);
    EXPECT(fwrite(with, 1, wn, f) == wn);
    EXPECT_INT(fclose(f), 0);
    free(buf);
}

/* A flipped feature byte: refused by the first use of its block when
 * served from the mapping (its block sum), and by the open that copies and
 * hashes. */
TEST(damaged_feature_refused_by_the_copy) {
    char bad[400], cmd[1000], shard[500];
    snprintf(bad, sizeof bad, "%s/damaged", dir);
    snprintf(cmd, sizeof cmd, "cp -r '%s' '%s'", path[0], bad);
    EXPECT_INT(system(cmd), 0);
    snprintf(shard, sizeof shard, "%s/shard-000000.cxs", bad);
    /* the first row of utterance 0 (0.5, 1, 1.5): its first value becomes 2 */
    float r0[D] = {value(0, 0, 0), value(0, 0, 1), value(0, 0, 2)};
    float two = 2.0f;
    overwrite_at(shard, r0, sizeof r0, &two, sizeof two);
    cxs_hugepage_info hi;
    cxs_dataset *ds = open_with(bad, 0, &hi);
    const void *w = NULL;
    EXPECT_INT(cxs_dataset_window(ds, 0, 0, &w), CXS_E_CHECKSUM);
    EXPECT(w == NULL);
    cxs_dataset_close(ds);
    /* whether this machine makes copies at all (huge pages on) */
    cxs_hugepage_info probe;
    cxs_dataset_close(open_with(path[0], BUDGET, &probe));
    cxs_open_opts oo = {.cache_bytes = CXS_DEFAULT_CACHE_BYTES, .hugepage_budget = BUDGET};
    cxs_diag d = {0};
    ds = NULL;
    int rc = cxs_dataset_open_ex(bad, &oo, &ds, &d);
    if (!probe.bytes) { /* no copy, no hash: served as without the option */
        printf("NOTE: no copy in huge pages here (%s)\n", probe.reason);
        EXPECT_INT(rc, 0);
        cxs_dataset_close(ds);
        return;
    }
    EXPECT_INT(rc, CXS_E_CHECKSUM);
    EXPECT(ds == NULL);
    EXPECT_STR_HAS(d.message, "shard-000000.cxs: section FEATURES");
    EXPECT_STR_HAS(d.message, "checksum mismatch");
}
END_TEST_

/* Labels from a dataset served from its copy are the copy's through every
 * call, not only through gathers: a LABELS byte changed in the file after
 * the open is refused by a new plain open's first use of its block, and
 * seen by none of the copy's readers. */
TEST(labels_served_from_the_copy_by_every_call) {
    char mod[400], cmd[1000], shard[500];
    snprintf(mod, sizeof mod, "%s/relabelled", dir);
    snprintf(cmd, sizeof cmd, "cp -r '%s' '%s'", path[0], mod);
    EXPECT_INT(system(cmd), 0);
    cxs_hugepage_info hi;
    cxs_dataset *ds = open_with(mod, BUDGET, &hi);
    if (!hi.bytes) {
        printf("NOTE: no copy in huge pages here (%s)\n", hi.reason);
        cxs_dataset_close(ds);
        return;
    }
    /* LABELS: the labels of the first utterances, in order */
    uint8_t want[64];
    uint64_t n = 0;
    for (uint64_t u = 0; n < sizeof want; u++)
        for (uint64_t t = 0; t < frames_of(u) && n < sizeof want; t++) want[n++] = label(u, t);
    snprintf(shard, sizeof shard, "%s/shard-000000.cxs", mod);
    const uint8_t other = (uint8_t)((want[0] + 5) % V);
    overwrite_at(shard, want, sizeof want, &other, 1);
    cxs_hugepage_info h0;
    cxs_dataset *plain = open_with(mod, 0, &h0);
    uint32_t l;
    EXPECT_INT(cxs_dataset_label(plain, 0, &l), CXS_E_CHECKSUM); /* the file changed */
    cxs_dataset_close(plain);
    int64_t a = -1, b = -1;
    const uint64_t zero = 0;
    EXPECT_INT(cxs_dataset_label(ds, 0, &l), 0);
    EXPECT_UINT(l, want[0]);
    EXPECT_INT(cxs_dataset_labels(ds, 0, 1, &a), 0);
    EXPECT_INT(cxs_dataset_labels_of(ds, &zero, 1, &b), 0);
    EXPECT_INT(a, want[0]);
    EXPECT_INT(b, want[0]);
    const void *lab;
    uint64_t first, count;
    EXPECT_INT(cxs_dataset_shard_labels(ds, 0, &lab, &first, &count), 0);
    EXPECT_UINT(*(const uint8_t *)lab, want[0]);
    cxs_utterance ut;
    EXPECT_INT(cxs_dataset_utterance(ds, 0, &ut), 0);
    EXPECT_UINT(*(const uint8_t *)ut.labels, want[0]);
    gather_all(ds, 2, 1);
    cxs_dataset_close(ds);
}
END_TEST_

/* The dtype cases fork a child that serves from the parent's copy. */
static int fork_kind(const TTest *t) {
    return t == float32_served_from_the_copy || t == float16_served_from_the_copy ||
                   t == bfloat16_served_from_the_copy
               ? CXS_FORK_THREADS
               : CXS_FORK_NONE;
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/cxs-hugecopy-XXXXXX");
    if (!mkdtemp(dir)) return 3;
    static const char *names[4] = {"f32", "f16", "bf16", "zstd"};
    static const uint32_t dt[4] = {CXS_DTYPE_F32, CXS_DTYPE_F16, CXS_DTYPE_BF16, CXS_DTYPE_F32};
    for (int i = 0; i < 4; i++) {
        snprintf(path[i], sizeof path[i], "%s/%s", dir, names[i]);
        if (make(path[i], dt[i], i == 3 ? CXS_COMPRESSION_ZSTD : CXS_COMPRESSION_NONE)) return 3;
    }
    cum[0] = 0;
    for (uint64_t u = 0; u < NU; u++) cum[u + 1] = cum[u] + frames_of(u);
    const TTest *t[] = {float32_served_from_the_copy, float16_served_from_the_copy,
                        bfloat16_served_from_the_copy, small_budget_or_compressed_falls_back,
                        huge_pages_off_falls_back, damaged_feature_refused_by_the_copy,
                        labels_served_from_the_copy_by_every_call};
    const cxs_group g[] = {{"hugecopy", 120, NULL, NULL, t, CXS_N(t), fork_kind}};
    int failed = cxs_run_groups("hugecopy", g, CXS_N(g), 0);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) return 3;
    return failed ? 1 : 0;
}
