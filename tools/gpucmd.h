#ifndef CXS_TOOL_GPUCMD_H
#define CXS_TOOL_GPUCMD_H
#include <stdint.h>
typedef struct gpu_cmd_opts {
    int32_t device;     /* or CXS_GPU_EMULATE */
    uint32_t mode;      /* CXS_GPU_* */
    uint32_t k, batch, threads, normalize, bf16, check, json;
    uint64_t batches;   /* 0: one epoch */
    uint64_t budget;    /* 0: the library's default */
    uint64_t seed;
} gpu_cmd_opts;
/* `ctxshard gpu [OUT]`: the probe, and with OUT a run of the GPU loader. */
int gpu_cmd_run(const char *dir, const gpu_cmd_opts *o);
#endif
