/* gpu_backend.h - the few device operations the GPU loader needs, behind a
 * table: gpu_cuda.cu implements them with the CUDA runtime, gpu_emu.c on
 * the host.  The loader's logic (gpu.c and its modes, gpu_internal.h) is
 * written once against this table, so the CPU test suites run all of it.
 * (Never installed.) */
#ifndef CXS_GPU_BACKEND_H
#define CXS_GPU_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "gpu_expand.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A window expansion launch: n samples into out[n][(2k+1)*D] (float32, or
 * bfloat16 bits when out_bf16), labels into y[n] when y is not NULL.
 * Resident: frames[n] are global frame numbers, located through cum[U+1]
 * and urow[U] (device row of every utterance's frame 0) and labels read
 * from lab (uint16 per global frame).  Pool and stream: desc[n] say it
 * all (feat: the pool, or the batch's uploaded rows). */
typedef struct gpu_expand_args {
    const void *feat;        /* device features, stored dtype */
    uint32_t dtype, D, k;
    int out_bf16;
    const double *mean, *scale; /* device, D each (spec 7.4 constants); NULL: none */
    /* a coded dtype: every utterance's header, hbytes each, in the
     * dataset's numbering (num_utts of them; every mode); NULL otherwise */
    const uint8_t *qh;
    uint64_t hbytes;
    size_t n;
    const uint64_t *frames;  /* resident */
    const uint64_t *cum, *urow;
    uint64_t num_utts;
    const uint16_t *lab;
    const cxs_x_desc *desc;  /* pool, stream */
    void *out;
    int64_t *y;
} gpu_expand_args;

/* A padded batch launch: n utterances into out[n][tmax][D] (float32, or
 * bfloat16 bits), rows past an utterance's T zero; y[n][tmax] (when not
 * NULL) their labels from lab (uint16 per global frame), -100 past T.
 * The values are cxs_x_value's with k = 0, so they are the CPU pad's. */
typedef struct gpu_pad_args {
    const void *feat;
    uint32_t dtype, D;
    int out_bf16;
    const double *mean, *scale;
    const uint8_t *qh; /* as gpu_expand_args's: utt[i].utt's header */
    uint64_t hbytes;
    size_t n;
    uint64_t tmax;
    const cxs_x_utt *utt;
    const uint16_t *lab;
    void *out;
    int64_t *y;
} gpu_pad_args;

#define GPU_EVENT_BLOCKING 1u

typedef struct gpu_backend {
    const char *name;
    /* Every int function returns 0 or a backend error code (> 0) that
     * error_string() names. */
    const char *(*error_string)(int err);
    /* Read and clear the calling thread's last error (cudaGetLastError):
     * every failed call sets it, and a launch reports its error only
     * through it, so the library clears it before each launch
     * (gpu_launch_expand): an earlier failure it ignored is not the
     * launch's. */
    int (*last_error)(void);
    int (*set_device)(int dev);
    int (*get_device)(int *dev); /* the calling thread's current device */
    int (*mem_info)(uint64_t *free_bytes, uint64_t *total_bytes);
    int (*register_supported)(int dev, int *yes);
    int (*dev_alloc)(void **p, size_t n);
    void (*dev_free)(void *p);
    int (*host_alloc)(void **p, size_t n); /* pinned */
    void (*host_free)(void *p);
    int (*host_register)(void *p, size_t n); /* read-only; may fail: fall back */
    void (*host_unregister)(void *p);
    int (*stream_create)(void **s);
    void (*stream_destroy)(void *s);
    /* flags GPU_EVENT_BLOCKING: a host wait on it sleeps (cudaEventBlockingSync)
     * rather than spin a core the CPU workers need */
    int (*event_create)(void **e, unsigned flags);
    void (*event_destroy)(void *e);
    int (*event_record)(void *e, void *s);
    int (*stream_wait)(void *s, void *e);
    int (*event_sync)(void *e);
    int (*stream_sync)(void *s);
    int (*copy_h2d)(void *dst, const void *src, size_t n, void *s);
    int (*copy_d2h_sync)(void *dst, const void *src, size_t n, void *s); /* waits */
    int (*expand)(const gpu_expand_args *a, void *s);
    int (*pad)(const gpu_pad_args *a, void *s);
} gpu_backend;

extern const gpu_backend cxs_gpu_emu;
#ifdef CXS_HAVE_CUDA
extern const gpu_backend cxs_gpu_cuda;
/* Fill in what the CUDA runtime says about `dev` (ctxshard_gpu.h). */
struct cxs_gpu_probe_info;
int cxs_gpu_cuda_probe(int dev, struct cxs_gpu_probe_info *info);
#endif

#ifdef __cplusplus
}
#endif
#endif
