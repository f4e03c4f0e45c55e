/* Utterance mixtures (cxs_mix_utt, cxs_mix_utt_loader): per epoch each
 * source gives exactly its quota of utterances; no utterance twice within
 * a pass over its source; every batch within the frame budget and, with
 * one bucket, within two utterances of the shares; deterministic from
 * (seed, epoch); resume 2 -> 3 and 3 -> 1 ranks mid-epoch with nothing
 * repeated or lost; the loader's padded batches (features, lengths, frame
 * labels, CTC targets, sources) against each dataset's own pad_batch.
 * Data made with the library's writer (testdata.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxshard.h"
#include "cxs_test.h"
#include "testdata.h"

#define NSRC 3
#define BUDGET 12000u
static char dir[256], path[NSRC][300], wide[300];
static cxs_dataset *ds[NSRC];
static uint64_t nutt[NSRC];

static void setup(void) {
    for (int i = 0; i < NSRC; i++) {
        ck_assert_int_eq(cxs_dataset_open(path[i], &ds[i], NULL), 0);
        cxs_info in;
        cxs_dataset_info(ds[i], &in);
        nutt[i] = in.num_utterances;
    }
}
static void teardown(void) {
    for (int i = 0; i < NSRC; i++) cxs_dataset_close(ds[i]);
}

typedef struct cfg {
    const double *wt;
    double temp;
    uint64_t esize; /* 0: the sum */
    uint32_t buckets, w, kind, max_batch, stratify;
    uint64_t memory; /* block order: the budget (0: none) */
    uint32_t blocks;
} cfg;
static const double w311[NSRC] = {3, 1, 1}, w105[NSRC] = {1, 0, 5};
static const cfg cfgs[] = {
    {NULL, 0, 0, 0, 1, CXS_UTT_SHUFFLE, 0, 0, 0, 0},   {NULL, 0, 0, 1, 2, CXS_UTT_SHUFFLE, 0, 0, 0, 0},
    {w311, 0, 0, 0, 3, CXS_UTT_SHUFFLE, 0, 0, 0, 0},   {w311, 0, 700, 4, 5, CXS_UTT_SHUFFLE, 0, 0, 0, 0},
    {w105, 0, 0, 1, 4, CXS_UTT_SHUFFLE, 3, 0, 0, 0},   {NULL, 2, 0, 8, 8, CXS_UTT_SHUFFLE, 0, 0, 0, 0},
    {NULL, 0, 97, 0, 3, CXS_UTT_SEQUENTIAL, 0, 0, 0, 0}, {w311, 0, 0, 1, 7, CXS_UTT_SEQUENTIAL, 5, 0, 0, 0},
    {w311, 0, 0, 4, 3, CXS_UTT_SHUFFLE, 0, CXS_MIX_STRATIFY_LENGTH, 0, 0},
    {NULL, 0, 500, 0, 2, CXS_UTT_SHUFFLE, 0, CXS_MIX_STRATIFY_LENGTH, 0, 0},
    /* block order: the epoch in windows of about half a group */
    {NULL, 0, 0, 0, 1, CXS_UTT_SHUFFLE, 0, 0, 2500000, 2},
    {w311, 0, 700, 4, 3, CXS_UTT_SHUFFLE, 0, 0, 4u << 20, 0},
    {NULL, 2, 0, 0, 5, CXS_UTT_SHUFFLE, 0, CXS_MIX_STRATIFY_LENGTH, 2000000, 3},
    {w105, 0, 0, 0, 2, CXS_UTT_SHUFFLE, 0, 0, 1200000, 1},
};

