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

/* Frames and width of every listed utterance from its features file's
 * header alone (raw_probe), read on up to `threads` threads (on a network
 * filesystem this is latency-bound).  T and D hold rs->n entries each. */
void probe_all(const raw_set *rs, unsigned threads, uint64_t *T, uint32_t *D);

/* The feature width of the dataset: the most common among the readable
 * headers (the smaller on a tie), never the first in sort order; 0 when no
 * header can be read.  When the files differ, census gets "119 files of 28,
 * 1 of 40" (else "") and *odd the path of the one file of the second most
 * common width when there is one (else NULL). */
uint32_t width_majority(const raw_set *rs, const uint32_t *D, char *census, size_t cn,
                        const char **odd);

/* An utterance whose width is not the dataset's (*D, from width_majority;
 * when that is 0 the first valid utterance sets it) becomes a problem of
 * its own, named with the census. */
void width_check(slot *s, const raw_set *rs, size_t i, uint32_t *D, const char *census);

/* List RAW and load the vocabulary its transcripts need (none without
 * transcripts), with the start and end symbols sos and eos (NULL: [SOS],
 * [EOS]).  Returns 0 or an exit code, having printed why. */
int open_raw(const char *rawdir, const char *vocab_path, const char *sos, const char *eos,
             raw_set *rs, vocab *v);

#endif
