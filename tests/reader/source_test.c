/* The block source's seams (lib/source/source.h), on a dataset streamed
 * from Python's http.server on 127.0.0.1 (serve.h): the holds that the
 * loaders take through it must keep a block in the cache exactly as long
 * as some reader uses it, and a block let go between the read-ahead and
 * its use must come back before a byte of it is served.  A second open
 * of the same cache entry with a small limit plays the other process
 * that evicts (its cxs_src_evict punches every block no reader holds).
 * A block evicted is a hole, which reads as zeros: present() compares the
 * streamed mapping with the local dataset's bytes, absent() finds only
 * zeros.
 *
 * Linked with the library's internal layers (not the shared library,
 * whose internal symbols are hidden).
 *
 * usage: source_test  (writer-made data, testdata.h; needs /usr/bin/python3,
 * exit 77 without it, or in a build without libcurl) */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxshard.h"
#include "cxs_test.h"
#include "serve.h"
#include "source.h"

static char dir[256], packed[300], url[300], scache[300];
static pid_t server = -1;
static int port;

/* Bytes [lo, hi) of shard s of the streamed r equal the local l's (no
 * hole where a block was evicted). */
static int present(const cxs_dataset *r, const cxs_dataset *l, uint32_t s, uint64_t lo,
                   uint64_t hi) {
    return !memcmp(r->shards[s].map + lo, l->shards[s].map + lo, (size_t)(hi - lo));
}

/* Bytes [lo, hi) of shard s of the streamed r are holes, every one (no
 * block of them is held or left behind). */
static int absent(const cxs_dataset *r, uint32_t s, uint64_t lo, uint64_t hi) {
    for (uint64_t i = lo; i < hi; i++)
        if (r->shards[s].map[i]) return 0;
    return 1;
}

/* Utterance u's FEATURES bytes [*lo, *hi) in its shard. */
static uint32_t range_of(const cxs_dataset *ds, uint64_t u, uint64_t *lo, uint64_t *hi) {
    cxs_uloc ul = cxs_utt_at(ds, u);
    *lo = (uint64_t)(cxs_loc_row_ptr(ds, &ul, 0) - ds->shards[ul.shard].map);
    *hi = *lo + ul.T * ds->row_bytes;
    return ul.shard;
}

typedef struct fixture {
    cxs_dataset *r, *ev, *l; /* streamed; the evictor's open of it; local */
    cxs_src a, b, evict;
    uint64_t utts[64];       /* shard 0's utterances */
    size_t n;
    uint64_t lo, hi;         /* their bytes */
} fixture;

static void setup(fixture *f) {
    memset(f, 0, sizeof *f);
    cxs_diag d;
    uint64_t freed;
    EXPECT_INT(cxs_cache_clear(scache, &freed, &d), 0);
    cxs_open_opts oo;
    cxs_open_opts_init(&oo);
    oo.cache_dir = scache;
    oo.flags = CXS_OPEN_STREAM;
    cxs_fetch_info fi;
    ck_assert_msg(cxs_url_fetch(url, &oo, NULL, NULL, &fi, &f->r, &d) == 0, "%s", d.message);
    EXPECT_INT(fi.streamed, 1);
    /* the evictor: a limit the metadata alone is over, so that its evict
     * punches every block nobody holds */
    oo.cache_limit = 1;
    ck_assert_msg(cxs_dataset_open_ex(url, &oo, &f->ev, &d) == 0, "%s", d.message);
    ck_assert_msg(cxs_dataset_open(packed, &f->l, &d) == 0, "%s", d.message);
    EXPECT_INT(cxs_src_init(&f->a, f->r, CXS_SRC_READ), 0);
    EXPECT_INT(cxs_src_init(&f->b, f->r, 0), 0);
    EXPECT_INT(cxs_src_init(&f->evict, f->ev, CXS_SRC_FDS), 0);
    for (uint64_t u = 0; u < f->r->meta.num_utterances && f->n < 64; u++) {
        uint64_t lo, hi;
        if (range_of(f->r, u, &lo, &hi) != 0) break;
        if (!f->n) f->lo = lo;
        f->hi = hi;
        f->utts[f->n++] = u;
    }
    ck_assert_msg(f->n >= 3, "shard 0 holds %zu utterances", f->n);
}