static cxs_mix_utt *mk(const cfg *c, uint32_t rank, uint32_t drop, uint64_t origin,
                       uint64_t seed) {
    cxs_mix_utt_opts o;
    cxs_mix_utt_opts_init(&o);
    o.kind = c->kind;
    o.seed = seed;
    o.frame_budget = BUDGET;
    o.max_batch = c->max_batch;
    o.buckets = c->buckets;
    o.weights = c->wt;
    o.temperature = c->temp;
    o.epoch_size = c->esize;
    o.rank = rank;
    o.world_size = c->w;
    o.drop_last = drop;
    o.origin = origin;
    o.stratify = c->stratify;
    o.memory_bytes = c->memory;
    o.blocks = c->blocks;
    cxs_mix_utt *m;
    cxs_diag d;
    int rc = cxs_mix_utt_create((const cxs_dataset *const *)ds, NSRC, &o, &m, &d);
    if (rc) ck_abort_msg("cxs_mix_utt_create: %s", d.message);
    return m;
}

static uint64_t frames_of(uint32_t src, uint64_t u) {
    cxs_utterance ut;
    ck_assert_int_eq(cxs_dataset_utterance(ds[src], u, &ut), 0);
    return ut.num_frames;
}

/* One rank's batches of an epoch from position `from` to `to`: every
 * utterance as (source << 48 | utt); the batches' global places, sizes
 * and repeat flags. */
typedef struct got {
    uint64_t *s, *g;
    uint32_t *bn;
    uint8_t *rep;
    uint64_t n, nb;
} got;

static got take(const cxs_mix_utt *m, uint64_t epoch, uint64_t from, uint64_t to) {
    const uint32_t C = cxs_mix_utt_max_batch(m);
    got r = {malloc((to - from) * C * 8 + 8), malloc((to - from) * 8 + 8),
             malloc((to - from) * 4 + 4), malloc(to - from + 1), 0, 0};
    uint64_t *u = malloc(C * 8);
    uint32_t *src = malloc(C * 4), n, rep;
    for (uint64_t p = from; p < to; p++) {
        uint64_t g, tmax = 0;
        EXPECT_LOOP(cxs_mix_utt_batch(m, epoch, p, u, src, C, &n, &g, &rep) == 0);
        EXPECT_LOOP(n >= 1);
        for (uint32_t j = 0; j < n; j++) {
            EXPECT_LOOP(src[j] < NSRC && u[j] < nutt[src[j]]);
            EXPECT_LOOP(j == 0 || src[j] >= src[j - 1]); /* grouped by source */
            uint64_t T = frames_of(src[j], u[j]);
            if (T > tmax) tmax = T;
            r.s[r.n++] = (uint64_t)src[j] << 48 | u[j];
        }
        EXPECT_LOOP(n * tmax <= BUDGET);
        r.g[r.nb] = g;
        r.rep[r.nb] = (uint8_t)rep;
        r.bn[r.nb++] = n;
    }
    free(u), free(src);
    return r;
}
static void got_free(got *r) { free(r->s), free(r->g), free(r->bn), free(r->rep); }

static int cmp64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Quotas per epoch, passes, the budget, the ranks' equal counts; strata
 * (stratify by shares, or one bucket): every batch within two utterances
 * of the shares, every rank's count of each source over the epoch within
 * one of its share of the utterances it was served; over every
 * configuration. */
