/* mix_balance: how closely a mixture holds its shares, over random
 * configurations of the datasets given: for each of TRIALS draws of
 * weights (1..10 each), batch size (1..300), ranks (1..32) and epoch size
 * (0.1..2.1 times the data), every rank's batches of epoch 0 are taken and
 * it prints the worst deviation (in samples) of
 *  - a batch's count of a source from its size times the source's share;
 *  - a rank's count of a source over the epoch from its samples times the
 *    share (repeats, the final round's padding, left out);
 *  - the same at every full round before the last two (what a state saved
 *    mid-epoch holds).
 * The order's quality, not its speed: docs/benchmarks.md, "Mixtures".
 *
 * usage: mix_balance TRIALS DATASET... (2 to 8 datasets) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxshard.h"

static int utterances(int trials, int n, cxs_dataset **ds);

int main(int argc, char **argv) {
    const int utt = argc > 1 && !strcmp(argv[1], "--utt");
    argc -= utt, argv += utt;
    if (argc < 4 || argc > 10) {
        fprintf(stderr, "usage: mix_balance [--utt] TRIALS DATASET... (2 to 8 datasets)\n");
        return 2;
    }
    const int n = argc - 2, trials = atoi(argv[1]);
    cxs_dataset *ds[8];
    uint64_t total = 0;
    for (int i = 0; i < n; i++) {
        cxs_diag d;
        if (cxs_dataset_open(argv[2 + i], &ds[i], &d)) {
            fprintf(stderr, "%s: %s\n", argv[2 + i], d.message);
            return 1;
        }
        cxs_info in;
        cxs_dataset_info(ds[i], &in);
        total += in.num_frames;
    }
    if (utt) return utterances(trials, n, ds);
    uint64_t st = 1;
    double worst_batch = 0, worst_rank = 0, worst_mid = 0;
    uint64_t *f = malloc(300 * sizeof *f);
    uint32_t *s = malloc(300 * sizeof *s);
    for (int t = 0; t < trials; t++) {
        double wt[8];
        for (int i = 0; i < n; i++) wt[i] = 1 + (double)((st = st * 6364136223846793005ull + 1) >> 33) / 4294967296.0 * 9;
        const uint32_t B = 1 + (uint32_t)(((st = st * 6364136223846793005ull + 1) >> 33) % 300);
        const uint32_t w = 1 + (uint32_t)(((st = st * 6364136223846793005ull + 1) >> 33) % 32);
        const uint64_t E = total * (10 + ((st = st * 6364136223846793005ull + 1) >> 33) % 200) / 100;
        for (uint32_t r = 0; r < w; r++) {
            cxs_mix_opts o;
            cxs_mix_opts_init(&o);
            o.kind = CXS_SAMPLER_SHUFFLE, o.seed = (uint64_t)t, o.batch_size = B, o.weights = wt;
            o.epoch_size = E, o.rank = r, o.world_size = w;
            cxs_mix *m;
            cxs_diag d;
            if (cxs_mix_create((const cxs_dataset *const *)ds, (uint32_t)n, &o, &m, &d)) {
                fprintf(stderr, "%s\n", d.message);
                return 1;
            }
            uint64_t glob, L = cxs_mix_length(m, &glob), cnt[8] = {0}, tot = 0;
            for (uint64_t p = 0; p < L; p++) {
                uint32_t k;
                uint64_t g, bc[8] = {0};
                cxs_mix_batch(m, 0, p, f, s, B, &k, &g);
                if (cxs_mix_repeat(m, p)) continue;
                for (uint32_t j = 0; j < k; j++) bc[s[j]]++, cnt[s[j]]++;
                tot += k;
                for (int i = 0; i < n; i++) {
                    double q = (double)cxs_mix_quota(m, (uint32_t)i) / (double)E;
                    double dv = fabs((double)bc[i] - k * q), dr = fabs((double)cnt[i] - tot * q);
                    if (dv > worst_batch) worst_batch = dv;
                    if ((p + 2) * w <= glob && dr > worst_mid) worst_mid = dr;
                }
            }
            for (int i = 0; i < n; i++) {
                double q = (double)cxs_mix_quota(m, (uint32_t)i) / (double)E;
                double dr = fabs((double)cnt[i] - tot * q);
                if (dr > worst_rank) worst_rank = dr;
                if (dr > 1)
                    printf("  over one: batch %u, %u ranks (rank %u), epoch %llu, %llu batches: "
                           "source %d %.3f\n", B, w, r, (unsigned long long)E,
                           (unsigned long long)glob, i, dr);
            }
            cxs_mix_free(m);
        }
    }
    printf("%d configurations of %d datasets: worst deviation, in samples, of a batch %.3f, "
           "of a rank over the epoch %.3f, of a rank at a full round before the last two "
           "%.3f\n",
           trials, n, worst_batch, worst_rank, worst_mid);
    free(f), free(s);
    for (int i = 0; i < n; i++) cxs_dataset_close(ds[i]);
    return 0;
}

static uint64_t lcg(uint64_t *st) { return (*st = *st * 6364136223846793005ull + 1) >> 33; }

/* --utt: utterance mixtures (cxs_mix_utt): for each of TRIALS draws of
 * weights (1..10), frame budget (4000..40000, longer utterances alone),
 * stratification, ranks (1..32) and epoch size (0.1..2.1 times the
 * utterances), every rank's batches of epoch 0: the worst deviation of a
 * batch's count of a source from its size times the share (stratified by
 * shares), of a rank's count over the epoch from its utterances times the
 * share (repeats left out), of a rank's count from the epoch's quota over
 * the ranks, and the widest spread of the ranks' utterance counts. */
