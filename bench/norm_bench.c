/* norm_bench.c - the cost of read-time normalisation (spec section 7.4), side
 * by side: the same random windows of one float32 dataset copied into one
 * batch buffer the way cxs_dataset_gather does (real rows copied, padding
 * rows zeroed), then normalised in place by each candidate definition:
 *
 *   none    no normalisation (the floor)
 *   f32     float32 constants, float32 arithmetic: (x - (float)mean) * (float)(1/std)
 *   f64mul  float64 arithmetic, rounded once: (float)(((double)x - mean) * (1/std))
 *   f64div  float64 arithmetic, rounded once: (float)(((double)x - mean) / std)
 *
 * and the library's own cxs_dataset_gather with CXS_GATHER_NORMALIZE.  The
 * candidates run interleaved, repetition by repetition; the medians and the
 * ratios to `none` are printed, as well as how many elements of f32 and
 * f64div differ from f64mul (the accuracy side of the choice).
 *
 * usage: norm_bench DATASET K BATCH BATCHES REPEATS */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_clock.h"
#include "ctxshard.h"

enum { NONE, F32, F64MUL, F64DIV, LIB, NCAND };
static const char *names[NCAND] = {"none", "f32", "f64mul", "f64div", "library"};

typedef struct ctx {
    const cxs_dataset *ds;
    uint32_t D, k;
    size_t W;
    const uint64_t *frames;
    float *out;
    const float *m32, *s32;
    const double *m64, *s64, *sd64;
} ctx;

static void norm_rows(int cand, const ctx *c, float *r, size_t rows) {
    const uint32_t D = c->D;
    switch (cand) {
    case F32:
        for (size_t i = 0; i < rows; i++, r += D)
            for (uint32_t d = 0; d < D; d++) r[d] = (r[d] - c->m32[d]) * c->s32[d];
        break;
    case F64MUL:
        for (size_t i = 0; i < rows; i++, r += D)
            for (uint32_t d = 0; d < D; d++) r[d] = (float)(((double)r[d] - c->m64[d]) * c->s64[d]);
        break;
    case F64DIV:
        for (size_t i = 0; i < rows; i++, r += D)
            for (uint32_t d = 0; d < D; d++) r[d] = (float)(((double)r[d] - c->m64[d]) / c->sd64[d]);
        break;
    default:
        break;
    }
}

