/* gpu_cuda.cu - the GPU backend on the CUDA runtime: memory, streams,
 * events, copies, and the window-expansion kernel.  The loader's logic is
 * in gpu.c and its modes (gpu_internal.h); the arithmetic is gpu_expand.h, shared with the host emulation
 * that the CPU tests check against cxs_dataset_gather. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#include "ctxshard_gpu.h"
#include "gpu_backend.h"

static const char *cu_error_string(int err) { return cudaGetErrorString((cudaError_t)err); }

static int cu_last_error(void) { return (int)cudaGetLastError(); }
static int cu_set_device(int dev) { return (int)cudaSetDevice(dev); }
static int cu_get_device(int *dev) { return (int)cudaGetDevice(dev); }

static int cu_mem_info(uint64_t *free_bytes, uint64_t *total_bytes) {
    size_t f = 0, t = 0;
    cudaError_t e = cudaMemGetInfo(&f, &t);
    *free_bytes = f, *total_bytes = t;
    return (int)e;
}

static int cu_register_supported(int dev, int *yes) {
    int v = 0;
    cudaError_t e = cudaDeviceGetAttribute(&v, cudaDevAttrHostRegisterReadOnlySupported, dev);
    if (e != cudaSuccess) cudaGetLastError(); /* answered "no"; not a later launch's error */
    *yes = e == cudaSuccess && v;
    return (int)e;
}

static int cu_dev_alloc(void **p, size_t n) { return (int)cudaMalloc(p, n ? n : 1); }
/* A failure the caller ignores is cleared here, so that the error state a
 * later launch reads (cudaGetLastError) is that launch's own. */
static void cu_dev_free(void *p) {
    if (cudaFree(p) != cudaSuccess) cudaGetLastError();
}
static int cu_host_alloc(void **p, size_t n) {
    return (int)cudaHostAlloc(p, n ? n : 1, cudaHostAllocPortable);
}
static void cu_host_free(void *p) {
    if (cudaFreeHost(p) != cudaSuccess) cudaGetLastError();
}

static int cu_host_register(void *p, size_t n) {
    cudaError_t e = cudaHostRegister(p, n, cudaHostRegisterReadOnly | cudaHostRegisterPortable);
    if (e != cudaSuccess) cudaGetLastError(); /* not sticky: clear it, the caller falls back */
    return (int)e;
}
static void cu_host_unregister(void *p) {
    if (cudaHostUnregister(p) != cudaSuccess) cudaGetLastError();
}

static int cu_stream_create(void **s) {
    cudaStream_t st;
    cudaError_t e = cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
    if (e == cudaSuccess) *s = (void *)st;
    return (int)e;
}
static void cu_stream_destroy(void *s) {
    if (cudaStreamDestroy((cudaStream_t)s) != cudaSuccess) cudaGetLastError();
}

static int cu_event_create(void **ev, unsigned flags) {
    cudaEvent_t e;
    cudaError_t r = cudaEventCreateWithFlags(
        &e, cudaEventDisableTiming | (flags & GPU_EVENT_BLOCKING ? cudaEventBlockingSync : 0));
    if (r == cudaSuccess) *ev = (void *)e;
    return (int)r;
}
static void cu_event_destroy(void *e) {
    if (cudaEventDestroy((cudaEvent_t)e) != cudaSuccess) cudaGetLastError();
}
static int cu_event_record(void *e, void *s) {
    return (int)cudaEventRecord((cudaEvent_t)e, (cudaStream_t)s);
}
static int cu_stream_wait(void *s, void *e) {
    return (int)cudaStreamWaitEvent((cudaStream_t)s, (cudaEvent_t)e, 0);
}
static int cu_event_sync(void *e) { return (int)cudaEventSynchronize((cudaEvent_t)e); }
/* cudaStreamSynchronize spins or yields as the device's schedule flags
 * say, which are the application's to set: wait on a blocking event
 * recorded on the stream instead. */
static int cu_stream_sync(void *s) {
    cudaEvent_t e;
    cudaError_t r = cudaEventCreateWithFlags(&e, cudaEventDisableTiming | cudaEventBlockingSync);
    if (r != cudaSuccess) return (int)r;
    if ((r = cudaEventRecord(e, (cudaStream_t)s)) == cudaSuccess) r = cudaEventSynchronize(e);
    cu_event_destroy(e);
    return (int)r;
}
static int cu_copy_h2d(void *dst, const void *src, size_t n, void *s) {
    return (int)cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, (cudaStream_t)s);
}

static int cu_copy_d2h_sync(void *dst, const void *src, size_t n, void *s) {
    cudaError_t e = cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, (cudaStream_t)s);
    return e == cudaSuccess ? cu_stream_sync(s) : (int)e;
}

