/* qdecode_bench.c - the decode of coded features alone (lib/read/qdecode.c,
 * built into this program), against float32's copy of the same number of
 * values and the codec's scalar reference (cxs_q_decode_rows), side by
 * side: ROWS rows of DIM columns of random codes under a realistic header
 * (min -8, range 16, percentiles spread), each way timed over repeats of
 * about 20 ms, ROUNDS rounds with the ways in turn.  Prints the median ns
 * a value of each and the median of each round's ratio to the copy.
 *
 * usage: qdecode_bench DIM ROWS ROUNDS */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_clock.h"
#include "cxs_le.h"
#include "cxs_qcodec.h"
#include "qdecode.h"

#define NW 4
static const char *ways[NW] = {"float32 copy", "q8", "q16", "q8 scalar reference"};

static uint64_t rs = 88172645463325252ull;
static uint32_t rnd(void) {
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (uint32_t)(rs >> 32);
}

int main(int argc, char **argv) {
    if (argc != 4) return fprintf(stderr, "usage: %s DIM ROWS ROUNDS\n", argv[0]), 2;
    const uint32_t D = (uint32_t)atoi(argv[1]);
    const size_t rows = (size_t)atoll(argv[2]), n = rows * D;
    const int rounds = atoi(argv[3]);
    uint8_t *h8 = malloc(cxs_q_header_size(CXS_DTYPE_Q8, D)), h16[CXS_Q16_HEADER];
    const float min = -8, range = 16;
    uint32_t b;
    memcpy(&b, &min, 4);
    cxs_st32(h8, b), cxs_st32(h16, b);
    memcpy(&b, &range, 4);
    cxs_st32(h8 + 4, b), cxs_st32(h16 + 4, b);
    for (uint32_t c = 0; c < D; c++) {
        const uint16_t lo = (uint16_t)(rnd() % 20000), p25 = (uint16_t)(lo + 8000 + rnd() % 4000);
        const uint16_t p75 = (uint16_t)(p25 + 12000 + rnd() % 4000), hi = (uint16_t)(p75 + 9000 + rnd() % 5000);
        cxs_st16(h8 + CXS_Q8_HEAD + 8 * c, lo), cxs_st16(h8 + CXS_Q8_HEAD + 8 * c + 2, p25);
        cxs_st16(h8 + CXS_Q8_HEAD + 8 * c + 4, p75), cxs_st16(h8 + CXS_Q8_HEAD + 8 * c + 6, hi);
    }
    uint8_t *c8 = malloc(n), *c16 = malloc(2 * n);
    float *f32 = malloc(n * sizeof *f32), *out = malloc(n * sizeof *out);
    for (size_t i = 0; i < n; i++)
        c8[i] = (uint8_t)rnd(), cxs_st16(c16 + 2 * i, (uint16_t)rnd()), f32[i] = (float)rnd();
    cxs_qdec q8 = {0}, q16 = {0};
    if (cxs_qdec_init(&q8, CXS_DTYPE_Q8, D) || cxs_qdec_init(&q16, CXS_DTYPE_Q16, D)) return 1;
    cxs_qdec_prepare(&q8, h8);
    cxs_qdec_prepare(&q16, h16);
    double *ns = calloc((size_t)NW * rounds, sizeof *ns), *ratio = calloc((size_t)NW * rounds, sizeof *ratio);
    volatile float sink = 0;
    for (int r = 0; r < rounds; r++)
        for (int j = 0; j < NW; j++) {
            const int w = (j + r) % NW; /* each way first in turn */
            size_t reps = 0;
            double t0 = now(), t;
            do {
                if (w == 0) memcpy(out, f32, n * sizeof *out);
                else if (w == 1) cxs_qdec_rows(&q8, c8, rows, out);
                else if (w == 2) cxs_qdec_rows(&q16, c16, rows, out);
                else cxs_q_decode_rows(CXS_DTYPE_Q8, h8, D, c8, rows, out);
                sink += out[reps % n];
                reps++;
            } while ((t = now() - t0) < 0.02);
            ns[w * rounds + r] = t * 1e9 / ((double)reps * (double)n);
        }
    for (int w = 0; w < NW; w++)
        for (int r = 0; r < rounds; r++) ratio[w * rounds + r] = ns[w * rounds + r] / ns[r];
    double load[3] = {0};
    FILE *fp = fopen("/proc/loadavg", "r");
    if (fp && fscanf(fp, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3) load[0] = -1;
    if (fp) fclose(fp);
    printf("%zu rows x %u dims, %d rounds, medians; load average %.2f %.2f %.2f\n", rows, D, rounds,
           load[0], load[1], load[2]);
    printf("%-20s %12s %16s\n", "way", "ns a value", "time vs copy");
    for (int w = 0; w < NW; w++)
        printf("%-20s %12.3f %16.2f\n", ways[w], median(&ns[w * rounds], rounds),
               median(&ratio[w * rounds], rounds));
    cxs_qdec_free(&q8), cxs_qdec_free(&q16);
    free(h8), free(c8), free(c16), free(f32), free(out), free(ns), free(ratio);
    return 0;
}