TEST(quotas_passes_strata_ranks) {
    double worst_batch = 0, worst_rank = 0;
    for (size_t c = 0; c < sizeof cfgs / sizeof *cfgs; c++) {
        const cfg *k = &cfgs[c];
        const uint32_t epochs = 3;
        uint64_t *hist[NSRC];
        for (int i = 0; i < NSRC; i++) hist[i] = calloc(nutt[i], sizeof **hist);
        uint64_t q[NSRC], E = 0;
        for (uint32_t e = 0; e < epochs; e++) {
            uint64_t count[NSRC] = {0}, glob = 0, len0 = 0;
            uint64_t rk[16][NSRC] = {{0}}; /* per rank, its epoch (repeats left out) */
            unsigned char *seen = NULL;
            for (uint32_t r = 0; r < k->w; r++) {
                cxs_mix_utt *m = mk(k, r, 0, 0, 5);
                E = cxs_mix_utt_epoch_size(m);
                for (int i = 0; i < NSRC; i++) q[i] = cxs_mix_utt_quota(m, i);
                uint64_t len;
                EXPECT_INT(cxs_mix_utt_length(m, e, &glob, &len), 0);
                if (!r) len0 = len, seen = calloc(glob, 1);
                EXPECT_UINT(len, len0); /* every rank as many batches */
                got g = take(m, e, 0, len);
                for (uint64_t b = 0, at = 0; b < g.nb; at += g.bn[b], b++) {
                    EXPECT_LOOP(g.g[b] < glob);
                    if (g.rep[b]) continue; /* the final round's padding */
                    EXPECT_LOOP(!seen[g.g[b]]);
                    seen[g.g[b]] = 1;
                    uint64_t cnt[NSRC] = {0};
                    for (uint32_t j = 0; j < g.bn[b]; j++) {
                        const uint64_t v = g.s[at + j];
                        cnt[v >> 48]++;
                        hist[v >> 48][v & 0xffffffffffffull]++;
                    }
                    const int strata = k->buckets == 1 || k->stratify == CXS_MIX_STRATIFY_SHARES;
                    for (int i = 0; i < NSRC; i++) {
                        count[i] += cnt[i];
                        rk[r][i] += cnt[i];
                        double dev = fabs((double)cnt[i] - (double)g.bn[b] * q[i] / E);
                        if (strata && dev > worst_batch) worst_batch = dev;
                        if (strata) EXPECT_LOOP(dev < 2);
                    }
                }
                got_free(&g);
                cxs_mix_utt_free(m);
            }
            for (uint64_t b = 0; b < glob; b++) EXPECT_LOOP(seen[b]); /* every batch served */
            /* every rank within one utterance of its share of each source
             * of what it was served (the ranks' dealing; before it, 3.0
             * off here) */
            for (uint32_t r = 0; r < k->w && k->stratify == CXS_MIX_STRATIFY_SHARES; r++) {
                uint64_t tot = 0;
                for (int i = 0; i < NSRC; i++) tot += rk[r][i];
                for (int i = 0; i < NSRC; i++) {
                    double dev = fabs((double)rk[r][i] - (double)tot * q[i] / E);
                    if (dev > worst_rank) worst_rank = dev;
                    if (!(dev <= 1))
                        ck_abort_msg("cfg %zu epoch %u rank %u source %d: %llu of its share "
                                     "%.2f", c, e, r, i, (unsigned long long)rk[r][i],
                                     (double)tot * q[i] / E);
                }
            }
            free(seen);
            uint64_t sum = 0;
            for (int i = 0; i < NSRC; i++) {
                EXPECT_UINT(count[i], q[i]);
                sum += q[i];
            }
            EXPECT_UINT(sum, E);
        }
        /* the passes: over the epochs, every utterance of a source as often
         * as any other, to within one (none twice before all once) */
        for (int i = 0; i < NSRC; i++) {
            uint64_t lo = UINT64_MAX, hi = 0;
            for (uint64_t u = 0; u < nutt[i]; u++) {
                if (hist[i][u] < lo) lo = hist[i][u];
                if (hist[i][u] > hi) hi = hist[i][u];
            }
            if (q[i]) EXPECT_LOOP(hi - lo <= 1);
            EXPECT_UINT(lo + (hi > lo), (epochs * q[i] + nutt[i] - 1) / nutt[i]);
            free(hist[i]);
        }
    }
    printf("utterance mixture: worst batch deviation from the shares %.3f utterances, worst "
           "rank deviation from its share of what it was served %.3f\n", worst_batch, worst_rank);
}
END_TEST

/* (seed, epoch) fix the order; another seed or epoch changes it; also in
 * block order. */
