/**
 * @file ctxshard.h
 * ctxshard.h - the public interface of libctxshard, the reader of packed
 * ctxshard datasets.
 *
 * A packed dataset is a directory holding one manifest and N shard files
 * (spec/format.md).  cxs_dataset_open() maps every file read-only and
 * validates the structure without touching per-frame data, so it takes
 * milliseconds at any dataset size.  After open, every function that takes a
 * `const cxs_dataset *` is thread-safe.
 *
 * Errors: functions return int, 0 on success, -errno for system failures
 * (-ENOMEM, -ENOENT, ...) and one of the CXS_E_* codes below for format and
 * argument errors.  cxs_strerror() names both.  Functions that can fail in
 * more ways than a code can say take an optional `cxs_diag *` as their last
 * argument and write a message there naming the file, the offset and what
 * was expected; pass NULL when you do not want it.  Results go out through
 * pointer arguments that are written only on success.
 *
 * Lifetime: pointers into the mapping (windows, labels, ids, vocabulary,
 * statistics) are read-only and stay valid until cxs_dataset_close().
 */
#ifndef CTXSHARD_H
#define CTXSHARD_H

#include <stddef.h>
#include <stdint.h>

/* Return codes (CXS_E_*), cxs_diag, CXS_FORMAT_*, CXS_DTYPE_*, CXS_NORM_*
 * and CXS_API. */
#include "ctxshard_base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cxs_dataset cxs_dataset;

/** Name of a return code (CXS_E_* or -errno).  Never NULL; static storage. */
CXS_API const char *cxs_strerror(int code);

/** Library version as "MAJOR.MINOR.PATCH"; static storage. */
CXS_API const char *cxs_version(void);

/**
 * The CPUs this process may run on: its affinity mask (taskset, a
 * scheduler's cpuset), capped by the CPU quota of any cgroup above it
 * (cgroup v2 cpu.max, v1 cpu.cfs_quota_us; a container's or a cluster
 * job's limit), rounded up; at least 1.  Read anew at each call.  What
 * the command and the Python package take where a thread count defaults
 * to all CPUs (pack, convert, import, the Writer's compression threads).
 */
CXS_API unsigned cxs_cpu_count(void);

/** Most worker threads a loader starts by default. */
#define CXS_DEFAULT_THREADS_MAX 4

/**
 * The worker threads a loader (frame, utterance, GPU stream) and a large
 * gather start when their options say 0: cxs_cpu_count() capped at
 * CXS_DEFAULT_THREADS_MAX, since more copy threads add little and take
 * CPUs from the training process beside them.
 */
CXS_API unsigned cxs_default_threads(void);

/** The width in bytes of one stored label for a vocabulary of n symbols
 *  (spec 5.1: 1 up to 256 symbols, 2 beyond; 0 for none): the LABELS and
 *  SEQS sections' element size, cxs_info.label_width when a dataset has
 *  frame labels. */
CXS_API uint32_t cxs_label_width(uint64_t n);

/* ---- open / close ----------------------------------------------------- */

/**
 * Open a packed dataset: its directory, its manifest file, or one shard file
 * alone.  A shard alone has no vocabulary or statistics (vocab_size 0,
 * statistics NULL) but keeps its labels; its frames and utterances are
 * numbered from 0.  Maps every shard
 * read-only, checks the header checksums, the section tables and every
 * structural rule of the spec that needs no per-frame work (O(shards +
 * utterances)).  Feature and label bytes are not hashed: cxs_dataset_verify()
 * does that.  The per-utterance tables (INDEX, IDS, SEQUENCES) stay in the
 * mapping, never copied; in a dataset whose shards have block sums (format
 * 1.3, the writer's default) open reads only their ends, and each 4 KiB
 * block of them is checked (its block sum and the spec's rules for the
 * entries it holds) by the first call that uses it, which returns
 * CXS_E_CHECKSUM or CXS_E_CORRUPT for a damaged block (spec/format.md
 * section 8, "Deferred tables"): open then costs nothing per utterance.
 *
 * Damaged blocks are never served.  In a shard with block sums (format
 * 1.3) every block of FEATURES and LABELS is checked against its block
 * sum at its first use in this open dataset, before any byte of it is
 * served, by every reader: windows, gathers, labels, utterances, reads
 * and pads, the frame loader in every order, the utterance loader, the
 * mixtures and the GPU uploads, streamed or local.  A damaged block stops
 * the call or the batch that needs it with CXS_E_CHECKSUM, diag (or the
 * loader's error) naming the shard, the section, the block and the
 * utterances it holds; nothing of it is served.  A block is hashed once
 * per open dataset, whichever path checked it (warm, the block reader, a
 * stream's download, the copy into huge pages): after that a window costs
 * one bitmap test, or one load once a section is checked whole.  A
 * compressed dataset's features are checked by their chunks' checksums at
 * every decode instead (its block sums cover the tables and LABELS).  A
 * shard without block sums (format 1.2 and older, or written with
 * CXS_WRITER_NO_BLOCK_SUMS; cxs_info.block_sum_shards counts those with)
 * serves FEATURES and LABELS as stored: only a label outside the
 * vocabulary is refused, and cxs_dataset_verify finds the rest.
 *
 * On success *out owns the mapping; free it with cxs_dataset_close().
 *
 * Returns 0, -errno (the directory or a shard cannot be opened or mapped),
 * CXS_E_BAD_MAGIC, CXS_E_VERSION, CXS_E_TRUNCATED, CXS_E_CORRUPT,
 * CXS_E_CHECKSUM or CXS_E_UNSUPPORTED, or CXS_E_INVALID when the path
 * exists but is no dataset (no manifest.cxs): the message then says what it
 * looks like (a raw dataset to pack first, a folder of datasets with their
 * names, a file unrelated to ctxshard).  diag may be NULL.
 */
CXS_API int cxs_dataset_open(const char *path, cxs_dataset **out, cxs_diag *diag);

/** Default size of the decoded-chunk cache of a compressed dataset. */
#define CXS_DEFAULT_CACHE_BYTES (256ull << 20)

/** cxs_open_opts.cache_bytes: no chunk cache at all. */
#define CXS_CACHE_OFF UINT64_MAX

/** Options of cxs_dataset_open_ex(); start from cxs_open_opts_init(). */
typedef struct cxs_open_opts {
    /**
     * Compressed datasets only: bytes of decoded chunks kept in memory and
     * shared by every thread reading the dataset (a bounded, thread-safe
     * cache with CLOCK replacement).  0: CXS_DEFAULT_CACHE_BYTES;
     * CXS_CACHE_OFF: no cache, every read decodes the chunks it touches.
     * Uncompressed datasets ignore it.
     */
    uint64_t cache_bytes;
    /**
     * Uncompressed datasets: at most this many bytes of anonymous memory
     * for a copy of every shard's FEATURES and LABELS in transparent huge
     * pages (2 MiB), from which windows, gathers and loaders then serve;
     * 0 (the default): none, everything is read from the mapping.  A
     * random window from the page cache costs a TLB miss for each 4 KiB
     * page it spans; from the copy, rarely one (docs/benchmarks.md).
     *
     * Cost: open reads and hashes every feature and label byte, into
     * huge pages the kernel zeroes first (0.4 to 3 s for 234 MiB on the
     * shared benchmark machine of docs/benchmarks.md; more when the files
     * are not cached), and the process holds the sections' size, each
     * rounded up to 2 MiB, in anonymous memory besides the page cache
     * (which the kernel may then drop).  A forked child shares the copy's
     * pages (copy-on-write, never written).  Validity: each section is hashed as it is copied, the
     * copy's bytes, and compared with its checksum in the section table;
     * a mismatch fails the open with CXS_E_CHECKSUM.  From then on the
     * features and labels served are the copy's: a shard changed or
     * truncated since open no longer affects them.  Served from the copy:
     * cxs_dataset_window, cxs_utterance views, the label calls
     * (cxs_dataset_label, _labels, _labels_of, _shard_labels), gathers and
     * cxs_loader;
     * cxs_dataset_read_features, the utterance and GPU loaders and verify
     * read the mapping as without it.
     *
     * Fallback: when the sections do not fit in the budget, the data is
     * compressed, transparent huge pages are off
     * (/sys/kernel/mm/transparent_hugepage/enabled "never") or the memory
     * cannot be had, open succeeds and serves from the mapping as
     * without the option; cxs_dataset_hugepages() says why.
     */
    uint64_t hugepage_budget;
    /**
     * A dataset at a URL (http://, https://, s3://BUCKET/PREFIX): the
     * node-local cache directory its copy is kept in.  NULL (the
     * default): CTXSHARD_CACHE, else $XDG_CACHE_HOME/ctxshard, else
     * ~/.cache/ctxshard (cxs_cache_dir).  Local paths ignore it.
     */
    const char *cache_dir;
    /**
     * A URL: the cache's budget in bytes; the least recently used datasets
     * not open in any process are evicted to stay under it.  0 (the
     * default): CTXSHARD_CACHE_LIMIT (bytes, or with K, M, G, T), else no
     * limit.  Without CXS_OPEN_STREAM a whole dataset is kept in the
     * cache: one larger than the limit is refused.  With it, blocks of
     * the features no reader holds are evicted too.
     */
    uint64_t cache_limit;
    /**
     * CXS_OPEN_STREAM: a URL whose cache entry is not complete is opened
     * with its metadata only (every section but FEATURES, checked as at
     * any open); the features come block by block as a frame loader with
     * the block sampler (CXS_SAMPLER_BLOCK), or an utterance loader in
     * block mode (cxs_utt_sampler_opts.memory_bytes), reads them, fetched
     * ahead of it, each 64 KiB block checked against its block sum (format
     * 1.3) before a byte of it is served, and stay in the cache while its
     * limit allows.  Such a dataset serves only those loaders: every
     * other read of its features (windows, gathers, utterances, other
     * orders, the GPU loaders, warm, verify) answers CXS_E_UNSUPPORTED,
     * saying so.  A complete entry opens as
     * without the flag; a dataset whose shards cannot be streamed
     * (compressed, or without block sums) is fetched whole when it fits
     * the limit, refused otherwise.  Local paths ignore it.
     */
    uint64_t flags;
    uint64_t reserved[CXS_OPTS_RESERVED - 3]; /**< zero (start from cxs_open_opts_init) */
} cxs_open_opts;

#define CXS_OPEN_STREAM 1u /**< cxs_open_opts.flags: stream a URL's features */

/** Fill o with the defaults (every field 0: the default chunk cache, no
 *  copy in huge pages).  The same holds for every *_opts_init below: the
 *  defaults of the reader's and loaders' options are all 0, and init
 *  exists so that a field added later with another default is set too. */
CXS_API void cxs_open_opts_init(cxs_open_opts *o);

/**
 * cxs_dataset_open() with options; opts NULL means the defaults
 * (cxs_open_opts_init).  Options whose reserved words are not zero are
 * refused (CXS_E_INVALID).  A compressed dataset (format
 * 1.1, `ctxshard pack --compress zstd`) opens like any other: only its chunk
 * tables are read at open; windows and gathers decode the chunks they
 * touch, checking each chunk's checksum first, so a damaged chunk is an
 * error (CXS_E_CHECKSUM or CXS_E_CORRUPT), never wrong data.  Zero-copy
 * access is not available there: cxs_dataset_window() returns
 * CXS_E_UNSUPPORTED and cxs_utterance.features is NULL; use
 * cxs_dataset_gather() and cxs_dataset_read_features(), which work on both
 * forms.
 */
CXS_API int cxs_dataset_open_ex(const char *path, const cxs_open_opts *opts,
                                cxs_dataset **out, cxs_diag *diag);

/** What cxs_open_opts.hugepage_budget did (cxs_dataset_hugepages()). */
typedef struct cxs_hugepage_info {
    uint64_t bytes;      /**< anonymous memory holding the copy; 0: no copy,
                              everything is served from the mapping */
    uint64_t huge_bytes; /**< of it, backed by huge pages when open returned
                              (AnonHugePages of /proc/self/smaps; 0 when
                              unknown) */
    char reason[200];    /**< with a budget and no copy: why not ("" else) */
    uint64_t reserved[CXS_INFO_RESERVED]; /**< written as zero: later fields */
} cxs_hugepage_info;

/**
 * Whether ds serves its features and labels from a copy in huge pages
 * (cxs_open_opts.hugepage_budget), its size, and why not when it was asked
 * for and is not made.  out is always written; ds NULL gives zeros.
 * A sized struct (ctxshard_base.h): this call fills it as first published,
 * through its reserved words; cxs_dataset_hugepages_ex fills the caller's.
 */
CXS_API void cxs_dataset_hugepages(const cxs_dataset *ds, cxs_hugepage_info *out);

/** cxs_dataset_hugepages at the caller's size: pass sizeof *out
 *  (ctxshard_base.h, "the ABI's room to grow").  Returns 0, or
 *  CXS_E_INVALID when out is NULL or size is 0. */
CXS_API int cxs_dataset_hugepages_ex(const cxs_dataset *ds, cxs_hugepage_info *out, size_t size);

/** Unmap and free.  NULL is a no-op.  Every pointer handed out dies here. */
CXS_API void cxs_dataset_close(cxs_dataset *ds);

/**
 * Progress callback for long operations: done and total in bytes.  Return
 * non-zero to stop the operation (it then returns -ECANCELED).
 */
typedef int (*cxs_progress_fn)(void *user, uint64_t done, uint64_t total);

/**
 * Re-hash every byte of every file against the stored XXH3 checksums and
 * check the rules open does not: zero padding and guard rows, labels below
 * the vocabulary size, finite features, utterance ids in strictly increasing
 * byte order across shards.  Stops at the first problem and describes it in
 * diag (file, section, offset).  Returns 0 when the dataset is intact,
 * CXS_E_CHECKSUM or CXS_E_CORRUPT otherwise.  progress may be NULL.
 */