/* One batch of B windows, as gather.c does it for a float32 dataset. */
static void batch(int cand, const ctx *c, size_t B) {
    if (cand == LIB) {
        if (cxs_dataset_gather(c->ds, c->frames, B, c->k, CXS_GATHER_NORMALIZE, 1, c->out, NULL))
            exit(1);
        return;
    }
    for (size_t i = 0; i < B; i++) {
        uint64_t u, t;
        cxs_utterance ut;
        cxs_dataset_locate(c->ds, c->frames[i], &u, &t);
        cxs_dataset_utterance(c->ds, u, &ut);
        int64_t T = (int64_t)ut.num_frames, lo = (int64_t)t - c->k, hi = (int64_t)t + c->k;
        int64_t a = lo < 0 ? 0 : lo, b = hi >= T ? T - 1 : hi;
        float *o = c->out + i * c->W;
        size_t zlo = (size_t)(a - lo), rows = (size_t)(b - a + 1), zhi = (size_t)(hi - b);
        memset(o, 0, zlo * c->D * sizeof *o);
        float *r = o + zlo * c->D;
        memcpy(r, (const float *)ut.features + (size_t)a * c->D, rows * c->D * sizeof *r);
        norm_rows(cand, c, r, rows);
        memset(r + rows * c->D, 0, zhi * c->D * sizeof *o);
    }
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: norm_bench DATASET K BATCH BATCHES REPEATS\n");
        return 2;
    }
    uint32_t k = (uint32_t)atoi(argv[2]);
    size_t B = (size_t)atoll(argv[3]);
    uint64_t batches = (uint64_t)atoll(argv[4]);
    int reps = atoi(argv[5]);
    cxs_dataset *ds;
    cxs_diag dg;
    if (cxs_dataset_open(argv[1], &ds, &dg)) {
        fprintf(stderr, "%s\n", dg.message);
        return 1;
    }
    cxs_info in;
    cxs_dataset_info(ds, &in);
    cxs_stats st;
    cxs_dataset_stats(ds, &st);
    if (in.dtype != CXS_DTYPE_F32 || in.compression || !st.mean) {
        fprintf(stderr, "norm_bench wants an uncompressed float32 dataset with statistics\n");
        return 1;
    }
    const uint32_t D = in.dim;
    float *m32 = malloc(D * sizeof *m32), *s32 = malloc(D * sizeof *s32);
    double *m64 = malloc(D * sizeof *m64), *s64 = malloc(D * sizeof *s64),
           *sd64 = malloc(D * sizeof *sd64);
    for (uint32_t d = 0; d < D; d++) {
        double sd = st.var[d] > 0 ? sqrt(st.var[d]) : 1.0;
        m64[d] = st.mean[d];
        sd64[d] = sd;
        s64[d] = st.var[d] > 0 ? 1.0 / sd : 1.0;
        m32[d] = (float)m64[d];
        s32[d] = (float)s64[d];
    }
    const size_t W = (2 * (size_t)k + 1) * D;
    uint64_t nsamp = batches * B;
    uint64_t *frames = malloc(nsamp * sizeof *frames);
    cxs_sampler *s;
    cxs_sampler_opts so = {.kind = CXS_SAMPLER_SHUFFLE, .seed = 1, .world_size = 1};
    if (cxs_sampler_create(ds, &so, &s) || cxs_sampler_get(s, 0, 0, nsamp, frames)) return 1;
    float *out = malloc(B * W * sizeof *out), *ref = malloc(B * W * sizeof *ref);
    ctx c = {ds, D, k, W, frames, out, m32, s32, m64, s64, sd64};

    /* Accuracy: elements of the first batch where f32 / f64div differ from f64mul. */
    batch(F64MUL, &c, B);
    memcpy(ref, out, B * W * sizeof *out);
    size_t diff[NCAND] = {0};
    for (int cand = F32; cand < NCAND; cand++) {
        if (cand == F64MUL) continue;
        batch(cand, &c, B);
        for (size_t i = 0; i < B * W; i++) diff[cand] += memcmp(&out[i], &ref[i], 4) != 0;
    }

    double *t[NCAND];
    for (int cand = 0; cand < NCAND; cand++) t[cand] = malloc((size_t)reps * sizeof(double));
    volatile float sink = 0;
    for (int r = 0; r < reps; r++)
        for (int j = 0; j < NCAND; j++) {
            int cand = (j + r) % NCAND; /* rotate the order every repetition */
            double t0 = now();
            for (uint64_t b = 0; b < batches; b++) {
                c.frames = frames + b * B;
                batch(cand, &c, B);
                sink += out[(B - 1) * W];
            }
            t[cand][r] = (now() - t0) / (double)nsamp * 1e9;
        }
    double base = median(t[NONE], reps);
    printf("dataset %s: %llu frames, D=%u, k=%u, B=%zu, %llu batches x %d repetitions\n",
           argv[1], (unsigned long long)in.num_frames, D, k, B, (unsigned long long)batches, reps);
    printf("%-8s %12s %10s %22s\n", "variant", "ns/window", "vs none", "elements != f64mul");
    for (int cand = 0; cand < NCAND; cand++) {
        double m = median(t[cand], reps);
        printf("%-8s %12.1f %9.3fx", names[cand], m, m / base);
        if (cand == NONE || cand == F64MUL) printf(" %22s\n", "-");
        else printf(" %13zu of %zu\n", diff[cand], B * W);
    }
    cxs_sampler_free(s);
    cxs_dataset_close(ds);
    return 0;
}
