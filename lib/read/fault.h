/* fault.h - reading a shard's mapping safely, and saying where a served
 * read failed (never installed).
 *
 * A file that shrinks under its mapping (truncate(2), a copy over it) makes
 * every later access to the lost pages raise SIGBUS, which kills the
 * process: checking the size first (fstat) cannot close the race, the file
 * may shrink between the check and the read.  So the code that reads the
 * mapping while serving (the gather of the loaders, the chunk decoder, the
 * utterance padder) runs inside a recovery region: cxs_fault_run() calls
 * fn(arg) with a sigjmp_buf of this thread's; the library's SIGBUS handler
 * (installed once, at the first open) jumps back to it when the faulting
 * address lies in one of that dataset's shard mappings, and fn's work is
 * abandoned.  Any other SIGBUS (another thread's, another mapping's, a
 * signal sent with kill) goes to the handler that was there before ours,
 * or to the default action.
 *
 * fn must hold no lock and own no resource it would need to release while
 * it reads the mapping: a fault leaves it where it is. */
#ifndef CXS_FAULT_H
#define CXS_FAULT_H

#include <stddef.h>
#include <stdint.h>

#include "ctxshard.h"

struct zreader;

/* Where a fault happened: the shard and the byte offset within its file. */
typedef struct cxs_fault {
    uint32_t shard;
    uint64_t offset;
} cxs_fault;

/* Install the SIGBUS handler (once per process; later calls do nothing). */
void cxs_fault_install(void);

/* fn(arg)'s return value, or CXS_E_TRUNCATED when it touched a page of one
 * of ds's shard mappings that the file no longer holds (*where says which
 * shard and offset).  Regions nest. */
int cxs_fault_run(const cxs_dataset *ds, int (*fn)(void *), void *arg, cxs_fault *where);

/* Whether this thread runs inside a recovery region of ds (a fault there
 * is that region's to report). */
int cxs_fault_inside(const cxs_dataset *ds);

/* What went wrong serving data, for the message that names it. */
typedef struct cxs_where {
    uint32_t shard;
    uint64_t utt;     /* dataset numbering, or UINT64_MAX */
    uint64_t frame;   /* global frame, or UINT64_MAX */
    uint64_t chunk;   /* shard-local chunk of a compressed shard, or UINT64_MAX */
    uint64_t offset;  /* CXS_E_TRUNCATED: the file offset that could not be read */
    uint32_t label;   /* a label outside the vocabulary (CXS_E_CORRUPT with frame) */
    int bad_label;
} cxs_where;

#define CXS_WHERE_NONE                                                                 \
    (cxs_where) { 0, UINT64_MAX, UINT64_MAX, UINT64_MAX, 0, 0, 0 }

/* "utterance ID (number U)" into buf, the id read in a recovery region;
 * its offsets are bounds-checked, not its block ("utterance number U (its
 * id cannot be read)" when it faults or its offsets are out of range). */
void cxs_utt_name(const cxs_dataset *ds, uint64_t u, char *buf, size_t cap);

/* A diagnostic "SHARD: utterance ID (number U)[, chunk C]: reason" for a
 * serve-time failure rc; returns rc. */
int cxs_where_diag(const cxs_dataset *ds, int rc, const cxs_where *w, cxs_diag *d);

#endif
