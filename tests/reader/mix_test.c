/* Mixtures (cxs_mix, cxs_mix_loader): per epoch each source gives exactly
 * its quota; every batch holds the shares to within a sample; over an epoch
 * every rank gets each source's share to within one sample; no frame twice
 * within a pass over its source; deterministic from (seed, epoch); resume
 * 2 -> 3 and 3 -> 1 ranks mid-epoch with nothing repeated or lost; the
 * loader's windows, labels and sources against each dataset's own gather.
 * Data made with the library's writer (testdata.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxshard.h"
#include "cxs_test.h"
#include "testdata.h"

#define NSRC 3
static char dir[256], path[NSRC][300], wide[300];
static cxs_dataset *ds[NSRC];
static uint64_t nframes[NSRC];

static void setup(void) {
    for (int i = 0; i < NSRC; i++) {
        ck_assert_int_eq(cxs_dataset_open(path[i], &ds[i], NULL), 0);
        cxs_info in;
        cxs_dataset_info(ds[i], &in);
        nframes[i] = in.num_frames;
    }
}
static void teardown(void) {
    for (int i = 0; i < NSRC; i++) cxs_dataset_close(ds[i]);
}

static cxs_mix *mk(const double *weights, double temp, uint64_t esize, uint32_t B, uint32_t rank,
                   uint32_t w, uint32_t drop, uint64_t origin, uint64_t seed) {
    cxs_mix_opts o;
    cxs_mix_opts_init(&o);
    o.kind = CXS_SAMPLER_SHUFFLE;
    o.seed = seed;
    o.batch_size = B;
    o.weights = weights;
    o.temperature = temp;
    o.epoch_size = esize;
    o.rank = rank;
    o.world_size = w;
    o.drop_last = drop;
    o.origin = origin;
    cxs_mix *m;
    cxs_diag d;
    int rc = cxs_mix_create((const cxs_dataset *const *)ds, NSRC, &o, &m, &d);
    if (rc) ck_abort_msg("cxs_mix_create: %s", d.message);
    return m;
}

/* One rank's batches of an epoch, from its position `from`: every sample
 * as (source << 48 | frame), the batch's global position beside it. */
typedef struct got {
    uint64_t *s, *g;
    uint32_t *bn; /* per batch: its samples */
    uint8_t *rep; /* per batch: a repeat (the final round's padding) */
    uint64_t n, nb;
} got;

static got take(const cxs_mix *m, uint64_t epoch, uint64_t from, uint64_t to) {
    const uint32_t B = cxs_mix_batch_size(m);
    got r = {malloc((to - from) * B * 8 + 8), malloc((to - from) * 8 + 8),
             malloc((to - from) * 4 + 4), malloc(to - from + 1), 0, 0};
    uint64_t *f = malloc(B * 8);
    uint32_t *src = malloc(B * 4), n;
    for (uint64_t p = from; p < to; p++) {
        uint64_t g;
        EXPECT_LOOP(cxs_mix_batch(m, epoch, p, f, src, B, &n, &g) == 0);
        for (uint32_t j = 0; j < n; j++) {
            EXPECT_LOOP(src[j] < NSRC && f[j] < nframes[src[j]]);
            EXPECT_LOOP(j == 0 || src[j] >= src[j - 1]); /* grouped by source */
            r.s[r.n++] = (uint64_t)src[j] << 48 | f[j];
        }
        r.g[r.nb] = g;
        r.rep[r.nb] = (uint8_t)cxs_mix_repeat(m, p);
        r.bn[r.nb++] = n;
    }
    free(f), free(src);
    return r;
}
static void got_free(got *r) { free(r->s), free(r->g), free(r->bn), free(r->rep); }