static void deterministic(const cfg *k) {
    cxs_mix_utt *a = mk(k, 1, 0, 0, 9), *b = mk(k, 1, 0, 0, 9), *c = mk(k, 1, 0, 0, 10);
    uint64_t la, lb;
    EXPECT_INT(cxs_mix_utt_length(a, 2, NULL, &la), 0);
    EXPECT_INT(cxs_mix_utt_length(b, 2, NULL, &lb), 0);
    EXPECT_UINT(la, lb);
    got ga = take(a, 2, 0, la), gb = take(b, 2, 0, lb), g3 = take(a, 3, 0, 3);
    EXPECT_UINT(ga.n, gb.n);
    EXPECT(!memcmp(ga.s, gb.s, ga.n * 8));
    EXPECT(g3.n != ga.n || memcmp(g3.s, ga.s, g3.n * 8));
    uint64_t lc;
    EXPECT_INT(cxs_mix_utt_length(c, 2, NULL, &lc), 0);
    got gc = take(c, 2, 0, lc);
    EXPECT(gc.n != ga.n || memcmp(gc.s, ga.s, ga.n * 8));
    got_free(&ga), got_free(&gb), got_free(&g3), got_free(&gc);
    cxs_mix_utt_free(a), cxs_mix_utt_free(b), cxs_mix_utt_free(c);
}
TEST(deterministic_from_seed_and_epoch) {
    deterministic(&cfgs[2]);
    deterministic(&cfgs[11]); /* block order */
}
END_TEST

/* An epoch run on 2 ranks to global position G1, then on 3 ranks from
 * origin G1 to G2, then on 1 from G2: the utterances served are exactly
 * the epoch's (one rank's whole run), nothing repeated or lost. */
static void elastic(cfg k) {
    k.w = 1;
    cxs_mix_utt *one = mk(&k, 0, 0, 0, 21);
    uint64_t N;
    EXPECT_INT(cxs_mix_utt_length(one, 1, NULL, &N), 0);
    got ref = take(one, 1, 0, N);
    ck_assert_uint_gt(N, 12);
    const uint64_t G1 = 2 * (N / 6), P1 = G1 / 2, P2 = (N - G1) / 3 / 2, G2 = G1 + 3 * P2;
    uint64_t *all = malloc(ref.n * 8 + 8), na = 0;
    k.w = 2;
    for (uint32_t r = 0; r < 2; r++) {
        cxs_mix_utt *m = mk(&k, r, 0, 0, 21);
        got g = take(m, 1, 0, P1);
        memcpy(all + na, g.s, g.n * 8), na += g.n;
        got_free(&g), cxs_mix_utt_free(m);
    }
    k.w = 3;
    for (uint32_t r = 0; r < 3; r++) {
        cxs_mix_utt *m = mk(&k, r, 0, G1, 21);
        got g = take(m, 1, 0, P2);
        memcpy(all + na, g.s, g.n * 8), na += g.n;
        got_free(&g), cxs_mix_utt_free(m);
    }
    k.w = 1;
    cxs_mix_utt *m = mk(&k, 0, 0, G2, 21);
    uint64_t rest;
    EXPECT_INT(cxs_mix_utt_length(m, 1, NULL, &rest), 0);
    EXPECT_UINT(rest, N - G2);
    got g = take(m, 1, 0, rest);
    memcpy(all + na, g.s, g.n * 8), na += g.n;
    got_free(&g), cxs_mix_utt_free(m);
    EXPECT_UINT(na, ref.n);
    qsort(all, na, 8, cmp64);
    qsort(ref.s, ref.n, 8, cmp64);
    EXPECT(!memcmp(all, ref.s, na * 8));
    free(all);
    got_free(&ref);
    cxs_mix_utt_free(one);
}
TEST(elastic_resume_2_to_3_and_3_to_1) {
    elastic(cfgs[2]);
    elastic(cfgs[11]); /* block order */
}
END_TEST

