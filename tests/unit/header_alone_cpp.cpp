/* The public header compiles alone, with -std=c11 -pedantic -Werror. */
#include "ctxshard_gpu.h" /* includes ctxshard.h */

int main(void) {
    cxs_diag d;
    d.message[0] = 0;
    cxs_gpu_probe_info pi;
    if (cxs_gpu_probe(CXS_GPU_EMULATE, &pi) != 0 || !pi.usable) return 1;
    return cxs_strerror(CXS_E_CORRUPT)[0] && !d.message[0] ? 0 : 1;
}
