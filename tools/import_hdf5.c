/* import_hdf5.c - `ctxshard import hdf5 FILE.h5 OUT`: the library's HDF5
 * importer (lib/import/hdf5_import.c, through ctxshard_import.h) with pack's
 * options; features only. */
#include <stdio.h>

#include "ctxshard_import.h"
#include "import.h"
#include "util.h"

int import_hdf5_run(const char *in, const char *out, const pack_opts *o) {
    cxs_writer_opts wo;
    import_writer_opts(o, &wo);
    import_state st = {{0}, o->quiet};
    cxs_import_info info;
    cxs_diag d = {0};
    install_signal_flag();
    progress_init(&st.bar, "import", o->quiet);
    double t0 = now_seconds();
    int rc = cxs_import_hdf5(in, out, &wo, import_note, &st, import_progress, &st, &info, &d);
    progress_done(&st.bar);
    if (rc) return import_failed(rc, out, &d);
    if (!o->quiet) {
        import_summary(&info, out, o, now_seconds() - t0);
        printf("  features only\n");
    }
    return 0;
}
