/* writer_bench.c - the C writer on many tiny utterances (issue 28): N
 * utterances of 8 frames x 4 float32 dimensions, features only, guard 4,
 * block sums on (the default), ids "u0000000000" ... made before the clock
 * starts.  Times cxs_writer_create to the end of cxs_writer_commit and
 * prints "SECONDS UTTERANCES_PER_S".  bench/writer_speed.py runs it
 * interleaved with the Python Writer and with another build's copy.
 *
 * usage: writer_bench OUT N [add|many] [BATCH (4096)]
 *        writer_bench OUT N part I P
 *   add   one cxs_writer_add per utterance
 *   many  cxs_writer_add_many, BATCH utterances a call
 *   part  part I of P of the N-utterance dataset (cxs_writer_opts.part),
 *         its utterances in one shard, for `ctxshard merge` to join
 *         (bench/many_tools.sh: the merge at millions of utterances)
 * Built without WRITER_BENCH_ADD_ONLY; with it (for a library older than
 * cxs_writer_add_many) only "add" exists. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctxshard_writer.h"

enum { T = 8, D = 4, ID_LEN = 11 };

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: writer_bench OUT N [add|many] [BATCH] | OUT N part I P\n");
        return 2;
    }
    const char *out = argv[1];
    size_t n = strtoull(argv[2], NULL, 10);
    int many = argc > 3 && strcmp(argv[3], "many") == 0;
    int part = argc > 5 && strcmp(argv[3], "part") == 0;
    size_t batch = argc > 4 && !part ? strtoull(argv[4], NULL, 10) : 4096;
    uint32_t pi = part ? (uint32_t)strtoul(argv[4], NULL, 10) : 0;
    uint32_t pn = part ? (uint32_t)strtoul(argv[5], NULL, 10) : 0;
    if (part && (pi < 1 || pi > pn)) return 2;
#ifdef WRITER_BENCH_ADD_ONLY
    if (many) {
        fprintf(stderr, "writer_bench: built without cxs_writer_add_many\n");
        return 2;
    }
#endif
    if (n == 0 || n >= 10000000000ull || batch == 0) return 2;
    char *idtext = malloc(n * (ID_LEN + 1));
    const char **ids = malloc(n * sizeof *ids);
    cxs_writer_utt *u = calloc(batch, sizeof *u);
    float x[T * D];
    if (!idtext || !ids || !u) return 1;
    for (size_t i = 0; i < n; i++) {
        char id[32];
        snprintf(id, sizeof id, "u%010zu", i);
        memcpy(idtext + i * (ID_LEN + 1), id, ID_LEN + 1);
        ids[i] = idtext + i * (ID_LEN + 1);
    }
    for (int i = 0; i < T * D; i++) x[i] = (float)i * 0.25f - 3.0f;
    for (size_t i = 0; i < batch; i++) {
        u[i].data = x;
        u[i].frames = T;
        u[i].dim = D;
        u[i].type = CXS_DTYPE_F32;
    }
    cxs_writer_opts o;
    cxs_writer_opts_init(&o);
    o.guard = 4;
    o.dim = D;
    /* A part: the utterances [n(I-1)/P, nI/P), shard I-1 of P. */
    size_t from = 0, to = n;
    cxs_writer_part pt = {0};
    if (part) {
        from = n * (pi - 1) / pn;
        to = n * pi / pn;
        pt = (cxs_writer_part){pi, pn, pi - 1, pi, pn, from, (uint64_t)from * T, n, from, to,
                               0x5eedull * n};
        o.part = &pt;
        o.flags |= CXS_WRITER_MANUAL_CUT;
    }
    cxs_writer *w = NULL; /* abort(NULL) is a no-op when create fails */
    cxs_diag d;
    double t0 = now();
    int rc = cxs_writer_create(out, &o, &w, &d);
    for (size_t i = from; i < to && !rc;) {
        size_t k = to - i < batch ? to - i : batch;
#ifndef WRITER_BENCH_ADD_ONLY
        if (many) {
            rc = cxs_writer_add_many(w, ids + i, u, k, NULL, &d);
            i += k;
            continue;
        }
#endif
        rc = cxs_writer_add(w, ids[i], u, &d);
        i++;
    }
    if (!rc) rc = cxs_writer_commit(w, NULL, &d);
    else cxs_writer_abort(w);
    double dt = now() - t0;
    if (rc) {
        fprintf(stderr, "writer_bench: %s\n", d.message);
        return 1;
    }
    printf("%.6f %.0f\n", dt, (double)(to - from) / dt);
    free(idtext);
    free(ids);
    free(u);
    return 0;
}
