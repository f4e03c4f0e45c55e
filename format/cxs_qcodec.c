/* cxs_qcodec.c - Kaldi's CompressedMatrix for q8 and q16 (cxs_qcodec.h).
 *
 * Written from Kaldi's src/matrix/compressed-matrix.cc (ComputeGlobalHeader,
 * ComputeColHeader, FloatToUint16, FloatToChar, Uint16ToFloat,
 * CharToFloat, CopyToMat) and kaldi-matrix.cc (Min, Max).  Kaldi mixes
 * float and double: an int or float operand meeting one of its double
 * constants (0.499, 0.5, 1.0, 1/64.0 ...) makes that operation double.
 * Each expression below casts where C's and C++'s promotions put the
 * conversions, so that it reads the same in either language; a
 * contraction into fused multiply-adds would change last bits, hence the
 * pragma (GCC in ISO C mode, which the build uses, does not contract
 * either). */
#include "cxs_qcodec.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cxs_le.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

static float ldf(const uint8_t *p) {
    const uint32_t b = cxs_ld32(p);
    float f;
    memcpy(&f, &b, 4);
    return f;
}

static void stf(uint8_t *p, float f) {
    uint32_t b;
    memcpy(&b, &f, 4);
    cxs_st32(p, b);
}

/* Kaldi's static_cast<int>(double): truncation.  Where the result does
 * not fit an int (or x is NaN) the cast is undefined in C++; on x86-64,
 * where Kaldi's archives are written, cvttsd2si gives INT32_MIN, and the
 * clamps that follow every cast in Kaldi turn that into the range's
 * lower end.  Reached only in FloatToChar when two adjacent percentile
 * codes decode to the same float (a column whose spread is below the
 * float spacing of its values). */
static int32_t kaldi_int(double x) {
    if (x > -2147483649.0 && x < 2147483648.0) return (int32_t)x;
    return INT32_MIN;
}

/* FloatToUint16: the float quotient, clamped, scaled in float; + 0.499
 * is a double sum. */
static uint16_t float_to_u16(float min, float range, float v) {
    float f = (v - min) / range;
    if (f > 1.0f) f = 1.0f;
    if (f < 0.0f) f = 0.0f;
    return (uint16_t)kaldi_int((double)(f * 65535.0f) + 0.499);
}

/* FloatToChar: three ranges, codes 0..64, 64..192, 192..255. */
static uint8_t float_to_char(const cxs_q8_col *c, float v) {
    int32_t ans;
    if (v < c->p25) {
        const float f = (v - c->p0) / (c->p25 - c->p0);
        ans = kaldi_int((double)(f * 64.0f) + 0.5);
        if (ans < 0) ans = 0;
        if (ans > 64) ans = 64;
    } else if (v < c->p75) {
        const float f = (v - c->p25) / (c->p75 - c->p25);
        /* 64 + INT32_MIN does not overflow: it is below 64, clamped */
        ans = 64 + kaldi_int((double)(f * 128.0f) + 0.5);
        if (ans < 64) ans = 64;
        if (ans > 192) ans = 192;
    } else {
        const float f = (v - c->p75) / (c->p100 - c->p75);
        ans = 192 + kaldi_int((double)(f * 63.0f) + 0.5);
        if (ans < 192) ans = 192;
        if (ans > 255) ans = 255;
    }
    return (uint8_t)ans;
}

/* One piece of CharToFloat: base + (slope * n) * m, the product a float,
 * then a double product and sum rounded once to float. */
static inline float q8_piece(float base, float slope, int32_t n, double m) {
    const float d = slope * (float)n;
    return (float)((double)base + (double)d * m);
}

float cxs_q8_value(const cxs_q8_col *c, uint8_t code) {
    if (code <= 64) return q8_piece(c->p0, c->p25 - c->p0, code, 1 / 64.0);
    if (code <= 192) return q8_piece(c->p25, c->p75 - c->p25, code - 64, 1 / 128.0);
    return q8_piece(c->p75, c->p100 - c->p75, code - 192, 1 / 63.0);
}

void cxs_q8_table(const cxs_q8_col *c, float table[256]) {
    /* a loop per piece, without branches: the compiler vectorises them */
    const float s0 = c->p25 - c->p0, s1 = c->p75 - c->p25, s2 = c->p100 - c->p75;
    for (int32_t v = 0; v <= 64; v++) table[v] = q8_piece(c->p0, s0, v, 1 / 64.0);
    for (int32_t v = 65; v <= 192; v++) table[v] = q8_piece(c->p25, s1, v - 64, 1 / 128.0);
    for (int32_t v = 193; v < 256; v++) table[v] = q8_piece(c->p75, s2, v - 192, 1 / 63.0);
}

