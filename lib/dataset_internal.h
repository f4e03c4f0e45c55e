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
    const uint8_t *index;
    const uint8_t *ids;
    const uint8_t *features;
    const uint8_t *labels;
} shard;

struct cxs_dataset {
    char *manifest_path;
    const uint8_t *mmap;
    uint64_t msize;
    cxs_container mc;
    cxs_dataset_meta meta;
    shard *shards;
    uint64_t *cum;        /* global first frame of every utterance, U+1 */
    uint32_t *utt_shard;  /* shard of every utterance */
    const uint8_t *vocab;
    const uint8_t *stats;
    uint64_t stats_len;
    const char *skipped;
    uint64_t skipped_len;
    size_t esize;
    uint64_t total_bytes;
};

#endif
