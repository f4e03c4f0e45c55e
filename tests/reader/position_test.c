/* Positions, set_epoch and saved states of every loader (position.c): for
 * the frame loader, the utterance loader and both mixtures, a pass stopped
 * after k batches reports (epoch, start of batch k); a new loader seeking
 * that saved position serves the rest of the epoch exactly as a pass never
 * stopped; set_epoch keeps the place in the epoch a loader is positioned
 * in and starts any other from 0; a complete pass stands at (e + 1, 0);
 * seek refuses other versions, kinds, reserved words and starts past the
 * epoch.  Batches compared by a hash of all their bytes.  Data made with
 * the library's writer (testdata.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxshard.h"
#include "cxs_test.h"
#include "testdata.h"

#define NSRC 2
#define EPOCH 3u
static char dir[256], path[NSRC][300];
static cxs_dataset *ds[NSRC];
static cxs_sampler *fs;
static cxs_utt_sampler *us;
static cxs_mix *fm;
static cxs_mix_utt *um;

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 1099511628211u;
    return h;
}

/* One loader of any kind, behind the calls the test makes. */
typedef struct drv {
    const char *name;
    uint32_t kind;
    void *(*create)(uint64_t epoch, uint64_t start);
    int (*next)(void *l, uint64_t *hash); /* 0 with *hash, 1 at the end */
    int (*position)(void *l, cxs_position *p);
    int (*set_epoch)(void *l, uint64_t epoch);
    int (*seek)(void *l, const cxs_position *p, cxs_diag *d);
    void (*free)(void *l);
} drv;

static void *f_create(uint64_t e, uint64_t s) {
    cxs_loader_opts o;
    cxs_loader_opts_init(&o);
    o.k = 2, o.batch_size = 700, o.threads = 2, o.labels = 1;
    cxs_loader *l;
    cxs_diag d;
    if (cxs_loader_create_ex(ds[0], fs, &o, e, s, &l, &d)) ck_abort_msg("%s", d.message);
    return l;
}
static int f_next(void *l, uint64_t *h) {
    const cxs_batch *b;
    cxs_diag d;
    if (cxs_loader_next_ex(l, &b, &d)) ck_abort_msg("%s", d.message);
    if (!b) return 1;
    *h = fnv(fnv(fnv(14695981039346656037u, b->x, b->n * 5 * 8 * 4), b->y, b->n * 8), b->frames,
             b->n * 8);
    return 0;
}

static uint64_t utt_hash(const cxs_utt_batch *b) {
    uint64_t h = fnv(14695981039346656037u, b->x, b->n * b->tmax * 8 * 4);
    if (b->y) h = fnv(h, b->y, b->n * b->tmax * 8);
    return fnv(h, b->utts, b->n * 8);
}
static void *u_create(uint64_t e, uint64_t s) {
    cxs_utt_loader_opts o;
    cxs_utt_loader_opts_init(&o);
    o.threads = 2, o.labels = 1;
    cxs_utt_loader *l;
    cxs_diag d;
    if (cxs_utt_loader_create_ex(ds[0], us, &o, e, s, &l, &d)) ck_abort_msg("%s", d.message);
    return l;
}
static int u_next(void *l, uint64_t *h) {
    const cxs_utt_batch *b;
    cxs_diag d;
    if (cxs_utt_loader_next_ex(l, &b, &d)) ck_abort_msg("%s", d.message);
    if (!b) return 1;
    *h = utt_hash(b);
    return 0;
}

static void *m_create(uint64_t e, uint64_t s) {
    cxs_loader_opts o;
    cxs_loader_opts_init(&o);
    o.k = 1, o.threads = 2, o.labels = 1;
    cxs_mix_loader *l;
    cxs_diag d;
    if (cxs_mix_loader_create(fm, &o, e, s, &l, &d)) ck_abort_msg("%s", d.message);
    return l;
}
static int m_next(void *l, uint64_t *h) {
    const cxs_mix_frames *b;
    cxs_diag d;
    if (cxs_mix_loader_next(l, &b, &d)) ck_abort_msg("%s", d.message);
    if (!b) return 1;
    *h = fnv(fnv(fnv(14695981039346656037u, b->x, b->n * 3 * 8 * 4), b->frames, b->n * 8),
             b->source, b->n * 4);
    return 0;
}