CXS_API int cxs_dataset_verify(const cxs_dataset *ds, cxs_progress_fn progress,
                               void *user, cxs_diag *diag);

/* ---- memory and the page cache --------------------------------------- */

/** What cxs_memory_probe() found. */
typedef struct cxs_memory {
    uint64_t available;        /**< bytes a dataset can take in the page cache:
                                    the smaller of the two below, or the
                                    environment's figure */
    uint64_t mem_available;    /**< MemAvailable of /proc/meminfo */
    uint64_t cgroup_limit;     /**< tightest memory cgroup limit over this
                                    process's cgroup and its ancestors; 0: none */
    uint64_t cgroup_available; /**< that limit minus the memory in use in the
                                    cgroup that is not page cache */
    uint32_t from_env;         /**< 1: `available` is CTXSHARD_MEMORY_AVAILABLE */
    uint64_t reserved[CXS_INFO_RESERVED]; /**< written as zero: later fields */
} cxs_memory;

/**
 * How much memory the page cache can give a dataset here: MemAvailable of
 * /proc/meminfo, lowered to the room left under the memory cgroup limit
 * (v1 or v2) when the process is in a limited cgroup.  The environment
 * variable CTXSHARD_MEMORY_AVAILABLE (bytes, or with a K/M/G/T suffix)
 * replaces the measurement, for a job that knows its share better than the
 * kernel does, and for tests.  Returns 0, CXS_E_INVALID (the variable is not
 * a size; diag says so), or -errno when /proc/meminfo cannot be read.
 */
CXS_API int cxs_memory_probe(cxs_memory *out, cxs_diag *diag);

/** cxs_dataset_warm flags. */
#define CXS_WARM_FORCE 1u /**< warm even when the dataset does not fit */
/** read only what is not cached yet: a range whose pages are all in the
 * page cache is skipped (bytes_read counts what was read), so warming a
 * dataset already cached costs two mincore passes, not a copy of it */
#define CXS_WARM_SKIP_CACHED 2u

/** What cxs_dataset_warm() did. */
typedef struct cxs_warm_result {
    uint64_t total_bytes;   /**< all files of the dataset */
    uint64_t cached_before; /**< of those, bytes already in the page cache */
    uint64_t bytes_read;    /**< bytes read (all of them, cached ones cost no I/O;
                                 with CXS_WARM_SKIP_CACHED only the others) */
    double seconds;         /**< wall time of the call */
    uint32_t fits;          /**< 1: the uncached part fitted in memory.available */
    cxs_memory memory;      /**< the figures the decision was made on */
    uint64_t reserved[CXS_INFO_RESERVED]; /**< written as zero: later fields */
} cxs_warm_result;

/**
 * Pull every file of the dataset into the page cache: one sequential pass,
 * file by file, in large reads, so a cold dataset loads at the disk's
 * sequential rate instead of one random page fault per window.  Before
 * reading, it compares the bytes not yet cached (mincore) with
 * cxs_memory_probe()'s figure; when they do not fit it reads nothing and
 * returns -ENOMEM with a message naming both sizes and the block sampler
 * (warming data larger than memory evicts what it read first), unless
 * flags has CXS_WARM_FORCE.  progress (may be NULL) is called after every
 * read with bytes done and the total; a non-zero return stops it
 * (-ECANCELED).  Thread-safe; reads through its own file descriptors, so
 * it may run in a background thread while loaders read the mapping (the
 * dataset must stay open until it returns).  Shards with block sums
 * (format 1.3) have every block of every covered section checked against
 * its sum as it is read (a range CXS_WARM_SKIP_CACHED skips is not read,
 * so the blocks it touches are not checked): a damaged block stops it with
 * CXS_E_CHECKSUM, diag naming the shard, the block and the utterances it
 * holds.  *result (may be NULL) is written on success.  Returns 0,
 * -ENOMEM (does not fit, diag says so), -ECANCELED, -errno (a file cannot
 * be opened or read), CXS_E_CHECKSUM, CXS_E_TRUNCATED (a shard shrank
 * under it), CXS_E_INVALID.
 */
CXS_API int cxs_dataset_warm(const cxs_dataset *ds, uint32_t flags, cxs_progress_fn progress,
                             void *user, cxs_warm_result *result, cxs_diag *diag);

/** A warm-up running in a thread of its own (cxs_warm_start). */
typedef struct cxs_warm cxs_warm;

/**
 * cxs_dataset_warm(ds, flags, ...) in a background thread of the library's,
 * at the lowest CPU priority (nice 19 for that thread on Linux: loader
 * threads go first, so a warm-up beside the first epoch delays none of its
 * batches).  The loaders' prefetch: with CXS_WARM_SKIP_CACHED a dataset
 * already cached costs a residency check.  The dataset must stay open
 * until cxs_warm_finish() returns.  *out is NULL on failure.  Returns 0,
 * CXS_E_INVALID (NULL argument, unknown flag) or -errno (-EAGAIN: no
 * thread to be had), each with diag.
 */
CXS_API int cxs_warm_start(const cxs_dataset *ds, uint32_t flags, cxs_warm **out,
                           cxs_diag *diag);
/**
 * Whether it is still running (1) or done (0), and its progress so far:
 * *done of *total bytes covered (either may be NULL).  CXS_E_INVALID for
 * a NULL w.
 */
CXS_API int cxs_warm_poll(const cxs_warm *w, uint64_t *done, uint64_t *total);
/**
 * Wait for it to end, after asking it to stop when stop is non-zero (it
 * stops within one read, 64 MiB at most), and free it.  Returns what
 * cxs_dataset_warm returned (-ECANCELED when stopped before the end, and
 * -ENOMEM when the dataset did not fit, each with diag), and writes
 * *result (may be NULL) on success.  A NULL w is 0.
 */
CXS_API int cxs_warm_finish(cxs_warm *w, int stop, cxs_warm_result *result, cxs_diag *diag);

/* ---- datasets at URLs: the node-local cache ----------------------------- */

/**
 * cxs_dataset_open() and cxs_dataset_open_ex() take, besides a path, the
 * URL of a dataset directory: http://HOST/PATH, https://HOST/PATH, or
 * s3://BUCKET/PREFIX (signed with SigV4 when AWS_ACCESS_KEY_ID and
 * AWS_SECRET_ACCESS_KEY are set, with AWS_SESSION_TOKEN when given; the
 * region from AWS_REGION or AWS_DEFAULT_REGION, default us-east-1; an
 * S3-compatible server at AWS_ENDPOINT_URL, addressed path-style).  Open
 * downloads the manifest, and, when the cache has no verified copy of that
 * manifest's dataset, every shard (range requests, four at a time,
 * resuming what an interrupted open left), checks every checksum of the
 * copy (cxs_dataset_verify) before serving a byte of it, and opens it.
 * The processes of a node share the cache: each file is downloaded once
 * (the others wait for it), and a dataset open in any process is never
 * evicted.  Failures name the URL: HTTP 403 and 404 with the variables to
 * set; 5xx, 429, timeouts (CTXSHARD_HTTP_TIMEOUT seconds without a byte,
 * default 30), resets and bodies cut short are retried with backoff
 * (CTXSHARD_HTTP_RETRIES more attempts, default 5); a body longer than
 * asked is refused.
 */

/** What cxs_url_fetch() did. */
typedef struct cxs_fetch_info {
    uint64_t dataset_bytes; /**< the dataset's files, all of them */
    uint64_t bytes_fetched; /**< downloaded by this call (the manifest alone when cached) */
    double seconds;         /**< wall time, download and verification */
    uint32_t cached;        /**< 1: a verified copy was in the cache already */
    uint32_t streamed;      /**< 1: open to stream (CXS_OPEN_STREAM): the
                                 metadata alone was fetched */
    uint32_t offline;       /**< 1: the server could not be reached (after the
                                 retries): the cache's copy of the URL was
                                 opened as it is, complete, or streamed with
                                 its metadata; the manifest was not compared
                                 with the server's (a dataset packed again at
                                 the URL is not noticed) */
    uint32_t pad_;          /**< zero */
    uint64_t reserved[CXS_INFO_RESERVED - 1]; /**< zero */
} cxs_fetch_info;

/**
 * cxs_dataset_open_ex(url, opts, out, diag) with a progress report and
 * what the fetch did: progress (may be NULL) is called every 100 ms of a
 * download, in the calling thread, with the bytes the cache holds of the
 * dataset's; a non-zero return stops it (-ECANCELED; what arrived is kept
 * and the next fetch resumes).  *info (may be NULL) is written on
 * success.  out NULL: the dataset is brought into the cache and verified,
 * not opened (a prefetch).  Returns 0 or an error naming the URL.
 */
CXS_API int cxs_url_fetch(const char *url, const cxs_open_opts *opts, cxs_progress_fn progress,
                          void *user, cxs_fetch_info *info, cxs_dataset **out, cxs_diag *diag);

/**
 * Whether path is a URL that cxs_dataset_open fetches (http://, https://,
 * s3://) rather than a local path: 1 or 0 (0 for NULL).
 */
CXS_API int cxs_is_url(const char *path);

/**
 * Bytes of features this process has downloaded for ds since it was
 * opened to stream (CXS_OPEN_STREAM: blocks the block loader read that
 * the cache did not hold); 0 for any other dataset.
 */
CXS_API uint64_t cxs_dataset_fetched(const cxs_dataset *ds);

/**
 * Whether ds was opened from a URL: 1 with *url (may be NULL) that URL and
 * *local the manifest of its copy in the cache; 0 (both NULL) for a local
 * path; CXS_E_INVALID for a NULL ds.  The strings live as long as ds.
 */
CXS_API int cxs_dataset_url(const cxs_dataset *ds, const char **url, const char **local);

/**
 * Upload the packed dataset directory dir to url (s3://BUCKET/PREFIX, a
 * signed PutObject per file; or an http(s):// server that takes PUT, such
 * as WebDAV) so that readers never see part of it: dir is verified first
 * (cxs_dataset_verify: a damaged dataset is not uploaded), its shards go
 * up four at a time, and manifest.cxs last, once every shard is there (a
 * reader asks for the manifest first).  progress (may be NULL) every
 * 100 ms with the bytes sent; non-zero stops it (-ECANCELED, the manifest
 * not sent).  *sent (may be NULL): bytes sent.  A shard over 5 GiB is
 * refused for S3 (one PUT's limit).  0 or an error naming the file or URL.
 */
CXS_API int cxs_dataset_push(const char *dir, const char *url, cxs_progress_fn progress,
                             void *user, uint64_t *sent, cxs_diag *diag);

/** The cache directory dir (NULL: the default, as cxs_open_opts.cache_dir
 *  says) resolves to, into out.  0 or -ENAMETOOLONG. */
CXS_API int cxs_cache_dir(const char *dir, char *out, size_t cap);

/** One dataset in the cache (cxs_cache_list). */
typedef struct cxs_cache_entry {
    const char *url;    /**< where it came from */
    const char *dir;    /**< its copy (a dataset directory) */
    uint64_t bytes;     /**< on disk */
    int64_t last_used;  /**< the last open, Unix seconds */
    uint32_t complete;  /**< 1: downloaded and verified; 0: an interrupted fetch,
                             or streamed */
    uint32_t in_use;    /**< 1: open in some process, or being fetched, now */
    uint32_t streamed;  /**< 1: its metadata, and the blocks of its features
                             that streaming fetched (CXS_OPEN_STREAM) */
    uint32_t pad_;      /**< zero */
    uint64_t reserved[CXS_INFO_RESERVED - 1]; /**< zero */
} cxs_cache_entry;

/** Called with each entry; a non-zero return stops the listing. */
typedef int (*cxs_cache_fn)(void *user, const cxs_cache_entry *e);

/** The datasets in the cache dir (NULL: the default), least recently
 *  used first.  0 or an error in diag. */
CXS_API int cxs_cache_list(const char *dir, cxs_cache_fn fn, void *user, cxs_diag *diag);

/** Evict least recently used datasets not open anywhere until the cache
 *  holds at most limit bytes; *freed (may be NULL) the bytes removed.
 *  -EBUSY (diag says how much) when what is open keeps it above. */
CXS_API int cxs_cache_prune(const char *dir, uint64_t limit, uint64_t *freed, cxs_diag *diag);

/** cxs_cache_prune(dir, 0, ...): every dataset not open anywhere. */
CXS_API int cxs_cache_clear(const char *dir, uint64_t *freed, cxs_diag *diag);

/* ---- description ------------------------------------------------------ */

