/* first_stages.c - where the time from open to the first batch goes, from
 * C, in one fresh process: each stage's wall time and minor faults, for
 * the utterance loader (open, sampler create, the epoch's plan, loader
 * create, first batch) or the shuffled frame loader (open, sampler create,
 * loader create, first batch); the CPU time of each too (all threads), which
 * the load of a shared machine changes less than the wall time.  bench/many_utts.py --stages runs it.
 *
 *   first_stages DATASET utt|frame [FRAME_BUDGET]   -> one JSON line */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "ctxshard.h"

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

static long minflt(void) {
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return r.ru_minflt;
}

/* CPU time of the process (every thread), user + system: what a stage
 * costs whatever the machine's load (its wall time also waits for a CPU). */
static double cpu_ms(void) {
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return (r.ru_utime.tv_sec + r.ru_stime.tv_sec) * 1e3 +
           (r.ru_utime.tv_usec + r.ru_stime.tv_usec) * 1e-3;
}

static double t_last, c_last;
static long f_last;
static int nstage;

static void stage(const char *name) {
    double t = now_ms(), c = cpu_ms();
    long f = minflt();
    printf("%s\"%s_ms\": %.3f, \"%s_cpu_ms\": %.3f, \"%s_minflt\": %ld", nstage++ ? ", " : "{",
           name, t - t_last, name, c - c_last, name, f - f_last);
    t_last = now_ms();
    c_last = cpu_ms();
    f_last = minflt();
}

static int fail(const char *what, const cxs_diag *d) {
    fprintf(stderr, "first_stages: %s: %s\n", what, d ? d->message : "failed");
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 3 || (strcmp(argv[2], "utt") && strcmp(argv[2], "frame"))) {
        fprintf(stderr, "usage: first_stages DATASET utt|frame [FRAME_BUDGET]\n");
        return 2;
    }
    const int utt = !strcmp(argv[2], "utt");
    const uint64_t budget = argc > 3 ? strtoull(argv[3], NULL, 10) : 4096;
    cxs_diag d;
    cxs_dataset *ds;
    const double t0 = now_ms();
    t_last = t0;
    c_last = cpu_ms();
    f_last = minflt();
    if (cxs_dataset_open(argv[1], &ds, &d)) return fail("open", &d);
    stage("open");
    if (utt) {
        cxs_utt_sampler_opts so = {.kind = CXS_UTT_SHUFFLE, .frame_budget = budget};
        cxs_utt_sampler *s;
        if (cxs_utt_sampler_create(ds, &so, &s, &d)) return fail("sampler", &d);
        stage("sampler");
        uint64_t global, len;
        if (cxs_utt_sampler_length(s, 0, &global, &len)) return fail("plan", NULL);
        stage("plan");
        cxs_utt_loader_opts o = {0};
        cxs_utt_loader *l;
        if (cxs_utt_loader_create_ex(ds, s, &o, 0, 0, &l, &d)) return fail("loader", &d);
        stage("loader");
        const cxs_utt_batch *b;
        if (cxs_utt_loader_next_ex(l, &b, &d) || !b) return fail("next", &d);
        stage("first");
        printf(", \"total_ms\": %.3f, \"batches\": %llu", now_ms() - t0, (unsigned long long)global);
        cxs_utt_loader_free(l);
        cxs_utt_sampler_free(s);
    } else {
        cxs_sampler_opts so = {.kind = CXS_SAMPLER_SHUFFLE};
        cxs_sampler *s;
        if (cxs_sampler_create_ex(ds, &so, &s, &d)) return fail("sampler", &d);
        stage("sampler");
        cxs_loader_opts o = {.k = 4, .batch_size = 1024, .labels = 0};
        cxs_loader *l;
        if (cxs_loader_create_ex(ds, s, &o, 0, 0, &l, &d)) return fail("loader", &d);
        stage("loader");
        const cxs_batch *b;
        if (cxs_loader_next_ex(l, &b, &d) || !b) return fail("next", &d);
        stage("first");
        printf(", \"total_ms\": %.3f", now_ms() - t0);
        cxs_loader_free(l);
        cxs_sampler_free(s);
    }
    printf("}\n");
    cxs_dataset_close(ds);
    return 0;
}
