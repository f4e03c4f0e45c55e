/* cxs_features.c - features into their stored form (cxs_features.h). */
#include "cxs_features.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cxs_convert.h"
#include "cxs_format.h"
#include "cxs_le.h"
#include "cxs_qcodec.h"

#define ST_F32 CXS_DTYPE_F32
#define ST_F16 CXS_DTYPE_F16
#define NORM_NONE CXS_NORM_NONE

size_t cxs_in_size(uint32_t type) {
    switch (type) {
    case CXS_IN_F32: return 4;
    case CXS_IN_F16:
    case CXS_IN_BF16: return 2;
    case CXS_IN_F64: return 8;
    default: return 0;
    }
}

static double load_elem(const uint8_t *p, uint32_t type, int be) {
    if (type == CXS_IN_F32) {
        uint32_t b = be ? __builtin_bswap32(cxs_ld32(p)) : cxs_ld32(p);
        float f;
        memcpy(&f, &b, 4);
        return f;
    }
    if (type == CXS_IN_F64) {
        uint64_t b = be ? __builtin_bswap64(cxs_ld64(p)) : cxs_ld64(p);
        double dd;
        memcpy(&dd, &b, 8);
        return dd;
    }
    uint16_t h = be ? __builtin_bswap16(cxs_ld16(p)) : cxs_ld16(p);
    return type == CXS_IN_F16 ? cxs_f16_to_f32(h) : cxs_bf16_to_f32(h);
}

static void store_elem(uint8_t *dst, uint32_t dtype, double x, double *stored) {
    if (dtype == ST_F32) {
        float f = cxs_to_f32(x);
        uint32_t b;
        memcpy(&b, &f, 4);
        cxs_st32(dst, b);
        *stored = f;
    } else if (dtype == ST_F16) {
        uint16_t h = cxs_to_f16(x);
        cxs_st16(dst, h);
        *stored = cxs_f16_to_f32(h);
    } else {
        uint16_t h = cxs_to_bf16(x);
        cxs_st16(dst, h);
        *stored = cxs_bf16_to_f32(h);
    }
}

/* One row of stored float16 (bfloat16) values added to the sums. */
static uint32_t row_sums_f16(const uint16_t *restrict h, uint64_t D, double *restrict sum,
                             double *restrict sumsq) {
    uint32_t special = 0;
    for (uint64_t d = 0; d < D; d++) {
        special |= (uint32_t)((h[d] & 0x7c00u) == 0x7c00u);
        const double v = cxs_f16_finite_to_f32(h[d]);
        sum[d] += v;
        sumsq[d] += v * v;
    }
    return special;
}

static uint32_t row_sums_bf16(const uint16_t *restrict h, uint64_t D, double *restrict sum,
                              double *restrict sumsq) {
    uint32_t special = 0;
    for (uint64_t d = 0; d < D; d++) {
        special |= (uint32_t)((h[d] & 0x7f80u) == 0x7f80u);
        const double v = cxs_bf16_to_f32(h[d]);
        sum[d] += v;
        sumsq[d] += v * v;
    }
    return special;
}

/* One row of float32 bits into float16 (bfloat16), its stored values
 * added to the sums in the generic pass's order (each dimension's own
 * sum, row after row); written without branches so that the compiler
 * vectorises it.  Non-zero when a value is NaN or infinite or overflows. */
static uint32_t row_to_f16(const uint32_t *restrict in, uint16_t *restrict out, uint64_t D,
                           double *restrict sum, double *restrict sumsq) {
    uint32_t special = 0;
    for (uint64_t d = 0; d < D; d++) {
        const uint32_t b = in[d];
        const uint16_t h = cxs_f32_bits_to_f16(b);
        special |= (uint32_t)((b & 0x7f800000u) == 0x7f800000u) | (uint32_t)((h & 0x7c00u) == 0x7c00u);
        out[d] = h;
    }
    return special | row_sums_f16(out, D, sum, sumsq);
}

static uint32_t row_to_bf16(const uint32_t *restrict in, uint16_t *restrict out, uint64_t D,
                            double *restrict sum, double *restrict sumsq) {
    uint32_t special = 0;
    for (uint64_t d = 0; d < D; d++) {
        const uint32_t b = in[d];
        const uint16_t h = cxs_f32_bits_to_bf16(b);
        special |= (uint32_t)((b & 0x7f800000u) == 0x7f800000u) | (uint32_t)((h & 0x7f80u) == 0x7f80u);
        out[d] = h;
    }
    return special | row_sums_bf16(out, D, sum, sumsq);
}

/* One row of float32 values added to the sums (the float32 path). */
static uint32_t row_sums_f32(const float *restrict f, uint64_t D, double *restrict sum,
                             double *restrict sumsq) {
    uint32_t special = 0;
    for (uint64_t d = 0; d < D; d++) {
        uint32_t b;
        memcpy(&b, f + d, 4);
        special |= (uint32_t)((b & 0x7f800000u) == 0x7f800000u);
        const double x = f[d];
        sum[d] += x;
        sumsq[d] += x * x;
    }
    return special;
}