static int cmp64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The configurations the checks run over. */
static const double w311[NSRC] = {3, 1, 1}, w105[NSRC] = {1, 0, 5};
typedef struct cfg {
    const double *wt;
    double temp;
    uint64_t esize; /* 0: the sum; else a multiple of it (x 1/100) */
    uint32_t B, w;
} cfg;
static const cfg cfgs[] = {
    {NULL, 0, 0, 256, 1}, {NULL, 0, 0, 256, 2}, {w311, 0, 0, 100, 3}, {w311, 0, 300, 64, 5},
    {w105, 0, 0, 7, 4},   {NULL, 2, 0, 33, 8},  {NULL, 0, 37, 1, 3},  {w311, 0, 0, 1000, 7},
    {NULL, 3, 250, 5, 2}, {w311, 0, 0, 13, 16},
};

static uint64_t total_frames(void) { return nframes[0] + nframes[1] + nframes[2]; }
static uint64_t esize_of(const cfg *c) { return c->esize ? total_frames() * c->esize / 100 : 0; }

/* Quotas, strata, ranks and passes, over every configuration. */
TEST(proportions_exact_per_epoch_batch_and_rank) {
    double worst_batch = 0, worst_rank = 0;
    for (size_t c = 0; c < sizeof cfgs / sizeof *cfgs; c++) {
        const cfg *k = &cfgs[c];
        uint64_t count[NSRC] = {0};
        uint64_t glob, E = 0, q[NSRC];
        unsigned char *seen_g = NULL;
        uint64_t *all = NULL, nall = 0;
        for (uint32_t r = 0; r < k->w; r++) {
            cxs_mix *m = mk(k->wt, k->temp, esize_of(k), k->B, r, k->w, 0, 0, 11);
            E = cxs_mix_epoch_size(m);
            uint64_t L = cxs_mix_length(m, &glob);
            for (int i = 0; i < NSRC; i++) q[i] = cxs_mix_quota(m, i);
            EXPECT_UINT(q[0] + q[1] + q[2], E);
            EXPECT_UINT(glob, (E + k->B - 1) / k->B);
            EXPECT_UINT(L, (glob + k->w - 1) / k->w); /* equal counts per rank */
            if (!seen_g) seen_g = calloc(glob, 1), all = malloc(E * 8);
            got t = take(m, 0, 0, L);
            uint64_t rc_[NSRC] = {0}, rn = 0, o = 0;
            for (uint64_t b = 0; b < t.nb; b++) {
                uint64_t bc[NSRC] = {0};
                for (uint32_t j = 0; j < t.bn[b]; j++) bc[t.s[o + j] >> 48]++;
                /* every batch holds the shares to within a sample or so */
                for (int i = 0; i < NSRC; i++) {
                    double dev = fabs((double)bc[i] - (double)t.bn[b] * q[i] / (double)E);
                    if (dev > worst_batch) worst_batch = dev;
                    EXPECT_LOOP(dev < 2.0);
                }
                EXPECT_LOOP(t.g[b] < glob);
                if (!t.rep[b]) { /* (not a repeat of the first round's) */
                    EXPECT_LOOP(!seen_g[t.g[b]] && t.g[b] / k->w == b); /* in its round, once */
                    seen_g[t.g[b]] = 1;
                    for (int i = 0; i < NSRC; i++) rc_[i] += bc[i], count[i] += bc[i];
                    for (uint32_t j = 0; j < t.bn[b]; j++) all[nall++] = t.s[o + j];
                    rn += t.bn[b];
                }
                o += t.bn[b];
            }
            /* every rank its share of each source, to within one sample */
            for (int i = 0; i < NSRC; i++) {
                double dev = fabs((double)rc_[i] - (double)rn * q[i] / (double)E);
                if (dev > worst_rank) worst_rank = dev;
                if (dev > 1.0 + 1e-9)
                    ck_abort_msg("config %zu rank %u source %d: %llu of %llu, share %.2f", c, r, i,
                                 (unsigned long long)rc_[i], (unsigned long long)rn,
                                 (double)rn * q[i] / (double)E);
            }
            got_free(&t);
            cxs_mix_free(m);
        }
        /* the epoch: exactly the quotas, every global batch once */
        for (uint64_t g = 0; g < glob; g++) EXPECT_LOOP(seen_g[g]);
        for (int i = 0; i < NSRC; i++) EXPECT_UINT(count[i], q[i]);
        EXPECT_UINT(nall, E);
        /* passes: a frame comes floor or ceil(q/n) times, never twice in a pass */
        qsort(all, nall, 8, cmp64);
        for (int i = 0; i < NSRC; i++) {
            if (!q[i]) continue;
            uint64_t lo = q[i] / nframes[i], hi = lo + (q[i] % nframes[i] != 0), f = 0, x = 0;
            for (uint64_t a = 0; a < nall;) {
                uint64_t b = a;
                while (b < nall && all[b] == all[a]) b++;
                if (all[a] >> 48 == (uint64_t)i) {
                    EXPECT_LOOP(b - a >= lo && b - a <= hi);
                    if (b - a == hi) x++;
                    f++;
                }
                a = b;
            }
            EXPECT_UINT(f, lo ? nframes[i] : q[i]);
            EXPECT_UINT(lo * nframes[i] + (hi > lo ? x : 0), q[i]);
        }
        free(seen_g), free(all);
    }
    printf("mix: worst batch deviation %.3f samples, worst rank deviation %.3f samples\n",
           worst_batch, worst_rank);
}
END_TEST

