/* plancache.h - the epoch plans an order keeps: the last CXS_PLAN_CACHE
 * epochs asked, shared by the threads that serve it, each plan held by
 * reference (internal).  The block schedule (blocks.c), the utterance
 * sampler (buckets.c) and the utterance mixture (mixutt.c) keep theirs
 * here.  Every call is made under the owner's lock; a plan's refs count
 * its users, and once the plan is evicted, -refs of them are left and the
 * last one frees it. */
#ifndef CXS_PLANCACHE_H
#define CXS_PLANCACHE_H

#include <stdint.h>

/* Two: the epoch being served and the next, which loaders read ahead. */
#define CXS_PLAN_CACHE 2

typedef void (*cxs_plan_free_fn)(void *plan);

typedef struct cxs_plan_cache {
    void *plan[CXS_PLAN_CACHE]; /* NULL: an empty slot */
    uint64_t epoch[CXS_PLAN_CACHE];
    int *refs[CXS_PLAN_CACHE];  /* the plan's own count */
    uint32_t next_evict;
} cxs_plan_cache;

/* The cached plan of epoch with a reference taken, or NULL. */
static inline void *cxs_plan_find(cxs_plan_cache *c, uint64_t epoch) {
    for (int i = 0; i < CXS_PLAN_CACHE; i++)
        if (c->plan[i] && c->epoch[i] == epoch) {
            (*c->refs[i])++;
            return c->plan[i];
        }
    return NULL;
}

/* Keep plan, of epoch and counted in *refs, with one reference for the
 * caller, in place of the oldest (freed now when unused, else by its last
 * user), and return it.  When another thread kept a plan of that epoch
 * meanwhile (plans built without the lock), that one wins: it is returned,
 * referenced, and plan is not kept (the caller frees it, after the lock). */
static inline void *cxs_plan_keep(cxs_plan_cache *c, void *plan, uint64_t epoch, int *refs,
                                  cxs_plan_free_fn plan_free) {
    void *kept = cxs_plan_find(c, epoch);
    if (kept) return kept;
    const uint32_t e = c->next_evict;
    if (c->plan[e] && *c->refs[e] == 0) plan_free(c->plan[e]);
    else if (c->plan[e]) *c->refs[e] = -*c->refs[e];
    c->plan[e] = plan, c->epoch[e] = epoch, c->refs[e] = refs;
    *refs = 1;
    c->next_evict = (e + 1) % CXS_PLAN_CACHE;
    return plan;
}

/* Give back a reference to plan (counted in *refs). */
static inline void cxs_plan_put(void *plan, int *refs, cxs_plan_free_fn plan_free) {
    if (*refs > 0) (*refs)--;
    else if (++*refs == 0) plan_free(plan);
}

/* Free the cached plans: the owner is freed, with no users left. */
static inline void cxs_plan_cache_clear(cxs_plan_cache *c, cxs_plan_free_fn plan_free) {
    for (int i = 0; i < CXS_PLAN_CACHE; i++)
        if (c->plan[i]) plan_free(c->plan[i]);
}

#endif
