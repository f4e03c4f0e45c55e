/* block_check.c - what the block source's check costs the full shuffle
 * (format 1.3: every block of FEATURES and LABELS checked against its
 * block sum at its first use in the process, lib/read/blocksrc.c).
 *
 * Paired, in one process, on one dataset: each round opens the dataset
 * twice -- with the check, and with CXS_BLOCKCHECK=off set at open (a
 * test hook: the library must be built with -Dtest_hooks=true, or both
 * runs check) -- and times a whole first epoch of the shuffled frame
 * loader on each (every block checked as its first window needs it), in
 * alternating order, then PAIRS later epochs of each, alternating (every
 * section's `all` flag set: one load a window).  Both opens map the files
 * afresh, so the first epoch's page faults are in both; warm the files
 * into the page cache first (cat them).  Prints every round's seconds
 * and the medians of the pairs' ratios check/no check.
 *
 *   block_check DATASET [ROUNDS=5] [PAIRS=4] [K=20] [THREADS=2] [BATCH=1024] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctxshard.h"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* Seconds of epoch `epoch` of loader l (every batch taken and touched). */
static double epoch_s(cxs_loader *l, uint64_t epoch, double *sink) {
    cxs_diag d;
    if (cxs_loader_reset(l, epoch, 0)) exit(1);
    double t0 = now_s();
    const cxs_batch *b;
    int rc;
    while (!(rc = cxs_loader_next_ex(l, &b, &d)) && b) *sink += b->x[b->n - 1] + (double)b->y[0];
    if (rc) {
        fprintf(stderr, "%s\n", d.message);
        exit(1);
    }
    return now_s() - t0;
}

/* An open with the check or without it, and its shuffled loader. */
typedef struct run {
    cxs_dataset *ds;
    cxs_sampler *s;
    cxs_loader *l;
} run;

static void open_run(run *r, const char *path, int check, uint32_t k, uint32_t threads,
                     uint32_t batch) {
    if (check) unsetenv("CXS_BLOCKCHECK");
    else setenv("CXS_BLOCKCHECK", "off", 1);
    cxs_diag d;
    if (cxs_dataset_open(path, &r->ds, &d)) {
        fprintf(stderr, "%s\n", d.message);
        exit(1);
    }
    unsetenv("CXS_BLOCKCHECK");
    cxs_sampler_opts so = {.kind = CXS_SAMPLER_SHUFFLE, .seed = 1};
    cxs_loader_opts o = {.k = k, .batch_size = batch, .threads = threads, .labels = 1};
    if (cxs_sampler_create(r->ds, &so, &r->s) ||
        cxs_loader_create_ex(r->ds, r->s, &o, 0, 0, &r->l, &d)) {
        fprintf(stderr, "loader: %s\n", d.message);
        exit(1);
    }
}

static void close_run(run *r) {
    cxs_loader_free(r->l);
    cxs_sampler_free(r->s);
    cxs_dataset_close(r->ds);
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: block_check DATASET [ROUNDS=5] [PAIRS=4] [K=20] [THREADS=2] "
                        "[BATCH=1024]\n");
        return 2;
    }
    const int rounds = argc > 2 ? atoi(argv[2]) : 5, pairs = argc > 3 ? atoi(argv[3]) : 4;
    const uint32_t k = argc > 4 ? (uint32_t)atoi(argv[4]) : 20;
    const uint32_t threads = argc > 5 ? (uint32_t)atoi(argv[5]) : 2;
    const uint32_t batch = argc > 6 ? (uint32_t)atoi(argv[6]) : 1024;
    if (rounds < 1 || rounds > 100 || pairs < 1 || pairs > 100) return 2;
    static double r1[100], r2[10000], on1[100], off1[100], on2[10000], off2[10000];
    double sink = 0;
    int n2 = 0;
    printf("round  first epoch: check  no check | later epochs (pairs): check  no check  (s)\n");
    for (int r = 0; r < rounds; r++) {
        /* fresh opens (no block checked yet, the mappings new), their first
         * epochs in alternating order: drift in the machine's load falls
         * on both */
        run a, b;
        open_run(&a, argv[1], 1, k, threads, batch);
        open_run(&b, argv[1], 0, k, threads, batch);
        if (r % 2 == 0) {
            on1[r] = epoch_s(a.l, 0, &sink);
            off1[r] = epoch_s(b.l, 0, &sink);
        } else {
            off1[r] = epoch_s(b.l, 0, &sink);
            on1[r] = epoch_s(a.l, 0, &sink);
        }
        r1[r] = on1[r] / off1[r];
        /* later epochs on the same opens, alternating */
        double s_on = 0, s_off = 0;
        for (int p = 0; p < pairs; p++, n2++) {
            if ((r + p) % 2 == 0) {
                on2[n2] = epoch_s(a.l, 1 + (uint64_t)p, &sink);
                off2[n2] = epoch_s(b.l, 1 + (uint64_t)p, &sink);
            } else {
                off2[n2] = epoch_s(b.l, 1 + (uint64_t)p, &sink);
                on2[n2] = epoch_s(a.l, 1 + (uint64_t)p, &sink);
            }
            r2[n2] = on2[n2] / off2[n2];
            s_on += on2[n2], s_off += off2[n2];
        }
        printf("%5d  %18.3f %9.3f | %28.3f %9.3f\n", r, on1[r], off1[r], s_on / pairs,
               s_off / pairs);
        fflush(stdout);
        close_run(&a);
        close_run(&b);
    }
    const double m1 = median(r1, rounds), m2 = median(r2, n2);
    printf("median ratio check/no check: first epoch %.4f (%d pairs), later epochs %.4f "
           "(%d pairs); k=%u, batch %u, %u threads\n",
           m1, rounds, m2, n2, k, batch, threads);
    printf("median seconds: first epoch %.3f / %.3f, later %.3f / %.3f\n", median(on1, rounds),
           median(off1, rounds), median(on2, n2), median(off2, n2));
    return sink == 0.12345 ? 3 : 0;
}
