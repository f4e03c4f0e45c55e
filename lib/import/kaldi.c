/* kaldi.c - headers and decoding of Kaldi's binary objects (kaldi.h).
 *
 * The decoding of the compressed kinds follows Kaldi's
 * CompressedMatrix::CopyToMat, its CM and CM2 arithmetic being the q8/q16
 * codec's (format/cxs_qcodec.h: Uint16ToFloat, CharToFloat, the two-byte
 * increment), so that every value is the float Kaldi computes: a decoded
 * feature is bit-identical to what Kaldi's own tools (copy-feats, nnet3
 * training) see.  CM3's increment mixes float and double as Kaldi's does
 * (its constant 1.0/255.0 is a double); a contraction into fused
 * multiply-adds would change the last bit, hence the pragma (GCC in ISO C
 * mode, which the build uses, does not contract either). */
#include "kaldi.h"

#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxshard_base.h"
#include "cxs_format.h"
#include "cxs_le.h"
#include "cxs_qcodec.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

static const char *const kind_names[KALDI_KINDS] = {"FM", "DM", "FV", "DV", "CM", "CM2", "CM3",
                                                     "text"};

const char *kaldi_kind_name(uint32_t kind) { return kind < KALDI_KINDS ? kind_names[kind] : "?"; }

int kaldi_is_double(const kaldi_hdr *h) { return h->kind == KALDI_DM || h->kind == KALDI_DV; }