typedef struct cxs_info {
    uint64_t num_frames;      /**< frames of all utterances, guards excluded */
    uint64_t num_utterances;
    uint32_t num_shards;
    uint32_t dim;             /**< D: features per frame */
    uint32_t dtype;           /**< CXS_DTYPE_* of the stored features */
    uint32_t guard;           /**< G: zero rows around every utterance */
    uint32_t vocab_size;      /**< 0 for a features-only dataset */
    uint32_t label_width;     /**< bytes per stored frame label: 0 (no frame labels:
                                   features only, or label sequences only), 1 or 2 */
    uint32_t normalize;       /**< CXS_NORM_* applied at pack time */
    uint32_t format_major;
    uint32_t format_minor;
    uint64_t shard_size;      /**< --shard-size the dataset was packed with */
    uint64_t num_skipped;     /**< utterances left out by --on-error skip */
    uint32_t on_error_skip;   /**< 1 when packed with --on-error skip */
    uint64_t min_length;      /**< shortest utterance, frames */
    uint64_t max_length;      /**< longest utterance, frames */
    uint64_t total_bytes;     /**< all files of the dataset */
    uint32_t single_shard;    /**< 1 when opened from one shard file */
    uint32_t compression;     /**< CXS_COMPRESSION_* of the feature sections */
    uint32_t chunk_rows;      /**< compressed: FEATURES rows per chunk */
    int32_t compression_level; /**< compressed: the level it was packed with */
    uint32_t shuffle;         /**< compressed: 1 when the byte-shuffle filter is on */
    uint64_t feature_bytes;   /**< FEATURES bytes, guard rows included, uncompressed */
    uint64_t stored_feature_bytes; /**< what they take on disk (compressed or not) */
    uint32_t label_seqs;      /**< 1 when every utterance has a label sequence
                                   (format 1.2; cxs_dataset_label_seq) */
    uint64_t seq_symbols;     /**< label sequences: symbols of all of them */
    uint64_t min_seq_length;  /**< label sequences: the shortest, symbols */
    uint64_t max_seq_length;  /**< label sequences: the longest, symbols */
    uint32_t block_sum_shards; /**< shards that carry block sums (BLOCKSUMS,
                                   format 1.3): all of them for a dataset
                                   written with them, 0 for one written
                                   with --block-sums off or before 1.3 */
    uint32_t seq_width;       /**< label sequences: bytes per stored symbol (1 or
                                   2, the width DATASET_META's label_width
                                   gives, SHARD_META's for a shard opened
                                   alone); 0 without label sequences.  In the
                                   padding before reserved: the struct keeps
                                   its size */
    uint64_t reserved[CXS_INFO_RESERVED]; /**< written as zero: later fields */
} cxs_info;

/**
 * Fill *info as the struct was first published: through its reserved
 * words, never further (ctxshard_base.h, "the ABI's room to grow"); fields
 * added after them come only through cxs_dataset_info_ex.  Cannot fail
 * for an open dataset.
 */
CXS_API void cxs_dataset_info(const cxs_dataset *ds, cxs_info *info);

/**
 * Fill the caller's cxs_info of size bytes: pass sizeof *info.  A program
 * built against an older header (a smaller struct) gets its fields and
 * nothing is written past them; one built against a newer header gets 0,
 * the default, in the fields this library does not know.  Returns 0, or
 * CXS_E_INVALID when ds or info is NULL or size is 0.
 */
CXS_API int cxs_dataset_info_ex(const cxs_dataset *ds, cxs_info *info, size_t size);

/**
 * Dataset statistics, computed at pack time over the stored feature values
 * (after conversion and normalisation) and the labels.  Arrays have dim
 * (mean, var) or vocab_size (label_counts) entries and point into the
 * mapping.  The variance is the population variance (divided by count).
 * Values are little-endian on disk; on a big-endian host these pointers are
 * NULL.  label_counts is NULL for a features-only dataset.
 */
typedef struct cxs_stats {
    uint64_t count;              /**< frames the statistics cover */
    const double *mean;
    const double *var;
    const uint64_t *label_counts;
    uint64_t reserved[CXS_INFO_RESERVED]; /**< written as zero: later fields */
} cxs_stats;
/** Fill *stats as first published, through its reserved words (a sized
 *  struct, as cxs_dataset_info). */
CXS_API void cxs_dataset_stats(const cxs_dataset *ds, cxs_stats *stats);
/** cxs_dataset_stats at the caller's size (pass sizeof *stats), as
 *  cxs_dataset_info_ex: 0, or CXS_E_INVALID for NULL or size 0. */
CXS_API int cxs_dataset_stats_ex(const cxs_dataset *ds, cxs_stats *stats, size_t size);

/**
 * Vocabulary symbol i (0 <= i < vocab_size): *sym points into the mapping,
 * is not NUL-terminated and has *len bytes.  Returns 0 or CXS_E_RANGE.
 */
CXS_API int cxs_dataset_vocab(const cxs_dataset *ds, uint32_t i,
                              const char **sym, size_t *len);

/**
 * The skip report stored by `pack --on-error skip`: UTF-8 text, one line
 * per utterance left out, "id<TAB>reason\n".  *len is 0 when none.
 */
CXS_API void cxs_dataset_skipped(const cxs_dataset *ds, const char **text, size_t *len);

/**
 * The dataset's identity: the XXH3-64 checksum of its manifest's header
 * (spec 3.3; of the shard's header for a shard opened alone).  The
 * checksums are chained, so it vouches for every byte of the dataset: a
 * copy has the same identity, and another pack (other data or other
 * options) has another.  For checking that a dataset reopened by path is
 * still the one that was opened (a pickled Dataset in a worker).
 */
CXS_API uint64_t cxs_dataset_identity(const cxs_dataset *ds);

/* ---- utterances and frames ------------------------------------------- */

typedef struct cxs_utterance {
    const char *id;       /**< not NUL-terminated; id_len bytes */
    size_t id_len;
    uint64_t first_frame; /**< global frame number of the utterance's frame 0 */
    uint64_t num_frames;
    uint32_t shard;
    const void *features; /**< num_frames * dim elements of the stored dtype;
                               NULL for a compressed dataset (copy them out
                               with cxs_dataset_read_features).  For a coded
                               dataset (q8, q16) the stored codes, row-major,
                               1 byte (q8) or 2 little-endian (q16) each:
                               their values need the utterance's header
                               (cxs_dataset_read_qheader); the decoded
                               float32 the loaders serve come from
                               cxs_dataset_pad_batch */
    const void *labels;   /**< num_frames labels of label_width bytes, or NULL */
    uint64_t reserved[CXS_INFO_RESERVED]; /**< written as zero: later fields */
} cxs_utterance;

/** Utterance u (0 <= u < num_utterances).  Returns 0, CXS_E_RANGE, or
 * CXS_E_TRUNCATED when its shard lost the bytes of the id table since open
 * (the pointers it gives are read by the caller: see cxs_dataset_window).
 * In a shard with block sums (format 1.3) the blocks of FEATURES and
 * LABELS the pointers reach are checked against their sums first (once
 * per open dataset): CXS_E_CHECKSUM when one is damaged, and nothing is
 * handed out.  Without block sums they are served as stored (verify
 * checks them). */
CXS_API int cxs_dataset_utterance(const cxs_dataset *ds, uint64_t u, cxs_utterance *out);

/** cxs_dataset_utterance_ex's flags: the id, first frame and length only
 * (features and labels NULL, their blocks neither read nor checked). */
#define CXS_UTTERANCE_NO_DATA 1u
/** cxs_dataset_utterance with flags (0 or CXS_UTTERANCE_NO_DATA) and a
 * diagnostic: on failure diag (may be NULL) says why -- for a damaged
 * block the shard, the section, the block and the utterances it holds.
 * The same return codes, and CXS_E_INVALID for unknown flags. */
CXS_API int cxs_dataset_utterance_ex(const cxs_dataset *ds, uint64_t u, uint32_t flags,
                                     cxs_utterance *out, cxs_diag *diag);

/**
 * Copy frames first .. first+count-1 of utterance u, in the stored dtype
 * (count * dim elements, little-endian), into out.  Works on compressed and
 * uncompressed datasets alike.  A coded dataset's (q8, q16) are its codes
 * (count * dim bytes for q8, count * dim u16 for q16), not values: decode
 * them with the utterance's header (cxs_dataset_read_qheader, spec 4.9),
 * or take the values the loaders serve from cxs_dataset_pad_batch.  Returns 0, CXS_E_RANGE, CXS_E_INVALID,
 * -ENOMEM, or CXS_E_CHECKSUM / CXS_E_CORRUPT for a damaged compressed chunk,
 * CXS_E_TRUNCATED when the shard lost the bytes since open (truncated:
 * reported, never a SIGBUS).
 */
CXS_API int cxs_dataset_read_features(const cxs_dataset *ds, uint64_t u, uint64_t first,
                                      uint64_t count, void *out);
/** cxs_dataset_read_features with a diagnostic: on failure diag (may be
 * NULL) names the argument at fault, or for damaged or truncated data the
 * shard, the utterance id and the chunk.  The same return codes. */
CXS_API int cxs_dataset_read_features_ex(const cxs_dataset *ds, uint64_t u, uint64_t first,
                                         uint64_t count, void *out, cxs_diag *diag);

/**
 * A coded dataset's (q8, q16) header of utterance u, the bytes of its
 * QHEADERS entry (spec 4.9.2), into out: 8 + 8 * dim bytes for q8 (f32
 * min, f32 range, per column u16 p0, p25, p75, p100, little-endian), 8
 * for q16 (f32 min, f32 range).  With the codes cxs_dataset_read_features
 * copies, what decodes the utterance (the rules of spec 4.9.4, which
 * cxs_dataset_pad_batch applies) or stores it again as it is (the
 * writer's cxs_writer_utt.stored).  QHEADERS is metadata: no feature is
 * read, a streamed dataset answers too.  The header is checked as at its
 * first use by a loader.  Returns 0, CXS_E_INVALID (ds or out NULL),
 * CXS_E_UNSUPPORTED (a float dataset: it has no headers), CXS_E_RANGE, or
 * CXS_E_CORRUPT for a header the writer cannot have written, diag (may be
 * NULL) naming the shard, the utterance and the fault.
 */
CXS_API int cxs_dataset_read_qheader(const cxs_dataset *ds, uint64_t u, void *out,
                                     cxs_diag *diag);

/**
 * Which utterance holds global frame `frame`, and the frame's offset in it.
 * O(log utterances).  Returns 0 or CXS_E_RANGE.
 */
CXS_API int cxs_dataset_locate(const cxs_dataset *ds, uint64_t frame,
                               uint64_t *utterance, uint64_t *offset);

/**
 * Zero-copy context window of frame `frame`: (2k+1)*dim contiguous stored
 * elements, rows frame-k .. frame+k of its utterance, zero rows where the
 * window passes the utterance's borders.  Needs k <= guard (CXS_E_RANGE
 * otherwise: use cxs_dataset_gather, which pads any k).  The pointer is
 * read-only and valid until close.  CXS_E_UNSUPPORTED on a compressed
 * dataset or a coded one (q8, q16: its windows are decoded copies, which
 * cxs_dataset_gather makes): no zero-copy view exists there.  The zero rows are the stored
 * guard rows: the call checks those the window spans (near the borders
 * only, at most 2k rows) and returns CXS_E_CORRUPT when one is not zero
 * (damaged: never served as padding), CXS_E_TRUNCATED when the shard lost
 * them since open.  With block sums (format 1.3) the blocks the window
 * spans are checked first (CXS_E_CHECKSUM when one is damaged; see
 * cxs_dataset_open); without them the rows are served as stored, and
 * cxs_dataset_verify checks them.  Reading through the pointer is the
 * caller's own access: a shard truncated meanwhile faults there (SIGBUS);
 * datasets are replaced by rename, never rewritten in place.
 */
CXS_API int cxs_dataset_window(const cxs_dataset *ds, uint64_t frame, uint32_t k,
                               const void **window);

/** Label (vocabulary index) of a frame.  CXS_E_RANGE, or CXS_E_NO_LABELS on
 * a dataset without labels; CXS_E_CORRUPT for a label outside the
 * vocabulary (a damaged LABELS section: never served), CXS_E_CHECKSUM for
 * a label in a block that fails its block sum (format 1.3).  The same
 * holds for cxs_dataset_labels and cxs_dataset_labels_of (nothing useful
 * in out then), and for the zero-copy label views: cxs_utterance.labels
 * and cxs_dataset_shard_labels check every block they reach before they
 * hand it out (without block sums they are the bytes as stored, which
 * verify checks). */
CXS_API int cxs_dataset_label(const cxs_dataset *ds, uint64_t frame, uint32_t *label);

/**
 * Labels of `count` consecutive frames first .. first+count-1 (they may span
 * utterances and shards) as int64 into out[count].  CXS_E_RANGE when the
 * range passes the end, CXS_E_NO_LABELS on a features-only dataset.
 */
CXS_API int cxs_dataset_labels(const cxs_dataset *ds, uint64_t first, uint64_t count,
                               int64_t *out);

/**
 * Labels of n frames in any order, frames[i] into out[i] (int64).
 * CXS_E_RANGE when a frame is past the end (nothing then written),
 * CXS_E_NO_LABELS on a features-only dataset.
 */
CXS_API int cxs_dataset_labels_of(const cxs_dataset *ds, const uint64_t *frames, size_t n,
                                  int64_t *out);

/**
 * The label sequence of utterance u (0 <= u < num_utterances, global
 * numbering): the phoneme sequence of a whole utterance, of any length >= 1
 * and not tied to its frames, for sequence models (CTC, attention).  Sets
 * *len to the sequence's length and writes its first min(*len, cap)
 * symbols (vocabulary indices) to out as int64; out may be NULL when cap
 * is 0 (ask the length first, or size out by cxs_info.max_seq_length).
 * Symbols were checked against the vocabulary at open.  Thread-safe.
 *
 * Returns 0; CXS_E_NO_SEQUENCES when the dataset has no label sequences
 * (cxs_info.label_seqs is 0), CXS_E_RANGE when u is out of range (in that
 * order), CXS_E_INVALID for a NULL ds or len, or NULL out with cap > 0.
 * Nothing is written on failure.
 */
CXS_API int cxs_dataset_label_seq(const cxs_dataset *ds, uint64_t u, int64_t *out, uint32_t cap,
                                  uint32_t *len);

/**
 * Shard s's labels in place (zero-copy): *labels points at num_frames
 * values of label_width bytes (uint8, or uint16 little-endian), those of
 * the dataset's frames first_frame .. first_frame+num_frames-1.  Valid
 * until the dataset is closed.  CXS_E_RANGE for s >= num_shards,
 * CXS_E_NO_LABELS on a features-only dataset.  Any pointer may be NULL.
 */
