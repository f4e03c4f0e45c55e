/* Fuzz target: a shard file opened alone from arbitrary bytes, then read
 * every way the library offers. */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_write("shard-000000.cxs", data, size);
    if (!path) return 0;
    cxs_dataset *ds;
    cxs_diag d;
    if (cxs_dataset_open(path, &ds, &d) == 0) {
        fuzz_exercise(ds);
        cxs_dataset_close(ds);
    }
    return 0;
}
