/* ctxshard_writer.h compiles alone (it includes ctxshard.h), in C11 with
 * -pedantic -Werror and, as header_writer.cpp, in C++. */
#include "ctxshard_writer.h"

int main(void) {
    cxs_writer_opts o;
    cxs_writer_opts_init(&o);
    cxs_writer_utt u = {0};
    cxs_writer_info info;
    (void)u;
    (void)info;
    cxs_writer_abort(0);
    return o.dtype == CXS_DTYPE_F32 && o.guard == CXS_WRITER_DEFAULT_GUARD ? 0 : 1;
}