TEST(refusals_name_the_source_and_option) {
    cxs_mix_utt_opts o;
    cxs_mix_utt *m;
    cxs_diag d;
    const cxs_dataset *const *dd = (const cxs_dataset *const *)ds;
    cxs_mix_utt_opts_init(&o);
    EXPECT_INT(cxs_mix_utt_create(dd, NSRC, &o, &m, &d), CXS_E_INVALID);
    EXPECT_STR_HAS(d.message, "frame_budget");
    o.frame_budget = 2000; /* below the longest utterances */
    EXPECT_INT(cxs_mix_utt_create(dd, NSRC, &o, &m, &d), CXS_E_RANGE);
    char which[400]; /* the first source with one, named with its path */
    uint32_t first = NSRC;
    for (uint32_t i = 0; i < NSRC && first == NSRC; i++)
        for (uint64_t u = 0; u < nutt[i]; u++)
            if (frames_of(i, u) > 2000) first = i;
    ck_assert_uint_lt(first, NSRC);
    snprintf(which, sizeof which, "source %u (%s/", first, path[first]);
    if (!strstr(d.message, which)) ck_abort_msg("%s / %s", d.message, which);
    EXPECT_STR_HAS(d.message, "long_alone");
    o.long_alone = 1; /* then they are batches alone */
    EXPECT_INT(cxs_mix_utt_create(dd, NSRC, &o, &m, &d), 0);
    uint64_t longest = 0;
    for (uint32_t i = 0; i < NSRC; i++)
        for (uint64_t u = 0; u < nutt[i]; u++)
            if (frames_of(i, u) > longest) longest = frames_of(i, u);
    EXPECT_UINT(cxs_mix_utt_max_frames(m), longest);
    uint64_t len;
    EXPECT_INT(cxs_mix_utt_length(m, 0, NULL, &len), 0);
    uint64_t u[64];
    uint32_t s[64], n;
    for (uint64_t p = 0; p < len; p++) {
        EXPECT_LOOP(cxs_mix_utt_batch(m, 0, p, u, s, 64, &n, NULL, NULL) == 0);
        uint64_t tmax = 0;
        for (uint32_t j = 0; j < n; j++)
            if (frames_of(s[j], u[j]) > tmax) tmax = frames_of(s[j], u[j]);
        EXPECT_LOOP(tmax > 2000 ? n == 1 : n * tmax <= 2000);
    }
    EXPECT_INT(cxs_mix_utt_batch(m, 0, len, u, s, 64, &n, NULL, NULL), CXS_E_RANGE);
    cxs_mix_utt_free(m);
    o.long_alone = 0;
    o.frame_budget = BUDGET;
    o.kind = 7;
    EXPECT_INT(cxs_mix_utt_create(dd, NSRC, &o, &m, &d), CXS_E_INVALID);
    EXPECT_STR_HAS(d.message, "kind");
    o.kind = CXS_UTT_SHUFFLE;
    o.reserved[0] = 1;
    EXPECT_INT(cxs_mix_utt_create(dd, NSRC, &o, &m, &d), CXS_E_INVALID);
    EXPECT_STR_HAS(d.message, "cxs_mix_utt_opts");
    o.reserved[0] = 0;
    double zero[NSRC] = {0, 0, 0};
    o.weights = zero;
    EXPECT_INT(cxs_mix_utt_create(dd, NSRC, &o, &m, &d), CXS_E_INVALID);
    EXPECT_STR_HAS(d.message, "all 0");
    o.weights = NULL;
    /* an epoch too large to build (its plan would wrap size_t), too many
     * ranks, a budget far above any batch (no buffer sized by it) */
    o.epoch_size = 1ull << 63;
    EXPECT_INT(cxs_mix_utt_create(dd, NSRC, &o, &m, &d), CXS_E_INVALID);
    EXPECT_STR_HAS(d.message, "2^40");
    o.epoch_size = 0;
    o.world_size = (1u << 20) + 1;
    EXPECT_INT(cxs_mix_utt_create(dd, NSRC, &o, &m, &d), CXS_E_INVALID);
    EXPECT_STR_HAS(d.message, "world_size");
    o.world_size = 0;
    o.frame_budget = 1ull << 40;
    o.max_batch = 16;
    EXPECT_INT(cxs_mix_utt_create(dd, NSRC, &o, &m, &d), 0);
    EXPECT_UINT(cxs_mix_utt_max_frames(m), 16 * longest);
    cxs_mix_utt_free(m);
    o.frame_budget = BUDGET;
    o.max_batch = 0;
    /* block order: the shuffled kind only; blocks 1..1024, with a budget;
     * a budget too small names the source and the least that would do,
     * and that one works */
    o.memory_bytes = 1u << 22;
    o.kind = CXS_UTT_SEQUENTIAL;
    EXPECT_INT(cxs_mix_utt_create(dd, NSRC, &o, &m, &d), CXS_E_INVALID);
    EXPECT_STR_HAS(d.message, "CXS_UTT_SHUFFLE");
    o.kind = CXS_UTT_SHUFFLE;
    o.blocks = 1025;
    EXPECT_INT(cxs_mix_utt_create(dd, NSRC, &o, &m, &d), CXS_E_INVALID);
    EXPECT_STR_HAS(d.message, "1024");
    o.memory_bytes = 0, o.blocks = 4;
    EXPECT_INT(cxs_mix_utt_create(dd, NSRC, &o, &m, &d), CXS_E_INVALID);
    EXPECT_STR_HAS(d.message, "memory_bytes");
    o.memory_bytes = 100000;
    EXPECT_INT(cxs_mix_utt_create(dd, NSRC, &o, &m, &d), CXS_E_RANGE);
    EXPECT_STR_HAS(d.message, "longest utterance");
    const char *at = strstr(d.message, "at least ");
    ck_assert_ptr_nonnull(at);
    o.memory_bytes = strtoull(at + 9, NULL, 10);
    if (cxs_mix_utt_create(dd, NSRC, &o, &m, &d)) ck_abort_msg("%s", d.message);
    cxs_mix_utt_free(m);
    o.memory_bytes -= o.memory_bytes / 50; /* and 2% less does not */
    EXPECT_INT(cxs_mix_utt_create(dd, NSRC, &o, &m, &d), CXS_E_RANGE);
    o.memory_bytes = 0, o.blocks = 0;
    /* another width: refused by the loader, naming it */
    cxs_dataset *w;
    EXPECT_INT(cxs_dataset_open(wide, &w, NULL), 0);
    const cxs_dataset *two[2] = {ds[0], w};
    EXPECT_INT(cxs_mix_utt_create(two, 2, &o, &m, &d), 0);
    cxs_utt_loader_opts lo;
    cxs_utt_loader_opts_init(&lo);
    cxs_mix_utt_loader *l;
    EXPECT_INT(cxs_mix_utt_loader_create(m, &lo, 0, 0, &l, &d), CXS_E_INVALID);
    EXPECT_STR_HAS(d.message, "widths must be equal");
    EXPECT_STR_HAS(d.message, wide);
    cxs_mix_utt_free(m);
    /* targets of a source without label sequences */
    const cxs_dataset *nos[2] = {ds[0], ds[2]};
    EXPECT_INT(cxs_mix_utt_create(nos, 2, &o, &m, &d), 0);
    lo.targets = 1;
    EXPECT_INT(cxs_mix_utt_loader_create(m, &lo, 0, 0, &l, &d), CXS_E_NO_SEQUENCES);
    EXPECT_STR_HAS(d.message, path[2]);
    cxs_mix_utt_free(m);
    cxs_dataset_close(w);
}
END_TEST