static int utterances(int trials, int n, cxs_dataset **ds) {
    uint64_t total = 0, st = 1;
    for (int i = 0; i < n; i++) {
        cxs_info in;
        cxs_dataset_info(ds[i], &in);
        total += in.num_utterances;
    }
    double worst_batch = 0, worst_rank[2] = {0, 0}, worst_eq[2] = {0, 0}, worst_spread[2] = {0, 0};
    int over[2] = {0, 0}, nk[2] = {0, 0};
    for (int t = 0; t < trials; t++) {
        double wt[8];
        for (int i = 0; i < n; i++) wt[i] = 1 + (double)lcg(&st) / 4294967296.0 * 9;
        const uint64_t B = 4000 + lcg(&st) % 36000;
        const uint32_t w = 1 + (uint32_t)(lcg(&st) % 32), strat = (uint32_t)(lcg(&st) % 2);
        const uint64_t E = total * (10 + lcg(&st) % 200) / 100;
        uint64_t lo = UINT64_MAX, hi = 0;
        double wr = 0;
        for (uint32_t r = 0; r < w; r++) {
            cxs_mix_utt_opts o;
            cxs_mix_utt_opts_init(&o);
            o.kind = CXS_UTT_SHUFFLE, o.seed = (uint64_t)t, o.frame_budget = B, o.weights = wt;
            o.epoch_size = E, o.rank = r, o.world_size = w, o.long_alone = 1, o.stratify = strat;
            cxs_mix_utt *m;
            cxs_diag d;
            if (cxs_mix_utt_create((const cxs_dataset *const *)ds, (uint32_t)n, &o, &m, &d)) {
                fprintf(stderr, "%s\n", d.message);
                return 1;
            }
            const uint32_t C = cxs_mix_utt_max_batch(m);
            uint64_t *u = malloc(C * 8), len, cnt[8] = {0}, tot = 0;
            uint32_t *s = malloc(C * 4), k, rep;
            cxs_mix_utt_length(m, 0, NULL, &len);
            for (uint64_t p = 0; p < len; p++) {
                uint64_t bc[8] = {0};
                cxs_mix_utt_batch(m, 0, p, u, s, C, &k, NULL, &rep);
                if (rep) continue;
                for (uint32_t j = 0; j < k; j++) bc[s[j]]++, cnt[s[j]]++;
                tot += k;
                for (int i = 0; i < n && strat == CXS_MIX_STRATIFY_SHARES; i++) {
                    double dv = fabs((double)bc[i] - k * (double)cxs_mix_utt_quota(m, i) / E);
                    if (dv > worst_batch) worst_batch = dv;
                }
            }
            for (int i = 0; i < n; i++) {
                const double q = (double)cxs_mix_utt_quota(m, (uint32_t)i);
                const double dr = fabs((double)cnt[i] - tot * q / E), de = fabs(cnt[i] - q / w);
                if (dr > wr) wr = dr;
                if (de > worst_eq[strat]) worst_eq[strat] = de;
            }
            lo = tot < lo ? tot : lo, hi = tot > hi ? tot : hi;
            free(u), free(s);
            cxs_mix_utt_free(m);
        }
        nk[strat]++;
        if (wr > worst_rank[strat]) worst_rank[strat] = wr;
        if (wr > 1) {
            over[strat]++;
            printf("  over one: trial %d budget %llu, %u ranks, epoch %llu, stratify %s: %.3f\n", t,
                   (unsigned long long)B, w, (unsigned long long)E, strat ? "length" : "shares", wr);
        }
        const double spread = (double)(hi - lo) / ((double)E / w);
        if (spread > worst_spread[strat]) worst_spread[strat] = spread;
    }
    printf("%d utterance mixture configurations of %d datasets: worst deviation, in utterances, "
           "of a batch %.3f (stratified by shares)\n", trials, n, worst_batch);
    for (int k = 0; k < 2; k++)
        printf("  stratify %s (%d configurations): of a rank over the epoch from its utterances "
               "times the share %.3f (%d over one), of a rank from the quota over the ranks "
               "%.3f; widest spread of the ranks' utterance counts %.3f of their mean\n",
               k ? "length" : "shares", nk[k], worst_rank[k], over[k], worst_eq[k],
               worst_spread[k]);
    for (int i = 0; i < n; i++) cxs_dataset_close(ds[i]);
    return 0;
}
