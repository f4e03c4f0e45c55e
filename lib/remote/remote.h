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
    int streamed;           /* 1: only the metadata is here (stream.c): the
                               features come as the block loader reads them */
    int offline;            /* 1: the server could not be reached: the cached
                               copy of the URL opened as it is (not checked
                               against the server's manifest) */
    char root[4096];        /* the cache directory */
    char key[40];           /* the entry's name in it */
    uint64_t limit;         /* the cache's budget (0: none) */
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

/* cxs_fetch_dataset for streaming (CXS_OPEN_STREAM): an entry that is
 * complete is used as it is; else every shard's bytes but its FEATURES
 * (the header, INDEX, LABELS, BLOCKSUMS, ...) are fetched by range
 * requests into sparse files of the shards' sizes, and f->streamed says
 * so.  A dataset whose shards cannot be streamed (compressed, or without
 * BLOCKSUMS: format 1.3's block sums are what a block is checked with) is
 * fetched whole when it fits the limit, refused otherwise. */
int cxs_fetch_stream(const char *url, const char *cache_dir, uint64_t limit,
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

/* ---- streaming (stream.c) -------------------------------------------------
 *
 * A streamed entry's shard files are sparse: the features arrive block by
 * block (the sum blocks of BLOCKSUMS), each checked against its sum as it
 * is written, and NAME.have beside each shard (one byte a sum block,
 * mapped shared by every process of the node) says which are there.
 * Locks (fcntl, open file description locks on the entry's stream.locks,
 * one descriptor a user): a reader holds
 * a sum block's use lock shared while it may read it; a fetch holds its
 * fetch lock exclusively while it downloads it (so each block comes once
 * per node); a block is evicted (its hole punched) only under its use
 * lock exclusive, taken without waiting, so never under a reader. */
typedef struct cxs_stream cxs_stream;
typedef struct cxs_stream_user cxs_stream_user;

/* After the open of a streamed entry f: the stream of n shards. */
int cxs_stream_new(const char *url, const cxs_fetch *f, uint32_t n, cxs_stream **out,
                   cxs_diag *d);
/* Shard s: its file's name in the entry, FEATURES's bytes [off, off+len)
 * of the file, cut into sum blocks of 2^shift bytes whose nsum sums (u64
 * LE, the dataset's mapping of BLOCKSUMS) are at sums. */
int cxs_stream_shard(cxs_stream *st, uint32_t s, const char *name, uint64_t off, uint64_t len,
                     uint32_t shift, const uint8_t *sums, uint64_t nsum, cxs_diag *d);
void cxs_stream_free(cxs_stream *st);
/* Feature bytes this process downloaded. */
uint64_t cxs_stream_fetched(const cxs_stream *st);
/* The cache's limit (0: none). */
uint64_t cxs_stream_limit(const cxs_stream *st);

/* One reader's hold on blocks (a loader's helper thread): its own lock
 * descriptors, so that its locks are its own. */
int cxs_stream_user_new(cxs_stream *st, cxs_stream_user **out);
void cxs_stream_user_free(cxs_stream_user *u);
/* In a forked child: the parent's locks are the parent's (its holds are
 * forgotten, its descriptors replaced). */
void cxs_stream_user_after_fork(cxs_stream_user *u);
/* Make bytes [lo, hi) of shard s's FEATURES readable from its file: hold
 * their sum blocks, and fetch those not there (several requests at once,
 * each block checked against its sum before it counts as there; room is
 * made under the cache's limit first).  A set *stop ends it
 * (-ECANCELED).  0, or an error naming the URL (the blocks are released
 * then). */
int cxs_stream_acquire(cxs_stream_user *u, uint32_t s, uint64_t lo, uint64_t hi,
                       const int *stop, cxs_diag *d);
/* Let go of what cxs_stream_acquire held; drop: cxs_stream_drop too (a
 * reader done with the bytes for the epoch; not one that reads them again
 * soon). */
void cxs_stream_release(cxs_stream_user *u, uint32_t s, uint64_t lo, uint64_t hi, int drop);
/* When the cache is over its limit: evict the sum blocks of bytes [lo, hi)
 * of shard s that no reader holds. */
void cxs_stream_drop(cxs_stream_user *u, uint32_t s, uint64_t lo, uint64_t hi);
/* on: end u's transfers at once, and refuse new ones (-ECANCELED), from
 * any thread (the loader stops); 0: allow them again.  u may be NULL. */
void cxs_stream_user_cancel(cxs_stream_user *u, int on);

/* ---- cache.c, for stream.c ----------------------------------------------- */
/* Evict least recently used entries but keep (none open) until more bytes
 * fit under limit, have bytes of keep's counted. */
int cxs_cache_make_room(const char *root, const char *keep, uint64_t have, uint64_t more,
                        uint64_t limit, uint64_t *freed, cxs_diag *d);
/* Bytes on disk of the regular files of dir (holes not counted). */
uint64_t cxs_cache_dir_bytes(const char *dir);
/* Bytes of every entry of root (what is reserved for fetches counted:
 * the streams' live reservations of every process too). */
uint64_t cxs_cache_total(const char *root);
/* The streams' reservations (cache.c, "reservations"): bytes a fetch in
 * flight will write, counted by every process of the node until it lets
 * go (its data on disk by then).  A process that dies lets go of its own. */
typedef struct cxs_cache_resv {
    int fd;                /* holds the slot's lock; -1: none */
    uint64_t slot, bytes;
} cxs_cache_resv;
/* Under the cache's eviction lock: when the entries and every live
 * reservation (*total) leave room for `more` bytes under limit, reserve
 * them (1); else 0, nothing reserved.  -errno (d says why) when the
 * reservations file cannot be used. */
int cxs_cache_reserve(const char *root, uint64_t more, uint64_t limit, cxs_cache_resv *r,
                      uint64_t *total, cxs_diag *d);
/* In a test build, CXS_CACHE_AUDIT=FILE: the bytes every entry of root
 * holds on disk now (no reservation counted: what `du` would say) are
 * appended to FILE, a line each; called as each piece of a fetch lands
 * (a stream's range request, a whole fetch's shard), so that a test sees
 * the cache's size where it peaks, in every process.  Elsewhere nothing. */
void cxs_cache_audit(const char *root);
/* Let go of r (no-op when it holds none). */
void cxs_cache_unreserve(cxs_cache_resv *r);
/* The live reservations' bytes, every process's. */
uint64_t cxs_cache_reserved(const char *root);

/* Upload a dataset's files to url: shards (n, their paths and sizes) four
 * at a time, then the manifest, only once every shard is there.  progress
 * (may be NULL) every 100 ms with the bytes sent; non-zero stops it
 * (-ECANCELED, the manifest not sent).  *sent: bytes sent.  0 or an error
 * naming the URL. */
int cxs_push_files(const char *url, const char *const *shards, const uint64_t *sizes, uint32_t n,
                   const char *manifest, uint64_t manifest_size, cxs_progress_fn progress,
                   void *user, uint64_t *sent, cxs_diag *d);

#endif
