/* gpu_position.c - position, set_epoch and seek of the GPU frame loader
 * (ctxshard_gpu.h) on position.c's rules, as every CPU loader's.  Stream
 * and resident mode serve the sampler's order batch for batch as the CPU
 * loader does, so their positions are of its kind and either loader
 * continues the other's; pool mode's count the pool order, a kind of
 * their own.  (The utterance loader's are at the end of gpu_utt.c, beside
 * its struct.) */
#include "gpu_internal.h"
#include "position.h"

/* This rank's samples of the epoch in the order the mode serves (the
 * pool's counted at each start). */
static uint64_t samples(const cxs_gpu_loader *l) {
    return l->mode == CXS_GPU_POOL ? l->p.len : cxs_sampler_length(l->sampler);
}

/* The consumer's batches left from the one after the last handed out. */
static void place(const void *v, cxs_place *w) {
    const cxs_gpu_loader *l = v;
    const uint64_t B = l->o.batch_size, len = samples(l);
    const uint64_t left = len > l->next ? len - l->next : 0;
    *w = (cxs_place){l->epoch, l->next, B, 0, l->o.drop_last ? left / B : (left + B - 1) / B};
}

/* A saved start past the epoch is refused in every mode (reset refuses it
 * in pool mode only: the others would serve an empty epoch). */
static int reset(void *v, uint64_t epoch, uint64_t start) {
    cxs_gpu_loader *l = v;
    if (start > samples(l))
        return gpu_fail(l, CXS_E_INVALID, "seek: start %llu is past this rank's %llu samples",
                        (unsigned long long)start, (unsigned long long)samples(l));
    return cxs_gpu_loader_reset(l, epoch, start);
}

static const cxs_diag *error(const void *l) { return cxs_gpu_loader_error(l); }

static const cxs_position_kind frames = {CXS_POSITION_FRAMES, "GPU loader", place, reset, error};
static const cxs_position_kind pool = {CXS_POSITION_GPU_POOL, "GPU loader (pool mode)", place,
                                       reset, error};

static const cxs_position_kind *kind_of(const cxs_gpu_loader *l) {
    return l && l->mode == CXS_GPU_POOL ? &pool : &frames;
}

int cxs_gpu_loader_position(const cxs_gpu_loader *l, cxs_position *out) {
    return cxs_position_of(kind_of(l), l, out);
}

int cxs_gpu_loader_set_epoch(cxs_gpu_loader *l, uint64_t epoch) {
    return cxs_position_set_epoch(kind_of(l), l, epoch);
}

int cxs_gpu_loader_seek(cxs_gpu_loader *l, const cxs_position *p, cxs_diag *diag) {
    return cxs_position_seek(kind_of(l), l, p, diag);
}
