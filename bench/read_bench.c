/* read_bench.c - the reader against the physical floor, in one process, on
 * one dataset: ctxshard's loader with 1 and 2 worker threads, and a plain
 * loop that memcpy's the same windows from one big in-memory array.  Also
 * the time from nothing to the first batch and the anonymous memory held
 * while reading a whole epoch.  Prints one "key value" per line for
 * bench/read.py.
 *
 * usage: read_bench DATASET K BATCH BATCHES REPEATS */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "ctxshard.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* CPU seconds of the whole process (every thread): on a shared machine
 * the rate per CPU second moves far less than the rate per second. */
static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The CPU seconds of the last run_floor or run_loader. */
static double last_cpu;

static long rss_anon_kb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "RssAnon: %ld kB", &v) == 1) break;
    if (f) fclose(f);
    return v;
}

/* A field (AnonHugePages, FilePmdMapped, ...) of the mapping holding p,
 * in kB, from /proc/self/smaps; -1 when not found. */
static long smaps_kb(const void *p, const char *field) {
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512];
    int in = 0;
    long v = -1;
    size_t fl = strlen(field);
    while (f && fgets(line, sizeof line, f)) {
        unsigned long a, b;
        char c;
        if (sscanf(line, "%lx-%lx %c", &a, &b, &c) == 3 && strchr(line, '-') < strchr(line, ' ')) {
            in = (uintptr_t)p >= a && (uintptr_t)p < b;
        } else if (in && !strncmp(line, field, fl) && line[fl] == ':') {
            v = atol(line + fl + 1);
            break;
        }
    }
    if (f) fclose(f);
    return v;
}

/* n bytes of src in a fresh anonymous mapping, 2 MiB-aligned, advised
 * MADV_HUGEPAGE (huge = 1) or MADV_NOHUGEPAGE (huge = 0): the floor with
 * and without huge pages, whatever malloc's array got. */
