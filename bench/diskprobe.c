/* diskprobe.c - the disk's own rates, for comparing the reader with:
 * sequential read (O_DIRECT, 4 MiB requests, one at a time) and random
 * 8 KiB reads (O_DIRECT) at queue depths 1, 4 and 16 (that many threads,
 * each with one read in flight).  O_DIRECT keeps the page cache out of
 * it, so the figures hold whatever is cached.
 *
 * usage: diskprobe [--seq-mib N] [--seconds S] FILE...
 * prints "seq_mb_s X" and "rand8k_qdN_iops X" lines. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define RAND_BYTES 8192u
#define SEQ_REQ (4u << 20)
#define MAX_FILES 64

static int fds[MAX_FILES];
static uint64_t sizes[MAX_FILES], total;
static int nfiles;
static double seconds = 3.0;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t rng(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

typedef struct worker {
    pthread_t th;
    uint64_t seed, reads;
    double stop_at;
    int err;
} worker;

static void *rand_main(void *arg) {
    worker *w = arg;
    void *buf;
    if (posix_memalign(&buf, 4096, RAND_BYTES)) {
        w->err = 1;
        return NULL;
    }
    while (now() < w->stop_at) {
        for (int i = 0; i < 16; i++) {
            /* a uniformly random aligned 8 KiB of the files */
            uint64_t at = rng(&w->seed) % (total / RAND_BYTES) * RAND_BYTES;
            int f = 0;
            while (at >= sizes[f] / RAND_BYTES * RAND_BYTES) at -= sizes[f] / RAND_BYTES * RAND_BYTES, f++;
            if (pread(fds[f], buf, RAND_BYTES, (off_t)at) != (ssize_t)RAND_BYTES) {
                w->err = 1;
                free(buf);
                return NULL;
            }
            w->reads++;
        }
    }
    free(buf);
    return NULL;
}

static int random_iops(int qd) {
    worker w[64];
    double t0 = now();
    for (int i = 0; i < qd; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].seed = 0x1234567ull * (uint64_t)(i + 1) + (uint64_t)qd;
        w[i].stop_at = t0 + seconds;
        if (pthread_create(&w[i].th, NULL, rand_main, &w[i])) return -1;
    }
    uint64_t reads = 0;
    int err = 0;
    for (int i = 0; i < qd; i++) {
        pthread_join(w[i].th, NULL);
        reads += w[i].reads;
        err |= w[i].err;
    }
    double dt = now() - t0;
    if (err) return -1;
    printf("rand8k_qd%d_iops %.0f\n", qd, (double)reads / dt);
    return 0;
}

static int sequential(uint64_t limit) {
    void *buf;
    if (posix_memalign(&buf, 4096, SEQ_REQ)) return -1;
    uint64_t done = 0;
    double t0 = now();
    for (int f = 0; f < nfiles && done < limit; f++)
        for (uint64_t at = 0; at + SEQ_REQ <= sizes[f] && done < limit; at += SEQ_REQ) {
            if (pread(fds[f], buf, SEQ_REQ, (off_t)at) != (ssize_t)SEQ_REQ) {
                free(buf);
                return -1;
            }
            done += SEQ_REQ;
        }
    double dt = now() - t0;
    free(buf);
    printf("seq_mb_s %.1f\n", (double)done / dt / 1e6);
    return 0;
}

int main(int argc, char **argv) {
    uint64_t seq_mib = 1024;
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (!strcmp(argv[i], "--seq-mib") && i + 1 < argc) seq_mib = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--seconds") && i + 1 < argc) seconds = strtod(argv[++i], NULL);
        else {
            fprintf(stderr, "usage: diskprobe [--seq-mib N] [--seconds S] FILE...\n");
            return 2;
        }
    }
    for (; i < argc && nfiles < MAX_FILES; i++) {
        int fd = open(argv[i], O_RDONLY | O_DIRECT);
        struct stat st;
        if (fd < 0 || fstat(fd, &st)) {
            perror(argv[i]);
            return 1;
        }
        if ((uint64_t)st.st_size < RAND_BYTES) {
            close(fd);
            continue;
        }
        fds[nfiles] = fd;
        sizes[nfiles++] = (uint64_t)st.st_size;
        total += (uint64_t)st.st_size / RAND_BYTES * RAND_BYTES;
    }
    if (!nfiles) {
        fprintf(stderr, "diskprobe: no file of at least 8 KiB\n");
        return 2;
    }
    if (sequential(seq_mib << 20)) {
        perror("diskprobe: sequential read (O_DIRECT)");
        return 1;
    }
    const int qds[] = {1, 4, 16};
    for (int q = 0; q < 3; q++)
        if (random_iops(qds[q])) {
            perror("diskprobe: random read (O_DIRECT)");
            return 1;
        }
    return 0;
}