static void teardown(fixture *f) {
    cxs_src_destroy(&f->a, 0);
    cxs_src_destroy(&f->b, 0);
    cxs_src_destroy(&f->evict, 0);
    cxs_dataset_close(f->r);
    cxs_dataset_close(f->ev);
    cxs_dataset_close(f->l);
}

/* The utterance loader's helper fetches a group ahead and lets it go
 * (fetched, not held); another reader's eviction can take it before a
 * worker holds the batch: the worker's hold fetches it again, and while
 * the batch is held no eviction takes it. */
TEST(evicted_between_readahead_and_use) {
    fixture f;
    setup(&f);
    cxs_diag d;
    const int stop = 0;
    ck_assert_msg(cxs_src_read(&f.a, 0, f.lo, f.hi - f.lo, &stop, NULL, NULL, &d) == 0, "%s",
                  d.message);
    cxs_src_release(&f.a, 0, f.lo, f.hi, 0);
    EXPECT(present(f.r, f.l, 0, f.lo, f.hi));
    const uint64_t before = cxs_dataset_fetched(f.r);
    EXPECT(before >= f.hi - f.lo);
    cxs_src_evict(&f.evict, 0, f.lo, f.hi - f.lo);
    EXPECT(absent(f.r, 0, f.lo, f.hi));
    cxs_src_batch h = {0};
    ck_assert_msg(cxs_src_batch_hold(&f.a, &h, f.utts, f.n, &stop, &d) == 0, "%s", d.message);
    EXPECT(cxs_dataset_fetched(f.r) - before >= f.hi - f.lo); /* fetched again */
    EXPECT(present(f.r, f.l, 0, f.lo, f.hi));
    cxs_src_evict(&f.evict, 0, f.lo, f.hi - f.lo); /* held: nothing goes */
    EXPECT(present(f.r, f.l, 0, f.lo, f.hi));
    cxs_src_batch_release(&f.a, &h);
    cxs_src_evict(&f.evict, 0, f.lo, f.hi - f.lo); /* let go: all of it goes */
    EXPECT(absent(f.r, 0, f.lo, f.hi));
    cxs_src_batch_free(&h);
    teardown(&f);
}
END_TEST

/* A batch's holds are merged ranges (utterances sharing a sum block take
 * it once): releasing the batch must leave every other hold on those
 * blocks standing, the same user's (the frame loader's helper holding a
 * block it read) and another user's (another worker's batch). */
TEST(a_release_leaves_the_other_holds) {
    fixture f;
    setup(&f);
    cxs_diag d;
    const int stop = 0;
    uint64_t lo0, hi0, lo1, hi1;
    range_of(f.r, f.utts[0], &lo0, &hi0);
    range_of(f.r, f.utts[f.n - 1], &lo1, &hi1);
    for (int other = 0; other < 2; other++) {
        cxs_src *keep = other ? &f.b : &f.a;
        ck_assert_msg(cxs_src_hold(keep, 0, lo0, hi0, &stop, &d) == 0, "%s", d.message);
        cxs_src_batch h = {0};
        ck_assert_msg(cxs_src_batch_hold(&f.a, &h, f.utts, f.n, &stop, &d) == 0, "%s", d.message);
        cxs_src_batch_release(&f.a, &h);
        cxs_src_batch_free(&h);
        cxs_src_evict(&f.evict, 0, f.lo, f.hi - f.lo);
        EXPECT(present(f.r, f.l, 0, lo0, hi0));  /* still held */
        EXPECT(!present(f.r, f.l, 0, lo1, hi1)); /* (a block of its own: evicted) */
        cxs_src_release(keep, 0, lo0, hi0, 0);
        cxs_src_evict(&f.evict, 0, f.lo, f.hi - f.lo);
        EXPECT(absent(f.r, 0, f.lo, f.hi)); /* no hold left behind */
    }
    teardown(&f);
}
END_TEST

static int entry_bytes(void *user, const cxs_cache_entry *e) {
    *(uint64_t *)user += e->bytes;
    return 0;
}