CXS_API int cxs_dataset_shard_labels(const cxs_dataset *ds, uint32_t s, const void **labels,
                                     uint64_t *first_frame, uint64_t *num_frames);

/** cxs_dataset_gather flags. */
#define CXS_GATHER_NORMALIZE 1u /**< (x - mean) / std with the stored statistics */

/**
 * Statistics to normalise with (spec/format.md section 7.4): dim means and
 * dim population variances in float64, as cxs_stats holds them.  Normalise
 * every split (train, dev, test) with the *training* split's statistics:
 * fill this from cxs_dataset_stats() of the training dataset, or from
 * arrays of your own.  The arrays are read when the call (or the loader's
 * create) is made; they need not outlive it.
 */
typedef struct cxs_norm {
    uint32_t dim;        /**< must equal the dataset's dim */
    const double *mean;  /**< dim finite means */
    const double *var;   /**< dim finite variances >= 0 (0: that dimension is only centred) */
} cxs_norm;

/**
 * Copy the windows of n frames as float32 into out[n][(2k+1)*dim], any k:
 * rows past the utterance borders are zero (also with normalisation: padding
 * stays 0 in the normalised space).  Stored float16/bfloat16 are converted
 * exactly.  With CXS_GATHER_NORMALIZE every real row is normalised by the
 * dataset's stored per-dimension mean and variance, (x - mean) / sqrt(var)
 * computed in float64 and rounded once to float32 exactly as spec/format.md
 * section 7.4 defines it, a dimension with zero variance being only
 * centred (CXS_E_INVALID when the dataset has no statistics).  To normalise
 * a dev or test split with the training split's statistics, use
 * cxs_dataset_gather_norm().  When labels is not NULL, the frames' labels
 * go there as int64.  `threads` > 1 splits the batch over that many threads
 * (created for the call); 0 or 1 uses the calling thread.  Windows never
 * depend on the thread count.
 *
 * Returns 0, CXS_E_RANGE (a frame past the end; nothing is written),
 * CXS_E_INVALID (k above 1,000,000, NULL buffers with n > 0, unknown flags),
 * CXS_E_NO_LABELS (labels asked of a features-only dataset), CXS_E_CHECKSUM
 * when a block the windows or labels need fails its block sum (format
 * 1.3), and on a compressed dataset -ENOMEM, CXS_E_CHECKSUM or
 * CXS_E_CORRUPT when a chunk cannot be decoded (out then holds partial
 * results and must not be used).
 */
CXS_API int cxs_dataset_gather(const cxs_dataset *ds, const uint64_t *frames, size_t n,
                               uint32_t k, uint32_t flags, unsigned threads, float *out,
                               int64_t *labels);

/**
 * cxs_dataset_gather() normalising with the given statistics rather than the
 * dataset's own: dev and test normalised with train's.  norm NULL: no
 * normalisation.  The arithmetic is the spec's (section 7.4), as with
 * CXS_GATHER_NORMALIZE.  Returns what cxs_dataset_gather returns, and
 * CXS_E_INVALID when norm's dim differs from the dataset's, an array is
 * NULL, a mean or variance is not finite or a variance is negative.
 */
CXS_API int cxs_dataset_gather_norm(const cxs_dataset *ds, const uint64_t *frames, size_t n,
                                    uint32_t k, const cxs_norm *norm, unsigned threads,
                                    float *out, int64_t *labels);

/**
 * cxs_dataset_gather() and cxs_dataset_gather_norm() in one call, with a
 * diagnostic: on failure diag (may be NULL) says which argument is wrong
 * and why ("gather: context k=2000000 is above 1,000,000", the first frame
 * past the end, which statistic is not finite ...).  Normalises when flags
 * has CXS_GATHER_NORMALIZE, with norm's statistics, or the dataset's own
 * when norm is NULL (as cxs_loader_opts and cxs_gpu_opts do); norm is
 * ignored without the flag.  Returns what cxs_dataset_gather and
 * cxs_dataset_gather_norm return.
 */
CXS_API int cxs_dataset_gather_ex(const cxs_dataset *ds, const uint64_t *frames, size_t n,
                                  uint32_t k, uint32_t flags, const cxs_norm *norm,
                                  unsigned threads, float *out, int64_t *labels, cxs_diag *diag);

/* ---- samplers --------------------------------------------------------- */

/**
 * A sampler maps (epoch, position) to a global frame number, statelessly:
 * the same seed, epoch and position always give the same frame, so an epoch
 * resumes exactly from its position, and any number of threads or processes
 * can draw from one sampler without coordination.
 *
 * CXS_SAMPLER_SEQUENTIAL: frames in order (evaluation).
 * CXS_SAMPLER_SHUFFLE: a seeded pseudo-random permutation of all frames per
 *   epoch, a different one every epoch, in O(1) memory (a keyed Feistel
 *   bijection with cycle walking, not a shuffled array).
 * CXS_SAMPLER_WEIGHTED: draws with replacement; the probability of a frame is
 *   proportional to its class weight, by default the inverse of the class's
 *   stored frame count (every class equally likely).  O(1) per draw (an
 *   alias table over classes and a per-class frame list: 4 bytes per frame,
 *   8 beyond 2^32 frames, built at create time in one pass over the labels).
 *
 * CXS_SAMPLER_BLOCK: for data larger than memory (or cold on disk): a
 *   permutation of all frames per epoch, like SHUFFLE, drawn so that only a
 *   few blocks of the data are needed at a time.  The features are cut, in
 *   storage order, into blocks of whole utterances of memory_bytes /
 *   (blocks + 1) bytes each (guard rows included; a block never spans two
 *   shards; the first cut moves by a seeded amount every epoch, so the
 *   neighbours an utterance shares a block with change).  The blocks are
 *   taken in a seeded random order; the epoch is a sequence of rounds, round
 *   t drawing a uniformly random order of one 1/blocks share of each of the
 *   `blocks` blocks t-blocks+1 .. t, so every block is needed for `blocks`
 *   consecutive rounds and every frame comes exactly once.  Stateless like
 *   the others: (seed, epoch, position) gives the frame, in O(log #blocks);
 *   the epoch's block table (built by one pass over INDEX in place: time
 *   O(#utterances), memory 64 bytes a block, none an utterance) is kept
 *   for the last two epochs asked.  The loader reads the next block
 *   sequentially ahead of use and lets drained ones go (cxs_loader_opts).
 *
 * Distributed training: rank r of world_size w sees positions r, r+w,
 * r+2w, ... of the global order, as torch's DistributedSampler does: with
 * drop_last 0 the order is padded by wrapping around to a multiple of w, with
 * drop_last 1 it is cut to one, so every rank gets the same count and
 * together they cover the epoch without overlap (beyond the padding).
 *
 * Elastic resume: a run's state is (seed, epoch, global position), the
 * global position being origin + position * world_size of any rank when all
 * ranks stand at the same position.  A sampler created with `origin` = G
 * starts its ranks at global position G of every epoch it is used for:
 * rank r sees G + r, G + r + w, ... (the remainder of the epoch, padded or
 * cut as above), so a run saved on N ranks continues on M ranks, or with
 * another thread count, in the same global order with nothing repeated or
 * lost.  Use origin 0 (a new sampler) for the epochs after the resumed one.
 */
#define CXS_SAMPLER_SEQUENTIAL 0u
#define CXS_SAMPLER_SHUFFLE 1u
#define CXS_SAMPLER_WEIGHTED 2u
#define CXS_SAMPLER_BLOCK 3u

typedef struct cxs_sampler_opts {
    uint32_t kind;               /**< CXS_SAMPLER_* */
    uint64_t seed;
    uint32_t rank;               /**< 0 .. world_size-1 */
    uint32_t world_size;         /**< 0 or 1: not distributed */
    uint32_t drop_last;          /**< 1: cut the epoch to a multiple of world_size */
    uint64_t num_samples;        /**< WEIGHTED: draws per epoch, all ranks (0: num_frames) */
    const double *class_weights; /**< WEIGHTED: vocab_size weights >= 0, NULL: inverse frequency */
    uint64_t origin;             /**< global position where every epoch starts (elastic resume) */
    uint64_t memory_bytes;       /**< BLOCK: page cache the order may use (required) */
    uint32_t blocks;             /**< BLOCK: blocks a round draws from, 1..1024 (0: 8) */
    uint64_t reserved[CXS_OPTS_RESERVED]; /**< zero (start from cxs_sampler_opts_init) */
} cxs_sampler_opts;

typedef struct cxs_sampler cxs_sampler;

/** Fill o with the defaults: sequential, seed 0, not distributed. */
CXS_API void cxs_sampler_opts_init(cxs_sampler_opts *o);

/**
 * Create a sampler over ds (which must outlive it).  opts NULL means
 * sequential, not distributed.  Returns 0, -ENOMEM, CXS_E_NO_LABELS
 * (weighted on a features-only dataset: the weights come from the labels),
 * or CXS_E_INVALID (unknown kind, rank >= world_size, weights negative, not
 * finite or all zero over the classes present).
 */
CXS_API int cxs_sampler_create(const cxs_dataset *ds, const cxs_sampler_opts *opts,
                               cxs_sampler **out);

/**
 * cxs_sampler_create with a diagnostic: on failure diag (may be NULL) says
 * which option is wrong and why.  Besides cxs_sampler_create's refusals:
 * CXS_E_INVALID for a block sampler without memory_bytes, blocks above
 * 1024, an origin past the epoch, and CXS_E_RANGE for a memory budget whose
 * blocks are smaller than the longest utterance (both sizes named).
 */
CXS_API int cxs_sampler_create_ex(const cxs_dataset *ds, const cxs_sampler_opts *opts,
                                  cxs_sampler **out, cxs_diag *diag);

/** Block sampler: the size in bytes of one block (memory_bytes / (blocks +
 * 1)), and the number of blocks of `epoch`; 0 for other kinds. */
CXS_API uint64_t cxs_sampler_block_bytes(const cxs_sampler *s);
CXS_API uint64_t cxs_sampler_num_blocks(const cxs_sampler *s, uint64_t epoch);
/** The version of the block schedule this library draws (2: the last
 *  blocks of an epoch are drawn on together; 1 before).  A position saved
 *  under another version resumes into another order: a saved state
 *  records it, and a resume refuses a mismatch. */
CXS_API uint32_t cxs_block_order(void);
CXS_API void cxs_sampler_free(cxs_sampler *s);

/** Samples per epoch for this rank. */
CXS_API uint64_t cxs_sampler_length(const cxs_sampler *s);

/**
 * Frames at positions pos .. pos+n-1 of this rank's order for `epoch`, into
 * frames[n].  Thread-safe.  CXS_E_RANGE when pos+n passes the length.
 */
CXS_API int cxs_sampler_get(const cxs_sampler *s, uint64_t epoch, uint64_t pos, size_t n,
                            uint64_t *frames);

/* ---- the prefetching loader ------------------------------------------- */

typedef struct cxs_loader_opts {
    uint32_t k;           /**< context: windows of (2k+1)*dim floats */
    uint32_t batch_size;  /**< >= 1 */
    uint32_t threads;     /**< worker threads; 0: cxs_default_threads() */
    uint32_t ring;        /**< batch buffers; 0: threads + 2 (at least 3) */
    uint32_t flags;       /**< CXS_GATHER_NORMALIZE */
    uint32_t drop_last;   /**< 1: no short final batch */
    uint32_t labels;      /**< 1: gather labels too (needs labels) */
    uint32_t external;    /* 1: batches go into buffers the caller provides with
                             cxs_loader_provide(), and belong to the caller once
                             handed out; the loader allocates no batch memory */
    const cxs_norm *norm; /**< with CXS_GATHER_NORMALIZE: normalise with these
                               statistics (train's) instead of the dataset's own;
                               NULL: the dataset's.  Copied at create. */
    uint32_t readahead;   /**< reading ahead of the workers, by a helper thread
                               (uncompressed data only; see below): 0 auto,
                               CXS_READAHEAD_OFF none */
    uint64_t reserved[CXS_OPTS_RESERVED]; /**< zero (start from cxs_loader_opts_init) */
} cxs_loader_opts;

/**
 * cxs_loader_opts.readahead.  With the default (0) a helper thread works
 * ahead of the gather so that it reads memory, not disk:
 *  - BLOCK sampler: the next block is read sequentially (pread in 4 MiB
 *    steps, the next few steps asked for with POSIX_FADV_WILLNEED) before
 *    a worker needs it; a worker whose batch needs a block still being
 *    read waits for it rather than fault page by page, except for the
 *    first two batches after create or reset, which ask for their windows'
 *    pages directly (while the block reads pause) so that the first batch
 *    does not wait for the first round's blocks; a drained block is
 *    dropped from the page cache (MADV_DONTNEED and POSIX_FADV_DONTNEED),
 *    so the cache holds about memory_bytes of the dataset.
 *  - SHUFFLE and WEIGHTED samplers (uncompressed): the feature mapping is
 *    marked MADV_RANDOM (a fault reads a page, not the kernel's
 *    read-around) and the pages of the windows and labels of the next
 *    CXS_READAHEAD_BATCHES batches are requested with MADV_WILLNEED, many
 *    reads in flight, while the workers copy (a worker that gets ahead of
 *    the helper asks for its own batch before copying).  A batch whose
 *    sampled pages are all cached is not asked for: warm data costs no
 *    system calls.  Once the first two batches are filled, a dataset that
 *    is not cached but fits in memory (the test of cxs_dataset_warm) is
 *    read by the helper sequentially, at the disk's rate, rather than
 *    faulted in at random window by window; meanwhile the workers go on
 *    from what is cached and fault in the rest.
 * CXS_READAHEAD_OFF: none of this (the mapping's advice is left alone).
 */
