/* Fuzz target: the transcript decoders.  The first two bytes choose the
 * number of frames a per-frame transcript must match (low 12 bits) and the
 * decoder (bit 15: a label sequence, --transcripts sequence; bit 14: per
 * frame and the sequence of its runs, --transcripts both); the rest is the
 * .npy file. */
#include <string.h>

#include "ctxshard_import.h"
#include "npy_raw.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static vocab v;
    static int ready;
    if (!ready) {
        uint32_t n;
        const char *const *sym = cxs_phonemes(&n);
        cxs_diag d;
        vocab_symbols(&v, sym, n, &d);
        ready = 1;
    }
    if (size < 2) return 0;
    utt u;
    memset(&u, 0, sizeof u);
    u.T = (uint64_t)(data[0] | (data[1] << 8)) % 4096 + 1;
    cxs_diag d;
    if (data[1] & 0x80)
        (void)sequence_decode(&u, data + 2, size - 2, &v, "fuzz.npy", &d);
    else if (transcript_decode(&u, data + 2, size - 2, &v, "fuzz.npy", "fuzz-mfcc.npy", &d) == 0 &&
             (data[1] & 0x40))
        (void)sequence_from_frames(&u, &v);
    utt_free(&u);
    return 0;
}
