/* import.h - `ctxshard import FORMAT IN OUT`: feature stores of other
 * tools into a packed dataset (import_kaldi.c). */
#ifndef CXS_TOOL_IMPORT_H
#define CXS_TOOL_IMPORT_H

#include "pack.h"

typedef struct import_opts {
    const char *text; /* --text: a Kaldi text file (label sequences) */
    const char *ali;  /* --ali: per-frame alignments (frame labels) */
    int no_sort;      /* --no-sort: refuse an unsorted listing */
} import_opts;

/* `ctxshard import kaldi IN OUT`; an exit code, messages printed. */
int import_kaldi_run(const char *in, const char *out, const pack_opts *o, const import_opts *io);

#endif