void cxs_q_header_minrange(const uint8_t *header, float *min, float *range) {
    *min = ldf(header);
    *range = ldf(header + 4);
}

void cxs_q8_prepare(const uint8_t *header, uint64_t dim, cxs_q8_col *cols) {
    float min, range;
    cxs_q_header_minrange(header, &min, &range);
    for (uint64_t d = 0; d < dim; d++)
        cols[d] = cxs_q8_col_make(min, range, header + CXS_Q8_HEAD + 8 * d);
}

float cxs_q16_increment(float range) { return (float)((double)range * (1.0 / 65535.0)); }

void cxs_q_decode_rows(uint32_t dtype, const uint8_t *header, uint64_t dim, const uint8_t *codes,
                       uint64_t n, float *out) {
    float min, range;
    cxs_q_header_minrange(header, &min, &range);
    if (dtype == CXS_DTYPE_Q16) {
        const float inc = cxs_q16_increment(range);
        for (uint64_t i = 0; i < n * dim; i++) out[i] = cxs_q16_value(min, inc, cxs_ld16(codes + 2 * i));
        return;
    }
    for (uint64_t d = 0; d < dim; d++) {
        const cxs_q8_col c = cxs_q8_col_make(min, range, header + CXS_Q8_HEAD + 8 * d);
        for (uint64_t r = 0; r < n; r++) out[r * dim + d] = cxs_q8_value(&c, codes[r * dim + d]);
    }
}

/* ---- encoding ------------------------------------------------------------ */

/* The k-th smallest of a[0 .. n) (k < n), moving elements: quickselect
 * with a three-way partition around the median of three (every pass
 * leaves the equal part, never empty, out).  Kaldi finds its percentiles
 * with std::nth_element, whose result is the same value: the k-th
 * smallest is one number whatever the algorithm (the one tie it could
 * break differently, -0 against +0, encodes to the same code). */
static float kth(float *a, size_t n, size_t k) {
    size_t lo = 0, hi = n; /* the k-th lies in a[lo .. hi) */
    for (;;) {
        const float x = a[lo], y = a[lo + (hi - lo) / 2], z = a[hi - 1];
        const float piv = x < y ? (y < z ? y : (x < z ? z : x)) : (x < z ? x : (y < z ? z : y));
        /* a[lo .. lt) < piv, a[lt .. i) == piv, a[gt .. hi) > piv */
        size_t lt = lo, i = lo, gt = hi;
        while (i < gt) {
            const float v = a[i];
            if (v < piv) {
                a[i++] = a[lt];
                a[lt++] = v;
            } else if (piv < v) {
                a[i] = a[--gt];
                a[gt] = v;
            } else {
                i++;
            }
        }
        if (k < lt) hi = lt;
        else if (k >= gt) lo = gt;
        else return piv;
    }
}

/* ComputeColHeader: the order statistics 0, n/4, 3(n/4) and n-1 for
 * n >= 5, else the sorted values 0..3, as clamped, increasing codes. */
static void col_header(float min, float range, float *s, size_t n, uint16_t p[4]) {
    float v[4];
    if (n >= 5) {
        /* Kaldi's order of nth_element calls, each on what the previous
         * left unsorted: kth leaves a[0 .. k) <= a[k] <= a[k+1 .. n) */
        const size_t q = n / 4;
        v[1] = kth(s, n, q);
        v[0] = kth(s, q, 0);
        v[2] = kth(s + q + 1, n - q - 1, 2 * q - 1);
        v[3] = kth(s + 3 * q + 1, n - 3 * q - 1, n - 3 * q - 2);
    } else {
        for (size_t i = 0; i < n; i++) v[i] = kth(s, n, i);
    }
    uint32_t c = float_to_u16(min, range, v[0]);
    p[0] = (uint16_t)(c < 65532 ? c : 65532);
    for (unsigned k = 1; k < 4; k++) {
        /* Kaldi's min<uint16>(max<uint16>(code, prev + 1), 65532 + k); for
         * fewer rows than percentiles, prev + 1 without the clamp (it
         * cannot pass 65532 + k there either) */
        const uint32_t floor = (uint32_t)p[k - 1] + 1u;
        c = k < n ? float_to_u16(min, range, v[k]) : floor;
        if (c < floor) c = floor;
        if (k < 3 && c > 65532u + k) c = 65532u + k;
        p[k] = (uint16_t)c;
    }
}

