/* qserve_bench.c - serving coded features (q8, q16: format 1.4) against
 * float32, side by side: the same synthetic speech written three times by
 * the library's writer (float32, q8, q16), then, round after round with
 * the datasets in turn, the first BATCHES batches of a shuffled epoch, of
 * one in block order and of one in storage order (sequential: windows
 * overlapping their neighbours) through the frame loader (1 thread, k,
 * batch B),
 * and a shuffled epoch's through the utterance loader
 * (1 thread, bucketed batches of about 20,000 frames, BATCHES of them or
 * the epoch).  The dataset is read into the page cache again before every
 * measurement: block order lets go of the blocks it is done with
 * (POSIX_FADV_DONTNEED), and a measurement after it would read them from
 * disk.  Prints the medians of
 * samples (frames) per second, the median of each round's ratio to
 * float32, the bytes of each dataset and the load average.
 *
 * usage: qserve_bench DIR UTTS DIM K B BATCHES ROUNDS
 *   DIR is created (or reused when it already holds the three datasets).
 *
 * usage: qserve_bench cold DATASET K B MEMORY
 *   One dataset (of those DIR holds), nothing warmed: two epochs of the
 *   frame loader in block order (1 thread, memory_bytes MEMORY), and of
 *   the second, the steady state of training, the samples per second, the
 *   bytes read from storage and the CPU seconds (one line): what
 *   bench/qserve_cold.sh runs in a memory cgroup where the float32 copy
 *   does not fit the page cache and q8 does.
 *
 * usage: qserve_bench gather DATASET K B BATCHES ROUNDS
 *   One dataset, warm: the gather alone (cxs_dataset_gather, 1 thread, no
 *   loader), BATCHES batches of B windows in each of the three orders
 *   (shuffle, block with memory 64 MiB, sequential), ROUNDS rounds; the
 *   median CPU time of the calling thread a window (ns), which the other
 *   processes of a loaded machine disturb less than a rate: what
 *   bench/qserve_gather.sh runs against two builds of the library. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "bench_clock.h"
#include "ctxshard.h"
#include "ctxshard_writer.h"

#define NDT 3
static const uint32_t dts[NDT] = {CXS_DTYPE_F32, CXS_DTYPE_Q8, CXS_DTYPE_Q16};
static const char *names[NDT] = {"float32", "q8", "q16"};

static uint64_t rs = 88172645463325252ull;
static double gauss(void) {
    double u[2];
    for (int i = 0; i < 2; i++) {
        rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
        u[i] = ((double)(rs >> 11) + 0.5) / 9007199254740992.0;
    }
    return sqrt(-2.0 * log(u[0])) * cos(6.283185307179586 * u[1]);
}

/* Speech-like features: log-normal lengths around 1,200 frames, phoneme
 * runs, values near their phoneme's mean (as tests/reader/testdata.h). */
static int make(const char *out, uint32_t dtype, uint32_t utts, uint32_t D) {
    static char nm[40][8];
    const char *vocab[40];
    for (int p = 0; p < 40; p++) snprintf(nm[p], 8, "P%02d", p), vocab[p] = nm[p];
    cxs_writer_opts wo;
    cxs_writer_opts_init(&wo);
    wo.dtype = dtype;
    wo.vocab_size = 40;
    wo.vocab = vocab;
    cxs_writer *w;
    cxs_diag d = {0};
    if (cxs_writer_create(out, &wo, &w, &d)) return fprintf(stderr, "%s\n", d.message), 1;
    rs = 88172645463325252ull; /* the same data for every dtype */
    double *means = malloc(sizeof *means * 40 * D);
    float *x = malloc(sizeof *x * 3500 * D);
    uint8_t lab[3500];
    for (uint32_t i = 0; i < 40 * D; i++) means[i] = 2.0 * gauss();
    for (uint32_t u = 0; u < utts; u++) {
        double len = exp(log(1200.0) + 0.35 * gauss());
        uint64_t T = len < 100 ? 100 : len > 3500 ? 3500 : (uint64_t)len;
        for (uint64_t t = 0; t < T;) {
            uint8_t p = (uint8_t)(fabs(gauss()) * 13) % 40;
            for (int j = 0; j < 6 && t < T; j++) lab[t++] = p;
        }
        for (uint64_t t = 0; t < T; t++)
            for (uint32_t k = 0; k < D; k++) x[t * D + k] = (float)(means[lab[t] * D + k] + gauss());
        cxs_writer_utt wu = {.data = x, .frames = T, .dim = D, .type = CXS_DTYPE_F32,
                             .labels = lab, .label_count = T, .label_size = 1};
        char id[32];
        snprintf(id, sizeof id, "u%07u", u);
        if (cxs_writer_add(w, id, &wu, &d)) return fprintf(stderr, "%s\n", d.message), 1;
    }
    free(means);
    free(x);
    cxs_writer_info wi;
    if (cxs_writer_commit(w, &wi, &d)) return fprintf(stderr, "%s\n", d.message), 1;
    return 0;
}

