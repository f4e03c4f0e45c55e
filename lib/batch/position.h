/* position.h - what position.c asks each loader of its consumer's place
 * (internal).  The loaders keep (epoch, start) and their ring counts the
 * batches handed out; position.c alone turns that into a cxs_position and
 * holds the rules of set_epoch and seek, so that every kind of loader
 * resumes the same way. */
#ifndef CXS_POSITION_H
#define CXS_POSITION_H

#include <stdint.h>

#include "ctxshard.h"

/* The consumer's place in a loader: its start (epoch, start), the start
 * units one batch covers, the batches handed out since the start and the
 * batches there were from it. */
typedef struct cxs_place {
    uint64_t epoch, start, stride, taken, nbatches;
} cxs_place;

/* Each from the consumer's thread (the fields it reads change only in
 * the consumer's calls).  At the end of loader.c, uttbatch.c, mixloader.c. */
void cxs_loader_place(const cxs_loader *l, cxs_place *w);
void cxs_utt_loader_place(const cxs_utt_loader *l, cxs_place *w);
void cxs_mix_loader_place(const cxs_mix_loader *l, cxs_place *w);
void cxs_mix_utt_loader_place(const cxs_mix_utt_loader *l, cxs_place *w);

#endif
