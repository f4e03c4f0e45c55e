/* push.c - a local dataset uploaded to a URL (cxs_push_files, behind
 * cxs_dataset_push): its shards first, four at a time, the manifest last,
 * so that a reader, which asks for the manifest first, never opens a
 * dataset whose shards are not all there. */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cxs_format.h"
#include "http.h"
#include "remote.h"
#include "workq.h"

#define PUSH_THREADS 4u

typedef struct pjob {
    const cxs_origin *o;
    const char *const *paths;
    const uint64_t *sizes;
} pjob;

static int put_file(const cxs_origin *o, const char *path, uint64_t size, cxs_diag *d) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return cxs_diagf(d, -errno, "%s: %s", path, strerror(errno));
    const char *name = strrchr(path, '/');
    name = name ? name + 1 : path;
    int rc = cxs_http_put(o, name, fd, size, d);
    close(fd);
    return rc;
}

static int put_shard(void *ctx, uint32_t i, cxs_diag *d) {
    const pjob *j = ctx;
    return put_file(j->o, j->paths[i], j->sizes[i], d);
}

int cxs_push_files(const char *url, const char *const *shards, const uint64_t *sizes, uint32_t n,
                   const char *manifest, uint64_t manifest_size, cxs_progress_fn progress,
                   void *user, uint64_t *sent, cxs_diag *d) {
    if (sent) *sent = 0;
    cxs_origin *o = malloc(sizeof *o);
    if (!o) return cxs_diagf(d, -ENOMEM, "%s: out of memory", url);
    int rc = cxs_origin_parse(url, o, d);
    if (rc) {
        free(o);
        return rc;
    }
    _Atomic uint64_t received;
    _Atomic int cancel;
    cxs_origin_track(o, &received, &cancel);
    uint64_t total = manifest_size;
    for (uint32_t i = 0; i < n; i++) total += sizes[i];
    pjob j = {.o = o, .paths = shards, .sizes = sizes};
    char what[2200];
    snprintf(what, sizeof what, "%s: upload", url);
    const cxs_workq q = {.one = put_shard, .ctx = &j, .n = n, .progress = progress, .user = user,
                         .count = &received, .cancel = &cancel, .total = total};
    rc = cxs_workq_run(&q, PUSH_THREADS, what, d);
    /* the manifest last, once every shard is there */
    if (!rc) rc = put_file(o, manifest, manifest_size, d);
    if (!rc && progress) progress(user, total, total);
    if (sent) *sent = atomic_load(&received);
    free(o);
    return rc;
}