/* One block per sample (grid-stride), threads laid out (element d of a row,
 * row of the window): a warp reads and writes consecutive elements of one
 * row, so both sides coalesce; no division anywhere.  Thread (0,0) locates
 * the sample once for the block (POOL: from its descriptor, as pool mode and
 * stream mode over codes give it; the emulation's run_expand reads the same
 * fields, the header's number included). */
template <bool POOL, bool BF16>
__global__ void expand_kernel(gpu_expand_args a) {
    __shared__ uint64_t s_row0;
    __shared__ uint32_t s_T, s_t;
    __shared__ const uint8_t *s_h;
    const size_t W = (2 * (size_t)a.k + 1) * a.D;
    for (size_t i = blockIdx.x; i < a.n; i += gridDim.x) {
        if (threadIdx.x == 0 && threadIdx.y == 0) {
            int64_t label;
            s_h = NULL;
            if (POOL) {
                cxs_x_desc dsc = a.desc[i];
                s_row0 = dsc.row0, s_T = dsc.T, s_t = dsc.t;
                label = dsc.label;
                if (a.qh) s_h = a.qh + (uint64_t)dsc.utt * a.hbytes;
            } else {
                uint64_t f = a.frames[i], u = cxs_x_locate(a.cum, a.num_utts, f);
                s_row0 = a.urow[u];
                s_T = (uint32_t)(a.cum[u + 1] - a.cum[u]);
                s_t = (uint32_t)(f - a.cum[u]);
                label = a.lab ? (int64_t)a.lab[f] : 0;
                if (a.qh) s_h = a.qh + u * a.hbytes;
            }
            if (a.y) a.y[i] = label;
        }
        __syncthreads();
        const uint64_t row0 = s_row0;
        const uint32_t T = s_T, t = s_t;
        const uint8_t *h = s_h;
        for (uint32_t r = threadIdx.y; r <= 2 * a.k; r += blockDim.y)
            for (uint32_t d = threadIdx.x; d < a.D; d += blockDim.x) {
                float v = cxs_x_value(a.feat, a.dtype, a.D, row0, T, t, a.k, r, d, a.mean,
                                      a.scale, h);
                size_t j = i * W + (size_t)r * a.D + d;
                if (BF16)
                    ((uint16_t *)a.out)[j] = cxs_x_to_bf16(v);
                else
                    ((float *)a.out)[j] = v;
            }
        __syncthreads(); /* the shared sample is rewritten for the next i */
    }
}

static int cu_expand(const gpu_expand_args *a, void *s) {
    if (!a->n) return 0;
    /* 32 lanes along the row (fewer for narrow rows, so that the block's
     * threads are not mostly idle), the rest of 256 along the window. */
    unsigned bx = a->D >= 32 ? 32 : (a->D >= 16 ? 16 : 8), by = 256 / bx;
    if (by > 2 * a->k + 1) by = 2 * a->k + 1;
    dim3 block(bx, by);
    unsigned grid = a->n < (1u << 20) ? (unsigned)a->n : (1u << 20);
    cudaStream_t st = (cudaStream_t)s;
    if (a->desc) {
        if (a->out_bf16) expand_kernel<true, true><<<grid, block, 0, st>>>(*a);
        else expand_kernel<true, false><<<grid, block, 0, st>>>(*a);
    } else {
        if (a->out_bf16) expand_kernel<false, true><<<grid, block, 0, st>>>(*a);
        else expand_kernel<false, false><<<grid, block, 0, st>>>(*a);
    }
    /* the launch's own error: every call of this file whose failure is
     * ignored clears it where it happens (cu_dev_free ...) */
    return (int)cudaGetLastError();
}

/* Padded whole-utterance batches: one block per output row (utterance i,
 * frame t), grid-stride, threads along the row's D elements (coalesced on
 * both sides).  Rows past T are zeros and -100 labels. */
template <bool BF16>
__global__ void pad_kernel(gpu_pad_args a) {
    const size_t rows = a.n * a.tmax;
    for (size_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const size_t i = row / a.tmax;
        const uint32_t t = (uint32_t)(row - i * a.tmax);
        const cxs_x_utt u = a.utt[i];
        const uint8_t *h = a.qh ? a.qh + u.utt * a.hbytes : NULL;
        for (uint32_t d = threadIdx.x; d < a.D; d += blockDim.x) {
            float v = cxs_x_value(a.feat, a.dtype, a.D, u.row0, u.T, t, 0, 0, d, a.mean, a.scale,
                                  h);
            if (BF16)
                ((uint16_t *)a.out)[row * a.D + d] = cxs_x_to_bf16(v);
            else
                ((float *)a.out)[row * a.D + d] = v;
        }
        if (a.y && threadIdx.x == 0)
            a.y[row] = t < u.T ? (int64_t)a.lab[u.frame0 + t] : CXS_UTT_PAD_LABEL;
    }
}