static void *mu_create(uint64_t e, uint64_t s) {
    cxs_utt_loader_opts o;
    cxs_utt_loader_opts_init(&o);
    o.threads = 2;
    cxs_mix_utt_loader *l;
    cxs_diag d;
    if (cxs_mix_utt_loader_create(um, &o, e, s, &l, &d)) ck_abort_msg("%s", d.message);
    return l;
}
static int mu_next(void *l, uint64_t *h) {
    const cxs_mix_utts *b;
    cxs_diag d;
    if (cxs_mix_utt_loader_next(l, &b, &d)) ck_abort_msg("%s", d.message);
    if (!b) return 1;
    *h = fnv(utt_hash(b->batch), b->source, b->batch->n * 4);
    return 0;
}

/* The calls every kind has, typed for drv. */
#define CALLS(pre, T)                                                                           \
    static int pre##_position(void *l, cxs_position *p) { return cxs_##T##_position(l, p); }    \
    static int pre##_set_epoch(void *l, uint64_t e) { return cxs_##T##_set_epoch(l, e); }       \
    static int pre##_seek(void *l, const cxs_position *p, cxs_diag *d) {                        \
        return cxs_##T##_seek(l, p, d);                                                         \
    }                                                                                           \
    static void pre##_free(void *l) { cxs_##T##_free(l); }
CALLS(f, loader)
CALLS(u, utt_loader)
CALLS(m, mix_loader)
CALLS(mu, mix_utt_loader)

static const drv drivers[] = {
    {"frame loader", CXS_POSITION_FRAMES, f_create, f_next, f_position, f_set_epoch, f_seek, f_free},
    {"utterance loader", CXS_POSITION_UTTERANCES, u_create, u_next, u_position, u_set_epoch,
     u_seek, u_free},
    {"mixture loader", CXS_POSITION_MIX, m_create, m_next, m_position, m_set_epoch, m_seek,
     m_free},
    {"utterance mixture loader", CXS_POSITION_MIX_UTT, mu_create, mu_next, mu_position,
     mu_set_epoch, mu_seek, mu_free},
};

static void setup(void) {
    for (int i = 0; i < NSRC; i++) ck_assert_int_eq(cxs_dataset_open(path[i], &ds[i], NULL), 0);
    cxs_sampler_opts so;
    cxs_sampler_opts_init(&so);
    so.kind = CXS_SAMPLER_SHUFFLE, so.seed = 5;
    ck_assert_int_eq(cxs_sampler_create(ds[0], &so, &fs), 0);
    cxs_utt_sampler_opts uo;
    cxs_utt_sampler_opts_init(&uo);
    uo.kind = CXS_UTT_SHUFFLE, uo.seed = 5, uo.frame_budget = 9000;
    ck_assert_int_eq(cxs_utt_sampler_create(ds[0], &uo, &us, NULL), 0);
    cxs_mix_opts mo;
    cxs_mix_opts_init(&mo);
    mo.kind = CXS_SAMPLER_SHUFFLE, mo.seed = 5, mo.batch_size = 900;
    ck_assert_int_eq(cxs_mix_create((const cxs_dataset *const *)ds, NSRC, &mo, &fm, NULL), 0);
    cxs_mix_utt_opts muo;
    cxs_mix_utt_opts_init(&muo);
    muo.kind = CXS_UTT_SHUFFLE, muo.seed = 5, muo.frame_budget = 9000;
    ck_assert_int_eq(cxs_mix_utt_create((const cxs_dataset *const *)ds, NSRC, &muo, &um, NULL), 0);
}
static void teardown(void) {
    cxs_mix_utt_free(um), cxs_mix_free(fm), cxs_utt_sampler_free(us), cxs_sampler_free(fs);
    for (int i = 0; i < NSRC; i++) cxs_dataset_close(ds[i]);
}

