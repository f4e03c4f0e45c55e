#ifndef CXS_TOOL_SYNTH_H
#define CXS_TOOL_SYNTH_H
#include <stdint.h>
typedef struct synth_opts {
    uint64_t utts;
    uint64_t offset; /* first utterance index: another split with the same phoneme model */
    uint32_t dim;
    uint64_t seed;
    int f64;
    int transcripts; /* 0 none, 1 frames ([SOS], one per frame, [EOS]), 2 sequence */
    int quiet;
} synth_opts;
int synth_run(const char *root, const synth_opts *o);
#endif