/* The sums of a coded utterance (header, then codes): of its decoded
 * values, row by row as the float32 path sums them.  f: T*D floats of
 * scratch for q16, D for q8.  q8 decodes through each column's 256
 * values, computed once, a row at a time into f, summed while it is in
 * the L1 cache (an importer's writer thread does this for every
 * utterance: the arithmetic per value, or a pass through a decoded copy
 * of the utterance, would cost more than the rest of its work). */
static int coded_sums(uint32_t dtype, const uint8_t *hc, uint64_t T, uint64_t D, float *f,
                      double *sum, double *sumsq) {
    const uint8_t *codes = hc + cxs_q_header_size(dtype, D);
    memset(sum, 0, D * sizeof(double));
    memset(sumsq, 0, D * sizeof(double));
    if (dtype == CXS_DTYPE_Q8) {
        float(*tab)[256] = malloc(D * sizeof *tab);
        cxs_q8_col *cols = malloc(D * sizeof *cols);
        if (!tab || !cols) {
            free(tab);
            free(cols);
            return -ENOMEM;
        }
        cxs_q8_prepare(hc, D, cols);
        for (uint64_t d = 0; d < D; d++) cxs_q8_table(&cols[d], tab[d]);
        for (uint64_t t = 0; t < T; t++) {
            const uint8_t *c = codes + t * D;
            for (uint64_t d = 0; d < D; d++) f[d] = tab[d][c[d]];
            row_sums_f32(f, D, sum, sumsq);
        }
        free(tab);
        free(cols);
        return 0;
    }
    cxs_q_decode_rows(dtype, hc, D, codes, T, f);
    for (uint64_t t = 0; t < T; t++) row_sums_f32(f + t * D, D, sum, sumsq);
    return 0;
}

int cxs_features_coded(uint32_t dtype, const uint8_t *src, uint64_t T, uint64_t D, uint8_t *dst,
                       double *sum, double *sumsq, cxs_diag *dg) {
    char why[160];
    if (cxs_q_header_check(dtype, src, D, why, sizeof why))
        return cxs_diagf(dg, CXS_E_INPUT, "%s header: %s", cxs_dtype_name(dtype), why);
    float *f = malloc((dtype == CXS_DTYPE_Q8 ? 1 : T) * D * sizeof *f);
    if (!f) return cxs_diagf(dg, -ENOMEM, "out of memory");
    memcpy(dst, src, cxs_q_header_size(dtype, D) + T * D * cxs_dtype_size(dtype));
    const int rc = coded_sums(dtype, dst, T, D, f, sum, sumsq);
    free(f);
    return rc ? cxs_diagf(dg, rc, "out of memory") : 0;
}

/* A coded dtype: the float32 conversion (normalised when asked) into
 * scratch, encoded into dst (header, codes), summed from what decodes. */
static int convert_coded(const cxs_fsrc *s, uint32_t dtype, uint32_t normalize, uint32_t flags,
                         uint8_t *dst, double *sum, double *sumsq, double *tmp, uint64_t *filled,
                         cxs_diag *dg) {
    const uint64_t T = s->T, D = s->D;
    float *f = malloc(T * D * sizeof *f);
    if (!f) return cxs_diagf(dg, -ENOMEM, "out of memory");
    int rc = cxs_features_convert(s, ST_F32, normalize, flags, (uint8_t *)f, sum, sumsq, tmp,
                                  filled, dg);
    if (!rc && !cxs_host_is_le())
        for (uint64_t i = 0; i < T * D; i++) {
            const uint32_t b = cxs_ld32((const uint8_t *)(f + i));
            memcpy(f + i, &b, 4);
        }
    const char *why = NULL;
    if (!rc && (rc = cxs_q_encode(dtype, f, T, D, D, dst, dst + cxs_q_header_size(dtype, D), &why)))
        rc = rc == -ENOMEM ? cxs_diagf(dg, rc, "out of memory")
                           : cxs_diagf(dg, CXS_E_INPUT, "cannot be stored as %s: %s",
                                       cxs_dtype_name(dtype), why ? why : "bad arguments");
    if (!rc && (rc = coded_sums(dtype, dst, T, D, f, sum, sumsq)))
        rc = cxs_diagf(dg, rc, "out of memory");
    free(f);
    return rc;
}