/* An uninterrupted pass of EPOCH: its batches' hashes; *n of them. */
static uint64_t *pass(const drv *v, uint64_t *n) {
    uint64_t *h = malloc(4096 * sizeof *h);
    void *l = v->create(EPOCH, 0);
    *n = 0;
    while (*n < 4096 && !v->next(l, h + *n)) ++*n;
    v->free(l);
    ck_assert_msg(*n >= 6, "%s: %llu batches, too few to stop in", v->name, (unsigned long long)*n);
    return h;
}

static void expect_at(const drv *v, void *l, uint64_t epoch, uint64_t next) {
    cxs_position p;
    EXPECT_INT(v->position(l, &p), 0);
    ck_assert_msg(p.version == CXS_POSITION_VERSION && p.kind == v->kind && p.epoch == epoch &&
                      p.next == next && !p.reserved[0] && !p.reserved[1],
                  "%s: at (%llu, %llu), expected (%llu, %llu)", v->name,
                  (unsigned long long)p.epoch, (unsigned long long)p.next,
                  (unsigned long long)epoch, (unsigned long long)next);
}

/* The batches from here to the end equal ref[from..n). */
static void expect_rest(const drv *v, void *l, const uint64_t *ref, uint64_t from, uint64_t n) {
    uint64_t h, i = from;
    while (!v->next(l, &h)) {
        ck_assert_msg(i < n && h == ref[i], "%s: batch %llu differs from the uninterrupted pass",
                      v->name, (unsigned long long)i);
        i++;
    }
    ck_assert_msg(i == n, "%s: %llu batches, the uninterrupted pass had %llu", v->name,
                  (unsigned long long)i, (unsigned long long)n);
}

/* Stopped at k, saved, a new loader made elsewhere seeks it: the rest of
 * the epoch exactly; a complete pass stands at the next epoch. */
TEST(resume_every_loader) {
    for (size_t t = 0; t < CXS_N(drivers); t++) {
        const drv *v = &drivers[t];
        uint64_t n, *ref = pass(v, &n), h;
        uint64_t stride = t == 0 ? 700 : 1;
        for (uint64_t k = 1; k < n; k += n / 3) {
            void *l = v->create(EPOCH, 0);
            for (uint64_t i = 0; i < k; i++) EXPECT_INT(v->next(l, &h), 0);
            cxs_position saved;
            EXPECT_INT(v->position(l, &saved), 0);
            EXPECT_UINT(saved.epoch, EPOCH);
            EXPECT_UINT(saved.next, k * stride);
            v->free(l);
            l = v->create(0, 0); /* another epoch: seek moves it */
            cxs_diag d;
            EXPECT_INT(v->seek(l, &saved, &d), 0);
            expect_at(v, l, EPOCH, k * stride);
            expect_rest(v, l, ref, k, n);
            expect_at(v, l, EPOCH + 1, 0);
            v->free(l);
        }
        free(ref);
    }
}
END_TEST

/* set_epoch(e) keeps a loader positioned in e where it stands; any other
 * epoch starts at 0; after a complete pass of e, set_epoch(e) serves e
 * again and set_epoch(e + 1) starts e + 1. */