/* The loader: every batch's features, lengths, labels and targets equal
 * each source's own pad_batch of those utterances at the batch's tmax;
 * normalised by each source's statistics, by one given set, per
 * utterance; the same whatever the thread count; reset resumes exactly. */
TEST(loader_batches_match_each_source) {
    const uint32_t D = 8;
    const double wt[2] = {2, 1};
    const cxs_dataset *two[2] = {ds[0], ds[1]}; /* both with label sequences */
    cxs_mix_utt_opts o;
    cxs_mix_utt_opts_init(&o);
    o.kind = CXS_UTT_SHUFFLE;
    o.seed = 4;
    o.frame_budget = BUDGET;
    o.weights = wt;
    o.rank = 1;
    o.world_size = 2;
    cxs_mix_utt *m;
    cxs_diag d;
    if (cxs_mix_utt_create(two, 2, &o, &m, &d)) ck_abort_msg("%s", d.message);
    uint64_t L;
    EXPECT_INT(cxs_mix_utt_length(m, 3, NULL, &L), 0);
    const uint32_t C = cxs_mix_utt_max_batch(m);
    float *rx = malloc((size_t)BUDGET * D * 4);
    int64_t *ry = malloc((size_t)BUDGET * 8), *rlen = malloc(C * 8), *rt = malloc(C * 4000 * 8);
    int64_t *rtl = malloc(C * 8);
    double mean[8], var[8];
    cxs_norm nm = {D, mean, var};
    for (uint32_t j = 0; j < D; j++) mean[j] = 0.25 * j, var[j] = 2 + j;
    for (int mode = 0; mode < 4; mode++) {
        cxs_utt_loader_opts lo;
        cxs_utt_loader_opts_init(&lo);
        lo.labels = 1;
        lo.targets = 1;
        lo.threads = mode == 2 ? 1 : 3;
        uint32_t flags = mode == 1 || mode == 2 ? CXS_GATHER_NORMALIZE
                                                : mode == 3 ? CXS_PAD_PER_UTTERANCE : 0;
        lo.flags = flags;
        if (mode == 2) lo.norm = &nm;
        cxs_mix_utt_loader *l;
        if (cxs_mix_utt_loader_create(m, &lo, 3, 0, &l, &d)) ck_abort_msg("%s", d.message);
        const cxs_mix_utts *b;
        uint64_t nb = 0;
        int reset = 0;
        while (!cxs_mix_utt_loader_next(l, &b, &d) && b) {
            uint64_t u[256];
            uint32_t s[256], n, rep;
            uint64_t g;
            EXPECT_LOOP(cxs_mix_utt_batch(m, 3, nb, u, s, 256, &n, &g, &rep) == 0);
            EXPECT_LOOP(b->batch->n == n && b->batch->index == nb && b->batch->global == g && b->repeat == rep);
            EXPECT_LOOP(!memcmp(b->batch->utts, u, n * 8) && !memcmp(b->source, s, n * 4));
            const uint64_t T = b->batch->tmax, Lm = b->batch->lmax;
            for (uint32_t j = 0; j < n; j++) {
                const cxs_dataset *sd = two[s[j]];
                EXPECT_LOOP(!cxs_dataset_pad_batch(sd, u + j, 1, T, flags,
                                                   mode == 2 ? &nm : NULL, rx, rlen + j, ry));
                EXPECT_LOOP(!memcmp(b->batch->x + (size_t)j * T * D, rx, T * D * 4));
                EXPECT_LOOP(!memcmp(b->batch->y + (size_t)j * T, ry, T * 8));
                EXPECT_LOOP(b->batch->lengths[j] == rlen[j]);
                EXPECT_LOOP(!cxs_dataset_pad_targets(sd, u + j, 1, Lm, rt, rtl));
                EXPECT_LOOP(!memcmp(b->batch->targets + (size_t)j * Lm, rt, Lm * 8));
                EXPECT_LOOP(b->batch->target_lengths[j] == rtl[0]);
            }
            nb++;
            if (nb == 4 && mode == 0 && !reset++) { /* reset: the same batches again */
                EXPECT_INT(cxs_mix_utt_loader_reset(l, 3, 1), 0);
                nb = 1;
            }
        }
        EXPECT_UINT(nb, L);
        cxs_mix_utt_loader_free(l);
    }
    free(rx), free(ry), free(rlen), free(rt), free(rtl);
    cxs_mix_utt_free(m);
}
END_TEST

