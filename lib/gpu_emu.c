/* gpu_emu.c - the GPU backend run on the host (CXS_GPU_EMULATE): device
 * memory is host memory, streams and events are synchronous, the kernels
 * are loops over gpu_expand.h.  It lets the CPU test suites run the
 * loader's every mode end to end against cxs_dataset_gather. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctxshard.h"
#include "gpu_backend.h"

static const char *emu_error_string(int err) {
    return err == ENOMEM ? "out of (emulated device) memory" : "emulation error";
}

static int emu_set_device(int dev) { return 0; }

static int emu_mem_info(uint64_t *free_bytes, uint64_t *total_bytes) {
    long page = sysconf(_SC_PAGESIZE), total = sysconf(_SC_PHYS_PAGES),
         avail = sysconf(_SC_AVPHYS_PAGES);
    if (page <= 0 || total <= 0) page = 4096, total = 1l << 20;
    if (avail <= 0) avail = total;
    *free_bytes = (uint64_t)avail * (uint64_t)page;
    *total_bytes = (uint64_t)total * (uint64_t)page;
    return 0;
}

static int emu_register_supported(int dev, int *yes) {
    *yes = 1; /* registering is a no-op here, so the registered path runs */
    return 0;
}

static int emu_alloc(void **p, size_t n) {
    *p = malloc(n ? n : 1);
    return *p ? 0 : ENOMEM;
}

static void emu_free(void *p) { free(p); }

static int emu_register(void *p, size_t n) { return 0; }
static void emu_unregister(void *p) {}

/* Streams and events are distinct non-NULL tokens: the loader never looks
 * inside them. */
static int emu_token(void **s) {
    *s = malloc(1);
    return *s ? 0 : ENOMEM;
}

static int emu_record(void *e, void *s) { return 0; }
static int emu_wait(void *s, void *e) { return 0; }
static int emu_sync(void *e) { return 0; }

static int emu_copy(void *dst, const void *src, size_t n, void *s) {
    memcpy(dst, src, n);
    return 0;
}

static int emu_copy_back(void *dst, const void *src, size_t n, void *s) {
    memcpy(dst, src, n);
    return 0;
}

static int emu_expand(const gpu_expand_args *a, void *s) {
    const size_t W = (2 * (size_t)a->k + 1) * a->D;
    for (size_t i = 0; i < a->n; i++) {
        uint64_t row0;
        uint32_t T, t;
        int64_t label;
        if (a->desc) {
            row0 = a->desc[i].row0, T = a->desc[i].T, t = a->desc[i].t;
            label = a->desc[i].label;
        } else {
            uint64_t f = a->frames[i], u = cxs_x_locate(a->cum, a->num_utts, f);
            row0 = a->urow[u];
            T = (uint32_t)(a->cum[u + 1] - a->cum[u]);
            t = (uint32_t)(f - a->cum[u]);
            label = a->lab ? a->lab[f] : 0;
        }
        for (uint32_t r = 0; r <= 2 * a->k; r++)
            for (uint32_t d = 0; d < a->D; d++) {
                float v = cxs_x_value(a->feat, a->dtype, a->D, row0, T, t, a->k, r, d, a->mean,
                                      a->scale);
                size_t j = i * W + (size_t)r * a->D + d;
                if (a->out_bf16)
                    ((uint16_t *)a->out)[j] = cxs_x_to_bf16(v);
                else
                    ((float *)a->out)[j] = v;
            }
        if (a->y) a->y[i] = label;
    }
    return 0;
}

static int emu_pad(const gpu_pad_args *a, void *s) {
    for (size_t i = 0; i < a->n; i++) {
        const cxs_x_utt u = a->utt[i];
        for (uint64_t t = 0; t < a->tmax; t++) {
            const size_t row = i * a->tmax + t;
            for (uint32_t d = 0; d < a->D; d++) {
                float v = cxs_x_value(a->feat, a->dtype, a->D, u.row0, u.T, (uint32_t)t, 0, 0, d,
                                      a->mean, a->scale);
                if (a->out_bf16)
                    ((uint16_t *)a->out)[row * a->D + d] = cxs_x_to_bf16(v);
                else
                    ((float *)a->out)[row * a->D + d] = v;
            }
            if (a->y)
                a->y[row] = t < u.T ? (int64_t)a->lab[u.frame0 + t] : CXS_UTT_PAD_LABEL;
        }
    }
    return 0;
}

const gpu_backend cxs_gpu_emu = {
    "host emulation",
    emu_error_string,
    emu_set_device,
    emu_mem_info,
    emu_register_supported,
    emu_alloc,
    emu_free,
    emu_alloc,
    emu_free,
    emu_register,
    emu_unregister,
    emu_token,
    emu_free,
    emu_token,
    emu_free,
    emu_record,
    emu_wait,
    emu_sync,
    emu_sync,
    emu_copy,
    emu_copy_back,
    emu_expand,
    emu_pad,
};
