/* remote.h - datasets at URLs (http://, https://, s3://bucket/prefix):
 * fetched into the node-local cache (cache.c) with range requests over
 * libcurl (http.c), then opened from there like a local directory.  The
 * layer below read/, which verifies a fresh copy before it serves a byte
 * of it and holds the entry's shared lock while the dataset is open. */
#ifndef CXS_REMOTE_H
#define CXS_REMOTE_H

#include <stddef.h>
#include <stdint.h>

#include "ctxshard.h"

/* What a fetch left for the opener. */
typedef struct cxs_fetch {
    char local[4096];       /* the cached copy: a dataset directory */
    int lock_fd;            /* the entry's lock: exclusive until cxs_fetch_done */
    int fresh;              /* 1: not verified yet (downloaded now, or cut short
                               before it was): verify it before use */
    uint64_t bytes_fetched; /* bytes downloaded by this call */
    uint64_t dataset_bytes; /* the dataset's files, all of them */
} cxs_fetch;

/* Whether path is a URL this library fetches (http://, https://, s3://). */
int cxs_url_is_remote(const char *path);

/* Make sure a copy of the dataset at url is in the cache (cache_dir, or
 * CTXSHARD_CACHE, or $XDG_CACHE_HOME/ctxshard, or ~/.cache/ctxshard),
 * within limit bytes of cache (0: CTXSHARD_CACHE_LIMIT, else no limit),
 * and lock its entry exclusively.  progress (may be NULL) is called in the
 * calling thread every 100 ms of a download with the bytes the cache holds
 * of the dataset's; a non-zero return stops it (-ECANCELED; what arrived is
 * kept, the next fetch resumes).  Returns 0 with *f filled, or an error
 * naming the URL (nothing locked). */
int cxs_fetch_dataset(const char *url, const char *cache_dir, uint64_t limit,
                      cxs_progress_fn progress, void *user, cxs_fetch *f, cxs_diag *d);

/* After the opener's checks: ok marks a fresh copy verified (never
 * checked again) and keeps the entry's lock shared, so that no eviction
 * removes a dataset that is open; the fd to close when the dataset
 * closes, or -1 (not ok: the lock is released). */
int cxs_fetch_done(cxs_fetch *f, int ok);

/* A complete entry that its opener could not open (a file of it gone):
 * removed under the exclusive lock, so that a fetch downloads it again;
 * the lock is released.  0 or -errno. */
int cxs_fetch_invalidate(cxs_fetch *f);

/* Upload a dataset's files to url: shards (n, their paths and sizes) four
 * at a time, then the manifest, only once every shard is there.  progress
 * (may be NULL) every 100 ms with the bytes sent; non-zero stops it
 * (-ECANCELED, the manifest not sent).  *sent: bytes sent.  0 or an error
 * naming the URL. */
int cxs_push_files(const char *url, const char *const *shards, const uint64_t *sizes, uint32_t n,
                   const char *manifest, uint64_t manifest_size, cxs_progress_fn progress,
                   void *user, uint64_t *sent, cxs_diag *d);

#endif
