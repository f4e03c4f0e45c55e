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
    /* several datasets: a mixture */
    const double *weights; /* nweights of them, or NULL: natural shares */
    uint32_t nweights;
    double temperature;    /* 0: none */
    uint64_t epoch_size;   /* utterances, 0: the sum */
    uint32_t stratify;     /* CXS_MIX_STRATIFY_* */
} bench_utt_opts;
int bench_utt_run(const char *dir, const bench_utt_opts *o);
/* bench-utt of a mixture of the n datasets dirs[] */
int bench_utt_mix_run(int n, char **dirs, const bench_utt_opts *o);
#endif
