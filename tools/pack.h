/* pack.h - the packer and the raw-dataset checker. */
#ifndef CXS_TOOL_PACK_H
#define CXS_TOOL_PACK_H

#include <stdint.h>

typedef struct pack_opts {
    uint32_t dtype;
    uint32_t guard;
    uint64_t shard_size;
    unsigned threads;
    int skip_bad;        /* --on-error skip */
    uint32_t normalize;
    const char *vocab_path;
    int quiet;
} pack_opts;

#define DEFAULT_GUARD 64u
#define DEFAULT_SHARD_SIZE (1ull << 30)
#define MIN_SHARD_SIZE (16ull << 10)

/* Returns an exit code; prints its own messages. */
int pack_run(const char *raw, const char *out, const pack_opts *o);
int check_run(const char *raw, const char *vocab_path, unsigned threads, int quiet);

#endif
