/* block_plan.c - one measurement of the block sampler's epoch plan (issue
 * 28): the memory the plan of one epoch takes (heap bytes allocated, as
 * malloc counts them, and the resident and virtual growth of the process),
 * its build time (median over fresh epochs), the block order's throughput
 * (cxs_sampler_get, batches of 1024 at positions spread over the epoch)
 * and a hash of the order, to compare two builds of the library.
 * bench/block_plan.py runs it in fresh processes against two libraries,
 * alternating.
 *
 *   block_plan DATASET MEMORY_BYTES BLOCKS [all]   -> one JSON line
 *
 * `all` hashes every position of epochs 0 and 1 (else 256 batches of 1024
 * spread over each epoch). */
#include <malloc.h>
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

static size_t heap_bytes(void) { /* glibc: bytes malloc handed out */
    struct mallinfo2 m = mallinfo2();
    return m.uordblks + m.hblkhd;
}

static long status_kib(const char *key) { /* VmRSS, VmSize */
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    size_t k = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, k) && line[k] == ':') v = strtol(line + k + 1, NULL, 10);
    if (f) fclose(f);
    return v;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static uint64_t mix(uint64_t h, uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdull;
}

int main(int argc, char **argv) {
    if (argc < 4 || argc > 5 || (argc == 5 && strcmp(argv[4], "all"))) {
        fprintf(stderr, "usage: block_plan DATASET MEMORY_BYTES BLOCKS [all]\n");
        return 2;
    }
    const int all = argc == 5;
    cxs_diag d;
    cxs_dataset *ds;
    if (cxs_dataset_open(argv[1], &ds, &d)) {
        fprintf(stderr, "%s\n", d.message);
        return 1;
    }
    cxs_info in;
    cxs_dataset_info(ds, &in);
    cxs_sampler_opts so = {.kind = CXS_SAMPLER_BLOCK, .seed = 7,
                           .memory_bytes = strtoull(argv[2], NULL, 10),
                           .blocks = (uint32_t)atoi(argv[3])};
    cxs_sampler *s;
    if (cxs_sampler_create_ex(ds, &so, &s, &d)) { /* checks INDEX whole (1.3) */
        fprintf(stderr, "%s\n", d.message);
        return 1;
    }
    /* the first plan: built and kept in the sampler's cache */
    size_t h0 = heap_bytes();
    long r0 = status_kib("VmRSS"), v0 = status_kib("VmSize");
    double t = now_s();
    uint64_t nb = cxs_sampler_num_blocks(s, 0);
    double first = now_s() - t;
    size_t h1 = heap_bytes();
    long r1 = status_kib("VmRSS"), v1 = status_kib("VmSize");
    /* build time: fresh epochs (the cache keeps the last two) */
    double bt[7];
    for (int e = 0; e < 7; e++) {
        t = now_s();
        cxs_sampler_num_blocks(s, 100 + (uint64_t)e);
        bt[e] = now_s() - t;
    }
    qsort(bt, 7, sizeof *bt, cmp_d);
    /* order hash and throughput, epochs 0 and 1 (their plans, evicted by
     * the builds above, are built again before the clock starts) */
    const uint64_t L = cxs_sampler_length(s), B = 1024;
    uint64_t *fr = malloc(B * sizeof *fr), h = 0, served = 0;
    cxs_sampler_num_blocks(s, 0);
    cxs_sampler_num_blocks(s, 1);
    t = now_s();
    for (uint64_t e = 0; e < 2; e++) {
        const uint64_t nbatch = (L + B - 1) / B, step = all || nbatch <= 256 ? 1 : nbatch / 256;
        for (uint64_t i = 0; i < nbatch; i += step) {
            uint64_t pos = i * B, n = L - pos < B ? L - pos : B;
            if (cxs_sampler_get(s, e, pos, (size_t)n, fr)) {
                fprintf(stderr, "cxs_sampler_get failed\n");
                return 1;
            }
            for (uint64_t k = 0; k < n; k++) h = mix(h, fr[k] ^ (pos + k) << 40);
            served += n;
        }
    }
    double order_s = now_s() - t;
    printf("{\"utterances\": %llu, \"frames\": %llu, \"blocks\": %llu, "
           "\"plan_heap_bytes\": %zu, \"plan_rss_kib\": %ld, \"plan_vm_kib\": %ld, "
           "\"first_plan_s\": %.6f, \"build_s\": %.6f, \"order_frames_per_s\": %.0f, "
           "\"hashed\": %llu, \"order_hash\": \"%016llx\"}\n",
           (unsigned long long)in.num_utterances, (unsigned long long)in.num_frames,
           (unsigned long long)nb, h1 - h0, r1 - r0, v1 - v0, first, bt[3],
           served / order_s, (unsigned long long)served, (unsigned long long)h);
    free(fr);
    cxs_sampler_free(s);
    cxs_dataset_close(ds);
    return 0;
}