/* Block order through the loader: every batch as cxs_mix_utt_batch says,
 * over two epochs, a reset mid-epoch, and on a rank whose final round
 * repeats; the page cache advice and drops change no byte. */
TEST(block_order_loader) {
    cfg k = cfgs[11];
    for (uint32_t r = 0; r < 3; r++) {
        cxs_mix_utt *m = mk(&k, r, 0, 0, 8);
        cxs_utt_loader_opts lo;
        cxs_utt_loader_opts_init(&lo);
        lo.threads = 2;
        lo.labels = 1;
        cxs_mix_utt_loader *l;
        cxs_diag d;
        if (cxs_mix_utt_loader_create(m, &lo, 0, 0, &l, &d)) ck_abort_msg("%s", d.message);
        const uint32_t C = cxs_mix_utt_max_batch(m);
        uint64_t *u = malloc(C * 8);
        uint32_t *s = malloc(C * 4);
        for (uint64_t e = 0; e < 2; e++) {
            uint64_t L, nb = 0;
            EXPECT_INT(cxs_mix_utt_length(m, e, NULL, &L), 0);
            if (e) EXPECT_INT(cxs_mix_utt_loader_reset(l, e, 0), 0);
            const cxs_mix_utts *b;
            int again = 0;
            while (!cxs_mix_utt_loader_next(l, &b, &d) && b) {
                uint32_t n, rep;
                uint64_t g;
                EXPECT_LOOP(cxs_mix_utt_batch(m, e, nb, u, s, C, &n, &g, &rep) == 0);
                EXPECT_LOOP(b->batch->n == n && b->batch->global == g && b->repeat == rep);
                EXPECT_LOOP(!memcmp(b->batch->utts, u, n * 8) && !memcmp(b->source, s, n * 4));
                for (uint32_t j = 0; j < n; j++) {
                    uint64_t T = frames_of(s[j], u[j]);
                    cxs_utterance ut;
                    cxs_dataset_utterance(ds[s[j]], u[j], &ut);
                    EXPECT_LOOP(b->batch->lengths[j] == (int64_t)T);
                    EXPECT_LOOP(!memcmp(b->batch->x + (size_t)j * b->batch->tmax * 8,
                                        ut.features, T * 8 * 4));
                }
                if (++nb == L / 2 && !again++) { /* from the middle again */
                    EXPECT_INT(cxs_mix_utt_loader_reset(l, e, L / 2 - 1), 0);
                    nb = L / 2 - 1;
                }
            }
            EXPECT_UINT(nb, L);
        }
        free(u), free(s);
        cxs_mix_utt_loader_free(l);
        cxs_mix_utt_free(m);
    }
}
END_TEST

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/cxs-mixutt-XXXXXX");
    if (!mkdtemp(dir)) return 3;
    const uint32_t utts[NSRC] = {17, 40, 90};
    for (int i = 0; i < NSRC; i++) {
        snprintf(path[i], sizeof path[i], "%s/src%d", dir, i);
        td_opts o = {.utts = utts[i], .dim = 8, .seed = 60 + (uint64_t)i,
                     .label_seqs = i < 2 ? CXS_SEQ_WITH_FRAMES : CXS_SEQ_NONE};
        if (td_make(path[i], &o)) return 3;
    }
    snprintf(wide, sizeof wide, "%s/wide", dir);
    td_opts o = {.utts = 3, .dim = 9, .seed = 7};
    if (td_make(wide, &o)) return 3;
    const TTest *tests[] = {quotas_passes_strata_ranks, deterministic_from_seed_and_epoch,
                            elastic_resume_2_to_3_and_3_to_1, refusals_name_the_source_and_option,
                            loader_batches_match_each_source, block_order_loader};
    const cxs_group g[] = {{"mixutt", 300, setup, teardown, tests, CXS_N(tests), NULL}};
    int failed = cxs_run_groups("mixutt", g, CXS_N(g), 0);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) return 3;
    return failed ? 1 : 0;
}
