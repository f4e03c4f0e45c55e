/* ctxshard_writer.h compiles alone in C++ (and as header_writer.c in C11):
 * extern "C", no C-only constructs. */
#include "ctxshard_writer.h"

int main(void) {
    cxs_writer_opts o;
    cxs_writer_opts_init(&o);
    cxs_writer_utt u = {};
    cxs_writer_info info;
    (void)u;
    (void)info;
    cxs_writer_abort(nullptr);
    return o.dtype == CXS_DTYPE_F32 && o.guard == CXS_WRITER_DEFAULT_GUARD ? 0 : 1;
}