static float ldf32(const uint8_t *p) {
    uint32_t u = cxs_ld32(p);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* What the bytes at p look like, for a message. */
static int shown(cxs_diag *d, int code, const uint8_t *p, size_t n, const char *what) {
    char hex[40] = "";
    size_t k = 0;
    for (size_t i = 0; i < n && i < 8 && k + 4 < sizeof hex; i++)
        k += (size_t)snprintf(hex + k, sizeof hex - k, "%s%02x", i ? " " : "", p[i]);
    return cxs_diagf(d, code, "%s (found bytes %s)", what, n ? hex : "none: end of file");
}

/* ReadBasicType of an int32 in binary: a size byte of 4, then four bytes
 * little-endian.  -1 when the size byte is wrong or the value negative. */
static int64_t basic_i32(const uint8_t *p) {
    if (p[0] != 4) return -1;
    int32_t v = (int32_t)cxs_ld32(p + 1);
    return v < 0 ? -1 : v;
}

int kaldi_parse(const uint8_t *buf, size_t n, kaldi_hdr *h, cxs_diag *d) {
    memset(h, 0, sizeof *h);
    if (n == 0) {
        return cxs_diagf(d, CXS_E_TRUNCATED, "no object: end of file");
    }
    if (buf[0] != 0) {
        /* InitKaldiInputStream: without "\0B" Kaldi reads the object as text */
        size_t i = 0;
        while (i < n && (buf[i] == ' ' || buf[i] == '\t')) i++;
        if (i < n && buf[i] == '[') {
            h->kind = KALDI_TXT;
            h->head = i;
            return 0;
        }
        return shown(d, CXS_E_CORRUPT, buf, n,
                     "no Kaldi object here: expected the binary marker \\0B");
    }
    if (n < 2) {
        return cxs_diagf(d, CXS_E_TRUNCATED, "object cut short after its first byte");
    }
    if (buf[1] != 'B') {
        return shown(d, CXS_E_CORRUPT, buf, n, "\\0 not followed by B: not a Kaldi binary object");
    }
    /* The token: up to the space ReadToken requires after it. */
    size_t t = 2;
    while (t < n && t < 2 + 8 && buf[t] != ' ') t++;
    if (t >= n) {
        return cxs_diagf(d, CXS_E_TRUNCATED, "object cut short in its type token");
    }
    uint32_t kind = KALDI_KINDS;
    for (uint32_t k = 0; k < KALDI_TXT; k++)
        if (t - 2 == strlen(kind_names[k]) && !memcmp(buf + 2, kind_names[k], t - 2)) kind = k;
    if (kind == KALDI_KINDS) {
        char tok[16];
        size_t m = 0;
        for (size_t i = 2; i < t && m + 1 < sizeof tok; i++)
            tok[m++] = buf[i] >= 0x20 && buf[i] < 0x7f ? (char)buf[i] : '?';
        tok[m] = 0;
        return cxs_diagf(d, CXS_E_CORRUPT,
                         "unknown object type '%s' (expected FM, DM, FV, DV, CM, CM2 or CM3)", tok);
    }
    h->kind = kind;
    /* Sizes come from the file: products stay far from 2^64 (rows and
     * columns are below 2^31) but are limited so that no sum wraps. */
    const uint64_t max_elems = 1ull << 56;
    const uint8_t *p = buf + t + 1;
    size_t left = n - (t + 1);
    if (kind == KALDI_FM || kind == KALDI_DM) {
        if (left < 10) {
            return cxs_diagf(d, CXS_E_TRUNCATED, "%s header cut short", kind_names[kind]);
        }
        int64_t r = basic_i32(p), c = basic_i32(p + 5);
        if (r < 0 || c < 0) {
            return shown(d, CXS_E_CORRUPT, p, 10,
                         "bad matrix size (expected \\4 and a non-negative int32, twice)");
        }
        h->rows = (uint64_t)r;
        h->cols = (uint64_t)c;
        if (h->rows * h->cols > max_elems) {
            return cxs_diagf(d, CXS_E_CORRUPT, "%s of %llux%llu elements: not a real matrix",
                             kind_names[kind], (unsigned long long)h->rows,
                             (unsigned long long)h->cols);
        }
        h->head = t + 1 + 10;
        h->size = h->head + h->rows * h->cols * (kind == KALDI_FM ? 4u : 8u);
    } else if (kind == KALDI_FV || kind == KALDI_DV) {
        if (left < 5) {
            return cxs_diagf(d, CXS_E_TRUNCATED, "%s header cut short", kind_names[kind]);
        }
        int64_t s = basic_i32(p);
        if (s < 0) {
            return shown(d, CXS_E_CORRUPT, p, 5,
                         "bad vector size (expected \\4 and a non-negative int32)");
        }
        h->rows = (uint64_t)s;
        h->cols = 1;
        h->head = t + 1 + 5;
        h->size = h->head + h->rows * (kind == KALDI_FV ? 4u : 8u);
    } else {
        /* CompressedMatrix::Read: the GlobalHeader without its format
         * field: min_value, range (float), num_rows, num_cols (int32). */
        if (left < 16) {
            return cxs_diagf(d, CXS_E_TRUNCATED, "%s header cut short", kind_names[kind]);
        }
        int32_t r = (int32_t)cxs_ld32(p + 8), c = (int32_t)cxs_ld32(p + 12);
        if (r < 0 || c < 0) {
            return cxs_diagf(d, CXS_E_CORRUPT, "%s header: %d rows, %d columns", kind_names[kind],
                             r, c);
        }
        h->min = ldf32(p);
        h->range = ldf32(p + 4);
        h->head = t + 1 + 16;
        /* num_cols 0 is Kaldi's empty matrix: the header alone. */
        h->rows = c == 0 ? 0 : (uint64_t)r;
        h->cols = (uint64_t)c;
        uint64_t R = h->rows, C = h->cols;
        h->size = h->head + (C == 0 ? 0
                             : kind == KALDI_CM  ? C * (8 + R)
                             : kind == KALDI_CM2 ? 2 * R * C
                                                 : R * C);
    }
    return 0;
}

void kaldi_decode(const kaldi_hdr *h, const uint8_t *obj, void *out) {
    const uint8_t *p = obj + h->head;
    const uint64_t R = h->rows, C = h->cols;
    switch (h->kind) {
    case KALDI_FM:
    case KALDI_FV: {
        float *o = out;
        for (uint64_t i = 0; i < R * C; i++) o[i] = ldf32(p + 4 * i);
        break;
    }
    case KALDI_DM:
    case KALDI_DV: {
        double *o = out;
        for (uint64_t i = 0; i < R * C; i++) o[i] = cxs_ldf64(p + 8 * i);
        break;
    }
    case KALDI_CM: {
        /* Per-column headers (four uint16 percentiles each), then the
         * bytes column by column.  A column's value depends only on its
         * byte: each column's 256 values are computed once, with Kaldi's
         * expression, and the rows then filled from the tables, a block
         * of columns at a time (the tables stay in cache, the output is
         * written row by row). */
        float *o = out;
        const uint8_t *bytes = p + 8 * C;
        enum { BLOCK = 32 };
        float table[BLOCK][256];
        for (uint64_t c0 = 0; c0 < C; c0 += BLOCK) {
            const uint64_t nb = C - c0 < BLOCK ? C - c0 : BLOCK;
            for (uint64_t b = 0; b < nb; b++) {
                const cxs_q8_col col = cxs_q8_col_make(h->min, h->range, p + 8 * (c0 + b));
                cxs_q8_table(&col, table[b]);
            }
            for (uint64_t r = 0; r < R; r++) {
                float *row = o + r * C + c0;
                const uint8_t *src = bytes + c0 * R + r;
                for (uint64_t b = 0; b < nb; b++) row[b] = table[b][src[b * R]];
            }
        }
        break;
    }
    case KALDI_CM2: {
        float *o = out;
        const float min = h->min, inc = cxs_q16_increment(h->range);
        for (uint64_t i = 0; i < R * C; i++) o[i] = cxs_q16_value(min, inc, cxs_ld16(p + 2 * i));
        break;
    }
    case KALDI_CM3: {
        float *o = out;
        const float min = h->min, inc = (float)((double)h->range * (1.0 / 255.0));
        for (uint64_t i = 0; i < R * C; i++) o[i] = min + (float)p[i] * inc;
        break;
    }
    default: break;
    }
}

/* ---- the text form ------------------------------------------------------ */

size_t kaldi_text_end(const uint8_t *buf, size_t n, int more) {
    const uint8_t *e = memchr(buf, ']', n);
    if (!e) return 0;
    size_t k = (size_t)(e - buf) + 1;
    if (k < n && buf[k] == '\n') return k + 1;
    if (k < n && buf[k] == '\r') {
        if (k + 1 < n) return buf[k + 1] == '\n' ? k + 2 : k + 1;
        return more ? 0 : k + 1;
    }
    return k == n && more ? 0 : k;
}

static int is_ws(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

static locale_t c_locale;
static pthread_once_t c_locale_once = PTHREAD_ONCE_INIT;
static void c_locale_make(void) { c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0); }

/* The characters a C++ stream takes for a float (libstdc++'s
 * num_get::_M_extract_float: a sign, digits with one '.', an exponent
 * with its sign), from p; their count. */
static size_t float_chars(const uint8_t *p, size_t n) {
    size_t k = 0;
    int dot = 0, digits = 0;
    if (k < n && (p[k] == '+' || p[k] == '-')) k++;
    for (; k < n; k++) {
        if (p[k] >= '0' && p[k] <= '9') digits = 1;
        else if (p[k] == '.' && !dot) dot = 1;
        else break;
    }
    if (digits && k < n && (p[k] == 'e' || p[k] == 'E')) {
        k++;
        if (k < n && (p[k] == '+' || p[k] == '-')) k++;
        while (k < n && p[k] >= '0' && p[k] <= '9') k++;
    }
    return k;
}

int kaldi_text_parse(const uint8_t *buf, size_t n, uint64_t *rows, uint64_t *cols, float *out,
                     cxs_diag *d) {
    size_t i = 0;
    while (i < n && is_ws(buf[i])) i++;
    size_t t0 = i;
    while (i < n && !is_ws(buf[i])) i++;
    if (i - t0 == 2 && buf[t0] == '[' && buf[t0 + 1] == ']') {
        *rows = *cols = 0;
        return 0;
    }
    if (i - t0 != 1 || buf[t0] != '[') {
        return cxs_diagf(d, CXS_E_CORRUPT,
                         "text-form matrix: expected '[' followed by white space, found "
                         "'%.*s'",
                         (int)(i - t0 > 16 ? 16 : i - t0), (const char *)buf + t0);
    }
    pthread_once(&c_locale_once, c_locale_make);
    uint64_t R = 0, C = 0, cur = 0, at = 0;
    for (;;) {
        if (i >= n) {
            return cxs_diagf(d, CXS_E_CORRUPT,
                             "text-form matrix: no ']' before the end of the object");
        }
        uint8_t c = buf[i];
        if (c == ']' || c == '\n' || c == ';') {
            i++;
            if (cur) {
                if (R == 0) C = cur;
                else if (cur != C) {
                    return cxs_diagf(d, CXS_E_CORRUPT,
                                     "text-form matrix: row %llu has %llu values, row 1 has "
                                     "%llu (inconsistent number of columns)",
                                     (unsigned long long)R + 1, (unsigned long long)cur,
                                     (unsigned long long)C);
                }
                R++;
                cur = 0;
            }
            if (c == ']') break;
            continue;
        }
        if (is_ws(c)) {
            i++;
            continue;
        }
        float v;
        if ((c >= '0' && c <= '9') || c == '-') {
            size_t k = float_chars(buf + i, n - i);
            char num[64];
            char *end = num;
            int ok = k > 0 && k < sizeof num;
            if (ok) {
                memcpy(num, buf + i, k);
                num[k] = 0;

                v = strtof_l(num, &end, c_locale);
                ok = end == num + k && isfinite(v);
            }
            if (!ok) {
                return cxs_diagf(d, CXS_E_CORRUPT,
                                 "text-form matrix: '%.*s' at byte %zu is not a number a float "
                                 "holds",
                                 (int)(k ? (k > 24 ? 24 : k) : 1), (const char *)buf + i, i);
            }
            i += k;
        } else {
            size_t k = i;
            while (k < n && !is_ws(buf[k])) k++;
            size_t m = k - i;
            if (m == 3 && !strncasecmp((const char *)buf + i, "nan", 3)) v = NAN;
            else if ((m == 3 && !strncasecmp((const char *)buf + i, "inf", 3)) ||
                     (m == 8 && !strncasecmp((const char *)buf + i, "infinity", 8)))
                v = INFINITY;
            else {
                return cxs_diagf(d, CXS_E_CORRUPT,
                                 "text-form matrix: expected a number at byte %zu, found "
                                 "'%.*s'",
                                 i, (int)(m > 24 ? 24 : m), (const char *)buf + i);
            }
            i = k;
        }
        if (out) out[at] = v;
        at++;
        cur++;
    }
    *rows = R;
    *cols = R ? C : 0;
    return 0;
}
