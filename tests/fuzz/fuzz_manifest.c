/* Fuzz target: a dataset directory from arbitrary bytes: the first four
 * bytes give the manifest's length, the manifest follows, the rest is
 * shard 0.  Opened as a directory, then read every way. */
#include <stdio.h>

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 4) return 0;
    size_t m = (size_t)data[0] | (size_t)data[1] << 8 | (size_t)data[2] << 16 |
               (size_t)data[3] << 24;
    if (m > size - 4) m = size - 4;
    if (!fuzz_write("manifest.cxs", data + 4, m)) return 0;
    if (!fuzz_write("shard-000000.cxs", data + 4 + m, size - 4 - m)) return 0;
    cxs_dataset *ds;
    cxs_diag d;
    if (cxs_dataset_open(fuzz_dir(), &ds, &d) == 0) {
        fuzz_exercise(ds);
        cxs_dataset_close(ds);
    }
    return 0;
}