static int cu_pad(const gpu_pad_args *a, void *s) {
    const size_t rows = a->n * a->tmax;
    if (!rows) return 0;
    unsigned bx = a->D >= 64 ? 128 : (a->D > 32 ? 64 : 32);
    unsigned grid = rows < (1u << 20) ? (unsigned)rows : (1u << 20);
    cudaStream_t st = (cudaStream_t)s;
    if (a->out_bf16) pad_kernel<true><<<grid, bx, 0, st>>>(*a);
    else pad_kernel<false><<<grid, bx, 0, st>>>(*a);
    return (int)cudaGetLastError();
}

extern "C" const gpu_backend cxs_gpu_cuda = {
    "CUDA",
    cu_error_string,
    cu_last_error,
    cu_set_device,
    cu_get_device,
    cu_mem_info,
    cu_register_supported,
    cu_dev_alloc,
    cu_dev_free,
    cu_host_alloc,
    cu_host_free,
    cu_host_register,
    cu_host_unregister,
    cu_stream_create,
    cu_stream_destroy,
    cu_event_create,
    cu_event_destroy,
    cu_event_record,
    cu_stream_wait,
    cu_event_sync,
    cu_stream_sync,
    cu_copy_h2d,
    cu_copy_d2h_sync,
    cu_expand,
    cu_pad,
};

extern "C" int cxs_gpu_cuda_probe(int dev, cxs_gpu_probe_info *info) {
    cudaRuntimeGetVersion(&info->runtime_version);
    cudaDriverGetVersion(&info->driver_version);
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess && info->driver_version == 0) {
        /* No libcuda at all: the runtime then reports an "insufficient
         * driver version", which sends people hunting for an upgrade. */
        cudaGetLastError();
        snprintf(info->reason, sizeof info->reason,
                 "no NVIDIA driver found (libcuda.so.1 cannot be loaded): install the NVIDIA "
                 "driver on a machine with a GPU, or read batches on the CPU");
        return CXS_E_UNSUPPORTED;
    }
    if (e == cudaErrorNoDevice || (e == cudaSuccess && n == 0)) {
        cudaGetLastError();
        snprintf(info->reason, sizeof info->reason,
                 "no NVIDIA GPU found (the driver is installed, but it sees no device; in a "
                 "container, pass the GPU through): read batches on the CPU");
        return CXS_E_UNSUPPORTED;
    }
    if (e == cudaErrorInsufficientDriver) {
        cudaGetLastError();
        /* the oldest Linux driver of the runtime's major version (minor
         * version compatibility: CUDA's release notes, table 3) */
        const int major = info->runtime_version / 1000;
        const char *need = major >= 13 ? "580.65.06" : major == 12 ? "525.60.13" : "450.80.02";
        snprintf(info->reason, sizeof info->reason,
                 "the NVIDIA driver (CUDA %d.%d) is older than the CUDA runtime this library "
                 "was built with (%d.%d), which needs driver %s or newer on Linux: update the "
                 "driver, or build with an older CUDA",
                 info->driver_version / 1000, info->driver_version % 1000 / 10,
                 info->runtime_version / 1000, info->runtime_version % 1000 / 10, need);
        return CXS_E_UNSUPPORTED;
    }
    if (e != cudaSuccess) {
        cudaGetLastError();
        snprintf(info->reason, sizeof info->reason, "no usable CUDA device: %s (%s)",
                 cudaGetErrorString(e), cudaGetErrorName(e));
        return e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver ||
                       e == cudaErrorNotSupported || e == cudaErrorSystemDriverMismatch
                   ? CXS_E_UNSUPPORTED
                   : CXS_E_DEVICE;
    }
    info->device_count = n;
    if (dev < 0 || dev >= n) {
        snprintf(info->reason, sizeof info->reason, "no CUDA device %d (%d present)", dev, n);
        return CXS_E_UNSUPPORTED;
    }
    cudaDeviceProp p;
    if ((e = cudaGetDeviceProperties(&p, dev)) != cudaSuccess || (e = cudaSetDevice(dev)) != cudaSuccess) {
        snprintf(info->reason, sizeof info->reason, "CUDA device %d: %s", dev, cudaGetErrorString(e));
        return CXS_E_DEVICE;
    }
    snprintf(info->name, sizeof info->name, "%s", p.name);
    info->compute_major = p.major, info->compute_minor = p.minor;
    int ro = 0;
    cu_register_supported(dev, &ro);
    info->register_read_only = ro;
    size_t f = 0, t = 0;
    if ((e = cudaMemGetInfo(&f, &t)) != cudaSuccess) {
        snprintf(info->reason, sizeof info->reason, "CUDA device %d: %s", dev, cudaGetErrorString(e));
        return CXS_E_DEVICE;
    }
    info->free_bytes = f, info->total_bytes = t;
    return 0;
}
