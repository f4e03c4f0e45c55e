/* check.c - `ctxshard check RAW`: every validation of the packer, by the
 * same library call (cxs_import_npy without an output), without writing
 * anything. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxshard.h"
#include "ctxshard_import.h"
#include "import.h"
#include "pack.h"
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

typedef struct check_state {
    import_state st;
    hints h;
    int system; /* a file could not be read for the machine's reasons */
} check_state;

static void check_event(void *user, int kind, const char *id, uint64_t count,
                        const cxs_diag *d) {
    check_state *cs = user;
    (void)id;
    (void)count;
    if (kind != CXS_NPY_PROBLEM) return;
    progress_done(&cs->st.bar);
    print_problem(&cs->h, d->message);
    if (d->code != CXS_E_INPUT) cs->system = 1;
}

int check_run(const char *rawdir, const pack_opts *o) {
    check_state cs = {{{0}, o->quiet}, {{0}, {0}, 0}, 0};
    cxs_writer_opts wo;
    cxs_writer_opts_init(&wo);
    wo.threads = o->threads;
    cxs_npy_opts no;
    pack_npy_opts(o, &no, &cs.st);
    no.event = check_event;
    no.user = &cs;
    cxs_import_info info;
    cxs_diag d = {0};
    install_signal_flag();
    progress_init(&cs.st.bar, "check", o->quiet);
    int rc = cxs_import_npy(rawdir, NULL, &wo, &no, import_progress, &cs.st, &info, &d);
    progress_done(&cs.st.bar);
    if (rc == -ECANCELED) {
        warnx_("%s: interrupted", rawdir);
        return EXIT_SYSTEM;
    }
    if (rc) {
        warnx_("%s", d.message);
        return rc == CXS_E_INVALID || (o->vocab_path && !strcmp(d.file, o->vocab_path))
                   ? EXIT_USAGE
               : rc == CXS_E_INPUT || raw_missing(rawdir, rc, &d) ? EXIT_DATA
                                                                  : EXIT_SYSTEM;
    }
    const uint64_t problems = info.w.num_skipped;
    print_hints(&cs.h, problems);
    printf("%s: %llu utterances checked, %llu valid (%llu frames, dim %u, %s), %llu problem%s\n",
           rawdir, (unsigned long long)info.listed, (unsigned long long)info.w.num_utterances,
           (unsigned long long)info.w.num_frames, info.w.dim,
           info.has_labels ? "with transcripts" : "features only", (unsigned long long)problems,
           problems == 1 ? "" : "s");
    if (cs.system) return EXIT_SYSTEM;
    return problems ? EXIT_DATA : 0;
}
