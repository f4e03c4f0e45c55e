/* Datasets at URLs in C (lib/remote/), so that the sanitizers and valgrind
 * see the fetch, the cache and its locks: a dataset served over HTTP by
 * Python's http.server on 127.0.0.1 is opened through an empty cache (every
 * window and utterance equal to the local dataset's), again from the
 * complete cache (the manifest only), with a progress callback that stops
 * the download, and listed, pruned and cleared; opened to stream and read
 * by two block loaders at once (the fetch locks and holds of
 * lib/remote/stream.c; each block fetched once); a 404 and a server gone
 * name the URL.  tests/python/remote_test.py covers nginx, S3 and
 * misbehaving servers.
 *
 * usage: url_test  (writer-made data, testdata.h; needs /usr/bin/python3,
 * exit 77 without it, or in a build without libcurl) */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctxshard.h"
#include "cxs_test.h"
#include "serve.h"
#include "testdata.h"

static char dir[256], packed[300], cache[300], url[300];
static pid_t server = -1;
static int port;

static void same(cxs_dataset *a, cxs_dataset *b) {
    cxs_info ia, ib;
    cxs_dataset_info(a, &ia);
    cxs_dataset_info(b, &ib);
    EXPECT_UINT(ia.num_frames, ib.num_frames);
    EXPECT_UINT(ia.num_utterances, ib.num_utterances);
    const uint32_t k = 2, row = (2 * k + 1) * ia.dim;
    float *xa = malloc(sizeof *xa * row * 256), *xb = malloc(sizeof *xb * row * 256);
    uint64_t fr[256];
    int64_t la[256], lb[256];
    for (uint64_t f0 = 0; f0 < ia.num_frames; f0 += 256) {
        size_t n = ia.num_frames - f0 < 256 ? (size_t)(ia.num_frames - f0) : 256;
        for (size_t i = 0; i < n; i++) fr[i] = f0 + i;
        EXPECT_INT(cxs_dataset_gather(a, fr, n, k, 0, 1, xa, la), 0);
        EXPECT_INT(cxs_dataset_gather(b, fr, n, k, 0, 1, xb, lb), 0);
        ck_assert(!memcmp(la, lb, sizeof la[0] * n));
        ck_assert(!memcmp(xa, xb, sizeof *xa * row * n));
    }
    free(xa);
    free(xb);
}

static int stop_at_once(void *user, uint64_t done, uint64_t total) {
    (void)done, (void)total;
    ++*(int *)user;
    return 1;
}

static int count(void *user, const cxs_cache_entry *e) {
    ck_assert(e->url && e->dir && e->bytes > 0);
    ++*(int *)user;
    return 0;
}

TEST(open_through_the_cache) {
    cxs_open_opts oo;
    cxs_open_opts_init(&oo);
    oo.cache_dir = cache;
    cxs_diag d;
    /* stopped by its progress callback: an error, nothing complete */
    int calls = 0;
    cxs_fetch_info fi;
    cxs_dataset *r = NULL, *l = NULL;
    int rc = cxs_url_fetch(url, &oo, stop_at_once, &calls, &fi, &r, &d);
    ck_assert_msg(rc == -ECANCELED || rc == 0, "%d %s", rc, d.message); /* 0: done within 100 ms */
    ck_assert(rc || r);
    cxs_dataset_close(r);
    /* then whole: the same values as the local dataset */
    EXPECT_INT(cxs_url_fetch(url, &oo, NULL, NULL, &fi, &r, &d), 0);
    EXPECT(fi.cached == 0 || rc == 0);
    ck_assert_msg(cxs_dataset_open(packed, &l, &d) == 0, "%s", d.message);
    same(r, l);
    const char *u, *loc;
    EXPECT_INT(cxs_dataset_url(r, &u, &loc), 1);
    EXPECT_STR_HAS(u, url);
    EXPECT_STR_HAS(loc, cache);
    EXPECT_INT(cxs_dataset_url(l, &u, &loc), 0);
    /* open: in use, so not pruned */
    uint64_t freed = 1;
    EXPECT_INT(cxs_cache_prune(cache, 0, &freed, &d), -EBUSY);
    EXPECT_UINT(freed, 0);
    cxs_dataset_close(r);
    /* complete now: the manifest only */
    EXPECT_INT(cxs_url_fetch(url, &oo, NULL, NULL, &fi, NULL, &d), 0);
    EXPECT_INT(fi.cached, 1);
    EXPECT(fi.bytes_fetched < fi.dataset_bytes / 10);
    ck_assert_msg(cxs_dataset_open_ex(url, &oo, &r, &d) == 0, "%s", d.message);
    same(r, l);
    cxs_dataset_close(r);
    cxs_dataset_close(l);
    int n = 0;
    EXPECT_INT(cxs_cache_list(cache, count, &n, &d), 0);
    EXPECT_INT(n, 1);
    EXPECT_INT(cxs_cache_clear(cache, &freed, &d), 0);
    EXPECT(freed > 0);
    n = 0;
    EXPECT_INT(cxs_cache_list(cache, count, &n, &d), 0);
    EXPECT_INT(n, 0);
}
END_TEST