/* Room is made least recently held first: under a limit that holds the
 * metadata and two sum blocks, blocks 2 then 0 of shard 0 are held and
 * let go, and the hold of block 1 evicts block 2 (held first), not block
 * 0 (before: the lowest shard and block first, whatever was held when). */
TEST(room_is_made_least_recently_used_first) {
    fixture f;
    setup(&f);
    cxs_diag d;
    const int stop = 0;
    const cxs_bsum_entry *e = cxs_blocksums_find(&f.r->shards[0].bs, CXS_SEC_FEATURES);
    ck_assert_msg(e && e->num_blocks >= 3, "shard 0 has fewer than 3 sum blocks");
    const uint64_t B = 1ull << e->shift, base = e->sec->offset;
    uint64_t meta = 0;
    EXPECT_INT(cxs_cache_list(scache, entry_bytes, &meta, &d), 0);
    cxs_open_opts oo;
    cxs_open_opts_init(&oo);
    oo.cache_dir = scache;
    oo.flags = CXS_OPEN_STREAM;
    /* (a fetch also asks for a page per shard file: stream.c, make_room) */
    oo.cache_limit = meta + 2 * B + f.r->meta.num_shards * 4096ull + B / 2;
    cxs_dataset *lim;
    ck_assert_msg(cxs_dataset_open_ex(url, &oo, &lim, &d) == 0, "%s", d.message);
    cxs_src s;
    EXPECT_INT(cxs_src_init(&s, lim, 0), 0);
    const uint64_t order[3] = {2, 0, 1};
    for (int i = 0; i < 3; i++) {
        const uint64_t lo = base + order[i] * B;
        ck_assert_msg(cxs_src_hold(&s, 0, lo, lo + B, &stop, &d) == 0, "%s", d.message);
        cxs_src_release(&s, 0, lo, lo + B, 0);
    }
    EXPECT(present(lim, f.l, 0, base, base + 2 * B));   /* blocks 0 and 1 */
    EXPECT(absent(lim, 0, base + 2 * B, base + 3 * B)); /* block 2: the least recent */
    cxs_src_destroy(&s, 0);
    cxs_dataset_close(lim);
    teardown(&f);
}
END_TEST

/* A hold that fails (the server gone) holds nothing: the blocks it had
 * taken before the failure are let go, and evictable.  (The last test:
 * the server stays down.) */
TEST(a_failed_hold_holds_nothing) {
    fixture f;
    setup(&f);
    cxs_diag d;
    const int stop = 0;
    uint64_t lo0, hi0;
    range_of(f.r, f.utts[0], &lo0, &hi0);
    /* the first utterance there, the rest to be fetched from no server */
    ck_assert_msg(cxs_src_hold(&f.b, 0, lo0, hi0, &stop, &d) == 0, "%s", d.message);
    cxs_src_release(&f.b, 0, lo0, hi0, 0);
    serve_stop(&server);
    cxs_src_batch h = {0};
    EXPECT(cxs_src_batch_hold(&f.a, &h, f.utts, f.n, &stop, &d) != 0);
    EXPECT_STR_HAS(d.message, "127.0.0.1");
    EXPECT_UINT(h.n, 0);
    cxs_src_evict(&f.evict, 0, f.lo, f.hi - f.lo);
    EXPECT(absent(f.r, 0, f.lo, f.hi)); /* not held by the failed batch */
    cxs_src_batch_free(&h);
    teardown(&f);
}
END_TEST

int main(void) {
    char cache[300];
    int rc = serve_setup("source", dir, packed, cache, url, &port, &server);
    if (rc) return rc;
    snprintf(scache, sizeof scache, "%s/stream-cache", dir);
    setenv("CTXSHARD_HTTP_RETRIES", "0", 1); /* (the failed hold: at once) */
    const TTest *t[] = {evicted_between_readahead_and_use, a_release_leaves_the_other_holds,
                        room_is_made_least_recently_used_first, a_failed_hold_holds_nothing};
    const cxs_group g[] = {{"source", 120, NULL, NULL, t, CXS_N(t), NULL}};
    int failed = cxs_run_groups("source", g, CXS_N(g), 0);
    if ((rc = serve_teardown(dir, &server))) return rc;
    return failed ? 1 : 0;
}
