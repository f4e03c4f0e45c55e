/* shardfd.h - descriptors of a dataset's shard files, opened at first
 * use, and what the block source does with them: let a byte range of a
 * shard go from the page cache (internal).  Each cxs_src (source.h) has
 * its own; the loaders reach them only through the block source. */
#ifndef CXS_SHARDFD_H
#define CXS_SHARDFD_H

#include <stdint.h>

#include "dataset_internal.h"

typedef struct cxs_shard_fds {
    const cxs_dataset *ds;
    int *fds;      /* per shard, -1 until opened (atomic: any thread may open) */
    uint64_t *fid; /* per shard: st_dev, st_ino of its fd (2 each) */
} cxs_shard_fds;

/* Room for ds's shards, none open.  0 or -ENOMEM (then free it). */
int cxs_shard_fds_init(cxs_shard_fds *f, const cxs_dataset *ds);
/* Close what was opened.  A zeroed struct is fine. */
void cxs_shard_fds_free(cxs_shard_fds *f);
/* In a forked child: keep only descriptors that still name their shard.
 * One a parent's thread opened while fork copied the process can be in
 * the copied memory and not in the copied table (the kernel copies the
 * table first): its number is then free, and the next open (ours, or the
 * program's) takes it for another file.  Not ours to close. */
void cxs_shard_fds_after_fork(cxs_shard_fds *f);
/* Shard s's descriptor, opened now if it is not yet; -1 when it cannot be. */
int cxs_shard_fd(cxs_shard_fds *f, uint32_t s);

/* Let bytes [off, off+len) of shard s go: out of this process's page
 * tables (MADV_DONTNEED) and out of the page cache (POSIX_FADV_DONTNEED),
 * whole pages only, since the edges may hold a neighbour's rows.  Advice:
 * a failure changes nothing but the memory the cache holds. */
void cxs_range_drop(cxs_shard_fds *f, uint32_t s, uint64_t off, uint64_t len);

/* Mark ds's FEATURES mappings MADV_RANDOM, for a loader that reads its
 * blocks ahead (WILLNEED) and lets them go behind: a fault on a page not
 * there yet must read that page, not the device's read-around
 * (megabytes), which would bring back blocks already let go and hold the
 * cache above its budget.  Advice. */
void cxs_features_random(const cxs_dataset *ds);

#endif
