/* gpu_expand.h - the window-expansion arithmetic of the GPU path, written
 * once for both compilers: the CUDA kernels (gpu_cuda.cu) and the host
 * emulation (gpu_emu.c) include it, and the emulation is checked against
 * cxs_dataset_gather() frame by frame in the CPU test suites, so the index
 * math that runs on the device is the math the CPU tests exercise.
 * (Never installed.) */
#ifndef CXS_GPU_EXPAND_H
#define CXS_GPU_EXPAND_H

#include <stdint.h>

#ifdef __CUDACC__
#define CXS_HD __host__ __device__ __forceinline__
#else
#define CXS_HD static inline
#endif

/* Stored element types and output types, as in ctxshard.h / ctxshard_gpu.h. */
#define CXS_X_F32 1
#define CXS_X_F16 2
#define CXS_X_BF16 3
#define CXS_X_Q8 4  /* coded (format 1.4): decoded with the utterance's header */
#define CXS_X_Q16 5

/* One sample of a batch, as the pool and stream kernels receive it (the
 * resident kernel derives the same from a frame number): the device row of
 * the utterance's frame 0, the utterance length T, the frame's offset t,
 * its label (labels are at most 16 bits: spec section 5), and a coded
 * dtype's header number (the utterance's, in the dataset's numbering).
 * Stream mode uploads only the rows a batch's windows cover: its T and t
 * describe those rows as if they were the utterance, which zero-pads the
 * same window rows (a row outside them is outside the utterance too). */
typedef struct cxs_x_desc {
    uint64_t row0;
    uint32_t T;
    uint32_t t;
    uint32_t utt;
    int32_t label;
} cxs_x_desc;

/* One utterance of a padded batch (cxs_gpu_utt_loader): the device row
 * of its frame 0, its global frame number (labels), its length and its
 * number (a coded dtype's header). */
typedef struct cxs_x_utt {
    uint64_t row0;
    uint64_t frame0;
    uint32_t T;
    uint32_t utt;
} cxs_x_utt;

/* Largest u in [0, n) with cum[u] <= frame (cum ascending, cum[0] = 0,
 * frame < cum[n]): the utterance holding a global frame. */
