/* dataset_internal.h - the open dataset, shared by the library's own
 * sources (never installed). */
#ifndef CXS_DATASET_INTERNAL_H
#define CXS_DATASET_INTERNAL_H

#include <stdint.h>
#include <stdlib.h>

#include "ctxshard.h"
#include "cxs_format.h"

typedef struct shard {
    char *path;
    const uint8_t *map;
    uint64_t size;
    cxs_container c;
    cxs_shard_meta meta;
    uint64_t u_start, f_start; /* first utterance and frame, dataset numbering */
    const uint8_t *index;
    const uint8_t *ids;
    const uint8_t *features;
    const uint8_t *labels;
} shard;

/* The frame -> utterance lookup jumps to a bucket of 2^CXS_BUCKET_SHIFT
 * frames first, then searches the few utterances that meet the bucket. */
#define CXS_BUCKET_SHIFT 12

struct cxs_dataset {
    char *manifest_path;  /* or the shard's path when single_shard */
    int single_shard;
    const uint8_t *mmap;  /* manifest */
    uint64_t msize;
    cxs_container mc;
    cxs_dataset_meta meta;
    shard *shards;
    uint64_t *cum;        /* first frame of every utterance, U+1 entries */
    uint32_t *utt_shard;  /* shard of every utterance */
    uint64_t *row;        /* FEATURES row of every utterance's frame 0 */
    uint32_t *bucket;     /* first utterance meeting each bucket of frames */
    const uint8_t *vocab;
    const uint8_t *stats; /* NULL for a single shard */
    const char *skipped;
    uint64_t skipped_len;
    size_t esize;
    uint64_t total_bytes;
    uint64_t min_len, max_len;
    float *norm_mean, *norm_scale; /* dim each, from the statistics; NULL without */
};

/* Utterance holding frame (< num_frames). */
static inline uint64_t cxs_find_utt(const cxs_dataset *ds, uint64_t frame) {
    uint64_t b = frame >> CXS_BUCKET_SHIFT;
    uint64_t lo = ds->bucket[b], hi = ds->bucket[b + 1] + 1;
    if (hi > ds->meta.num_utterances) hi = ds->meta.num_utterances;
    /* Largest u in [lo, hi) with cum[u] <= frame. */
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (ds->cum[mid] <= frame) lo = mid;
        else hi = mid;
    }
    return lo;
}

/* First byte of FEATURES row t (may be negative, into the guard) of
 * utterance u. */
static inline const uint8_t *cxs_row_ptr(const cxs_dataset *ds, uint64_t u, int64_t t) {
    const shard *sh = &ds->shards[ds->utt_shard[u]];
    return sh->features + (uint64_t)((int64_t)ds->row[u] + t) * ds->meta.dim * ds->esize;
}

#endif
