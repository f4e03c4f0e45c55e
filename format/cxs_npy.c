/* cxs_npy.c - .npy header parser.  The header is a Python dict literal;
 * this accepts exactly what numpy writes (and old files with 'L' suffixes)
 * and refuses everything else with a reason. */
#include "cxs_npy.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cxs_format.h"
#include "cxs_le.h"

/* A refusal: the reason (no file: the caller has it) in d; CXS_E_INPUT. */
static int fail(cxs_diag *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(cxs_diag *d, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    cxs_vdiag_at(d, CXS_E_INPUT, NULL, CXS_NO_OFFSET, fmt, ap);
    va_end(ap);
    return CXS_E_INPUT;
}

typedef struct {
    const char *p, *end;
} cursor;

static void skip_ws(cursor *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static int take(cursor *c, char ch) {
    skip_ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return 1;
    }
    return 0;
}

/* A quoted Python string without escapes (numpy never writes any). */
static int read_str(cursor *c, char *buf, size_t cap) {
    skip_ws(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"')) return 0;
    char q = *c->p++;
    size_t n = 0;
    while (c->p < c->end && *c->p != q) {
        if (*c->p == '\\' || n + 1 >= cap) return 0;
        buf[n++] = *c->p++;
    }
    if (c->p >= c->end) return 0;
    c->p++;
    buf[n] = 0;
    return 1;
}

static int read_uint(cursor *c, uint64_t *v) {
    skip_ws(c);
    if (c->p >= c->end || !isdigit((unsigned char)*c->p)) return 0;
    uint64_t x = 0;
    while (c->p < c->end && isdigit((unsigned char)*c->p)) {
        unsigned dgt = (unsigned)(*c->p - '0');
        if (x > (UINT64_MAX - dgt) / 10) return 0;
        x = x * 10 + dgt;
        c->p++;
    }
    if (c->p < c->end && *c->p == 'L') c->p++;
    *v = x;
    return 1;
}

static int read_word(cursor *c, const char *w) {
    skip_ws(c);
    size_t n = strlen(w);
    if ((size_t)(c->end - c->p) >= n && memcmp(c->p, w, n) == 0) {
        c->p += n;
        return 1;
    }
    return 0;
}

static int parse_descr(const char *s, cxs_npy *o, cxs_diag *d) {
    char order = s[0];
    if (order != '<' && order != '>' && order != '|' && order != '=')
        return fail(d, "unsupported dtype descr '%s'", s);
    char kind = s[1];
    if (kind == 'O')
        return fail(d,
                    "dtype is 'object' (a pickled array), which is refused: re-save it with "
                    "numpy.save(path, array.astype(str)) for strings or "
                    "array.astype(numpy.float32) for numbers");
    if (!strchr("fiubUS", kind) || kind == 0)
        return fail(d, "unsupported dtype descr '%s'", s);
    const char *q = s + 2;
    if (!*q) return fail(d, "dtype descr '%s' has no size", s);
    uint64_t n = 0;
    for (; *q; q++) {
        if (!isdigit((unsigned char)*q) || n > 1000000)
            return fail(d, "unsupported dtype descr '%s'", s);
        n = n * 10 + (uint64_t)(*q - '0');
    }
    if (n == 0) return fail(d, "dtype descr '%s' has size 0", s);
    o->kind = kind;
    o->itemsize = kind == 'U' ? 4 * n : n;
    o->big_endian = order == '>';
    if ((kind == 'f' && n != 2 && n != 4 && n != 8) ||
        ((kind == 'i' || kind == 'u') && n != 1 && n != 2 && n != 4 && n != 8) ||
        (kind == 'b' && n != 1))
        return fail(d, "unsupported dtype descr '%s'", s);
    return 0;
}

int cxs_npy_parse(const uint8_t *p, uint64_t size, cxs_npy *out, cxs_diag *d) {
    cxs_npy o;
    memset(&o, 0, sizeof o);
    static const uint8_t magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
    if (size < 10 || memcmp(p, magic, 6) != 0)
        return fail(d, "not a .npy file (no \\x93NUMPY magic)");
    o.major = p[6];
    o.minor = p[7];
    uint64_t hlen, hstart;
    if (o.major == 1) {
        hlen = cxs_ld16(p + 8);
        hstart = 10;
    } else if (o.major == 2 || o.major == 3) {
        if (size < 12) return fail(d, "truncated .npy header");
        hlen = cxs_ld32(p + 8);
        hstart = 12;
    } else {
        return fail(d, ".npy format version %d.%d is not supported (1.0, 2.0, 3.0 are)",
                    o.major, o.minor);
    }
    if (hlen > size - hstart)
        return fail(d, "truncated: header claims %llu bytes, file has %llu after the magic",
                    (unsigned long long)hlen, (unsigned long long)(size - hstart));
    cursor c = {(const char *)p + hstart, (const char *)p + hstart + hlen};
    int have_descr = 0, have_order = 0, have_shape = 0;
    if (!take(&c, '{')) return fail(d, "malformed header: no '{'");
    for (;;) {
        char key[32];
        if (take(&c, '}')) break;
        if (!read_str(&c, key, sizeof key)) return fail(d, "malformed header: bad key");
        if (!take(&c, ':')) return fail(d, "malformed header: no ':' after '%s'", key);
        if (strcmp(key, "descr") == 0) {
            char descr[32];
            skip_ws(&c);
            if (c.p < c.end && *c.p == '[')
                return fail(d, "structured dtypes are not supported");
            if (!read_str(&c, descr, sizeof descr))
                return fail(d, "malformed header: bad 'descr'");
            if (parse_descr(descr, &o, d)) return CXS_E_INPUT;
            have_descr = 1;
        } else if (strcmp(key, "fortran_order") == 0) {
            if (read_word(&c, "True")) o.fortran_order = 1;
            else if (read_word(&c, "False")) o.fortran_order = 0;
            else return fail(d, "malformed header: bad 'fortran_order'");
            have_order = 1;
        } else if (strcmp(key, "shape") == 0) {
            if (!take(&c, '(')) return fail(d, "malformed header: bad 'shape'");
            o.ndim = 0;
            while (!take(&c, ')')) {
                uint64_t v;
                if (o.ndim >= CXS_NPY_MAX_DIMS)
                    return fail(d, "shape has more than %d dimensions", CXS_NPY_MAX_DIMS);
                skip_ws(&c);
                if (c.p < c.end && *c.p == '-')
                    return fail(d, "shape has a negative dimension");
                if (!read_uint(&c, &v))
                    return fail(d, "malformed header: bad 'shape' entry");
                o.shape[o.ndim++] = v;
                if (!take(&c, ',')) {
                    if (!take(&c, ')')) return fail(d, "malformed header: bad 'shape'");
                    break;
                }
            }
            have_shape = 1;
        } else {
            return fail(d, "header has unknown key '%s'", key);
        }
        if (!take(&c, ',')) {
            if (!take(&c, '}')) return fail(d, "malformed header: expected ',' or '}'");
            break;
        }
    }
    if (!have_descr || !have_order || !have_shape)
        return fail(d, "header lacks '%s'",
                    !have_descr ? "descr" : !have_order ? "fortran_order" : "shape");
    o.count = 1;
    for (int i = 0; i < o.ndim; i++) {
        if (o.shape[i] && o.count > UINT64_MAX / o.shape[i])
            return fail(d, "shape overflows 64 bits");
        o.count *= o.shape[i];
    }
    if (o.count && o.itemsize > UINT64_MAX / o.count)
        return fail(d, "shape times element size overflows 64 bits");
    o.data_size = o.count * o.itemsize;
    o.data_offset = hstart + hlen;
    uint64_t avail = size - o.data_offset;
    if (o.data_size > avail)
        return fail(d, "truncated: the header promises %llu data bytes, the file holds %llu",
                    (unsigned long long)o.data_size, (unsigned long long)avail);
    if (o.data_size < avail)
        return fail(d, "%llu unexpected bytes after the array data",
                    (unsigned long long)(avail - o.data_size));
    *out = o;
    return 0;
}

size_t cxs_npy_header(char *buf, size_t cap, const char *descr, int ndim, const uint64_t *shape) {
    char dict[256], dims[160] = "";
    size_t dl = 0;
    for (int i = 0; i < ndim; i++) {
        int w = snprintf(dims + dl, sizeof dims - dl, "%llu,%s", (unsigned long long)shape[i],
                         (i + 1 < ndim) ? " " : "");
        if (w < 0 || (size_t)w >= sizeof dims - dl) return 0;
        dl += (size_t)w;
    }
    if (ndim > 1) dims[--dl] = 0; /* numpy writes (T, D) but (N,) */
    int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }",
                     descr, dims);
    if (n < 0 || (size_t)n >= sizeof dict) return 0;
    size_t total = 10 + (size_t)n + 1;
    total = (total + 63) / 64 * 64;
    if (total > cap || total - 10 > 65535) return 0;
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    cxs_st16((uint8_t *)buf + 8, (uint16_t)(total - 10));
    memcpy(buf + 10, dict, (size_t)n);
    memset(buf + 10 + n, ' ', total - 10 - (size_t)n - 1);
    buf[total - 1] = '\n';
    return total;
}
