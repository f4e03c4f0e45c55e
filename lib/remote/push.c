/* push.c - a local dataset uploaded to a URL (cxs_push_files, behind
 * cxs_dataset_push): its shards first, four at a time, the manifest last,
 * so that a reader, which asks for the manifest first, never opens a
 * dataset whose shards are not all there. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cxs_format.h"
#include "http.h"
#include "remote.h"

#define PUSH_THREADS 4u

typedef struct pjob {
    const cxs_origin *o;
    const char *const *paths;
    const uint64_t *sizes;
    uint32_t n;
    _Atomic uint32_t next;
    _Atomic int stop;
    _Atomic unsigned running;
    pthread_mutex_t mu;
    int rc;
    cxs_diag d;
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

static void *push_main(void *p) {
    pjob *j = p;
    cxs_diag d;
    while (!atomic_load(&j->stop)) {
        uint32_t i = atomic_fetch_add(&j->next, 1);
        if (i >= j->n) break;
        int rc = put_file(j->o, j->paths[i], j->sizes[i], &d);
        if (rc) {
            pthread_mutex_lock(&j->mu);
            if (!j->rc) {
                j->rc = rc;
                j->d = d;
            }
            pthread_mutex_unlock(&j->mu);
            atomic_store(&j->stop, 1);
        }
    }
    atomic_fetch_sub(&j->running, 1);
    return NULL;
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
    atomic_init(&received, 0);
    atomic_init(&cancel, 0);
    o->received = &received;
    o->cancel = &cancel;
    uint64_t total = manifest_size;
    for (uint32_t i = 0; i < n; i++) total += sizes[i];
    pjob j = {.o = o, .paths = shards, .sizes = sizes, .n = n};
    atomic_init(&j.next, 0);
    atomic_init(&j.stop, 0);
    atomic_init(&j.running, 0);
    pthread_mutex_init(&j.mu, NULL);
    pthread_t th[PUSH_THREADS];
    int started[PUSH_THREADS] = {0};
    unsigned nt = n < PUSH_THREADS ? (n ? n : 1) : PUSH_THREADS, n_started = 0;
    for (unsigned t = 0; t < nt; t++) {
        atomic_fetch_add(&j.running, 1);
        if ((started[t] = pthread_create(&th[t], NULL, push_main, &j) == 0)) n_started++;
        else atomic_fetch_sub(&j.running, 1);
    }
    if (!n_started) {
        atomic_fetch_add(&j.running, 1);
        push_main(&j);
    }
    while (atomic_load(&j.running)) {
        struct timespec ts = {0, 100 * 1000000L};
        nanosleep(&ts, NULL);
        if (progress && progress(user, atomic_load(&received), total)) {
            atomic_store(&cancel, 1);
            atomic_store(&j.stop, 1);
        }
    }
    for (unsigned t = 0; t < nt; t++)
        if (started[t]) pthread_join(th[t], NULL);
    pthread_mutex_destroy(&j.mu);
    rc = j.rc;
    if (rc && d) *d = j.d;
    if (!rc && atomic_load(&cancel)) rc = cxs_diagf(d, -ECANCELED, "%s: upload stopped", url);
    /* the manifest last, once every shard is there */
    if (!rc) rc = put_file(o, manifest, manifest_size, d);
    if (!rc && progress) progress(user, total, total);
    if (sent) *sent = atomic_load(&received);
    free(o);
    return rc;
}
