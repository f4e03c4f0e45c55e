/* import.h - `ctxshard import FORMAT IN OUT`: feature stores of other
 * tools into a packed dataset (import_kaldi.c, import_hdf5.c; what they
 * share in import.c). */
#ifndef CXS_TOOL_IMPORT_H
#define CXS_TOOL_IMPORT_H

#include "ctxshard_import.h"
#include "pack.h"
#include "util.h"

typedef struct import_opts {
    const char *text; /* --text: a Kaldi text file (label sequences) */
    const char *ali;  /* --ali: per-frame alignments (frame labels) */
    int no_sort;      /* --no-sort: refuse an unsorted listing */
    int vocab_from_data; /* --vocab-from-data: the labels' own symbols numbered */
} import_opts;

/* `ctxshard import kaldi IN OUT`; an exit code, messages printed. */
int import_kaldi_run(const char *in, const char *out, const pack_opts *o, const import_opts *io);
/* `ctxshard import hdf5 IN OUT`. */
int import_hdf5_run(const char *in, const char *out, const pack_opts *o);

/* The shared parts (import.c). */
typedef struct import_state {
    progress bar;
    int quiet;
} import_state;
void import_writer_opts(const pack_opts *o, cxs_writer_opts *wo);
void import_note(void *user, const char *msg);          /* user: import_state */
int import_progress(void *user, uint64_t done, uint64_t total);
/* Print the failure; the exit code. */
int import_failed(int rc, const char *out, const cxs_diag *d);
void import_summary(const cxs_import_info *info, const char *out, const pack_opts *o, double dt);
/* On stderr, --quiet or not: how many utterances of a coded import were
 * quantized a second time (any Kaldi object but CM into q8, CM2 into q16). */
void import_reencoded(const cxs_import_info *info, const char *out, const pack_opts *o);

#endif
