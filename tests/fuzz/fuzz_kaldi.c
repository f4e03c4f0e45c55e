/* Fuzz target: arbitrary bytes as a Kaldi archive, imported with
 * cxs_import_kaldi (every object type's header and decoding, the archive
 * index, text-form matrices); the first byte picks a bare archive or an
 * scp naming offsets into it (with ranges or not), whether the import
 * skips bad utterances, and its threads and dtype.  It must refuse
 * or succeed, never read out of bounds. */
#include <stdio.h>
#include <string.h>

#include "ctxshard_import.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const uint8_t mode = data[0];
    const char *ark = fuzz_write("in.ark", data + 1, size - 1);
    if (!ark) return 0;
    char arkpath[512], in[512], out[512];
    snprintf(arkpath, sizeof arkpath, "%s", ark);
    snprintf(in, sizeof in, "%s", ark);
    if (mode & 1) {
        /* an scp: offsets every 37 bytes, ids out of order; with bit 2
         * each entry takes a row (and column) range from the mode's and
         * the data's bytes */
        char scp[4096];
        size_t n = 0;
        for (unsigned i = 0; i < 8 && n + 600 < sizeof scp; i++) {
            n += (size_t)snprintf(scp + n, sizeof scp - n, "u%u %s:%u", (7 * i) % 8, arkpath,
                                  i * 37u);
            if (mode & 4) {
                const unsigned r0 = size > 1 + i ? data[1 + i] % 8 : 0, r1 = r0 + (mode >> 4) % 8;
                if (i & 1)
                    n += (size_t)snprintf(scp + n, sizeof scp - n, "[%u:%u,%u:%u]", r0, r1, i % 3,
                                          i % 3 + (mode >> 3) % 4);
                else
                    n += (size_t)snprintf(scp + n, sizeof scp - n, "[%u:%u]", r0, r1);
            }
            n += (size_t)snprintf(scp + n, sizeof scp - n, "\n");
        }
        const char *p = fuzz_write("in.scp", (const uint8_t *)scp, n);
        if (!p) return 0;
        snprintf(in, sizeof in, "%s", p);
    }
    snprintf(out, sizeof out, "%s/out", fuzz_dir());
    cxs_writer_opts wo;
    cxs_writer_opts_init(&wo);
    wo.on_error_skip = (mode >> 1) & 1;
    wo.guard = 2;
    /* bit 7: the reader threads and float16 (their conversion) */
    wo.threads = mode & 0x80 ? 3 : 1;
    wo.dtype = mode & 0x80 ? CXS_DTYPE_F16 : CXS_DTYPE_F32;
    cxs_diag d;
    cxs_import_kaldi(in, out, &wo, NULL, NULL, NULL, NULL, &d);
    return 0;
}
