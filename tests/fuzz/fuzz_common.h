/* fuzz_common.h - shared by the fuzz targets: a scratch directory, writing
 * a file, and exercising everything a reader does with an open dataset. */
#ifndef CXS_FUZZ_COMMON_H
#define CXS_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "ctxshard.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A per-process scratch directory (on /dev/shm when there is one). */
const char *fuzz_dir(void);
/* Write bytes to dir/name; returns the path (static buffer) or NULL. */
const char *fuzz_write(const char *name, const uint8_t *data, size_t size);
/* Open nothing; use an open dataset the way training and tools do. */
void fuzz_exercise(cxs_dataset *ds);

#endif
