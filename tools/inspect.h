#ifndef CXS_TOOL_INSPECT_H
#define CXS_TOOL_INSPECT_H
#include <stddef.h>
#include <stdint.h>
int verify_run(const char *dir, int quiet);
int info_run(const char *dir, int json);
int gather_run(const char *dir, uint32_t k, const uint64_t *frames, size_t n, int all,
               const char *out, const char *labels_out, int normalize, const char *stats_from,
               unsigned threads);
#endif
