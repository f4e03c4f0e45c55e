/* ctxshard_import.h compiles alone as C++ (header_import.c: as C11). */
#include "ctxshard_import.h"

int main() {
    cxs_kaldi_opts o;
    cxs_kaldi_opts_init(&o);
    cxs_import_info info;
    (void)info;
    return o.text == nullptr && o.flags == 0 && o.parts == 0 ? 0 : 1;
}
