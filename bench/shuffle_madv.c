/* shuffle_madv.c - one measurement of the shuffled frame loader from C: the
 * time to its first batch and its samples/s over the next BATCHES batches
 * (context 4, batch 1024, 2 threads), with the loader's default read-ahead
 * (which marks the feature mapping MADV_RANDOM: no fault-around) or with
 * CXS_READAHEAD_OFF (the mapping's advice left alone).  bench/many_utts.py
 * --madv runs it in fresh processes, datasets and modes alternating.
 *
 *   shuffle_madv DATASET auto|off BATCHES   -> one JSON line */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "ctxshard.h"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static long minflt(void) {
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return r.ru_minflt;
}

int main(int argc, char **argv) {
    if (argc != 4 || (strcmp(argv[2], "auto") && strcmp(argv[2], "off"))) {
        fprintf(stderr, "usage: shuffle_madv DATASET auto|off BATCHES\n");
        return 2;
    }
    const int ra_off = !strcmp(argv[2], "off"), nb = atoi(argv[3]);
    cxs_diag d;
    cxs_dataset *ds;
    double t0 = now_s();
    if (cxs_dataset_open(argv[1], &ds, &d)) {
        fprintf(stderr, "%s\n", d.message);
        return 1;
    }
    cxs_sampler_opts so = {.kind = CXS_SAMPLER_SHUFFLE, .seed = 1};
    cxs_sampler *s;
    if (cxs_sampler_create(ds, &so, &s)) return 1;
    cxs_loader_opts o = {.k = 4, .batch_size = 1024, .threads = 2,
                         .readahead = ra_off ? CXS_READAHEAD_OFF : 0};
    cxs_loader *l;
    if (cxs_loader_create_ex(ds, s, &o, 0, 0, &l, &d)) {
        fprintf(stderr, "%s\n", d.message);
        return 1;
    }
    const cxs_batch *b;
    if (cxs_loader_next_ex(l, &b, &d) || !b) return 1;
    double t1 = now_s(), sum = 0;
    long f0 = minflt();
    int n = 0;
    for (; n < nb; n++) {
        if (cxs_loader_next_ex(l, &b, &d) || !b) break;
        sum += b->x[0]; /* touched */
    }
    double t2 = now_s();
    printf("{\"first_ms\": %.3f, \"samples_s\": %.1f, \"minflt_per_batch\": %.2f, \"batches\": %d, "
           "\"x\": %g}\n",
           (t1 - t0) * 1e3, n * 1024.0 / (t2 - t1), n ? (double)(minflt() - f0) / n : 0.0, n,
           sum == 12345.678 ? 1.0 : 0.0);
    cxs_loader_free(l);
    cxs_sampler_free(s);
    cxs_dataset_close(ds);
    return 0;
}
