/* ctxshard_import.h compiles alone (it includes ctxshard_writer.h), in C11
 * with -pedantic -Werror and, as header_import_cpp.cpp, in C++. */
#include "ctxshard_import.h"

int main(void) {
    cxs_kaldi_opts o;
    cxs_kaldi_opts_init(&o);
    cxs_import_info info;
    (void)info;
    return o.text == 0 && o.flags == 0 && o.parts == 0 ? 0 : 1;
}
