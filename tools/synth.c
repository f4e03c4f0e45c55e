/* synth.c - `ctxshard synth`: a deterministic HW1P2-style raw dataset.
 *
 * Utterance lengths are log-normal around 1,270 frames, clipped to
 * 100..3,500 (LibriSpeech-like); phonemes follow a Zipf-like distribution
 * with [SIL] the most frequent, in runs of a few frames; features are a
 * per-phoneme mean plus a per-utterance (speaker) offset plus noise, so a
 * frame classifier can learn them.  Every utterance is generated from
 * (seed, index) alone.  Transcripts are per frame (HW1P2: [SOS], the label of
 * every frame, [EOS]) or, with --transcripts sequence, the utterance's
 * phoneme sequence (HW3P2: [SOS], the label of every run of frames once,
 * [EOS]), which a sequence model can learn from the features. */
#include "synth.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cxs_le.h"
#include "ctxshard_import.h"
#include "cxs_npy.h"
#include "util.h"

/* [SIL] and the 39 phonemes of the library's list (cxs_phonemes: the
 * vocabulary pack uses), without its last two, [SOS] and [EOS], which
 * stand only at the ends. */
#define NPHONES 40

typedef struct rng {
    uint64_t s;
} rng;

static uint64_t next64(rng *r) { /* splitmix64 */
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double uniform(rng *r) { return (double)(next64(r) >> 11) * 0x1.0p-53; }

static double gauss(rng *r) {
    double u = uniform(r), v = uniform(r);
    if (u < 1e-300) u = 1e-300;
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

static int write_file(const char *path, const void *a, size_t na, const void *b, size_t nb) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return -errno;
    int rc = write_all(fd, a, na);
    if (!rc) rc = write_all(fd, b, nb);
    if (close(fd) && !rc) rc = -errno;
    return rc;
}

/* Write dir/name; prints the error. */
static int write_in(const char *dir, const char *name, const void *a, size_t na, const void *b,
                    size_t nb) {
    char *fp = path_join(dir, name);
    int rc = fp ? write_file(fp, a, na, b, nb) : -ENOMEM;
    if (rc) warnx_("%s/%s: %s", dir, name, strerror(-rc));
    free(fp);
    return rc;
}

int synth_run(const char *root, const synth_opts *o) {
    const char *const *phones = cxs_phonemes(NULL);
    struct stat st;
    if (stat(root, &st) == 0) {
        if (!S_ISDIR(st.st_mode) || rmdir(root) != 0) {
            warnx_("%s: exists and is not empty; synth writes into a new directory", root);
            return EXIT_USAGE;
        }
    }
    char *md = path_join(root, "mfcc"), *td = path_join(root, "transcript");
    if (!md || !td) return EXIT_SYSTEM;
    /* Parents first, like mkdir -p. */
    for (char *p = md + 1; *p && p < md + strlen(root); p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(md, 0755) != 0 && errno != EEXIST) {
                warnx_("%s: %s", md, strerror(errno));
                free(md);
                free(td);
                return EXIT_SYSTEM;
            }
            *p = '/';
        }
    if (mkdir(root, 0755) || mkdir(md, 0755) || (o->transcripts && mkdir(td, 0755))) {
        warnx_("%s: %s", root, strerror(errno));
        free(md);
        free(td);
        return EXIT_SYSTEM;
    }
    const uint32_t D = o->dim;
    /* Dataset-wide structure from the seed: phoneme means and frequencies. */
    rng g = {o->seed * 0x2545f4914f6cdd1dull + 1};
    double *means = malloc(sizeof(double) * NPHONES * D);
    double cdf[NPHONES], total = 0;
    float *feat = NULL;
    double *feat64 = NULL;
    uint32_t *trans = NULL;
    uint8_t *lab = NULL;
    int ec = 0;
    if (!means) return EXIT_SYSTEM;
    for (int p = 0; p < NPHONES; p++)
        for (uint32_t d = 0; d < D; d++)
            means[p * D + d] = gauss(&g) * (d == 0 ? 1.5 : 0.45) + (d == 0 ? 12.0 : 0.0);
    for (int p = 0; p < NPHONES; p++) {
        total += p == 0 ? 3.0 : 1.0 / pow((double)p, 0.8);
        cdf[p] = total;
    }
    const size_t maxT = 3500;
    feat = malloc(maxT * D * sizeof *feat);
    feat64 = malloc(maxT * D * sizeof *feat64);
    trans = malloc((maxT + 2) * 5 * sizeof *trans);
    lab = malloc(maxT);
    if (!feat || !feat64 || !trans || !lab) {
        ec = EXIT_SYSTEM;
        goto out;
    }
    uint64_t frames = 0;
    for (uint64_t i = o->offset; i < o->offset + o->utts; i++) {
        rng r = {o->seed * 0x9e3779b97f4a7c15ull ^ (i + 1) * 0xd1b54a32d192ed03ull};
        next64(&r);
        double len = exp(log(1200.0) + 0.35 * gauss(&r));
        size_t T = len < 100 ? 100 : len > 3500 ? 3500 : (size_t)(len + 0.5);
        /* Phoneme runs, silence at both ends. */
        size_t t = 0;
        while (t < T) {
            int p;
            size_t run;
            if (t == 0 || T - t < 12) {
                p = 0;
                run = t == 0 ? 10 + (size_t)(uniform(&r) * 20) : T - t;
            } else {
                double x = uniform(&r) * total;
                p = 0;
                while (p < NPHONES - 1 && cdf[p] < x) p++;
                run = 2 + (size_t)(-log(1.0 - uniform(&r)) * 5.0);
            }
            for (size_t j = 0; j < run && t < T; j++) lab[t++] = (uint8_t)p;
        }
        double spk[256];
        for (uint32_t d = 0; d < D && d < 256; d++) spk[d] = 0.8 * gauss(&r);
        for (size_t f = 0; f < T; f++)
            for (uint32_t d = 0; d < D; d++) {
                double v = means[lab[f] * D + d] + spk[d % 256] + gauss(&r);
                feat64[f * D + d] = v;
                feat[f * D + d] = (float)v;
            }
        char id[64], name[96];
        snprintf(id, sizeof id, "%u-%u-%04u", (unsigned)(19 + 17 * (i / 64)),
                 (unsigned)(100000 + 331 * (i / 16)), (unsigned)(i % 16));
        char hdr[256];
        uint64_t shape[2] = {T, D};
        size_t hl = cxs_npy_header(hdr, sizeof hdr, o->f64 ? "<f8" : "<f4", 2, shape);
        snprintf(name, sizeof name, "%s.npy", id);
        if (write_in(md, name, hdr, hl, o->f64 ? (void *)feat64 : (void *)feat,
                     T * D * (o->f64 ? 8 : 4))) {
            ec = EXIT_SYSTEM;
            goto out;
        }
        if (o->transcripts) {
            /* '<U5': five UTF-32LE code units per symbol, zero-padded. */
            memset(trans, 0, (T + 2) * 20);
            /* The symbols between the markers: every frame's label, or
             * (sequence) every run's once. */
            size_t n = 0;
            for (size_t f = 0; f < T; f++)
                if (o->transcripts != 2 || f == 0 || lab[f] != lab[f - 1]) lab[n++] = lab[f];
            for (size_t j = 0; j < n + 2; j++) {
                const char *s = j == 0 ? "[SOS]" : j == n + 1 ? "[EOS]" : phones[lab[j - 1]];
                for (size_t c = 0; s[c] && c < 5; c++) cxs_st32((uint8_t *)&trans[j * 5 + c], (uint8_t)s[c]);
            }
            uint64_t ts[1] = {n + 2};
            hl = cxs_npy_header(hdr, sizeof hdr, "<U5", 1, ts);
            if (write_in(td, name, hdr, hl, trans, (n + 2) * 20)) {
                ec = EXIT_SYSTEM;
                goto out;
            }
        }
        frames += T;
    }
    if (!o->quiet)
        printf("synthesised %llu utterance%s, %llu frames x %u dims (%s%s) in %s\n",
               (unsigned long long)o->utts, o->utts == 1 ? "" : "s", (unsigned long long)frames, D,
               o->f64 ? "float64" : "float32", o->transcripts == 2   ? ", with sequence transcripts"
               : o->transcripts ? ", with transcripts"
                                : "",
               root);
out:
    free(means);
    free(feat);
    free(feat64);
    free(trans);
    free(lab);
    free(md);
    free(td);
    return ec;
}
