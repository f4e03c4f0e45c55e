/* Fuzz target: the .npy parser and the feature decoder (every dtype,
 * byte order and order, conversion to each stored type). */
#include <string.h>

#include "npy_raw.h"
#include "cxs_npy.h"
#include "ctxshard.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cxs_npy h;
    cxs_diag d;
    (void)cxs_npy_parse(data, size, &h, &d);
    static const uint32_t dtypes[3] = {CXS_DTYPE_F32, CXS_DTYPE_F16, CXS_DTYPE_BF16};
    utt u;
    memset(&u, 0, sizeof u);
    /* the fill of non-finite values (--fill-nonfinite) too */
    conv_opts o = {dtypes[size % 3], (uint32_t)(size / 3 % 2), NULL, 0, (int)(size / 6 % 2)};
    (void)features_decode(&u, data, size, &o, "fuzz.npy", &d);
    utt_free(&u);
    return 0;
}
