/* Fuzz target: arbitrary bytes as a Kaldi archive, imported with
 * cxs_import_kaldi (every object type's header and decoding, the archive
 * index); the first byte picks a bare archive or an scp naming offsets
 * into it, and whether the import skips bad utterances.  It must refuse
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
        /* an scp: offsets every 37 bytes, ids out of order */
        char scp[4096];
        size_t n = 0;
        for (unsigned i = 0; i < 8 && n + 600 < sizeof scp; i++)
            n += (size_t)snprintf(scp + n, sizeof scp - n, "u%u %s:%u\n", (7 * i) % 8, arkpath,
                                  i * 37u);
        const char *p = fuzz_write("in.scp", (const uint8_t *)scp, n);
        if (!p) return 0;
        snprintf(in, sizeof in, "%s", p);
    }
    snprintf(out, sizeof out, "%s/out", fuzz_dir());
    cxs_writer_opts wo;
    cxs_writer_opts_init(&wo);
    wo.on_error_skip = (mode >> 1) & 1;
    wo.guard = 2;
    cxs_diag d;
    cxs_import_kaldi(in, out, &wo, NULL, NULL, NULL, NULL, &d);
    return 0;
}
