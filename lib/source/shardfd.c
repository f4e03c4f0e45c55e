/* shardfd.c - shard descriptors and dropping ranges (shardfd.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shardfd.h"

int cxs_shard_fds_init(cxs_shard_fds *f, const cxs_dataset *ds) {
    const uint32_t S = ds->meta.num_shards;
    f->ds = ds;
    f->fds = malloc(S * sizeof *f->fds);
    f->fid = calloc(2 * (size_t)S, sizeof *f->fid);
    if (!f->fds || !f->fid) return -ENOMEM;
    for (uint32_t i = 0; i < S; i++) f->fds[i] = -1;
    return 0;
}

void cxs_shard_fds_free(cxs_shard_fds *f) {
    for (uint32_t i = 0; f->fds && i < f->ds->meta.num_shards; i++)
        if (f->fds[i] >= 0) close(f->fds[i]);
    free(f->fds);
    free(f->fid);
    f->fds = NULL, f->fid = NULL;
}

void cxs_shard_fds_after_fork(cxs_shard_fds *f) {
    for (uint32_t i = 0; f->fds && i < f->ds->meta.num_shards; i++) {
        struct stat st;
        if (f->fds[i] >= 0 && (fstat(f->fds[i], &st) != 0 ||
                               (uint64_t)st.st_dev != f->fid[2 * i] ||
                               (uint64_t)st.st_ino != f->fid[2 * i + 1]))
            f->fds[i] = -1;
    }
}

int cxs_shard_fd(cxs_shard_fds *f, uint32_t s) {
    int fd = __atomic_load_n(&f->fds[s], __ATOMIC_ACQUIRE);
    if (fd >= 0) return fd;
    struct stat st;
    if ((fd = open(f->ds->shards[s].path, O_RDONLY | O_CLOEXEC)) < 0) return fd;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return -1;
    }
    f->fid[2 * s] = (uint64_t)st.st_dev, f->fid[2 * s + 1] = (uint64_t)st.st_ino;
    int none = -1; /* another thread may have opened it meanwhile: keep one */
    if (!__atomic_compare_exchange_n(&f->fds[s], &none, fd, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE)) {
        close(fd);
        return none;
    }
    return fd;
}

void cxs_range_drop(cxs_shard_fds *f, uint32_t s, uint64_t off, uint64_t len) {
    if (!len) return;
    const shard *sh = &f->ds->shards[s];
    long ps = sysconf(_SC_PAGESIZE);
    const uintptr_t P = ps > 0 ? (uintptr_t)ps : 4096;
    uintptr_t a = ((uintptr_t)(sh->map + off) + P - 1) & ~(P - 1);
    uintptr_t e = (uintptr_t)(sh->map + off + len) & ~(P - 1);
    if (e > a) madvise((void *)a, e - a, MADV_DONTNEED);
    int fd = cxs_shard_fd(f, s);
    if (fd >= 0) posix_fadvise(fd, (off_t)off, (off_t)len, POSIX_FADV_DONTNEED);
}

void cxs_features_random(const cxs_dataset *ds) {
    const uintptr_t P = (uintptr_t)sysconf(_SC_PAGESIZE);
    for (uint32_t i = 0; i < ds->meta.num_shards; i++) {
        const shard *sh = &ds->shards[i];
        uintptr_t a = (uintptr_t)sh->features & ~(P - 1), e = (uintptr_t)(sh->map + sh->size);
        if (sh->features) madvise((void *)a, e - a, MADV_RANDOM);
    }
}