#define CXS_READAHEAD_OFF 1u
#define CXS_READAHEAD_BATCHES 2u

/** Fill o with the defaults (all 0); batch_size must then be set. */
CXS_API void cxs_loader_opts_init(cxs_loader_opts *o);

/** A batch handed out by cxs_loader_next; valid until the next call (its x
 * and y longer in external mode: they are the caller's buffers). */
typedef struct cxs_batch {
    const float *x;          /**< [n][(2k+1)*dim] */
    const int64_t *y;        /**< [n] labels, or NULL */
    const uint64_t *frames;  /**< [n] global frame numbers */
    size_t n;                /**< batch_size, or fewer for the last batch */
    uint64_t index;          /**< batch number within the epoch */
    uint64_t position;       /**< sampler position of the first sample */
} cxs_batch;

typedef struct cxs_loader cxs_loader;

/**
 * Start worker threads that fill a ring of batch buffers ahead of the
 * consumer, over epoch `epoch` of `sampler` from sampler position `start`
 * (0 for a fresh epoch, or the position saved to resume).  ds and sampler
 * must outlive the loader.  Returns 0, -ENOMEM, -EAGAIN (threads),
 * CXS_E_NO_LABELS (labels set on a features-only dataset: check
 * cxs_info.label_width), or CXS_E_INVALID.
 */
CXS_API int cxs_loader_create(const cxs_dataset *ds, const cxs_sampler *sampler,
                              const cxs_loader_opts *opts, uint64_t epoch, uint64_t start,
                              cxs_loader **out);

/**
 * cxs_loader_create with a diagnostic: on failure diag (may be NULL) says
 * which option is wrong and why ("loader: batch_size must be at least 1",
 * "loader: start 900 is past the epoch's 800 samples" ...).  The same
 * return codes.
 */
CXS_API int cxs_loader_create_ex(const cxs_dataset *ds, const cxs_sampler *sampler,
                                 const cxs_loader_opts *opts, uint64_t epoch, uint64_t start,
                                 cxs_loader **out, cxs_diag *diag);

/**
 * Hand back the previous batch (if any) and take the next one, waiting for
 * it if the workers are behind.  *batch is NULL at the end of the epoch.
 * Returns 0, or the first error a worker met.  One consumer at a time.
 * After fork() the child may go on using a loader it inherited: the first
 * call in the child starts new workers at the child's position.  If no
 * worker thread can start there, that call returns -EAGAIN and the next
 * call tries again (it never waits for batches no thread fills).
 */
CXS_API int cxs_loader_next(cxs_loader *l, const cxs_batch **batch);

/**
 * cxs_loader_next with a diagnostic (the plain form is this with diag
 * NULL; the message is also kept: cxs_loader_error): on failure diag says
 * what went wrong, naming the shard file, the utterance id and, for a
 * compressed dataset, the chunk when the data is at fault:
 * CXS_E_TRUNCATED when a shard lost bytes since the dataset was opened
 * (truncated under the loader: the read is stopped, the process goes on),
 * CXS_E_CHECKSUM or CXS_E_CORRUPT for a damaged chunk or a label outside
 * the vocabulary (never served), CXS_E_CHECKSUM for a block of FEATURES or
 * LABELS that fails its block sum (format 1.3: every order, every block
 * checked at its first use; the message names the shard, the section,
 * the block and the utterances it holds).  The same return codes.  A
 * failed batch is one batch: the next call goes on with the next one.
 */
CXS_API int cxs_loader_next_ex(cxs_loader *l, const cxs_batch **batch, cxs_diag *diag);

/**
 * cxs_loader_next_ex that waits at most timeout_ms milliseconds for the
 * batch: -ETIMEDOUT when it is not ready by then, and nothing else changes
 * (the batch handed out last is given back, as by any call; the next call
 * waits for the same batch).  A batch that is ready costs what
 * cxs_loader_next_ex costs.  For a consumer that must notice something
 * else while a batch is slow to come, such as a streamed dataset's block
 * behind a slow server: the Python binding waits in slices of 100 ms, so
 * that Ctrl-C raises KeyboardInterrupt between them.
 */
CXS_API int cxs_loader_next_timed(cxs_loader *l, const cxs_batch **batch, uint32_t timeout_ms,
                                  cxs_diag *diag);

/**
 * Cancel the consumer's wait, from any thread (not from a signal handler:
 * it takes the loader's lock; a handler sets a flag that a thread acts on,
 * or a thread waits for the signal with sigwait): the cxs_loader_next*
 * call waiting now, or else the next one made, returns -ECANCELED at once
 * without a batch.  A streamed dataset's transfers in flight end (within
 * about 100 ms; what arrived of an unfinished block is not kept: the cache
 * marks a block there only once it is whole and checked, and no lock
 * stays held).  The loader remains usable: the call after the one that
 * returned -ECANCELED throws away what the workers filled meanwhile and
 * goes on from the same batch (the stream fetching again what it needs),
 * and cxs_loader_reset or cxs_loader_free work as always.  Returns 0, or
 * CXS_E_INVALID for NULL.
 */
CXS_API int cxs_loader_cancel(cxs_loader *l);

/**
 * External mode: give the loader one buffer pair to fill, x of batch_size *
 * (2k+1)*dim floats and y of batch_size int64 (NULL when labels are off).
 * Buffers are filled in the order given; the batch handed out by
 * cxs_loader_next points into one of them, which from then on is the
 * caller's again (it stays valid after the next call; the loader never
 * touches it).  Keep up to `ring` buffers provided to keep every worker busy.
 * The caller must keep provided buffers alive until they come back in a
 * batch or the loader is freed.  Returns 0, or CXS_E_INVALID when the
 * loader is not external or already holds `ring` buffers.  In external mode
 * cxs_loader_next returns CXS_E_INVALID rather than wait forever when no
 * buffer is there for the next batch.
 */
CXS_API int cxs_loader_provide(cxs_loader *l, float *x, int64_t *y);

/** The loader's ring: the batch buffers it keeps (opts.ring, or the
 * default it chose: threads + 2, at least 3).  In external mode, how many
 * buffers to provide to keep every worker busy. */
CXS_API uint32_t cxs_loader_ring(const cxs_loader *l);

/**
 * Restart at (epoch, start): discards prefetched batches, and the batch the
 * last cxs_loader_next handed out is no longer valid.  The position to save
 * for an exact resume is the last batch's position + n.
 */
CXS_API int cxs_loader_reset(cxs_loader *l, uint64_t epoch, uint64_t start);

/**
 * What the loader's last call (cxs_loader_next, _next_ex, _reset) met: on
 * its failure, the diagnostic the _ex form would have written (for a
 * failure in the data, diag->file is the shard and diag->offset the byte
 * in it); after a success, code 0 and an empty message.  So the plain
 * calls lose nothing: `if (cxs_loader_next(l, &b)) puts(cxs_loader_error(l)->message);`.
 * Owned by the loader, valid until its next call; NULL only for l NULL.
 */
CXS_API const cxs_diag *cxs_loader_error(const cxs_loader *l);

/** Stop and join the workers, free the ring.  NULL is a no-op. */
CXS_API void cxs_loader_free(cxs_loader *l);

/* ---- whole-utterance batches (sequence models) ------------------------- */

/**
 * Batches of whole utterances for sequence models (CTC, attention): x
 * [B, Tmax, D] zero-padded, the lengths [B], and per-frame labels padded to
 * [B, Tmax].  An utterance sampler groups utterances into batches under a
 * frame budget, padding counted: B * Tmax <= frame_budget, Tmax being the
 * batch's longest utterance.
 *
 * The epoch's global batch order (CXS_UTT_SHUFFLE):
 *  1. the utterances are put in a seeded random order (per epoch);
 *  2. each goes to its length bucket: `buckets` buckets of about equal
 *     utterance counts, bounds at the quantiles of the dataset's lengths
 *     (fixed at create); the random order is kept inside a bucket (built
 *     bucket by bucket: each utterance to a seeded random bin of its
 *     bucket, every bin shuffled -- a uniformly random order inside each
 *     bucket, in sequential passes over the utterances);
 *  3. every bucket is cut greedily into batches: the next utterance joins
 *     the current batch while (n + 1) * max(Tmax, T) <= frame_budget and n <
 *     max_batch;
 *  4. the batches are put in a seeded random order (per epoch).
 * So which utterances go together and the order of the batches both change
 * with the epoch.  buckets = 1 is random batching (no bucketing: the
 * padding overhead it costs is what `ctxshard bench-utt` reports).
 * CXS_UTT_SEQUENTIAL: utterances in storage order, cut greedily under the
 * budget, batches in order (evaluation).
 *
 * Block mode (memory_bytes > 0, CXS_UTT_SHUFFLE): for data larger than
 * memory.  The block schedule of CXS_SAMPLER_BLOCK (blocks of whole
 * utterances of memory_bytes / (blocks + 1) bytes, in a seeded order per
 * epoch) is taken `blocks` blocks at a time: steps 1-4 above run inside
 * each group of `blocks` consecutive blocks, and the groups follow each
 * other, so an epoch read in batch order reads each block once and needs
 * one group at a time; the utterance loader asks for the next group's
 * blocks ahead (cxs_utt_loader_opts.readahead) and, once the consumer
 * takes a batch of a later group, lets the earlier groups' blocks go from
 * the page cache, so about two groups are cached at a time.
 *
 * Utterances longer than the budget: refused at create (CXS_E_RANGE, the
 * message names the longest and how many are over) unless long_alone is 1:
 * then each is served alone, in a batch of one that exceeds the budget
 * (the only batches that do).
 *
 * Ranks: batch g of the epoch's global order goes to rank g % world_size
 * (rank r takes its positions i = 0, 1, ... at g = origin + r + i *
 * world_size).  Every rank computes the same global order from (seed,
 * epoch), so all ranks agree on the epoch's batch count N and each gets
 * exactly ceil((N - origin) / world_size) batches: the last round of ranks
 * is completed by wrapping around to the epoch's first batches (repeats,
 * as torch's DistributedSampler pads), or with drop_last 1 cut to
 * floor((N - origin) / world_size) (batches dropped).  No rank ever waits
 * for a batch another rank does not have: DDP does not hang.
 *
 * State and resume: (seed, epoch, global position), the global position
 * counting batches of the epoch's global order: origin + position *
 * world_size when every rank stands at `position`.  Building an epoch's
 * order is O(utterances) (kept for the last two epochs asked); any batch
 * of it is then O(1), so resuming never replays the epoch.  A run saved on
 * N ranks at global position G continues on M ranks with origin = G: the
 * same global order, nothing repeated or lost.  The order never depends on
 * world_size, rank, thread count or origin.
 */
#define CXS_UTT_SEQUENTIAL 0u
#define CXS_UTT_SHUFFLE 1u
/** The most buckets cxs_utt_sampler_opts.buckets = 0 chooses: it takes
 * frames / (2 * frame_budget) (enough for about two full batches a
 * bucket, so that a bucket's batches still change with the epoch; in
 * block mode the frames of one group of blocks), between 1 and this. */
#define CXS_UTT_DEFAULT_BUCKETS 32u
/** Label of the padded frames of cxs_utt_batch.y: torch's ignore_index. */
#define CXS_UTT_PAD_LABEL (-100)

typedef struct cxs_utt_sampler_opts {
    uint32_t kind;          /**< CXS_UTT_SEQUENTIAL or CXS_UTT_SHUFFLE */
    uint64_t seed;
    uint64_t frame_budget;  /**< required: B * Tmax of a batch is at most this */
    uint32_t max_batch;     /**< utterances a batch may hold at most; 0: no limit */
    uint32_t buckets;       /**< length buckets, 1..1024; 0: chosen from the data
                                 (see CXS_UTT_DEFAULT_BUCKETS) */
    uint32_t long_alone;    /**< 1: an utterance above the budget is a batch alone;
                                 0: refused at create */
    uint32_t rank;          /**< 0 .. world_size-1 */
    uint32_t world_size;    /**< 0 or 1: not distributed */
    uint32_t drop_last;     /**< 1: cut the epoch to a multiple of world_size batches */
    uint64_t origin;        /**< global batch position where every epoch starts */
    uint64_t memory_bytes;  /**< block mode: the page cache the order may use; 0: off */
    uint32_t blocks;        /**< block mode: blocks bucketed together, 1..1024 (0: 8) */
    uint64_t reserved[CXS_OPTS_RESERVED]; /**< zero (start from cxs_utt_sampler_opts_init) */
} cxs_utt_sampler_opts;

typedef struct cxs_utt_sampler cxs_utt_sampler;

/** Fill o with the defaults (all 0); frame_budget must then be set. */
CXS_API void cxs_utt_sampler_opts_init(cxs_utt_sampler_opts *o);

/**
 * Create an utterance sampler over ds (which must outlive it).  Returns 0,
 * -ENOMEM, CXS_E_INVALID (no frame_budget, unknown kind, rank >= world_size,
 * buckets or blocks above 1024, block mode with CXS_UTT_SEQUENTIAL) or
 * CXS_E_RANGE (an utterance longer than the budget without long_alone; a
 * memory budget whose blocks cannot hold the longest utterance); diag (may
 * be NULL) says which and why.
 */
CXS_API int cxs_utt_sampler_create(const cxs_dataset *ds, const cxs_utt_sampler_opts *opts,
                                   cxs_utt_sampler **out, cxs_diag *diag);
/** NULL is a no-op. */
CXS_API void cxs_utt_sampler_free(cxs_utt_sampler *s);