static float *anon_copy(const void *src, size_t n, int huge) {
    size_t A = 2u << 20, len = (n + A - 1) / A * A;
    uint8_t *m = mmap(NULL, len + A, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) exit(1);
    uint8_t *p = (uint8_t *)(((uintptr_t)m + A - 1) & ~(uintptr_t)(A - 1));
    madvise(p, len, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    memcpy(p, src, n);
    return (float *)p;
}

/* Samples/s of the floor: the windows at start[] memcpy'd out of src. */
static double run_floor(const float *src, const size_t *start, uint64_t batches, uint32_t B,
                        size_t W, float *out, volatile float *sink) {
    double t = now(), c0 = cpu_now();
    for (uint64_t bi = 0; bi < batches; bi++) {
        for (uint32_t j = 0; j < B; j++)
            memcpy(out + j * W, src + start[bi * B + j], W * sizeof *out);
        *sink += out[(B - 1) * W];
    }
    last_cpu = cpu_now() - c0;
    return (double)(batches * B) / (now() - t);
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of v[0..n), v left in its order: the paired ratios are
 * taken from the same arrays after their medians. */
static double median(const double *v, int n) {
    double *c = malloc((size_t)n * sizeof *c);
    if (!c) exit(1);
    memcpy(c, v, (size_t)n * sizeof *c);
    qsort(c, (size_t)n, sizeof *c, cmp_d);
    double m = n % 2 ? c[n / 2] : (c[n / 2 - 1] + c[n / 2]) / 2;
    free(c);
    return m;
}

/* Samples/s of the loader over `batches` batches from the epoch's start. */
static double run_loader(cxs_dataset *ds, cxs_sampler *s, uint32_t k, uint32_t B,
                         uint32_t threads, uint64_t batches, volatile float *sink) {
    cxs_loader_opts lo = {.k = k, .batch_size = B, .threads = threads, .labels = 1};
    cxs_loader *l;
    if (cxs_loader_create(ds, s, &lo, 1, 0, &l)) exit(1);
    const cxs_batch *b;
    uint64_t n = 0;
    double t0 = now(), c0 = cpu_now();
    for (uint64_t i = 0; i < batches; i++) {
        if (cxs_loader_next(l, &b) || !b) exit(1);
        *sink += b->x[b->n - 1]; /* the consumer touches the batch */
        n += b->n;
    }
    double dt = now() - t0;
    last_cpu = cpu_now() - c0;
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
    /* Controls for the per-page cost: the same copies out of anonymous
     * memory with 4 KiB pages and with 2 MiB pages, and straight out of
     * the shard's mapping (the page cache, as the loader reads it). */
    size_t bytes = total_rows * in.dim * sizeof *big;
    float *small4k = anon_copy(base, bytes, 0), *huge2m = anon_copy(base, bytes, 1);
    printf("floor_anon_huge_kb %ld\nanon4k_huge_kb %ld\nanon2m_huge_kb %ld\nmap_pmd_kb %ld\n",
           smaps_kb(big, "AnonHugePages"), smaps_kb(small4k, "AnonHugePages"),
           smaps_kb(huge2m, "AnonHugePages"), smaps_kb(base, "FilePmdMapped"));
    printf("features_kb %zu\n", bytes / 1024);
    /* The same dataset opened again with its features and labels copied
     * into huge pages (cxs_open_opts.hugepage_budget), its own sampler. */
    cxs_open_opts oo = {.cache_bytes = CXS_DEFAULT_CACHE_BYTES, .hugepage_budget = UINT64_MAX};
    cxs_dataset *dh;
    t0 = now();
    if (cxs_dataset_open_ex(path, &oo, &dh, &d)) {
        fprintf(stderr, "%s\n", d.message);
        return 1;
    }
    printf("open_huge_ms %.3f\n", (now() - t0) * 1e3);
    cxs_hugepage_info hi;
    cxs_dataset_hugepages(dh, &hi);
    printf("huge_copy_kb %llu\nhuge_copy_huge_kb %llu\n", (unsigned long long)(hi.bytes / 1024),
           (unsigned long long)(hi.huge_bytes / 1024));
    if (!hi.bytes) fprintf(stderr, "read_bench: no huge-page copy: %s\n", hi.reason);
    cxs_sampler *sh;
    if (cxs_sampler_create(dh, &so, &sh)) return 1;
    double *r_floor = malloc(reps * sizeof(double)), *r1 = malloc(reps * sizeof(double)),
           *r2 = malloc(reps * sizeof(double)), *r4k = malloc(reps * sizeof(double)),
           *r2m = malloc(reps * sizeof(double)), *rmap = malloc(reps * sizeof(double)),
           *rh = malloc(reps * sizeof(double));
    /* per CPU second: the same, NRUNS of them per repetition */
    enum { NRUNS = 7 };
    double *cpu = malloc(NRUNS * reps * sizeof(double));
    /* Each repetition runs every competitor once, starting one further
     * along the list than the last, so that none always runs first (just
     * after the loaders' threads) or last. */
    for (int r = 0; r < reps; r++) {
        for (int q = 0; q < NRUNS; q++) {
            int c = (r + q) % NRUNS;
            switch (c) {
            case 0: r_floor[r] = run_floor(big, start, batches, B, W, out, &sink); break;
            case 1: r4k[r] = run_floor(small4k, start, batches, B, W, out, &sink); break;
            case 2: r2m[r] = run_floor(huge2m, start, batches, B, W, out, &sink); break;
            case 3: rmap[r] = run_floor(base, start, batches, B, W, out, &sink); break;
            case 4: r1[r] = run_loader(ds, s, k, B, 1, batches, &sink); break;
            case 5: rh[r] = run_loader(dh, sh, k, B, 1, batches, &sink); break;
            default: r2[r] = run_loader(ds, s, k, B, 2, batches, &sink); break;
            }
            cpu[c * reps + r] = (double)nsamp / last_cpu;
        }
    }
    static const char *names[NRUNS] = {"floor", "anon4k", "anon2m", "map", "loader1",
                                       "loader1_huge", "loader2"};
    for (int c = 0; c < NRUNS; c++) {
        double *v = malloc(reps * sizeof(double));
        for (int r = 0; r < reps; r++) v[r] = cpu[c * reps + r] / cpu[r]; /* paired, per CPU s */
        printf("%s_cpu_sps %.0f\n%s_cpu_over_floor %.4f\n", names[c], median(cpu + c * reps, reps),
               names[c], median(v, reps));
        free(v);
    }
    printf("loader1_huge_sps %.0f\n", median(rh, reps));
    for (int r = 0; r < reps; r++) rh[r] /= r_floor[r];
    printf("loader1_huge_over_floor %.4f\n", median(rh, reps));
    printf("floor_anon4k_sps %.0f\nfloor_anon2m_sps %.0f\nfloor_map_sps %.0f\n", median(r4k, reps),
           median(r2m, reps), median(rmap, reps));
    for (int r = 0; r < reps; r++) r4k[r] /= r_floor[r], r2m[r] /= r_floor[r], rmap[r] /= r_floor[r];
    printf("anon4k_over_floor %.4f\nanon2m_over_floor %.4f\nmap_over_floor %.4f\n",
           median(r4k, reps), median(r2m, reps), median(rmap, reps));
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
    cxs_sampler_free(sh);
    cxs_dataset_close(dh);
    cxs_dataset_close(ds);
    return 0;
}
