/* import_ring.h - what the importers share: the read-ahead ring
 * (npy_import.c, kaldi_import.c) and the commit at the end (all three):
 * worker threads load the items of a listing (read, decode, check) into a
 * bounded ring of slots while the caller consumes them strictly in
 * listing order and hands them to the writer.  What the caller does, and
 * so every byte written, never depends on the thread count; memory is the
 * slots', a few utterances per thread.  Internal to the library. */
#ifndef CXS_IMPORT_RING_H
#define CXS_IMPORT_RING_H

#include <stddef.h>

#include "ctxshard_import.h"

/* Load item into slot (0 .. nslots-1), which the caller owns and sizes;
 * the result stays in the slot until released.  Runs on a worker thread
 * (or in import_ring_get() with no threads): it must touch nothing but the
 * slot and what is read-only or locked while the ring runs. */
typedef void (*import_load_fn)(void *user, size_t item, size_t slot);

typedef struct import_ring import_ring;

/* Slots for `threads` workers: what import_ring_start() will use. */
size_t import_ring_slots(unsigned threads);

/* Start loading items begin .. end-1.  threads 0 or 1: no thread, each
 * item is loaded by import_ring_get() when asked for.  Returns 0 or
 * -errno (nothing to stop then). */
int import_ring_start(import_ring **r, unsigned threads, size_t begin, size_t end,
                      import_load_fn load, void *user);

/* Wait until item i (the next one: items are consumed in order) is
 * loaded; its slot. */
size_t import_ring_get(import_ring *r, size_t i);

/* Done with item i: its slot takes a later item. */
void import_ring_release(import_ring *r, size_t i);

/* The end of every importer's step: item i of begin .. end-1 is done, its
 * slot released (r may be NULL: an importer without a ring) and progress
 * (may be NULL) told i + 1 - begin of end - begin.  A non-zero answer
 * stops the import: -ECANCELED, "WHERE: VERB stopped" in d.  Else 0. */
int import_step(import_ring *r, size_t i, size_t begin, size_t end, cxs_progress_fn progress,
                void *user, const char *where, const char *verb, cxs_diag *d);

/* Stop the workers (the items in flight finish first) and free the ring.
 * NULL is a no-op. */
void import_ring_stop(import_ring *r);

/* The end of every importer: an import that kept no utterance is refused
 * ("SRC: no valid utterance to VERB (N skipped)"; a part may be empty),
 * else *w is committed into res->w and res copied to info (may be NULL).
 * *w is NULL afterwards when it was committed; the caller aborts it
 * otherwise.  0 or the error, in d. */
int import_commit(cxs_writer **w, int may_be_empty, const char *src, const char *verb,
                  cxs_import_info *res, cxs_import_info *info, cxs_diag *d);

#endif