/* One epoch of a block loader over ds: every batch equals the gather of
 * its frames from the local dataset l. */
static void block_epoch_exact(cxs_dataset *ds, cxs_dataset *l, uint64_t seed, uint64_t memory,
                              int *rc_out, cxs_diag *d) {
    cxs_sampler_opts so;
    cxs_sampler_opts_init(&so);
    so.kind = CXS_SAMPLER_BLOCK, so.seed = seed, so.memory_bytes = memory, so.blocks = 4;
    cxs_sampler *s;
    ck_assert_msg(cxs_sampler_create_ex(ds, &so, &s, d) == 0, "%s", d->message);
    cxs_loader_opts lo;
    cxs_loader_opts_init(&lo);
    lo.k = 2, lo.batch_size = 97, lo.threads = 2, lo.labels = 1;
    cxs_loader *ld;
    ck_assert_msg(cxs_loader_create_ex(ds, s, &lo, 0, 0, &ld, d) == 0, "%s", d->message);
    cxs_info in;
    cxs_dataset_info(l, &in);
    const size_t row = 5 * (size_t)in.dim;
    float *x = malloc(sizeof *x * row * 97);
    int64_t *y = malloc(sizeof *y * 97);
    const cxs_batch *b;
    uint64_t served = 0;
    int rc;
    while (!(rc = cxs_loader_next_ex(ld, &b, d)) && b) {
        EXPECT_INT(cxs_dataset_gather(l, b->frames, b->n, 2, 0, 1, x, y), 0);
        ck_assert(!memcmp(x, b->x, sizeof *x * row * b->n));
        ck_assert(!memcmp(y, b->y, sizeof *y * b->n));
        served += b->n;
    }
    *rc_out = rc;
    if (!rc) EXPECT_UINT(served, in.num_frames);
    free(x);
    free(y);
    cxs_loader_free(ld);
    cxs_sampler_free(s);
}

