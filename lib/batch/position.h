/* position.h - what position.c asks each loader of its consumer's place
 * (internal).  The loaders keep (epoch, start) and their ring counts the
 * batches handed out; position.c alone turns that into a cxs_position and
 * holds the rules of set_epoch and seek, so that every kind of loader
 * resumes the same way.  The GPU loaders (gpu/gpu_position.c) describe
 * themselves with a cxs_position_kind and call the same three rules. */
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

/* What differs between the kinds of loader: the kind a position records
 * (CXS_POSITION_*), the name messages use, how to ask the place, how to
 * restart at (epoch, start) and how the loader's last failure reads. */
typedef struct cxs_position_kind {
    uint32_t code;
    const char *name;
    void (*place)(const void *l, cxs_place *w);
    int (*reset)(void *l, uint64_t epoch, uint64_t start);
    const cxs_diag *(*error)(const void *l);
} cxs_position_kind;

/* The rules every cxs_*_position, _set_epoch and _seek call applies to a
 * loader l of kind k (their return codes and messages). */
int cxs_position_of(const cxs_position_kind *k, const void *l, cxs_position *out);
int cxs_position_set_epoch(const cxs_position_kind *k, void *l, uint64_t epoch);
int cxs_position_seek(const cxs_position_kind *k, void *l, const cxs_position *p, cxs_diag *d);

/* A kind's table and its three public calls, cxs_<prefix>_position,
 * _set_epoch and _seek, from the loader's own cxs_<prefix>_place, _reset
 * and _error (typed as the table wants them). */
#define CXS_POSITION_KIND(prefix, T, code, name)                                                          \
    static void prefix##_place_(const void *l, cxs_place *w) { cxs_##prefix##_place(l, w); }    \
    static int prefix##_reset_(void *l, uint64_t e, uint64_t s) {                                \
        return cxs_##prefix##_reset(l, e, s);                                                     \
    }                                                                                             \
    static const cxs_diag *prefix##_error_(const void *l) { return cxs_##prefix##_error(l); }     \
    static const cxs_position_kind prefix##_kind = {code, name, prefix##_place_,                  \
                                                    prefix##_reset_, prefix##_error_};            \
    int cxs_##prefix##_position(const T *l, cxs_position *out) {                                 \
        return cxs_position_of(&prefix##_kind, l, out);                                           \
    }                                                                                             \
    int cxs_##prefix##_set_epoch(T *l, uint64_t epoch) {                                          \
        return cxs_position_set_epoch(&prefix##_kind, l, epoch);                                  \
    }                                                                                             \
    int cxs_##prefix##_seek(T *l, const cxs_position *p, cxs_diag *diag) {                        \
        return cxs_position_seek(&prefix##_kind, l, p, diag);                                     \
    }

#endif