static int finite_header(uint32_t dtype, const uint8_t *h, uint64_t dim);

int cxs_q_encode(uint32_t dtype, const float *rows, uint64_t n, uint64_t dim, uint64_t stride,
                 uint8_t *header, uint8_t *codes, const char **why) {
    if (!cxs_dtype_coded(dtype) || n == 0 || dim == 0 || stride < dim) return CXS_E_INVALID;
    /* MatrixBase::Min and Max: row-major, the first of equal extremes */
    float min = rows[0], max = rows[0];
    for (uint64_t r = 0; r < n; r++)
        for (uint64_t d = 0; d < dim; d++) {
            const float v = rows[r * stride + d];
            if (!isfinite(v)) {
                if (why) *why = "a value is NaN or infinite";
                return CXS_E_INPUT;
            }
            if (v < min) min = v;
            if (v > max) max = v;
        }
    /* ComputeGlobalHeader: a constant matrix gets max = min + (1 + |min|),
     * the sum in double stored in a float */
    if (max == min) max = (float)((double)min + (1.0 + fabs((double)min)));
    const float range = max - min;
    if (!isfinite(range)) {
        if (why) *why = "the values' range (largest - smallest) is beyond float";
        return CXS_E_INPUT;
    }
    uint8_t hd[CXS_Q16_HEADER];
    stf(hd, min);
    stf(hd + 4, range);
    if (dtype == CXS_DTYPE_Q16) {
        if (finite_header(dtype, hd, dim)) {
            if (why) *why = "a code would decode beyond float (values near the float limit)";
            return CXS_E_INPUT;
        }
        memcpy(header, hd, CXS_Q16_HEADER);
        for (uint64_t r = 0; r < n; r++)
            for (uint64_t d = 0; d < dim; d++)
                cxs_st16(codes + 2 * (r * dim + d), float_to_u16(min, range, rows[r * stride + d]));
        return 0;
    }
    const uint64_t H = cxs_q_header_size(dtype, dim);
    float *s = malloc(n * sizeof *s);
    uint8_t *h = malloc(H);
    if (!s || !h) {
        free(s);
        free(h);
        return -ENOMEM;
    }
    memcpy(h, hd, CXS_Q8_HEAD);
    for (uint64_t d = 0; d < dim; d++) {
        for (uint64_t r = 0; r < n; r++) s[r] = rows[r * stride + d];
        uint16_t p[4];
        col_header(min, range, s, n, p);
        for (unsigned k = 0; k < 4; k++) cxs_st16(h + CXS_Q8_HEAD + 8 * d + 2 * k, p[k]);
    }
    free(s);
    if (finite_header(dtype, h, dim)) {
        free(h);
        if (why) *why = "a code would decode beyond float (values near the float limit)";
        return CXS_E_INPUT;
    }
    for (uint64_t d = 0; d < dim; d++) {
        const cxs_q8_col c = cxs_q8_col_make(min, range, h + CXS_Q8_HEAD + 8 * d);
        for (uint64_t r = 0; r < n; r++) codes[r * dim + d] = float_to_char(&c, rows[r * stride + d]);
    }
    memcpy(header, h, H);
    free(h);
    return 0;
}

/* ---- headers ------------------------------------------------------------- */

/* 0 when every code decodes to a finite float.  Kaldi's products grow
 * with the code within each of CharToFloat's three ranges, so the last
 * code of each (64, 192, 255) is the one that can overflow: a range near
 * float's limit does (Kaldi then decodes infinity). */
static int finite_header(uint32_t dtype, const uint8_t *h, uint64_t dim) {
    float min, range;
    cxs_q_header_minrange(h, &min, &range);
    if (dtype == CXS_DTYPE_Q16) return !isfinite(cxs_q16_value(min, cxs_q16_increment(range), 65535));
    for (uint64_t d = 0; d < dim; d++) {
        const cxs_q8_col c = cxs_q8_col_make(min, range, h + CXS_Q8_HEAD + 8 * d);
        if (!isfinite(cxs_q8_value(&c, 64)) || !isfinite(cxs_q8_value(&c, 192)) ||
            !isfinite(cxs_q8_value(&c, 255)))
            return 1;
    }
    return 0;
}