/* kind: CXS_SAMPLER_SHUFFLE, CXS_SAMPLER_SEQUENTIAL, or CXS_SAMPLER_BLOCK
 * (memory 64 MiB, the default 8 blocks) */
static double frame_rate(const cxs_dataset *ds, uint32_t kind, uint32_t k, uint32_t B, int batches,
                         uint64_t seed) {
    cxs_sampler_opts so;
    cxs_sampler_opts_init(&so);
    so.kind = kind;
    so.seed = seed;
    if (kind == CXS_SAMPLER_BLOCK) so.memory_bytes = 64u << 20;
    cxs_sampler *s;
    if (cxs_sampler_create_ex(ds, &so, &s, NULL)) exit(1);
    cxs_loader_opts lo;
    cxs_loader_opts_init(&lo);
    lo.k = k, lo.batch_size = B, lo.threads = 1, lo.labels = 1;
    cxs_loader *l;
    if (cxs_loader_create(ds, s, &lo, 0, 0, &l)) exit(1);
    const cxs_batch *b;
    if (cxs_loader_next(l, &b)) exit(1); /* the ring started */
    double t0 = now();
    uint64_t n = 0;
    for (int i = 0; i < batches && !cxs_loader_next(l, &b) && b && b->n; i++) n += b->n;
    double r = (double)n / (now() - t0);
    cxs_loader_free(l);
    cxs_sampler_free(s);
    return r;
}

static double utt_rate(const cxs_dataset *ds, int batches, uint64_t seed) {
    cxs_utt_sampler_opts so = {.kind = CXS_UTT_SHUFFLE, .seed = seed, .frame_budget = 20000};
    cxs_utt_sampler *s;
    if (cxs_utt_sampler_create(ds, &so, &s, NULL)) exit(1);
    cxs_utt_loader_opts lo = {.threads = 1, .labels = 1};
    cxs_utt_loader *l;
    if (cxs_utt_loader_create(ds, s, &lo, 0, 0, &l)) exit(1);
    const cxs_utt_batch *b;
    if (cxs_utt_loader_next(l, &b)) exit(1);
    double t0 = now();
    uint64_t n = 0;
    for (int i = 0; i < batches && !cxs_utt_loader_next(l, &b) && b && b->n; i++) n += b->frames;
    double r = (double)n / (now() - t0);
    cxs_utt_loader_free(l);
    cxs_utt_sampler_free(s);
    return r;
}

/* Bytes this process had read from storage (/proc/self/io read_bytes:
 * what the page cache did not have), or 0 where the kernel does not say. */
static double storage_read(void) {
    FILE *f = fopen("/proc/self/io", "r");
    char line[128];
    double v = 0;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "read_bytes:", 11)) v = atof(line + 11);
    if (f) fclose(f);
    return v;
}

/* Two epochs in block order; the second's rate, the bytes it read from
 * storage and the process's CPU seconds in it. */
static int cold(const char *path, uint32_t k, uint32_t B, uint64_t memory) {
    cxs_dataset *ds;
    cxs_diag dg = {0};
    if (cxs_dataset_open(path, &ds, &dg)) return fprintf(stderr, "%s\n", dg.message), 1;
    cxs_sampler_opts so;
    cxs_sampler_opts_init(&so);
    so.kind = CXS_SAMPLER_BLOCK;
    so.seed = 1;
    so.memory_bytes = memory;
    cxs_sampler *s;
    if (cxs_sampler_create_ex(ds, &so, &s, &dg)) return fprintf(stderr, "%s\n", dg.message), 1;
    cxs_loader_opts lo;
    cxs_loader_opts_init(&lo);
    lo.k = k, lo.batch_size = B, lo.threads = 1, lo.labels = 1;
    double rate = 0, disk = 0, cpu = 0;
    for (uint64_t epoch = 0; epoch < 2; epoch++) {
        cxs_loader *l;
        if (cxs_loader_create(ds, s, &lo, epoch, 0, &l)) return 1;
        const cxs_batch *b;
        uint64_t n = 0;
        const double t0 = now(), r0 = storage_read();
        struct timespec c0, c1;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
        while (!cxs_loader_next(l, &b) && b && b->n) n += b->n;
        rate = (double)n / (now() - t0);
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
        disk = storage_read() - r0;
        cpu = (double)(c1.tv_sec - c0.tv_sec) + (c1.tv_nsec - c0.tv_nsec) * 1e-9;
        cxs_loader_free(l);
    }
    printf("%.0f %.0f %.2f\n", rate, disk, cpu);
    cxs_sampler_free(s);
    cxs_dataset_close(ds);
    return 0;
}