TEST(set_epoch_rule) {
    for (size_t t = 0; t < CXS_N(drivers); t++) {
        const drv *v = &drivers[t];
        uint64_t n, *ref = pass(v, &n), h;
        uint64_t stride = t == 0 ? 700 : 1;
        void *l = v->create(0, 0);
        cxs_position saved = {CXS_POSITION_VERSION, v->kind, EPOCH, 2 * stride, {0}};
        EXPECT_INT(v->seek(l, &saved, NULL), 0);
        EXPECT_INT(v->set_epoch(l, EPOCH), 0); /* the resumed run's set_epoch: kept */
        expect_at(v, l, EPOCH, 2 * stride);
        EXPECT_INT(v->next(l, &h), 0);
        EXPECT(h == ref[2]);
        EXPECT_INT(v->set_epoch(l, EPOCH), 0); /* stopped mid-way: kept */
        expect_rest(v, l, ref, 3, n);
        expect_at(v, l, EPOCH + 1, 0);
        EXPECT_INT(v->set_epoch(l, EPOCH), 0); /* complete: e again from its start */
        expect_at(v, l, EPOCH, 0);
        expect_rest(v, l, ref, 0, n);
        EXPECT_INT(v->seek(l, &saved, NULL), 0);
        EXPECT_INT(v->set_epoch(l, EPOCH + 1), 0); /* another epoch: from 0 */
        expect_at(v, l, EPOCH + 1, 0);
        EXPECT_INT(v->set_epoch(l, EPOCH), 0); /* positioned in e + 1 now: e from 0 */
        expect_at(v, l, EPOCH, 0);
        v->free(l);
        free(ref);
    }
}
END_TEST

/* seek refuses what it cannot continue, saying why; the rule alone. */
TEST(seek_refusals) {
    for (size_t t = 0; t < CXS_N(drivers); t++) {
        const drv *v = &drivers[t];
        void *l = v->create(EPOCH, 0);
        cxs_diag d;
        cxs_position p = {CXS_POSITION_VERSION + 1, v->kind, 1, 0, {0}};
        EXPECT_INT(v->seek(l, &p, &d), CXS_E_INVALID);
        EXPECT_STR_HAS(d.message, "position version 2");
        p.version = CXS_POSITION_VERSION, p.kind = v->kind % 4 + 1;
        EXPECT_INT(v->seek(l, &p, &d), CXS_E_INVALID);
        EXPECT_STR_HAS(d.message, "another kind of loader");
        p.kind = v->kind, p.reserved[1] = 1;
        EXPECT_INT(v->seek(l, &p, &d), CXS_E_INVALID);
        EXPECT_STR_HAS(d.message, "cxs_position: reserved word 1");
        p.reserved[1] = 0, p.next = UINT64_MAX;
        EXPECT_INT(v->seek(l, &p, &d), CXS_E_INVALID);
        EXPECT_STR_HAS(d.message, "is past");
        EXPECT_INT(v->seek(l, NULL, &d), CXS_E_INVALID);
        expect_at(v, l, EPOCH, 0); /* a refused seek moved nothing */
        v->free(l);
    }
    cxs_position at = {CXS_POSITION_VERSION, CXS_POSITION_FRAMES, 4, 77, {0}};
    EXPECT_UINT(cxs_position_start(&at, 4), 77);
    EXPECT_UINT(cxs_position_start(&at, 3), 0);
    EXPECT_UINT(cxs_position_start(NULL, 4), 0);
    EXPECT_INT(cxs_loader_position(NULL, &at), CXS_E_INVALID);
}
END_TEST

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/cxs-position-XXXXXX");
    if (!mkdtemp(dir)) return 3;
    for (int i = 0; i < NSRC; i++) {
        snprintf(path[i], sizeof path[i], "%s/src%d", dir, i);
        td_opts o = {.utts = 30 + 20 * (uint32_t)i, .dim = 8, .seed = 90 + (uint64_t)i};
        if (td_make(path[i], &o)) return 3;
    }
    const TTest *tests[] = {resume_every_loader, set_epoch_rule, seek_refusals};
    const cxs_group g[] = {{"position", 300, setup, teardown, tests, CXS_N(tests), NULL}};
    int failed = cxs_run_groups("position", g, CXS_N(g), 0);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) return 3;
    return failed ? 1 : 0;
}