TEST(deterministic_and_epochs_go_on) {
    cxs_mix *a = mk(w311, 0, total_frames() / 4, 64, 1, 3, 0, 0, 5);
    cxs_mix *b = mk(w311, 0, total_frames() / 4, 64, 1, 3, 0, 0, 5);
    uint64_t L = cxs_mix_length(a, NULL);
    got x = take(a, 2, 0, L), y = take(b, 2, 0, L), z = take(a, 3, 0, L);
    EXPECT_UINT(x.n, y.n);
    EXPECT(!memcmp(x.s, y.s, x.n * 8));
    EXPECT(memcmp(x.s, z.s, x.n * 8) != 0);
    got_free(&x), got_free(&y), got_free(&z);
    cxs_mix_free(a), cxs_mix_free(b);
    /* a subsampled source: epochs 0 and 1 (a quarter of each source's
     * frames each) are disjoint -- the next epoch goes on in the pass */
    uint64_t *seen = NULL, n = 0;
    for (uint32_t r = 0; r < 2; r++) {
        cxs_mix *m = mk(NULL, 0, total_frames() / 4, 50, r, 2, 0, 0, 9);
        uint64_t len = cxs_mix_length(m, NULL), glob;
        cxs_mix_length(m, &glob);
        if (!seen) seen = malloc(2 * (glob * 50 + 1) * 8);
        for (uint64_t e = 0; e < 2; e++) {
            got t = take(m, e, 0, len);
            uint64_t o = 0;
            for (uint64_t bb = 0; bb < t.nb; o += t.bn[bb], bb++)
                if (!t.rep[bb]) /* not a repeat */
                    for (uint32_t j = 0; j < t.bn[bb]; j++) seen[n++] = t.s[o + j];
            got_free(&t);
        }
        cxs_mix_free(m);
    }
    qsort(seen, n, 8, cmp64);
    for (uint64_t i = 1; i < n; i++) EXPECT_LOOP(seen[i] != seen[i - 1]);
    free(seen);
    /* an epoch whose stream place (epoch * quota) is past 2^64: still one
     * whole pass of every source (natural shares, one pass an epoch) */
    cxs_mix *w = mk(NULL, 0, 0, 256, 0, 1, 0, 0, 2);
    const uint64_t big = UINT64_MAX / nframes[0] + 3, Lw = cxs_mix_length(w, NULL);
    got t = take(w, big, 0, Lw);
    qsort(t.s, t.n, 8, cmp64);
    EXPECT_UINT(t.n, total_frames());
    for (uint64_t i = 1; i < t.n; i++) EXPECT_LOOP(t.s[i] != t.s[i - 1]);
    got_free(&t);
    cxs_mix_free(w);
}
END_TEST

