/* read_bench.c - the reader against the physical floor, in one process, on
 * one dataset: ctxshard's loader with 1 and 2 worker threads, and a plain
 * loop that memcpy's the same windows from one big in-memory array.  Also
 * the time from nothing to the first batch and the anonymous memory held
 * while reading a whole epoch.  Prints one "key value" per line for
 * bench/read.py.
 *
 * usage: read_bench DATASET K BATCH BATCHES REPEATS */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctxshard.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static long rss_anon_kb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "RssAnon: %ld kB", &v) == 1) break;
    if (f) fclose(f);
    return v;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Samples/s of the loader over `batches` batches from the epoch's start. */
static double run_loader(cxs_dataset *ds, cxs_sampler *s, uint32_t k, uint32_t B,
                         uint32_t threads, uint64_t batches, volatile float *sink) {
    cxs_loader_opts lo = {.k = k, .batch_size = B, .threads = threads, .labels = 1};
    cxs_loader *l;
    if (cxs_loader_create(ds, s, &lo, 1, 0, &l)) exit(1);
    const cxs_batch *b;
    uint64_t n = 0;
    double t0 = now();
    for (uint64_t i = 0; i < batches; i++) {
        if (cxs_loader_next(l, &b) || !b) exit(1);
        *sink += b->x[b->n - 1]; /* the consumer touches the batch */
        n += b->n;
    }
    double dt = now() - t0;
    cxs_loader_free(l);
    return (double)n / dt;
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: read_bench DATASET K BATCH BATCHES REPEATS\n");
        return 2;
    }
    const char *path = argv[1];
    uint32_t k = (uint32_t)atoi(argv[2]), B = (uint32_t)atoi(argv[3]);
    uint64_t batches = (uint64_t)atoll(argv[4]);
    int reps = atoi(argv[5]);
    volatile float sink = 0;

    /* 1. Time to first batch: open, sampler, loader, first batch. */
    long anon0 = rss_anon_kb();
    double t0 = now();
    cxs_dataset *ds;
    cxs_diag d;
    if (cxs_dataset_open(path, &ds, &d)) {
        fprintf(stderr, "%s\n", d.message);
        return 1;
    }
    double t_open = now() - t0;
    cxs_sampler *s;
    cxs_sampler_opts so = {.kind = CXS_SAMPLER_SHUFFLE, .seed = 1, .world_size = 1};
    if (cxs_sampler_create(ds, &so, &s)) return 1;
    cxs_loader_opts lo = {.k = k, .batch_size = B, .threads = 2, .labels = 1};
    cxs_loader *l;
    if (cxs_loader_create(ds, s, &lo, 0, 0, &l)) return 1;
    const cxs_batch *b;
    if (cxs_loader_next(l, &b) || !b) return 1;
    double t_first = now() - t0;
    /* 2. Anonymous memory while reading the whole epoch. */
    long anon_peak = rss_anon_kb();
    uint64_t epoch_samples = b->n;
    for (;;) {
        if (cxs_loader_next(l, &b)) return 1;
        if (!b) break;
        sink += b->x[0];
        epoch_samples += b->n;
        long a = rss_anon_kb();
        if (a > anon_peak) anon_peak = a;
    }
    cxs_loader_free(l);
    cxs_info in;
    cxs_dataset_info(ds, &in);
    printf("frames %llu\nopen_ms %.3f\nfirst_batch_ms %.3f\n", (unsigned long long)in.num_frames,
           t_open * 1e3, t_first * 1e3);
    printf("epoch_samples %llu\nrss_anon_start_kb %ld\nrss_anon_peak_kb %ld\n",
           (unsigned long long)epoch_samples, anon0, anon_peak);
    printf("ring_kb %llu\n", (unsigned long long)((2 + 2) * (uint64_t)B *
                                                   ((2 * k + 1) * in.dim * 4 + 16) / 1024));
    printf("dataset_kb %llu\n", (unsigned long long)(in.total_bytes / 1024));

    /* 3. The floor: the same windows memcpy'd from one big anonymous array
     * holding the dataset's own padded rows, start offsets precomputed. */
    const size_t W = (2 * (size_t)k + 1) * in.dim;
    const void *base;
    cxs_dataset_window(ds, 0, in.guard, &base); /* the first row of FEATURES */
    cxs_utterance last;
    cxs_dataset_utterance(ds, in.num_utterances - 1, &last);
    size_t total_rows = (size_t)(((const float *)last.features - (const float *)base) / in.dim +
                                 (int64_t)last.num_frames + in.guard);
    if (in.num_shards != 1 || in.dtype != CXS_DTYPE_F32 || k > in.guard) {
        fprintf(stderr, "read_bench wants one float32 shard and k <= guard\n");
        return 1;
    }
    float *big = malloc(total_rows * in.dim * sizeof *big);
    memcpy(big, base, total_rows * in.dim * sizeof *big);
    uint64_t nsamp = batches * B;
    uint64_t *frames = malloc(nsamp * sizeof *frames);
    size_t *start = malloc(nsamp * sizeof *start);
    cxs_sampler_get(s, 1, 0, nsamp, frames);
    for (uint64_t i = 0; i < nsamp; i++) {
        const void *w;
        cxs_dataset_window(ds, frames[i], k, &w);
        start[i] = (size_t)((const float *)w - (const float *)base);
    }
    float *out = malloc(B * W * sizeof *out);
    memset(out, 0, B * W * sizeof *out);
    double *r_floor = malloc(reps * sizeof(double)), *r1 = malloc(reps * sizeof(double)),
           *r2 = malloc(reps * sizeof(double));
    for (int r = 0; r < reps; r++) {
        double t = now();
        for (uint64_t bi = 0; bi < batches; bi++) {
            for (uint32_t j = 0; j < B; j++)
                memcpy(out + j * W, big + start[bi * B + j], W * sizeof *out);
            sink += out[(B - 1) * W];
        }
        r_floor[r] = (double)nsamp / (now() - t);
        r1[r] = run_loader(ds, s, k, B, 1, batches, &sink);
        r2[r] = run_loader(ds, s, k, B, 2, batches, &sink);
    }
    /* Paired ratios: each repetition's loader against the floor measured
     * just before it, which cancels most of the machine's drift. */
    double *q1 = malloc(reps * sizeof(double)), *q2 = malloc(reps * sizeof(double));
    for (int r = 0; r < reps; r++) {
        q1[r] = r1[r] / r_floor[r];
        q2[r] = r2[r] / r_floor[r];
    }
    printf("memcpy_floor_sps %.0f\nloader1_sps %.0f\nloader2_sps %.0f\n", median(r_floor, reps),
           median(r1, reps), median(r2, reps));
    printf("loader1_over_floor %.4f\nloader2_over_floor %.4f\n", median(q1, reps), median(q2, reps));
    free(q1);
    free(q2);
    printf("window_bytes %zu\nsink %g\n", W * sizeof(float), (double)sink);
    free(big);
    free(frames);
    free(start);
    free(out);
    free(r_floor);
    free(r1);
    free(r2);
    cxs_sampler_free(s);
    cxs_dataset_close(ds);
    return 0;
}