/**
 * The epoch's batch counts: *global (may be NULL) the batches of its
 * global order, *length (may be NULL) this rank's (see above; 0 when
 * origin is at or past the end).  Builds the epoch's order when it is not
 * cached.  Returns 0 or -ENOMEM.
 */
CXS_API int cxs_utt_sampler_length(const cxs_utt_sampler *s, uint64_t epoch, uint64_t *global,
                                   uint64_t *length);

/**
 * Most utterances one batch can hold (for buffers): max_batch, or what the
 * budget allows of the shortest utterance, at most num_utterances.
 */
CXS_API uint32_t cxs_utt_sampler_max_batch(const cxs_utt_sampler *s);
/** Most padded frames (B * Tmax) of a batch: frame_budget, or the longest
 * utterance when it is above it and long_alone is set. */
CXS_API uint64_t cxs_utt_sampler_max_frames(const cxs_utt_sampler *s);

/**
 * Utterances of this rank's batch at position pos of `epoch` into
 * utts[cap] (cap >= cxs_utt_sampler_max_batch() always suffices), their
 * count into *n, and the batch's place in the global order into *global
 * (may be NULL).  Thread-safe.  Returns 0, CXS_E_RANGE (pos at or past the
 * rank's length), CXS_E_INVALID (cap too small), -ENOMEM.
 */
CXS_API int cxs_utt_sampler_batch(const cxs_utt_sampler *s, uint64_t epoch, uint64_t pos,
                                  uint64_t *utts, uint32_t cap, uint32_t *n, uint64_t *global);

/** cxs_dataset_pad_batch flags (besides CXS_GATHER_NORMALIZE, which
 * normalises by the dataset's stored statistics as the frame gather does) */
/** per-utterance mean and variance normalisation (CMVN over the
 * utterance's own frames, per dimension, computed in float64; a dimension
 * with zero variance is only centred).  Applied after the statistics'
 * normalisation when both are asked. */
#define CXS_PAD_PER_UTTERANCE 2u

/**
 * Assemble a padded batch of n whole utterances: x[n][tmax][dim] float32,
 * frames past an utterance's end zero; lengths[n] its frame counts;
 * y[n][tmax] (when not NULL) its per-frame labels as int64, CXS_UTT_PAD_LABEL
 * past the end.  tmax must be at least the longest of them (0: exactly
 * the longest; the caller's buffers must then hold it: see
 * cxs_dataset_utterance).  Stored float16/bfloat16 convert exactly;
 * compressed datasets decode the chunks they need.  flags:
 * CXS_GATHER_NORMALIZE (by norm when not NULL -- the training split's --
 * else the dataset's own statistics) and CXS_PAD_PER_UTTERANCE.  Returns
 * 0, CXS_E_RANGE (an utterance past the end, or longer than tmax),
 * CXS_E_INVALID, CXS_E_NO_LABELS (y asked of a features-only dataset),
 * -ENOMEM, CXS_E_CHECKSUM / CXS_E_CORRUPT (a damaged compressed chunk).
 */
CXS_API int cxs_dataset_pad_batch(const cxs_dataset *ds, const uint64_t *utts, size_t n,
                                  uint64_t tmax, uint32_t flags, const cxs_norm *norm, float *x,
                                  int64_t *lengths, int64_t *y);
/** cxs_dataset_pad_batch with a diagnostic: on failure diag (may be NULL)
 * says why, naming for damaged or truncated data the shard, the utterance
 * id and the chunk (CXS_E_CORRUPT also for a label outside the vocabulary,
 * never served; CXS_E_TRUNCATED for a shard that lost bytes since open).
 * The same return codes. */
CXS_API int cxs_dataset_pad_batch_ex(const cxs_dataset *ds, const uint64_t *utts, size_t n,
                                     uint64_t tmax, uint32_t flags, const cxs_norm *norm,
                                     float *x, int64_t *lengths, int64_t *y, cxs_diag *diag);

/**
 * The label sequences of n utterances as a padded batch of CTC targets:
 * targets[n][lmax] int64 vocabulary indices, CXS_UTT_PAD_LABEL past each
 * sequence's end, and target_lengths[n].  lmax must be at least the
 * longest of them (0: exactly the longest; the caller's buffer must then
 * hold it: see cxs_info.max_seq_length).  Returns 0, CXS_E_NO_SEQUENCES (a
 * dataset without label sequences), CXS_E_RANGE (an utterance past the
 * end, or a sequence longer than lmax), CXS_E_INVALID.
 */
CXS_API int cxs_dataset_pad_targets(const cxs_dataset *ds, const uint64_t *utts, size_t n,
                                    uint64_t lmax, int64_t *targets, int64_t *target_lengths);

typedef struct cxs_utt_loader_opts {
    uint32_t threads;     /**< worker threads; 0: cxs_default_threads() */
    uint32_t ring;        /**< batch buffers; 0: threads + 2 (at least 3) */
    uint32_t flags;       /**< CXS_GATHER_NORMALIZE, CXS_PAD_PER_UTTERANCE */
    uint32_t labels;      /**< 1: per-frame labels y too (needs labels) */
    const cxs_norm *norm; /**< with CXS_GATHER_NORMALIZE: these statistics
                               (train's); NULL: the dataset's.  Copied. */
    uint32_t readahead;   /**< block mode, uncompressed: 0 asks the kernel to
                               read the next group of blocks ahead
                               (MADV_WILLNEED) when the first batch of a group
                               is taken; CXS_READAHEAD_OFF: no */
    uint32_t targets;     /**< 1: the label sequences too, as CTC targets
                               (cxs_utt_batch.targets; needs a dataset with
                               sequences, CXS_E_NO_SEQUENCES otherwise) */
    uint64_t reserved[CXS_OPTS_RESERVED]; /**< zero (start from cxs_utt_loader_opts_init) */
} cxs_utt_loader_opts;

/** Fill o with the defaults (all 0). */
CXS_API void cxs_utt_loader_opts_init(cxs_utt_loader_opts *o);

/**
 * A padded batch handed out by cxs_utt_loader_next; valid until the next
 * call (or cxs_utt_loader_reset).  Fields may be added at the end (the
 * loader allocates it).
 */
typedef struct cxs_utt_batch {
    const float *x;         /**< [n][tmax][dim], zero past each length */
    const int64_t *lengths; /**< [n] frames */
    const int64_t *y;       /**< [n][tmax] labels, CXS_UTT_PAD_LABEL past each
                                 length; NULL without labels */
    const uint64_t *utts;   /**< [n] utterance numbers */
    size_t n;
    uint64_t tmax;          /**< the longest of the batch */
    uint64_t frames;        /**< real frames: the sum of lengths */
    uint64_t index;         /**< this rank's position of the batch in the epoch */
    uint64_t global;        /**< its place in the epoch's global batch order */
    const int64_t *targets; /**< [n][lmax] label sequences (vocabulary
                                 indices), CXS_UTT_PAD_LABEL past each
                                 target length; NULL unless opts.targets */
    const int64_t *target_lengths; /**< [n] symbols; NULL unless opts.targets */
    uint64_t lmax;          /**< the longest label sequence of the batch */
} cxs_utt_batch;

typedef struct cxs_utt_loader cxs_utt_loader;

/**
 * Worker threads assemble padded batches of `sampler` into a ring ahead of
 * the consumer, from this rank's position `start` of `epoch`.  ds and
 * sampler must outlive it.  The batches and their order never depend on
 * the thread count.  Fork-safe like cxs_loader: a forked child's first
 * call starts new workers at the child's position.  Returns 0, -ENOMEM,
 * -EAGAIN, CXS_E_NO_LABELS, CXS_E_NO_SEQUENCES, CXS_E_INVALID (start past
 * the rank's length, unknown flags, normalisation without statistics).
 */
CXS_API int cxs_utt_loader_create(const cxs_dataset *ds, const cxs_utt_sampler *sampler,
                                  const cxs_utt_loader_opts *opts, uint64_t epoch,
                                  uint64_t start, cxs_utt_loader **out);
/** cxs_utt_loader_create with a diagnostic: on failure diag (may be NULL)
 * says which option is wrong and why.  The same return codes. */
CXS_API int cxs_utt_loader_create_ex(const cxs_dataset *ds, const cxs_utt_sampler *sampler,
                                     const cxs_utt_loader_opts *opts, uint64_t epoch,
                                     uint64_t start, cxs_utt_loader **out, cxs_diag *diag);
/** Hand back the previous batch and take the next (waiting for it); *batch
 * NULL at the end of the epoch.  Returns 0 or the first error met. */
CXS_API int cxs_utt_loader_next(cxs_utt_loader *l, const cxs_utt_batch **batch);
/** cxs_utt_loader_next with a diagnostic, as cxs_loader_next_ex: a failure
 * in the data (a shard truncated since open, a damaged chunk, a label
 * outside the vocabulary) names the shard file, the utterance id and the
 * chunk.  The same return codes. */
CXS_API int cxs_utt_loader_next_ex(cxs_utt_loader *l, const cxs_utt_batch **batch,
                                   cxs_diag *diag);
/** cxs_utt_loader_next_ex waiting at most timeout_ms milliseconds:
 * -ETIMEDOUT when the batch is not ready by then, as cxs_loader_next_timed
 * (the next call waits for the same batch). */
CXS_API int cxs_utt_loader_next_timed(cxs_utt_loader *l, const cxs_utt_batch **batch,
                                      uint32_t timeout_ms, cxs_diag *diag);
/** Cancel the consumer's wait from any thread, as cxs_loader_cancel: the
 * call waiting now, or else the next one, returns -ECANCELED at once; a
 * streamed dataset's transfers end; the call after it goes on from the
 * same batch.  0, or CXS_E_INVALID for NULL. */
CXS_API int cxs_utt_loader_cancel(cxs_utt_loader *l);
/** Restart at (epoch, start), discarding prefetched batches; the batch
 * handed out last becomes invalid.  The position to save for an exact
 * resume is the last batch's index + 1. */
CXS_API int cxs_utt_loader_reset(cxs_utt_loader *l, uint64_t epoch, uint64_t start);
/** The last call's failure, as cxs_loader_error. */
CXS_API const cxs_diag *cxs_utt_loader_error(const cxs_utt_loader *l);
/** Stop and join the workers, free the ring.  NULL is a no-op. */
CXS_API void cxs_utt_loader_free(cxs_utt_loader *l);

/* ---- mixtures of datasets ---------------------------------------------- */

/**
 * A mixture serves batches of frames drawn from several datasets (the
 * sources: corpora, languages, splits) in fixed proportions, with the
 * guarantees of one sampler: deterministic from (seed, epoch), resumable
 * and elastic from (seed, epoch, global position), equal batch counts per
 * rank.
 *
 * Shares: source i's share p_i is weights[i] / sum(weights); with weights
 * NULL the natural one, its frame count n_i / sum(n), or with a
 * temperature T > 0 n_i^(1/T) / sum(n^(1/T)) (T > 1 flattens towards small
 * sources).  An epoch is epoch_size samples (0: the sum of the sources'
 * frames), of which source i gives exactly its quota q_i: epoch_size * p_i
 * rounded by largest remainder (the quotas sum to epoch_size; ties to the
 * lower source).
 *
 * Which samples: each source is read as an endless stream of passes, pass
 * p being a permutation of all its frames (CXS_SAMPLER_SHUFFLE: a seeded
 * one per pass, as a shuffle sampler's epochs; CXS_SAMPLER_SEQUENTIAL:
 * storage order; CXS_SAMPLER_BLOCK: the block sampler's epoch p, with
 * `blocks` and the source's share of memory_bytes -- the share its rows
 * take of an epoch's bytes, q_i * row bytes over the sum -- so that a
 * batch draws on few blocks of each source: data larger than memory).  Epoch e takes items e*q_i .. (e+1)*q_i - 1 of the
 * stream: a source smaller than its quota is repeated (whole passes, then
 * the start of the next), a larger one subsampled, and the next epoch goes
 * on where this one stopped, so no frame comes twice within a pass and an
 * epoch of a subsampled source is never the same subset twice.
 *
 * Batches: the epoch is cut into global batches of batch_size samples
 * (the last one shorter).  The samples are interleaved by the Sainte-Lague
 * rule (source i's k-th sample belongs at
 * (k + 1/2) / q_i of the epoch; all sources' samples merged in that order,
 * ties to the lower source), so every stretch of the epoch, every batch
 * with it, holds each source's share to within about one sample, by
 * construction, not by chance.  Inside a batch the samples are grouped by
 * source, in source order (an order SGD does not see).
 *
 * Ranks (world_size w): the global batches are taken in rounds of w, one
 * per rank, rank r receiving batch origin + r + t*w of round t.  Within a
 * round the ranks' batches share the round's samples of each source as
 * evenly as their size allows, and which rank receives a source's spare
 * sample is chosen so that, over the epoch, every rank gets each source's
 * share to within one sample (each rank keeping a running tally; in the
 * final round, which ranks receive its batches is chosen for that too).  So the
 * samples of a round are the same for any w, and a state saved between
 * rounds (global position G = origin + pos*w) holds exactly the first G
 * batches' samples: a run saved on N ranks continues on M ranks with origin
 * G, nothing repeated or lost.  With drop_last 0 the final round is
 * completed by repeating, for the ranks past the epoch's last batch,
 * batches of the run's first round (as torch's DistributedSampler pads);
 * with drop_last 1 the short last batch and an incomplete final round are
 * cut.  With w > 1, the rounds' division is computed at create, O(batches)
 * time and 8 bytes per source of every batch of this rank.
 *
 * The sources must outlive the mixture.  A mixture of one source is a
 * sampler of that source whose batches are those of the mixture's rules.
 */
#define CXS_MIX_MAX_SOURCES 256u

