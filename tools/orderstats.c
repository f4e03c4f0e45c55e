/* orderstats.c - `ctxshard bench-read --order-stats`: how random an order
 * is, in numbers.  Frames of one utterance are correlated, so two figures
 * say what a model sees: how many utterances a batch draws from, and how
 * far apart in the epoch an utterance's frames are served. */
#include "orderstats.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxshard.h"
#include "util.h"

typedef struct order_figures {
    double distinct_mean;  /* utterances per batch */
    uint64_t distinct_min;
    double spread_p10, spread_median, spread_p90; /* (last - first batch) / (batches - 1) */
} order_figures;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Utterance of a frame: the last u with start[u] <= f. */
static uint64_t utt_of(const uint64_t *start, uint64_t U, uint64_t f) {
    uint64_t lo = 0, hi = U;
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (start[mid] <= f) lo = mid;
        else hi = mid;
    }
    return lo;
}

/* One epoch of sampler s in batches of B: the figures above.  Work arrays
 * of U entries each are the caller's. */
static int figures(const cxs_sampler *s, const uint64_t *start, uint64_t U, uint64_t n,
                   uint32_t B, uint64_t *stamp, uint64_t *first, uint64_t *last, double *spread,
                   order_figures *out) {
    uint64_t *frames = malloc((size_t)B * sizeof *frames);
    if (!frames) return -1;
    const uint64_t nb = (n + B - 1) / B;
    double sum = 0;
    uint64_t mn = UINT64_MAX, full = 0;
    memset(stamp, 0, U * sizeof *stamp);
    for (uint64_t b = 0; b < nb; b++) {
        uint64_t pos = b * B, m = n - pos < B ? n - pos : B, distinct = 0;
        if (cxs_sampler_get(s, 0, pos, (size_t)m, frames)) {
            free(frames);
            return -1;
        }
        for (uint64_t i = 0; i < m; i++) {
            uint64_t u = utt_of(start, U, frames[i]);
            if (stamp[u] != b + 1) { /* first time in this batch */
                if (!stamp[u]) first[u] = b;
                stamp[u] = b + 1;
                last[u] = b;
                distinct++;
            }
        }
        if (m == B || nb == 1) { /* full batches: the short last one would skew these */
            sum += (double)distinct;
            full++;
            if (distinct < mn) mn = distinct;
        }
    }
    free(frames);
    const double span = nb > 1 ? (double)(nb - 1) : 1.0; /* the widest spread possible */
    for (uint64_t u = 0; u < U; u++) spread[u] = (double)(last[u] - first[u]) / span;
    qsort(spread, U, sizeof *spread, cmp_double);
    out->distinct_mean = sum / (double)full;
    out->distinct_min = mn;
    out->spread_p10 = spread[U / 10];
    out->spread_median = spread[U / 2];
    out->spread_p90 = spread[U * 9 / 10];
    return 0;
}

int order_stats_run(const char *dir, const bench_read_opts *o) {
    cxs_dataset *ds;
    int rc = open_dataset(dir, NULL, &ds);
    if (rc) return rc;
    cxs_info in;
    cxs_dataset_info(ds, &in);
    const uint64_t U = in.num_utterances, n = in.num_frames;
    uint64_t *start = malloc((U + 1) * sizeof *start), *stamp = malloc(U * sizeof *stamp);
    uint64_t *first = malloc(U * sizeof *first), *last = malloc(U * sizeof *last);
    double *spread = malloc(U * sizeof *spread);
    int ec = 0;
    if (!start || !stamp || !first || !last || !spread || !U) {
        warnx_("%s: %s", dir, U ? "out of memory" : "the dataset has no utterances");
        ec = U ? EXIT_SYSTEM : EXIT_DATA;
        goto out;
    }
    for (uint64_t u = 0; u < U; u++) {
        cxs_utterance ut;
        cxs_diag ud = {0};
        rc = cxs_dataset_utterance_ex(ds, u, CXS_UTTERANCE_NO_DATA, &ut, &ud);
        if (rc) { /* a damaged INDEX or IDS block (format 1.3) */
            warnx_("%s", ud.message[0] ? ud.message : cxs_strerror(rc));
            ec = exit_code_for(rc);
            goto out;
        }
        start[u] = ut.first_frame;
    }
    start[U] = n;
    printf("%s: %llu frames, %llu utterances; batches of %u, seed %llu, epoch 0\n", dir,
           (unsigned long long)n, (unsigned long long)U, o->batch, (unsigned long long)o->seed);
    printf("%-11s %26s   %s\n", "", "utterances per full batch",
           "spread of an utterance's frames over the epoch");
    printf("%-11s %12s %13s   %10s %10s %10s\n", "order", "mean", "min", "p10", "median", "p90");
    static const struct {
        const char *name;
        uint32_t kind;
    } orders[] = {{"sequential", CXS_SAMPLER_SEQUENTIAL},
                  {"shuffle", CXS_SAMPLER_SHUFFLE},
                  {"block", CXS_SAMPLER_BLOCK}};
    for (size_t k = 0; k < sizeof orders / sizeof *orders; k++) {
        if (orders[k].kind == CXS_SAMPLER_BLOCK && !o->memory) {
            printf("%-11s (give --memory SIZE for the block order)\n", orders[k].name);
            continue;
        }
        cxs_sampler_opts so = {.kind = orders[k].kind, .seed = o->seed, .world_size = 1,
                               .memory_bytes = o->memory, .blocks = o->blocks};
        cxs_sampler *s;
        cxs_diag d = {0};
        if ((rc = cxs_sampler_create_ex(ds, &so, &s, &d))) {
            warnx_("%s: cannot create the %s sampler: %s", dir, orders[k].name,
                   d.message[0] ? d.message : cxs_strerror(rc));
            /* a budget too small for the data is the option's fault */
            ec = rc == CXS_E_RANGE || rc == CXS_E_INVALID ? EXIT_USAGE : exit_code_for(rc);
            goto out;
        }
        order_figures f;
        rc = figures(s, start, U, n, o->batch, stamp, first, last, spread, &f);
        if (!rc)
            printf("%-11s %12.1f %13llu   %10.4f %10.4f %10.4f\n", orders[k].name,
                   f.distinct_mean, (unsigned long long)f.distinct_min, f.spread_p10,
                   f.spread_median, f.spread_p90);
        if (!rc && orders[k].kind == CXS_SAMPLER_BLOCK)
            printf("%-11s memory %llu bytes: %llu blocks of %llu bytes, %u drawn from at once\n",
                   "", (unsigned long long)o->memory,
                   (unsigned long long)cxs_sampler_num_blocks(s, 0),
                   (unsigned long long)cxs_sampler_block_bytes(s), o->blocks ? o->blocks : 8);
        cxs_sampler_free(s);
        if (rc) {
            warnx_("%s: %s order: %s", dir, orders[k].name, cxs_strerror(rc));
            ec = EXIT_SYSTEM;
            goto out;
        }
    }
    printf("spread: (last batch - first batch holding a frame of the utterance) /\n"
           "(batches of the epoch - 1), over all utterances: 0 when an utterance is served\n"
           "within one batch, 1 when its frames reach from the first batch to the last\n");
out:
    free(start);
    free(stamp);
    free(first);
    free(last);
    free(spread);
    cxs_dataset_close(ds);
    return ec;
}
