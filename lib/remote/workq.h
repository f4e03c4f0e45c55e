/* workq.h - the files of a fetch or a push, done by a few threads while
 * the calling thread reports progress and passes a stop on (internal). */
#ifndef CXS_WORKQ_H
#define CXS_WORKQ_H

#include <stdatomic.h>
#include <stdint.h>

#include "ctxshard.h"

typedef struct cxs_workq {
    /* the work: one(ctx, i, d) for i = 0 .. n-1, 0 or an error in d */
    int (*one)(void *ctx, uint32_t i, cxs_diag *d);
    void *ctx;
    uint32_t n;
    /* progress: base + *count of total bytes; a non-zero answer sets *cancel */
    cxs_progress_fn progress;
    void *user;
    _Atomic uint64_t *count;
    _Atomic int *cancel;
    uint64_t base, total;
} cxs_workq;

/* Run q on up to `threads` threads (in this one when none can start),
 * this thread calling q->progress every 100 ms until all end (and
 * returning as they end, not at the next 100 ms).  The first
 * failure stops the others' next items and is returned, its message in d;
 * a stop asked by progress is -ECANCELED. */
int cxs_workq_run(const cxs_workq *q, unsigned threads, const char *what, cxs_diag *d);

#endif
