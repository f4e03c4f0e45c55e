/* Fuzz target: the transcript decoder.  The first two bytes choose the
 * number of frames the transcript must match; the rest is the .npy file. */
#include <string.h>

#include "../../tools/raw.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static vocab v;
    static int ready;
    if (!ready) {
        vocab_default(&v);
        ready = 1;
    }
    if (size < 2) return 0;
    utt u;
    memset(&u, 0, sizeof u);
    u.T = (uint64_t)(data[0] | (data[1] << 8)) % 4096 + 1;
    char why[512];
    (void)transcript_decode(&u, data + 2, size - 2, &v, "fuzz.npy", "fuzz-mfcc.npy", why,
                            sizeof why);
    utt_free(&u);
    return 0;
}
