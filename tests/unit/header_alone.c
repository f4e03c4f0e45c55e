/* The public header compiles alone, with -std=c11 -pedantic -Werror. */
#include "ctxshard.h"

int main(void) {
    cxs_diag d;
    d.message[0] = 0;
    return cxs_strerror(CXS_E_CORRUPT)[0] && !d.message[0] ? 0 : 1;
}