int cxs_q_header_check(uint32_t dtype, const uint8_t *header, uint64_t dim, char *why, size_t len) {
    float min, range;
    cxs_q_header_minrange(header, &min, &range);
    if (!isfinite(min)) {
        snprintf(why, len, "min %g is not finite", (double)min);
        return CXS_E_CORRUPT;
    }
    if (!isfinite(range) || !(range > 0)) {
        snprintf(why, len, "range %g is not finite and > 0", (double)range);
        return CXS_E_CORRUPT;
    }
    if (dtype == CXS_DTYPE_Q8) {
        static const char *const name[4] = {"p0", "p25", "p75", "p100"};
        for (uint64_t d = 0; d < dim; d++) {
            const uint8_t *p = header + CXS_Q8_HEAD + 8 * d;
            for (unsigned k = 1; k < 4; k++)
                if (cxs_ld16(p + 2 * k - 2) > cxs_ld16(p + 2 * k)) {
                    snprintf(why, len, "column %llu: %s %u > %s %u", (unsigned long long)d,
                             name[k - 1], (unsigned)cxs_ld16(p + 2 * k - 2), name[k],
                             (unsigned)cxs_ld16(p + 2 * k));
                    return CXS_E_CORRUPT;
                }
        }
    }
    if (finite_header(dtype, header, dim)) {
        snprintf(why, len, "min %g, range %g: a code decodes beyond float", (double)min,
                 (double)range);
        return CXS_E_CORRUPT;
    }
    return 0;
}

/* ---- Kaldi's CM layout ----------------------------------------------------- */

/* 8 x 8 bytes, byte j of word i (little-endian) to byte i of word j:
 * the off-diagonal 4 x 4 blocks swapped, then the 2 x 2 blocks within
 * each, then single bytes. */
static void transpose8(uint64_t x[8]) {
    for (int i = 0; i < 4; i++) {
        const uint64_t t = ((x[i] >> 32) ^ x[i + 4]) & 0x00000000ffffffffull;
        x[i] ^= t << 32, x[i + 4] ^= t;
    }
    for (int i = 0; i < 8; i += (i & 1) ? 3 : 1) { /* 0, 1, 4, 5 */
        const uint64_t t = ((x[i] >> 16) ^ x[i + 2]) & 0x0000ffff0000ffffull;
        x[i] ^= t << 16, x[i + 2] ^= t;
    }
    for (int i = 0; i < 8; i += 2) {
        const uint64_t t = ((x[i] >> 8) ^ x[i + 1]) & 0x00ff00ff00ff00ffull;
        x[i] ^= t << 8, x[i + 1] ^= t;
    }
}

void cxs_q8_from_kaldi_cm(const uint8_t *body, uint64_t rows, uint64_t cols, uint64_t r0,
                          uint64_t nr, uint64_t c0, uint64_t nc, uint8_t *header, uint8_t *codes) {
    memcpy(header, body, CXS_Q8_HEAD);
    memcpy(header + CXS_Q8_HEAD, body + 16 + 8 * c0, 8 * nc);
    const uint8_t *bytes = body + 16 + 8 * cols + c0 * rows + r0;
    /* column-major into row-major by tiles of 8 x 8 bytes, 8 words each
     * (a byte at a time cost an import of a CM archive 14% of its time);
     * the last rows and columns a byte at a time */
    uint64_t r = 0;
    for (; r + 8 <= nr; r += 8) {
        uint64_t c = 0;
        for (; c + 8 <= nc; c += 8) {
            uint64_t x[8];
            for (int i = 0; i < 8; i++) x[i] = cxs_ld64(bytes + (c + i) * rows + r);
            transpose8(x);
            for (int i = 0; i < 8; i++) cxs_st64(codes + (r + i) * nc + c, x[i]);
        }
        for (; c < nc; c++)
            for (uint64_t i = r; i < r + 8; i++) codes[i * nc + c] = bytes[c * rows + i];
    }
    for (; r < nr; r++)
        for (uint64_t c = 0; c < nc; c++) codes[r * nc + c] = bytes[c * rows + r];
}

void cxs_q8_to_kaldi_cm(const uint8_t *header, const uint8_t *codes, uint64_t rows, uint64_t cols,
                        uint8_t *body) {
    memcpy(body, header, CXS_Q8_HEAD);
    cxs_st32(body + 8, (uint32_t)rows);
    cxs_st32(body + 12, (uint32_t)cols);
    memcpy(body + 16, header + CXS_Q8_HEAD, 8 * cols);
    uint8_t *bytes = body + 16 + 8 * cols;
    for (uint64_t c = 0; c < cols; c++)
        for (uint64_t r = 0; r < rows; r++) bytes[c * rows + r] = codes[r * cols + c];
}
