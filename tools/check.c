/* check.c - `ctxshard check RAW`: every validation of the packer, through
 * the same read pipeline, without writing anything. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxshard.h"
#include "pack.h"
#include "pipeline.h"
#include "raw.h"
#include "util.h"

/* A problem's message may end in advice after its last "; " (what to run,
 * how to re-save the file).  A split where every utterance has the same
 * problem (an HW3P2 split checked as HW1P2) would repeat that advice once
 * per utterance: it is printed with the first such problem, left off the
 * later ones, and summed up after the list with the count it applies to. */
#define MAX_HINTS 16
typedef struct hints {
    char *text[MAX_HINTS];
    uint64_t count[MAX_HINTS];
    unsigned n;
} hints;

static void print_problem(hints *h, const char *why) {
    const char *sep = NULL;
    for (const char *p = strstr(why, "; "); p; p = strstr(p + 2, "; ")) sep = p;
    if (!sep || !sep[2]) {
        fprintf(stderr, "%s\n", why);
        return;
    }
    const char *hint = sep + 2;
    for (unsigned k = 0; k < h->n; k++)
        if (strcmp(h->text[k], hint) == 0) {
            h->count[k]++;
            fprintf(stderr, "%.*s\n", (int)(sep - why), why);
            return;
        }
    fprintf(stderr, "%s\n", why);
    if (h->n < MAX_HINTS && (h->text[h->n] = strdup(hint))) h->count[h->n++] = 1;
}

static void print_hints(hints *h, uint64_t problems) {
    for (unsigned k = 0; k < h->n; k++) {
        if (h->count[k] > 1)
            fprintf(stderr, "check: %llu of the %llu problems above: %s\n",
                    (unsigned long long)h->count[k], (unsigned long long)problems, h->text[k]);
        free(h->text[k]);
    }
    h->n = 0;
}

int check_run(const char *rawdir, const pack_opts *o) {
    const unsigned threads = o->threads;
    const int quiet = o->quiet;
    raw_set rs;
    vocab v;
    int ec = open_raw(rawdir, o->vocab_path, o->sos, o->eos, &rs, &v);
    if (ec) return ec;
    conv_opts co = {CXS_DTYPE_F32, CXS_NORM_NONE, rs.has_transcripts ? &v : NULL, o->transcripts,
                    o->fill_nonfinite};
    /* The width is the most common one, so the headers come first (a few
     * hundred bytes a file). */
    uint64_t *hT = calloc(rs.n + 1, sizeof *hT);
    uint32_t *hD = calloc(rs.n + 1, sizeof *hD);
    char census[512];
    const char *odd;
    if (!hT || !hD) {
        warnx_("out of memory");
        free(hT);
        free(hD);
        vocab_free(&v);
        raw_free(&rs);
        return EXIT_SYSTEM;
    }
    probe_all(&rs, threads, hT, hD);
    uint32_t D = width_majority(&rs, hD, census, sizeof census, &odd);
    free(hT);
    free(hD);
    if (census[0])
        warnx_("%s/mfcc: widths: %s%s%s; checking against %u, the most common", rawdir, census,
               odd ? ": " : "", odd ? odd : "", D);
    pipeline p;
    if (pipeline_start(&p, &rs, &co, threads, 0, rs.n)) {
        warnx_("cannot start threads");
        pipeline_stop(&p);
        vocab_free(&v);
        raw_free(&rs);
        return EXIT_SYSTEM;
    }
    progress bar;
    progress_init(&bar, "check", quiet);
    uint64_t problems = 0, good = 0, frames = 0;
    hints h = {{0}, {0}, 0};
    for (size_t i = 0; i < rs.n; i++) {
        slot *s = pipeline_get(&p, i);
        width_check(s, &rs, i, &D, census);
        if (s->status) {
            progress_done(&bar);
            print_problem(&h, s->why);
            problems++;
            if (s->status == -2) ec = EXIT_SYSTEM;
        } else {
            good++;
            frames += s->u.T;
        }
        pipeline_release(&p, i);
        progress_update(&bar, i + 1, rs.n, "utterances");
    }
    progress_done(&bar);
    pipeline_stop(&p);
    print_hints(&h, problems);
    printf("%s: %llu utterances checked, %llu valid (%llu frames, dim %u, %s), %llu problem%s\n",
           rawdir, (unsigned long long)rs.n, (unsigned long long)good,
           (unsigned long long)frames, D, rs.has_transcripts ? "with transcripts" : "features only",
           (unsigned long long)problems, problems == 1 ? "" : "s");
    vocab_free(&v);
    raw_free(&rs);
    if (ec) return ec;
    return problems ? EXIT_DATA : 0;
}