TEST(streamed_in_block_order) {
    char scache[400];
    snprintf(scache, sizeof scache, "%s/stream-cache", dir);
    cxs_open_opts oo;
    cxs_open_opts_init(&oo);
    oo.cache_dir = scache;
    oo.flags = CXS_OPEN_STREAM;
    cxs_diag d;
    cxs_fetch_info fi;
    cxs_dataset *r = NULL, *r2 = NULL, *l = NULL;
    ck_assert_msg(cxs_url_fetch(url, &oo, NULL, NULL, &fi, &r, &d) == 0, "%s", d.message);
    EXPECT_INT(fi.streamed, 1);
    EXPECT(fi.bytes_fetched < fi.dataset_bytes / 4); /* the metadata alone */
    ck_assert_msg(cxs_dataset_open(packed, &l, &d) == 0, "%s", d.message);
    cxs_info in;
    cxs_dataset_info(l, &in);
    EXPECT_UINT(cxs_dataset_fetched(r), 0);
    /* nothing else reads a streamed dataset's features */
    uint64_t f0 = 0;
    float w[5 * 64];
    EXPECT_INT(cxs_dataset_gather_ex(r, &f0, 1, 2, 0, NULL, 1, w, NULL, &d), CXS_E_UNSUPPORTED);
    EXPECT_STR_HAS(d.message, "open to stream");
    EXPECT_INT(cxs_dataset_verify(r, NULL, NULL, &d), CXS_E_UNSUPPORTED);
    /* two loaders at once, each block fetched once: each its own locks */
    int rc1, rc2;
    block_epoch_exact(r, l, 1, 1u << 20, &rc1, &d);
    ck_assert_msg(rc1 == 0, "%s", d.message);
    EXPECT_UINT(cxs_dataset_fetched(r), in.feature_bytes);
    ck_assert_msg(cxs_dataset_open_ex(url, &oo, &r2, &d) == 0, "%s", d.message);
    block_epoch_exact(r2, l, 2, 1u << 20, &rc2, &d);
    ck_assert_msg(rc2 == 0, "%s", d.message);
    EXPECT_UINT(cxs_dataset_fetched(r2), 0); /* the cache had every block */
    cxs_dataset_close(r2);
    /* the utterance loader in block mode, on a fresh stream of the same
     * entry (every block there now) and then of an empty one: each batch
     * equals the local dataset's utterances */
    uint64_t freed;
    for (int empty = 0; empty < 2; empty++) {
        if (empty) {
            cxs_dataset_close(r);
            EXPECT_INT(cxs_cache_clear(scache, &freed, &d), 0);
            ck_assert_msg(cxs_dataset_open_ex(url, &oo, &r, &d) == 0, "%s", d.message);
        }
        cxs_utt_sampler_opts uo;
        cxs_utt_sampler_opts_init(&uo);
        uo.kind = CXS_UTT_SHUFFLE, uo.seed = 4, uo.frame_budget = 4000, uo.memory_bytes = 1u << 20;
        uo.blocks = 4;
        cxs_utt_sampler *us;
        ck_assert_msg(cxs_utt_sampler_create(r, &uo, &us, &d) == 0, "%s", d.message);
        cxs_utt_loader_opts ulo;
        cxs_utt_loader_opts_init(&ulo);
        ulo.threads = 2;
        cxs_utt_loader *ul;
        ck_assert_msg(cxs_utt_loader_create_ex(r, us, &ulo, 0, 0, &ul, &d) == 0, "%s", d.message);
        const cxs_utt_batch *ub;
        uint64_t utts = 0;
        float *want = malloc(sizeof *want * 4000 * in.dim);
        while (!(rc1 = cxs_utt_loader_next_ex(ul, &ub, &d)) && ub) {
            for (size_t j = 0; j < ub->n; j++) {
                const uint64_t T = (uint64_t)ub->lengths[j];
                EXPECT_INT(cxs_dataset_read_features(l, ub->utts[j], 0, T, want), 0);
                /* (stored float32: the values as stored) */
                ck_assert(!memcmp(want, ub->x + j * ub->tmax * in.dim,
                                  sizeof *want * T * in.dim));
            }
            utts += ub->n;
        }
        ck_assert_msg(rc1 == 0, "%s", d.message);
        EXPECT_UINT(utts, in.num_utterances);
        free(want);
        cxs_utt_loader_free(ul);
        cxs_utt_sampler_free(us);
    }
    EXPECT_UINT(cxs_dataset_fetched(r), in.feature_bytes);
    cxs_dataset_close(r);
    /* resets to another epoch while the helper fetches (from an empty
     * cache): the stream's holds are the helper's alone, a worker that
     * meets the new epoch first leaving the old plan's releases to it
     * (ThreadSanitizer saw the worker's and the helper's updates race) */
    EXPECT_INT(cxs_cache_clear(scache, &freed, &d), 0);
    ck_assert_msg(cxs_dataset_open_ex(url, &oo, &r, &d) == 0, "%s", d.message);
    {
        cxs_sampler_opts so;
        cxs_sampler_opts_init(&so);
        so.kind = CXS_SAMPLER_BLOCK, so.seed = 8, so.memory_bytes = 1u << 20, so.blocks = 4;
        cxs_sampler *s;
        ck_assert_msg(cxs_sampler_create_ex(r, &so, &s, &d) == 0, "%s", d.message);
        cxs_loader_opts lo;
        cxs_loader_opts_init(&lo);
        lo.k = 2, lo.batch_size = 97, lo.threads = 2, lo.labels = 1;
        cxs_loader *ld;
        ck_assert_msg(cxs_loader_create_ex(r, s, &lo, 0, 0, &ld, &d) == 0, "%s", d.message);
        { /* 64 blocks: a batch across two rounds would draw on 65, more than
           * a streamed batch waits for; refused at create, not mid-epoch */
            cxs_sampler *s64;
            cxs_loader *l64;
            so.blocks = 64, so.memory_bytes = 64u << 20;
            ck_assert_msg(cxs_sampler_create_ex(r, &so, &s64, &d) == 0, "%s", d.message);
            EXPECT_INT(cxs_loader_create_ex(r, s64, &lo, 0, 0, &l64, &d), CXS_E_INVALID);
            EXPECT_STR_HAS(d.message, "at most 63");
            cxs_sampler_free(s64);
        }
        const size_t row = 5 * (size_t)in.dim;
        float *x = malloc(sizeof *x * row * 97);
        int64_t *y = malloc(sizeof *y * 97);
        const cxs_batch *b;
        uint64_t served = 0, epoch = 0;
        for (int k = 0; k < 8; k++) {
            for (int j = 0; j < 2; j++) {
                ck_assert_msg(cxs_loader_next_ex(ld, &b, &d) == 0 && b, "%s", d.message);
                EXPECT_INT(cxs_dataset_gather(l, b->frames, b->n, 2, 0, 1, x, y), 0);
                ck_assert(!memcmp(x, b->x, sizeof *x * row * b->n));
            }
            epoch = (uint64_t)(k + 1) % 3;
            EXPECT_INT(cxs_loader_reset(ld, epoch, 0), 0);
        }
        while (!(rc1 = cxs_loader_next_ex(ld, &b, &d)) && b) { /* the rest, whole */
            EXPECT_INT(cxs_dataset_gather(l, b->frames, b->n, 2, 0, 1, x, y), 0);
            ck_assert(!memcmp(x, b->x, sizeof *x * row * b->n));
            ck_assert(!memcmp(y, b->y, sizeof *y * b->n));
            served += b->n;
        }
        ck_assert_msg(rc1 == 0, "%s", d.message);
        EXPECT_UINT(served, in.num_frames);
        free(x), free(y);
        cxs_loader_free(ld);
        cxs_sampler_free(s);
    }
    cxs_dataset_close(r);
    /* a limit that holds the metadata but not a round: the loader says so */
    EXPECT_INT(cxs_cache_clear(scache, &freed, &d), 0);
    oo.cache_limit = fi.bytes_fetched + (160u << 10);
    ck_assert_msg(cxs_dataset_open_ex(url, &oo, &r, &d) == 0, "%s", d.message);
    block_epoch_exact(r, l, 1, 1u << 20, &rc1, &d);
    EXPECT_INT(rc1, -ENOSPC);
    EXPECT_STR_HAS(d.message, "cannot hold the blocks the block sampler reads at once");
    cxs_dataset_close(r);
    cxs_dataset_close(l);
    EXPECT_INT(cxs_cache_clear(scache, &freed, &d), 0);
}
END_TEST

