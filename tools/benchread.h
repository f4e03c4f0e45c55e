#ifndef CXS_TOOL_BENCHREAD_H
#define CXS_TOOL_BENCHREAD_H
#include <stdint.h>
typedef struct bench_read_opts {
    uint32_t k, batch, threads, sampler;
    uint64_t batches, seed;
    uint64_t memory; /* block sampler's budget */
    uint32_t blocks; /* block sampler: blocks drawn from at once (0: the default, 8) */
    int order_stats; /* --order-stats: how random each order is, no reading */
    uint64_t hugepages; /* --hugepages: cxs_open_opts.hugepage_budget (0: none) */
    int no_stream;      /* --no-stream: a URL is fetched whole even in block order */
} bench_read_opts;
int bench_read_run(const char *dir, const bench_read_opts *o);
#endif