typedef struct cxs_mix_opts {
    uint32_t kind;          /**< CXS_SAMPLER_SHUFFLE, CXS_SAMPLER_SEQUENTIAL (0) or
                                 CXS_SAMPLER_BLOCK: the order of each source's passes */
    uint64_t seed;
    uint32_t batch_size;    /**< samples per global batch, required */
    const double *weights;  /**< nsources weights >= 0 (not all 0); NULL: natural shares */
    double temperature;     /**< weights NULL: shares ~ n^(1/T); 0 or 1: ~ n */
    uint64_t epoch_size;    /**< samples per epoch, all ranks (at most 2^62); 0: the sum of
                                 the sources' frames */
    uint32_t rank;          /**< 0 .. world_size-1 */
    uint32_t world_size;    /**< 0 or 1: not distributed */
    uint32_t drop_last;     /**< 1: cut the short last batch and an incomplete final round */
    uint64_t origin;        /**< global batch position where every epoch starts (resume) */
    uint64_t memory_bytes;  /**< CXS_SAMPLER_BLOCK: the page cache all the sources may use */
    uint32_t blocks;        /**< CXS_SAMPLER_BLOCK: blocks a source's batch draws from
                                 (1..1024; 0: 8) */
    uint64_t reserved[CXS_OPTS_RESERVED]; /**< zero (start from cxs_mix_opts_init) */
} cxs_mix_opts;

typedef struct cxs_mix cxs_mix;

/** Fill o with the defaults (all 0); batch_size must then be set. */
CXS_API void cxs_mix_opts_init(cxs_mix_opts *o);

/**
 * Create a mixture over the n datasets ds[0..n-1] (1 .. CXS_MIX_MAX_SOURCES,
 * which must outlive it).  Returns 0, -ENOMEM or CXS_E_INVALID (no
 * batch_size, a weight negative, not finite or all zero, a weight for a
 * source without frames, a temperature with weights or not positive,
 * rank >= world_size, origin past the epoch's batches, an unknown kind,
 * an epoch above 2^62 samples, CXS_SAMPLER_BLOCK without memory_bytes, memory_bytes or blocks with
 * another kind) or CXS_E_RANGE (block order: a source whose share of the
 * budget cannot hold its longest utterance in a block); diag (may be
 * NULL) says which and why.
 */
CXS_API int cxs_mix_create(const cxs_dataset *const *ds, uint32_t n, const cxs_mix_opts *opts,
                           cxs_mix **out, cxs_diag *diag);
/** NULL is a no-op. */
CXS_API void cxs_mix_free(cxs_mix *m);
/** Sources, and source i's dataset, share (p_i) and samples per epoch (q_i). */
CXS_API uint32_t cxs_mix_sources(const cxs_mix *m);
CXS_API const cxs_dataset *cxs_mix_dataset(const cxs_mix *m, uint32_t i);
CXS_API double cxs_mix_share(const cxs_mix *m, uint32_t i);
CXS_API uint64_t cxs_mix_quota(const cxs_mix *m, uint32_t i);
/** Samples per epoch (all ranks), samples per batch. */
CXS_API uint64_t cxs_mix_epoch_size(const cxs_mix *m);
CXS_API uint32_t cxs_mix_batch_size(const cxs_mix *m);
/** *global (may be NULL): the epoch's global batches (after drop_last);
 * the return value: this rank's batches from origin (the same every epoch). */
CXS_API uint64_t cxs_mix_length(const cxs_mix *m, uint64_t *global);

/**
 * The samples of this rank's batch at position pos of `epoch`: their frame
 * numbers (in their own dataset) into frames[cap] and their sources into
 * source[cap] (may be NULL), cap >= batch_size always sufficing; the count
 * into *n and the batch's place in the epoch's global order into *global
 * (may be NULL; a repeated batch says the batch it repeats).  Thread-safe.
 * Returns 0, CXS_E_RANGE (pos at or past the length), CXS_E_INVALID (cap
 * too small, NULL pointers).
 */
CXS_API int cxs_mix_batch(const cxs_mix *m, uint64_t epoch, uint64_t pos, uint64_t *frames,
                          uint32_t *source, uint32_t cap, uint32_t *n, uint64_t *global);
/** Whether this rank's batch at position pos repeats a batch of the run's
 * first round (the final round's padding for ranks past the epoch's last
 * batch, drop_last 0): 1 or 0 (0 also for pos past the length). */
CXS_API int cxs_mix_repeat(const cxs_mix *m, uint64_t pos);

/** A batch of a mixture loader; valid until the next call (or reset). */
typedef struct cxs_mix_frames {
    const float *x;          /**< [n][(2k+1)*dim] */
    const int64_t *y;        /**< [n] labels (in source 0's vocabulary), or NULL */
    const uint64_t *frames;  /**< [n] frame numbers, each in its own source */
    const uint32_t *source;  /**< [n] the source of each sample */
    size_t n;
    uint64_t index;          /**< this rank's position of the batch in the epoch */
    uint64_t global;         /**< its place in the epoch's global batch order */
    uint32_t repeat;         /**< 1: it repeats a batch (the final round's padding) */
} cxs_mix_frames;

typedef struct cxs_mix_loader cxs_mix_loader;

/**
 * Worker threads gather the windows of `mix`'s batches into a ring of
 * buffers ahead of the consumer, from this rank's position `start` of
 * `epoch` (the mixture and its datasets must outlive it).  opts as for
 * cxs_loader_create: k, threads, ring, labels and flags; batch_size 0 or
 * the mixture's; external, readahead and drop_last must be 0 (the
 * mixture's drop_last rules).  The sources must have the same dim (their
 * stored dtypes may differ: every one is converted to float32 exactly).
 * With labels, every source needs frame labels, and vocabularies equal to
 * source 0's or holding the same symbols in another order (labels are then
 * mapped by symbol into source 0's numbering); otherwise CXS_E_INVALID
 * names the symbols that differ.  CXS_GATHER_NORMALIZE normalises each
 * source with its own stored statistics, or all of them with opts->norm
 * when given.  In block order the loader asks for each source's blocks
 * (POSIX_FADV_WILLNEED) as the claimed batches reach them, one ahead, and
 * lets a block go (out of the page tables and the page cache) once the
 * consumer has passed every batch that draws on it.  Returns 0, -ENOMEM,
 * -EAGAIN, CXS_E_NO_LABELS, CXS_E_INVALID (diag says which option or
 * source and why).
 */
CXS_API int cxs_mix_loader_create(const cxs_mix *mix, const cxs_loader_opts *opts,
                                  uint64_t epoch, uint64_t start, cxs_mix_loader **out,
                                  cxs_diag *diag);
/** Hand back the previous batch, take the next; *batch NULL at the end of
 * the epoch.  Returns 0 or the first error (diag may be NULL: as
 * cxs_loader_next_ex, a failure in the data names the shard file). */
CXS_API int cxs_mix_loader_next(cxs_mix_loader *l, const cxs_mix_frames **batch, cxs_diag *diag);
/** cxs_mix_loader_next waiting at most timeout_ms milliseconds for the
 * batch: -ETIMEDOUT (*batch NULL) when it is not ready by then, and
 * nothing else changes (the batch handed out last is given back, as by any
 * call; the next call waits for the same batch), as cxs_loader_next_timed.
 * The Python MixtureLoader waits in slices of 100 ms, so that Ctrl-C
 * raises KeyboardInterrupt between them. */
CXS_API int cxs_mix_loader_next_timed(cxs_mix_loader *l, const cxs_mix_frames **batch,
                                      uint32_t timeout_ms, cxs_diag *diag);
/** Cancel the consumer's wait from any thread (not from a signal handler),
 * as cxs_loader_cancel: the cxs_mix_loader_next* call waiting now, or else
 * the next one made, returns -ECANCELED at once (*batch NULL); the call
 * after it throws away what the workers filled meanwhile and goes on from
 * the same batch; cxs_mix_loader_reset and _free work as always.  0, or
 * CXS_E_INVALID for NULL. */
CXS_API int cxs_mix_loader_cancel(cxs_mix_loader *l);
/** Restart at (epoch, start), discarding prefetched batches. */
CXS_API int cxs_mix_loader_reset(cxs_mix_loader *l, uint64_t epoch, uint64_t start);
/** The last call's failure. */
CXS_API const cxs_diag *cxs_mix_loader_error(const cxs_mix_loader *l);
/** Stop and join the workers, free the ring.  NULL is a no-op. */
CXS_API void cxs_mix_loader_free(cxs_mix_loader *l);

/* ---- mixtures of datasets: whole utterances ----------------------------- */

/**
 * An utterance mixture serves padded batches of whole utterances, as the
 * utterance sampler does (length buckets, a frame budget), drawn from
 * several datasets in fixed proportions, with the same guarantees as
 * cxs_mix: deterministic from (seed, epoch), resumable and elastic from
 * (seed, epoch, global position), equal batch counts per rank.
 *
 * Shares and quotas as cxs_mix's, counted in utterances: weights, or the
 * natural shares (each source's utterance count), or with a temperature
 * T, U_i^(1/T); an epoch is epoch_size utterances (0: the sum of the
 * sources'), of which source i gives exactly its quota q_i (largest
 * remainder).  Which utterances: items e*q_i .. (e+1)*q_i - 1 of source
 * i's endless stream of passes, pass p a seeded permutation of all its
 * utterances (CXS_UTT_SHUFFLE) or storage order (CXS_UTT_SEQUENTIAL): a
 * source smaller than its quota repeats (whole passes), a larger one is
 * subsampled, no utterance twice within a pass.
 *
 * Batches (CXS_UTT_SHUFFLE): the epoch's utterances go into length
 * buckets, inside a bucket the sources are interleaved by the
 * Sainte-Lague rule on their counts in that bucket, and the interleave is
 * cut greedily into batches of at most frame_budget padded frames (batch
 * size * longest) and max_batch utterances, a new batch at every bucket
 * change; the batches are then shuffled.  Which buckets (stratify):
 *  - CXS_MIX_STRATIFY_SHARES (0, the default): bucket b holds, of every
 *    source, its epoch items of rank b*q_i/nb .. (b+1)*q_i/nb - 1 in
 *    length (its own b-th length quantile), so every bucket, and every
 *    batch with it, holds the mixture's shares to within about one
 *    utterance; when the sources' lengths differ, a batch pads the shorter
 *    source's utterances to the longer one's quantile.
 *  - CXS_MIX_STRATIFY_LENGTH: buckets by length over the whole mixture
 *    (bounds at quantiles of the lengths, each source's utterances
 *    weighted by q_i / U_i), so that a batch pads least; each batch holds
 *    its bucket's shares to within about one utterance, and a bucket of
 *    long utterances holds more of the source that has them.
 * The two are the same when the sources' lengths are alike.
 * CXS_UTT_SEQUENTIAL: one bucket (the whole epoch interleaved), batches
 * in order.  Inside a batch the utterances are grouped by source, in
 * source order.
 *
 * Block order (memory_bytes, CXS_UTT_SHUFFLE): source i gets the share of
 * memory_bytes that its quota's rows (guard rows counted) take of the
 * epoch's bytes, and its passes are its block schedule's (blocks of whole
 * utterances of share / (blocks + 1) bytes, in a seeded order per pass)
 * read in groups of `blocks` blocks, a group's utterances in a seeded
 * order.  The epoch is cut into K windows, window k holding every
 * source's items k*q_i/K .. (k+1)*q_i/K - 1, K twice the most groups any
 * source's epoch reads; the batches are made (buckets, interleave, cut,
 * shuffle) inside each window, and the windows come in order, so that a
 * reader in batch order needs about half a group of every source at a
 * time.  cxs_mix_utt_loader asks for (WILLNEED) the groups of the window
 * a worker starts and of the next, and lets go of those no later window
 * reads once the consumer is past them.  CXS_E_RANGE at create: a share
 * whose blocks cannot hold its source's longest utterance (diag says the
 * least memory_bytes that would do).
 *
 * Ranks (world_size w): the global batches are taken in rounds of w
 * from origin, one a rank; which rank takes which batch of a round is a
 * least-cost assignment on every rank's running count of each source
 * against its share of the utterances it was served (and, second, on its
 * utterance count, kept near the ranks' mean), computed alike on every
 * rank, up to 64 ranks; above, the largest batch to the rank with the
 * fewest utterances.  With CXS_MIX_STRATIFY_LENGTH the counts are held
 * against an equal split of what the rounds dealt instead (its batches
 * hold their buckets' shares, not the mixture's).  With drop_last 0 the
 * final round is completed by wrapping to the epoch's first batches
 * (cxs_mix_utt_batch's repeat says which), with drop_last 1 it is cut.
 * The batches never depend on w, rank or origin: a run saved on N ranks at
 * global position G continues on M ranks with origin G, nothing repeated
 * or lost.  How close the ranks keep to their shares is measured, not
 * bounded (the guide: within one utterance in all but one of 448 random
 * configurations, stratified by shares).
 *
 * Cost: an epoch's order is built at its first use: O(its utterances *
 * sources) time (with CXS_MIX_STRATIFY_SHARES and a sort of each source's
 * items by length), about 50 bytes an utterance while it is built and 12 kept (the
 * last two epochs asked are kept), and with w ranks O(batches * w *
 * (w + sources)) for the rounds' dealing up to 64 ranks, O(batches log w)
 * above; the sources' lengths are read once, at create (4 bytes an
 * utterance).
 */
#define CXS_MIX_STRATIFY_SHARES 0u
#define CXS_MIX_STRATIFY_LENGTH 1u