/* Samples of ranks 0..w-1 at positions [from, to) of each, repeats (batches
 * past the epoch's last) left out. */
static uint64_t gather_run(uint32_t w, uint64_t origin, uint64_t from, uint64_t to, uint64_t *out,
                           uint32_t B) {
    uint64_t n = 0;
    for (uint32_t r = 0; r < w; r++) {
        cxs_mix *m = mk(w311, 0, 0, B, r, w, 0, origin, 21);
        uint64_t glob, L = cxs_mix_length(m, &glob);
        got t = take(m, 1, from, to < L ? to : L);
        uint64_t o = 0;
        for (uint64_t b = 0; b < t.nb; o += t.bn[b], b++) {
            uint64_t pos = from + b;
            if (t.rep[b]) continue; /* a repeat */
            EXPECT_LOOP(t.g[b] >= origin + pos * w && t.g[b] < origin + (pos + 1) * w &&
                        t.g[b] < glob);
            memcpy(out + n, t.s + o, t.bn[b] * 8);
            n += t.bn[b];
        }
        got_free(&t);
        cxs_mix_free(m);
    }
    return n;
}

TEST(elastic_resume_2_to_3_and_3_to_1) {
    const uint32_t B = 96;
    cxs_mix *one = mk(w311, 0, 0, B, 0, 1, 0, 0, 21);
    const uint64_t E = cxs_mix_epoch_size(one), L1 = cxs_mix_length(one, NULL);
    uint64_t *ref = malloc(E * 8), *run = malloc((E + 16 * B) * 8), n = 0;
    got t = take(one, 1, 0, L1);
    EXPECT_UINT(t.n, E);
    memcpy(ref, t.s, E * 8);
    got_free(&t);
    cxs_mix_free(one);
    /* 2 ranks to position 40 (global 80), then 3 ranks from there to
     * position 30 (global 80 + 90 = 170), then 1 rank to the end */
    n += gather_run(2, 0, 0, 40, run + n, B);
    n += gather_run(3, 80, 0, 30, run + n, B);
    n += gather_run(1, 170, 0, UINT64_MAX, run + n, B);
    EXPECT_UINT(n, E);
    qsort(ref, E, 8, cmp64);
    qsort(run, n, 8, cmp64);
    EXPECT(!memcmp(ref, run, E * 8)); /* nothing repeated or lost */
    /* and the samples up to a state are the same whatever the ranks:
     * the first 80 global batches of 2 ranks = those of 1 rank */
    uint64_t *a = malloc(80 * B * 8), *b = malloc(80 * B * 8);
    uint64_t na = gather_run(2, 0, 0, 40, a, B), nb = gather_run(1, 0, 0, 80, b, B);
    EXPECT_UINT(na, nb);
    qsort(a, na, 8, cmp64);
    qsort(b, nb, 8, cmp64);
    EXPECT(!memcmp(a, b, na * 8));
    free(a), free(b), free(ref), free(run);
}
END_TEST

