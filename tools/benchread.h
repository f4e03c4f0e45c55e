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
    /* several datasets: a mixture */
    double weights[256]; /* --weights (CXS_MIX_MAX_SOURCES) */
    uint32_t nweights;   /* 0: natural shares */
    double temperature;  /* --temperature (0: none) */
    uint64_t epoch_size; /* --epoch-size (0: the sum) */
} bench_read_opts;
int bench_read_run(const char *dir, const bench_read_opts *o);
/* bench-read of a mixture of the n datasets dirs[] */
int bench_mix_run(int n, char **dirs, const bench_read_opts *o);
#endif