typedef struct cxs_mix_utt_opts {
    uint32_t kind;          /**< CXS_UTT_SEQUENTIAL (0) or CXS_UTT_SHUFFLE */
    uint64_t seed;
    uint64_t frame_budget;  /**< required: B * Tmax of a batch is at most this */
    uint32_t max_batch;     /**< utterances a batch may hold at most; 0: no limit */
    uint32_t buckets;       /**< length buckets, 1..1024; 0: chosen from the data (as
                                 cxs_utt_sampler_opts.buckets) */
    uint32_t long_alone;    /**< 1: an utterance above the budget is a batch alone;
                                 0: refused at create */
    const double *weights;  /**< nsources weights >= 0 (not all 0); NULL: natural shares */
    double temperature;     /**< weights NULL: shares ~ U^(1/T); 0 or 1: ~ U */
    uint64_t epoch_size;    /**< utterances per epoch, all ranks (at most 2^40); 0: the sum
                                 of the sources' */
    uint32_t rank;          /**< 0 .. world_size-1 */
    uint32_t world_size;    /**< 0 or 1: not distributed */
    uint32_t drop_last;     /**< 1: cut the epoch to a multiple of world_size batches */
    uint64_t origin;        /**< global batch position where every epoch starts (resume) */
    uint32_t stratify;      /**< CXS_MIX_STRATIFY_SHARES (0) or CXS_MIX_STRATIFY_LENGTH */
    uint64_t memory_bytes;  /**< block order (CXS_UTT_SHUFFLE only): the page cache all the
                                 sources may use; 0: the whole epoch shuffled */
    uint32_t blocks;        /**< block order: blocks of a source's group (1..1024; 0: 8) */
    uint64_t reserved[CXS_OPTS_RESERVED]; /**< zero (start from cxs_mix_utt_opts_init) */
} cxs_mix_utt_opts;

typedef struct cxs_mix_utt cxs_mix_utt;

/** Fill o with the defaults (all 0); frame_budget must then be set. */
CXS_API void cxs_mix_utt_opts_init(cxs_mix_utt_opts *o);
/**
 * Create an utterance mixture over ds[0..n-1] (1 .. CXS_MIX_MAX_SOURCES,
 * which must outlive it).  Reads every source's INDEX (checked).  Returns
 * 0, -ENOMEM, CXS_E_INVALID (as cxs_mix_create, and no frame_budget, an
 * unknown kind, buckets above 1024, an epoch above 2^40 utterances,
 * world_size above 2^20, memory_bytes without CXS_UTT_SHUFFLE, blocks
 * above 1024 or without memory_bytes), CXS_E_RANGE (an utterance longer
 * than the budget without long_alone: diag names the source and the
 * utterance; a block order budget too small: diag says what would do), CXS_E_CHECKSUM / CXS_E_CORRUPT / CXS_E_TRUNCATED (a damaged
 * INDEX); diag (may be NULL) says which and why.
 */
CXS_API int cxs_mix_utt_create(const cxs_dataset *const *ds, uint32_t n,
                               const cxs_mix_utt_opts *opts, cxs_mix_utt **out, cxs_diag *diag);
/** NULL is a no-op. */
CXS_API void cxs_mix_utt_free(cxs_mix_utt *m);
/** Sources, and source i's dataset, share (p_i) and utterances per epoch (q_i). */
CXS_API uint32_t cxs_mix_utt_sources(const cxs_mix_utt *m);
CXS_API const cxs_dataset *cxs_mix_utt_dataset(const cxs_mix_utt *m, uint32_t i);
CXS_API double cxs_mix_utt_share(const cxs_mix_utt *m, uint32_t i);
CXS_API uint64_t cxs_mix_utt_quota(const cxs_mix_utt *m, uint32_t i);
/** Utterances per epoch (all ranks). */
CXS_API uint64_t cxs_mix_utt_epoch_size(const cxs_mix_utt *m);
/** Most utterances of a batch (buffers), most padded frames of a batch. */
CXS_API uint32_t cxs_mix_utt_max_batch(const cxs_mix_utt *m);
CXS_API uint64_t cxs_mix_utt_max_frames(const cxs_mix_utt *m);
/** The epoch's batch counts: *global (may be NULL) the batches of its
 * global order (all of them, whatever the ranks: with drop_last the ranks
 * stop at the last whole round from origin), *length (may be NULL) this
 * rank's from origin.  Builds the epoch's order when it is not kept.
 * Returns 0 or -ENOMEM. */
CXS_API int cxs_mix_utt_length(const cxs_mix_utt *m, uint64_t epoch, uint64_t *global,
                               uint64_t *length);
/**
 * This rank's batch at position pos of `epoch`: its utterances (numbers
 * in their own dataset) into utts[cap], their sources into source[cap]
 * (may be NULL; cap >= cxs_mix_utt_max_batch() always suffices), the
 * count into *n, the batch's place in the global order into *global (may
 * be NULL) and into *repeat (may be NULL) whether it is the final round's
 * padding (a batch of the epoch's first ones again).  Thread-safe.
 * Returns 0, CXS_E_RANGE (pos at or past the length), CXS_E_INVALID (cap
 * too small, NULL pointers), -ENOMEM.
 */
CXS_API int cxs_mix_utt_batch(const cxs_mix_utt *m, uint64_t epoch, uint64_t pos, uint64_t *utts,
                              uint32_t *source, uint32_t cap, uint32_t *n, uint64_t *global,
                              uint32_t *repeat);

/** A batch of an utterance mixture loader; valid until the next call (or
 * reset). */
typedef struct cxs_mix_utts {
    const cxs_utt_batch *batch; /**< the padded batch, as cxs_utt_loader's (utts:
                                     each in its own source; y and targets in
                                     source 0's vocabulary) */
    const uint32_t *source;  /**< [batch->n] the source of each utterance */
    uint32_t repeat;         /**< 1: the final round's padding (a repeated batch) */
} cxs_mix_utts;

typedef struct cxs_mix_utt_loader cxs_mix_utt_loader;

/**
 * Worker threads assemble the padded batches of `mix` ahead of the
 * consumer, from this rank's position `start` of `epoch` (the mixture and
 * its datasets must outlive it).  opts as for cxs_utt_loader_create:
 * threads, ring, flags (CXS_GATHER_NORMALIZE: each source by its own
 * statistics, or all by opts->norm when given; CXS_PAD_PER_UTTERANCE),
 * labels, targets; readahead must be 0.  The sources must have the same
 * dim (stored dtypes may differ); with labels or targets, every source
 * needs them and vocabularies equal to source 0's or holding the same
 * symbols in another order (mapped by symbol), otherwise CXS_E_INVALID
 * names the symbols that differ.  Returns 0, -ENOMEM, -EAGAIN,
 * CXS_E_NO_LABELS, CXS_E_NO_SEQUENCES, CXS_E_INVALID (diag says why).
 */
CXS_API int cxs_mix_utt_loader_create(const cxs_mix_utt *mix, const cxs_utt_loader_opts *opts,
                                      uint64_t epoch, uint64_t start, cxs_mix_utt_loader **out,
                                      cxs_diag *diag);
/** Hand back the previous batch, take the next; *batch NULL at the end of
 * the epoch.  Returns 0 or the first error (diag may be NULL; a failure in
 * the data names the shard file and the utterance). */
CXS_API int cxs_mix_utt_loader_next(cxs_mix_utt_loader *l, const cxs_mix_utts **batch,
                                    cxs_diag *diag);
/** cxs_mix_utt_loader_next waiting at most timeout_ms milliseconds:
 * -ETIMEDOUT (*batch NULL) when the batch is not ready by then, as
 * cxs_mix_loader_next_timed (the next call waits for the same batch). */
CXS_API int cxs_mix_utt_loader_next_timed(cxs_mix_utt_loader *l, const cxs_mix_utts **batch,
                                          uint32_t timeout_ms, cxs_diag *diag);
/** Cancel the consumer's wait from any thread, as cxs_mix_loader_cancel:
 * the call waiting now, or else the next one, returns -ECANCELED at once;
 * the call after it goes on from the same batch.  0, or CXS_E_INVALID for
 * NULL. */
CXS_API int cxs_mix_utt_loader_cancel(cxs_mix_utt_loader *l);
/** Restart at (epoch, start), discarding prefetched batches. */
CXS_API int cxs_mix_utt_loader_reset(cxs_mix_utt_loader *l, uint64_t epoch, uint64_t start);
/** The last call's failure. */
CXS_API const cxs_diag *cxs_mix_utt_loader_error(const cxs_mix_utt_loader *l);
/** Stop and join the workers, free the ring.  NULL is a no-op. */
CXS_API void cxs_mix_utt_loader_free(cxs_mix_utt_loader *l);

/* ---- Positions, epochs and saved states (every loader) ----------------- */

/**
 * Where a loader stands, kept by the loader itself (one rule of resume for
 * every kind): the epoch it is positioned in and the start of its next
 * batch there, in the unit its create and reset calls take (a sampler
 * position for the frame loader, this rank's batch for the utterance
 * loader and both mixtures).  "Positioned in": right after create, reset,
 * set_epoch or seek at (e, s), (e, s); after n batches of it were handed
 * out, the start of batch n; once the last batch of e was handed out (or
 * none was left, or only a dropped tail), (e + 1, 0).
 *
 * It is also the loader's saved state: a small versioned struct to store
 * (its fields as they are, in any byte order the program chooses) and to
 * give to cxs_*_seek of a loader made over the same order (dataset,
 * sampler or mixture, seed, ranks) to continue there.  The positions of a
 * resumed run then equal those of one never stopped, batch for batch.
 */
typedef struct cxs_position {
    uint32_t version;     /**< CXS_POSITION_VERSION */
    uint32_t kind;        /**< CXS_POSITION_FRAMES ... of the loader that wrote it */
    uint64_t epoch;       /**< the epoch the loader is positioned in */
    uint64_t next;        /**< the start of its next batch in that epoch */
    uint64_t reserved[2]; /**< zero */
} cxs_position;

/** The cxs_position layout this library writes and reads. */
#define CXS_POSITION_VERSION 1u
/** cxs_position.kind: which loader, so a state never seeks another kind. */
#define CXS_POSITION_FRAMES 1u     /**< cxs_loader: next is a sampler position */
#define CXS_POSITION_UTTERANCES 2u /**< cxs_utt_loader: next is this rank's batch */
#define CXS_POSITION_MIX 3u        /**< cxs_mix_loader: this rank's batch */
#define CXS_POSITION_MIX_UTT 4u    /**< cxs_mix_utt_loader: this rank's batch */
#define CXS_POSITION_GPU_POOL 5u   /**< cxs_gpu_loader in pool mode: a position of
                                        the pool order (ctxshard_gpu.h) */

/**
 * The rule of set_epoch, alone: the start a loader positioned at `at`
 * serves `epoch` from -- at->next when at->epoch == epoch (it keeps its
 * place: a resumed run's set_epoch(e) continues e), else 0 (any other
 * epoch from its start; after a complete pass of e, set_epoch(e) serves e
 * again).  The loaders' _set_epoch calls use it; so does a binding that
 * keeps a position of its own.  at NULL: 0.
 */
CXS_API uint64_t cxs_position_start(const cxs_position *at, uint64_t epoch);

/**
 * The loader's position into *out (written only on success).  Call it from
 * the consumer's thread, like _next.  Returns 0, CXS_E_INVALID (NULL), or
 * CXS_E_RANGE when the last batch of epoch UINT64_MAX was handed out (no
 * next epoch to stand in).
 */
CXS_API int cxs_loader_position(const cxs_loader *l, cxs_position *out);
/** Serve `epoch` next, from cxs_position_start(position, epoch): a reset
 * there (prefetched batches are discarded).  Returns as cxs_loader_reset. */
CXS_API int cxs_loader_set_epoch(cxs_loader *l, uint64_t epoch);
/**
 * Continue at a saved position: a reset at (p->epoch, p->next) after
 * checking p.  Returns 0, or CXS_E_INVALID with diag (may be NULL) saying
 * why: a version other than CXS_POSITION_VERSION, a position of another
 * kind of loader, reserved words not zero, next past the epoch.
 */
CXS_API int cxs_loader_seek(cxs_loader *l, const cxs_position *p, cxs_diag *diag);

/** As cxs_loader_position, of an utterance loader (next: this rank's batch). */
CXS_API int cxs_utt_loader_position(const cxs_utt_loader *l, cxs_position *out);
/** As cxs_loader_set_epoch. */
CXS_API int cxs_utt_loader_set_epoch(cxs_utt_loader *l, uint64_t epoch);
/** As cxs_loader_seek. */
CXS_API int cxs_utt_loader_seek(cxs_utt_loader *l, const cxs_position *p, cxs_diag *diag);

/** As cxs_loader_position, of a mixture loader (next: this rank's batch). */
CXS_API int cxs_mix_loader_position(const cxs_mix_loader *l, cxs_position *out);
/** As cxs_loader_set_epoch. */
CXS_API int cxs_mix_loader_set_epoch(cxs_mix_loader *l, uint64_t epoch);
/** As cxs_loader_seek. */
CXS_API int cxs_mix_loader_seek(cxs_mix_loader *l, const cxs_position *p, cxs_diag *diag);

/** As cxs_loader_position, of an utterance mixture loader (next: this
 * rank's batch). */
CXS_API int cxs_mix_utt_loader_position(const cxs_mix_utt_loader *l, cxs_position *out);
/** As cxs_loader_set_epoch. */
CXS_API int cxs_mix_utt_loader_set_epoch(cxs_mix_utt_loader *l, uint64_t epoch);
/** As cxs_loader_seek. */
CXS_API int cxs_mix_utt_loader_seek(cxs_mix_utt_loader *l, const cxs_position *p,
                                    cxs_diag *diag);

#ifdef __cplusplus
}
#endif
#endif /* CTXSHARD_H */