TEST(refusals_name_the_option) {
    cxs_mix_opts o;
    cxs_mix *m;
    cxs_diag d;
    cxs_mix_opts_init(&o);
    EXPECT_INT(cxs_mix_create((const cxs_dataset *const *)ds, NSRC, &o, &m, &d), CXS_E_INVALID);
    EXPECT_STR_HAS(d.message, "batch_size");
    o.batch_size = 8;
    double neg[NSRC] = {1, -1, 1}, zero[NSRC] = {0, 0, 0};
    o.weights = neg;
    EXPECT_INT(cxs_mix_create((const cxs_dataset *const *)ds, NSRC, &o, &m, &d), CXS_E_INVALID);
    EXPECT_STR_HAS(d.message, "weight 1");
    o.weights = zero;
    EXPECT_INT(cxs_mix_create((const cxs_dataset *const *)ds, NSRC, &o, &m, &d), CXS_E_INVALID);
    EXPECT_STR_HAS(d.message, "all 0");
    o.weights = w311;
    o.temperature = 2;
    EXPECT_INT(cxs_mix_create((const cxs_dataset *const *)ds, NSRC, &o, &m, &d), CXS_E_INVALID);
    EXPECT_STR_HAS(d.message, "temperature");
    o.temperature = 0;
    o.reserved[0] = 1; /* room to grow: a word the library does not know yet */
    EXPECT_INT(cxs_mix_create((const cxs_dataset *const *)ds, NSRC, &o, &m, &d), CXS_E_INVALID);
    EXPECT_STR_HAS(d.message, "cxs_mix_opts");
    o.reserved[0] = 0;
    o.epoch_size = UINT64_MAX; /* (its quotas in doubles would not end) */
    EXPECT_INT(cxs_mix_create((const cxs_dataset *const *)ds, NSRC, &o, &m, &d), CXS_E_INVALID);
    EXPECT_STR_HAS(d.message, "2^62");
    o.epoch_size = 0;
    o.origin = 1u << 30;
    EXPECT_INT(cxs_mix_create((const cxs_dataset *const *)ds, NSRC, &o, &m, &d), CXS_E_INVALID);
    EXPECT_STR_HAS(d.message, "origin");
    /* a source of another width is refused by the loader, naming both */
    cxs_dataset *w;
    EXPECT_INT(cxs_dataset_open(wide, &w, NULL), 0);
    const cxs_dataset *two[2] = {ds[0], w};
    o.origin = 0;
    o.weights = NULL;
    EXPECT_INT(cxs_mix_create(two, 2, &o, &m, &d), 0);
    cxs_loader_opts lo;
    cxs_loader_opts_init(&lo);
    lo.k = 2;
    cxs_mix_loader *l;
    EXPECT_INT(cxs_mix_loader_create(m, &lo, 0, 0, &l, &d), CXS_E_INVALID);
    EXPECT_STR_HAS(d.message, "widths must be equal");
    EXPECT_STR_HAS(d.message, wide);
    cxs_mix_free(m);
    cxs_dataset_close(w);
}
END_TEST

/* The loader: every window, label and source equals the sample's own
 * dataset's gather; normalised by each source's statistics or by one set;
 * the same batches whatever the thread count; reset resumes exactly. */
TEST(loader_windows_match_each_source) {
    const uint32_t B = 128, K = 3, D = 8;
    const size_t win = (2 * K + 1) * D;
    cxs_mix *m = mk(w311, 0, total_frames() / 3, B, 1, 2, 0, 0, 3);
    const uint64_t L = cxs_mix_length(m, NULL);
    float *ref = malloc(B * win * 4);
    int64_t *rl = malloc(B * 8);
    for (int mode = 0; mode < 3; mode++) {
        cxs_loader_opts lo;
        cxs_loader_opts_init(&lo);
        lo.k = K;
        lo.labels = 1;
        lo.threads = mode == 2 ? 1 : 3;
        double mean[8], var[8];
        cxs_norm nm = {D, mean, var};
        for (uint32_t j = 0; j < D; j++) mean[j] = 0.5 * j, var[j] = 1 + j;
        if (mode) lo.flags = CXS_GATHER_NORMALIZE;
        if (mode == 2) lo.norm = &nm;
        cxs_mix_loader *l;
        cxs_diag d;
        if (cxs_mix_loader_create(m, &lo, 4, 0, &l, &d)) ck_abort_msg("%s", d.message);
        const cxs_mix_frames *b;
        uint64_t nb = 0;
        int reset = 0;
        while (!cxs_mix_loader_next(l, &b, &d) && b) {
            uint64_t f[128];
            uint32_t src[128], n;
            EXPECT_LOOP(cxs_mix_batch(m, 4, nb, f, src, B, &n, NULL) == 0);
            EXPECT_LOOP(b->n == n && b->index == nb);
            EXPECT_LOOP(!memcmp(b->frames, f, n * 8) && !memcmp(b->source, src, n * 4));
            for (uint32_t j = 0; j < n; j++) {
                cxs_dataset *s = ds[src[j]];
                if (mode == 2)
                    EXPECT_LOOP(!cxs_dataset_gather_norm(s, f + j, 1, K, &nm, 1, ref + j * win,
                                                         rl + j));
                else
                    EXPECT_LOOP(!cxs_dataset_gather(s, f + j, 1, K, mode ? CXS_GATHER_NORMALIZE : 0,
                                                    1, ref + j * win, rl + j));
            }
            EXPECT_LOOP(!memcmp(b->x, ref, n * win * 4));
            EXPECT_LOOP(!memcmp(b->y, rl, n * 8));
            nb++;
            if (nb == 5 && mode == 0 && !reset++) { /* reset: the same batches again */
                EXPECT_INT(cxs_mix_loader_reset(l, 4, 2), 0);
                nb = 2;
            }
        }
        EXPECT_UINT(nb, L);
        cxs_mix_loader_free(l);
    }
    free(ref), free(rl);
    cxs_mix_free(m);
}
END_TEST

