/* pipeline.h - the read/convert pipeline that pack and check share:
 * worker threads read, validate and convert utterances of a raw dataset
 * into a bounded ring of slots (memory: a few utterances per thread); the
 * caller consumes them strictly in id order, so what it does never depends
 * on the thread count. */
#ifndef CXS_TOOL_PIPELINE_H
#define CXS_TOOL_PIPELINE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "raw.h"

typedef struct slot {
    int ready;
    int status; /* 0 ok, -1 bad input, -2 system error */
    char why[WHY_SIZE];
    utt u;
} slot;

typedef struct pipeline {
    const raw_set *rs;
    conv_opts co;
    slot *slots;
    size_t nslots, next, consumed, end;
    int stop;
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_ready;
    pthread_t *threads;
    unsigned nthreads;
} pipeline;

/* Read items begin .. end-1 of rs with `threads` workers.  0 or -errno;
 * pipeline_stop() in either case. */
int pipeline_start(pipeline *p, const raw_set *rs, const conv_opts *co, unsigned threads,
                   size_t begin, size_t end);
/* Wait for utterance i (consumed in order). */
slot *pipeline_get(pipeline *p, size_t i);
/* Done with utterance i: its slot takes a later one. */
void pipeline_release(pipeline *p, size_t i);
void pipeline_stop(pipeline *p);

/* The feature width is set by the first valid utterance in id order; a
 * later one that differs becomes a problem of its own.  Returns 1 when this
 * utterance set the width. */
int width_check(slot *s, const raw_set *rs, size_t i, uint32_t *D, const char **first);

/* List RAW and load the vocabulary its transcripts need (none without
 * transcripts).  Returns 0 or an exit code, having printed why. */
int open_raw(const char *rawdir, const char *vocab_path, raw_set *rs, vocab *v);

#endif