TEST(refusals_name_the_url) {
    cxs_open_opts oo;
    cxs_open_opts_init(&oo);
    oo.cache_dir = cache;
    cxs_diag d;
    cxs_dataset *r = NULL;
    char missing[400];
    snprintf(missing, sizeof missing, "http://127.0.0.1:%d/nothing", port);
    EXPECT_INT(cxs_dataset_open_ex(missing, &oo, &r, &d), -ENOENT);
    EXPECT_STR_HAS(d.message, "/nothing/manifest.cxs: HTTP 404");
    EXPECT_INT(cxs_url_fetch(packed, &oo, NULL, NULL, NULL, NULL, &d), CXS_E_INVALID);
    EXPECT_STR_HAS(d.message, "not a URL");
    oo.cache_limit = 4096; /* smaller than the dataset */
    EXPECT_INT(cxs_dataset_open_ex(url, &oo, &r, &d), -ENOSPC);
    EXPECT_STR_HAS(d.message, "more than the cache limit");
    oo.cache_limit = 0;
    /* no server there: the retries end in an error naming the URL */
    char gone[400];
    snprintf(gone, sizeof gone, "http://127.0.0.1:%d/ds", serve_free_port());
    setenv("CTXSHARD_HTTP_RETRIES", "1", 1);
    EXPECT_INT(cxs_dataset_open_ex(gone, &oo, &r, &d), -EIO);
    EXPECT_STR_HAS(d.message, gone);
    EXPECT_STR_HAS(d.message, "after 2 attempts");
    unsetenv("CTXSHARD_HTTP_RETRIES");
}
END_TEST

int main(void) {
    int rc = serve_setup("url", dir, packed, cache, url, &port, &server);
    if (rc) return rc;
    const TTest *t[] = {open_through_the_cache, streamed_in_block_order, refusals_name_the_url};
    const cxs_group g[] = {{"url", 120, NULL, NULL, t, CXS_N(t), NULL}};
    int failed = cxs_run_groups("url", g, CXS_N(g), 0);
    if ((rc = serve_teardown(dir, &server))) return rc;
    return failed ? 1 : 0;
}
