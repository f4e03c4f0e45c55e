/* qcodec_run.c - the codec (format/cxs_qcodec.h) as a filter, for
 * tests/python/qcodec_test.py, which compares its bytes and floats with
 * an independent reference written from Kaldi's source
 * (tests/python/kaldi_ref.py).
 *
 *   qcodec_run encode q8|q16 IN OUT: IN holds records (u32 n, u32 dim,
 *     n*dim f32 LE); OUT gets for each an i32 return code, then on
 *     success the header and the codes.
 *   qcodec_run decode q8|q16 IN OUT: records (u32 n, u32 dim, header,
 *     codes); OUT gets n*dim f32 for each, from the scalar decoder, and
 *     then again from the per-column tables (cxs_q8_table; q16: the
 *     same decoder twice).
 *   qcodec_run check q8|q16 IN OUT: records (u32 dim, header); OUT gets
 *     an i32 return code of cxs_q_header_check for each.
 *   qcodec_run cm IN OUT: records (u32 rows, u32 cols, header, codes):
 *     OUT gets the Kaldi CM body of each and, read back from it, the
 *     header and codes again. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cxs_qcodec.h"

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        perror("qcodec_run");
        exit(2);
    }
    return p;
}

static int get(FILE *f, void *p, size_t n) { return fread(p, 1, n, f) == n; }

static void put(FILE *f, const void *p, size_t n) {
    if (fwrite(p, 1, n, f) != n) {
        perror("qcodec_run: write");
        exit(2);
    }
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: qcodec_run encode|decode|check q8|q16 IN OUT; qcodec_run cm IN OUT\n");
        return 2;
    }
    const int cm = !strcmp(argv[1], "cm");
    const uint32_t dtype = cm || !strcmp(argv[2], "q8") ? CXS_DTYPE_Q8 : CXS_DTYPE_Q16;
    FILE *in = fopen(argv[cm ? 2 : 3], "rb"), *out = fopen(argv[cm ? 3 : 4], "wb");
    if (!in || !out) {
        perror("qcodec_run");
        return 2;
    }
    uint32_t nd[2];
    for (;;) {
        if (!strcmp(argv[1], "check")) {
            if (!get(in, nd, 4)) break;
            const uint64_t H = cxs_q_header_size(dtype, nd[0]);
            uint8_t *h = xmalloc(H);
            char why[200];
            if (!get(in, h, H)) return 2;
            const int32_t rc = cxs_q_header_check(dtype, h, nd[0], why, sizeof why);
            put(out, &rc, 4);
            free(h);
            continue;
        }
        if (!get(in, nd, 8)) break;
        const uint64_t n = nd[0], dim = nd[1], H = cxs_q_header_size(dtype, dim);
        const uint64_t E = dtype == CXS_DTYPE_Q8 ? 1 : 2;
        uint8_t *h = xmalloc(H), *codes = xmalloc(n * dim * E);
        float *v = xmalloc(n * dim * sizeof *v);
        if (!strcmp(argv[1], "encode")) {
            if (!get(in, v, n * dim * 4)) return 2;
            const int32_t rc = cxs_q_encode(dtype, v, n, dim, dim, h, codes, NULL);
            put(out, &rc, 4);
            if (!rc) {
                put(out, h, H);
                put(out, codes, n * dim * E);
            }
        } else if (!strcmp(argv[1], "decode")) {
            if (!get(in, h, H) || !get(in, codes, n * dim * E)) return 2;
            cxs_q_decode_rows(dtype, h, dim, codes, n, v);
            put(out, v, n * dim * 4);
            if (dtype == CXS_DTYPE_Q8) {
                cxs_q8_col *cols = xmalloc(dim * sizeof *cols);
                float(*t)[256] = xmalloc(dim * sizeof *t);
                cxs_q8_prepare(h, dim, cols);
                for (uint64_t d = 0; d < dim; d++) cxs_q8_table(&cols[d], t[d]);
                for (uint64_t i = 0; i < n * dim; i++) v[i] = t[i % dim][codes[i]];
                free(cols);
                free(t);
            }
            put(out, v, n * dim * 4);
        } else {
            if (!get(in, h, H) || !get(in, codes, n * dim)) return 2;
            const uint64_t B = 16 + 8 * dim + n * dim;
            uint8_t *body = xmalloc(B);
            cxs_q8_to_kaldi_cm(h, codes, n, dim, body);
            put(out, body, B);
            cxs_q8_from_kaldi_cm(body, n, dim, 0, n, 0, dim, h, codes);
            put(out, h, H);
            put(out, codes, n * dim);
            free(body);
        }
        free(h);
        free(codes);
        free(v);
    }
    return fclose(out) ? 2 : 0;
}