static double thread_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The gather alone, in the sampler's orders: CPU ns a window, medians. */
static int gather(const char *path, uint32_t k, uint32_t B, int batches, int rounds) {
    cxs_dataset *ds;
    cxs_diag dg = {0};
    if (cxs_dataset_open(path, &ds, &dg)) return fprintf(stderr, "%s\n", dg.message), 1;
    cxs_info info;
    cxs_dataset_info(ds, &info);
    cxs_warm_result wr;
    if (cxs_dataset_warm(ds, 0, NULL, NULL, &wr, NULL)) return 1;
    static const uint32_t kinds[3] = {CXS_SAMPLER_SHUFFLE, CXS_SAMPLER_BLOCK, CXS_SAMPLER_SEQUENTIAL};
    static const char *kn[3] = {"shuffle", "block", "sequential"};
    float *x = malloc((size_t)B * (2 * k + 1) * info.dim * sizeof *x);
    int64_t *y = malloc(B * sizeof *y);
    uint64_t *fr = malloc(B * sizeof *fr);
    double *ns = malloc(3 * (size_t)rounds * sizeof *ns);
    for (int r = 0; r < rounds; r++)
        for (int o = 0; o < 3; o++) {
            cxs_sampler_opts so;
            cxs_sampler_opts_init(&so);
            so.kind = kinds[o];
            so.seed = (uint64_t)r + 1;
            if (kinds[o] == CXS_SAMPLER_BLOCK) so.memory_bytes = 64u << 20;
            cxs_sampler *s;
            if (cxs_sampler_create_ex(ds, &so, &s, &dg)) return fprintf(stderr, "%s\n", dg.message), 1;
            double cpu = 0;
            uint64_t n = 0;
            for (int b = 0; b < batches; b++) {
                if (cxs_sampler_get(s, 0, (uint64_t)b * B, B, fr)) return 1;
                double t0 = thread_cpu();
                if (cxs_dataset_gather_ex(ds, fr, B, k, 0, NULL, 1, x, y, &dg))
                    return fprintf(stderr, "%s\n", dg.message), 1;
                cpu += thread_cpu() - t0;
                n += B;
            }
            ns[o * rounds + r] = cpu * 1e9 / (double)n;
            cxs_sampler_free(s);
        }
    printf("%s: gather k=%u B=%u, %d batches, %d rounds: CPU ns a window (median)", path, k, B,
           batches, rounds);
    for (int o = 0; o < 3; o++) printf("  %s %.0f", kn[o], median(&ns[o * rounds], rounds));
    printf("\n");
    free(x), free(y), free(fr), free(ns);
    cxs_dataset_close(ds);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 7 && !strcmp(argv[1], "gather"))
        return gather(argv[2], (uint32_t)atoi(argv[3]), (uint32_t)atoi(argv[4]), atoi(argv[5]),
                      atoi(argv[6]));
    if (argc == 6 && !strcmp(argv[1], "cold"))
        return cold(argv[2], (uint32_t)atoi(argv[3]), (uint32_t)atoi(argv[4]),
                    (uint64_t)atoll(argv[5]));
    if (argc != 8) {
        fprintf(stderr,
                "usage: %s DIR UTTS DIM K B BATCHES ROUNDS\n       %s cold DATASET K B MEMORY\n"
                "       %s gather DATASET K B BATCHES ROUNDS\n",
                argv[0], argv[0], argv[0]);
        return 2;
    }
    const char *dir = argv[1];
    const uint32_t utts = (uint32_t)atoi(argv[2]), D = (uint32_t)atoi(argv[3]);
    const uint32_t k = (uint32_t)atoi(argv[4]), B = (uint32_t)atoi(argv[5]);
    const int batches = atoi(argv[6]), rounds = atoi(argv[7]);
    mkdir(dir, 0777);
    cxs_dataset *ds[NDT];
    cxs_info info[NDT];
    for (int i = 0; i < NDT; i++) {
        char p[512];
        snprintf(p, sizeof p, "%s/%s-%u-%u", dir, names[i], utts, D);
        struct stat st;
        if (stat(p, &st) && make(p, dts[i], utts, D)) return 1;
        cxs_diag dg = {0};
        if (cxs_dataset_open(p, &ds[i], &dg)) return fprintf(stderr, "%s\n", dg.message), 1;
        cxs_dataset_info(ds[i], &info[i]);
        cxs_warm_result wr;
        if (cxs_dataset_warm(ds[i], 0, NULL, NULL, &wr, NULL)) return 1;
    }
    double *fr = calloc((size_t)NDT * rounds, sizeof *fr), *ur = calloc((size_t)NDT * rounds, sizeof *ur);
    double *frr = calloc((size_t)NDT * rounds, sizeof *frr), *urr = calloc((size_t)NDT * rounds, sizeof *urr);
    double *br = calloc((size_t)NDT * rounds, sizeof *br), *brr = calloc((size_t)NDT * rounds, sizeof *brr);
    double *sr = calloc((size_t)NDT * rounds, sizeof *sr), *srr = calloc((size_t)NDT * rounds, sizeof *srr);
    for (int r = 0; r < rounds; r++)
        for (int j = 0; j < NDT; j++) {
            const int i = (j + r) % NDT; /* each dtype first in turn */
            cxs_warm_result wr;
            if (cxs_dataset_warm(ds[i], 0, NULL, NULL, &wr, NULL)) return 1;
            fr[i * rounds + r] = frame_rate(ds[i], CXS_SAMPLER_SHUFFLE, k, B, batches, (uint64_t)r + 1);
            br[i * rounds + r] = frame_rate(ds[i], CXS_SAMPLER_BLOCK, k, B, batches, (uint64_t)r + 1);
            if (cxs_dataset_warm(ds[i], 0, NULL, NULL, &wr, NULL)) return 1;
            sr[i * rounds + r] = frame_rate(ds[i], CXS_SAMPLER_SEQUENTIAL, k, B, batches, (uint64_t)r + 1);
            ur[i * rounds + r] = utt_rate(ds[i], batches, (uint64_t)r + 1);
        }
    for (int i = 0; i < NDT; i++)
        for (int r = 0; r < rounds; r++) {
            frr[i * rounds + r] = fr[i * rounds + r] / fr[r];
            urr[i * rounds + r] = ur[i * rounds + r] / ur[r];
            brr[i * rounds + r] = br[i * rounds + r] / br[r];
            srr[i * rounds + r] = sr[i * rounds + r] / sr[r];
        }
    double load[3] = {0};
    FILE *fp = fopen("/proc/loadavg", "r");
    if (fp && fscanf(fp, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3) load[0] = -1;
    if (fp) fclose(fp);
    printf("%u utterances x %u dims, %llu frames; frame loader k=%u B=%u, %d batches; utterance "
           "loader ~20000 frames a batch, at most %d batches (an epoch); 1 thread each, warm; %d rounds, medians; "
           "load average %.2f %.2f %.2f\n",
           utts, D, (unsigned long long)info[0].num_frames, k, B, batches, batches, rounds,
           load[0], load[1], load[2]);
    printf("%-8s %14s %8s %12s %8s %12s %8s %12s %8s %12s %8s\n", "dtype", "feature bytes",
           "vs f32", "shuffle/s", "vs f32", "block/s", "vs f32", "sequential/s", "vs f32",
           "utt frames/s", "vs f32");
    for (int i = 0; i < NDT; i++) {
        double a = median(&fr[i * rounds], rounds), b = median(&frr[i * rounds], rounds);
        double c = median(&ur[i * rounds], rounds), e = median(&urr[i * rounds], rounds);
        double g = median(&br[i * rounds], rounds), h = median(&brr[i * rounds], rounds);
        double x = median(&sr[i * rounds], rounds), y = median(&srr[i * rounds], rounds);
        printf("%-8s %14llu %8.3f %12.0f %8.3f %12.0f %8.3f %12.0f %8.3f %12.0f %8.3f\n", names[i],
               (unsigned long long)info[i].stored_feature_bytes,
               (double)info[i].stored_feature_bytes / (double)info[0].stored_feature_bytes, a, b,
               g, h, x, y, c, e);
    }
    for (int i = 0; i < NDT; i++) cxs_dataset_close(ds[i]);
    return 0;
}
