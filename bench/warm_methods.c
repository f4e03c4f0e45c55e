/* warm_methods.c - which way of pulling files into the page cache reaches
 * the disk's sequential rate: pread into a buffer, readahead(2), or
 * MADV_WILLNEED on a mapping, each over several block sizes.  Before every
 * run the files' cached pages are dropped with POSIX_FADV_DONTNEED (only
 * these files: the rest of the machine's cache is left alone), and after it
 * mincore() counts what is resident, so a method that returns before the
 * data is read shows it.  Methods and block sizes are interleaved, repeated,
 * and reported as medians.
 *
 *   warm_methods [--repeats N] FILE...      (e.g. the shards of a dataset)
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { PREAD, READAHEAD, WILLNEED, NMETHODS };
static const char *names[NMETHODS] = {"pread", "readahead", "madv_willneed"};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void drop(char **files, int n) {
    for (int i = 0; i < n; i++) {
        int fd = open(files[i], O_RDONLY);
        if (fd < 0) continue;
        fdatasync(fd);
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        close(fd);
    }
}

static uint64_t resident(char **files, int n) {
    uint64_t r = 0;
    long page = sysconf(_SC_PAGESIZE);
    for (int i = 0; i < n; i++) {
        int fd = open(files[i], O_RDONLY);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) || !st.st_size) {
            if (fd >= 0) close(fd);
            continue;
        }
        void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
        size_t pages = ((size_t)st.st_size + page - 1) / page;
        unsigned char *v = malloc(pages);
        if (m != MAP_FAILED && v && !mincore(m, (size_t)st.st_size, v))
            for (size_t p = 0; p < pages; p++) r += (v[p] & 1) ? (uint64_t)page : 0;
        free(v);
        if (m != MAP_FAILED) munmap(m, (size_t)st.st_size);
        close(fd);
    }
    return r;
}

/* One pass over the files; returns the bytes asked for. */
static uint64_t warm(int method, size_t block, char **files, int n, char *buf) {
    uint64_t total = 0;
    for (int i = 0; i < n; i++) {
        int fd = open(files[i], O_RDONLY);
        struct stat st;
        if (fd < 0 || fstat(fd, &st)) {
            perror(files[i]);
            exit(3);
        }
        uint64_t size = (uint64_t)st.st_size;
        void *m = NULL;
        if (method == WILLNEED) m = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
        if (method == PREAD) posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
        for (uint64_t off = 0; off < size; off += block) {
            size_t len = size - off < block ? (size_t)(size - off) : block;
            if (method == PREAD) {
                if (pread(fd, buf, len, (off_t)off) < 0) perror("pread");
            } else if (method == READAHEAD) {
                readahead(fd, (off_t)off, len);
            } else {
                madvise((char *)m + off, len, MADV_WILLNEED);
            }
        }
        if (m) munmap(m, size);
        close(fd);
        total += size;
    }
    return total;
}

int main(int argc, char **argv) {
    int repeats = 3, first = 1;
    if (argc > 2 && !strcmp(argv[1], "--repeats")) {
        repeats = atoi(argv[2]);
        first = 3;
    }
    if (first >= argc || repeats < 1) {
        fprintf(stderr, "usage: warm_methods [--repeats N] FILE...\n");
        return 2;
    }
    char **files = argv + first;
    int n = argc - first;
    static const size_t blocks[] = {1u << 20, 8u << 20, 64u << 20};
    enum { NB = sizeof blocks / sizeof *blocks };
    char *buf = malloc(64u << 20);
    double *rate = calloc((size_t)NMETHODS * NB * repeats, sizeof *rate);
    double *res = calloc((size_t)NMETHODS * NB * repeats, sizeof *res);
    if (!buf || !rate || !res) return 3;
    uint64_t bytes = 0;
    for (int r = 0; r < repeats; r++)
        for (int b = 0; b < NB; b++)
            for (int m = 0; m < NMETHODS; m++) {
                drop(files, n);
                double t = now_s();
                bytes = warm(m, blocks[b], files, n, buf);
                double dt = now_s() - t;
                size_t at = ((size_t)m * NB + b) * repeats + r;
                rate[at] = (double)bytes / dt / 1e6;
                res[at] = 100.0 * (double)resident(files, n) / (double)bytes;
            }
    printf("%.1f MB in %d file%s, %d repeats, medians (page cache of these files dropped "
           "before each run)\n", bytes / 1e6, n, n == 1 ? "" : "s", repeats);
    printf("%-14s %8s %12s %12s\n", "method", "block", "MB/s", "resident %");
    for (int m = 0; m < NMETHODS; m++)
        for (int b = 0; b < NB; b++) {
            size_t at = ((size_t)m * NB + b) * repeats;
            qsort(rate + at, repeats, sizeof *rate, cmp);
            qsort(res + at, repeats, sizeof *res, cmp);
            printf("%-14s %6zuMi %12.0f %12.1f\n", names[m], blocks[b] >> 20,
                   rate[at + repeats / 2], res[at + repeats / 2]);
        }
    printf("(resident %% below 100 means the call returned before the data was read:\n"
           " its rate is not a reading rate)\n");
    free(buf);
    free(rate);
    free(res);
    return 0;
}
