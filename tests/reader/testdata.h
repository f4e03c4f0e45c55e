/* testdata.h - datasets for the library's tests, made through the library's
 * own writer (lib/ tests need no command): deterministic synthetic speech
 * of LibriSpeech-like lengths (log-normal around 1,200 frames, 100..3,500),
 * phoneme runs of 2 frames and more, features near their phoneme's mean.
 * Header-only: include it in one test program. */
#ifndef CXS_TESTDATA_H
#define CXS_TESTDATA_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "ctxshard_writer.h"

#define TD_PHONES 40

typedef struct td_opts {
    uint32_t utts, dim, guard; /* guard 0: the writer's default */
    uint64_t seed;
    uint64_t shard_size;       /* 0: the writer's default */
    uint32_t compression;      /* CXS_COMPRESSION_* */
    uint64_t chunk_size;       /* 0: the writer's default */
    uint32_t label_seqs;       /* CXS_SEQ_*: the runs of the frame labels */
    uint32_t flags;            /* CXS_WRITER_* besides (CXS_WRITER_NO_BLOCK_SUMS) */
} td_opts;

static uint64_t td_next(uint64_t *s) { /* xorshift64* */
    *s ^= *s >> 12, *s ^= *s << 25, *s ^= *s >> 27;
    return *s * 0x2545f4914f6cdd1dull;
}
static double td_uniform(uint64_t *s) { return (double)(td_next(s) >> 11) / 9007199254740992.0; }
static double td_gauss(uint64_t *s) {
    double u = td_uniform(s), v = td_uniform(s);
    return sqrt(-2.0 * log(u > 0 ? u : 1e-300)) * cos(6.283185307179586 * v);
}

/* Write the dataset at out; 0 or the writer's code, its message on stderr. */
static int td_make(const char *out, const td_opts *o) {
    static char names[TD_PHONES][8];
    const char *vocab[TD_PHONES];
    for (int p = 0; p < TD_PHONES; p++) {
        snprintf(names[p], sizeof names[p], "P%02d", p);
        vocab[p] = names[p];
    }
    cxs_writer_opts wo;
    cxs_writer_opts_init(&wo);
    if (o->guard) wo.guard = o->guard;
    if (o->shard_size) wo.shard_size = o->shard_size;
    if (o->chunk_size) wo.chunk_size = o->chunk_size;
    wo.compression = o->compression;
    wo.vocab_size = TD_PHONES;
    wo.vocab = vocab;
    wo.label_seqs = o->label_seqs;
    wo.flags |= o->flags;
    cxs_diag d = {0};
    cxs_writer *w;
    int rc = cxs_writer_create(out, &wo, &w, &d);
    if (rc) {
        fprintf(stderr, "%s\n", d.message);
        return rc;
    }
    uint64_t s = o->seed * 0x9e3779b97f4a7c15ull + 1;
    double *means = malloc(sizeof *means * TD_PHONES * o->dim);
    float *x = malloc(sizeof *x * 3500 * o->dim);
    uint8_t *lab = malloc(3500), *seq = malloc(3500);
    if (!means || !x || !lab || !seq) rc = -12;
    for (uint32_t i = 0; !rc && i < TD_PHONES * o->dim; i++) means[i] = 2.0 * td_gauss(&s);
    for (uint32_t u = 0; !rc && u < o->utts; u++) {
        double len = exp(log(1200.0) + 0.35 * td_gauss(&s));
        uint64_t T = len < 100 ? 100 : len > 3500 ? 3500 : (uint64_t)(len + 0.5), n = 0;
        for (uint64_t t = 0; t < T;) {
            uint8_t p = (uint8_t)(td_next(&s) % TD_PHONES);
            uint64_t run = 2 + (uint64_t)(-log(1.0 - td_uniform(&s)) * 5.0);
            if (!n || seq[n - 1] != p) seq[n++] = p;
            for (uint64_t j = 0; j < run && t < T; j++) lab[t++] = p;
        }
        for (uint64_t t = 0; t < T; t++)
            for (uint32_t k = 0; k < o->dim; k++)
                x[t * o->dim + k] = (float)(means[lab[t] * o->dim + k] + td_gauss(&s));
        cxs_writer_utt wu = {.data = x, .frames = T, .dim = o->dim, .type = CXS_DTYPE_F32,
                             .labels = o->label_seqs == CXS_SEQ_ONLY ? NULL : lab,
                             .label_count = o->label_seqs == CXS_SEQ_ONLY ? 0 : T,
                             .label_size = 1,
                             .seq = o->label_seqs ? seq : NULL,
                             .seq_count = o->label_seqs ? n : 0,
                             .seq_size = 1};
        char id[32];
        snprintf(id, sizeof id, "utt-%06u", u);
        if ((rc = cxs_writer_add(w, id, &wu, &d))) fprintf(stderr, "%s\n", d.message);
    }
    free(means);
    free(x);
    free(lab);
    free(seq);
    if (rc) {
        cxs_writer_abort(w);
        return rc;
    }
    cxs_writer_info wi;
    if ((rc = cxs_writer_commit(w, &wi, &d))) fprintf(stderr, "%s\n", d.message);
    return rc;
}

#endif