/* Block order (CXS_SAMPLER_BLOCK): each source's passes are its block
 * sampler's epochs, within its share of the one memory budget: per epoch
 * the quotas, every frame once a pass (natural shares: one pass each),
 * every batch's frames of a source within the blocks its round draws on,
 * the same samples up to a state on 2 ranks as on 1; the loader's
 * windows as each source's gather. */
TEST(block_order_per_source) {
    cxs_mix_opts o;
    cxs_mix_opts_init(&o);
    o.kind = CXS_SAMPLER_BLOCK;
    o.seed = 13;
    o.batch_size = 64;
    o.memory_bytes = 2u << 20;
    o.blocks = 2;
    cxs_mix *m;
    cxs_diag d;
    if (cxs_mix_create((const cxs_dataset *const *)ds, NSRC, &o, &m, &d))
        ck_abort_msg("%s", d.message);
    const uint64_t L = cxs_mix_length(m, NULL), E = cxs_mix_epoch_size(m);
    got t = take(m, 0, 0, L);
    EXPECT_UINT(t.n, E);
    qsort(t.s, t.n, 8, cmp64);
    uint64_t at = 0;
    for (int i = 0; i < NSRC; i++) /* every frame of every source once */
        for (uint64_t f = 0; f < nframes[i]; f++, at++)
            EXPECT_LOOP(t.s[at] == ((uint64_t)i << 48 | f));
    got_free(&t);
    /* the order differs from a shuffle's: the first batches' frames of a
     * source lie in a few blocks (counted in stretches of 1,024 frames) */
    uint64_t f[64], touched[2] = {0, 0};
    uint32_t src[64], n;
    for (int kind = 0; kind < 2; kind++) {
        cxs_mix_opts so = o;
        so.weights = w311; /* source 2 a fifth: its share of the budget 256 KiB */
        so.memory_bytes = 5u << 18;
        if (kind) so.kind = CXS_SAMPLER_SHUFFLE, so.memory_bytes = 0, so.blocks = 0;
        cxs_mix *x;
        if (cxs_mix_create((const cxs_dataset *const *)ds, NSRC, &so, &x, &d))
            ck_abort_msg("%s", d.message);
        unsigned char hit[4096] = {0};
        for (uint64_t p = 0; p < 6; p++) {
            EXPECT_LOOP(cxs_mix_batch(x, 0, p, f, src, 64, &n, NULL) == 0);
            for (uint32_t j = 0; j < n; j++)
                if (src[j] == 2 && !hit[f[j] >> 10]++) touched[kind]++;
        }
        cxs_mix_free(x);
    }
    printf("mix: block order's first 6 batches touch %llu stretches of source 2, a "
           "shuffle's %llu\n", (unsigned long long)touched[0], (unsigned long long)touched[1]);
    EXPECT(touched[0] * 2 <= touched[1]);
    /* 2 ranks to global 40 hold what 1 rank's first 40 batches hold */
    uint64_t *a = malloc(40 * 64 * 8), *b = malloc(40 * 64 * 8), na = 0, nb = 0;
    for (uint32_t r = 0; r < 2; r++) {
        cxs_mix_opts ro = o;
        ro.rank = r;
        ro.world_size = 2;
        cxs_mix *x;
        EXPECT_INT(cxs_mix_create((const cxs_dataset *const *)ds, NSRC, &ro, &x, &d), 0);
        got g = take(x, 1, 0, 20);
        memcpy(a + na, g.s, g.n * 8), na += g.n;
        got_free(&g), cxs_mix_free(x);
    }
    got g = take(m, 1, 0, 40);
    memcpy(b, g.s, g.n * 8), nb = g.n;
    got_free(&g);
    EXPECT_UINT(na, nb);
    qsort(a, na, 8, cmp64), qsort(b, nb, 8, cmp64);
    EXPECT(!memcmp(a, b, na * 8));
    free(a), free(b);
    /* the loader: windows and labels as each source's gather, across an
     * epoch's end and a reset */
    cxs_loader_opts lo;
    cxs_loader_opts_init(&lo);
    lo.k = 2;
    lo.labels = 1;
    lo.threads = 2;
    cxs_mix_loader *l;
    if (cxs_mix_loader_create(m, &lo, 1, 0, &l, &d)) ck_abort_msg("%s", d.message);
    const size_t win = 5 * 8;
    float *ref = malloc(64 * win * 4);
    int64_t *rl = malloc(64 * 8);
    const cxs_mix_frames *bt;
    uint64_t nbat = 0;
    int reset = 0;
    while (!cxs_mix_loader_next(l, &bt, &d) && bt) {
        for (uint32_t j = 0; j < bt->n; j++)
            EXPECT_LOOP(!cxs_dataset_gather(ds[bt->source[j]], bt->frames + j, 1, 2, 0, 1,
                                            ref + j * win, rl + j));
        EXPECT_LOOP(!memcmp(bt->x, ref, bt->n * win * 4) && !memcmp(bt->y, rl, bt->n * 8));
        if (++nbat == 10 && !reset++) { /* the same batches again */
            EXPECT_INT(cxs_mix_loader_reset(l, 1, 5), 0);
            nbat = 5;
        }
    }
    EXPECT_UINT(nbat, L);
    free(ref), free(rl);
    cxs_mix_loader_free(l);
    /* refusals: a block order without a budget, a budget without it */
    o.memory_bytes = 0;
    EXPECT_INT(cxs_mix_create((const cxs_dataset *const *)ds, NSRC, &o, &m, &d), CXS_E_INVALID);
    EXPECT_STR_HAS(d.message, "memory_bytes");
    cxs_mix_free(m);
}
END_TEST

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/cxs-mix-XXXXXX");
    if (!mkdtemp(dir)) return 3;
    const uint32_t utts[NSRC] = {5, 11, 23};
    for (int i = 0; i < NSRC; i++) {
        snprintf(path[i], sizeof path[i], "%s/src%d", dir, i);
        td_opts o = {.utts = utts[i], .dim = 8, .seed = 40 + (uint64_t)i,
                     .shard_size = 256u << 10};
        if (td_make(path[i], &o)) return 3;
    }
    snprintf(wide, sizeof wide, "%s/wide", dir);
    td_opts o = {.utts = 3, .dim = 9, .seed = 7};
    if (td_make(wide, &o)) return 3;
    const TTest *tests[] = {proportions_exact_per_epoch_batch_and_rank,
                            deterministic_and_epochs_go_on, elastic_resume_2_to_3_and_3_to_1,
                            refusals_name_the_option, loader_windows_match_each_source,
                            block_order_per_source};
    const cxs_group g[] = {{"mix", 300, setup, teardown, tests, CXS_N(tests), NULL}};
    int failed = cxs_run_groups("mix", g, CXS_N(g), 0);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) return 3;
    return failed ? 1 : 0;
}