CXS_HD uint64_t cxs_x_locate(const uint64_t *cum, uint64_t n, uint64_t frame) {
    uint64_t lo = 0, hi = n;
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (cum[mid] <= frame)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* The float32 of 32 bits, and the bits of a float32 (a union: memcpy is not
 * a device function everywhere). */
CXS_HD float cxs_x_f32_of(uint32_t bits) {
    union {
        uint32_t u;
        float f;
    } v;
    v.u = bits;
    return v.f;
}

CXS_HD uint32_t cxs_x_bits_of(float f) {
    union {
        float f;
        uint32_t u;
    } v;
    v.f = f;
    return v.u;
}

/* IEEE binary16 bits -> float32, exactly (subnormals, infinities, NaN). */
CXS_HD float cxs_x_f16(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ffu, bits;
    if (e == 0x1f) {
        bits = sign | 0x7f800000u | (m << 13);
    } else if (e) {
        bits = sign | ((e + 112u) << 23) | (m << 13);
    } else if (m) { /* subnormal: normalise */
        e = 113;
        while (!(m & 0x400u)) {
            m <<= 1;
            e--;
        }
        bits = sign | (e << 23) | ((m & 0x3ffu) << 13);
    } else {
        bits = sign;
    }
    return cxs_x_f32_of(bits);
}

CXS_HD float cxs_x_bf16(uint16_t h) { return cxs_x_f32_of((uint32_t)h << 16); }

/* float32 -> bfloat16 bits, round to nearest even; NaN stays a quiet NaN. */
CXS_HD uint16_t cxs_x_to_bf16(float f) {
    const uint32_t u = cxs_x_bits_of(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    uint32_t r = 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)((u + r) >> 16);
}

/* Stored element i of a little-endian feature buffer as float32.  (The GPU
 * path runs on little-endian hosts only; ctxshard_gpu.h says so.) */
CXS_HD float cxs_x_load(const void *feat, uint32_t dtype, uint64_t i) {
    if (dtype == CXS_X_F32) return ((const float *)feat)[i];
    uint16_t h = ((const uint16_t *)feat)[i];
    return dtype == CXS_X_F16 ? cxs_x_f16(h) : cxs_x_bf16(h);
}

/* Products and sums rounded as written: nvcc fuses a product and a sum
 * into one fused multiply-add unless told not to, which changes the last
 * bit, and a coded value must decode to the CPU's (and Kaldi's) bits.  On
 * the device the _rn intrinsics, which are never fused; on the host the
 * library's ISO C mode does not contract. */
#ifdef __CUDA_ARCH__
#define cxs_x_fmul __fmul_rn
#define cxs_x_fadd __fadd_rn
#define cxs_x_dmul __dmul_rn
#define cxs_x_dadd __dadd_rn
#else
#define cxs_x_fmul(a, b) ((a) * (b))
#define cxs_x_fadd(a, b) ((a) + (b))
#define cxs_x_dmul(a, b) ((a) * (b))
#define cxs_x_dadd(a, b) ((a) + (b))
#endif

CXS_HD uint32_t cxs_x_ld32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
CXS_HD float cxs_x_ld16f(const uint8_t *p) { return (float)(uint32_t)(p[0] | p[1] << 8); }

/* Element i, of column d, of a coded utterance whose header is h (spec
 * section 4.9; the codec's cxs_q_decode_rows, Kaldi's CopyToMat): q16,
 * min + v * inc with inc = (float)(range * (1.0 / 65535.0)); q8, the
 * column's percentiles p_k = min + range * 1.52590218966964e-05F * code_k
 * (float, left to right), then Kaldi's CharToFloat: the piece's float
 * slope times the code's offset in it (a float product), times 1/64.0,
 * 1/128.0 or 1/63.0 and plus the piece's base in double, rounded once to
 * float. */
CXS_HD float cxs_x_coded(const void *feat, uint32_t dtype, const uint8_t *h, uint64_t i,
                         uint32_t d) {
    const float min = cxs_x_f32_of(cxs_x_ld32(h)), range = cxs_x_f32_of(cxs_x_ld32(h + 4));
    if (dtype == CXS_X_Q16) {
        const float inc = (float)cxs_x_dmul((double)range, 1.0 / 65535.0);
        return cxs_x_fadd(min, cxs_x_fmul((float)((const uint16_t *)feat)[i], inc));
    }
    const uint8_t *pc = h + 8 + 8 * (uint64_t)d;
    const float step = cxs_x_fmul(range, 1.52590218966964e-05F);
    const float p0 = cxs_x_fadd(min, cxs_x_fmul(step, cxs_x_ld16f(pc)));
    const float p25 = cxs_x_fadd(min, cxs_x_fmul(step, cxs_x_ld16f(pc + 2)));
    const float p75 = cxs_x_fadd(min, cxs_x_fmul(step, cxs_x_ld16f(pc + 4)));
    const float p100 = cxs_x_fadd(min, cxs_x_fmul(step, cxs_x_ld16f(pc + 6)));
    const int32_t c = ((const uint8_t *)feat)[i];
    float b = p0, sl = p25 - p0;
    int32_t n = c;
    double m = 1.0 / 64.0;
    if (c > 64) b = p25, sl = p75 - p25, n = c - 64, m = 1.0 / 128.0;
    if (c > 192) b = p75, sl = p100 - p75, n = c - 192, m = 1.0 / 63.0;
    return (float)cxs_x_dadd((double)b, cxs_x_dmul((double)cxs_x_fmul(sl, (float)n), m));
}

/* Element (r, d) of the window of frame t of an utterance of T frames whose
 * frame 0 is device row row0: window row r (0 <= r <= 2k) is the
 * utterance's frame t - k + r, element d (< D) of it.  Frames outside
 * 0 .. T-1 are written as 0, never read, so a guard row is never served and
 * any k works, as in cxs_dataset_gather.  Real rows are normalised when
 * mean is given, as spec/format.md section 7.4 defines it: the float32
 * value widened to binary64, minus mean[d], times scale[d] (both binary64,
 * correctly rounded: no fused multiply-add can apply to (a - b) * c), then
 * rounded once to binary32 -- the operations of the CPU gather.  A coded
 * dtype's values are decoded first (h: the utterance's header; NULL for
 * the other dtypes), normalisation applying to the decoded values. */
CXS_HD float cxs_x_value(const void *feat, uint32_t dtype, uint32_t D, uint64_t row0,
                         uint32_t T, uint32_t t, uint32_t k, uint32_t r, uint32_t d,
                         const double *mean, const double *scale, const uint8_t *h) {
    int64_t src = (int64_t)t - (int64_t)k + (int64_t)r;
    if (src < 0 || src >= (int64_t)T) return 0.0f;
    const uint64_t i = (row0 + (uint64_t)src) * D + d;
    float x = h ? cxs_x_coded(feat, dtype, h, i, d) : cxs_x_load(feat, dtype, i);
    if (mean) x = (float)(((double)x - mean[d]) * scale[d]);
    return x;
}

#endif
