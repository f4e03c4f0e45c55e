/* map_advice.c - what the advice on a shard's mapping changes for random
 * windows of cached data: the loader's window starts (shuffle sampler,
 * k=30) copied out of a fresh read-only mapping of the shard, first touch
 * and again, under MADV_NORMAL, MADV_RANDOM (the loader's default: no
 * fault-around), MADV_WILLNEED, MADV_POPULATE_READ (every page mapped
 * before the copies, its time counted) and MADV_HUGEPAGE.  Minor faults and
 * CPU seconds per pass, medians over repetitions whose order rotates.
 *
 * usage: map_advice DATASET SHARD_FILE WINDOWS REPEATS
 * (DATASET: one float32 shard with k=30 <= guard; SHARD_FILE: its file) */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench_clock.h"
#include "ctxshard.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static long minflt(void) {
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return r.ru_minflt;
}

enum { NADV = 5 };
static const char *names[NADV] = {"normal", "random", "willneed", "populate_read", "hugepage"};
static const int advice[NADV] = {MADV_NORMAL, MADV_RANDOM, MADV_WILLNEED, MADV_POPULATE_READ,
                                 MADV_HUGEPAGE};

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: map_advice DATASET SHARD_FILE WINDOWS REPEATS\n");
        return 2;
    }
    const uint32_t k = 30;
    size_t n = (size_t)atoll(argv[3]);
    int reps = atoi(argv[4]);
    cxs_dataset *ds;
    cxs_diag d;
    if (cxs_dataset_open(argv[1], &ds, &d)) {
        fprintf(stderr, "%s\n", d.message);
        return 1;
    }
    cxs_info in;
    cxs_dataset_info(ds, &in);
    if (in.num_shards != 1 || in.dtype != CXS_DTYPE_F32 || k > in.guard) {
        fprintf(stderr, "map_advice wants one float32 shard and k <= guard\n");
        return 1;
    }
    int fd = open(argv[2], O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st)) return 1;
    /* window starts as offsets into the shard file */
    const uint8_t *m0 = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    const void *w0;
    cxs_dataset_window(ds, 0, 0, &w0);
    if (m0 == MAP_FAILED) return 1;
    /* the feature row of frame 0 in the library's mapping and in ours */
    const uint8_t *hit = memmem(m0, (size_t)st.st_size, w0, (size_t)in.dim * 4 * 4);
    if (!hit) return 1;
    const int64_t delta = (const uint8_t *)w0 - hit; /* library address - file's */
    cxs_sampler *s;
    cxs_sampler_opts so = {.kind = CXS_SAMPLER_SHUFFLE, .seed = 1, .world_size = 1};
    if (cxs_sampler_create(ds, &so, &s)) return 1;
    uint64_t *fr = malloc(n * sizeof *fr);
    size_t *off = malloc(n * sizeof *off);
    cxs_sampler_get(s, 1, 0, n, fr);
    for (size_t i = 0; i < n; i++) {
        const void *w;
        cxs_dataset_window(ds, fr[i], k, &w);
        off[i] = (size_t)((const uint8_t *)w - delta - m0);
    }
    munmap((void *)m0, (size_t)st.st_size);
    const size_t W = (2 * (size_t)k + 1) * in.dim * 4;
    uint8_t *out = malloc(1024 * W);
    memset(out, 0, 1024 * W);
    double *t1 = malloc(NADV * reps * sizeof(double)), *t2 = malloc(NADV * reps * sizeof(double));
    double *f1 = malloc(NADV * reps * sizeof(double));
    volatile uint8_t sink = 0;
    for (int r = 0; r < reps; r++) {
        for (int q = 0; q < NADV; q++) {
            int a = (r + q) % NADV;
            double c0 = cpu_now();
            long fl0 = minflt();
            uint8_t *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
            if (m == MAP_FAILED) return 1;
            madvise(m, (size_t)st.st_size, advice[a]);
            for (int pass = 0; pass < 2; pass++) {
                if (pass == 1) c0 = cpu_now();
                for (size_t i = 0; i < n; i++) memcpy(out + (i & 1023) * W, m + off[i], W);
                sink += out[W - 1];
                if (pass == 0) {
                    t1[a * reps + r] = (double)n / (cpu_now() - c0);
                    f1[a * reps + r] = (double)(minflt() - fl0);
                } else {
                    t2[a * reps + r] = (double)n / (cpu_now() - c0);
                }
            }
            munmap(m, (size_t)st.st_size);
        }
    }
    printf("%llu windows of %zu bytes from a %lld-byte shard, %d repetitions, medians\n",
           (unsigned long long)n, W, (long long)st.st_size, reps);
    printf("%-14s %14s %16s %16s\n", "advice", "faults 1st", "1st pass /CPU s", "2nd pass /CPU s");
    for (int a = 0; a < NADV; a++)
        printf("%-14s %14.0f %16.0f %16.0f\n", names[a], median(f1 + a * reps, reps),
               median(t1 + a * reps, reps), median(t2 + a * reps, reps));
    double la[3];
    if (getloadavg(la, 3) == 3) printf("load average at the end: %.2f %.2f %.2f\n", la[0], la[1], la[2]);
    close(fd);
    cxs_sampler_free(s);
    cxs_dataset_close(ds);
    return sink == 255 ? 3 : 0;
}
