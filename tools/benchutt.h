#ifndef CXS_TOOL_BENCHUTT_H
#define CXS_TOOL_BENCHUTT_H
#include <stdint.h>
typedef struct bench_utt_opts {
    uint64_t frame_budget; /* required */
    uint32_t threads, buckets; /* buckets 0: the library's choice */
    uint64_t batches;      /* 0: one epoch */
    uint64_t seed;
    uint64_t memory;       /* block mode's budget, 0: off */
    uint32_t blocks;
    int json;
} bench_utt_opts;
int bench_utt_run(const char *dir, const bench_utt_opts *o);
#endif