int cxs_features_convert(const cxs_fsrc *s, uint32_t dtype, uint32_t normalize, uint32_t flags,
                         uint8_t *dst, double *sum, double *sumsq, double *tmp, uint64_t *filled,
                         cxs_diag *dg) {
    if (cxs_dtype_coded(dtype))
        return convert_coded(s, dtype, normalize, flags, dst, sum, sumsq, tmp, filled, dg);
    const int fill = (flags & CXS_FEAT_FILL_NONFINITE) != 0;
    uint64_t nfilled = 0;
    if (filled) *filled = 0;
    const uint64_t T = s->T, D = s->D;
    const size_t es = dtype == ST_F32 ? 4 : 2;
    const int be = s->big_endian && cxs_in_size(s->type) > 1;
    const uint8_t *src = s->data;
    const int64_t rs = s->row_stride, cs = s->col_stride;
    double *mean = tmp, *scale = tmp + D;
    memset(sum, 0, D * sizeof(double));
    memset(sumsq, 0, D * sizeof(double));
    if (normalize == NORM_NONE && dtype == ST_F32 && s->type == CXS_IN_F32 && !be &&
        cs == 4 && rs == (int64_t)(4 * D) && cxs_host_is_le()) {
        /* The common case, float32 in and out: one copy, then one pass that
         * sums and looks for an all-ones exponent (NaN or infinity). */
        memcpy(dst, src, T * D * 4);
        const float *f = (const float *)(const void *)dst;
        uint32_t special = 0;
        for (uint64_t t = 0; t < T; t++) special |= row_sums_f32(f + t * D, D, sum, sumsq);
        if (!special) return 0;
        /* Rare: fall through to the generic pass, which names the place. */
        memset(sum, 0, D * sizeof(double));
        memset(sumsq, 0, D * sizeof(double));
    }
    if (normalize == NORM_NONE && dtype != ST_F32 && s->type == CXS_IN_F32 && !be && cs == 4 &&
        rs == (int64_t)(4 * D) && cxs_host_is_le()) {
        /* float32 into float16 or bfloat16, the other common case: the
         * rounding done on the float's bits (the same results as
         * cxs_round_bits from the double, which holds the float exactly:
         * tests/unit/test_convert.c checks every float), summed as the
         * generic pass sums.  A NaN, an infinity or an overflow falls
         * through to the generic pass, which names it. */
        const uint32_t *in = (const uint32_t *)(const void *)src;
        uint16_t *out = (uint16_t *)(void *)dst;
        uint32_t special = 0;
        for (uint64_t t = 0; t < T; t++)
            special |= dtype == ST_F16 ? row_to_f16(in + t * D, out + t * D, D, sum, sumsq)
                                       : row_to_bf16(in + t * D, out + t * D, D, sum, sumsq);
        if (!special) return 0;
        memset(sum, 0, D * sizeof(double));
        memset(sumsq, 0, D * sizeof(double));
    }
    if (normalize == NORM_NONE && dtype != ST_F32 && s->type == dtype && !be && cs == 2 &&
        rs == (int64_t)(2 * D) && cxs_host_is_le()) {
        /* float16 or bfloat16 already in the stored type (an importer's
         * reader threads converted it): one copy and the sums */
        memcpy(dst, src, T * D * 2);
        const uint16_t *h = (const uint16_t *)(const void *)dst;
        uint32_t special = 0;
        for (uint64_t t = 0; t < T; t++)
            special |= dtype == ST_F16 ? row_sums_f16(h + t * D, D, sum, sumsq)
                                       : row_sums_bf16(h + t * D, D, sum, sumsq);
        if (!special) return 0;
        memset(sum, 0, D * sizeof(double));
        memset(sumsq, 0, D * sizeof(double));
    }
    for (uint64_t d = 0; d < D; d++) {
        mean[d] = 0;
        scale[d] = 1;
    }
#define AT(t, d) (src + (int64_t)(t) * rs + (int64_t)(d) * cs)
    for (uint64_t t = 0; t < T; t++)
        for (uint64_t d = 0; d < D; d++) {
            double x = load_elem(AT(t, d), s->type, be);
            if (!isfinite(x)) {
                if (fill) {
                    nfilled++;
                    continue; /* stored as 0: adds nothing to the sums */
                }
                return cxs_diagf(dg, CXS_E_INPUT, "%s at frame %llu, dimension %llu",
                                 isnan(x) ? "NaN" : "infinity", (unsigned long long)t,
                                 (unsigned long long)d);
            }
            if (normalize != NORM_NONE) {
                mean[d] += x;
                sumsq[d] += x * x; /* scratch: reset below */
            }
        }
    if (normalize != NORM_NONE) {
        /* Per-utterance mean/variance normalisation: (x - mean) / std, with
         * std taken as 1 for a constant dimension (spec/format.md). */
        for (uint64_t d = 0; d < D; d++) {
            mean[d] /= (double)T;
            double var = sumsq[d] / (double)T - mean[d] * mean[d];
            double sdv = var > 0 ? sqrt(var) : 0;
            scale[d] = sdv > 0 ? 1.0 / sdv : 1.0;
            sumsq[d] = 0;
        }
    }
    for (uint64_t t = 0; t < T; t++)
        for (uint64_t d = 0; d < D; d++) {
            double x = load_elem(AT(t, d), s->type, be), v;
            if (!isfinite(x)) x = 0; /* only with fill: the first pass refused it otherwise */
            if (normalize != NORM_NONE) x = (x - mean[d]) * scale[d];
            store_elem(dst + (t * D + d) * es, dtype, x, &v);
            if (!isfinite(v)) {
                return cxs_diagf(dg, CXS_E_INPUT,
                                 "value %g at frame %llu, dimension %llu overflows %s", x,
                                 (unsigned long long)t, (unsigned long long)d,
                                 cxs_dtype_name(dtype));
            }
            sum[d] += v;
            sumsq[d] += v * v;
        }
#undef AT
    if (filled) *filled = nfilled;
    return 0;
}
